package contracts

import (
	"encoding/json"
	"strings"
)

// Owned reports whether data is a value of the kind spec names, in any
// version of it, belonging to owner: its "spec" is spec up to the version
// after the last "/", and its ownerField names owner. A reader skips what
// is not owned (events.NewestReadable): something the NATS server stored
// on a key as its answer to someone's request. A value that is owned but
// unreadable (a version this release does not know) is never skipped: an
// older value must not stand for a newer one, which may revoke what the
// older one allowed.
func Owned(data []byte, spec, ownerField, owner string) bool {
	var v map[string]json.RawMessage
	if json.Unmarshal(data, &v) != nil {
		return false
	}
	var got, who string
	if json.Unmarshal(v["spec"], &got) != nil || !strings.HasPrefix(got, spec[:strings.LastIndex(spec, "/")+1]) {
		return false
	}
	if ownerField == "" {
		return true
	}
	return json.Unmarshal(v[ownerField], &who) == nil && who == owner
}
