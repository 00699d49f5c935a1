package test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestReceiptClaimExampleRuns runs docs/receipts.md's claim as written
// under deploy/policy.yaml: the curl claims an approved payment, and jq
// reads the receipt off the answer, a compact JWS.
func TestReceiptClaimExampleRuns(t *testing.T) {
	d := readDocExamples(t, "docs/receipts.md", "")
	p, addr := makeRunServe(t)
	sh := newDocShell(t, p, addr)
	id := pendingPayment(t, p, "run-receipt-doc", "call-1")
	if code := p.call("POST", "/v1/approvals/"+id+"/votes", map[string]any{"decision": "approve"}, nil); code != http.StatusOK {
		t.Fatalf("approve: %d", code)
	}
	sh.vars["EVENT_ID"] = id
	cmds := d.take(t, "sh", "/claim | jq").shell(t)
	if len(cmds) != 1 {
		t.Fatalf("want one curl piped to jq, got %q", cmds)
	}
	pipe := slices.Index(cmds[0], "|")
	if pipe < 0 {
		t.Fatalf("want a curl piped to jq, got %q", cmds[0])
	}
	curl, jqArgs := cmds[0][:pipe], cmds[0][pipe+1:]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a := sh.curl(ctx, t, curl)
	if a.status != http.StatusOK {
		t.Fatalf("the claim: %d %s", a.status, a.body)
	}
	jq := exec.Command(jqArgs[0], jqArgs[1:]...)
	jq.Stdin = strings.NewReader(string(a.body))
	out, err := jq.CombinedOutput()
	if err != nil || !regexp.MustCompile(`^[\w-]+\.[\w-]+\.[\w-]+\n$`).Match(out) {
		t.Errorf("%q printed %q (%v), want the receipt, a compact JWS", jqArgs, out, err)
	}
	d.allRun(t)
}

// TestOversightExampleRuns runs docs/oversight.md's curl as written under
// deploy/policy.yaml, after a payment approved and one rejected, and finds
// in the answer every field of the objects it shows (the lists' items, with
// "...": "..." for more of the same, are left out).
func TestOversightExampleRuns(t *testing.T) {
	d := readDocExamples(t, "docs/oversight.md", "")
	p, addr := makeRunServe(t)
	sh := newDocShell(t, p, addr)
	for i, decision := range []string{"approve", "reject"} {
		id := pendingPayment(t, p, "run-oversight-doc", "call-"+decision)
		body := map[string]any{"decision": decision}
		if i == 1 {
			body["comment"] = "wrong account"
		}
		if code := p.call("POST", "/v1/approvals/"+id+"/votes", body, nil); code != http.StatusOK {
			t.Fatalf("%s: %d", decision, code)
		}
	}
	cmds := d.take(t, "sh", "/v1/oversight?").shell(t)
	if len(cmds) != 1 {
		t.Fatalf("want one curl, got %q", cmds)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a := sh.curl(ctx, t, cmds[0])
	if a.status != http.StatusOK {
		t.Fatalf("%q: %d %s", cmds[0], a.status, a.body)
	}
	var shown, got map[string]any
	if err := json.Unmarshal([]byte(d.take(t, "json", `"fast_threshold_seconds"`).text), &shown); err != nil {
		t.Fatal(err)
	}
	a.decode(t, &got)
	if miss := hasShape(shown, got); miss != "" {
		t.Errorf("the answer has no %s, which docs/oversight.md shows:\n%s", miss, a.body)
	}
	d.allRun(t)
}

// TestUsingPythonExampleIsTheTestedOne: docs/using.md's Python example is,
// verbatim, contracts/python/examples/quickstart.py, which the Python
// client's tests (contracts/python/tests/test_readme.py, make test-py) run
// against a real serve under deploy/policy.yaml, a human approving.
func TestUsingPythonExampleIsTheTestedOne(t *testing.T) {
	d := readDocExamples(t, "docs/using.md", "# Python")
	b := d.take(t, "python", "@gated(")
	file, err := os.ReadFile("../contracts/python/examples/quickstart.py")
	if err != nil {
		t.Fatal(err)
	}
	if b.text != string(file) {
		t.Errorf("docs/using.md:%d is not contracts/python/examples/quickstart.py as written:\n%s", b.line, b.text)
	}
	d.allRun(t)
}
