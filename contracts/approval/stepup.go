package approval

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/passkey"
)

// NeedsPasskey reports whether v counts on rec only with a passkey
// assertion: an approval or an edit of a request whose rule says step_up
// passkey. A rejection needs none: it can only keep the call from running.
func NeedsPasskey(rec *contracts.Record, v *contracts.Vote) bool {
	return rec.Request.StepUp == contracts.StepUpPasskey &&
		(v.Decision == contracts.DecisionApprove || v.Decision == contracts.DecisionEdit)
}

// StatementFor is the statement an approver signs to cast decision on rec
// at t, with edited arguments for an edit. It is what the inbox asks the
// passkey to sign, and what PasskeyRefusal expects the assertion to carry.
func StatementFor(rec *contracts.Record, approver, decision string, edited json.RawMessage, t time.Time) (passkey.Statement, error) {
	if rec.Request.ToolCall == nil {
		return passkey.Statement{}, fmt.Errorf("request %s asks no tool call", rec.Request.EventID)
	}
	editSHA := ""
	if decision == contracts.DecisionEdit {
		sha, err := contracts.ArgumentsSHA256(edited)
		if err != nil {
			return passkey.Statement{}, fmt.Errorf("edited arguments: %w", err)
		}
		editSHA = sha
	}
	return passkey.NewStatement(rec.Request.EventID, approver, rec.Request.ToolCall.Name,
		currentArgsSHA(*rec), decision, editSHA, t), nil
}

// PasskeyRefusal says why v may not count on rec (a reason and its
// detail), or "" when it may: a vote NeedsPasskey must carry an assertion
// by one of the voter's enrolled, unrevoked passkeys (keys, read at the
// moment the vote is counted), valid for party, over the statement of
// exactly this vote on the arguments now under review, made within
// passkey.MaxAge before the vote was taken (v.DecidedAt, the resolver's
// clock; now when unset).
func PasskeyRefusal(rec *contracts.Record, v *contracts.Vote, keys *contracts.Passkeys, party *contracts.PasskeyParty, now time.Time) (reason, detail string) {
	if !NeedsPasskey(rec, v) {
		return "", ""
	}
	a := v.Passkey
	if a == nil {
		return contracts.ReasonStepUpRequired, "this rule counts an approval only with a passkey assertion over its statement"
	}
	if party == nil || party.RPID == "" {
		return contracts.ReasonPasskeyUnknown, "passkeys are not set up on this server"
	}
	cred, ok := passkey.Find(keys, a.CredentialID)
	if !ok || keys.Person != v.Approver.ID {
		return contracts.ReasonPasskeyUnknown, "the credential is not one of " + v.Approver.ID + "'s passkeys"
	}
	if cred.Revoked() {
		return contracts.ReasonPasskeyUnknown, "the passkey " + cred.Name + " was revoked"
	}
	st, err := passkey.Verify(*a, cred.PublicKey, *party)
	if err != nil {
		return passkey.CodeOf(err), err.Error()
	}
	edited := ""
	if v.Decision == contracts.DecisionEdit {
		edited = editedSHA(*v)
	}
	want := passkey.Expected{
		EventID: rec.Request.EventID, Approver: v.Approver.ID, Tool: rec.Request.ToolCall.Name,
		ArgumentsSHA256: currentArgsSHA(*rec), Decision: v.Decision, EditedArgumentsSHA256: edited,
	}
	if err := passkey.Expect(st, want); err != nil {
		return passkey.CodeOf(err), err.Error()
	}
	at := now
	if !v.DecidedAt.IsZero() {
		at = v.DecidedAt
	}
	if err := passkey.Fresh(st, at, passkey.MaxAge); err != nil {
		return passkey.CodeOf(err), err.Error()
	}
	return "", ""
}

// Signatures are the passkey assertions of the approvals that decided rec,
// one per approver, in the order the approvers are named in its outcome:
// what its receipt carries. Nil for a request without step_up.
func Signatures(rec contracts.Record) []contracts.PasskeyAssertion {
	if rec.Request.StepUp != contracts.StepUpPasskey || rec.Outcome == nil {
		return nil
	}
	sha := rec.Outcome.ArgumentsSHA256
	base := ""
	if rec.Request.ToolCall != nil {
		base = rec.Request.ToolCall.ArgumentsSHA256
	}
	var out []contracts.PasskeyAssertion
	for _, id := range rec.Outcome.DecidedBy {
		for _, v := range rec.Votes {
			if v.Approver.ID != id || v.Passkey == nil {
				continue
			}
			counts := v.Decision == contracts.DecisionEdit && editedSHA(v) == sha ||
				v.Decision == contracts.DecisionApprove && argsUnderReviewAt(rec, v.VoteID, base) == sha
			if counts {
				out = append(out, *v.Passkey)
				break
			}
		}
	}
	return out
}
