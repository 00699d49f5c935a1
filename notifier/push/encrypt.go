package push

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
)

// This file is RFC 8291 message encryption for Web Push: the aes128gcm
// content coding of RFC 8188 with a key agreed by ECDH on P-256 between a
// fresh key of the sender and the subscription's key, mixed with the
// subscription's authentication secret.

// Sizes of RFC 8291's inputs and of the aes128gcm header.
const (
	// AuthSecretLen is the length of a subscription's auth secret.
	AuthSecretLen = 16
	saltLen       = 16
	// pointLen is an uncompressed P-256 point.
	pointLen = 65
	// headerLen is salt, record size, key id length and the sender's key.
	headerLen = saltLen + 4 + 1 + pointLen
	tagLen    = 16
	// RecordSize is the record size the sender announces: the whole message
	// is one record, at most MaxPayload bytes of plaintext.
	RecordSize = 4096
	// MaxPayload is the most plaintext one message carries: a record less
	// the padding delimiter and the tag (RFC 8291 §4 asks push services to
	// take at least 4096 bytes of body).
	MaxPayload = RecordSize - headerLen - tagLen - 1
)

// Errors of Decrypt, matched with errors.Is.
var (
	// ErrMalformed: the body is not one aes128gcm record for a P-256 key.
	ErrMalformed = errors.New("push: malformed aes128gcm message")
	// ErrDecrypt: the record does not open with the keys given.
	ErrDecrypt = errors.New("push: message does not decrypt")
)

// Subscription is what a browser's PushSubscription gives a sender: the
// push resource and the keys to encrypt for.
type Subscription struct {
	Endpoint string
	// P256DH is the browser's public key, Auth its authentication secret.
	P256DH *ecdh.PublicKey
	Auth   []byte
}

// ParseKeys decodes a subscription's keys as PushSubscription.toJSON gives
// them (base64url, padded or not): p256dh an uncompressed P-256 point,
// auth 16 bytes.
func ParseKeys(p256dh, auth string) (*ecdh.PublicKey, []byte, error) {
	raw, err := decodeB64(p256dh)
	if err != nil || len(raw) != pointLen {
		return nil, nil, errors.New("keys.p256dh: want the base64url of an uncompressed P-256 point (65 bytes)")
	}
	pub, err := ecdh.P256().NewPublicKey(raw)
	if err != nil {
		return nil, nil, errors.New("keys.p256dh: not a point of P-256")
	}
	secret, err := decodeB64(auth)
	if err != nil || len(secret) != AuthSecretLen {
		return nil, nil, fmt.Errorf("keys.auth: want the base64url of %d bytes", AuthSecretLen)
	}
	return pub, secret, nil
}

// Encrypt encrypts plaintext for sub (RFC 8291) with a fresh sender key
// and salt, and returns the aes128gcm body.
func Encrypt(plaintext []byte, sub Subscription) ([]byte, error) {
	key, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	salt := make([]byte, saltLen)
	if _, err := rand.Read(salt); err != nil {
		return nil, err
	}
	return EncryptWith(plaintext, sub, key, salt)
}

// EncryptWith is Encrypt with the sender's key and salt given: for test
// vectors (RFC 8291 Appendix A). Never reuse a key and salt for two
// messages.
func EncryptWith(plaintext []byte, sub Subscription, sender *ecdh.PrivateKey, salt []byte) ([]byte, error) {
	if len(plaintext) > MaxPayload {
		return nil, fmt.Errorf("push: payload of %d bytes is over %d", len(plaintext), MaxPayload)
	}
	if sub.P256DH == nil || len(sub.Auth) != AuthSecretLen || len(salt) != saltLen {
		return nil, errors.New("push: encrypt: a P-256 key, a 16-byte auth secret and a 16-byte salt are required")
	}
	shared, err := sender.ECDH(sub.P256DH)
	if err != nil {
		return nil, fmt.Errorf("push: ecdh: %w", err)
	}
	asPublic := sender.PublicKey().Bytes()
	aead, nonce, err := contentKeys(shared, sub.Auth, sub.P256DH.Bytes(), asPublic, salt)
	if err != nil {
		return nil, err
	}
	body := make([]byte, 0, headerLen+len(plaintext)+1+tagLen)
	body = append(body, salt...)
	body = binary.BigEndian.AppendUint32(body, RecordSize)
	body = append(body, pointLen)
	body = append(body, asPublic...)
	record := append(append([]byte{}, plaintext...), 0x02) // the last record's delimiter, no padding
	return aead.Seal(body, nonce, record, nil), nil
}

// Decrypt opens an aes128gcm body with the subscription's private key and
// auth secret: what a browser does, for tests and test push services.
func Decrypt(body []byte, ua *ecdh.PrivateKey, auth []byte) ([]byte, error) {
	if len(body) < headerLen+tagLen+1 || body[saltLen+4] != pointLen {
		return nil, ErrMalformed
	}
	salt := body[:saltLen]
	rs := binary.BigEndian.Uint32(body[saltLen:])
	asPublic := body[saltLen+5 : headerLen]
	ciphertext := body[headerLen:]
	if rs < tagLen+2 || uint32(len(ciphertext)) > rs {
		return nil, ErrMalformed // one record only, as Web Push sends
	}
	sender, err := ecdh.P256().NewPublicKey(asPublic)
	if err != nil {
		return nil, ErrMalformed
	}
	shared, err := ua.ECDH(sender)
	if err != nil {
		return nil, ErrMalformed
	}
	aead, nonce, err := contentKeys(shared, auth, ua.PublicKey().Bytes(), asPublic, salt)
	if err != nil {
		return nil, err
	}
	record, err := aead.Open(nil, nonce, ciphertext, nil)
	if err != nil {
		return nil, ErrDecrypt
	}
	// Strip the padding: zeros after the delimiter, which must be 2 (last record).
	i := len(record) - 1
	for i >= 0 && record[i] == 0 {
		i--
	}
	if i < 0 || record[i] != 0x02 {
		return nil, ErrDecrypt
	}
	return record[:i], nil
}

// contentKeys derives the AES-128-GCM key and nonce of a message:
//
//	PRK_key = HKDF-Extract(salt=auth_secret, IKM=ecdh_secret)
//	IKM     = HKDF-Expand(PRK_key, "WebPush: info" || 0x00 || ua_public || as_public, 32)
//	PRK     = HKDF-Extract(salt, IKM)
//	CEK     = HKDF-Expand(PRK, "Content-Encoding: aes128gcm" || 0x00, 16)
//	NONCE   = HKDF-Expand(PRK, "Content-Encoding: nonce" || 0x00, 12)
func contentKeys(shared, auth, uaPublic, asPublic, salt []byte) (cipher.AEAD, []byte, error) {
	prkKey, err := hkdf.Extract(sha256.New, shared, auth)
	if err != nil {
		return nil, nil, err
	}
	info := "WebPush: info\x00" + string(uaPublic) + string(asPublic)
	ikm, err := hkdf.Expand(sha256.New, prkKey, info, 32)
	if err != nil {
		return nil, nil, err
	}
	prk, err := hkdf.Extract(sha256.New, ikm, salt)
	if err != nil {
		return nil, nil, err
	}
	cek, err := hkdf.Expand(sha256.New, prk, "Content-Encoding: aes128gcm\x00", 16)
	if err != nil {
		return nil, nil, err
	}
	nonce, err := hkdf.Expand(sha256.New, prk, "Content-Encoding: nonce\x00", 12)
	if err != nil {
		return nil, nil, err
	}
	block, err := aes.NewCipher(cek)
	if err != nil {
		return nil, nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, nil, err
	}
	return aead, nonce, nil
}
