package policy

import (
	"fmt"
	"regexp"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/countersign/countersign/contracts"
)

// This file reads the `reviewer` setting: an automated first reviewer that
// gives its opinion of a gated call before people are asked, and, only
// where the rule says so, decides it:
//
//	reviewer: {endpoint: triage, approve_below: 20, up_to_risk: medium, reject_above: 90, timeout: 10s}
//
// endpoint names a reviewer the deployment configures (countersign.yaml
// reviewers:), so the policy holds no address and no secret. Without
// approve_below the opinion is advice; with it, a score below approves a
// call whose risk is at most up_to_risk and that no step-up guards, as one
// approval toward the quorum. reject_above lets a score above it reject.

var reviewerKeys = []string{"endpoint", "approve_below", "up_to_risk", "reject_above", "timeout"}

// Bounds of a reviewer's timeout.
const (
	DefaultReviewerTimeout = 10 * time.Second
	MaxReviewerTimeout     = 2 * time.Minute
)

// reviewerName is what an endpoint name may be.
var reviewerName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// ValidReviewerName reports whether name may name a reviewer endpoint: 1 to
// 64 characters of a-z, 0-9, _ and -, starting with a letter or digit.
func ValidReviewerName(name string) bool { return reviewerName.MatchString(name) }

// Reviewer is a decision's automated first reviewer (reviewer:).
type Reviewer struct {
	// Endpoint names the reviewer the deployment configures.
	Endpoint string
	// ApproveBelow lets a score below it approve (0: it never approves),
	// for calls whose risk is at most UpToRisk.
	ApproveBelow int
	UpToRisk     string
	// RejectAbove, when set, lets a score above it reject.
	RejectAbove *int
	// Timeout bounds the reviewer's answer.
	Timeout time.Duration
}

// Review is the record's frozen form of r (nil for nil).
func (r *Reviewer) Review() *contracts.Review {
	if r == nil {
		return nil
	}
	rv := &contracts.Review{Reviewer: r.Endpoint, ApproveBelow: r.ApproveBelow, UpToRisk: r.UpToRisk, Timeout: r.Timeout.String()}
	if r.RejectAbove != nil {
		n := *r.RejectAbove
		rv.RejectAbove = &n
	}
	return rv
}

// reviewerSpec is a reviewer setting as read.
type reviewerSpec struct {
	Reviewer
	approveNode *readPos // approve_below's position, when set
}

// readPos is a position in the file.
type readPos struct{ line, col int }

func readReviewerField(g *gateSpec, f field, what string, ps *problems) {
	rs := &reviewerSpec{Reviewer: Reviewer{Timeout: DefaultReviewerTimeout}}
	var upToRisk *readPos
	for _, sf := range ps.fields(f.val, what) {
		sub := what + "." + sf.name()
		switch sf.name() {
		case "endpoint":
			rs.Endpoint = ps.str(sf.val, sub)
			if !ValidReviewerName(rs.Endpoint) {
				ps.add(sf.val.Line, sf.val.Column, SeverityError,
					"%s: %q is not a reviewer name (1 to 64 of a-z, 0-9, _ and -; the reviewers of countersign.yaml)", sub, rs.Endpoint)
			}
		case "approve_below":
			if n, ok := ps.integer(sf.val, sub); ok {
				if n < 1 || n > contracts.MaxReviewScore {
					ps.add(sf.val.Line, sf.val.Column, SeverityError, "%s: %d must be between 1 and %d (scores run from 0 to %d)",
						sub, n, contracts.MaxReviewScore, contracts.MaxReviewScore)
				} else {
					rs.ApproveBelow, rs.approveNode = n, &readPos{sf.key.Line, sf.key.Column}
				}
			}
		case "up_to_risk":
			rs.UpToRisk, upToRisk = ps.str(sf.val, sub), &readPos{sf.key.Line, sf.key.Column}
			if !validRisk(rs.UpToRisk) {
				ps.add(sf.val.Line, sf.val.Column, SeverityError, "%s: unknown risk %q (low, medium, high, critical)", sub, rs.UpToRisk)
				rs.UpToRisk = ""
			}
		case "reject_above":
			if n, ok := ps.integer(sf.val, sub); ok {
				if n < 0 || n >= contracts.MaxReviewScore {
					ps.add(sf.val.Line, sf.val.Column, SeverityError, "%s: %d must be between 0 and %d", sub, n, contracts.MaxReviewScore-1)
				} else {
					rs.RejectAbove = &n
				}
			}
		case "timeout":
			if d, ok := ps.duration(sf.val, sub); ok {
				if d < time.Second || d > MaxReviewerTimeout {
					ps.add(sf.val.Line, sf.val.Column, SeverityError, "%s: %s must be between 1s and %s", sub, d, MaxReviewerTimeout)
				} else {
					rs.Timeout = d
				}
			}
		default:
			ps.unknownField(sf, what, reviewerKeys)
		}
	}
	checkReviewer(rs, f, what, upToRisk, ps)
	g.reviewer = rs
}

// checkReviewer checks what a reviewer setting's keys say together.
func checkReviewer(rs *reviewerSpec, f field, what string, upToRisk *readPos, ps *problems) {
	if rs.Endpoint == "" && resolve(f.val).Kind == yaml.MappingNode {
		ps.add(f.key.Line, f.key.Column, SeverityError, "%s: endpoint is required (a reviewer configured under reviewers: in countersign.yaml)", what)
	}
	switch {
	case rs.ApproveBelow > 0 && rs.UpToRisk == "" && upToRisk == nil:
		ps.add(rs.approveNode.line, rs.approveNode.col, SeverityError,
			"%s: approve_below needs up_to_risk: the highest risk the reviewer may approve alone (low, medium, high, critical)", what)
	case rs.ApproveBelow == 0 && upToRisk != nil:
		ps.add(upToRisk.line, upToRisk.col, SeverityWarning, "%s: up_to_risk has no effect without approve_below (the reviewer never approves)", what)
	}
	if rs.ApproveBelow > 0 && rs.RejectAbove != nil && *rs.RejectAbove < rs.ApproveBelow {
		ps.add(f.key.Line, f.key.Column, SeverityError,
			"%s: reject_above %d is below approve_below %d: a score between them would both approve and reject", what, *rs.RejectAbove, rs.ApproveBelow)
	}
}

// reviewerOf is a decision's reviewer (nil when none is set).
func reviewerOf(rs *reviewerSpec) *Reviewer {
	if rs == nil || rs.Endpoint == "" {
		return nil
	}
	r := rs.Reviewer
	if r.RejectAbove != nil {
		n := *r.RejectAbove
		r.RejectAbove = &n
	}
	return &r
}

// checkReviewerAlone warns where a rule's approve_below can never approve:
// a step-up rule, ordered approvers, a risk above up_to_risk.
func checkReviewerAlone(s settings, where string, ps *problems) {
	rs := s.reviewer
	if rs == nil || rs.approveNode == nil {
		return
	}
	why := ""
	switch {
	case s.stepUp != "":
		why = "the rule says step_up: passkey, which no reviewer can give"
	case s.order == contracts.OrderSequence:
		why = "the rule's approvers decide in sequence"
	case rs.UpToRisk != "" && contracts.RiskRank(s.risk) > contracts.RiskRank(rs.UpToRisk):
		why = fmt.Sprintf("the rule's risk %s is above up_to_risk %s", s.risk, rs.UpToRisk)
	default:
		return
	}
	ps.add(rs.approveNode.line, rs.approveNode.col, SeverityWarning,
		"%s: reviewer.approve_below has no effect: %s; the reviewer's opinion is advice only", where, why)
}

// StricterReviewer combines the reviewers of two decisions one call could
// get into one that decides no more than either: the first's endpoint
// (else the second's); it approves only where both would, with the same
// endpoint, below the lower approve_below and up to the lower risk; it
// rejects where either would, above the lower reject_above of those on the
// endpoint kept. nil only when both are.
func StricterReviewer(a, b *Reviewer) *Reviewer {
	if a == nil && b == nil {
		return nil
	}
	if a == nil {
		a, b = b, nil
	}
	d := *a
	d.RejectAbove = nil
	if a.RejectAbove != nil {
		n := *a.RejectAbove
		d.RejectAbove = &n
	}
	if b == nil || b.Endpoint != a.Endpoint {
		// Humans decide on the other side (or another reviewer would):
		// this one's opinion is advice, its rejection still stands.
		d.ApproveBelow, d.UpToRisk = 0, ""
		return &d
	}
	d.ApproveBelow = min(a.ApproveBelow, b.ApproveBelow)
	if d.ApproveBelow == 0 {
		d.UpToRisk = ""
	} else if riskRank(b.UpToRisk) < riskRank(d.UpToRisk) {
		d.UpToRisk = b.UpToRisk
	}
	if b.RejectAbove != nil && (d.RejectAbove == nil || *b.RejectAbove < *d.RejectAbove) {
		n := *b.RejectAbove
		d.RejectAbove = &n
	}
	d.Timeout = min(a.Timeout, b.Timeout)
	return &d
}

// reviewerWeaker lists where reviewer d approves what o does not.
func reviewerWeaker(d, o *Reviewer) []string {
	if d == nil || d.ApproveBelow == 0 {
		return nil
	}
	if o == nil || o.ApproveBelow == 0 || o.Endpoint != d.Endpoint {
		return []string{"reviewer " + d.Endpoint + " approves alone"}
	}
	var out []string
	if d.ApproveBelow > o.ApproveBelow {
		out = append(out, "reviewer approves below "+itoa(d.ApproveBelow)+" > "+itoa(o.ApproveBelow))
	}
	if riskRank(d.UpToRisk) > riskRank(o.UpToRisk) {
		out = append(out, "reviewer approves up to risk "+d.UpToRisk+" > "+o.UpToRisk)
	}
	return out
}

// HasReviewers reports whether some decision of p names an automated
// reviewer: without one, no request needs asking for it.
func (p *Policy) HasReviewers() bool { return p.reviewers }

// ReviewerFor is the reviewer of a call d decides, as far as d lets it
// decide: advice only where d's risk is above up_to_risk, a step-up
// guards the call or its approvers decide in sequence. nil when d names
// none or does not gate.
func (d Decision) ReviewerFor() *Reviewer {
	r := d.Reviewer
	if r == nil || d.Action != ActionRequireApproval {
		return nil
	}
	if r.ApproveBelow > 0 && (riskRank(d.Risk) > riskRank(r.UpToRisk) || d.StepUp != "" || d.Order == contracts.OrderSequence) {
		return StricterReviewer(r, nil)
	}
	return r
}
