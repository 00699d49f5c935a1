package receipt_test

import (
	"encoding/base64"
	"encoding/json"
	"io"
)

func base64URL(b []byte) string                { return base64.RawURLEncoding.EncodeToString(b) }
func base64URLDecode(s string) ([]byte, error) { return base64.RawURLEncoding.DecodeString(s) }

func jsonEncode(w io.Writer, v any) error { return json.NewEncoder(w).Encode(v) }
