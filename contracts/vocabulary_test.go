package contracts_test

import (
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/countersign/countersign/contracts"
)

// schemaEnum reads the enum at a JSON pointer-ish path of a schema file.
func schemaEnum(t *testing.T, file string, path ...string) []string {
	t.Helper()
	data, err := os.ReadFile("schema/" + file)
	if err != nil {
		t.Fatal(err)
	}
	var node any
	if err := json.Unmarshal(data, &node); err != nil {
		t.Fatal(err)
	}
	for _, p := range path {
		m, ok := node.(map[string]any)
		if !ok {
			t.Fatalf("%s: no %v", file, path)
		}
		node = m[p]
	}
	var out []string
	for _, v := range node.(map[string]any)["enum"].([]any) {
		out = append(out, v.(string))
	}
	slices.Sort(out)
	return out
}

func sorted[T ~string](list []T) []string {
	out := make([]string, len(list))
	for i, v := range list {
		out[i] = string(v)
	}
	slices.Sort(out)
	return out
}

// The typed vocabularies list exactly what the contract's JSON Schemas
// allow, so Go code, the schemas and the clients generated from them agree.
func TestVocabulariesMatchTheSchemas(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want []string
	}{
		{"statuses", sorted(contracts.Statuses()), schemaEnum(t, "record.schema.json", "$defs", "status")},
		{"decisions", sorted(contracts.Decisions()), schemaEnum(t, "approval.requested.schema.json", "$defs", "decision")},
		{"reasons", sorted(contracts.Reasons()), schemaEnum(t, "record.schema.json", "$defs", "reason")},
	} {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("%s: Go lists %v, the schema %v", c.name, c.got, c.want)
		}
	}
}

// Every refusal reason has one HTTP status (a client error) and a message
// for the person refused; an unknown code is still answered, never empty.
func TestEveryReasonHasOneStatusAndMessage(t *testing.T) {
	for _, r := range contracts.Reasons() {
		if !r.Valid() || r.HTTPStatus() < 400 || r.HTTPStatus() > 499 || r.Message() == "" {
			t.Errorf("%s: valid %v, status %d, message %q", r, r.Valid(), r.HTTPStatus(), r.Message())
		}
	}
	unknown := contracts.Reason("made_up")
	if unknown.Valid() || unknown.HTTPStatus() != http.StatusUnprocessableEntity || unknown.Message() == "" {
		t.Errorf("unknown reason: valid %v, status %d, message %q", unknown.Valid(), unknown.HTTPStatus(), unknown.Message())
	}
	if contracts.Status(contracts.StatusPending).Terminal() || !contracts.Status(contracts.StatusExpired).Terminal() || contracts.Status("done").Terminal() {
		t.Error("Status.Terminal: pending is open, expired is terminal, an unknown status is neither")
	}
}

func TestRefusalTextCoversEveryReason(t *testing.T) {
	for _, r := range []string{contracts.ReasonNotAnApprover, contracts.ReasonSelfApproval, contracts.ReasonDuplicateVote,
		contracts.ReasonClosed, contracts.ReasonStaleArguments, contracts.ReasonInvalidArguments,
		contracts.ReasonDecisionNotAllowed, contracts.ReasonUnknownEvent, contracts.ReasonOutOfOrder} {
		if got := contracts.Reason(r).Message(); got == "" || strings.Contains(got, r) {
			t.Errorf("Reason(%q).Message() = %q, want an explanation in words", r, got)
		}
	}
	if got := contracts.Reason("new_reason").Message(); !strings.Contains(got, "new_reason") {
		t.Errorf("unknown reason: %q", got)
	}
}

// Every surface answers a refused vote with the same status.
func TestRefusalStatus(t *testing.T) {
	for reason, want := range map[string]int{
		contracts.ReasonNotAnApprover: 403, contracts.ReasonSelfApproval: 403, contracts.ReasonDecisionNotAllowed: 403,
		contracts.ReasonClosed: 409, contracts.ReasonDuplicateVote: 409, contracts.ReasonStaleArguments: 409,
		contracts.ReasonOutOfOrder: 409, contracts.ReasonAlreadyClaimed: 409, contracts.ReasonNotApproved: 409,
		contracts.ReasonUnknownEvent: 404, contracts.ReasonInvalidArguments: 400, contracts.ReasonMalformed: 422,
	} {
		if got := contracts.Reason(reason).HTTPStatus(); got != want {
			t.Errorf("Reason(%q).HTTPStatus() = %d, want %d", reason, got, want)
		}
	}
}
