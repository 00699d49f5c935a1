package receipt

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
)

// Header is the HTTP header that carries a receipt to a tool.
const Header = "Countersign-Receipt"

// MaxBodyBytes bounds the request body Middleware reads as the arguments.
const MaxBodyBytes = 1 << 20

// MiddlewareConfig configures Middleware.
type MiddlewareConfig struct {
	// Tool is the tool name receipts must carry. Required unless ToolOf is set.
	Tool string
	// ToolOf, when set, names the tool of a request (several tools behind
	// one handler).
	ToolOf func(*http.Request) string
	// Arguments returns the arguments the request is about to run with.
	// Default: the request body, a JSON object (restored for the handler).
	Arguments func(*http.Request) ([]byte, error)
	// Options verify the receipt (Keys is required).
	Options Options
	// OnRefused, when set, is told about every refused request.
	OnRefused func(r *http.Request, err error)
}

type claimsKey struct{}

// FromContext returns the verified claims Middleware put in a request's
// context.
func FromContext(ctx context.Context) (*Claims, bool) {
	c, ok := ctx.Value(claimsKey{}).(*Claims)
	return c, ok
}

// Middleware runs next only for a request that carries, in the
// Countersign-Receipt header, a valid, unused receipt for this tool and
// exactly these arguments. Any other request is answered with the receipt
// error's status (401, 403 or 409; 503 when the keys cannot be fetched) and
// {"error":{"code","message"}}, and next does not run.
func Middleware(cfg MiddlewareConfig, next http.Handler) http.Handler {
	if cfg.Arguments == nil {
		cfg.Arguments = bodyArguments
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tool := cfg.Tool
		if cfg.ToolOf != nil {
			tool = cfg.ToolOf(r)
		}
		claims, err := func() (*Claims, error) {
			token := r.Header.Get(Header)
			if token == "" {
				return nil, ErrMissing
			}
			args, err := cfg.Arguments(r)
			if err != nil {
				return nil, err
			}
			return Verify(r.Context(), token, tool, args, cfg.Options)
		}()
		if err != nil {
			if cfg.OnRefused != nil {
				cfg.OnRefused(r, err)
			}
			refuse(w, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), claimsKey{}, claims)))
	})
}

// errBody is a request body Middleware cannot read as arguments.
var errBody = &Error{Code: "invalid_arguments", Status: http.StatusBadRequest, Message: "the request body is not the tool's JSON arguments"}

func bodyArguments(r *http.Request) ([]byte, error) {
	if r.Body == nil {
		return nil, nil
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, MaxBodyBytes+1))
	r.Body.Close()
	if err != nil {
		return nil, wrap(errBody, "%v", err)
	}
	if len(data) > MaxBodyBytes {
		return nil, wrap(errBody, "larger than %d bytes", MaxBodyBytes)
	}
	r.Body = io.NopCloser(bytes.NewReader(data))
	return data, nil
}

func refuse(w http.ResponseWriter, err error) {
	status, code := http.StatusServiceUnavailable, Code(err)
	var e *Error
	if errors.As(err, &e) {
		status = e.Status
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": err.Error()}})
}
