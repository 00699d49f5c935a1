package main

import (
	"fmt"
	"time"

	"github.com/countersign/countersign/notifier/auditsink"
)

// auditSinkConfig is one receiver of the audit log (docs/audit.md,
// Streaming to a SIEM): an HTTPS endpoint (url, secrets, headers) or a
// syslog receiver over TLS (syslog, ca_file, cert_file, key_file).
type auditSinkConfig struct {
	Name     string            `yaml:"name"`
	URL      string            `yaml:"url"`
	Secrets  []string          `yaml:"secrets"`
	Headers  map[string]string `yaml:"headers"`
	Syslog   string            `yaml:"syslog"`
	CAFile   string            `yaml:"ca_file"`
	CertFile string            `yaml:"cert_file"`
	KeyFile  string            `yaml:"key_file"`
	// Format is ocsf (default) or native.
	Format string `yaml:"format"`
	// Tenants whose entries the sink receives ("*": every entry); without
	// them, only entries that name no tenant.
	Tenants  []string `yaml:"tenants"`
	Timeout  string   `yaml:"timeout"`
	Attempts int      `yaml:"attempts"`
}

// sinks resolves the configured sinks: env:NAME secrets and header values
// read the environment.
func (c *auditConfig) sinks() ([]auditsink.Sink, error) {
	var out []auditsink.Sink
	for i, sc := range c.Sinks {
		what := fmt.Sprintf("audit.sinks[%d]", i)
		s := auditsink.Sink{
			Name: sc.Name, URL: sc.URL, Syslog: sc.Syslog, CAFile: sc.CAFile, CertFile: sc.CertFile, KeyFile: sc.KeyFile,
			Format: sc.Format, Tenants: sc.Tenants, Attempts: sc.Attempts, Headers: map[string]string{},
		}
		for _, v := range sc.Secrets {
			sec, err := secret(what+".secrets", v)
			if err != nil {
				return nil, err
			}
			s.Secrets = append(s.Secrets, sec)
		}
		for k, v := range sc.Headers {
			h, err := secret(what+".headers."+k, v)
			if err != nil {
				return nil, err
			}
			s.Headers[k] = h
		}
		if sc.Timeout != "" {
			d, err := time.ParseDuration(sc.Timeout)
			if err != nil || d <= 0 {
				return nil, fmt.Errorf("config: %s.timeout must be a positive duration, got %q", what, sc.Timeout)
			}
			s.Timeout = d
		}
		out = append(out, s)
	}
	if err := (&auditsink.Config{Sinks: out}).Validate(); err != nil {
		return nil, fmt.Errorf("config: audit.sinks: %w", err)
	}
	return out, nil
}
