package contracts

import (
	"strings"
	"time"
)

// An automated first reviewer (the policy's reviewer key) gives its opinion
// of a request before people are asked: a risk score from 0 to 100 and an
// explanation. The arbiter asks it, publishes the opinion on
// OpinionSubject (a subject only the arbiter's own NATS user may publish
// on) and records it in Record.Review. Where the rule lets it, a low score
// approves the call as a vote by ReviewerID(name), and a high one rejects
// it; everywhere else the opinion is advice shown to the people who decide.

// SpecOpinion is the spec of an Opinion.
const SpecOpinion = "countersign.approval.opinion/v1"

// SubjectOpinionPrefix starts the subject of an approval's opinion, on the
// HITL_RESOLUTIONS stream. Only the arbiter publishes there.
const SubjectOpinionPrefix = "hitl.approval.opinion."

// OpinionSubject is where the opinion of an approval's reviewer is published.
func OpinionSubject(eventID string) string { return SubjectOpinionPrefix + eventID }

// OpinionMsgID is the Nats-Msg-Id of an approval's opinion: one per approval.
func OpinionMsgID(eventID string) string { return "opinion:" + eventID }

// ReviewerPrefix starts the identity a reviewer's vote is cast under:
// "reviewer:<name>". No person's vote may use it.
const ReviewerPrefix = "reviewer:"

// ViaReviewer is the via of a reviewer's vote; no vote on the bus may use it.
const ViaReviewer = "reviewer"

// ReviewerID is the identity of the reviewer named name.
func ReviewerID(name string) string { return ReviewerPrefix + name }

// IsReviewerID reports whether id is a reviewer's identity.
func IsReviewerID(id string) bool { return strings.HasPrefix(id, ReviewerPrefix) }

// Bounds of a reviewer's score and explanation.
const (
	MaxReviewScore       = 100
	MaxExplanationBytes  = 2048
	MaxOpinionErrorBytes = 512
)

// Effects of an opinion on its request (Review.Effect).
const (
	// EffectAdvice: shown to the people who decide, nothing more.
	EffectAdvice = "advice"
	// EffectApproved: the opinion was counted as the reviewer's approval.
	EffectApproved = "approved"
	// EffectRejected: the opinion was counted as the reviewer's rejection.
	EffectRejected = "rejected"
)

// ChangeOpinion announces that a request's reviewer gave its opinion (or
// failed to); a decision it made is announced as decided instead.
const ChangeOpinion = "opinion"

// Opinion is what a reviewer said of a request, published by the arbiter on
// OpinionSubject. Score is nil when the reviewer failed (Error says why:
// a timeout, a refused call, an answer that cannot be read), and then the
// request is left to people.
type Opinion struct {
	Spec     string `json:"spec"`
	EventID  string `json:"event_id"`
	Reviewer string `json:"reviewer"`
	// Score is the risk the reviewer sees, 0 (none) to 100.
	Score       *int   `json:"score,omitempty"`
	Explanation string `json:"explanation,omitempty"`
	Error       string `json:"error,omitempty"`
	// ArgumentsSHA256 is the hash of the arguments the reviewer was shown
	// (masked as notifications mask them); an opinion counts only for them.
	ArgumentsSHA256 string    `json:"arguments_sha256,omitempty"`
	At              time.Time `json:"at"`
}

// Review is a record's automated first reviewer: the rule's settings,
// frozen by the arbiter when it created the record from the policy it
// checked the request against (never from the request), and the opinion
// once given.
type Review struct {
	// Reviewer names the reviewer endpoint the deployment configures.
	Reviewer string `json:"reviewer"`
	// ApproveBelow lets a score below it approve, for a request whose risk
	// is at most UpToRisk and that no step-up guards (0: it never approves).
	ApproveBelow int    `json:"approve_below,omitempty"`
	UpToRisk     string `json:"up_to_risk,omitempty"`
	// RejectAbove, when set, lets a score above it reject.
	RejectAbove *int `json:"reject_above,omitempty"`
	// Timeout bounds the reviewer's answer (Go duration syntax).
	Timeout string `json:"timeout"`
	// Opinion is what the reviewer said, once it did (or failed to).
	Opinion *Opinion `json:"opinion,omitempty"`
	// Effect is what the opinion did: advice, approved or rejected.
	Effect string `json:"effect,omitempty"`
}

// RiskRank orders the risk tiers from low (1) to critical (4); 0 for
// anything else.
func RiskRank(risk string) int {
	switch risk {
	case RiskLow:
		return 1
	case RiskMedium:
		return 2
	case RiskHigh:
		return 3
	case RiskCritical:
		return 4
	}
	return 0
}
