package approval

import (
	"encoding/json"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval/internal/schema"
)

// ErrInvalidSchema is wrapped by the errors of CompileSchema.
var ErrInvalidSchema = schema.ErrInvalid

// SchemaError says where a value fails a JSON Schema: Field is the JSON
// pointer of the failing value, prefixed with the name of the field that
// holds the value ("arguments/amount", "answer/content/email"), and Message
// says why for people.
type SchemaError = schema.Error

// CompileSchema checks that raw is a JSON Schema (a JSON object, draft
// 2020-12 unless it names another) that compiles without fetching anything:
// a schema may refer only to itself.
func CompileSchema(raw json.RawMessage) error { return schema.Compile(raw) }

// ValidateJSON checks value against a JSON Schema; field prefixes the
// pointer of the failing value. See SchemaError.
func ValidateJSON(schemaDoc, value json.RawMessage, field string) *SchemaError {
	return schema.Validate(schemaDoc, value, field)
}

// CheckVoteContent checks what a vote proposes against the request's
// schemas: an edit's arguments against tool_schema, an accepted answer's
// content against question.schema. Without a schema there is nothing to
// check. The arbiter refuses a vote that fails as invalid_arguments; the API
// uses this to answer the same before it publishes.
func CheckVoteContent(req *contracts.ApprovalRequested, v *contracts.Vote) *SchemaError {
	switch v.Decision {
	case contracts.DecisionEdit:
		if len(req.ToolSchema) > 0 {
			return schema.Validate(req.ToolSchema, v.Arguments, "arguments")
		}
	case contracts.DecisionAnswer:
		if v.Answer != nil && v.Answer.Action == "accept" && req.Question != nil && len(req.Question.Schema) > 0 {
			return schema.Validate(req.Question.Schema, v.Answer.Content, "answer/content")
		}
	}
	return nil
}

// refusalDetail says for people why a vote refused as invalid_arguments is
// invalid; other refusals need no more than their reason code.
func refusalDetail(rec contracts.Record, v contracts.Vote, reason string) string {
	if reason == contracts.ReasonGrantNotAllowed {
		if why := CheckGrantRequest(&rec.Request, v.Grant); why != "" {
			return why
		}
		return "grant: only an approval or an edit can grant"
	}
	if reason != contracts.ReasonInvalidArguments {
		return ""
	}
	switch v.Decision {
	case contracts.DecisionEdit:
		if !isJSONObject(v.Arguments) || editedSHA(v) == "" {
			return "arguments: an edit must carry the new arguments as a JSON object"
		}
	case contracts.DecisionAnswer:
		if v.Answer == nil {
			return "answer: an answer vote must carry an answer"
		}
		if !validAnswerAction(v.Answer.Action) {
			return "answer/action: must be accept, decline or cancel"
		}
	}
	if e := CheckVoteContent(&rec.Request, &v); e != nil {
		return e.Error()
	}
	return ""
}
