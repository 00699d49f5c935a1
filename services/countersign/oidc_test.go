package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The oidc: block is checked as written, every mistake named by its key.
func TestOIDCConfigIsValidated(t *testing.T) {
	for _, c := range []struct {
		name, yaml, dir string
		want            []string
	}{
		{"absent", "", "", nil},
		{"complete", "oidc: {issuer: https://id.example.com, client_id: inbox, client_secret: s, match: email, groups_claim: groups, tenants_claim: tenants}\n", "d.yaml", nil},
		{"api audiences", "oidc: {issuer: https://id.example.com, client_id: inbox, client_secret: s, api_audiences: [countersign-cli, \"https://countersign.example.com\"]}\n", "d.yaml", nil},
		{"blank api audience", "oidc: {issuer: https://id.example.com, client_id: inbox, client_secret: s, api_audiences: [\" cli\"]}\n", "d.yaml", []string{"oidc.api_audiences"}},
		{"loopback http", "oidc: {issuer: \"http://127.0.0.1:9998\", client_id: inbox, client_secret_file: secret}\n", "d.yaml", nil},
		{"keys without issuer", "oidc: {only: true}\n", "", []string{"oidc: issuer is required"}},
		{"plain http", "oidc: {issuer: \"http://id.example.com\", client_id: inbox, client_secret: s}\n", "d.yaml", []string{"oidc.issuer", "must be https"}},
		{"no client", "oidc: {issuer: https://id.example.com}\n", "d.yaml", []string{"oidc.client_id is required", "oidc.client_secret or client_secret_file is required"}},
		{"both secrets", "oidc: {issuer: https://id.example.com, client_id: c, client_secret: s, client_secret_file: f}\n", "d.yaml", []string{"not both"}},
		{"redirect elsewhere", "oidc: {issuer: https://id.example.com, client_id: c, client_secret: s, redirect_url: https://inbox.example.com/callback}\n", "d.yaml", []string{"oidc.redirect_url", "/oidc/callback"}},
		{"no openid", "oidc: {issuer: https://id.example.com, client_id: c, client_secret: s, scopes: [email]}\n", "d.yaml", []string{"oidc.scopes must include openid"}},
		{"email without its scope", "oidc: {issuer: https://id.example.com, client_id: c, client_secret: s, match: email, scopes: [openid]}\n", "d.yaml", []string{"scopes must include email"}},
		{"bad match", "oidc: {issuer: https://id.example.com, client_id: c, client_secret: s, match: name}\n", "d.yaml", []string{"oidc.match must be subject or email"}},
		{"claim with space", "oidc: {issuer: https://id.example.com, client_id: c, client_secret: s, groups_claim: \"my groups\"}\n", "d.yaml", []string{"oidc.groups_claim"}},
		{"no directory", "oidc: {issuer: https://id.example.com, client_id: c, client_secret: s}\n", "", []string{"needs a directory"}},
		{"unknown key", "oidc: {issuer: https://id.example.com, client: c}\n", "", []string{"field client not found"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "countersign.yaml")
			if err := os.WriteFile(path, []byte(c.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			fc, err := loadConfig(path)
			if err == nil {
				if c.dir != "" {
					fc.Directory = c.dir
				}
				cfg := serveConfig{fileConfig: fc}
				err = cfg.validate()
			}
			if len(c.want) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			for _, w := range c.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("error %v does not say %q", err, w)
				}
			}
		})
	}
}

// The redirect and sign-out URLs default from the public URL, and the
// secret comes from its file.
func TestOIDCConfigDefaultsFromThePublicURL(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := oidcConfig{Issuer: "https://id.example.com", ClientID: "c", ClientSecretFile: secret}
	got, err := o.inboxOIDC("https://approvals.example.com", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.ClientSecret != "s3cret" || got.RedirectURL != "https://approvals.example.com/oidc/callback" || got.PostLogoutRedirectURL != "https://approvals.example.com/login" {
		t.Fatalf("inbox OIDC: %+v", got)
	}
	if _, err := o.inboxOIDC("http://0.0.0.0:8080", nil); err == nil || !strings.Contains(err.Error(), "set public_url or oidc.redirect_url") {
		t.Fatalf("a default redirect on plain http to a public address: %v", err)
	}
}
