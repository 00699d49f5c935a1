package approval

import (
	"errors"
	"fmt"
	"time"

	"github.com/countersign/countersign/contracts"
)

// ValidateRequest checks a request before a record is made of it: the
// arbiter enforces it on the bus, the API uses it to refuse bad input early.
func ValidateRequest(req *contracts.ApprovalRequested) error {
	var errs []error
	if req.Spec != contracts.SpecApprovalRequested && req.Spec != contracts.SpecHumanInputRequested {
		errs = append(errs, fmt.Errorf("unknown spec %q", req.Spec))
	}
	if !contracts.ValidEventID(req.EventID) {
		errs = append(errs, fmt.Errorf("invalid event_id %q", req.EventID))
	}
	if req.Run.Agent == "" {
		errs = append(errs, errors.New("run.agent is required"))
	}
	switch req.Kind {
	case contracts.KindToolApproval:
		if req.ToolCall == nil || req.ToolCall.Name == "" {
			errs = append(errs, errors.New("tool_call.name is required"))
		} else if sha, err := contracts.ArgumentsSHA256(req.ToolCall.Arguments); err != nil {
			errs = append(errs, fmt.Errorf("tool_call.arguments: %w", err))
		} else if sha != req.ToolCall.ArgumentsSHA256 {
			errs = append(errs, errors.New("tool_call.arguments_sha256 does not match the arguments"))
		}
	case contracts.KindHumanInput:
		if req.Question == nil || req.Question.Text == "" {
			errs = append(errs, errors.New("question.text is required"))
		} else if len(req.Question.Schema) > 0 {
			if err := CompileSchema(req.Question.Schema); err != nil {
				errs = append(errs, fmt.Errorf("question.schema: %w", err))
			}
		}
	default:
		errs = append(errs, fmt.Errorf("unknown kind %q", req.Kind))
	}
	if len(req.ToolSchema) > 0 {
		if err := CompileSchema(req.ToolSchema); err != nil {
			errs = append(errs, fmt.Errorf("tool_schema: %w", err))
		}
	}
	if req.ExpiresAt.IsZero() {
		errs = append(errs, errors.New("expires_at is required"))
	}
	for i, s := range req.Reminders {
		if d, err := time.ParseDuration(s); err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("reminders[%d]: %q is not a positive duration", i, s))
		}
	}
	for i, tier := range req.Escalation {
		if d, err := time.ParseDuration(tier.After); err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("escalation[%d].after: %q is not a positive duration", i, tier.After))
		}
		if len(tier.Approvers) == 0 {
			errs = append(errs, fmt.Errorf("escalation[%d].approvers: at least one approver is required", i))
		}
	}
	return errors.Join(errs...)
}
