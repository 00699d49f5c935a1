package contracts

import (
	"strings"
	"time"
)

// ShortDuration writes d as people write it: without zero minutes and
// seconds (8h, 10m, 1h30m, 90s as 1m30s), for what Countersign shows.
func ShortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
