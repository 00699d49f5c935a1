package approval

import (
	"bytes"
	"encoding/json"
	"slices"
	"time"

	"github.com/countersign/countersign/contracts"
)

// Result is what applying one vote or command to a record gives. The
// functions that produce it are pure: no I/O, time comes in as an argument.
type Result struct {
	// Record is the new record; meaningful when Changed.
	Record contracts.Record
	// Changed reports whether the record must be written.
	Changed bool
	// Refusal is the reason code when the vote or command was not applied.
	Refusal string
	// Decided reports whether this change made the record terminal.
	Decided bool
	// Duplicate reports that the vote or command was already applied: a
	// redelivery, which changes nothing.
	Duplicate bool
	// Encoded, when set, is Record encoded by contracts.Marshal, made while
	// checking its size (ApplyVoteWithin); whoever changes Record after
	// that must clear it.
	Encoded []byte
}

// NewRecord is the pending record for a request.
func NewRecord(req contracts.ApprovalRequested, now time.Time) contracts.Record {
	return contracts.Record{
		Spec:         contracts.SpecRecord,
		Request:      req,
		Status:       contracts.StatusPending,
		ExpiresAt:    req.ExpiresAt,
		Votes:        []contracts.Vote{},
		RefusedVotes: []contracts.RefusedVote{},
		UpdatedAt:    now,
	}
}

// clone copies the parts of a record that applying a vote may change.
func clone(r contracts.Record) contracts.Record {
	r.Votes = slices.Clone(r.Votes)
	r.RefusedVotes = slices.Clone(r.RefusedVotes)
	if r.Outcome != nil {
		o := *r.Outcome
		r.Outcome = &o
	}
	if r.Claim != nil {
		c := *r.Claim
		r.Claim = &c
	}
	return r
}

// ApplyVote applies v to rec at now, with no directory: the record alone
// says who may decide (see ApplyVoteAs).
func ApplyVote(rec contracts.Record, v contracts.Vote, now time.Time) Result {
	return applyVote(rec, v, now, nil, (*Roster)(nil).Issuer(v.Approver.ID))
}

// ApplyVoteBy is ApplyVote judged by the live directory r, without the
// size budget (see ApplyVoteAs).
func ApplyVoteBy(rec contracts.Record, v contracts.Vote, now time.Time, r *Roster) Result {
	who := r.Issuer(v.Approver.ID)
	if who.Listed {
		v.Approver.ID = who.ID
	}
	return applyVote(rec, v, now, r, who)
}

func applyVote(rec contracts.Record, v contracts.Vote, now time.Time, r *Roster, who Issuer) Result {
	if isDuplicate(rec, v.VoteID) {
		return Result{Duplicate: true}
	}
	if reason := refuse(rec, v, r, who); reason != "" {
		return Refuse(rec, v, reason, refusalDetail(rec, v, reason), now)
	}
	next := clone(rec)
	next.UpdatedAt = now
	req := &next.Request
	switch v.Decision {
	case contracts.DecisionReject:
		next.Votes = append(next.Votes, v)
		if req.Quorum.Veto || !approvalStillPossible(next) {
			decide(&next, contracts.StatusRejected, v, now, nil)
			next.Outcome.Reason = v.Comment
		}
	case contracts.DecisionRespond:
		next.Votes = append(next.Votes, v)
		decide(&next, contracts.StatusResponded, v, now, nil)
	case contracts.DecisionAnswer:
		next.Votes = append(next.Votes, v)
		decide(&next, contracts.StatusAnswered, v, now, nil)
		if v.Answer != nil {
			next.Outcome.Arguments = v.Answer.Content
			next.Outcome.Action = v.Answer.Action
		}
	case contracts.DecisionApprove, contracts.DecisionEdit:
		next.Votes = append(next.Votes, v)
		approvers := approvalsFor(next, currentArgsSHA(next))
		if len(approvers) >= max(1, req.Quorum.Required) {
			decide(&next, contracts.StatusApproved, v, now, approvers)
		}
	}
	return Result{Record: next, Changed: true, Decided: next.Status != contracts.StatusPending}
}

// ApplyVoteWithin applies v to rec at now like ApplyVote, within the size
// budget lim: a vote that breaks the contract's rules for a vote
// (contracts.Limits.CheckVote: sizes, fields, decision kinds) is refused with
// that rule's code, and a vote whose record would not fit is refused as
// too_large — a vote that does not decide must also leave the room the
// record keeps for its decision and history (contracts.Limits.RecordFits).
// Such refusals are final: the same vote can never fit later.
func ApplyVoteWithin(rec contracts.Record, v contracts.Vote, now time.Time, lim contracts.Limits) Result {
	return ApplyVoteAs(rec, v, now, lim, nil)
}

// ApplyVoteAs is ApplyVoteWithin judged by the live directory r: the
// approver must be listed in it (unknown_approver), within the request's
// tenant by the directory's word (wrong_tenant), and is counted under the
// directory's id for them, so that names which compare equal canonically
// are one person. A nil r is no directory (see Roster).
func ApplyVoteAs(rec contracts.Record, v contracts.Vote, now time.Time, lim contracts.Limits, r *Roster) Result {
	if isDuplicate(rec, v.VoteID) {
		return Result{Duplicate: true}
	}
	if e := lim.CheckVote(&v); e != nil {
		return Refuse(rec, v, e.Code, e.Field+": "+e.Message, now)
	}
	res := ApplyVoteBy(rec, v, now, r)
	if !res.Changed || res.Refusal != "" {
		return res
	}
	var err error
	if res.Decided {
		res.Encoded, err = lim.EncodeRecordSizeOK(&res.Record)
	} else {
		res.Encoded, err = lim.EncodeRecordFits(&res.Record)
	}
	if err != nil {
		return Refuse(rec, v, contracts.ReasonTooLarge, "the approval record has no room for this vote", now)
	}
	return res
}

func isDuplicate(rec contracts.Record, voteID string) bool {
	for _, old := range rec.Votes {
		if old.VoteID == voteID {
			return true
		}
	}
	for _, old := range rec.RefusedVotes {
		if old.VoteID == voteID {
			return true
		}
	}
	return false
}

// refuse returns the reason v, sent by who, cannot count, or "".
func refuse(rec contracts.Record, v contracts.Vote, r *Roster, who Issuer) string {
	req := rec.Request
	if v.Approver.ID == "" || !validDecision(v.Decision) || v.EventID != req.EventID {
		return contracts.ReasonMalformed
	}
	if rec.Status != contracts.StatusPending {
		return contracts.ReasonClosed
	}
	if len(req.AllowedDecisions) > 0 && !slices.Contains(req.AllowedDecisions, v.Decision) {
		return contracts.ReasonDecisionNotAllowed
	}
	if (req.Kind == contracts.KindHumanInput) != (v.Decision == contracts.DecisionAnswer) {
		return contracts.ReasonDecisionNotAllowed
	}
	if v.ArgumentsSHA256 != "" && v.ArgumentsSHA256 != currentArgsSHA(rec) {
		return contracts.ReasonStaleArguments
	}
	if reason := voterRefusal(&rec, who); reason != "" {
		return reason
	}
	// The resolver's word on the approver's tenants can only narrow what
	// the directory allows.
	if !InTenants(req.Run.Tenant, v.ApproverTenants) {
		return contracts.ReasonWrongTenant
	}
	if !IsApprover(&rec, v.Approver.ID) {
		return contracts.ReasonNotAnApprover
	}
	approving := v.Decision == contracts.DecisionApprove || v.Decision == contracts.DecisionEdit
	if approving && !req.Quorum.AllowSelfApproval && IsRequester(r, &rec, v.Approver.ID) {
		return contracts.ReasonSelfApproval
	}
	for _, old := range rec.Votes {
		if r.Same(old.Approver.ID, v.Approver.ID) {
			return contracts.ReasonDuplicateVote
		}
	}
	if approving && req.Quorum.Order == contracts.OrderSequence {
		if next := nextInSequence(rec); next != "" && next != v.Approver.ID {
			return contracts.ReasonOutOfOrder
		}
	}
	switch v.Decision {
	case contracts.DecisionEdit:
		if !isJSONObject(v.Arguments) || editedSHA(v) == "" {
			return contracts.ReasonInvalidArguments
		}
	case contracts.DecisionAnswer:
		if v.Answer == nil || !validAnswerAction(v.Answer.Action) {
			return contracts.ReasonInvalidArguments
		}
	}
	if CheckVoteContent(&req, &v) != nil {
		return contracts.ReasonInvalidArguments
	}
	if v.Grant != nil && (!approving && asksGrant(v.Grant) || CheckGrantRequest(&req, v.Grant) != "") {
		return contracts.ReasonGrantNotAllowed
	}
	return ""
}

// maxRefusedDecision bounds, encoded, the decision a malformed vote named
// as its refused entry keeps it.
const maxRefusedDecision = 32

func validDecision(d string) bool { return contracts.ValidDecision(d) }

func validAnswerAction(a string) bool { return contracts.ValidAnswerAction(a) }

func isJSONObject(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return false
	}
	var m map[string]json.RawMessage
	return json.Unmarshal(raw, &m) == nil
}

// inEscalation reports whether id was added by an escalation tier already reached.
func inEscalation(rec contracts.Record, id string) bool {
	for i, tier := range rec.Request.Escalation {
		if i >= rec.EscalationLevel {
			break
		}
		if slices.Contains(tier.Approvers, id) {
			return true
		}
	}
	return false
}

// currentArgsSHA is the hash of the arguments now under review: the newest
// edit's, else the requested ones.
func currentArgsSHA(rec contracts.Record) string {
	for i := len(rec.Votes) - 1; i >= 0; i-- {
		if rec.Votes[i].Decision == contracts.DecisionEdit {
			return editedSHA(rec.Votes[i])
		}
	}
	if rec.Request.ToolCall != nil {
		return rec.Request.ToolCall.ArgumentsSHA256
	}
	return ""
}

// editedSHA is the hash of the arguments an edit vote proposes. The vote's own
// arguments_sha256 is the hash of what the approver saw, not of the edit.
func editedSHA(v contracts.Vote) string {
	sha, err := contracts.ArgumentsSHA256(v.Arguments)
	if err != nil {
		return ""
	}
	return sha
}

// currentArgs is the arguments now under review.
func currentArgs(rec contracts.Record) json.RawMessage {
	for i := len(rec.Votes) - 1; i >= 0; i-- {
		if rec.Votes[i].Decision == contracts.DecisionEdit {
			return rec.Votes[i].Arguments
		}
	}
	if rec.Request.ToolCall != nil {
		return rec.Request.ToolCall.Arguments
	}
	return nil
}

// approvalsFor lists the distinct approvers whose approval counts for the
// arguments with hash sha: approvals given for other arguments no longer count.
func approvalsFor(rec contracts.Record, sha string) []string {
	var ids []string
	base := ""
	if rec.Request.ToolCall != nil {
		base = rec.Request.ToolCall.ArgumentsSHA256
	}
	for _, v := range rec.Votes {
		var voted string
		switch v.Decision {
		case contracts.DecisionEdit:
			voted = editedSHA(v)
		case contracts.DecisionApprove:
			// An approval counts for the arguments under review when it was cast.
			voted = argsUnderReviewAt(rec, v.VoteID, base)
		default:
			continue
		}
		if voted == sha && !slices.Contains(ids, v.Approver.ID) {
			ids = append(ids, v.Approver.ID)
		}
	}
	return ids
}

// argsUnderReviewAt is the arguments hash under review when the vote voteID was cast.
func argsUnderReviewAt(rec contracts.Record, voteID, base string) string {
	cur := base
	for _, v := range rec.Votes {
		if v.VoteID == voteID {
			return cur
		}
		if v.Decision == contracts.DecisionEdit {
			cur = editedSHA(v)
		}
	}
	return cur
}

// chain is the ordered approver list of a request: its approvers, then each
// escalation tier already reached, without repeats.
func chain(rec contracts.Record) []string {
	out := slices.Clone(rec.Request.Quorum.Approvers)
	for i, tier := range rec.Request.Escalation {
		if i >= rec.EscalationLevel {
			break
		}
		for _, id := range tier.Approvers {
			if !slices.Contains(out, id) {
				out = append(out, id)
			}
		}
	}
	return out
}

// canApprove reports whether id may still cast a counting approval: not
// yet voted, and not the requester or owner unless the request allows it.
func canApprove(rec contracts.Record, id string, voted map[string]bool) bool {
	if voted[id] {
		return false
	}
	return rec.Request.Quorum.AllowSelfApproval || !IsRequester(nil, &rec, id)
}

// nextInSequence is, for an ordered chain, the approver whose approval is
// due next: the first in chain order who can still approve. "" when the
// chain is open (no approver list) or nobody is left.
func nextInSequence(rec contracts.Record) string {
	voted := map[string]bool{}
	for _, v := range rec.Votes {
		voted[v.Approver.ID] = true
	}
	for _, id := range chain(rec) {
		if canApprove(rec, id, voted) {
			return id
		}
	}
	return ""
}

// approvalStillPossible reports whether enough approvers who have not voted
// remain to reach the quorum. With an open approver list it always is.
func approvalStillPossible(rec contracts.Record) bool {
	q := rec.Request.Quorum
	if len(q.Approvers) == 0 {
		return true
	}
	pool := slices.Clone(q.Approvers)
	for _, tier := range rec.Request.Escalation {
		pool = append(pool, tier.Approvers...)
	}
	slices.Sort(pool)
	pool = slices.Compact(pool)
	voted := map[string]bool{}
	for _, v := range rec.Votes {
		voted[v.Approver.ID] = true
	}
	have := len(approvalsFor(rec, currentArgsSHA(rec)))
	remaining := 0
	for _, id := range pool {
		if canApprove(rec, id, voted) {
			remaining++
		}
	}
	return have+remaining >= max(1, q.Required)
}

func decide(rec *contracts.Record, status string, v contracts.Vote, now time.Time, by []string) {
	rec.Status = status
	if by == nil {
		by = []string{v.Approver.ID}
	}
	out := &contracts.Outcome{
		Decision:  v.Decision,
		Comment:   v.Comment,
		DecidedBy: by,
		DecidedAt: now,
	}
	if status == contracts.StatusApproved {
		approvedArguments(out, *rec)
	}
	rec.Outcome = out
}

// approvedArguments sets the arguments an approved outcome binds: those under
// review, their hash, and their diff from the requested ones if they differ.
func approvedArguments(out *contracts.Outcome, rec contracts.Record) {
	out.Arguments = currentArgs(rec)
	out.ArgumentsSHA256 = currentArgsSHA(rec)
	if rec.Request.ToolCall != nil && out.ArgumentsSHA256 != rec.Request.ToolCall.ArgumentsSHA256 {
		out.Diff = Diff(rec.Request.ToolCall.Arguments, out.Arguments)
	}
}

// Refuse records v as refused on rec with reason and detail (cut to the
// size the budget reserves for it): the record's refused-vote history keeps
// the newest entries and counts the rest.
func Refuse(rec contracts.Record, v contracts.Vote, reason, detail string, now time.Time) Result {
	next := clone(rec)
	next.UpdatedAt = now
	decision := v.Decision
	if !validDecision(decision) {
		decision = contracts.TruncateEncoded(decision, maxRefusedDecision)
	}
	// A refused vote's entry has a bounded size (the budget reserves room
	// for a full history): its detail is cut to fit.
	next.RefusedVotes = append(next.RefusedVotes, contracts.RefusedVote{
		VoteID: v.VoteID, Approver: v.Approver, Decision: decision, Reason: reason,
		Detail: contracts.TruncateEncoded(detail, contracts.MaxRefusalDetailBytes), At: now,
	})
	if n := len(next.RefusedVotes) - contracts.MaxRefusedVotes; n > 0 {
		next.RefusedVotes = slices.Clone(next.RefusedVotes[n:])
		next.RefusedVotesOmitted += n
	}
	return Result{Record: next, Changed: true, Refusal: reason}
}

// ApplyCommand applies cmd to rec at now with no directory (see
// ApplyCommandAs).
func ApplyCommand(rec contracts.Record, cmd contracts.Command, now time.Time) Result {
	return ApplyCommandAs(rec, cmd, now, nil)
}

// ApplyCommandAs applies cmd to rec at now, its issuer (cmd.By) judged by
// the live directory r (CommandRefusal), whatever credential published it.
// Claims are idempotent per claim id; a claim more than the request's
// claim_within after the approval is refused as approval_lapsed, and the
// record keeps that it lapsed. An extend only ever moves the deadline
// later.
func ApplyCommandAs(rec contracts.Record, cmd contracts.Command, now time.Time, r *Roster) Result {
	switch cmd.Command {
	case contracts.CommandClaim:
		if rec.Claim != nil {
			if rec.Claim.ClaimID == cmd.ClaimID {
				return Result{Duplicate: true}
			}
			return Result{Refusal: contracts.ReasonAlreadyClaimed}
		}
		if reason := CommandRefusal(r, &rec, cmd.Command, r.Issuer(cmd.By)); reason != "" {
			return Result{Refusal: reason}
		}
		if rec.Status != contracts.StatusApproved {
			return Result{Refusal: contracts.ReasonNotApproved}
		}
		if Lapsed(&rec, now) {
			if rec.LapsedAt != nil {
				return Result{Refusal: contracts.ReasonApprovalLapsed}
			}
			next := clone(rec)
			next.UpdatedAt = now
			at := now
			next.LapsedAt = &at
			return Result{Record: next, Changed: true, Refusal: contracts.ReasonApprovalLapsed}
		}
		next := clone(rec)
		next.UpdatedAt = now
		next.Claim = &contracts.Claim{ClaimID: cmd.ClaimID, At: now, By: cmd.By}
		return Result{Record: next, Changed: true}
	case contracts.CommandOutcome:
		return applyOutcome(rec, cmd, now, r)
	case contracts.CommandCancel:
		if rec.Status == contracts.StatusCancelled && rec.Outcome != nil && rec.Outcome.Reason == "cancel:"+cmd.CommandID {
			return Result{Duplicate: true}
		}
		if rec.Status != contracts.StatusPending {
			return Result{Refusal: contracts.ReasonClosed}
		}
		if reason := CommandRefusal(r, &rec, cmd.Command, r.Issuer(cmd.By)); reason != "" {
			return Result{Refusal: reason}
		}
		next := clone(rec)
		next.UpdatedAt = now
		next.Status = contracts.StatusCancelled
		next.Outcome = &contracts.Outcome{Decision: contracts.CommandCancel, DecidedBy: []string{cmd.By}, DecidedAt: now, Reason: "cancel:" + cmd.CommandID}
		return Result{Record: next, Changed: true, Decided: true}
	case contracts.CommandExtend:
		if rec.Status != contracts.StatusPending {
			return Result{Refusal: contracts.ReasonClosed}
		}
		if !cmd.Until.After(now) {
			return Result{Refusal: contracts.ReasonMalformed}
		}
		if cmd.Until.Equal(rec.ExpiresAt) {
			return Result{Duplicate: true}
		}
		if reason := CommandRefusal(r, &rec, cmd.Command, r.Issuer(cmd.By)); reason != "" {
			return Result{Refusal: reason}
		}
		if !cmd.Until.After(rec.ExpiresAt) {
			return Result{Refusal: contracts.ReasonDeadlineNotLater}
		}
		next := clone(rec)
		next.UpdatedAt = now
		next.ExpiresAt = cmd.Until
		return Result{Record: next, Changed: true}
	}
	return Result{Refusal: contracts.ReasonMalformed}
}

// Expire applies the request's on_timeout at now if the record is still
// pending and its deadline has passed; otherwise it changes nothing.
func Expire(rec contracts.Record, now time.Time) Result {
	if rec.Status != contracts.StatusPending || now.Before(rec.ExpiresAt) {
		return Result{Duplicate: true}
	}
	next := clone(rec)
	next.UpdatedAt = now
	out := &contracts.Outcome{DecidedBy: []string{contracts.DecidedByTimeout}, DecidedAt: now, Reason: "timeout"}
	// Time approves only a tool call whose rule says so: a human_input
	// request has nothing to approve, so it expires.
	if rec.Request.OnTimeout == contracts.OnTimeoutApprove && rec.Request.Kind != contracts.KindHumanInput {
		next.Status = contracts.StatusApproved
		out.Decision = contracts.DecisionApprove
		approvedArguments(out, next)
	} else {
		next.Status = contracts.StatusExpired
		out.Decision = contracts.DecisionReject
	}
	next.Outcome = out
	return Result{Record: next, Changed: true, Decided: true}
}

// Escalate raises rec to escalation level (counting tiers from 1) at now,
// which lets that tier's approvers, and every earlier tier's, decide. It
// changes nothing for a decided record or one already at or above level.
func Escalate(rec contracts.Record, level int, now time.Time) Result {
	if rec.Status != contracts.StatusPending || level <= rec.EscalationLevel || level > len(rec.Request.Escalation) {
		return Result{Duplicate: true}
	}
	next := clone(rec)
	next.EscalationLevel = level
	next.UpdatedAt = now
	return Result{Record: next, Changed: true}
}

// applyOutcome records the claimant's report of how the call ended: once,
// after a claim, from whoever claimed (or, for a claim recorded without
// its claimant, from whoever may claim). A report retried with its command
// id is a duplicate.
func applyOutcome(rec contracts.Record, cmd contracts.Command, now time.Time, r *Roster) Result {
	if rec.Execution != nil {
		if rec.Execution.CommandID == cmd.CommandID {
			return Result{Duplicate: true}
		}
		return Result{Refusal: contracts.ReasonOutcomeReported}
	}
	if rec.Claim == nil {
		return Result{Refusal: contracts.ReasonNotClaimed}
	}
	if reason := OutcomeRefusal(r, &rec, r.Issuer(cmd.By)); reason != "" {
		return Result{Refusal: reason}
	}
	next := clone(rec)
	next.UpdatedAt = now
	next.Execution = &contracts.Execution{
		Status: cmd.Status, Summary: cmd.Summary, ResultSHA256: cmd.ResultSHA256,
		ReportedBy: cmd.By, ReportedAt: now, CommandID: cmd.CommandID,
	}
	return Result{Record: next, Changed: true}
}

// OutcomeRefusal says why who may not report the outcome of rec's call: ""
// for its claimant.
func OutcomeRefusal(r *Roster, rec *contracts.Record, who Issuer) string {
	if rec.Claim == nil {
		return contracts.ReasonNotClaimed
	}
	if rec.Claim.By != "" {
		if r.Same(who.ID, rec.Claim.By) {
			return ""
		}
		return contracts.ReasonNotPermitted
	}
	return CommandRefusal(r, rec, contracts.CommandClaim, who)
}
