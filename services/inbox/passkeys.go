package inbox

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/services/api"
)

// The passkeys page lists the signed-in person's passkeys, enrols new ones
// and revokes them; the approval page of a request whose rule says
// step_up: passkey has the browser sign the approval statement before the
// vote is sent. Everything is the API's: the inbox passes the person's
// principal, and the arbiter checks every assertion.

// PasskeyBackend is what the inbox needs of the API for passkeys (an
// *api.Server has it): the relying party, a person's passkeys, the
// enrolment ceremony, revocation, and the statement an approver signs.
type PasskeyBackend interface {
	Party() (contracts.PasskeyParty, bool)
	PasskeysOf(ctx context.Context, person string) (contracts.Passkeys, uint64, *api.Error)
	BeginPasskeyEnrolment(ctx context.Context, p *api.Principal) (json.RawMessage, string, *api.Error)
	FinishPasskeyEnrolment(ctx context.Context, p *api.Principal, id, name string, response []byte) (contracts.Passkey, *api.Error)
	RevokePasskey(ctx context.Context, p *api.Principal, person, id string) (contracts.Passkey, *api.Error)
	Statement(ctx context.Context, p *api.Principal, id, decision string, edited json.RawMessage) (api.StatementAnswer, *api.Error)
}

// Codes of the inbox's JSON answers, besides the API's own (passkeys_off,
// enrolment_expired, enrolment_invalid, step_up_not_applicable, …).
const (
	// codeSignedOut: the request has no live session.
	codeSignedOut = "signed_out"
	// codeInvalidCSRF: the post lacks the session's CSRF token.
	codeInvalidCSRF = "invalid_csrf"
	// codeMalformed: the form cannot be read.
	codeMalformed = "malformed"
	// codeSignInRequired: enrolling a passkey needs a session signed in
	// through the identity provider, not with a token.
	codeSignInRequired = "provider_sign_in_required"
)

// passkeyField is the decide form's field that carries the passkey
// assertion (JSON of contracts.PasskeyAssertion).
const passkeyField = "passkey"

// registerPasskeys serves the passkeys page, the enrolment ceremony and
// the statement route.
func (in *Inbox) registerPasskeys(mux Backend) {
	mux.Handle("GET /passkeys", in.page(in.getPasskeys))
	mux.Handle("POST /passkeys/enrol/begin", in.jsonPost(in.postEnrolBegin))
	mux.Handle("POST /passkeys/enrol/finish", in.jsonPost(in.postEnrolFinish))
	mux.Handle("POST /passkeys/{credential_id}/revoke", in.page(in.postRevokePasskey))
	mux.Handle("POST /approvals/{event_id}/statement", in.jsonPost(in.postStatement))
}

// passkeyRow is one passkey on the passkeys page.
type passkeyRow struct {
	ID        string
	Name      string
	Created   moment
	Revoked   bool
	RevokedAt moment
	RevokedBy string
}

type passkeysPage struct {
	Page
	// Off says why passkeys are off on this server, when they are.
	Off  string
	RPID string
	Keys []passkeyRow
	// EnrolRefused says why this session may not enrol a passkey.
	EnrolRefused string
	Result       string
	Error        string
}

// mayEnrol says why sess may not enrol a passkey, or "" when it may. With
// single sign-on configured only a session signed in through the provider
// may: a passkey proves a person, and a bearer token (which can be copied)
// must not be able to mint that proof.
func (in *Inbox) mayEnrol(sess *session) string {
	if in.oidc == nil || sess.method == methodOIDC {
		return ""
	}
	name := in.oidc.cfg.Name
	return "Enrolling a passkey needs a session signed in with " + name + ", not with a token: a passkey proves that you approved, and a token alone must not be able to add one. Sign out, then sign in with " + name + "."
}

// getPasskeys serves GET /passkeys[?enrolled=ID|revoked=ID].
func (in *Inbox) getPasskeys(w http.ResponseWriter, r *http.Request, sess *session) {
	pg, status := in.passkeysPage(r.Context(), sess)
	q := r.URL.Query()
	for _, k := range pg.Keys {
		switch {
		case q.Get("enrolled") == k.ID && !k.Revoked:
			pg.Result = "Your passkey “" + k.Name + "” is enrolled: approvals that ask for a passkey can be signed with it."
		case q.Get("revoked") == k.ID && k.Revoked:
			pg.Result = "Your passkey “" + k.Name + "” is revoked: no approval signed with it counts any more."
		}
	}
	in.render(w, status, "passkeys", pg)
}

func (in *Inbox) passkeysPage(ctx context.Context, sess *session) (passkeysPage, int) {
	pg := passkeysPage{Page: in.pageFor(sess, "Passkeys", "passkeys"), EnrolRefused: in.mayEnrol(sess)}
	party, ok := in.api.Party()
	if !ok {
		pg.Off = "Passkeys are not set up on this server (passkeys.rp_id in its configuration), so a rule that asks for a passkey can only be rejected."
		return pg, http.StatusOK
	}
	pg.RPID = party.RPID
	keys, _, aerr := in.api.PasskeysOf(ctx, sess.p.Subject)
	if aerr != nil {
		pg.Error = "Your passkeys could not be read: " + aerr.Message
		return pg, aerr.Status
	}
	now := in.now()
	for i := len(keys.Credentials) - 1; i >= 0; i-- { // newest first
		c := keys.Credentials[i]
		row := passkeyRow{ID: c.ID, Name: c.Name, Created: momentAgo(now, c.CreatedAt), Revoked: c.Revoked(), RevokedBy: c.RevokedBy}
		if c.RevokedAt != nil {
			row.RevokedAt = momentAgo(now, *c.RevokedAt)
		}
		pg.Keys = append(pg.Keys, row)
	}
	return pg, http.StatusOK
}

// postRevokePasskey serves POST /passkeys/{credential_id}/revoke (form:
// csrf): the person revokes one of their own passkeys.
func (in *Inbox) postRevokePasskey(w http.ResponseWriter, r *http.Request, sess *session) {
	id := r.PathValue("credential_id")
	if _, aerr := in.api.RevokePasskey(r.Context(), &sess.p, sess.p.Subject, id); aerr != nil {
		in.log.Info("inbox passkey revocation refused", "credential_id", id, "subject", sess.p.Subject, "code", aerr.Code)
		pg, _ := in.passkeysPage(r.Context(), sess)
		pg.Error = "The passkey was not revoked: " + aerr.Message
		in.render(w, aerr.Status, "passkeys", pg)
		return
	}
	in.log.Info("inbox passkey revoked", "credential_id", id, "subject", sess.p.Subject, "method", sess.method)
	http.Redirect(w, r, "/passkeys?revoked="+url.QueryEscape(id), http.StatusSeeOther)
}

// enrolBegun is the answer of POST /passkeys/enrol/begin.
type enrolBegun struct {
	EnrolmentID string `json:"enrolment_id"`
	// Options are navigator.credentials.create's publicKey member, as
	// the API gives them (JSON, binary fields base64url).
	Options json.RawMessage `json:"options"`
}

// postEnrolBegin serves POST /passkeys/enrol/begin (form: csrf).
func (in *Inbox) postEnrolBegin(w http.ResponseWriter, r *http.Request, sess *session) {
	if why := in.mayEnrol(sess); why != "" {
		in.log.Warn("inbox passkey enrolment refused: the session was signed in with a token", "subject", sess.p.Subject)
		writeJSONError(w, http.StatusForbidden, codeSignInRequired, why)
		return
	}
	options, id, aerr := in.api.BeginPasskeyEnrolment(r.Context(), &sess.p)
	if aerr != nil {
		writeJSONError(w, aerr.Status, aerr.Code, aerr.Message)
		return
	}
	writeJSON(w, http.StatusOK, enrolBegun{EnrolmentID: id, Options: options})
}

// enrolled is the answer of POST /passkeys/enrol/finish.
type enrolled struct {
	Passkey contracts.Passkey `json:"passkey"`
}

// postEnrolFinish serves POST /passkeys/enrol/finish (form: csrf,
// enrolment_id, name, credential: the PublicKeyCredential as JSON).
func (in *Inbox) postEnrolFinish(w http.ResponseWriter, r *http.Request, sess *session) {
	if why := in.mayEnrol(sess); why != "" {
		writeJSONError(w, http.StatusForbidden, codeSignInRequired, why)
		return
	}
	f := r.PostForm
	pk, aerr := in.api.FinishPasskeyEnrolment(r.Context(), &sess.p, f.Get("enrolment_id"), f.Get("name"), []byte(f.Get("credential")))
	if aerr != nil {
		in.log.Info("inbox passkey enrolment refused", "subject", sess.p.Subject, "code", aerr.Code)
		writeJSONError(w, aerr.Status, aerr.Code, aerr.Message)
		return
	}
	in.log.Info("inbox passkey enrolled", "subject", sess.p.Subject, "credential_id", pk.ID, "method", sess.method)
	writeJSON(w, http.StatusOK, enrolled{Passkey: pk})
}

// postStatement serves POST /approvals/{event_id}/statement (form: csrf,
// decision approve or edit, arguments: an edit's arguments as typed): the
// statement the person's passkey signs, and the options of
// navigator.credentials.get. An edit's arguments are read exactly as the
// decide form reads them, so that the statement names the arguments the
// vote will carry.
func (in *Inbox) postStatement(w http.ResponseWriter, r *http.Request, sess *session) {
	id := r.PathValue("event_id")
	if !contracts.ValidEventID(id) {
		writeJSONError(w, http.StatusNotFound, api.CodeUnknownEvent, "There is no such approval.")
		return
	}
	decision := r.PostForm.Get("decision")
	var edited json.RawMessage
	if decision == contracts.DecisionEdit {
		var argsErr string
		if edited, argsErr = editedArguments(r.PostForm.Get("arguments")); argsErr != "" {
			writeJSONError(w, http.StatusBadRequest, api.CodeInvalidArguments, argsErr)
			return
		}
	}
	ans, aerr := in.api.Statement(r.Context(), &sess.p, id, decision, edited)
	if aerr != nil {
		writeJSONError(w, aerr.Status, aerr.Code, aerr.Message)
		return
	}
	writeJSON(w, http.StatusOK, ans)
}

// jsonHandler serves a JSON route for a signed-in person.
type jsonHandler func(w http.ResponseWriter, r *http.Request, sess *session)

// jsonPost wraps a form post that answers JSON: the security headers, the
// session, the form and its CSRF token (field csrf or header
// X-CSRF-Token), each refusal answered {"error": {"code", "message"}}.
func (in *Inbox) jsonPost(h jsonHandler) http.HandlerFunc {
	return in.secure(func(w http.ResponseWriter, r *http.Request) {
		sess, err := in.sessionOf(r)
		if err != nil {
			w.Header().Set("Retry-After", "2")
			writeJSONError(w, http.StatusServiceUnavailable, api.CodeUnavailable, "The inbox cannot read your session right now; try again in a moment.")
			return
		}
		if sess == nil {
			writeJSONError(w, http.StatusUnauthorized, codeSignedOut, "Sign in first, then try again.")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		if err := r.ParseForm(); err != nil {
			writeJSONError(w, http.StatusBadRequest, codeMalformed, "The form could not be read. Reload the page and try again.")
			return
		}
		if !validCSRF(sess, r) {
			in.log.Warn("inbox post without a valid CSRF token", "path", r.URL.Path, "subject", sess.p.Subject)
			writeJSONError(w, http.StatusForbidden, codeInvalidCSRF, "The page is out of date or the request was not sent by the inbox. Reload the page and try again.")
			return
		}
		api.LogCaller(w, sess.p.Name)
		h(w, r, sess)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		status, data = http.StatusInternalServerError, []byte(`{"error":{"code":"internal","message":"internal error"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(data)
}

func writeJSONError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": message}})
}

// stepUpView is what the approval page of a step_up passkey request shows
// around its approve and edit forms.
type stepUpView struct {
	// Off: passkeys are not set up on this server; approvals cannot count.
	Off bool
	// Enrolled: the person has a passkey that is not revoked.
	Enrolled bool
}

// stepUp is the step-up view of rec for sess, nil when its approvals need
// no passkey (or it is decided).
func (in *Inbox) stepUp(ctx context.Context, rec *contracts.Record, sess *session) *stepUpView {
	if rec.Request.StepUp != contracts.StepUpPasskey || rec.Request.ToolCall == nil || rec.Terminal() {
		return nil
	}
	v := &stepUpView{}
	if _, ok := in.api.Party(); !ok {
		v.Off = true
		return v
	}
	keys, _, aerr := in.api.PasskeysOf(ctx, sess.p.Subject)
	if aerr != nil {
		// Unknown: the page offers to sign, and the arbiter decides.
		v.Enrolled = true
		return v
	}
	for _, c := range keys.Credentials {
		if !c.Revoked() {
			v.Enrolled = true
		}
	}
	return v
}

// passkeyFromForm reads the decide form's passkey assertion: nil when the
// form carries none, or a message when it cannot be read.
func passkeyFromForm(f url.Values) (*contracts.PasskeyAssertion, string) {
	text := strings.TrimSpace(f.Get(passkeyField))
	if text == "" {
		return nil, ""
	}
	var a contracts.PasskeyAssertion
	dec := json.NewDecoder(bytes.NewReader([]byte(text)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil || dec.More() {
		return nil, "The passkey signature could not be read. Sign again."
	}
	return &a, ""
}
