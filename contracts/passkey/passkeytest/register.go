package passkeytest

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
)

// Register answers a navigator.credentials.create options document (the
// JSON the server sends: {"publicKey": {...}} or the publicKey object) as a
// browser with this authenticator would: the PublicKeyCredential JSON with
// a "none" attestation. It fails when the options are for another relying
// party or ask for neither ES256 nor EdDSA.
func (a *Authenticator) Register(options []byte) ([]byte, error) {
	var doc struct {
		PublicKey *creationOptions `json:"publicKey"`
	}
	if err := json.Unmarshal(options, &doc); err != nil {
		return nil, err
	}
	opts := doc.PublicKey
	if opts == nil {
		opts = new(creationOptions)
		if err := json.Unmarshal(options, opts); err != nil {
			return nil, err
		}
	}
	if opts.RP.ID != "" && opts.RP.ID != a.RPID {
		return nil, fmt.Errorf("options for relying party %q, the authenticator is bound to %q", opts.RP.ID, a.RPID)
	}
	alg := int64(-7)
	if a.ed != nil {
		alg = -8
	}
	offered := false
	for _, p := range opts.PubKeyCredParams {
		offered = offered || p.Alg == alg
	}
	if !offered {
		return nil, fmt.Errorf("the options do not accept algorithm %d", alg)
	}
	client, _ := json.Marshal(map[string]any{"type": "webauthn.create", "challenge": opts.Challenge, "origin": a.Origin, "crossOrigin": false})
	id, err := b64.DecodeString(a.ID)
	if err != nil {
		return nil, err
	}
	rp := sha256.Sum256([]byte(a.RPID))
	auth := append(rp[:], a.Flags|0x40) // attested credential data follows
	auth = binary.BigEndian.AppendUint32(auth, a.count)
	auth = append(auth, make([]byte, 16)...) // AAGUID: none
	auth = binary.BigEndian.AppendUint16(auth, uint16(len(id)))
	auth = append(auth, id...)
	auth = append(auth, a.coseKey()...)
	att := []byte{0xa3}
	att = cborText(att, "fmt")
	att = cborText(att, "none")
	att = cborText(att, "attStmt")
	att = append(att, 0xa0)
	att = cborText(att, "authData")
	att = cborBytes(att, auth)
	return json.Marshal(map[string]any{
		"id": a.ID, "rawId": a.ID, "type": "public-key", "authenticatorAttachment": "platform",
		"clientExtensionResults": map[string]any{},
		"response": map[string]any{
			"clientDataJSON": b64.EncodeToString(client), "attestationObject": b64.EncodeToString(att),
			"transports": []string{"internal"},
		},
	})
}

type creationOptions struct {
	Challenge string `json:"challenge"`
	RP        struct {
		ID string `json:"id"`
	} `json:"rp"`
	PubKeyCredParams []struct {
		Alg int64 `json:"alg"`
	} `json:"pubKeyCredParams"`
}

// coseKey is the public key as a COSE_Key (RFC 9053), CBOR-encoded.
func (a *Authenticator) coseKey() []byte {
	if a.ed != nil {
		k := []byte{0xa4, 0x01, 0x01, 0x03, 0x27, 0x20, 0x06, 0x21} // kty OKP, alg EdDSA, crv Ed25519, x:
		return cborBytes(k, a.ed.Public().(ed25519.PublicKey))
	}
	pub, _ := a.ec.PublicKey.Bytes()
	k := []byte{0xa5, 0x01, 0x02, 0x03, 0x26, 0x20, 0x01, 0x21} // kty EC2, alg ES256, crv P-256, x:
	k = cborBytes(k, pub[1:33])
	k = append(k, 0x22) // y:
	return cborBytes(k, pub[33:])
}

func cborText(dst []byte, s string) []byte {
	return append(cborHead(dst, 0x60, len(s)), s...)
}

func cborBytes(dst, b []byte) []byte {
	return append(cborHead(dst, 0x40, len(b)), b...)
}

func cborHead(dst []byte, major byte, n int) []byte {
	switch {
	case n < 24:
		return append(dst, major|byte(n))
	case n < 256:
		return append(dst, major|24, byte(n))
	default:
		return append(dst, major|25, byte(n>>8), byte(n))
	}
}
