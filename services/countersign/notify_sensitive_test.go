package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
)

// TestWebhookIncludeSensitiveFromConfig: include_sensitive in
// countersign.yaml reaches the endpoint it is set on, and only that one.
func TestWebhookIncludeSensitiveFromConfig(t *testing.T) {
	var mu sync.Mutex
	bodies := map[string]string{}
	receiver := func(name string) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			bodies[name] = string(b)
			mu.Unlock()
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	plain, full := receiver("plain"), receiver("full")
	const hookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	path := filepath.Join(t.TempDir(), "countersign.yaml")
	yaml := "notify:\n  webhooks:\n" +
		"    - {name: plain, url: " + plain.URL + ", secrets: [" + hookSecret + "]}\n" +
		"    - {name: full, url: " + full.URL + ", secrets: [" + hookSecret + "], include_sensitive: true}\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	fc, err := loadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	parts, err := buildChannels(serveConfig{fileConfig: fc}, "http://127.0.0.1:8080", nil, slog.New(slog.DiscardHandler))
	if err != nil || len(parts.channels) != 1 {
		t.Fatalf("buildChannels: %v, %d channels", err, len(parts.channels))
	}
	args := json.RawMessage(`{"name":"Ann","ssn":"123-45-6789"}`)
	req := contracts.ApprovalRequested{Spec: contracts.SpecApprovalRequested, EventID: "e1", Kind: contracts.KindToolApproval,
		Run: contracts.Run{Agent: "a"}, ToolCall: &contracts.ToolCall{Name: "t", Arguments: args}, Sensitive: []string{"/ssn"}}
	for _, name := range []string{"plain", "full"} {
		n := notifier.Requested(req, notifier.Target{Channel: contracts.ChannelWebhook, Address: name})
		if _, err := parts.channels[0].Notify(context.Background(), n); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Contains(bodies["plain"], "123-45-6789") || !strings.Contains(bodies["plain"], "Ann") {
		t.Errorf("the endpoint without include_sensitive got %s", bodies["plain"])
	}
	if !strings.Contains(bodies["full"], "123-45-6789") {
		t.Errorf("the endpoint with include_sensitive got %s", bodies["full"])
	}
}
