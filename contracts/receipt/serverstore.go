package receipt

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// ServerReplayStoreConfig configures a ServerReplayStore.
type ServerReplayStoreConfig struct {
	// URL is the Countersign API's base URL, e.g. https://countersign.example.com
	// (required).
	URL string
	// Token is a bearer token of the API; any role will do (required).
	Token string
	// HTTPClient sends the requests (default: a client with a 10 s timeout).
	HTTPClient *http.Client
}

func (c *ServerReplayStoreConfig) validate() error {
	var errs []error
	if u, err := url.Parse(c.URL); c.URL == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("receipt: ServerReplayStoreConfig.URL %q is not an http(s) URL", c.URL))
	}
	if c.Token == "" {
		errs = append(errs, errors.New("receipt: ServerReplayStoreConfig.Token is required"))
	}
	return errors.Join(errs...)
}

// ServerReplayStore is a ReplayStore kept by Countersign itself: each Use
// asks the API (POST /v1/receipts/use) to record the receipt's id in its
// hitl_receipt_uses bucket, where the first use of an id wins. Every
// replica of a tool that verifies with a ServerReplayStore of the same
// Countersign refuses a receipt another replica used, and a restarted
// replica still refuses it, for as long as the receipt is valid. A tool
// with more than one replica, or one that restarts within a receipt's
// lifetime, uses it (or another store its replicas share) instead of the
// in-memory default.
//
// It fails closed: when the API cannot be asked, or answers anything but
// the first use, Use returns an error and Verify refuses the receipt (a
// replay is ErrReplayed; any other failure is receipt_unavailable, 503).
// A Use is not retried: a retry after an answer that was lost would find
// the receipt used, by itself. Leeway is bounded too: the API refuses an
// expiry more than contracts.ReceiptUseHorizon (2 h) ahead.
type ServerReplayStore struct {
	cfg      ServerReplayStoreConfig
	endpoint string
}

// NewServerReplayStore returns a store on the API at cfg.URL.
func NewServerReplayStore(cfg ServerReplayStoreConfig) (*ServerReplayStore, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	return &ServerReplayStore{cfg: cfg, endpoint: strings.TrimRight(cfg.URL, "/") + "/v1/receipts/use"}, nil
}

// Use implements ReplayStore: it records id as used until until (rounded
// up to the second).
func (s *ServerReplayStore) Use(ctx context.Context, id string, until time.Time) error {
	exp := until.Unix()
	if until.After(time.Unix(exp, 0)) {
		exp++
	}
	body, err := json.Marshal(struct {
		JTI string `json:"jti"`
		Exp int64  `json:"exp"`
	}{id, exp})
	if err != nil {
		return fmt.Errorf("receipt: replay store: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.endpoint, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("receipt: replay store: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+s.cfg.Token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := s.cfg.HTTPClient.Do(req)
	if err != nil {
		return fmt.Errorf("receipt: replay store: %w", err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var answer struct {
		Used  bool `json:"used"`
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.Unmarshal(data, &answer)
	switch {
	case resp.StatusCode == http.StatusOK && answer.Used:
		return nil
	case resp.StatusCode == http.StatusConflict && answer.Error.Code == ErrReplayed.Code:
		return wrap(ErrReplayed, "receipt %s was already used", id)
	case answer.Error.Code != "":
		return fmt.Errorf("receipt: replay store: %s (%d): %s", answer.Error.Code, resp.StatusCode, answer.Error.Message)
	default:
		return fmt.Errorf("receipt: replay store: HTTP %d from %s", resp.StatusCode, s.endpoint)
	}
}
