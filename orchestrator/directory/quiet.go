package directory

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// QuietHours is a daily window in which a person's non-critical pushes
// are held (a user's quiet_hours, or notify.push.quiet_hours): from From to To (minutes after midnight; a window that ends
// before it starts runs over midnight) in Location.
type QuietHours struct {
	From, To int
	Location *time.Location
}

// ParseQuietHours reads "22:00-07:00" or "22:00-07:00 Europe/Berlin" (UTC
// when no zone is given).
func ParseQuietHours(s string) (QuietHours, error) {
	span, zone, _ := strings.Cut(strings.TrimSpace(s), " ")
	from, to, ok := strings.Cut(span, "-")
	q := QuietHours{Location: time.UTC}
	var err error
	if !ok {
		return q, fmt.Errorf("quiet hours %q: want HH:MM-HH:MM [zone]", s)
	}
	if q.From, err = clock(from); err != nil {
		return q, fmt.Errorf("quiet hours %q: %w", s, err)
	}
	if q.To, err = clock(to); err != nil {
		return q, fmt.Errorf("quiet hours %q: %w", s, err)
	}
	if q.From == q.To {
		return q, fmt.Errorf("quiet hours %q: the window is empty", s)
	}
	if zone = strings.TrimSpace(zone); zone != "" {
		if q.Location, err = time.LoadLocation(zone); err != nil {
			return q, fmt.Errorf("quiet hours %q: %w", s, err)
		}
	}
	return q, nil
}

func clock(s string) (int, error) {
	h, m, ok := strings.Cut(s, ":")
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	if !ok || err1 != nil || err2 != nil || hh < 0 || hh > 23 || mm < 0 || mm > 59 || len(m) != 2 {
		return 0, fmt.Errorf("%q is not a time of day HH:MM", s)
	}
	return hh*60 + mm, nil
}

// Active reports whether now falls in the window, and when it ends.
func (q QuietHours) Active(now time.Time) (bool, time.Time) {
	loc := q.Location
	if loc == nil {
		loc = time.UTC
	}
	t := now.In(loc)
	mins := t.Hour()*60 + t.Minute()
	midnight := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, loc)
	at := func(day, m int) time.Time { return midnight.AddDate(0, 0, day).Add(time.Duration(m) * time.Minute) }
	switch {
	case q.From < q.To && mins >= q.From && mins < q.To:
		return true, at(0, q.To)
	case q.From > q.To && mins >= q.From:
		return true, at(1, q.To)
	case q.From > q.To && mins < q.To:
		return true, at(0, q.To)
	}
	return false, time.Time{}
}
