package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/services/api"
)

// errorCodes are the codes an error answer of the API may carry.
var errorCodes = map[string]bool{
	api.CodeUnauthenticated: true, api.CodeForbidden: true, api.CodeNotFound: true, api.CodeMethodNotAllowed: true,
	api.CodeInvalidJSON: true, api.CodeUnknownField: true, api.CodeBodyTooLarge: true, api.CodeTooLarge: true, api.CodeInvalidField: true,
	api.CodeInvalidParameter: true, api.CodeInvalidArguments: true, api.CodeInvalidSchema: true,
	api.CodeInvalidEventID: true, api.CodeApproverNotAllowed: true, api.CodeArgumentsChanged: true,
	api.CodeUnknownEvent: true, api.CodeUnavailable: true, api.CodeNotReady: true, api.CodeInternal: true,
	api.CodeInvalidPolicy: true, api.CodeVersionExists: true, api.CodePolicyConflict: true, api.CodeNoLivePolicy: true,
	api.CodeRateLimited: true, api.CodeTooManyStreams: true, api.CodePendingQuota: true, api.CodeTooManyConnections: true,
	api.CodeReceiptReplayed: true, api.CodePasskeysOff: true, api.CodeEnrolmentExpired: true,
	api.CodeEnrolmentInvalid: true, api.CodeUnknownPasskey: true, api.CodeStepUpNotApplicable: true,
	api.CodePushOff: true, api.CodeInvalidToken: true, api.CodeTooManyDevices: true,
}

func init() {
	// Every refusal reason (contracts.Reasons) is an API error code too.
	for _, r := range contracts.Reasons() {
		errorCodes[string(r)] = true
	}
}

var fuzzMethods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodHead}

// fuzzTokens are the bearer tokens a fuzzed request may carry: none, each
// role's, and two that are no token.
var fuzzTokens = []string{"", "agent", "alice", "bob", "admin", "not-a-token", "Bearer"}

// largeBody is a JSON object of about size bytes: field holds a string
// that makes up the size.
func largeBody(prefix string, size int, suffix string) []byte {
	return []byte(prefix + `"` + strings.Repeat("x", max(size-len(prefix)-len(suffix)-2, 0)) + `"` + suffix)
}

// FuzzHandler drives the API's handler, connected to a real embedded NATS
// server as the api role, with arbitrary methods, paths, queries, headers
// and bodies up to the server's max payload. The handler never panics and,
// the bus being up, never answers 5xx; every /v1 error is a JSON error with
// a known code; and no body that repeats a key is ever accepted.
func FuzzHandler(f *testing.F) {
	e := setup(f)
	pay := e.pendingApproval(f, "run-fuzz", "payments.send")
	approvals := "/v1/approvals/{id}"

	seed := func(method, token, p, query, contentType string, body []byte) {
		m := uint8(0)
		for i, name := range fuzzMethods {
			if name == method {
				m = uint8(i)
			}
		}
		tk := uint8(0)
		for i, name := range fuzzTokens {
			if name == token {
				tk = uint8(i)
			}
		}
		f.Add(m, tk, p, query, contentType, body)
	}
	const ctJSON = "application/json"
	review := func(args string) []byte {
		return []byte(`{"run":{"id":"run-seed","agent":"billing-bot"},"tool_calls":[{"id":"c1","name":"payments.send","arguments":` + args + `}]}`)
	}
	// Findings of the duplicate keys review: every surface refuses them.
	seed("POST", "agent", "/v1/reviews", "", ctJSON, []byte(`{"run":{"agent":"a"},"tool_calls":[{"name":"payments.send"}],"run":{"agent":"b"}}`))
	seed("POST", "agent", "/v1/reviews", "", ctJSON, review(`{"amount":1,"\u0061mount":2}`))
	seed("POST", "alice", approvals+"/votes", "", ctJSON, []byte(`{"decision":"reject","comment":"wrong account","decision":"approve"}`))
	seed("POST", "alice", approvals+"/extend", "", ctJSON, []byte(`{"until":"2030-01-01T00:00:00Z","until":"2030-01-02T00:00:00Z"}`))
	seed("POST", "agent", "/v1/questions", "", ctJSON, []byte(`{"run":{"agent":"a"},"question":{"text":"?","text":"!"}}`))
	seed("POST", "admin", "/v1/policy", "dry_run=true", "application/yaml", []byte("rules:\n  - name: r\n    tools: [a]\n    action: allow\n    action: deny\n"))
	// Sizes: 100 KB and 900 KB comments, arguments between 512 KiB and
	// 1 MiB, a body just over the limit.
	seed("POST", "alice", approvals+"/votes", "", ctJSON, largeBody(`{"decision":"reject","comment":`, 100_000, `}`))
	seed("POST", "alice", approvals+"/votes", "", ctJSON, largeBody(`{"decision":"reject","comment":`, 900_000, `}`))
	seed("POST", "agent", "/v1/reviews", "", ctJSON, review(string(largeBody(`{"memo":`, 600<<10, `}`))))
	seed("POST", "agent", "/v1/reviews", "", ctJSON, review(string(largeBody(`{"memo":`, 1<<20-200, `}`))))
	seed("POST", "agent", "/v1/reviews", "", ctJSON, bytes.Repeat([]byte(" "), api.MaxBodyBytes+1))
	// A rule with no approvers that approves on timeout.
	seed("POST", "admin", "/v1/policy", "dry_run=true", "application/yaml",
		[]byte("version: seed\nrules:\n  - name: r\n    tools: [\"*\"]\n    action: require_approval\n    approvers: []\n    timeout: 1m\n    on_timeout: approve\n"))
	// The other routes.
	seed("GET", "alice", approvals, "wait=1ms", "", nil)
	seed("GET", "alice", "/v1/approvals", "status=pending&agent=billing-bot&approver=me&limit=2&cursor=x", "", nil)
	seed("GET", "alice", approvals+"/events", "", "", nil)
	seed("POST", "alice", approvals+"/votes", "", ctJSON, []byte(`{"decision":"approve","vote_id":"`+pay+`"}`))
	seed("POST", "agent", approvals+"/claim", "", ctJSON, nil)
	seed("POST", "alice", approvals+"/cancel", "", ctJSON, []byte(`{"reason":"x"}`))
	seed("GET", "admin", "/v1/policy", "", "", nil)
	seed("GET", "", "/v1/tools/request_human_input", "", "", nil)
	seed("DELETE", "bob", "/v1/approvals/x.y", "", "", nil)
	seed("GET", "", "/healthz", "", "", nil)
	seed("GET", "", "/openapi.json", "", "", nil)

	f.Fuzz(func(t *testing.T, m, tk uint8, p, query, contentType string, body []byte) {
		if len(body) > api.MaxBodyBytes+1<<10 {
			return // past what any server takes
		}
		method := fuzzMethods[int(m)%len(fuzzMethods)]
		p = strings.ReplaceAll(p, "{id}", pay)
		if !strings.HasPrefix(p, "/") {
			p = "/" + p
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		u := &url.URL{Path: p, RawQuery: query}
		r := (&http.Request{
			Method: method, URL: u, RequestURI: u.RequestURI(), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{}, Host: "countersign.test", RemoteAddr: "192.0.2.1:4711",
			Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)),
		}).WithContext(ctx)
		if contentType != "" {
			r.Header.Set("Content-Type", contentType)
			r.Header.Set("Last-Event-ID", contentType)
		}
		if token := fuzzTokens[int(tk)%len(fuzzTokens)]; token != "" {
			if tok, ok := e.tokens[token]; ok {
				token = tok
			}
			r.Header.Set("Authorization", "Bearer "+token)
		}
		w := httptest.NewRecorder()
		e.handler.ServeHTTP(w, r)

		if w.Code >= 500 && ctx.Err() == nil {
			t.Fatalf("%s %s?%s: HTTP %d: %s", method, p, query, w.Code, w.Body)
		}
		if !strings.HasPrefix(path.Clean(p), "/v1/") || w.Code < 400 || w.Code == http.StatusMovedPermanently {
			if w.Code < 300 && strings.HasPrefix(path.Clean(p), "/v1/") && method == http.MethodPost &&
				errors.Is(contracts.CheckDuplicateKeys(body), contracts.ErrDuplicateKey) {
				t.Fatalf("%s %s accepted a body that repeats a key (HTTP %d): %.300s", method, p, w.Code, body)
			}
			return
		}
		var ans struct {
			Error *struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if ct := w.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Fatalf("%s %s: HTTP %d with Content-Type %q: %.300s", method, p, w.Code, ct, w.Body)
		}
		if err := json.Unmarshal(w.Body.Bytes(), &ans); err != nil || ans.Error == nil || ans.Error.Message == "" {
			t.Fatalf("%s %s: HTTP %d, not a JSON error: %.300s", method, p, w.Code, w.Body)
		}
		if !errorCodes[ans.Error.Code] {
			t.Fatalf("%s %s: HTTP %d with unknown code %q", method, p, w.Code, ans.Error.Code)
		}
	})
}
