package inbox

import (
	"strconv"

	"github.com/countersign/countersign/contracts"
)

// reviewView is a request's automated first reviewer as the approval page
// shows it: waiting for its opinion, its score and explanation, or why it
// gave none. The reviewer saw the arguments masked as notifications show
// them, so what it says holds no sensitive value.
type reviewView struct {
	Reviewer    string
	Pending     bool
	Score       string
	Explanation string
	Error       string
	// Effect says what the opinion did, in words.
	Effect string
}

// reviewOf is rec's reviewer for the page, or nil when its rule names none.
func reviewOf(rec *contracts.Record) *reviewView {
	rv := rec.Review
	if rv == nil {
		return nil
	}
	v := &reviewView{Reviewer: contracts.ReviewerID(rv.Reviewer)}
	o := rv.Opinion
	switch {
	case o == nil:
		v.Pending = !rec.Terminal()
		if !v.Pending {
			return nil
		}
	case o.Score == nil:
		v.Error = o.Error
	default:
		v.Score, v.Explanation = strconv.Itoa(*o.Score), o.Explanation
	}
	switch rv.Effect {
	case contracts.EffectApproved:
		v.Effect = "The rule lets this reviewer approve low-risk calls: its approval counted."
	case contracts.EffectRejected:
		v.Effect = "The rule lets this reviewer reject high scores: its rejection counted."
	default:
		v.Effect = "Advice only: people decide."
	}
	return v
}
