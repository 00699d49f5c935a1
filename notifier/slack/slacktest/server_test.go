package slacktest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/notifier/slack/slacktest"
)

const token = "xoxb-fake-token"

type reply struct {
	status   int
	header   http.Header
	OK       bool   `json:"ok"`
	Error    string `json:"error"`
	Channel  string `json:"channel"`
	TS       string `json:"ts"`
	Warning  string `json:"warning"`
	Metadata struct {
		Messages []string `json:"messages"`
	} `json:"response_metadata"`
}

func newServer(t *testing.T) *slacktest.Server {
	s := slacktest.New(t, token)
	s.AddChannel("C0PAYMENTS", "payments")
	s.AddUser("U0ALICE001")
	return s
}

// call POSTs body to method with the given Authorization and Content-Type.
func call(t *testing.T, s *slacktest.Server, method, auth, contentType, body string) reply {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.URL()+method, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := s.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	r := reply{status: resp.StatusCode, header: resp.Header}
	_ = json.Unmarshal(data, &r)
	return r
}

func api(t *testing.T, s *slacktest.Server, method, body string) reply {
	t.Helper()
	return call(t, s, method, "Bearer "+token, "application/json; charset=utf-8", body)
}

const (
	okHeader = `{"type":"header","block_id":"h","text":{"type":"plain_text","text":"Approval needed"}}`
	okButton = `{"type":"button","action_id":"approve","text":{"type":"plain_text","text":"Approve"},"value":"v","style":"primary"}`
)

func msg(blocks ...string) string {
	return `{"channel":"C0PAYMENTS","text":"fallback","blocks":[` + strings.Join(blocks, ",") + `]}`
}

func rep(s string, n int) string { return strings.Repeat(s, n) }

func plain(text string) string { return `{"type":"plain_text","text":` + quote(text) + `}` }

func mrkdwn(text string) string { return `{"type":"mrkdwn","text":` + quote(text) + `}` }

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func actions(elems ...string) string {
	return `{"type":"actions","block_id":"a","elements":[` + strings.Join(elems, ",") + `]}`
}

func button(fields string) string {
	return `{"type":"button","text":{"type":"plain_text","text":"Go"}` + fields + `}`
}

func confirm(title, text, yes, no string) string {
	return `,"action_id":"c","confirm":{"title":` + plain(title) + `,"text":` + plain(text) + `,"confirm":` + plain(yes) + `,"deny":` + plain(no) + `}`
}

func TestPostMessageAcceptsValidMessages(t *testing.T) {
	s := newServer(t)
	for _, tt := range []struct{ name, body, channel string }{
		{"id", msg(okHeader, actions(okButton)), "C0PAYMENTS"},
		{"#name", `{"channel":"#payments","text":"hi"}`, "C0PAYMENTS"},
		{"user id opens a direct message", `{"channel":"U0ALICE001","text":"hi"}`, "D0ALICE001"},
		{"blocks without text", `{"channel":"C0PAYMENTS","blocks":[` + okHeader + `]}`, "C0PAYMENTS"},
		{"150 emoji-free characters", msg(`{"type":"header","text":` + plain(rep("é", 150)) + `}`), "C0PAYMENTS"},
		{"75 emoji, 150 UTF-16 units", msg(`{"type":"header","text":` + plain(rep("😀", 75)) + `}`), "C0PAYMENTS"},
		{"section limits", msg(`{"type":"section","text":` + mrkdwn(rep("x", 3000)) + `,"fields":[` + strings.TrimSuffix(rep(mrkdwn(rep("y", 2000))+",", 10), ",") + `]}`), "C0PAYMENTS"},
		{"button limits", msg(actions(button(`,"action_id":"` + rep("a", 255) + `","value":"` + rep("v", 2000) + `","url":"https://x.example/` + rep("u", 2900) + `"`))), "C0PAYMENTS"},
		{"confirm limits", msg(actions(button(confirm(rep("t", 100), rep("x", 300), rep("y", 30), rep("n", 30))))), "C0PAYMENTS"},
		{"context and divider", msg(`{"type":"divider"}`, `{"type":"context","elements":[`+strings.TrimSuffix(rep(mrkdwn("c")+",", 10), ",")+`]}`), "C0PAYMENTS"},
	} {
		r := api(t, s, "chat.postMessage", tt.body)
		if !r.OK || r.Channel != tt.channel || r.TS == "" {
			t.Errorf("%s: %+v, want ok in %s", tt.name, r, tt.channel)
			continue
		}
		if _, ok := s.Message(tt.channel + "/" + r.TS); !ok {
			t.Errorf("%s: message not stored", tt.name)
		}
	}
	if refused := s.Refused(); len(refused) != 0 {
		t.Errorf("Refused = %v", refused)
	}
}

// TestPostMessageRefusesLikeSlack sends one invalid request per rule and
// expects Slack's error code.
func TestPostMessageRefusesLikeSlack(t *testing.T) {
	fields := func(n int) string { return strings.TrimSuffix(rep(mrkdwn("f")+",", n), ",") }
	tests := []struct {
		name, body, want string
	}{
		{"malformed JSON", `{"channel":`, "invalid_json"},
		{"not an object", `["C0PAYMENTS"]`, "json_not_object"},
		{"unknown argument", `{"chanel":"C0PAYMENTS","text":"hi"}`, "invalid_arguments"},
		{"token in the body", `{"token":"x","channel":"C0PAYMENTS","text":"hi"}`, "invalid_arguments"},
		{"wrong argument type", `{"channel":"C0PAYMENTS","text":"hi","unfurl_links":"false"}`, "invalid_arguments"},
		{"blocks as a string", `{"channel":"C0PAYMENTS","blocks":"[]"}`, "invalid_arguments"},
		{"no channel", `{"text":"hi"}`, "channel_not_found"},
		{"unknown channel id", `{"channel":"C0NOPE","text":"hi"}`, "channel_not_found"},
		{"unknown #name", `{"channel":"#nope","text":"hi"}`, "channel_not_found"},
		{"name without #", `{"channel":"payments","text":"hi"}`, "channel_not_found"},
		{"unknown user", `{"channel":"U0NOBODY","text":"hi"}`, "channel_not_found"},
		{"no text nor blocks", `{"channel":"C0PAYMENTS"}`, "no_text"},
		{"blank text, empty blocks", `{"channel":"C0PAYMENTS","text":" ","blocks":[]}`, "no_text"},
		{"text too long", `{"channel":"C0PAYMENTS","text":"` + rep("x", 40001) + `"}`, "msg_too_long"},
		{"51 blocks", msg(strings.TrimSuffix(rep(`{"type":"divider"},`, 51), ",")), "invalid_blocks"},
		{"unknown block type", msg(`{"type":"image","image_url":"https://x.example/a.png","alt_text":"a"}`), "invalid_blocks"},
		{"input in a message", msg(`{"type":"input","label":` + plain("x") + `,"element":{"type":"plain_text_input"}}`), "invalid_blocks"},
		{"unknown block field", msg(`{"type":"divider","colour":"red"}`), "invalid_blocks"},
		{"header of 151", msg(`{"type":"header","text":` + plain(rep("h", 151)) + `}`), "invalid_blocks"},
		{"header of 76 emoji", msg(`{"type":"header","text":` + plain(rep("😀", 76)) + `}`), "invalid_blocks"},
		{"header in mrkdwn", msg(`{"type":"header","text":` + mrkdwn("h") + `}`), "invalid_blocks"},
		{"header without text", msg(`{"type":"header"}`), "invalid_blocks"},
		{"empty text", msg(`{"type":"section","text":` + mrkdwn("") + `}`), "invalid_blocks"},
		{"text object without type", msg(`{"type":"section","text":{"text":"x"}}`), "invalid_blocks"},
		{"mrkdwn with emoji", msg(`{"type":"section","text":{"type":"mrkdwn","text":"x","emoji":true}}`), "invalid_blocks"},
		{"plain_text with verbatim", msg(`{"type":"section","text":{"type":"plain_text","text":"x","verbatim":true}}`), "invalid_blocks"},
		{"section of 3001", msg(`{"type":"section","text":` + mrkdwn(rep("x", 3001)) + `}`), "invalid_blocks"},
		{"section without text or fields", msg(`{"type":"section"}`), "invalid_blocks"},
		{"11 fields", msg(`{"type":"section","fields":[` + fields(11) + `]}`), "invalid_blocks"},
		{"field of 2001", msg(`{"type":"section","fields":[` + mrkdwn(rep("f", 2001)) + `]}`), "invalid_blocks"},
		{"11 context elements", msg(`{"type":"context","elements":[` + fields(11) + `]}`), "invalid_blocks"},
		{"empty context", msg(`{"type":"context","elements":[]}`), "invalid_blocks"},
		{"26 buttons", msg(`{"type":"actions","elements":[` + strings.TrimSuffix(rep(button("")+",", 26), ",") + `]}`), "invalid_blocks"},
		{"button text of 76", msg(actions(`{"type":"button","text":` + plain(rep("b", 76)) + `}`)), "invalid_blocks"},
		{"button text in mrkdwn", msg(actions(`{"type":"button","text":` + mrkdwn("b") + `}`)), "invalid_blocks"},
		{"action_id of 256", msg(actions(button(`,"action_id":"` + rep("a", 256) + `"`))), "invalid_blocks"},
		{"duplicate action_id", msg(actions(button(`,"action_id":"x"`), button(`,"action_id":"x"`))), "invalid_blocks"},
		{"duplicate action_id across blocks", msg(actions(button(`,"action_id":"x"`)), `{"type":"actions","elements":[`+button(`,"action_id":"x"`)+`]}`), "invalid_blocks"},
		{"value of 2001", msg(actions(button(`,"value":"` + rep("v", 2001) + `"`))), "invalid_blocks"},
		{"empty value", msg(actions(button(`,"value":""`))), "invalid_blocks"},
		{"url of 3001", msg(actions(button(`,"url":"https://x.example/` + rep("u", 2990) + `"`))), "invalid_blocks"},
		{"url not a URL", msg(actions(button(`,"url":"javascript:alert(1)"`))), "invalid_blocks"},
		{"style warning", msg(actions(button(`,"style":"warning"`))), "invalid_blocks"},
		{"unknown button field", msg(actions(button(`,"colour":"red"`))), "invalid_blocks"},
		{"non-button element", msg(`{"type":"actions","elements":[{"type":"overflow","action_id":"o","options":[]}]}`), "invalid_blocks"},
		{"confirm title of 101", msg(actions(button(confirm(rep("t", 101), "x", "y", "n")))), "invalid_blocks"},
		{"confirm text of 301", msg(actions(button(confirm("t", rep("x", 301), "y", "n")))), "invalid_blocks"},
		{"confirm button of 31", msg(actions(button(confirm("t", "x", rep("y", 31), "n")))), "invalid_blocks"},
		{"deny of 31", msg(actions(button(confirm("t", "x", "y", rep("n", 31))))), "invalid_blocks"},
		{"confirm without deny", msg(actions(button(`,"confirm":{"title":` + plain("t") + `,"text":` + plain("x") + `,"confirm":` + plain("y") + `}`))), "invalid_blocks"},
		{"confirm style", msg(actions(button(`,"confirm":{"title":` + plain("t") + `,"text":` + plain("x") + `,"confirm":` + plain("y") + `,"deny":` + plain("n") + `,"style":"warning"}`))), "invalid_blocks"},
		{"block_id of 256", msg(`{"type":"divider","block_id":"` + rep("b", 256) + `"}`), "invalid_blocks"},
		{"empty block_id", msg(`{"type":"divider","block_id":""}`), "invalid_blocks"},
		{"duplicate block_id", msg(`{"type":"divider","block_id":"d"}`, `{"type":"divider","block_id":"d"}`), "invalid_blocks"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newServer(t)
			r := api(t, s, "chat.postMessage", tt.body)
			if r.OK || r.Error != tt.want || r.status != http.StatusOK {
				t.Fatalf("reply %+v, want HTTP 200 and %s", r, tt.want)
			}
			if tt.want == "invalid_blocks" && (len(r.Metadata.Messages) == 0 || !strings.Contains(r.Metadata.Messages[0], "[json-pointer:/blocks")) {
				t.Errorf("invalid_blocks without a detail: %+v", r.Metadata)
			}
			refused := s.Refused()
			if len(refused) != 1 || refused[0].Error != tt.want || refused[0].Method != "chat.postMessage" {
				t.Errorf("Refused = %v", refused)
			}
			if len(s.Messages()) != 0 {
				t.Error("a refused message was stored")
			}
		})
	}
}

func TestAuthAndContentType(t *testing.T) {
	s := newServer(t)
	body := `{"channel":"C0PAYMENTS","text":"hi"}`
	for _, tt := range []struct{ name, auth, ct, want string }{
		{"no token", "", "application/json", "not_authed"},
		{"wrong token", "Bearer xoxb-other", "application/json", "invalid_auth"},
		{"token without Bearer", token, "application/json", "invalid_auth"},
		{"form body", "Bearer " + token, "application/x-www-form-urlencoded", "invalid_arguments"},
		{"no content type", "Bearer " + token, "", "invalid_arguments"},
	} {
		if r := call(t, s, "chat.postMessage", tt.auth, tt.ct, body); r.OK || r.Error != tt.want {
			t.Errorf("%s: %+v, want %s", tt.name, r, tt.want)
		}
	}
	r := call(t, s, "chat.postMessage", "Bearer "+token, "application/json", body)
	if !r.OK || r.Warning != "missing_charset" {
		t.Errorf("JSON without charset: %+v, want ok with warning missing_charset", r)
	}
	if r := api(t, s, "chat.delete", `{}`); r.Error != "unknown_method" {
		t.Errorf("unknown method: %+v", r)
	}
}

func TestUpdate(t *testing.T) {
	s := newServer(t)
	posted := api(t, s, "chat.postMessage", msg(okHeader, actions(okButton)))
	update := func(channel, ts string, blocks ...string) reply {
		return api(t, s, "chat.update", `{"channel":"`+channel+`","ts":"`+ts+`","text":"done","blocks":[`+strings.Join(blocks, ",")+`]}`)
	}
	if r := update("C0PAYMENTS", "1.000001", okHeader); r.Error != "message_not_found" {
		t.Errorf("unknown ts: %+v", r)
	}
	if r := update("#payments", posted.TS, okHeader); r.Error != "channel_not_found" {
		t.Errorf("channel by name: %+v", r)
	}
	changed := `{"type":"header","block_id":"h","text":{"type":"plain_text","text":"Approved"}}`
	if r := update("C0PAYMENTS", posted.TS, changed); r.Error != "invalid_blocks" || !strings.Contains(strings.Join(r.Metadata.Messages, " "), `block_id "h"`) {
		t.Errorf("a block_id reused for other content: %+v", r)
	}
	if r := api(t, s, "chat.update", `{"channel":"C0PAYMENTS","ts":"`+posted.TS+`","txt":"x"}`); r.Error != "invalid_arguments" {
		t.Errorf("typo: %+v", r)
	}
	renamed := `{"type":"header","block_id":"h2","text":{"type":"plain_text","text":"Approved"}}`
	if r := update("C0PAYMENTS", posted.TS, okHeader, `{"type":"divider","block_id":"d"}`); !r.OK {
		t.Errorf("unchanged block kept its id: %+v", r)
	}
	if r := update("C0PAYMENTS", posted.TS, renamed); !r.OK {
		t.Fatalf("update: %+v", r)
	}
	m, _ := s.Message("C0PAYMENTS/" + posted.TS)
	if m.Versions != 3 || m.Text != "done" || m.HasActions() || m.Texts()[0] != "Approved" {
		t.Errorf("after the update: %+v", m)
	}
}

func TestViewsOpen(t *testing.T) {
	s := newServer(t)
	view := func(title, extra string) string {
		return `{"type":"modal","title":` + plain(title) + `,"submit":` + plain("Send") + `,"callback_id":"cb",` +
			`"blocks":[{"type":"input","block_id":"in","label":` + plain("Answer") + `,"element":{"type":"plain_text_input","action_id":"in","multiline":true}}]` + extra + `}`
	}
	open := func(trigger, v string) reply {
		return api(t, s, "views.open", `{"trigger_id":"`+trigger+`","view":`+v+`}`)
	}
	if r := open("123.456.abc", view("Answer", "")); r.Error != "invalid_trigger_id" {
		t.Errorf("unknown trigger: %+v", r)
	}
	trigger := s.NewTriggerID()
	if r := open(trigger, view("Answer", "")); !r.OK {
		t.Fatalf("views.open: %+v", r)
	}
	if r := open(trigger, view("Answer", "")); r.Error != "expired_trigger_id" {
		t.Errorf("trigger used twice: %+v", r)
	}
	for name, v := range map[string]string{
		"title of 25":           view(rep("t", 25), ""),
		"metadata of 3001":      view("Answer", `,"private_metadata":"`+rep("m", 3001)+`"`),
		"callback_id of 256":    strings.Replace(view("Answer", ""), `"cb"`, `"`+rep("c", 256)+`"`, 1),
		"not a modal":           strings.Replace(view("Answer", ""), `"modal"`, `"home"`, 1),
		"input without submit":  strings.Replace(view("Answer", ""), `"submit":`+plain("Send")+`,`, "", 1),
		"initial value of 3001": strings.Replace(view("Answer", ""), `"multiline":true`, `"initial_value":"`+rep("v", 3001)+`"`, 1),
		"unknown view field":    view("Answer", `,"colour":"red"`),
	} {
		if r := open(s.NewTriggerID(), v); r.Error != "invalid_arguments" || len(r.Metadata.Messages) == 0 {
			t.Errorf("%s: %+v, want invalid_arguments with a detail", name, r)
		}
	}
	views := s.Views()
	if len(views) != 1 || views[0].CallbackID != "cb" || views[0].Title != "Answer" {
		t.Errorf("Views = %+v", views)
	}
}

func TestResponseURL(t *testing.T) {
	s := newServer(t)
	post := func(u, body string) int {
		resp, err := s.Client().Post(u, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	u := s.NewResponseURL()
	if got := post(u, `{"response_type":"ephemeral","text":"only you"}`); got != http.StatusOK {
		t.Errorf("ephemeral: HTTP %d", got)
	}
	if got := post(u, `{"replace_original":"true","text":"x"}`); got == http.StatusOK {
		t.Error("replace_original on a URL of no message was accepted")
	}
	if got := post(u, `{"text":"x","colour":"red"}`); got == http.StatusOK {
		t.Error("an unknown field was accepted")
	}
	if got := post(u, `{"text":""}`); got == http.StatusOK {
		t.Error("an empty reply was accepted")
	}
	if got := post(u, `{"text":"fifth"}`); got != http.StatusOK {
		t.Errorf("fifth use: HTTP %d", got)
	}
	if got := post(u, `{"text":"sixth"}`); got != http.StatusNotFound {
		t.Errorf("sixth use: HTTP %d, want 404", got)
	}
	if got := post(strings.TrimSuffix(s.URL(), "/api/")+"/actions/T0/1/nope", `{"text":"x"}`); got != http.StatusNotFound {
		t.Errorf("unknown URL: HTTP %d", got)
	}
	posts := s.ResponsePosts()
	if len(posts) != 7 || !posts[0].Ephemeral() || posts[0].Text != "only you" {
		t.Errorf("ResponsePosts = %+v", posts)
	}
	if n := len(s.Refused()); n != 5 {
		t.Errorf("%d refusals, want 5: %v", n, s.Refused())
	}
}

func TestFailNext(t *testing.T) {
	s := newServer(t)
	s.FailNext("chat.postMessage", http.StatusTooManyRequests, "", "7")
	s.FailNext("chat.postMessage", 0, "ratelimited", "3")
	body := `{"channel":"C0PAYMENTS","text":"hi"}`
	r := api(t, s, "chat.postMessage", body)
	if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") != "7" {
		t.Errorf("first: HTTP %d Retry-After %q", r.status, r.header.Get("Retry-After"))
	}
	r = api(t, s, "chat.postMessage", body)
	if r.status != http.StatusOK || r.Error != "ratelimited" || r.header.Get("Retry-After") != "3" {
		t.Errorf("second: %+v", r)
	}
	if r = api(t, s, "chat.postMessage", body); !r.OK {
		t.Errorf("third: %+v", r)
	}
	if len(s.Refused()) != 0 {
		t.Errorf("injected failures in Refused: %v", s.Refused())
	}
	if calls := s.CallsOf("chat.postMessage"); len(calls) != 3 || !calls[0].Injected || calls[2].Injected {
		t.Errorf("Calls = %v", calls)
	}
}

func TestWaitFor(t *testing.T) {
	s := newServer(t)
	done := make(chan error, 1)
	go func() {
		done <- s.WaitFor(t.Context(), func(s *slacktest.Server) bool { return len(s.Messages()) == 2 })
	}()
	for i := range 2 {
		api(t, s, "chat.postMessage", fmt.Sprintf(`{"channel":"C0PAYMENTS","text":"m%d"}`, i))
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithDeadline(t.Context(), time.Unix(0, 0))
	defer cancel()
	if err := s.WaitFor(ctx, func(*slacktest.Server) bool { return false }); err == nil {
		t.Error("WaitFor with an ended context returned nil")
	}
}
