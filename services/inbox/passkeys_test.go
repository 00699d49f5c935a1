package inbox_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/passkey"
	"github.com/countersign/countersign/contracts/passkey/passkeytest"
	"github.com/countersign/countersign/services/api"
	"github.com/countersign/countersign/services/inbox"
)

// stepUpPolicy has alice decide refunds, each approval signed with her
// passkey.
const stepUpPolicy = `version: "inbox-passkeys-1"
default: require_approval
rules:
  - name: refunds
    tools: ["billing.refund"]
    action: require_approval
    risk: high
    approvers: [alice]
    allowed_decisions: [approve, reject, edit]
    step_up: passkey
`

const (
	inboxRP     = "inbox.example.com"
	inboxOrigin = "https://inbox.example.com"
)

// setupStepUp is the inbox with passkeys bound to inboxRP and the step-up
// policy live.
func setupStepUp(t *testing.T) *env {
	t.Helper()
	e := setup(t)
	e.url = e.replica(t, func(c *api.Config) {
		c.Passkeys = api.PasskeyConfig{RPID: inboxRP, Origins: []string{inboxOrigin}}
	})
	if r := e.call(t, "POST", "/v1/policy", "admin", stepUpPolicy); r.status != http.StatusOK {
		t.Fatalf("apply policy: %d %s", r.status, r.body)
	}
	return e
}

// jsonError is an inbox JSON route's refusal.
type jsonError struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func wantCode(t *testing.T, what string, r response, status int, code string) {
	t.Helper()
	var e jsonError
	if r.status != status || json.Unmarshal(r.body, &e) != nil || e.Error.Code != code || e.Error.Message == "" {
		t.Fatalf("%s: %d %s, want %d with code %s", what, r.status, r.body, status, code)
	}
}

// enrolThroughInbox runs the enrolment ceremony through the inbox's routes
// as the browser's script does, a answering as the authenticator.
func enrolThroughInbox(t *testing.T, w *webClient, a *passkeytest.Authenticator, name string) contracts.Passkey {
	t.Helper()
	r := w.post("/passkeys/enrol/begin", url.Values{"csrf": {w.csrf}})
	var begun struct {
		EnrolmentID string          `json:"enrolment_id"`
		Options     json.RawMessage `json:"options"`
	}
	if r.status != http.StatusOK || json.Unmarshal(r.body, &begun) != nil || begun.EnrolmentID == "" {
		t.Fatalf("begin: %d %s", r.status, r.body)
	}
	credential, err := a.Register(begun.Options)
	if err != nil {
		t.Fatal(err)
	}
	r = w.post("/passkeys/enrol/finish", url.Values{"csrf": {w.csrf}, "enrolment_id": {begun.EnrolmentID}, "name": {name}, "credential": {string(credential)}})
	var done struct {
		Passkey contracts.Passkey `json:"passkey"`
	}
	if r.status != http.StatusOK || json.Unmarshal(r.body, &done) != nil || done.Passkey.Name != name {
		t.Fatalf("finish: %d %s", r.status, r.body)
	}
	return done.Passkey
}

// signedApproval asks the inbox for the statement of approving id and
// signs it with a, as the page's script does.
func signedApproval(t *testing.T, w *webClient, id string, a *passkeytest.Authenticator) string {
	t.Helper()
	r := w.post("/approvals/"+id+"/statement", url.Values{"csrf": {w.csrf}, "decision": {"approve"}})
	var ans api.StatementAnswer
	if r.status != http.StatusOK || json.Unmarshal(r.body, &ans) != nil {
		t.Fatalf("statement: %d %s", r.status, r.body)
	}
	st, err := passkey.ParseStatement(ans.Statement)
	if err != nil || ans.RPID != inboxRP || ans.Challenge != st.ChallengeB64() || ans.UserVerification != "required" {
		t.Fatalf("statement answer %+v: %v", ans, err)
	}
	data, _ := json.Marshal(a.Sign(st))
	return string(data)
}

func wantRefusal(t *testing.T, what string, r response, status int, reason string) {
	t.Helper()
	if r.status != status || !strings.Contains(string(r.body), `data-reason="`+reason+`"`) {
		t.Fatalf("%s: %d, want %d with reason %s\n%s", what, r.status, status, reason, r.body)
	}
	msg := contracts.Reason(reason).Message()
	if !strings.Contains(string(r.body), msg) {
		t.Fatalf("%s: the page does not say %q", what, msg)
	}
}

// A person enrols a passkey on the passkeys page, a step-up approval
// asks them to sign, counts only with their signature (one without is
// refused step_up_required), and once they revoke the passkey a signature
// by it is refused passkey_unknown and the page says none is enrolled.
func TestInboxPasskeyEnrolSignApproveAndRevoke(t *testing.T) {
	e := setupStepUp(t)
	w := e.signIn(t, "alice")
	page := w.get("/passkeys")
	if page.status != http.StatusOK || !strings.Contains(string(page.body), `id="no-passkeys"`) || !strings.Contains(string(page.body), `id="enrol-form"`) {
		t.Fatalf("passkeys page: %d %s", page.status, page.body)
	}
	a := passkeytest.NewES256(inboxRP, inboxOrigin, []byte("alice-laptop"))
	pk := enrolThroughInbox(t, w, a, "laptop")
	page = w.get("/passkeys?enrolled=" + url.QueryEscape(pk.ID))
	if body := string(page.body); !strings.Contains(body, `data-credential-id="`+pk.ID+`" data-revoked="false"`) || !strings.Contains(body, "is enrolled") {
		t.Fatalf("passkeys page after enrolment:\n%s", body)
	}

	id := e.refund(t, "run-pk-1", "Globex", "", 120)
	detail := string(w.get("/approvals/" + id).body)
	for _, want := range []string{"This rule asks you to sign with your passkey", `id="approve-form" data-step-up="passkey"`, `id="edit-form" data-step-up="passkey"`, `name="passkey"`} {
		if !strings.Contains(detail, want) {
			t.Fatalf("approval page lacks %q:\n%s", want, detail)
		}
	}
	if strings.Contains(detail, `id="no-passkey"`) {
		t.Fatal("the approval page says no passkey is enrolled")
	}
	h := e.record(t, id).Request.ToolCall.ArgumentsSHA256

	// Without the signature the vote does not count.
	wantRefusal(t, "approve without a passkey", w.decide(id, url.Values{"decision": {"approve"}, "h": {h}}), http.StatusForbidden, contracts.ReasonStepUpRequired)
	// A signature that cannot be read is not sent at all.
	r := w.decide(id, url.Values{"decision": {"approve"}, "h": {h}, "passkey": {`{"statement":1}`}})
	if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "passkey signature could not be read") {
		t.Fatalf("unreadable passkey: %d %s", r.status, r.body)
	}
	// Reject needs no passkey; the statement is for approve and edit only.
	wantCode(t, "statement for a rejection", w.post("/approvals/"+id+"/statement", url.Values{"csrf": {w.csrf}, "decision": {"reject"}}), http.StatusBadRequest, api.CodeInvalidField)

	r = w.decide(id, url.Values{"decision": {"approve"}, "h": {h}, "passkey": {signedApproval(t, w, id, a)}})
	w.followDecision(id, r)
	rec := e.record(t, id)
	if rec.Status != contracts.StatusApproved || len(rec.Votes) != 1 || rec.Votes[0].Passkey == nil || rec.Votes[0].Passkey.CredentialID != pk.ID {
		t.Fatalf("record after the signed approval: %+v", rec)
	}

	// Revoked on the page, the passkey signs nothing that counts.
	next := e.refund(t, "run-pk-2", "Initech", "", 80)
	assertion := signedApproval(t, w, next, a)
	r = w.post("/passkeys/"+url.PathEscape(pk.ID)+"/revoke", url.Values{"csrf": {w.csrf}})
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/passkeys?revoked="+url.QueryEscape(pk.ID) {
		t.Fatalf("revoke: %d %v %s", r.status, r.header, r.body)
	}
	if body := string(w.get(r.header.Get("Location")).body); !strings.Contains(body, `data-revoked="true"`) || !strings.Contains(body, "is revoked") {
		t.Fatalf("passkeys page after revocation:\n%s", body)
	}
	h = e.record(t, next).Request.ToolCall.ArgumentsSHA256
	r = w.decide(next, url.Values{"decision": {"approve"}, "h": {h}, "passkey": {assertion}})
	wantRefusal(t, "approve with a revoked passkey", r, http.StatusForbidden, contracts.ReasonPasskeyUnknown)
	if !strings.Contains(string(r.body), `id="no-passkey"`) {
		t.Fatalf("the refusal does not offer to enrol a passkey:\n%s", r.body)
	}
	if rec := e.record(t, next); rec.Status != contracts.StatusPending || len(rec.Votes) != 0 {
		t.Fatalf("record after refused votes: %+v", rec)
	}
}

// The inbox's JSON routes answer stable codes: no session, no CSRF token,
// a request without step-up, an enrolment answered twice.
func TestInboxPasskeyRoutesAnswerCodes(t *testing.T) {
	e := setupStepUp(t)
	w := e.signIn(t, "alice")
	anon := newWebClient(t, e.url)
	wantCode(t, "signed out", anon.post("/passkeys/enrol/begin", url.Values{}), http.StatusUnauthorized, "signed_out")
	wantCode(t, "without CSRF", w.post("/passkeys/enrol/begin", url.Values{}), http.StatusForbidden, "invalid_csrf")
	wantCode(t, "wrong CSRF", w.post("/passkeys/enrol/begin", url.Values{"csrf": {"x" + w.csrf}}), http.StatusForbidden, "invalid_csrf")
	wantCode(t, "unknown enrolment", w.post("/passkeys/enrol/finish", url.Values{"csrf": {w.csrf}, "enrolment_id": {"nope"}, "name": {"laptop"}, "credential": {"{}"}}),
		http.StatusBadRequest, api.CodeEnrolmentExpired)
	wantCode(t, "unnamed", w.post("/passkeys/enrol/finish", url.Values{"csrf": {w.csrf}, "enrolment_id": {"nope"}, "credential": {"{}"}}),
		http.StatusBadRequest, api.CodeInvalidField)

	if r := e.call(t, "POST", "/v1/policy", "admin", inboxPolicy); r.status != http.StatusOK {
		t.Fatalf("apply policy: %d %s", r.status, r.body)
	}
	plain := e.refund(t, "run-plain", "Globex", "", 10)
	wantCode(t, "statement without step-up", w.post("/approvals/"+plain+"/statement", url.Values{"csrf": {w.csrf}, "decision": {"approve"}}),
		http.StatusConflict, api.CodeStepUpNotApplicable)
	if body := string(w.get("/approvals/" + plain).body); strings.Contains(body, "data-step-up") || strings.Contains(body, "sign with your passkey") {
		t.Fatalf("a request without step-up asks for a passkey:\n%s", body)
	}
	// An edit's statement reads the arguments as the decide form does.
	if r := e.call(t, "POST", "/v1/policy", "admin", stepUpPolicy); r.status != http.StatusOK {
		t.Fatalf("apply policy: %d %s", r.status, r.body)
	}
	id := e.refund(t, "run-edit", "Globex", "", 10)
	wantCode(t, "edit statement of no object", w.post("/approvals/"+id+"/statement", url.Values{"csrf": {w.csrf}, "decision": {"edit"}, "arguments": {"[1]"}}),
		http.StatusBadRequest, api.CodeInvalidArguments)
	r := w.post("/approvals/"+id+"/statement", url.Values{"csrf": {w.csrf}, "decision": {"edit"}, "arguments": {"{\n  \"amount\": 5, \"customer\": \"Globex\"\n}"}})
	var ans api.StatementAnswer
	if r.status != http.StatusOK || json.Unmarshal(r.body, &ans) != nil || !strings.Contains(ans.Statement, `"decision":"edit"`) {
		t.Fatalf("edit statement: %d %s", r.status, r.body)
	}
}

// Without passkeys set up, the page says so and a step-up request can
// only be rejected.
func TestInboxPasskeysOff(t *testing.T) {
	e := setup(t)
	if r := e.call(t, "POST", "/v1/policy", "admin", stepUpPolicy); r.status != http.StatusOK {
		t.Fatalf("apply policy: %d %s", r.status, r.body)
	}
	w := e.signIn(t, "alice")
	if body := string(w.get("/passkeys").body); !strings.Contains(body, `id="passkeys-off"`) || strings.Contains(body, `id="enrol-form"`) {
		t.Fatalf("passkeys page without passkeys:\n%s", body)
	}
	wantCode(t, "enrol without passkeys", w.post("/passkeys/enrol/begin", url.Values{"csrf": {w.csrf}}), http.StatusNotFound, api.CodePasskeysOff)
	id := e.refund(t, "run-off", "Globex", "", 10)
	if body := string(w.get("/approvals/" + id).body); !strings.Contains(body, `id="passkeys-off"`) || !strings.Contains(body, `id="reject"`) {
		t.Fatalf("approval page without passkeys:\n%s", body)
	}
}

// With single sign-on configured, only a session signed in through the
// provider may enrol a passkey: a bearer token, which can be copied, must
// not be able to mint the proof that a person approved.
func TestInboxPasskeyEnrolmentNeedsAProviderSession(t *testing.T) {
	o := setupOIDC(t, inbox.MatchSubject, false)
	token := o.signIn(t, "alice")
	r := token.post("/passkeys/enrol/begin", url.Values{"csrf": {token.csrf}})
	wantCode(t, "enrol from a token session", r, http.StatusForbidden, "provider_sign_in_required")
	if !strings.Contains(string(r.body), "Example ID") {
		t.Fatalf("the refusal does not name the provider: %s", r.body)
	}
	wantCode(t, "finish from a token session", token.post("/passkeys/enrol/finish", url.Values{"csrf": {token.csrf}, "enrolment_id": {"x"}, "name": {"laptop"}}),
		http.StatusForbidden, "provider_sign_in_required")
	// Signed in through the provider, the enrolment reaches the API (which
	// here has no passkeys set up).
	alice := o.oidcSignIn(t, "alice", "alice-pw")
	wantCode(t, "enrol from a provider session", alice.post("/passkeys/enrol/begin", url.Values{"csrf": {alice.csrf}}), http.StatusNotFound, api.CodePasskeysOff)
}
