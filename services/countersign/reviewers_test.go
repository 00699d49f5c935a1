package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReviewersComeFromTheConfigAndTheirKeysFromTheEnvironment(t *testing.T) {
	path := filepath.Join(t.TempDir(), "countersign.yaml")
	src := `reviewers:
  triage: {url: "https://api.openai.com/v1", kind: openai, model: gpt-4.1-mini, api_key_env: TEST_REVIEWER_KEY}
  house: {url: "https://reviewer.internal/review", kind: http}
`
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("TEST_REVIEWER_KEY", "")
	if _, err := cfg.reviewerEndpoints(); err == nil || !strings.Contains(err.Error(), "$TEST_REVIEWER_KEY is empty") {
		t.Fatalf("an empty key variable: %v", err)
	}
	t.Setenv("TEST_REVIEWER_KEY", "sk-test")
	eps, err := cfg.reviewerEndpoints()
	if err != nil {
		t.Fatal(err)
	}
	if ep := eps["triage"]; ep.APIKey != "sk-test" || ep.Model != "gpt-4.1-mini" || ep.Name != "triage" || eps["house"].APIKey != "" {
		t.Fatalf("endpoints %+v %+v", eps["triage"], eps["house"])
	}
	cfg.Reviewers["bad"] = reviewerConfig{URL: "https://user:pw@x.example/v1", Kind: "openai"}
	_, err = cfg.reviewerEndpoints()
	if err == nil || !strings.Contains(err.Error(), `reviewer "bad": url must hold no credentials`) || !strings.Contains(err.Error(), "model is required") {
		t.Fatalf("a reviewer with credentials in its URL and no model: %v", err)
	}
}
