package receipt

import (
	"strings"

	"github.com/countersign/countersign/contracts"
)

// Type is the typ header of every receipt (RFC 8725 explicit typing): a
// verifier refuses a JWS of any other type, so no other token signed with
// the same key can pass for a receipt.
const Type = "countersign-receipt+jwt"

// Algorithm is the only JWS algorithm of receipts (RFC 8037).
const Algorithm = "EdDSA"

// DefaultIssuer is the iss claim when no issuer is configured.
const DefaultIssuer = "countersign"

// How a call was allowed: the basis claim.
const (
	// BasisApproval: humans approved the call (a quorum was met); the
	// receipt was issued when the approval was claimed.
	BasisApproval = "approval"
	// BasisGrant: the call ran under a standing grant; the grant claim
	// names it.
	BasisGrant = "grant"
	// BasisPolicy: the policy allows the call outright and its rule asks for
	// a receipt (receipt: true); the API signed for the policy decision.
	BasisPolicy = "policy"
)

// Claims are the claims of a receipt. The registered JWT names (iss, iat,
// exp, jti) mean what RFC 7519 says; the others are Countersign's.
type Claims struct {
	Issuer string `json:"iss"`
	// ID is unique per receipt: a verifier accepts it once (see ReplayStore).
	ID        string `json:"jti"`
	IssuedAt  int64  `json:"iat"`
	ExpiresAt int64  `json:"exp"`

	// EventID is the approval's event id ("" for a policy receipt).
	EventID string `json:"event_id,omitempty"`
	// ClaimID is the claim the receipt was issued for.
	ClaimID    string `json:"claim_id,omitempty"`
	Tenant     string `json:"tenant,omitempty"`
	Agent      string `json:"agent"`
	RunID      string `json:"run_id,omitempty"`
	ToolCallID string `json:"tool_call_id,omitempty"`
	// Tool is the name of the tool the receipt allows.
	Tool string `json:"tool"`
	// ArgsSHA256 is the lowercase hex SHA-256 of the RFC 8785 form of the
	// arguments that may run (after any edit by an approver).
	ArgsSHA256 string `json:"args_sha256"`
	// Basis says how the call was allowed (BasisApproval, BasisGrant,
	// BasisPolicy).
	Basis string `json:"basis"`
	// DecidedBy are the approvers whose votes decided (for an approval),
	// or "policy" for a policy receipt.
	DecidedBy []string `json:"decided_by,omitempty"`
	// Quorum is how many approvals the rule required and how many were
	// counted (approvals only).
	Quorum *Quorum `json:"quorum,omitempty"`
	// Grant is the id of the standing grant the call ran under (grants only).
	Grant string `json:"grant,omitempty"`
	// Rule and PolicyVersion name the policy rule that decided and the
	// applied version of the policy it belongs to.
	Rule          string `json:"rule,omitempty"`
	PolicyVersion string `json:"policy_version,omitempty"`
	// StepUp is the rule's step_up ("passkey"): every approval that decided
	// was signed by the approver's own passkey, and Signatures carries the
	// assertions (approvals only).
	StepUp string `json:"step_up,omitempty"`
	// Signatures are the approvers' WebAuthn assertions over their approval
	// statements, one per approver who decided (see contracts/passkey and
	// Options.Humans).
	Signatures []contracts.PasskeyAssertion `json:"signatures,omitempty"`
}

// Quorum of an approval receipt.
type Quorum struct {
	Required  int `json:"required"`
	Approvals int `json:"approvals"`
}

// validate checks what every receipt must carry.
func (c *Claims) validate() error {
	var missing []string
	for _, f := range []struct{ name, v string }{
		{"iss", c.Issuer}, {"jti", c.ID}, {"agent", c.Agent}, {"tool", c.Tool},
		{"args_sha256", c.ArgsSHA256}, {"basis", c.Basis},
	} {
		if f.v == "" {
			missing = append(missing, f.name)
		}
	}
	if c.IssuedAt <= 0 {
		missing = append(missing, "iat")
	}
	if c.ExpiresAt <= 0 {
		missing = append(missing, "exp")
	}
	if len(missing) > 0 {
		return malformedf("claims %s are required", strings.Join(missing, ", "))
	}
	if c.ExpiresAt <= c.IssuedAt {
		return malformedf("exp must be after iat")
	}
	switch c.Basis {
	case BasisApproval, BasisGrant, BasisPolicy:
	default:
		return malformedf("basis %q is not approval, grant or policy", c.Basis)
	}
	if c.StepUp != "" && c.StepUp != contracts.StepUpPasskey {
		return malformedf("step_up %q is not passkey", c.StepUp)
	}
	if len(c.Signatures) > 0 && c.Basis != BasisApproval {
		return malformedf("signatures on a %s receipt: only humans' approvals are signed", c.Basis)
	}
	if !isHexSHA256(c.ArgsSHA256) {
		return malformedf("args_sha256 must be 64 lowercase hex digits")
	}
	return nil
}

func isHexSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !('0' <= s[i] && s[i] <= '9' || 'a' <= s[i] && s[i] <= 'f') {
			return false
		}
	}
	return true
}
