package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/countersign/countersign/orchestrator/policy"
)

// client talks to the HTTP API for the CLI commands.
type client struct {
	url   string
	token string
	http  *http.Client
}

// apiError is the API's error body.
type apiError struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
	// Problems lists every problem of a refused policy.
	Problems []policy.Problem `json:"problems,omitempty"`
}

func (e *apiError) Error() string {
	s := fmt.Sprintf("%s: %s", e.Code, e.Message)
	if e.Field != "" {
		s += " (field " + e.Field + ")"
	}
	for _, p := range e.Problems {
		s += "\n  " + p.String()
	}
	return s
}

// httpStatusError is a non-2xx answer without the API's error body (from a
// proxy in front of it, say).
type httpStatusError struct {
	Status int
	Body   string
}

func (e *httpStatusError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.Status, e.Body) }

// clientFlags registers --url, --token and --data on fs.
func clientFlags(fs *flag.FlagSet) func() (*client, error) {
	target := urlFlags(fs)
	token := fs.String("token", "", "API token (default $COUNTERSIGN_TOKEN, else a 'countersign login', else the local dev token)")
	return func() (*client, error) {
		url, dir := target()
		c := &client{url: url, token: firstNonEmpty(*token, os.Getenv("COUNTERSIGN_TOKEN")),
			http: &http.Client{Timeout: 90 * time.Second}}
		if c.token == "" {
			tok, found, err := loginToken(context.Background(), c.url)
			if err != nil {
				return nil, err
			}
			c.token = tok
			if !found {
				b, err := os.ReadFile(filepath.Join(dir, fileDevToken))
				if err != nil {
					return nil, errors.New("no API token: set COUNTERSIGN_TOKEN, pass --token, run 'countersign login', or run where 'countersign serve' keeps ./data")
				}
				c.token = strings.TrimSpace(string(b))
			}
		}
		return c, nil
	}
}

// urlFlags registers --url and --data on fs; the function it returns
// answers the API's URL (--url, $COUNTERSIGN_URL, the local serve's, or
// http://127.0.0.1:8080) and the local data directory.
func urlFlags(fs *flag.FlagSet) func() (url, dataDir string) {
	url := fs.String("url", "", "API URL (default $COUNTERSIGN_URL, else the local serve)")
	data := fs.String("data", "", "data directory of the local serve (default $COUNTERSIGN_DATA or ./data)")
	return func() (string, string) {
		dir := firstNonEmpty(*data, os.Getenv("COUNTERSIGN_DATA"), "./data")
		u := firstNonEmpty(*url, os.Getenv("COUNTERSIGN_URL"))
		if u == "" {
			var info serveInfo
			if b, err := os.ReadFile(filepath.Join(dir, fileServe)); err == nil && json.Unmarshal(b, &info) == nil {
				u = info.URL
			} else {
				u = "http://127.0.0.1:8080"
			}
		}
		return strings.TrimRight(u, "/"), dir
	}
}

func firstNonEmpty(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

// do sends a JSON request and decodes a JSON response into out. Non-2xx
// answers become *apiError.
func (c *client) do(ctx context.Context, method, path string, body, out any) (int, error) {
	var raw []byte
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		raw = b
	}
	return c.send(ctx, method, path, "application/json", raw, out)
}

// send sends body (none when nil) with the given content type and decodes a
// JSON response into out. Non-2xx answers become *apiError.
func (c *client) send(ctx context.Context, method, path, contentType string, body []byte, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.url+path, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	// The API records reads of sensitive requests with the surface they
	// came through; this names the CLI.
	req.Header.Set("User-Agent", "countersign-cli/1")
	if body != nil {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, fmt.Errorf("cannot reach the Countersign API at %s: %w", c.url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode >= 300 {
		var e struct {
			Error apiError `json:"error"`
		}
		if json.Unmarshal(data, &e) != nil || e.Error.Code == "" {
			return resp.StatusCode, &httpStatusError{Status: resp.StatusCode, Body: strings.TrimSpace(string(data))}
		}
		e.Error.Status = resp.StatusCode
		return resp.StatusCode, &e.Error
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("unexpected answer from the API: %w", err)
		}
	}
	return resp.StatusCode, nil
}
