package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/contracts/passkey"
	"github.com/countersign/countersign/contracts/receipt"
	"github.com/countersign/countersign/events"
)

// passkeysAnswer is GET /v1/passkeys: the person's passkeys and the relying
// party they are bound to.
type passkeysAnswer struct {
	Person   string              `json:"person"`
	RPID     string              `json:"rp_id"`
	Passkeys []contracts.Passkey `json:"passkeys"`
}

// personParam is whose passkeys a request means: the caller's own, or,
// for an admin, ?person=.
func personParam(r *http.Request, p *Principal) (string, *Error) {
	person := r.URL.Query().Get("person")
	if person == "" || person == p.Subject {
		return p.Subject, nil
	}
	if !p.Has(RoleAdmin) {
		return "", fieldError(http.StatusForbidden, CodeForbidden, "person", "only an admin may manage another person's passkeys")
	}
	return person, nil
}

// getPasskeys answers GET /v1/passkeys.
func (s *Server) getPasskeys(w http.ResponseWriter, r *http.Request) {
	p := principalFrom(r.Context())
	party, ok := s.Party()
	if !ok {
		writeError(w, errorf(http.StatusNotFound, CodePasskeysOff, "passkeys are not set up on this server (passkeys.rp_id)"))
		return
	}
	person, aerr := personParam(r, p)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	keys, _, aerr := s.PasskeysOf(r.Context(), person)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	writeJSON(w, http.StatusOK, passkeysAnswer{Person: person, RPID: party.RPID, Passkeys: keys.Credentials})
}

// postRevokePasskey answers POST /v1/passkeys/{credential_id}/revoke.
func (s *Server) postRevokePasskey(w http.ResponseWriter, r *http.Request) {
	p := principalFrom(r.Context())
	person, aerr := personParam(r, p)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	pk, aerr := s.RevokePasskey(r.Context(), p, person, r.PathValue("credential_id"))
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	writeJSON(w, http.StatusOK, pk)
}

// StatementAnswer is what an approver's browser needs to sign a decision:
// the statement, the challenge (the SHA-256 of its canonical JSON), and
// the request options for navigator.credentials.get.
type StatementAnswer struct {
	Statement string `json:"statement"`
	Challenge string `json:"challenge"`
	RPID      string `json:"rp_id"`
	// AllowCredentials are the approver's unrevoked passkeys.
	AllowCredentials []string `json:"allow_credentials"`
	UserVerification string   `json:"user_verification"`
	TimeoutMS        int64    `json:"timeout_ms"`
}

type statementBody struct {
	Decision  string          `json:"decision"`
	Arguments json.RawMessage `json:"arguments"`
}

// Statement is the approval statement p signs to cast decision (approve,
// or edit with arguments) on the request id, now.
func (s *Server) Statement(ctx context.Context, p *Principal, id, decision string, edited json.RawMessage) (StatementAnswer, *Error) {
	party, ok := s.Party()
	if !ok {
		return StatementAnswer{}, errorf(http.StatusNotFound, CodePasskeysOff, "passkeys are not set up on this server (passkeys.rp_id)")
	}
	rec, _, aerr := s.readableRecordSoon(ctx, p, id, 0)
	if aerr != nil {
		return StatementAnswer{}, aerr
	}
	if rec.Request.StepUp != contracts.StepUpPasskey || rec.Request.ToolCall == nil {
		return StatementAnswer{}, errorf(http.StatusConflict, CodeStepUpNotApplicable, "this request does not ask approvers to sign with a passkey")
	}
	if decision != contracts.DecisionApprove && decision != contracts.DecisionEdit {
		return StatementAnswer{}, fieldError(http.StatusBadRequest, CodeInvalidField, "decision", "only an approval or an edit is signed (decision approve or edit)")
	}
	st, err := approval.StatementFor(rec, p.Subject, decision, edited, s.cfg.Now())
	if err != nil {
		return StatementAnswer{}, fieldError(http.StatusBadRequest, CodeInvalidArguments, "arguments", "%v", err)
	}
	keys, _, aerr := s.PasskeysOf(ctx, p.Subject)
	if aerr != nil {
		return StatementAnswer{}, aerr
	}
	ans := StatementAnswer{
		Statement: st.Canonical(), Challenge: st.ChallengeB64(), RPID: party.RPID,
		AllowCredentials: []string{}, UserVerification: "required", TimeoutMS: (passkey.MaxAge - time.Minute).Milliseconds(),
	}
	for _, c := range keys.Credentials {
		if !c.Revoked() {
			ans.AllowCredentials = append(ans.AllowCredentials, c.ID)
		}
	}
	return ans, nil
}

// postStatement answers POST /v1/approvals/{event_id}/statement.
func (s *Server) postStatement(w http.ResponseWriter, r *http.Request) {
	id, aerr := eventIDParam(r)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	var body statementBody
	if aerr := decodeBody(w, r, &body, false); aerr != nil {
		writeError(w, aerr)
		return
	}
	ans, aerr := s.Statement(r.Context(), principalFrom(r.Context()), id, body.Decision, body.Arguments)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	writeJSON(w, http.StatusOK, ans)
}

// approversDocTTL is how long a signed approvers document is served before
// it is signed again (a passkey change signs it again at once).
const approversDocTTL = 30 * time.Second

// getApprovers answers GET /.well-known/countersign-approvers: every
// enrolled passkey (revoked ones marked) with its person, and the relying
// party, signed with the receipt key, for tools that require the
// approvers' own signatures.
func (s *Server) getApprovers(w http.ResponseWriter, r *http.Request) {
	party, ok := s.Party()
	if !ok || s.cfg.Receipts == nil {
		writeError(w, errorf(http.StatusNotFound, CodePasskeysOff, "this server publishes no approvers document (it needs passkeys.rp_id and a receipt key)"))
		return
	}
	s.pk.mu.Lock()
	tok, at := s.pk.doc.token, s.pk.doc.at
	s.pk.mu.Unlock()
	if tok == "" || s.cfg.Now().Sub(at) >= approversDocTTL {
		var aerr *Error
		if tok, aerr = s.signApprovers(r.Context(), party); aerr != nil {
			writeError(w, aerr)
			return
		}
	}
	h := w.Header()
	h.Set("Content-Type", "application/jwt")
	h.Set("Cache-Control", "public, max-age=30")
	h.Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write([]byte(tok))
}

// signApprovers lists every person's passkeys and signs the document.
func (s *Server) signApprovers(ctx context.Context, party contracts.PasskeyParty) (string, *Error) {
	kv, err := s.passkeysBucket(ctx)
	if err != nil {
		return "", s.backendError("open the passkeys", err)
	}
	doc := receipt.Approvers{RPID: party.RPID, Origins: party.Origins}
	lister, err := kv.ListKeysFiltered(ctx, "p.*")
	if err != nil {
		return "", s.backendError("list the passkeys", err)
	}
	defer func() { _ = lister.Stop() }()
	for key := range lister.Keys() {
		r, err := events.NewestReadable(ctx, s.cfg.JS, kv, contracts.BucketPasskeys, key, func(data []byte) bool {
			return passkey.OwnedByKey(key, data)
		})
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return "", s.backendError("read the passkeys", err)
		}
		if r.Value == nil {
			continue
		}
		var keys contracts.Passkeys
		if err := json.Unmarshal(r.Value, &keys); err != nil {
			return "", errorf(http.StatusInternalServerError, CodeInternal, "the passkeys under %s cannot be read", key)
		}
		for _, c := range keys.Credentials {
			doc.Keys = append(doc.Keys, receipt.ApproverKey{
				Person: keys.Person, CredentialID: c.ID, PublicKey: c.PublicKey, CreatedAt: c.CreatedAt, RevokedAt: c.RevokedAt,
			})
		}
	}
	tok, err := s.cfg.Receipts.SignApprovers(doc)
	if err != nil {
		return "", errorf(http.StatusInternalServerError, CodeInternal, "sign the approvers document: %v", err)
	}
	s.pk.mu.Lock()
	s.pk.doc.token, s.pk.doc.at = tok, s.cfg.Now()
	s.pk.mu.Unlock()
	return tok, nil
}
