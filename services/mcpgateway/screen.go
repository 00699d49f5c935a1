package mcpgateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// DefaultMaxBody bounds the body of a Streamable HTTP request (4 MiB, or
// more when a gateway's MaxArguments needs it).
const DefaultMaxBody = 4 << 20

// served are the methods a client may send the gateway; a request for any
// other method is answered -32601 and reaches no server.
var served = map[string]bool{
	"initialize": true, "ping": true, "server/discover": true, "logging/setLevel": true,
	"tools/list": true, "tools/call": true,
	"resources/list": true, "resources/templates/list": true, "resources/read": true,
	"resources/subscribe": true, "resources/unsubscribe": true, "subscriptions/listen": true,
	"prompts/list": true, "prompts/get": true, "completion/complete": true,
	"notifications/initialized": true, "notifications/cancelled": true, "notifications/progress": true,
	"notifications/roots/list_changed": true,
}

// screen answers the POST bodies the SDK would refuse with a bare HTTP
// error — over maxBody, not JSON, not JSON-RPC, or for a method the gateway
// does not serve — with a JSON-RPC error; it passes the rest to next
// unchanged.
func screen(maxBody int64, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			if errors.As(err, new(*http.MaxBytesError)) {
				rpcError(w, http.StatusRequestEntityTooLarge, jsonrpc.ID{}, jsonrpc.CodeInvalidRequest,
					fmt.Sprintf("the request body is over this gateway's limit of %d bytes", maxBody))
				return
			}
			rpcError(w, http.StatusBadRequest, jsonrpc.ID{}, jsonrpc.CodeParseError, "the request body could not be read: "+err.Error())
			return
		}
		status, out, drop := check(body)
		if out != nil {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = w.Write(out)
			return
		}
		if drop {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}

// check returns the answer to a body the gateway refuses (nil for one the
// SDK may have) with its HTTP status, and whether the body is a
// notification of a method the gateway does not serve, which is dropped
// (202 over HTTP), as notifications get no answer. It decodes the body
// once.
func check(body []byte) (status int, answer []byte, drop bool) {
	if !json.Valid(body) {
		return http.StatusBadRequest, encodeError(jsonrpc.ID{}, jsonrpc.CodeParseError, "parse error: the request body is not JSON"), false
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) > 0 && trimmed[0] == '[' {
		status, answer := checkBatch(trimmed)
		return status, answer, false
	}
	msg, err := jsonrpc.DecodeMessage(body)
	if err != nil {
		return http.StatusBadRequest, encodeError(jsonrpc.ID{}, jsonrpc.CodeInvalidRequest, "invalid request: "+err.Error()), false
	}
	if req, ok := msg.(*jsonrpc.Request); ok && !served[req.Method] {
		if !req.IsCall() {
			return 0, nil, true
		}
		return http.StatusOK, encodeError(req.ID, jsonrpc.CodeMethodNotFound, notFound(req.Method)), false
	}
	return 0, nil, false
}

// checkBatch refuses a batch with a request the gateway does not serve:
// every request of it is answered with an error, and none is run.
func checkBatch(body []byte) (int, []byte) {
	var items []json.RawMessage
	if err := json.Unmarshal(body, &items); err != nil {
		return http.StatusBadRequest, encodeError(jsonrpc.ID{}, jsonrpc.CodeInvalidRequest, "invalid request: "+err.Error())
	}
	var reqs []*jsonrpc.Request
	refused := false
	for _, it := range items {
		msg, err := jsonrpc.DecodeMessage(it)
		if err != nil {
			return http.StatusBadRequest, encodeError(jsonrpc.ID{}, jsonrpc.CodeInvalidRequest, "invalid request in the batch: "+err.Error())
		}
		if req, ok := msg.(*jsonrpc.Request); ok {
			reqs = append(reqs, req)
			refused = refused || !served[req.Method]
		}
	}
	if !refused {
		return 0, nil
	}
	var out []json.RawMessage
	for _, req := range reqs {
		if !req.IsCall() {
			continue
		}
		if !served[req.Method] {
			out = append(out, encodeError(req.ID, jsonrpc.CodeMethodNotFound, notFound(req.Method)))
		} else {
			out = append(out, encodeError(req.ID, jsonrpc.CodeInvalidRequest, "not run: the batch has a request for a method this gateway does not serve"))
		}
	}
	b, _ := json.Marshal(out)
	return http.StatusOK, b
}

func notFound(method string) string {
	return fmt.Sprintf("method %q not found: this MCP gateway does not serve it", method)
}

// encodeError is a JSON-RPC error response; its id is null when the
// request's id is unknown (a body that could not be read).
func encodeError(id jsonrpc.ID, code int64, msg string) []byte {
	var raw any
	if id.IsValid() {
		raw = id.Raw()
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": raw, "error": map[string]any{"code": code, "message": msg}})
	return b
}

func rpcError(w http.ResponseWriter, status int, id jsonrpc.ID, code int64, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(encodeError(id, code, msg))
}
