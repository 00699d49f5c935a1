package inbox

import "testing"

// TestGrantTTLsAreWrittenAsPeopleWriteThem: the grant form shows the longest
// a grant may last as 8h, not 8h0m0s, and proposes an hour, not the longest.
func TestGrantTTLsAreWrittenAsPeopleWriteThem(t *testing.T) {
	for _, tt := range []struct{ max, longest, proposed string }{
		{"8h0m0s", "8h", "1h"},
		{"1h30m0s", "1h30m", "1h"},
		{"30m0s", "30m", "30m"},
		{"24h0m0s", "24h", "1h"},
		{"not a duration", "not a duration", "not a duration"},
	} {
		longest, proposed := grantTTLs(tt.max)
		if longest != tt.longest || proposed != tt.proposed {
			t.Errorf("grantTTLs(%q) = %q, %q; want %q, %q", tt.max, longest, proposed, tt.longest, tt.proposed)
		}
	}
}
