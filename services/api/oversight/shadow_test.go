package oversight_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/countersign/countersign/services/api/oversight"
)

// TestShadowRows: per shadow rule, the requests in the window it recorded
// a verdict on, and those it would have flipped, by direction; requests
// outside the window count for nothing.
func TestShadowRows(t *testing.T) {
	at := time.Date(2026, 11, 24, 7, 0, 0, 0, time.UTC)
	req := func(ago time.Duration, sh ...oversight.Shadow) oversight.Request {
		return oversight.Request{EventID: ago.String(), Rule: "payments", Risk: "high", CreatedAt: at.Add(-ago), Shadow: sh}
	}
	deny := oversight.Shadow{Rule: "deny-large", Action: "deny"}
	allow := oversight.Shadow{Rule: "deny-large", Action: "allow"}
	same := oversight.Shadow{Rule: "gate-reads", Action: "require_approval"}
	reqs := []oversight.Request{
		req(time.Hour, deny, same), req(2*time.Hour, deny), req(3*time.Hour, allow), req(4*time.Hour, same),
		req(5 * time.Hour), req(48*time.Hour, deny, same), // before the window
	}
	rep := oversight.Compute(reqs, oversight.Options{Since: at.Add(-24 * time.Hour)})
	want := []oversight.ShadowStats{
		{Rule: "deny-large", Requests: 3, Flipped: 3, Flips: []oversight.Flip{
			{From: "require_approval", To: "allow", Count: 1}, {From: "require_approval", To: "deny", Count: 2}}},
		{Rule: "gate-reads", Requests: 2, Flipped: 0, Flips: []oversight.Flip{}},
	}
	if !reflect.DeepEqual(rep.Shadow, want) {
		t.Errorf("shadow rows %+v\nwant %+v", rep.Shadow, want)
	}
	if rep := oversight.Compute(nil, oversight.Options{Since: at}); rep.Shadow == nil || len(rep.Shadow) != 0 {
		t.Errorf("no request: shadow %#v, want []", rep.Shadow)
	}
}
