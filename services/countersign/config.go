package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/countersign/countersign/events/tracing"
	"github.com/countersign/countersign/services/api"
)

// Roles a serve process can run.
const (
	roleArbiter  = "arbiter"
	roleAPI      = "api"
	roleNotifier = "notifier"
)

var allRoles = []string{roleArbiter, roleAPI, roleNotifier}

// fileConfig is countersign.yaml. Flags override it; environment variables
// COUNTERSIGN_ADDR, COUNTERSIGN_DATA, COUNTERSIGN_NATS_URL and
// COUNTERSIGN_DIRECTORY override both.
type fileConfig struct {
	Addr   string `yaml:"addr"`
	Data   string `yaml:"data"`
	Policy string `yaml:"policy"`
	// Directory is the approver directory file (optional), reloaded live.
	Directory string   `yaml:"directory"`
	Roles     []string `yaml:"roles"`
	Retention string   `yaml:"retention"`
	// IndexRecent is how many decided approvals each API replica keeps in
	// memory beside the pending ones (default 20000); older history is
	// listed from the bucket.
	IndexRecent int `yaml:"index_recent"`
	// MemoryLimit bounds the memory serve's Go runtime holds: auto (the
	// default: a quarter above the live heap, at least 96MiB), off, or a size
	// such as 512MiB (memory.go). GOMEMLIMIT wins over it.
	MemoryLimit string      `yaml:"memory_limit"`
	NATS        natsConfig  `yaml:"nats"`
	Tokens      []api.Token `yaml:"tokens"`
	// PublicURL is where approvers reach this server (links in Slack and
	// email); default http://<addr>.
	PublicURL string `yaml:"public_url"`
	// Notify configures the notification channels.
	Notify notifyConfig `yaml:"notify"`
	// Receipts configures the keys that sign receipts (receipts.go).
	Receipts receiptsConfig `yaml:"receipts"`
	// Budgets bound the HTTP connections, their timeouts, and what one
	// principal may take of the API (budgets.go).
	Budgets budgetsConfig `yaml:"budgets"`
	// Metrics says where /metrics is served and who reads it (metrics.go).
	Metrics metricsConfig `yaml:"metrics"`
	// OIDC is sign-in to the inbox through an OpenID Connect provider (oidc.go).
	OIDC oidcConfig `yaml:"oidc"`
	// Passkeys is the WebAuthn relying party (passkeys.go).
	Passkeys passkeysConfig `yaml:"passkeys"`
	// Audit is when the audit log's checkpoints are signed (auditlog.go).
	Audit auditConfig `yaml:"audit"`
	// OTel exports OpenTelemetry traces over OTLP/HTTP (otel.go); off
	// without an endpoint here or in OTEL_EXPORTER_OTLP_*.
	OTel tracing.Config `yaml:"otel"`
	// Reviewers are the automated first reviewers policies may name
	// (reviewers.go).
	Reviewers map[string]reviewerConfig `yaml:"reviewers"`
}

type natsConfig struct {
	// URL of an external NATS server; empty runs the embedded one.
	URL string `yaml:"url"`
	// User and Password for the external server (or a credentials file).
	User      string `yaml:"user"`
	Password  string `yaml:"password"`
	CredsFile string `yaml:"creds"`
	// InboxPrefix is where the connection to an external server takes its
	// replies. Empty: _INBOX_<user> when the user (User, or the URL's) is
	// a Countersign role's, as deploy/ grants each role its own inboxes
	// only; the client's default, _INBOX, otherwise.
	InboxPrefix string `yaml:"inbox_prefix"`
	// Listen is the embedded server's client address; "off" disables it.
	Listen string `yaml:"listen"`
	// Sync is "always" (fsync every write, the default) or "lazy".
	Sync string `yaml:"sync"`
	// Provision says whether serve creates or updates the streams and
	// buckets at start: "auto" (the default) does with the embedded server
	// and not against an external one, where role users may not (run
	// `countersign serve` once with the admin user and provision: "true",
	// or give one process admin credentials).
	Provision string `yaml:"provision"`
	// Replicas of the streams and buckets when serve creates them: 0 (the
	// default) means 1 on a single server and 3 on a cluster of three or
	// more nodes.
	Replicas int `yaml:"replicas"`
}

type serveConfig struct {
	fileConfig
	retention time.Duration
	memory    memoryLimit
}

func defaultConfig() fileConfig {
	return fileConfig{
		Addr:      "127.0.0.1:8080",
		Data:      "./data",
		Roles:     slices.Clone(allRoles),
		Retention: "720h",
		NATS:      natsConfig{Listen: "127.0.0.1:4222", Sync: "always", Provision: "auto"},
	}
}

// loadConfig reads path (if not empty) over the defaults.
func loadConfig(path string) (fileConfig, error) {
	cfg := defaultConfig()
	if path == "" {
		return cfg, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return cfg, fmt.Errorf("config %s: %w", path, err)
	}
	// Relative paths in the file are relative to the file.
	paths := []*string{&cfg.Policy, &cfg.Directory, &cfg.Receipts.Keys, &cfg.Receipts.PublicKeys, &cfg.Receipts.APIKeys, &cfg.OIDC.ClientSecretFile}
	for i := range cfg.Audit.Sinks {
		s := &cfg.Audit.Sinks[i]
		paths = append(paths, &s.CAFile, &s.CertFile, &s.KeyFile)
	}
	for _, p := range paths {
		if *p != "" && !filepath.IsAbs(*p) && !strings.HasPrefix(*p, "./") {
			*p = filepath.Join(filepath.Dir(path), *p)
		}
	}
	return cfg, nil
}

func (c *serveConfig) validate() error {
	var errs []error
	if c.Addr == "" {
		errs = append(errs, errors.New("config: addr is required"))
	}
	if c.Data == "" {
		errs = append(errs, errors.New("config: data is required"))
	}
	for _, r := range c.Roles {
		if !slices.Contains(allRoles, r) {
			errs = append(errs, fmt.Errorf("config: roles: unknown role %q (arbiter, api, notifier)", r))
		}
	}
	if len(c.Roles) == 0 {
		errs = append(errs, errors.New("config: roles must name at least one role"))
	}
	switch c.NATS.Provision {
	case "auto", "true", "false":
	default:
		errs = append(errs, fmt.Errorf("config: nats.provision must be auto, true or false, got %q", c.NATS.Provision))
	}
	switch c.NATS.Sync {
	case "always", "lazy":
	default:
		errs = append(errs, fmt.Errorf("config: nats.sync must be always or lazy, got %q", c.NATS.Sync))
	}
	d, err := time.ParseDuration(c.Retention)
	if err != nil || d < time.Hour {
		errs = append(errs, fmt.Errorf("config: retention must be a duration of at least 1h, got %q", c.Retention))
	}
	c.retention = d
	if c.memory, err = parseMemoryLimit(c.MemoryLimit); err != nil {
		errs = append(errs, err)
	}
	if c.IndexRecent < 0 {
		errs = append(errs, fmt.Errorf("config: index_recent must be 0 (the default, %d) or more, got %d", api.DefaultIndexRecent, c.IndexRecent))
	}
	if c.PublicURL != "" && !strings.HasPrefix(c.PublicURL, "http://") && !strings.HasPrefix(c.PublicURL, "https://") {
		errs = append(errs, fmt.Errorf("config: public_url must be an http or https URL, got %q", c.PublicURL))
	}
	if err := c.Budgets.validate(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.Metrics.validate()...)
	errs = append(errs, c.OIDC.validate(c.Directory)...)
	errs = append(errs, c.Audit.validate()...)
	for i, t := range c.Tokens {
		if len(t.SHA256) != 64 || t.Subject == "" || len(t.Roles) == 0 {
			errs = append(errs, fmt.Errorf("config: tokens[%d]: sha256 (64 hex), subject and roles are required", i))
		}
	}
	return errors.Join(errs...)
}

func (c *serveConfig) has(role string) bool { return slices.Contains(c.Roles, role) }
