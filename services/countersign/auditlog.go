package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/countersign/countersign/contracts/audit"
	"github.com/countersign/countersign/contracts/receipt"
	"github.com/countersign/countersign/services/arbiter"
)

// auditConfig is when the arbiter signs a checkpoint of the audit log
// (docs/audit.md): after checkpoint_every entries (default 1000), or once
// the oldest entry not signed yet is checkpoint_interval old (default 1m).
type auditConfig struct {
	CheckpointEvery    int    `yaml:"checkpoint_every"`
	CheckpointInterval string `yaml:"checkpoint_interval"`
	interval           time.Duration
	// Sinks receive every entry as it is appended (auditsinks.go).
	Sinks []auditSinkConfig `yaml:"sinks"`
}

func (c *auditConfig) validate() []error {
	var errs []error
	if c.CheckpointEvery < 0 || c.CheckpointEvery > audit.MaxLeaves {
		errs = append(errs, fmt.Errorf("config: audit.checkpoint_every must be 1 to %d, got %d", audit.MaxLeaves, c.CheckpointEvery))
	}
	if c.CheckpointInterval != "" {
		d, err := time.ParseDuration(c.CheckpointInterval)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("config: audit.checkpoint_interval must be a positive duration, got %q", c.CheckpointInterval))
		}
		c.interval = d
	}
	if _, err := c.sinks(); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// arbiter is the arbiter's AuditConfig.
func (c *auditConfig) arbiter() arbiter.AuditConfig {
	return arbiter.AuditConfig{CheckpointEvery: c.CheckpointEvery, CheckpointInterval: c.interval}
}

// cmdAuditExport writes the audit log's bundle (GET /v1/audit/export), or
// its OCSF events with --format ocsf, to a file or stdout, as the API
// streams it.
func cmdAuditExport(args []string, out io.Writer) error {
	fs := newFlagSet("audit export", out)
	newClient := clientFlags(fs.FlagSet)
	since := fs.String("since", "", "start of the range (RFC 3339; default the log's start)")
	until := fs.String("until", "", "end of the range (RFC 3339; default now)")
	into := fs.String("o", "", "write the bundle to this file (default stdout)")
	format := fs.String("format", "native", "native (the bundle audit verify checks) or ocsf (OCSF events, JSON Lines)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return errors.New("audit export: no arguments, only flags")
	}
	q := url.Values{}
	for name, v := range map[string]string{"since": *since, "until": *until} {
		if v == "" {
			continue
		}
		if _, err := time.Parse(time.RFC3339, v); err != nil {
			return fmt.Errorf("audit export: --%s must be an RFC 3339 time, got %q", name, v)
		}
		q.Set(name, v)
	}
	switch *format {
	case "native":
	case "ocsf":
		q.Set("format", "ocsf")
	default:
		return fmt.Errorf("audit export: --format must be native or ocsf, got %q", *format)
	}
	c, err := newClient()
	if err != nil {
		return err
	}
	w := out
	if *into != "" {
		f, err := os.OpenFile(*into, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return fmt.Errorf("audit export: %w", err)
		}
		defer f.Close()
		w = f
	}
	path := "/v1/audit/export"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	if err := c.stream(context.Background(), path, w); err != nil {
		return fmt.Errorf("audit export: %w", err)
	}
	if f, ok := w.(*os.File); ok && f != out {
		return f.Sync()
	}
	return nil
}

// stream copies the body of GET path to w. Non-2xx answers are errors.
func (c *client) stream(ctx context.Context, path string, w io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("User-Agent", "countersign-cli/1")
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach the Countersign API at %s: %w", c.url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		var e struct {
			Error apiError `json:"error"`
		}
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if json.Unmarshal(data, &e) != nil || e.Error.Code == "" {
			return &httpStatusError{Status: resp.StatusCode, Body: strings.TrimSpace(string(data))}
		}
		e.Error.Status = resp.StatusCode
		return &e.Error
	}
	_, err = io.Copy(w, resp.Body)
	return err
}

// cmdAuditVerify checks a bundle offline: every checkpoint's signature and
// chain, and every entry against the checkpoint that signed it.
func cmdAuditVerify(args []string, out io.Writer) error {
	fs := newFlagSet("audit verify", out)
	keysFile := fs.String("keys", "", "the server's published keys (a JWKS file, as /.well-known/jwks.json serves it); default the bundle's own copy")
	jsonOut := fs.Bool("json", false, "print the report as JSON")
	if err := fs.Parse(reorder(args)); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("audit verify: want exactly one bundle file")
	}
	var keys receipt.KeySource
	if *keysFile != "" {
		data, err := os.ReadFile(*keysFile)
		if err != nil {
			return fmt.Errorf("audit verify: %w", err)
		}
		ks, err := receipt.ParseJWKS(data)
		if err != nil {
			return fmt.Errorf("audit verify: %s: %w", *keysFile, err)
		}
		keys = ks
	}
	f, err := os.Open(fs.Arg(0))
	if err != nil {
		return fmt.Errorf("audit verify: %w", err)
	}
	defer f.Close()
	h, rep, err := audit.Verify(context.Background(), f, keys)
	if err != nil {
		return fmt.Errorf("audit verify: %w", err)
	}
	if *jsonOut {
		if err := printJSON(out, rep); err != nil {
			return err
		}
	} else {
		printVerify(out, h, rep, *keysFile)
	}
	if !rep.OK() {
		return exitError(1)
	}
	return nil
}

// printVerify writes what a verification found, problems first.
func printVerify(out io.Writer, h *audit.Header, rep *audit.Report, keysFile string) {
	for _, p := range rep.Problems {
		fmt.Fprintln(out, "FAIL", p.Message)
	}
	fmt.Fprintf(out, "bundle %s, exported %s\n", h.Format, h.ExportedAt.UTC().Format(time.RFC3339))
	if keysFile != "" {
		fmt.Fprintf(out, "keys: %s\n", keysFile)
	} else {
		var kids []string
		for _, k := range h.Keys.Keys {
			kids = append(kids, k.Kid)
		}
		fmt.Fprintf(out, "keys: the bundle's own (%s): compare them with the server's /.well-known/jwks.json, or pass --keys\n", strings.Join(kids, ", "))
	}
	fmt.Fprintf(out, "%d entries; %d checkpoints verify, signing %d of them", rep.Entries, rep.Checkpoints, rep.Signed)
	if rep.Unsigned > 0 {
		fmt.Fprintf(out, "; %d appended after the last checkpoint (chained, not signed yet)", rep.Unsigned)
	}
	fmt.Fprintln(out)
	if rep.Head != "" {
		fmt.Fprintf(out, "head %s at entry %d, signed by %s\n", rep.Head, rep.HeadSeq, strings.Join(rep.KeyIDs, ", "))
	}
	if rep.OK() {
		fmt.Fprintln(out, "OK: no entry altered, removed, reordered or inserted")
	} else {
		fmt.Fprintf(out, "FAILED: %d problems\n", len(rep.Problems))
	}
}
