package receipt

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
)

// CheckpointType is the typ header of an audit checkpoint: the head of the
// audit log's hash chain (contracts/audit), signed with a receipt key. A
// verifier refuses it as a receipt or an approvers document, and them as it.
const CheckpointType = "countersign-audit-checkpoint+jwt"

// SignCheckpoint signs payload, the JSON of an audit checkpoint, as a
// compact JWS of type CheckpointType. Ed25519 signatures are deterministic:
// the same key and payload give the same token.
func (s *Signer) SignCheckpoint(payload []byte) (string, error) {
	if !json.Valid(payload) {
		return "", errors.New("receipt: a checkpoint payload must be JSON")
	}
	h, err := json.Marshal(header{Alg: Algorithm, Typ: CheckpointType, Kid: s.cfg.Key.ID})
	if err != nil {
		return "", err
	}
	input := b64.EncodeToString(h) + "." + b64.EncodeToString(payload)
	return input + "." + b64.EncodeToString(ed25519.Sign(s.cfg.Key.Key, []byte(input))), nil
}
