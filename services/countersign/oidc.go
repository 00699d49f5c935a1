package main

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/countersign/countersign/orchestrator/directory"
	"github.com/countersign/countersign/services/inbox"
)

// oidcConfig is countersign.yaml's oidc: block, sign-in to the inbox
// through an OpenID Connect provider. Absent (no issuer): tokens only.
// COUNTERSIGN_OIDC_ISSUER, _CLIENT_ID, _CLIENT_SECRET and _REDIRECT_URL
// override the file.
type oidcConfig struct {
	// Issuer is the provider's issuer URL.
	Issuer   string `yaml:"issuer"`
	ClientID string `yaml:"client_id"`
	// ClientSecret, or ClientSecretFile (a file holding it), exactly one.
	ClientSecret     string `yaml:"client_secret"`
	ClientSecretFile string `yaml:"client_secret_file"`
	// RedirectURL is registered at the provider; default
	// <public_url>/oidc/callback.
	RedirectURL string `yaml:"redirect_url"`
	// PostLogoutRedirectURL is where the provider's sign-out returns;
	// default <public_url>/login.
	PostLogoutRedirectURL string `yaml:"post_logout_redirect_url"`
	// Scopes default to openid, email, profile.
	Scopes []string `yaml:"scopes"`
	// Match is subject (the directory's oidc_subject, the default) or
	// email (a verified email address).
	Match        string `yaml:"match"`
	GroupsClaim  string `yaml:"groups_claim"`
	TenantsClaim string `yaml:"tenants_claim"`
	// Name is shown on the sign-in button.
	Name string `yaml:"name"`
	// Only hides the token form.
	Only bool `yaml:"only"`
	// APIAudiences are audiences, besides client_id, of the provider's
	// tokens the HTTP API takes as bearer tokens (a command-line client's
	// id, or this API's identifier for JWT access tokens).
	APIAudiences []string `yaml:"api_audiences"`
	// CLIClientID is a public client at the provider that 'countersign
	// login' signs people in with (PKCE, redirect
	// http://127.0.0.1/callback on any port).
	CLIClientID string `yaml:"cli_client_id"`
}

// configured reports whether the block asks for OIDC sign-in at all.
func (o *oidcConfig) configured() bool {
	return o.Issuer != "" || o.ClientID != "" || o.ClientSecret != "" || o.ClientSecretFile != "" || o.RedirectURL != ""
}

// validate checks the block as written; what needs the public URL or the
// secret file is checked by inboxOIDC.
func (o *oidcConfig) validate(directoryPath string) []error {
	if !o.configured() {
		if o.Only || o.Match != "" || len(o.Scopes) > 0 || len(o.APIAudiences) > 0 || o.CLIClientID != "" || o.GroupsClaim != "" || o.TenantsClaim != "" || o.Name != "" || o.PostLogoutRedirectURL != "" {
			return []error{errors.New("config: oidc: issuer is required when any other oidc key is set")}
		}
		return nil
	}
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf("config: oidc."+format, a...)) }
	if o.Issuer == "" {
		add("issuer is required")
	} else if msg := inbox.ValidIssuer(o.Issuer); msg != "" {
		add("issuer %q %s", o.Issuer, msg)
	}
	if o.ClientID == "" {
		add("client_id is required")
	}
	if (o.ClientSecret == "") == (o.ClientSecretFile == "") {
		add("client_secret or client_secret_file is required, not both (the inbox is a confidential client)")
	}
	if o.RedirectURL != "" {
		if msg := inbox.ValidRedirect(o.RedirectURL); msg != "" {
			add("redirect_url %q %s", o.RedirectURL, msg)
		}
	}
	if o.PostLogoutRedirectURL != "" && inbox.ValidIssuer(o.PostLogoutRedirectURL) != "" {
		add("post_logout_redirect_url %q must be an https URL (http only on a loopback host), without query or fragment", o.PostLogoutRedirectURL)
	}
	if len(o.Scopes) > 0 && !slices.Contains(o.Scopes, "openid") {
		add("scopes must include openid, got %v", o.Scopes)
	}
	switch o.Match {
	case "", inbox.MatchSubject:
	case inbox.MatchEmail:
		if len(o.Scopes) > 0 && !slices.Contains(o.Scopes, "email") {
			add("scopes must include email when match is email, got %v", o.Scopes)
		}
	default:
		add("match must be subject or email, got %q", o.Match)
	}
	for key, claim := range map[string]string{"groups_claim": o.GroupsClaim, "tenants_claim": o.TenantsClaim} {
		if claim != strings.TrimSpace(claim) || strings.ContainsAny(claim, " \t") {
			add("%s %q must be a claim name without spaces", key, claim)
		}
	}
	for _, a := range o.APIAudiences {
		if a == "" || strings.TrimSpace(a) != a {
			add("api_audiences: %q is not an audience (empty, or spaces around it)", a)
		}
	}
	if o.CLIClientID != strings.TrimSpace(o.CLIClientID) || o.CLIClientID != "" && o.CLIClientID == o.ClientID {
		add("cli_client_id %q must be a public client of its own (not the inbox's client_id), without spaces", o.CLIClientID)
	}
	if directoryPath == "" {
		add("issuer needs a directory (directory: or COUNTERSIGN_DIRECTORY): its users are who may sign in")
	}
	return errs
}

// inboxOIDC is the inbox's configuration of the block: the secret read,
// the redirect URLs defaulted from the public URL. Nil without a block.
func (o *oidcConfig) inboxOIDC(publicURL string, people directory.Source) (*inbox.OIDC, error) {
	if !o.configured() {
		return nil, nil
	}
	secret := o.ClientSecret
	if o.ClientSecretFile != "" {
		b, err := os.ReadFile(o.ClientSecretFile)
		if err != nil {
			return nil, fmt.Errorf("config: oidc.client_secret_file: %w", err)
		}
		if secret = strings.TrimSpace(string(b)); secret == "" {
			return nil, fmt.Errorf("config: oidc.client_secret_file %s is empty", o.ClientSecretFile)
		}
	}
	redirect := o.RedirectURL
	if redirect == "" {
		redirect = publicURL + "/oidc/callback"
		if msg := inbox.ValidRedirect(redirect); msg != "" {
			return nil, fmt.Errorf("config: oidc.redirect_url: the default %s (from public_url) %s; set public_url or oidc.redirect_url", redirect, msg)
		}
	}
	logout := o.PostLogoutRedirectURL
	if logout == "" && o.RedirectURL == "" {
		logout = publicURL + "/login"
	}
	return &inbox.OIDC{
		Issuer: o.Issuer, ClientID: o.ClientID, ClientSecret: secret, RedirectURL: redirect, PostLogoutRedirectURL: logout,
		Scopes: slices.Clone(o.Scopes), Match: o.Match, GroupsClaim: o.GroupsClaim, TenantsClaim: o.TenantsClaim,
		Name: o.Name, Only: o.Only, People: people, APIAudiences: slices.Clone(o.APIAudiences),
		CLIClientID: o.CLIClientID,
	}, nil
}
