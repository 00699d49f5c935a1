package browser_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/countersign/countersign/notifier/push/pushtest"
)

// How the inbox looks is tested in the browser: every page, at a desktop
// and a phone width, is checked for horizontal overflow, table cells
// narrower than their longest word, interactive controls that overlap,
// timestamps in another format than the inbox's one, and serious or
// critical accessibility violations found by axe-core (pinned in
// package.json, installed from package-lock.json by install-axe.sh).
// With $COUNTERSIGN_SCREENSHOTS set (make screenshots), the same visits
// write the PNGs under docs/.

// viewport is a screen the pages are checked on. A phone is a touch
// screen: it has no hover, and no keyboard to speak of.
type viewport struct {
	name          string
	width, height int64
	phone         bool
}

var (
	desktop = viewport{"desktop", 1280, 900, false}
	phone   = viewport{"phone", 390, 844, true}
)

func (v viewport) apply() chromedp.Action[chromedp.Void] {
	if v.phone {
		return chromedp.EmulateViewport(v.width, v.height, chromedp.EmulateMobile, chromedp.EmulateTouch)
	}
	return chromedp.EmulateViewport(v.width, v.height)
}

var (
	axeOnce   sync.Once
	axeSource string
	axeErr    error
)

// axe is axe-core's axe.min.js, installed by install-axe.sh when missing
// or not the version package.json pins.
func axe(t *testing.T) string {
	t.Helper()
	axeOnce.Do(func() {
		var pkg struct {
			DevDependencies map[string]string `json:"devDependencies"`
		}
		var installed struct {
			Version string `json:"version"`
		}
		data, err := os.ReadFile("package.json")
		if err == nil {
			err = json.Unmarshal(data, &pkg)
		}
		if err != nil {
			axeErr = fmt.Errorf("test/browser/package.json: %v", err)
			return
		}
		if data, err := os.ReadFile("node_modules/axe-core/package.json"); err != nil || json.Unmarshal(data, &installed) != nil ||
			installed.Version != pkg.DevDependencies["axe-core"] {
			cmd := exec.Command("sh", "install-axe.sh")
			if out, err := cmd.CombinedOutput(); err != nil {
				axeErr = fmt.Errorf("sh test/browser/install-axe.sh: %v\n%s", err, out)
				return
			}
		}
		src, err := os.ReadFile("node_modules/axe-core/axe.min.js")
		if err != nil {
			axeErr = fmt.Errorf("axe-core: %v (sh test/browser/install-axe.sh installs it)", err)
			return
		}
		axeSource = string(src)
	})
	if axeErr != nil {
		t.Fatal(axeErr)
	}
	return axeSource
}

// geometry lists what is wrong with the layout of the page as shown now.
const geometry = `(function () {
  var out = [];
  function shown(el) {
    var r = el.getBoundingClientRect(), cs = getComputedStyle(el);
    return r.width > 0 && r.height > 0 && cs.visibility !== "hidden" && r.right > 0 && r.bottom > 0;
  }
  function text(el) { return JSON.stringify((el.innerText || el.value || el.getAttribute("aria-label") || el.tagName).trim().slice(0, 40)); }
  var de = document.documentElement;
  if (de.scrollWidth > de.clientWidth + 1) out.push("the document is " + de.scrollWidth + " px wide in a " + de.clientWidth + " px window");
  Array.prototype.forEach.call(document.querySelectorAll("body *"), function (el) {
    var cs = getComputedStyle(el);
    if ((cs.overflowX === "auto" || cs.overflowX === "scroll") && el.scrollWidth > el.clientWidth + 1 && el.tagName !== "TEXTAREA" && shown(el)) {
      out.push(el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") + "." + el.className + " scrolls sideways (" + el.scrollWidth + " px in " + el.clientWidth + ")");
    }
  });
  var ctx = document.createElement("canvas").getContext("2d");
  Array.prototype.forEach.call(document.querySelectorAll("th, td"), function (c) {
    if (!shown(c)) return;
    var cs = getComputedStyle(c);
    ctx.font = cs.fontStyle + " " + cs.fontWeight + " " + cs.fontSize + " " + cs.fontFamily;
    var longest = "", w = 0;
    (c.innerText || "").split(/\s+/).forEach(function (word) {
      var m = ctx.measureText(word).width;
      if (m > w) { w = m; longest = word; }
    });
    var inner = c.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
    if (w > inner + 1) out.push("cell " + text(c) + " is " + Math.round(inner) + " px wide, narrower than its word " + JSON.stringify(longest) + " (" + Math.round(w) + " px)");
  });
  Array.prototype.forEach.call(document.querySelectorAll("table"), function (tb) {
    var card = tb.closest(".card");
    if (!card || !shown(tb)) return;
    var a = tb.getBoundingClientRect(), b = card.getBoundingClientRect();
    if (a.right > b.right + 1 || a.left < b.left - 1) out.push("table#" + tb.id + " (" + Math.round(a.width) + " px) overflows its card (" + Math.round(b.width) + " px)");
  });
  var controls = Array.prototype.filter.call(document.querySelectorAll("a[href], button, input:not([type=hidden]), select, textarea, summary"), shown);
  // A sticky bar keeps its place in the flow, so what scrolls under it
  // can be scrolled out again (stickyBarRules checks the bar at the end of
  // the page): its controls are compared among themselves only.
  function bar(el) {
    for (var p = el; p; p = p.parentElement) if (getComputedStyle(p).position === "sticky") return p;
    return null;
  }
  for (var i = 0; i < controls.length; i++) {
    for (var j = i + 1; j < controls.length; j++) {
      var a = controls[i], b = controls[j];
      if (a.contains(b) || b.contains(a) || bar(a) !== bar(b)) continue;
      var hit = false;
      Array.prototype.forEach.call(a.getClientRects(), function (p) {
        Array.prototype.forEach.call(b.getClientRects(), function (q) {
          if (Math.min(p.right, q.right) - Math.max(p.left, q.left) > 1 && Math.min(p.bottom, q.bottom) - Math.max(p.top, q.top) > 1) hit = true;
        });
      });
      if (hit) out.push("controls overlap: " + a.tagName.toLowerCase() + " " + text(a) + " and " + b.tagName.toLowerCase() + " " + text(b));
    }
  }
  Array.prototype.forEach.call(document.querySelectorAll("time"), function (el) {
    if (!/^\d{4}-\d\d-\d\d \d\d:\d\d UTC$/.test(el.textContent.trim()) || !el.getAttribute("datetime")) {
      out.push("timestamp " + JSON.stringify(el.textContent) + " is not YYYY-MM-DD HH:MM UTC with a datetime");
    }
  });
  var walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (var n = walker.nextNode(); n; n = walker.nextNode()) {
    if (n.parentElement.closest("pre, code, textarea, script")) continue;
    var m = /\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d)?Z|\d{4}-\d\d-\d\dT\d\d:\d\d/.exec(n.textContent);
    if (m) out.push("a raw timestamp in the text: " + JSON.stringify(m[0]));
  }
  return out;
})()`

// axeViolation is one rule axe-core found broken, with where.
type axeViolation struct {
	ID     string   `json:"id"`
	Impact string   `json:"impact"`
	Help   string   `json:"help"`
	Nodes  []string `json:"nodes"`
}

// checkLooks fails t with everything wrong with the page shown in ctx:
// geometry, then axe-core's serious and critical violations.
func checkLooks(t *testing.T, ctx context.Context, page string) {
	t.Helper()
	for _, p := range eval[[]string](t, ctx, geometry) {
		t.Errorf("%s: %s", page, p)
	}
	src := axe(t)
	if !eval[bool](t, ctx, `typeof window.axe === "object"`) {
		// Evaluated in the page's context: the CSP that refuses inline
		// scripts does not apply.
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](src+"\n;true")); err != nil {
			t.Fatalf("%s: inject axe-core: %v", page, err)
		}
	}
	violations, err := chromedp.Run(ctx, chromedp.Evaluate[[]axeViolation](`axe.run(document, {resultTypes: ["violations"]}).then(function (r) {
  return r.violations.filter(function (v) { return v.impact === "serious" || v.impact === "critical"; }).map(function (v) {
    return {id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.map(function (n) { return n.target.join(" ") + ": " + (n.failureSummary || ""); })};
  });
})`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("%s: axe-core: %v", page, err)
	}
	for _, v := range violations {
		t.Errorf("%s: axe %s (%s): %s\n\t%s", page, v.ID, v.Impact, v.Help, strings.Join(v.Nodes, "\n\t"))
	}
}

// expect fails t for each JavaScript condition that does not hold on the
// page shown in ctx.
func expect(t *testing.T, ctx context.Context, page string, conds map[string]string) {
	t.Helper()
	for what, cond := range conds {
		if !eval[bool](t, ctx, cond) {
			t.Errorf("%s: %s (%s is false)", page, what, cond)
		}
	}
}

// screenshot writes the whole page (full, taller than the window) or the
// window into dir/file.
func screenshot(t *testing.T, ctx context.Context, v viewport, dir, file string, full bool) {
	t.Helper()
	if dir == "" || file == "" {
		return
	}
	var img []byte
	do(t, ctx, func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		if full {
			h, err := chromedp.Evaluate[int](`document.documentElement.scrollHeight`)(ctx, tg)
			if err != nil {
				return chromedp.Void{}, err
			}
			if _, err := chromedp.EmulateViewport(v.width, max(int64(h), v.height))(ctx, tg); err != nil {
				return chromedp.Void{}, err
			}
		}
		var err error
		img, err = chromedp.CaptureScreenshot()(ctx, tg)
		if err != nil {
			return chromedp.Void{}, err
		}
		_, err = v.apply()(ctx, tg)
		return chromedp.Void{}, err
	})
	cfg, err := png.DecodeConfig(bytes.NewReader(img))
	if err != nil || int64(cfg.Width) != v.width {
		t.Fatalf("%s: not a %d px wide PNG (%v, %d)", file, v.width, err, cfg.Width)
	}
	if err := os.WriteFile(filepath.Join(dir, file), img, 0o644); err != nil {
		t.Fatal(err)
	}
}

// shownPage is a page of the inbox as one person sees it, with what must
// hold on it beyond the checks every page gets, and its screenshots.
type shownPage struct {
	name, who, path, ready string
	expect                 map[string]string
	desktopExpect          map[string]string
	phoneExpect            map[string]string
	desktopShot, phoneShot string
	full                   bool
}

// phoneRules hold on every page on a phone.
var phoneRules = map[string]string{
	"the header takes at most two lines": `(function () {
    var tops = {};
    Array.prototype.forEach.call(document.querySelectorAll(".top a:not(.skip), .top button, .top .who"), function (el) {
      var r = el.getBoundingClientRect(); if (r.width > 0) tops[Math.round((r.top + r.bottom) / 20)] = true;
    });
    return Object.keys(tops).length <= 2;
  })()`,
	"keyboard hints are hidden on a touch screen": `matchMedia("(hover: none)").matches && Array.prototype.every.call(document.querySelectorAll("kbd"), function (k) { return k.getClientRects().length === 0; })`,
}

// thumbBarRules hold on a phone on the page of a request the person may
// decide: Approve and Reject sit in a bar at the foot of the screen, big
// enough for a thumb, and at the end of the page the bar covers nothing.
var thumbBarRules = map[string]string{
	"the decision bar sits at the foot of the screen": `(function () {
    var r = document.getElementById("thumb-bar").getBoundingClientRect();
    return Math.abs(r.bottom - innerHeight) < 2 && r.top > 0.8 * innerHeight && r.left >= 0 && r.right <= innerWidth;
  })()`,
	"its buttons are at least 44 px tall and side by side": `(function () {
    var a = document.getElementById("bar-approve").getBoundingClientRect(), b = document.getElementById("bar-reject").getBoundingClientRect();
    return a.height >= 44 && b.height >= 44 && Math.abs(a.top - b.top) < 2 && a.right <= b.left;
  })()`,
	"they submit the approve and reject forms": `document.getElementById("bar-approve").form === document.getElementById("approve-form") && document.getElementById("bar-reject").form === document.getElementById("reject-form")`,
	"at the end of the page the bar covers no control": `(function () {
    window.scrollTo(0, document.documentElement.scrollHeight);
    var bar = document.getElementById("thumb-bar"), r = bar.getBoundingClientRect(), hit = false;
    Array.prototype.forEach.call(document.querySelectorAll("a[href], button, input:not([type=hidden]), select, textarea, summary"), function (el) {
      if (bar.contains(el)) return;
      var q = el.getBoundingClientRect();
      if (q.width > 0 && Math.min(r.bottom, q.bottom) - Math.max(r.top, q.top) > 1 && Math.min(r.right, q.right) - Math.max(r.left, q.left) > 1) hit = true;
    });
    window.scrollTo(0, 0);
    return !hit;
  })()`,
}

// longValues is a call whose arguments are long and unbroken: on a phone
// they wrap, and the page never scrolls sideways.
var longValues = call{ID: "c1", Name: "email.send", Arguments: json.RawMessage(`{"to":"accounts-receivable.department.eu-west@globex-holdings.example.com",` +
	`"subject":"Invoice INV-2026-000184722 (corrected): the amount due is now 12,480.00 EUR",` +
	`"body":"https://billing.example.com/invoices/INV-2026-000184722/download?token=9f8e7d6c5b4a39281706f5e4d3c2b1a0&format=pdf"}`)}

func merge(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// TestBrowserLooks visits every page of the inbox, at desktop and phone
// width, and checks how each looks (checkLooks and each page's own
// rules). With $COUNTERSIGN_SCREENSHOTS it writes the docs' screenshots.
func TestBrowserLooks(t *testing.T) {
	dir := os.Getenv("COUNTERSIGN_SCREENSHOTS")
	axe(t)
	st := startStack(t)
	// The oversight page shows a day of decisions, made on a fake clock.
	ost := startClockStack(t)
	oversightHistory(t, ost)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	var ids []string
	for _, f := range fleet {
		ids = append(ids, st.pending(t, ctx, f.agent, f.run, f.c))
	}
	// A call without a tool schema: a large amount, a customer number
	// sent as a string.
	plain := st.pending(t, ctx, "billing-bot", "run-7f3a", call{ID: "c2", Name: "billing.refund",
		Arguments: json.RawMessage(`{"amount":12500,"customer":"250","reason":"duplicate charge"}`)})
	// A call alice asked for herself: she may not decide it, so her list
	// shows it without a box to pick it.
	own, err := json.Marshal(map[string]any{
		"run":        map[string]any{"id": "run-31aa", "agent": "ops-bot", "requested_by": "alice"},
		"tool_calls": []call{{ID: "c1", Name: "deploy.release", Arguments: json.RawMessage(`{"service":"search","version":"v1.9.2","env":"staging"}`)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	st.apiCall(t, "POST", "/v1/reviews", "agent", string(own), nil)
	// An approval with edited arguments, and one that issued a grant.
	edited := st.pending(t, ctx, "billing-bot", "run-88d1", refund("c1", 480, "Hooli"))
	st.apiCall(t, "POST", "/v1/approvals/"+edited+"/votes", "alice",
		`{"decision":"edit","arguments":{"amount":400,"customer":"Hooli","reason":"duplicate charge, less the fee"},"comment":"less the 80 EUR fee"}`, nil)
	granted := st.pending(t, ctx, "billing-bot", "run-90b2", refund("c1", 60, "Initech"))
	st.apiCall(t, "POST", "/v1/approvals/"+granted+"/votes", "alice",
		`{"decision":"approve","grant":{"scope":"run","ttl":"1h","arguments":"same"}}`, nil)
	rejected := st.pending(t, ctx, "deploy-bot", "run-19c3", call{ID: "c1", Name: "deploy.release",
		Arguments: json.RawMessage(`{"service":"ledger","version":"v0.8.0","env":"production"}`)})
	st.apiCall(t, "POST", "/v1/approvals/"+rejected+"/votes", "bob", `{"decision":"reject","comment":"not during the freeze"}`, nil)

	long := st.pending(t, ctx, "support-mailer", "run-5e90", longValues)
	// alice gets notifications on her phone.
	ps := pushtest.New()
	t.Cleanup(ps.Close)
	st.subscribeDevice(t, "alice", "Pixel 8", ps.Subscribe())

	detailRules := map[string]string{
		"the page's title is its heading":             `document.title === document.getElementById("heading").textContent + " · Countersign"`,
		"a decided request's title says how it ended": `(document.getElementById("outcome") === null) === document.title.startsWith("Approval needed")`,
	}
	pages := []shownPage{
		{name: "sign-in", path: "/login", ready: "token"},
		{name: "sign-in refused", path: "/login?error=1", ready: "token"},
		{name: "inbox", who: "alice", path: "/", ready: "rows", desktopShot: "inbox.png", phoneShot: "inbox-phone.png",
			expect: map[string]string{
				"rows line up whether or not they can be picked": `(function () {
          var left = Array.prototype.map.call(document.querySelectorAll("#rows .row .risk"), function (e) { return Math.round(e.getBoundingClientRect().left); });
          return left.length > 1 && left.every(function (x) { return x === left[0]; }) && document.querySelectorAll("#rows .row:not(:has(.pick))").length > 0;
        })()`,
			},
			phoneExpect: map[string]string{
				"the first request shows in the top 40% of the screen": `document.querySelector("#rows .row").getBoundingClientRect().top < 0.4 * innerHeight`,
			}},
		{name: "history", who: "alice", path: "/history", ready: "rows"},
		{name: "history search", who: "alice", path: "/history?q=nothing-matches-this", ready: "rows"},
		{name: "run", who: "alice", path: "/runs/run-7f3a?agent=billing-bot", ready: "approve-run"},
		{name: "approval pending", who: "alice", path: "/approvals/" + ids[0], ready: "approve", desktopShot: "approval.png", phoneShot: "approval-phone.png", full: true,
			expect: merge(detailRules, map[string]string{
				"a tool with a schema has its edits checked": `document.getElementById("edit-unchecked") === null`,
			}),
			desktopExpect: map[string]string{
				"approve and reject sit side by side": `Math.abs(document.getElementById("approve-form").getBoundingClientRect().top - document.getElementById("reject-form").getBoundingClientRect().top) < 2`,
				"the decision bar is for phones":      `document.getElementById("thumb-bar").getClientRects().length === 0`,
			},
			phoneExpect: thumbBarRules},
		{name: "approval with long values", who: "alice", path: "/approvals/" + long, ready: "approve", phoneShot: "approval-long-phone.png", full: true,
			expect: detailRules, phoneExpect: merge(thumbBarRules, map[string]string{
				"every value is shown whole, wrapped": `Array.prototype.every.call(document.querySelectorAll("dl.args dd"), function (dd) { return dd.scrollWidth <= dd.clientWidth + 1; })`,
			})},
		{name: "approval pending, no tool schema", who: "alice", path: "/approvals/" + plain, ready: "approve", expect: merge(detailRules, map[string]string{
			"a number shows with thousands separators": `Array.from(document.querySelectorAll("dl.args dt")).some(function (dt) { return dt.textContent === "amount" && dt.nextElementSibling.textContent.trim() === "12,500"; })`,
			"a string shows in quotes":                 `Array.from(document.querySelectorAll("dl.args dt")).some(function (dt) { return dt.textContent === "customer" && dt.nextElementSibling.textContent.trim() === '"250"'; })`,
			"the JSON shows the number as sent":        `document.getElementById("arguments-json").textContent.includes('"amount": 12500')`,
			"the editor says an edit is unchecked":     `document.getElementById("edit-unchecked") !== null && document.getElementById("arguments").getAttribute("aria-describedby").includes("edit-unchecked")`,
		})},
		{name: "approval of an email", who: "alice", path: "/approvals/" + ids[2], ready: "approve", expect: detailRules},
		{name: "approval edited", who: "alice", path: "/approvals/" + edited, ready: "outcome", desktopShot: "approval-edited.png", full: true, expect: merge(detailRules, map[string]string{
			"the edited arguments show":                      `document.querySelector("#edited dl.args") !== null && document.getElementById("edited-json").textContent.includes('"amount": 400')`,
			"the diff shows each change":                     `(function () { var r = document.querySelector('#arguments-diff tr[data-key="amount"]'); return r !== null && r.querySelector("del").textContent === "480" && r.querySelector("ins").textContent === "400" && document.querySelector('#arguments-diff tr[data-key="customer"]') === null; })()`,
			"the requested arguments stay, under their name": `document.getElementById("args-h").textContent === "Arguments as requested" && document.getElementById("arguments-json").textContent.includes('"amount": 480')`,
		})},
		{name: "approval rejected", who: "alice", path: "/approvals/" + rejected, ready: "outcome", expect: detailRules},
		{name: "grants", who: "alice", path: "/grants", ready: "revoke-" + granted, desktopShot: "grants.png"},
		{name: "grants, none", who: "alice", path: "/grants?status=revoked", ready: "grants"},
		// With passkeys set up (enrolled, listed, revoked) the page is
		// checked by TestBinaryPasskeyStepUpApprovalRunsTheToolOnce.
		{name: "passkeys, not set up", who: "alice", path: "/passkeys", ready: "passkeys-off"},
		{name: "devices", who: "alice", path: "/devices", ready: "devices", desktopShot: "devices.png", phoneShot: "devices-phone.png",
			expect: map[string]string{
				"the device is listed with its name and service": `(function () { var d = document.querySelector("#devices .device"); return d !== null && d.querySelector(".summary").textContent === "Pixel 8" && d.textContent.includes("127.0.0.1"); })()`,
			}},
		{name: "devices, none", who: "bob", path: "/devices", ready: "no-devices"},
		{name: "oversight", who: "lead", path: "/oversight", ready: "oversight-rules", desktopShot: "oversight.png", phoneShot: "oversight-phone.png", full: true},
		{name: "no such approval", who: "alice", path: "/approvals/no-such-approval", ready: "main"},
		{name: "oversight refused", who: "alice", path: "/oversight", ready: "main"},
		{name: "approval decided, as a viewer", who: "lead", path: "/history", ready: "rows"},
	}

	browser := newBrowser(t, testTimeout)
	people := map[string]context.Context{"": person(t, browser)}
	for _, who := range []string{"alice", "bob"} {
		people[who] = person(t, browser)
		do(t, people[who], st.signIn(who))
	}
	people["lead"] = person(t, browser)
	do(t, people["lead"], ost.signIn("lead"))
	for _, v := range []viewport{desktop, phone} {
		for _, p := range pages {
			name := p.name + " (" + v.name + ")"
			pc := people[p.who]
			path := p.path
			if p.name == "sign-in refused" {
				// The refused sign-in is the answer to a POST.
				do(t, pc, v.apply(), chromedp.Navigate(st.url+"/login"), chromedp.WaitVisible(chromedp.ID("token")),
					typeInto(chromedp.ID("token"), "not-a-token"), click(chromedp.ID("sign-in")),
					chromedp.WaitVisible(chromedp.ID("login-error")))
			} else {
				base := st.url
				if p.who == "lead" {
					base = ost.url
				}
				do(t, pc, v.apply(), chromedp.Navigate(base+path), chromedp.WaitVisible(chromedp.ID(p.ready)))
			}
			checkLooks(t, pc, name)
			expect(t, pc, name, p.expect)
			if v.phone {
				expect(t, pc, name, phoneRules)
				expect(t, pc, name, p.phoneExpect)
				screenshot(t, pc, v, dir, p.phoneShot, p.full)
			} else {
				expect(t, pc, name, p.desktopExpect)
				screenshot(t, pc, v, dir, p.desktopShot, p.full)
			}
		}
	}
}
