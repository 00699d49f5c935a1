package main

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/countersign/countersign/orchestrator/reviewer"
)

// reviewerConfig is one automated reviewer of countersign.yaml's
// reviewers:, named there by the key policies use (reviewer.endpoint). The
// policy holds no address and no secret; the API key is read from the
// environment variable api_key_env names.
type reviewerConfig struct {
	URL       string `yaml:"url"`
	Kind      string `yaml:"kind"`
	Model     string `yaml:"model"`
	APIKeyEnv string `yaml:"api_key_env"`
}

// reviewerEndpoints are the configured reviewers, their keys read from the
// environment: a key variable that is named but empty is an error.
func (c *fileConfig) reviewerEndpoints() (map[string]*reviewer.Endpoint, error) {
	if len(c.Reviewers) == 0 {
		return nil, nil
	}
	out := map[string]*reviewer.Endpoint{}
	var errs []error
	names := make([]string, 0, len(c.Reviewers))
	for name := range c.Reviewers {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		rc := c.Reviewers[name]
		ep := &reviewer.Endpoint{Name: name, URL: rc.URL, Kind: rc.Kind, Model: rc.Model}
		if rc.APIKeyEnv != "" {
			ep.APIKey = strings.TrimSpace(os.Getenv(rc.APIKeyEnv))
			if ep.APIKey == "" {
				errs = append(errs, fmt.Errorf("config: reviewers.%s.api_key_env: $%s is empty", name, rc.APIKeyEnv))
			}
		}
		if err := ep.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("config: reviewers: %w", err))
		}
		out[name] = ep
	}
	return out, errors.Join(errs...)
}
