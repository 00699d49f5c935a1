package notifier

import (
	"strconv"

	"github.com/countersign/countersign/contracts"
)

// A message or page outside Countersign binds a vote to the arguments it
// showed. Arguments without sensitive values are named by their hash;
// arguments with masked values by their version, since a plain hash beside
// masked values would let whoever sees the message confirm a guess of them.
// The handler of the vote looks the version's hash up in the record.

// ArgumentsVersion is the version of the arguments under review in rec:
// how many edits it holds ("0" for the request's own, and without a record).
func ArgumentsVersion(rec *contracts.Record) string {
	n := 0
	if rec != nil {
		for _, v := range rec.Votes {
			if v.Decision == contracts.DecisionEdit {
				n++
			}
		}
	}
	return strconv.Itoa(n)
}

// VersionHash is the arguments_sha256 of the arguments of version (see
// ArgumentsVersion) in rec; false when rec holds no such version.
func VersionHash(rec *contracts.Record, version string) (string, bool) {
	n, err := strconv.Atoi(version)
	if err != nil || n < 0 || rec.Request.ToolCall == nil {
		return "", false
	}
	if n == 0 {
		sha := rec.Request.ToolCall.ArgumentsSHA256
		return sha, sha != ""
	}
	for _, v := range rec.Votes {
		if v.Decision != contracts.DecisionEdit {
			continue
		}
		if n--; n == 0 {
			sha, err := contracts.ArgumentsSHA256(v.Arguments)
			return sha, err == nil
		}
	}
	return "", false
}
