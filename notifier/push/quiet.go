package push

import "github.com/countersign/countersign/orchestrator/directory"

// QuietHours is a person's daily quiet window (see directory.QuietHours).
type QuietHours = directory.QuietHours

// ParseQuietHours reads "22:00-07:00" or "22:00-07:00 Europe/Berlin".
func ParseQuietHours(s string) (QuietHours, error) { return directory.ParseQuietHours(s) }
