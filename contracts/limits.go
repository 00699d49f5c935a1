package contracts

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"unicode/utf8"
)

// ErrTooLarge is wrapped by every error about something that does not fit
// the size budget (see Limits). Its code, ReasonTooLarge, is what the API
// answers and what the arbiter records on a refused vote.
var ErrTooLarge = errors.New(ReasonTooLarge)

// Fixed limits of the contract: the same on every surface, whatever the
// server's max payload.
const (
	// MaxCommentBytes bounds a vote's comment (a reason, or a response).
	MaxCommentBytes = 16 << 10
	// MaxQuestionTextBytes bounds the text of a human_input question.
	MaxQuestionTextBytes = 16 << 10
	// MaxClientIDBytes bounds the ids a client may choose: vote_id,
	// command_id, claim_id (see ValidClientID).
	MaxClientIDBytes = 128
	// MaxApproverIDBytes bounds an approver's id and a command's by.
	MaxApproverIDBytes = 256
	// MaxViaBytes bounds a vote's via (web, slack, email, cli, api, nats, or
	// a trusted integration's own name).
	MaxViaBytes = 32
	// MaxRefusalDetailBytes bounds, encoded, the detail of a refused vote.
	MaxRefusalDetailBytes = 256

	// MaxDiffOverhead is what the diff of an edit may take beyond the new
	// arguments: a diff longer than this and than one replace of the whole
	// value is stored as that replace.
	MaxDiffOverhead = 4 << 10

	// DefaultMaxPayload is the NATS server's default max payload (1 MiB).
	DefaultMaxPayload = 1 << 20
	// HeaderReserve is the part of the max payload kept for message headers
	// (message id, expected revision, trace context).
	HeaderReserve = 4 << 10
)

// Sizes, encoded, of the parts of a record the budget reserves room for.
const (
	// refusedVoteMax is the largest refused-vote entry: a client id, an
	// approver (id and via), a decision, a reason, a detail and a time.
	refusedVoteMax = 160 + MaxClientIDBytes + 2*(MaxApproverIDBytes+MaxViaBytes) + 32 + MaxRefusalDetailBytes
	// commentMax is the largest encoded comment: a valid comment has no
	// control character but tab, newline and carriage return, so no
	// character takes more than twice its bytes once escaped.
	commentMax = 2*MaxCommentBytes + 2
	// approverMax is one encoded approver id with its separator.
	approverMax = 2*MaxApproverIDBytes + 3
	// voteMax is a vote without its comment, arguments and answer content.
	voteMax = 400 + MaxClientIDBytes + 64 + 2*(MaxApproverIDBytes+MaxViaBytes) + 2*36
	// outcomeMax is an outcome without its arguments, diff, comment, reason and deciders.
	outcomeMax = 300 + 64 + 64
	// claimMax is a claim.
	claimMax = 100 + MaxClientIDBytes
	// recordSlack covers what timers change (escalation level, times).
	recordSlack = 1 << 10
	// fixedReserve is the room every record keeps whatever its request:
	// the refused-vote history, a claim, and a vote with a comment that
	// also goes to the outcome as comment and reason.
	fixedReserve = MaxRefusedVotes*refusedVoteMax + claimMax + recordSlack + voteMax + outcomeMax + 3*commentMax
)

// Limits is the size budget, derived from the NATS server's max payload
// (nats.Conn.MaxPayload) by LimitsFor. It is defined so that every request
// that passes CheckRequest can reach every terminal state — approve, edit,
// reject, respond, answer, expire, cancel, then claim — with the largest
// votes every surface accepts and a full refused-vote history, and still be
// written: the record, the largest message of all, stays within the payload.
type Limits struct {
	// MaxPayload is the server's max payload the limits derive from.
	MaxPayload int64
	// Record is the largest encoded record value the arbiter writes.
	Record int
	// Arguments bounds the canonical JSON of a tool call's arguments and of
	// an edit's new arguments.
	Arguments int
	// Schema bounds a tool_schema or a question's schema (compact JSON).
	Schema int
	// AnswerContent bounds a human_input answer's content (compact JSON).
	AnswerContent int
}

// LimitsFor derives the size budget from a server's max payload; 0 or less
// means DefaultMaxPayload. Arguments get a sixth of what the fixed reserve
// leaves (a record may hold them four times: requested, edited, approved,
// and as a diff), schemas a twelfth.
func LimitsFor(maxPayload int64) Limits {
	if maxPayload <= 0 {
		maxPayload = DefaultMaxPayload
	}
	rec := int(maxPayload) - HeaderReserve
	free := max(0, rec-fixedReserve)
	return Limits{
		MaxPayload:    maxPayload,
		Record:        rec,
		Arguments:     free / 6,
		Schema:        free / 12,
		AnswerContent: free / 6,
	}
}

// FieldError says which field of a request, vote or command breaks a rule
// of the contract. Code is a stable reason code: ReasonMalformed (a missing,
// unknown or badly formed field), ReasonInvalidArguments (arguments or an
// answer that are not the JSON object they must be) or ReasonTooLarge.
type FieldError struct {
	Code    string
	Field   string
	Message string
}

func (e *FieldError) Error() string { return e.Code + ": " + e.Message }

// Is makes a too_large FieldError match ErrTooLarge.
func (e *FieldError) Is(target error) bool { return target == ErrTooLarge && e.Code == ReasonTooLarge }

func malformed(field, format string, args ...any) *FieldError {
	return &FieldError{Code: ReasonMalformed, Field: field, Message: fmt.Sprintf(format, args...)}
}

func tooLarge(field string, size, limit int) *FieldError {
	return &FieldError{Code: ReasonTooLarge, Field: field,
		Message: fmt.Sprintf("%s is %d bytes, more than the %d bytes allowed", field, size, limit)}
}

// ValidClientID reports whether id can serve as a client-chosen id (vote_id,
// command_id, claim_id) and message id: 1 to MaxClientIDBytes characters of
// A-Z, a-z, 0-9 and - _ . :
func ValidClientID(id string) bool {
	if id == "" || len(id) > MaxClientIDBytes {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':') {
			return false
		}
	}
	return true
}

// ValidDecision reports whether d is one of the decisions a vote can carry.
func ValidDecision(d string) bool { return Decision(d).Valid() }

// ValidAnswerAction reports whether a is accept, decline or cancel.
func ValidAnswerAction(a string) bool {
	return a == AnswerAccept || a == AnswerDecline || a == AnswerCancel
}

// ValidText reports whether s is valid UTF-8 without control characters
// other than tab, newline and carriage return.
func ValidText(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 && c != '\t' && c != '\n' && c != '\r' || c == 0x7f {
			return false
		}
	}
	return true
}

func validVia(via string) bool {
	if via == "" || len(via) > MaxViaBytes {
		return false
	}
	for i := 0; i < len(via); i++ {
		c := via[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// CheckVoteIdentity checks what ties a vote to an approval and a person:
// its spec, vote_id and approver. A vote that fails cannot be recorded as
// refused on the approval (there is no sound id or approver to record), so
// the arbiter dead-letters it.
func CheckVoteIdentity(v *Vote) *FieldError {
	switch {
	case v.Spec != SpecVote:
		return malformed("spec", "unknown spec %q", truncateText(v.Spec, 64))
	case !ValidEventID(v.EventID):
		return malformed("event_id", "event_id is not a valid approval id")
	case !ValidClientID(v.VoteID):
		return malformed("vote_id", "vote_id must be 1 to %d characters of A-Z, a-z, 0-9 and - _ . :", MaxClientIDBytes)
	case v.Approver.ID == "" || len(v.Approver.ID) > MaxApproverIDBytes || !ValidText(v.Approver.ID):
		return malformed("approver.id", "approver.id is required: at most %d bytes of text", MaxApproverIDBytes)
	case !validVia(v.Approver.Via):
		return malformed("approver.via", "approver.via is required: at most %d characters of a-z, 0-9, - and _", MaxViaBytes)
	}
	return nil
}

// CheckVote checks what a vote carries against the rules every surface
// shares: a known decision; a comment of valid text within MaxCommentBytes
// (required to respond); arguments only on an edit, a JSON object within
// l.Arguments; an answer only on an answer vote, with a known action and
// content, within l.AnswerContent, only when accepted. The HTTP API, the
// channels' resolver and the arbiter all apply it; the arbiter records a
// vote that fails as refused with the error's code. Checks against the
// request (its schemas, allowed decisions) are the arbiter's.
func (l Limits) CheckVote(v *Vote) *FieldError {
	switch {
	case v.Decision == "":
		return malformed("decision", "decision is required (approve, reject, edit, respond, answer)")
	case !ValidDecision(v.Decision):
		return malformed("decision", "unknown decision %q (approve, reject, edit, respond, answer)", truncateText(v.Decision, 32))
	case len(v.Comment) > MaxCommentBytes:
		return tooLarge("comment", len(v.Comment), MaxCommentBytes)
	case !ValidText(v.Comment):
		return malformed("comment", "comment must be UTF-8 text without control characters")
	case len(v.ArgumentsSHA256) > 64:
		return malformed("arguments_sha256", "arguments_sha256 must be a hex SHA-256")
	case v.Passkey != nil && v.Passkey.size() > MaxPasskeyAssertionBytes:
		return tooLarge("passkey", v.Passkey.size(), MaxPasskeyAssertionBytes)
	}
	switch v.Decision {
	case DecisionEdit:
		args := bytes.TrimSpace(v.Arguments)
		if len(args) == 0 || args[0] != '{' {
			return &FieldError{Code: ReasonInvalidArguments, Field: "arguments", Message: "an edit must carry the new arguments as a JSON object"}
		}
		canon, err := Canonicalize(args)
		if err != nil {
			return &FieldError{Code: ReasonInvalidArguments, Field: "arguments", Message: "arguments: " + err.Error()}
		}
		if len(canon) > l.Arguments {
			return tooLarge("arguments", len(canon), l.Arguments)
		}
	case DecisionRespond:
		if len(bytes.TrimSpace([]byte(v.Comment))) == 0 {
			return malformed("comment", "respond needs a comment: the text returned to the agent as the tool result")
		}
	case DecisionAnswer:
		if v.Answer == nil {
			return malformed("answer", "an answer needs answer: {action: accept|decline|cancel, content}")
		}
		if !ValidAnswerAction(v.Answer.Action) {
			return malformed("answer.action", "answer.action must be accept, decline or cancel")
		}
		content := bytes.TrimSpace(v.Answer.Content)
		hasContent := len(content) > 0 && string(content) != "null"
		if v.Answer.Action != AnswerAccept && hasContent {
			return malformed("answer.content", "only an accepted answer carries content")
		}
		if hasContent {
			if !json.Valid(content) {
				return &FieldError{Code: ReasonInvalidArguments, Field: "answer.content", Message: "answer.content is not valid JSON"}
			}
			if n := compactLen(content, l.AnswerContent); n > l.AnswerContent {
				return tooLarge("answer.content", n, l.AnswerContent)
			}
		}
	}
	if len(v.Arguments) > 0 && v.Decision != DecisionEdit {
		return malformed("arguments", "only an edit carries arguments")
	}
	if v.Answer != nil && v.Decision != DecisionAnswer {
		return malformed("answer", "only an answer vote carries an answer")
	}
	return nil
}

// CheckCommandFields checks a command's own fields: spec, ids, kind and
// the fields its kind needs.
func CheckCommandFields(c *Command) *FieldError {
	switch {
	case c.Spec != SpecCommand:
		return malformed("spec", "unknown spec %q", truncateText(c.Spec, 64))
	case !ValidEventID(c.EventID):
		return malformed("event_id", "event_id is not a valid approval id")
	case !ValidClientID(c.CommandID):
		return malformed("command_id", "command_id must be 1 to %d characters of A-Z, a-z, 0-9 and - _ . :", MaxClientIDBytes)
	case c.By == "" || len(c.By) > MaxApproverIDBytes || !ValidText(c.By):
		return malformed("by", "by is required: at most %d bytes of text", MaxApproverIDBytes)
	}
	switch c.Command {
	case CommandCancel, CommandRevokeGrant:
	case CommandClaim:
		if !ValidClientID(c.ClaimID) {
			return malformed("claim_id", "claim_id must be 1 to %d characters of A-Z, a-z, 0-9 and - _ . :", MaxClientIDBytes)
		}
	case CommandExtend:
		if c.Until.IsZero() {
			return malformed("until", "until is required")
		}
	case CommandOutcome:
		return checkOutcome(c)
	default:
		return malformed("command", "unknown command %q", truncateText(c.Command, 32))
	}
	return nil
}

// CheckRequestFields checks the parts of a request whose size a client
// controls: arguments and schemas within their limits, a question's text
// within MaxQuestionTextBytes.
func (l Limits) CheckRequestFields(req *ApprovalRequested) *FieldError {
	if req.ToolCall != nil {
		if n := compactLen(req.ToolCall.Arguments, l.Arguments); n > l.Arguments {
			return tooLarge("tool_call.arguments", n, l.Arguments)
		}
	}
	if n := compactLen(req.ToolSchema, l.Schema); n > l.Schema {
		return tooLarge("tool_schema", n, l.Schema)
	}
	if req.Question != nil {
		if len(req.Question.Text) > MaxQuestionTextBytes {
			return tooLarge("question.text", len(req.Question.Text), MaxQuestionTextBytes)
		}
		if n := compactLen(req.Question.Schema, l.Schema); n > l.Schema {
			return tooLarge("question.schema", n, l.Schema)
		}
	}
	return nil
}

// CheckRequest checks that a request fits the budget: its fields within
// their limits, and the record it creates, with the room every terminal
// path needs (RecordFits), within l.Record. Every surface that publishes a
// request (the Go gate, the HTTP API) calls it, or EncodeRequest, first;
// the arbiter calls it again for whatever arrives on the bus. The error
// wraps ErrTooLarge.
func (l Limits) CheckRequest(req *ApprovalRequested) error {
	_, err := l.EncodeRequest(req)
	return err
}

// EncodeRequest is CheckRequest that also returns the request's encoding
// (Marshal), which the check measures the record with, so that a surface
// that publishes the request need not encode it again.
func (l Limits) EncodeRequest(req *ApprovalRequested) ([]byte, error) {
	if e := l.CheckRequestFields(req); e != nil {
		return nil, e
	}
	data, err := Marshal(req)
	if err != nil {
		return nil, err
	}
	rec := Record{
		Spec: SpecRecord, Status: StatusPending, ExpiresAt: req.ExpiresAt,
		Votes: []Vote{}, RefusedVotes: []RefusedVote{}, UpdatedAt: req.CreatedAt,
	}
	// The record holds the request encoded exactly as data is, so its size
	// is that of the record around an empty request, with data in place of
	// the empty request's encoding.
	around, err := Marshal(&rec)
	if err != nil {
		return nil, err
	}
	rec.Request = *req
	if err := l.fits(&rec, len(around)-len(emptyRequest())+len(data)); err != nil {
		return nil, err
	}
	return data, nil
}

// MarshalRecord is Marshal(rec) for a record whose request is already
// encoded as request (Marshal(&rec.Request)), which it reuses instead of
// encoding the request again; with a nil request it is Marshal(rec).
func MarshalRecord(rec *Record, request []byte) ([]byte, error) {
	if request == nil {
		return Marshal(rec)
	}
	around := *rec
	around.Request = ApprovalRequested{}
	data, err := Marshal(&around)
	if err != nil {
		return nil, err
	}
	// The key is unique: a string value holding it would have its quotes
	// escaped.
	empty := append([]byte(`"request":`), emptyRequest()...)
	at := bytes.Index(data, empty)
	if at < 0 {
		return nil, errors.New("contracts: a record's encoding without its request")
	}
	at += len(`"request":`)
	out := make([]byte, 0, len(data)-len(emptyRequest())+len(request))
	out = append(out, data[:at]...)
	out = append(out, request...)
	return append(out, data[at+len(emptyRequest()):]...), nil
}

// emptyRequest is an empty request's encoding.
var emptyRequest = sync.OnceValue(func() []byte {
	data, err := Marshal(&ApprovalRequested{})
	if err != nil {
		panic("contracts: encode an empty request: " + err.Error())
	}
	return data
})

// RecordFits reports, as an error wrapping ErrTooLarge, a record that does
// not fit with the room it must keep: a pending record room for its largest
// terminal transition, every record room for a full refused-vote history
// and a claim. The arbiter checks it before counting a vote that does not
// decide, so that counted votes never crowd out the decision.
func (l Limits) RecordFits(rec *Record) error {
	_, err := l.EncodeRecordFits(rec)
	return err
}

// EncodeRecordFits is RecordFits that also returns the record's encoding
// (Marshal), which the check has to make, so that a caller that stores the
// record need not encode it again.
func (l Limits) EncodeRecordFits(rec *Record) ([]byte, error) {
	data, err := Marshal(rec)
	if err != nil {
		return nil, err
	}
	if err := l.fits(rec, len(data)); err != nil {
		return nil, err
	}
	return data, nil
}

// fits is RecordFits for rec encoded in size bytes.
func (l Limits) fits(rec *Record, size int) error {
	if need := size + l.Reserve(rec); need > l.Record {
		return &FieldError{Code: ReasonTooLarge, Field: "record", Message: fmt.Sprintf(
			"the approval record would need %d bytes with room for its decision and history, more than the %d bytes a message may carry", need, l.Record)}
	}
	return nil
}

// RecordSizeOK reports, as an error wrapping ErrTooLarge, a record whose
// encoding alone does not fit l.Record.
func (l Limits) RecordSizeOK(rec *Record) error {
	_, err := l.EncodeRecordSizeOK(rec)
	return err
}

// EncodeRecordSizeOK is RecordSizeOK that also returns the record's
// encoding (Marshal).
func (l Limits) EncodeRecordSizeOK(rec *Record) ([]byte, error) {
	data, err := Marshal(rec)
	if err != nil {
		return nil, err
	}
	if len(data) > l.Record {
		return nil, tooLarge("record", len(data), l.Record)
	}
	return data, nil
}

// Reserve is the room, in encoded bytes, rec must keep free: the rest of a
// full refused-vote history, a claim, and while pending the largest growth
// of a terminal transition by a vote within the limits (or by time, or a
// cancel).
func (l Limits) Reserve(rec *Record) int {
	refused := MaxRefusedVotes * refusedVoteMax
	for i := range rec.RefusedVotes {
		if data, err := Marshal(rec.RefusedVotes[i]); err == nil {
			refused -= len(data) + 1
		}
	}
	reserve := max(0, refused) + claimMax + ReceiptReserve(&rec.Request) + recordSlack
	if rec.Status != StatusPending {
		return reserve
	}
	deciders := max(1, rec.Request.Quorum.Required) * approverMax
	// reject: the comment goes to the vote, the outcome's comment and its reason.
	growth := voteMax + outcomeMax + 3*commentMax + deciders
	if rec.Request.Kind == KindHumanInput {
		// answer: the content goes to the vote and the outcome.
		growth = max(growth, voteMax+outcomeMax+2*commentMax+2*l.AnswerContent+deciders)
	} else {
		// edit: new arguments in the vote, the outcome and its diff.
		growth = max(growth, voteMax+outcomeMax+2*commentMax+3*l.Arguments+MaxDiffOverhead+deciders)
	}
	return reserve + growth
}

// Marshal encodes v as JSON the way records and messages are stored:
// without HTML escaping, so "<", ">" and "&" take one byte, as in the
// canonical form of arguments.
func Marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// TruncateText shortens s to at most n bytes, at a character boundary.
func TruncateText(s string, n int) string { return truncateText(s, n) }

func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// TruncateEncoded shortens s so that its JSON encoding (quotes excluded)
// takes at most n bytes.
func TruncateEncoded(s string, n int) string {
	size := 0
	for i, r := range s {
		w := utf8.RuneLen(r)
		switch {
		case r == utf8.RuneError:
			w = 6
		case r == '"' || r == '\\' || r == '\n' || r == '\r' || r == '\t':
			w = 2
		case r < 0x20 || r == '\u2028' || r == '\u2029':
			w = 6
		}
		if size+w > n {
			return s[:i]
		}
		size += w
	}
	return s
}

// compactLen is the length of raw JSON without insignificant space (the
// raw length if it is not valid JSON), for a check against limit: raw no
// longer than limit is within it however much space it holds, and its own
// length is returned without compacting it.
func compactLen(raw json.RawMessage, limit int) int {
	if len(raw) <= limit {
		return len(raw)
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return len(raw)
	}
	return b.Len()
}

// checkOutcome checks an outcome report's fields.
func checkOutcome(c *Command) *FieldError {
	switch {
	case c.Status != ExecutionSucceeded && c.Status != ExecutionFailed:
		return malformed("status", "status must be succeeded or failed")
	case len(c.Summary) > MaxExecutionSummaryBytes:
		return tooLarge("summary", len(c.Summary), MaxExecutionSummaryBytes)
	case !ValidText(c.Summary):
		return malformed("summary", "summary must be UTF-8 text without control characters")
	case c.ResultSHA256 != "" && !validHexSHA256(c.ResultSHA256):
		return malformed("result_sha256", "result_sha256 must be 64 lowercase hex digits")
	}
	return nil
}

func validHexSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := range len(s) {
		if !('0' <= s[i] && s[i] <= '9' || 'a' <= s[i] && s[i] <= 'f') {
			return false
		}
	}
	return true
}
