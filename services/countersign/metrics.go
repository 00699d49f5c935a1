package main

import (
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/services/api"
)

// metricsConfig is countersign.yaml's metrics: where /metrics is served
// and who may read it. The metrics count every tenant's requests and
// describe the deployment, so by default only the local machine reads
// them without a token.
type metricsConfig struct {
	// Access says who reads /metrics on addr: auto (the default) is open
	// when addr is a loopback address and token otherwise; token needs an
	// admin's bearer token or a scrape token (Tokens); open serves anyone;
	// off serves no one there.
	Access string `yaml:"access"`
	// Listen, when set, serves /metrics (and only it) on this address
	// instead, to whoever reaches it: a port kept to the monitoring
	// network. /metrics on addr is then off unless access says otherwise.
	Listen string `yaml:"listen"`
	// Tokens are SHA-256 hashes of scrape tokens (countersign token new):
	// they read /metrics and nothing else.
	Tokens []string `yaml:"tokens"`
}

// Values of metrics.access besides the API's.
const metricsAuto = "auto"

func (m *metricsConfig) validate() []error {
	var errs []error
	switch m.Access {
	case "", metricsAuto, api.MetricsToken, api.MetricsOpen, api.MetricsOff:
	default:
		errs = append(errs, fmt.Errorf("config: metrics.access must be auto, token, open or off, got %q", m.Access))
	}
	if m.Listen != "" {
		if _, _, err := net.SplitHostPort(m.Listen); err != nil {
			errs = append(errs, fmt.Errorf("config: metrics.listen must be host:port, got %q: %v", m.Listen, err))
		}
	}
	for i, h := range m.Tokens {
		if len(h) != 64 || strings.Trim(strings.ToLower(h), "0123456789abcdef") != "" {
			errs = append(errs, fmt.Errorf("config: metrics.tokens[%d] must be the SHA-256 of a token, 64 hex characters", i))
		}
	}
	return errs
}

// access is who reads /metrics on addr, auto resolved.
func (m *metricsConfig) access(addr string) string {
	switch {
	case m.Access != "" && m.Access != metricsAuto:
		return m.Access
	case m.Listen != "":
		return api.MetricsOff
	case loopback(addr):
		return api.MetricsOpen
	}
	return api.MetricsToken
}

// hashes are the scrape tokens' hashes, in lowercase.
func (m *metricsConfig) hashes() []string {
	out := make([]string, len(m.Tokens))
	for i, h := range m.Tokens {
		out[i] = strings.ToLower(h)
	}
	return out
}

// loopback reports whether a listen address reaches only this machine.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// healthMetrics is /metrics of a process without the API: the scrape
// tokens and the configured admin tokens read it.
func healthMetrics(cfg serveConfig, reg *prometheus.Registry) http.Handler {
	hashes := cfg.Metrics.hashes()
	for _, t := range cfg.Tokens {
		if slices.Contains(t.Roles, api.RoleAdmin) {
			hashes = append(hashes, strings.ToLower(t.SHA256))
		}
	}
	return api.MetricsHandler(reg, cfg.Metrics.access(cfg.Addr), api.ScrapeTokens(hashes))
}
