package inbox

import (
	"bytes"
	"strings"
	"testing"

	"github.com/countersign/countersign/contracts"
)

// TestApprovalPageShowsTheAutomatedReview: the status part of the approval
// page shows the reviewer's score and explanation, why it gave none, or
// that it is still thinking; and the timeline names its opinion.
func TestApprovalPageShowsTheAutomatedReview(t *testing.T) {
	twelve := 12
	for _, c := range []struct {
		name string
		rec  contracts.Record
		want []string
	}{
		{"advice", contracts.Record{Status: contracts.StatusPending, Review: &contracts.Review{Reviewer: "triage",
			Opinion: &contracts.Opinion{Reviewer: "triage", Score: &twelve, Explanation: "a routine lookup"}, Effect: contracts.EffectAdvice}},
			[]string{`id="review-opinion"`, "score <strong>12/100</strong> — a routine lookup", "reviewer:triage · Advice only: people decide."}},
		{"approved", contracts.Record{Status: contracts.StatusApproved, Review: &contracts.Review{Reviewer: "triage",
			Opinion: &contracts.Opinion{Reviewer: "triage", Score: &twelve}, Effect: contracts.EffectApproved}},
			[]string{"12/100", "its approval counted"}},
		{"error", contracts.Record{Status: contracts.StatusPending, Review: &contracts.Review{Reviewer: "triage",
			Opinion: &contracts.Opinion{Reviewer: "triage", Error: "timeout: no answer within 10s"}, Effect: contracts.EffectAdvice}},
			[]string{`id="review-error"`, "reviewer:triage gave no opinion: timeout: no answer within 10s. People decide."}},
		{"waiting", contracts.Record{Status: contracts.StatusPending, Review: &contracts.Review{Reviewer: "triage"}},
			[]string{`id="review-pending"`, "reviewer:triage has not given its opinion yet."}},
		{"none", contracts.Record{Status: contracts.StatusPending}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			sv := statusView{Status: c.rec.Status, Terminal: c.rec.Terminal(), Review: reviewOf(&c.rec)}
			if err := inboxPages["detail"].ExecuteTemplate(&buf, "status", sv); err != nil {
				t.Fatal(err)
			}
			page := buf.String()
			if c.want == nil && strings.Contains(page, `id="review"`) {
				t.Fatalf("a record without a reviewer shows a review box:\n%s", page)
			}
			for _, w := range c.want {
				if !strings.Contains(page, w) {
					t.Errorf("the page lacks %q:\n%s", w, page)
				}
			}
		})
	}
	ch := contracts.Changed{Change: contracts.ChangeOpinion, By: "reviewer:triage", Reason: "status: POST https://x/v1/chat/completions answered 500"}
	if got := changeText(ch, nil); !strings.Contains(got, "reviewer:triage gave no opinion (status:") || !strings.Contains(got, "left to people") {
		t.Fatalf("timeline: %q", got)
	}
}
