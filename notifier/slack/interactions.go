package slack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	slackgo "github.com/slack-go/slack"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
)

// Defaults and bounds of the interactions handler.
const (
	// MaxInteractionBody is the most of a request body read; a larger
	// request is refused before its signature is checked.
	MaxInteractionBody = 1 << 20
	// DefaultVoteTimeout bounds a button's vote, cast after Slack got its 200.
	DefaultVoteTimeout = 10 * time.Second
	// DefaultSubmitTimeout bounds a modal submission's vote, which Slack
	// waits for (it gives up after three seconds).
	DefaultSubmitTimeout = 2 * time.Second
	// DefaultModalTimeout bounds reading the record and opening a modal;
	// a trigger id expires three seconds after the click.
	DefaultModalTimeout = 2500 * time.Millisecond
	// DefaultRunTimeout bounds the votes of an "Approve all of run" click
	// (up to a batch of 100, each waiting for the arbiter).
	DefaultRunTimeout = 60 * time.Second
	// responseTimeout bounds posting to a response_url or chat.update
	// after a vote.
	responseTimeout = 10 * time.Second
)

// Texts shown privately to the person who clicked.
const (
	textNotInDirectory = "You are not in the Countersign directory, so your click cannot count as a vote. Ask an administrator to link your Slack account."
	textInFlight       = "Your vote is being counted."
	textVoteFailed     = "Countersign could not record your vote right now. Try again in a moment."
	textVoteUnsure     = "Countersign did not confirm your vote in time. It may still be counted; look at the request again in a moment."
	textFormFailed     = "Countersign could not open the form. Try again in a moment."
	textBadButton      = "This button is not valid any more. Open the request in Countersign."
)

// InteractionsConfig wires the interactions handler.
type InteractionsConfig struct {
	// SigningSecret verifies Slack's requests. Required.
	SigningSecret string
	// BotToken opens modals (views.open) and updates messages after a
	// modal's vote (chat.update). Required.
	BotToken string
	// APIURL is the Web API base (default DefaultAPIURL).
	APIURL string
	// HTTPClient calls the Web API and response URLs (default: a client
	// with DefaultHTTPTimeout).
	HTTPClient *http.Client
	// Resolver reads approvals and casts votes. Required.
	Resolver notifier.Resolver
	// Users maps a Slack user id to a Countersign approver id; ok false
	// for a person not in the directory, whose clicks never vote. Required.
	Users func(slackUserID string) (approverID string, ok bool)
	// ReadRule says whether an approver may read a request now
	// (notifier.MayTell against the live directory). A click whose answer
	// would show a request to someone who may not read it (a form, an
	// outcome) is answered as for a request that does not exist. nil lets
	// everyone the directory maps read (a deployment without tenants);
	// serve always sets it.
	ReadRule notifier.ReadRule
	// PublicURL is the base URL of the web inbox, for links in messages.
	PublicURL string
	// Now is the clock (default time.Now): signatures' window and votes'
	// decided_at.
	Now func() time.Time
	// Logger defaults to discarding.
	Logger *slog.Logger
	// VoteTimeout bounds a button's vote in the background (default
	// DefaultVoteTimeout).
	VoteTimeout time.Duration
	// SubmitTimeout bounds a modal submission's vote (default
	// DefaultSubmitTimeout); keep it well under Slack's three seconds.
	SubmitTimeout time.Duration
	// ModalTimeout bounds opening a modal (default DefaultModalTimeout).
	ModalTimeout time.Duration
	// RunTimeout bounds the votes of an "Approve all of run" click, cast
	// after Slack got its 200 (default DefaultRunTimeout).
	RunTimeout time.Duration
}

func (c *InteractionsConfig) setDefaults() {
	commonDefaults(&c.APIURL, &c.HTTPClient, &c.Now, &c.Logger)
	if c.VoteTimeout == 0 {
		c.VoteTimeout = DefaultVoteTimeout
	}
	if c.SubmitTimeout == 0 {
		c.SubmitTimeout = DefaultSubmitTimeout
	}
	if c.ModalTimeout == 0 {
		c.ModalTimeout = DefaultModalTimeout
	}
	if c.RunTimeout == 0 {
		c.RunTimeout = DefaultRunTimeout
	}
}

func (c *InteractionsConfig) validate() error {
	var errs []error
	if c.SigningSecret == "" {
		errs = append(errs, errors.New("slack: InteractionsConfig.SigningSecret: required"))
	}
	errs = append(errs, validateWebAPI("InteractionsConfig", c.BotToken, c.APIURL, c.PublicURL)...)
	if c.Resolver == nil {
		errs = append(errs, errors.New("slack: InteractionsConfig.Resolver: required"))
	}
	if c.Users == nil {
		errs = append(errs, errors.New("slack: InteractionsConfig.Users: required"))
	}
	for name, d := range map[string]time.Duration{"VoteTimeout": c.VoteTimeout, "SubmitTimeout": c.SubmitTimeout, "ModalTimeout": c.ModalTimeout, "RunTimeout": c.RunTimeout} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("slack: InteractionsConfig.%s: must not be negative", name))
		}
	}
	return errors.Join(errs...)
}

// Interactions handles Slack's interactivity requests (buttons and modal
// submissions); mount it at POST /slack/interactions. It is safe for
// concurrent use.
type Interactions struct {
	cfg  InteractionsConfig
	api  *apiClient
	log  *slog.Logger
	opts RenderOptions
	wg   sync.WaitGroup
}

// NewInteractions returns the handler for cfg.
func NewInteractions(cfg InteractionsConfig) (*Interactions, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Interactions{
		cfg:  cfg,
		api:  &apiClient{base: cfg.APIURL, token: cfg.BotToken, http: cfg.HTTPClient, now: cfg.Now},
		log:  cfg.Logger,
		opts: RenderOptions{PublicURL: cfg.PublicURL},
	}, nil
}

// Wait blocks until the work started by earlier requests in the background
// (votes cast after the 200, replies through response URLs, message
// updates) is done. A server calls it on shutdown; tests call it instead of
// sleeping.
func (h *Interactions) Wait() { h.wg.Wait() }

// ServeHTTP verifies the request's signature over the raw body, then acts on
// the payload. A bad signature gets 401 and nothing else happens.
func (h *Interactions) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxInteractionBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			http.Error(w, "request too large", http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "cannot read the request", http.StatusBadRequest)
		return
	}
	if err := Verify(h.cfg.SigningSecret, r.Header, body, h.cfg.Now()); err != nil {
		h.log.Warn("slack interaction refused", attrError, err)
		http.Error(w, "invalid signature", http.StatusUnauthorized)
		return
	}
	p, err := parsePayload(body)
	if err != nil {
		http.Error(w, "invalid payload", http.StatusBadRequest)
		return
	}
	switch p.Type {
	case typeBlockActions:
		h.blockActions(w, r, p)
	case typeViewSubmission:
		h.viewSubmission(w, r, p)
	default:
		w.WriteHeader(http.StatusOK)
	}
}

// approver maps the Slack user of p through the directory.
func (h *Interactions) approver(p *payload) (string, bool) {
	if p.User.ID == "" {
		return "", false
	}
	id, ok := h.cfg.Users(p.User.ID)
	return id, ok && id != ""
}

// blockActions handles a click on a Countersign button.
func (h *Interactions) blockActions(w http.ResponseWriter, r *http.Request, p *payload) {
	act, ok := p.countersignAction()
	if !ok {
		w.WriteHeader(http.StatusOK)
		return
	}
	log := h.log.With(attrSlackUser, p.User.ID, attrAction, act.ActionID)
	bv, err := ParseButtonValue(act.Value)
	if err != nil {
		log.Warn("slack button value unreadable", attrError, err)
		h.background(r, func(ctx context.Context) { h.ephemeral(ctx, p.ResponseURL, textBadButton) })
		w.WriteHeader(http.StatusOK)
		return
	}
	log = log.With(attrEvent, bv.EventID)
	approver, ok := h.approver(p)
	if !ok {
		log.Info("slack click from a user not in the directory")
		h.background(r, func(ctx context.Context) { h.ephemeral(ctx, p.ResponseURL, textNotInDirectory) })
		w.WriteHeader(http.StatusOK)
		return
	}
	log = log.With(attrApprover, approver)
	switch act.ActionID {
	case ActionApprove, ActionReject, ActionDecline:
		v := h.newVote(bv.EventID, approver)
		switch act.ActionID {
		case ActionApprove:
			v.Decision, v.ArgumentsSHA256 = contracts.DecisionApprove, bv.ArgumentsSHA256
		case ActionReject:
			v.Decision, v.ArgumentsSHA256, v.Comment = contracts.DecisionReject, bv.ArgumentsSHA256, "Rejected in Slack"
		case ActionDecline:
			v.Decision, v.Answer = contracts.DecisionAnswer, &contracts.Answer{Action: contracts.AnswerDecline}
		}
		// Slack gets its 200 now; the vote may take the arbiter seconds.
		h.background(r, func(ctx context.Context) {
			if v.Decision != contracts.DecisionAnswer && bv.Version != "" && bv.ArgumentsSHA256 == "" {
				sha, text := h.hashOfVersion(ctx, log, bv.EventID, bv.Version)
				if text != "" {
					h.ephemeral(ctx, p.ResponseURL, text)
					return
				}
				v.ArgumentsSHA256 = sha
			}
			h.castClick(ctx, log, v, p.ResponseURL)
		})
		w.WriteHeader(http.StatusOK)
	case ActionApproveRun:
		// The votes of a whole run may take the arbiter a while.
		h.background(r, func(ctx context.Context) { h.approveRun(ctx, log, p, act, bv.EventID, approver) })
		w.WriteHeader(http.StatusOK)
	default:
		h.openModal(r, log, p, approver, act.ActionID, bv)
		w.WriteHeader(http.StatusOK)
	}
}

// hashOfVersion is the hash of the arguments a button or form names by
// their version (ButtonValue.Version), read from the record; when it cannot
// be had, it returns instead what to tell the voter, and the vote is not
// cast: a vote is never counted for arguments other than those shown.
func (h *Interactions) hashOfVersion(ctx context.Context, log *slog.Logger, eventID, version string) (sha, text string) {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.VoteTimeout)
	defer cancel()
	rec, err := h.cfg.Resolver.Record(ctx, eventID)
	switch {
	case errors.Is(err, notifier.ErrUnknownEvent):
		return "", "Your vote was not counted: " + contracts.Reason(contracts.ReasonUnknownEvent).Message() + "."
	case err != nil || rec == nil:
		log.Error("slack: cannot read the record for a vote", attrError, err)
		return "", textVoteFailed
	}
	sha, ok := notifier.VersionHash(rec, version)
	if !ok {
		log.Warn("slack: a button names arguments the record does not hold", "version", version)
		return "", textBadButton
	}
	return sha, ""
}

func (h *Interactions) newVote(eventID, approver string) contracts.Vote {
	id, err := uuid.NewV7()
	if err != nil {
		id = uuid.New()
	}
	return contracts.Vote{
		Spec:      contracts.SpecVote,
		VoteID:    id.String(),
		EventID:   eventID,
		Approver:  contracts.Approver{ID: approver, Via: contracts.ViaSlack},
		DecidedAt: h.cfg.Now().UTC(),
	}
}

// background runs f after the response, with a context that outlives the
// request; Wait waits for it.
func (h *Interactions) background(r *http.Request, f func(ctx context.Context)) {
	ctx := context.WithoutCancel(r.Context())
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		f(ctx)
	}()
}

// castClick casts a button's vote and tells the clicker how it went: the
// message is replaced with the new progress or the outcome, or the clicker
// alone sees why the vote did not count.
func (h *Interactions) castClick(ctx context.Context, log *slog.Logger, v contracts.Vote, responseURL string) {
	voteCtx, cancel := context.WithTimeout(ctx, h.cfg.VoteTimeout)
	res, err := h.cfg.Resolver.Vote(voteCtx, v)
	cancel()
	ctx, cancel = context.WithTimeout(ctx, responseTimeout)
	defer cancel()
	switch {
	case errors.Is(err, notifier.ErrUnknownEvent):
		log.Info("slack vote on an unknown approval")
		h.ephemeral(ctx, responseURL, "Your vote was not counted: "+contracts.Reason(contracts.ReasonUnknownEvent).Message()+".")
	case errors.Is(err, context.DeadlineExceeded):
		log.Warn("slack vote not confirmed in time", attrError, err)
		h.ephemeral(ctx, responseURL, textVoteUnsure)
	case err != nil:
		log.Error("slack vote failed", attrError, err)
		h.ephemeral(ctx, responseURL, textVoteFailed)
	case res.Refused != "":
		log.Info("slack vote refused", attrReason, res.Refused)
		h.ephemeral(ctx, responseURL, refusalText(res))
		if res.Refused == contracts.ReasonClosed && res.Record != nil && res.Record.Terminal() && h.mayRead(ctx, v.Approver.ID, res.Record) {
			h.replace(ctx, log, responseURL, OutcomeMessage(res.Record, h.opts))
		}
	case res.InFlight:
		log.Info("slack vote in flight")
		h.ephemeral(ctx, responseURL, textInFlight)
	case res.Counted:
		log.Info("slack vote counted", attrDecision, v.Decision)
		if rec := h.recordAfter(ctx, log, v.EventID, res); rec != nil {
			h.replace(ctx, log, responseURL, RequestMessage(&rec.Request, rec, h.opts))
		}
	default:
		log.Warn("slack vote: the resolver said nothing")
		h.ephemeral(ctx, responseURL, textVoteUnsure)
	}
}

// mayRead applies the read rule; a rule that cannot be consulted shows nothing.
func (h *Interactions) mayRead(ctx context.Context, approver string, rec *contracts.Record) bool {
	if h.cfg.ReadRule == nil {
		return true
	}
	ok, err := h.cfg.ReadRule(ctx, approver, rec)
	if err != nil {
		h.log.Warn("slack: the read rule could not be applied", attrEvent, rec.Request.EventID, attrError, err)
	}
	return err == nil && ok
}

// recordAfter is the record after a counted vote: the one in res, else the
// current one.
func (h *Interactions) recordAfter(ctx context.Context, log *slog.Logger, eventID string, res notifier.VoteResult) *contracts.Record {
	if res.Record != nil {
		return res.Record
	}
	rec, err := h.cfg.Resolver.Record(ctx, eventID)
	if err != nil || rec == nil {
		log.Warn("slack: cannot read the record after a vote", attrError, err)
		return nil
	}
	return rec
}

// refusalText tells a voter why the vote did not count.
func refusalText(res notifier.VoteResult) string {
	s := "Your vote was not counted: " + contracts.Reason(res.Refused).Message()
	if res.Detail != "" {
		s += ": " + res.Detail
	}
	return s + "."
}

// ephemeral shows text to the person who interacted, and to no one else.
func (h *Interactions) ephemeral(ctx context.Context, responseURL, text string) {
	if responseURL == "" {
		return
	}
	msg := slackgo.WebhookMessage{ResponseType: slackgo.ResponseTypeEphemeral, Text: escapeCut(text, maxSectionText)}
	if err := postJSON(ctx, h.cfg.HTTPClient, responseURL, &msg); err != nil {
		h.log.Warn("slack: cannot answer through the response URL", attrError, err)
	}
}

// replace replaces the message an interaction came from, for everyone who
// sees it.
func (h *Interactions) replace(ctx context.Context, log *slog.Logger, responseURL string, m Message) {
	if responseURL == "" {
		return
	}
	msg := slackgo.WebhookMessage{ReplaceOriginal: true, Text: m.Text, Blocks: &slackgo.Blocks{BlockSet: m.Blocks}}
	if err := postJSON(ctx, h.cfg.HTTPClient, responseURL, &msg); err != nil {
		log.Warn("slack: cannot update the message through the response URL", attrError, err)
	}
}

// openModal opens the Edit…, Respond… or Answer… modal. It runs before the
// click is answered: a trigger id expires three seconds after the click.
func (h *Interactions) openModal(r *http.Request, log *slog.Logger, p *payload, approver, action string, bv ButtonValue) {
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.ModalTimeout)
	defer cancel()
	rec, err := h.cfg.Resolver.Record(ctx, bv.EventID)
	if err == nil && rec != nil && !h.mayRead(ctx, approver, rec) {
		rec, err = nil, notifier.ErrUnknownEvent // not theirs to read: as if it did not exist
	}
	switch {
	case errors.Is(err, notifier.ErrUnknownEvent):
		h.background(r, func(ctx context.Context) {
			h.ephemeral(ctx, p.ResponseURL, "This request cannot be answered: "+contracts.Reason(contracts.ReasonUnknownEvent).Message()+".")
		})
		return
	case err != nil || rec == nil:
		log.Error("slack: cannot read the record for a modal", attrError, err)
		h.background(r, func(ctx context.Context) { h.ephemeral(ctx, p.ResponseURL, textFormFailed) })
		return
	case rec.Terminal():
		h.background(r, func(ctx context.Context) {
			h.ephemeral(ctx, p.ResponseURL, "This request is already decided: "+notifier.OutcomeLine(rec)+".")
			h.replace(ctx, log, p.ResponseURL, OutcomeMessage(rec, h.opts))
		})
		return
	}
	channel, ts := p.channelTS()
	meta := modalMeta{EventID: bv.EventID, ArgumentsSHA256: bv.ArgumentsSHA256, Version: bv.Version, Channel: channel, TS: ts, ResponseURL: p.ResponseURL}
	var view slackgo.ModalViewRequest
	switch action {
	case ActionEdit:
		args, sha, _ := currentArguments(&rec.Request, rec)
		formatted := notifier.FormatJSON(args, 0)
		masked := len(notifier.ForRecord(rec).Sensitive) > 0
		if len(formatted) > maxInputValue || masked {
			text := "The arguments are too large to edit in Slack."
			if masked {
				// Editing in Slack would show Slack the sensitive values.
				text = "Some arguments are sensitive and are not shown in Slack."
			}
			if u := notifier.ApprovalURL(h.cfg.PublicURL, bv.EventID); u != "" {
				text += " Edit them in Countersign: " + u
			}
			h.background(r, func(ctx context.Context) { h.ephemeral(ctx, p.ResponseURL, text) })
			return
		}
		// The modal shows the arguments under review now: that is what
		// the approver edits, whatever the message showed.
		meta.ArgumentsSHA256 = sha
		view = editModal(&rec.Request, formatted, "")
	case ActionRespond:
		view = respondModal(&rec.Request, "")
	case ActionAnswer:
		meta.ArgumentsSHA256, meta.Version, meta.TextAnswer = "", "", !hasSchema(&rec.Request)
		view = answerModal(&rec.Request, "")
	}
	view.PrivateMetadata, err = meta.encode()
	if err != nil {
		log.Error("slack: cannot encode the modal's metadata", attrError, err)
		h.background(r, func(ctx context.Context) { h.ephemeral(ctx, p.ResponseURL, textFormFailed) })
		return
	}
	if _, err := h.api.call(ctx, "views.open", openViewArgs{TriggerID: p.TriggerID, View: view}); err != nil {
		log.Error("slack: views.open failed", attrError, err)
		h.background(r, func(ctx context.Context) { h.ephemeral(ctx, p.ResponseURL, textFormFailed) })
		return
	}
	log.Info("slack modal opened")
}

// openViewArgs are the arguments of views.open.
type openViewArgs struct {
	TriggerID string                   `json:"trigger_id"`
	View      slackgo.ModalViewRequest `json:"view"`
}

// viewSubmission handles the submission of a Countersign modal: the vote
// is cast while Slack waits, so a refusal can be shown next to the input.
func (h *Interactions) viewSubmission(w http.ResponseWriter, r *http.Request, p *payload) {
	cb := p.View.CallbackID
	if cb != ActionEdit && cb != ActionRespond && cb != ActionAnswer {
		w.WriteHeader(http.StatusOK)
		return
	}
	log := h.log.With(attrSlackUser, p.User.ID, attrAction, cb)
	meta, err := parseModalMeta(p.View.PrivateMetadata)
	if err != nil {
		log.Warn("slack modal metadata unreadable")
		viewErrors(w, "This form is not valid any more. Close it and open the request again.")
		return
	}
	log = log.With(attrEvent, meta.EventID)
	approver, ok := h.approver(p)
	if !ok {
		log.Info("slack submission from a user not in the directory")
		viewErrors(w, textNotInDirectory)
		return
	}
	log = log.With(attrApprover, approver)
	v := h.newVote(meta.EventID, approver)
	if msg := fillSubmission(&v, cb, strings.TrimSpace(p.input()), meta); msg != "" {
		viewErrors(w, msg)
		return
	}
	if cb == ActionRespond && meta.Version != "" && meta.ArgumentsSHA256 == "" {
		sha, text := h.hashOfVersion(r.Context(), log, meta.EventID, meta.Version)
		if text != "" {
			viewErrors(w, text)
			return
		}
		v.ArgumentsSHA256 = sha
	}
	h.castSubmission(w, r, log, meta, v)
}

// fillSubmission sets on v the decision that submitting modal cb with input
// makes. When input cannot be that decision it returns what to say next to
// the input instead.
func fillSubmission(v *contracts.Vote, cb, input string, meta modalMeta) string {
	switch cb {
	case ActionEdit:
		args, msg := jsonObject(input)
		if msg != "" {
			return msg
		}
		v.Decision, v.Arguments, v.ArgumentsSHA256 = contracts.DecisionEdit, args, meta.ArgumentsSHA256
	case ActionRespond:
		if input == "" {
			return "Write the response for the agent."
		}
		v.Decision, v.Comment, v.ArgumentsSHA256 = contracts.DecisionRespond, input, meta.ArgumentsSHA256
	case ActionAnswer:
		content, msg := jsonObject(input)
		if msg != "" {
			if looksLikeJSON(input) || !meta.TextAnswer {
				return msg
			}
			content, _ = json.Marshal(map[string]string{"text": input})
		}
		v.Decision, v.Answer = contracts.DecisionAnswer, &contracts.Answer{Action: contracts.AnswerAccept, Content: content}
	}
	return ""
}

// castSubmission casts the vote of a submitted modal while Slack waits, and
// answers: the modal closes when the vote counted or is in flight (the
// message or the user is updated afterwards), and shows why otherwise.
func (h *Interactions) castSubmission(w http.ResponseWriter, r *http.Request, log *slog.Logger, meta modalMeta, v contracts.Vote) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), h.cfg.SubmitTimeout)
	res, err := h.cfg.Resolver.Vote(ctx, v)
	cancel()
	switch {
	case errors.Is(err, notifier.ErrUnknownEvent):
		viewErrors(w, "Not counted: "+contracts.Reason(contracts.ReasonUnknownEvent).Message()+".")
	case errors.Is(err, context.DeadlineExceeded):
		log.Warn("slack submission not confirmed in time", attrError, err)
		viewErrors(w, textVoteUnsure)
	case err != nil:
		log.Error("slack submission failed", attrError, err)
		viewErrors(w, textVoteFailed)
	case res.Refused != "":
		log.Info("slack submission refused", attrReason, res.Refused)
		viewErrors(w, refusalText(res))
	case res.Counted:
		log.Info("slack submission counted", attrDecision, v.Decision)
		viewClear(w)
		h.background(r, func(ctx context.Context) {
			ctx, cancel := context.WithTimeout(ctx, responseTimeout)
			defer cancel()
			if rec := h.recordAfter(ctx, log, v.EventID, res); rec != nil {
				h.updateOriginal(ctx, log, meta, RequestMessage(&rec.Request, rec, h.opts))
			}
		})
	default: // in flight
		log.Info("slack submission in flight")
		viewClear(w)
		h.background(r, func(ctx context.Context) {
			ctx, cancel := context.WithTimeout(ctx, responseTimeout)
			defer cancel()
			h.ephemeral(ctx, meta.ResponseURL, textInFlight)
		})
	}
}

// updateOriginal shows m in place of the message a modal was opened from.
func (h *Interactions) updateOriginal(ctx context.Context, log *slog.Logger, meta modalMeta, m Message) {
	if meta.Channel != "" && meta.TS != "" {
		if _, err := updateMessage(ctx, h.api, meta.Channel, meta.TS, m); err != nil {
			log.Warn("slack: cannot update the message after a vote", attrError, err)
		}
		return
	}
	h.replace(ctx, log, meta.ResponseURL, m)
}

// jsonObject parses s as a JSON object, or says for people why it is not one.
func jsonObject(s string) (json.RawMessage, string) {
	if s == "" {
		return nil, "Enter a JSON object."
	}
	var obj map[string]json.RawMessage
	if err := contracts.Decode([]byte(s), &obj); err != nil {
		if dup, ok := errors.AsType[*contracts.DuplicateKeyError](err); ok {
			return nil, fmt.Sprintf("The key %q appears twice; give each key once.", dup.Path)
		}
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			return nil, fmt.Sprintf("Not valid JSON (at byte %d): %s.", syn.Offset, syn.Error())
		}
		if !looksLikeJSON(s) || s[0] != '{' {
			return nil, "Enter a JSON object: {\"name\": value, …}."
		}
		return nil, "Not valid JSON: " + err.Error() + "."
	}
	if obj == nil {
		return nil, "Enter a JSON object: {\"name\": value, …}."
	}
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		return nil, "Not valid JSON: " + err.Error() + "."
	}
	return b.Bytes(), ""
}

// looksLikeJSON reports whether s was meant as JSON.
func looksLikeJSON(s string) bool {
	return strings.HasPrefix(s, "{") || strings.HasPrefix(s, "[")
}

// viewErrors keeps the modal open with msg under its input.
func viewErrors(w http.ResponseWriter, msg string) {
	writeJSON(w, slackgo.NewErrorsViewSubmissionResponse(map[string]string{
		InputBlockID: cutPlain(msg, maxViewErrorText),
	}))
}

// viewClear closes the modal (and any it was stacked on).
func viewClear(w http.ResponseWriter) {
	writeJSON(w, slackgo.NewClearViewSubmissionResponse())
}

func writeJSON(w http.ResponseWriter, v any) {
	raw, err := json.Marshal(v)
	if err != nil {
		w.WriteHeader(http.StatusOK)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(raw)
}
