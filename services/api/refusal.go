package api

import (
	"context"
	"time"
)

// A record a caller may not read is refused with the same shape as one
// that does not exist: the same status and code (unreadable), and the same
// time. A vote or command on a missing record waits a while for the
// record to appear (getRecordSoon) before it is answered unknown_event;
// one on an existing record the caller may not read is held until the
// same moment, so the time taken does not tell whether the request exists.

// holdRefusal waits until deadline, or until ctx ends, as the wait for a
// missing record would.
func holdRefusal(ctx context.Context, deadline time.Time) {
	d := time.Until(deadline)
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
