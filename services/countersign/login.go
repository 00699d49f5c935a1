package main

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/countersign/countersign/services/inbox"
)

// 'countersign login' signs a person in through the server's identity
// provider, as its command-line client (oidc.cli_client_id), with the
// authorization code flow and PKCE in the person's browser and a
// one-time redirect to a loopback port; the ID token is the CLI's bearer
// token for that server from then on, renewed with the refresh token
// while the provider agrees. Sign-ins are kept per server URL in
// login.json (mode 0600) under $COUNTERSIGN_CONFIG_DIR, or the user's
// configuration directory's countersign/.

// loginEntry is one server's sign-in.
type loginEntry struct {
	Issuer       string    `json:"issuer"`
	ClientID     string    `json:"client_id"`
	IDToken      string    `json:"id_token"`
	RefreshToken string    `json:"refresh_token,omitempty"`
	Expiry       time.Time `json:"expiry"`
	Subject      string    `json:"subject"`
}

// loginRenewBefore renews a sign-in this long before its token expires.
const loginRenewBefore = time.Minute

func loginFile() (string, error) {
	dir := os.Getenv("COUNTERSIGN_CONFIG_DIR")
	if dir == "" {
		base, err := os.UserConfigDir()
		if err != nil {
			return "", fmt.Errorf("login: no configuration directory (set COUNTERSIGN_CONFIG_DIR): %w", err)
		}
		dir = filepath.Join(base, "countersign")
	}
	return filepath.Join(dir, "login.json"), nil
}

// readLogins reads every kept sign-in, by server URL.
func readLogins() (map[string]loginEntry, string, error) {
	path, err := loginFile()
	if err != nil {
		return nil, "", err
	}
	out := map[string]loginEntry{}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return out, path, nil
	}
	if err != nil {
		return nil, path, fmt.Errorf("login: %w", err)
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, path, fmt.Errorf("login: %s is damaged (%v); delete it and sign in again", path, err)
	}
	return out, path, nil
}

// writeLogins replaces the kept sign-ins, readable by the user alone.
func writeLogins(path string, logins map[string]loginEntry) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("login: %w", err)
	}
	b, err := json.MarshalIndent(logins, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".login-*.json")
	if err != nil {
		return fmt.Errorf("login: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("login: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("login: %w", err)
	}
	if err := os.Chmod(tmp.Name(), 0o600); err != nil {
		return fmt.Errorf("login: %w", err)
	}
	return os.Rename(tmp.Name(), path)
}

// loginToken answers the kept sign-in's token for the server at url,
// renewed first when it is about to expire; found is false when there is
// none.
func loginToken(ctx context.Context, url string) (token string, found bool, err error) {
	if _, err := loginFile(); err != nil {
		return "", false, nil // nowhere a login could be kept (no home directory): none
	}
	logins, path, err := readLogins()
	if err != nil {
		return "", false, err
	}
	e, ok := logins[url]
	if !ok {
		return "", false, nil
	}
	if time.Until(e.Expiry) > loginRenewBefore {
		return e.IDToken, true, nil
	}
	if e.RefreshToken == "" {
		return "", true, fmt.Errorf("the sign-in to %s has expired: run 'countersign login' again", url)
	}
	renewed, err := renewLogin(ctx, e)
	if err != nil {
		return "", true, fmt.Errorf("the sign-in to %s has expired and the identity provider did not renew it (%v): run 'countersign login' again", url, err)
	}
	logins[url] = renewed
	if err := writeLogins(path, logins); err != nil {
		return "", true, err
	}
	return renewed.IDToken, true, nil
}

// renewLogin asks the provider for a new ID token with e's refresh token.
func renewLogin(ctx context.Context, e loginEntry) (loginEntry, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	p, err := oidc.NewProvider(ctx, e.Issuer)
	if err != nil {
		return e, err
	}
	conf := &oauth2.Config{ClientID: e.ClientID, Endpoint: p.Endpoint()}
	tok, err := conf.TokenSource(ctx, &oauth2.Token{RefreshToken: e.RefreshToken, Expiry: time.Unix(1, 0)}).Token()
	if err != nil {
		return e, err
	}
	return loginEntryOf(ctx, p, e.Issuer, e.ClientID, tok, "")
}

// loginEntryOf checks the ID token in tok (and its nonce, when given) and
// makes the sign-in of it.
func loginEntryOf(ctx context.Context, p *oidc.Provider, issuer, clientID string, tok *oauth2.Token, nonce string) (loginEntry, error) {
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return loginEntry{}, errors.New("the identity provider sent no ID token")
	}
	idt, err := p.Verifier(&oidc.Config{ClientID: clientID}).Verify(ctx, raw)
	if err != nil {
		return loginEntry{}, fmt.Errorf("the identity provider's ID token does not verify: %w", err)
	}
	if nonce != "" && subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(nonce)) != 1 {
		return loginEntry{}, errors.New("the ID token is not for this sign-in (nonce)")
	}
	return loginEntry{Issuer: issuer, ClientID: clientID, IDToken: raw, RefreshToken: tok.RefreshToken, Expiry: idt.Expiry, Subject: idt.Subject}, nil
}

func randomString() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func cmdLogin(args []string, out io.Writer) error {
	fs := newFlagSet("login", out)
	target := urlFlags(fs.FlagSet)
	wait := fs.Duration("timeout", 5*time.Minute, "how long to wait for the sign-in in the browser")
	if err := fs.Parse(args); err != nil {
		return err
	}
	url, _ := target()
	ctx, cancel := context.WithTimeout(context.Background(), *wait)
	defer cancel()
	info, err := fetchLoginInfo(ctx, url)
	if err != nil {
		return err
	}
	p, err := oidc.NewProvider(ctx, info.Issuer)
	if err != nil {
		return fmt.Errorf("login: the identity provider %s: %w", info.Issuer, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("login: listen for the provider's redirect: %w", err)
	}
	conf := &oauth2.Config{ClientID: info.ClientID, Endpoint: p.Endpoint(), Scopes: info.Scopes,
		RedirectURL: fmt.Sprintf("http://%s/callback", ln.Addr())}
	state, nonce, verifier := randomString(), randomString(), oauth2.GenerateVerifier()
	fmt.Fprintf(out, "To sign in to %s, open this address in your browser:\n\n  %s\n\nWaiting for the sign-in (up to %s)...\n",
		url, conf.AuthCodeURL(state, oidc.Nonce(nonce), oauth2.S256ChallengeOption(verifier)), *wait)
	code, err := awaitRedirect(ctx, ln, state)
	if err != nil {
		return err
	}
	tok, err := conf.Exchange(ctx, code, oauth2.VerifierOption(verifier))
	if err != nil {
		return fmt.Errorf("login: the identity provider refused the code: %w", err)
	}
	e, err := loginEntryOf(ctx, p, info.Issuer, info.ClientID, tok, nonce)
	if err != nil {
		return fmt.Errorf("login: %w", err)
	}
	// The server judges the token as it will every request: a person it
	// does not know is told so now, and nothing is kept.
	c := &client{url: url, token: e.IDToken, http: &http.Client{Timeout: 30 * time.Second}}
	if _, err := c.do(ctx, http.MethodGet, "/v1/approvals?limit=1", nil, nil); err != nil {
		return fmt.Errorf("login: the provider signed you in, but %s refuses the token: %w", url, err)
	}
	logins, path, err := readLogins()
	if err != nil {
		return err
	}
	logins[url] = e
	if err := writeLogins(path, logins); err != nil {
		return err
	}
	fmt.Fprintf(out, "Signed in to %s as %s until %s", url, e.Subject, e.Expiry.Local().Format(time.RFC3339))
	if e.RefreshToken != "" {
		fmt.Fprint(out, " (renewed with the identity provider while it agrees)")
	}
	fmt.Fprintf(out, ".\nThe CLI uses this sign-in for %s when COUNTERSIGN_TOKEN and --token are not set.\n", url)
	return nil
}

// fetchLoginInfo asks the server which provider and client to sign in with.
func fetchLoginInfo(ctx context.Context, url string) (inbox.LoginInfo, error) {
	var info inbox.LoginInfo
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+inbox.LoginPath, nil)
	if err != nil {
		return info, err
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return info, fmt.Errorf("login: cannot reach the Countersign API at %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return info, fmt.Errorf("login: %s offers no command-line sign-in (its oidc.cli_client_id is not set); use an API token", url)
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&info) != nil || info.Issuer == "" || info.ClientID == "" {
		return info, fmt.Errorf("login: %s%s answered %s, not a sign-in description", url, inbox.LoginPath, resp.Status)
	}
	return info, nil
}

// awaitRedirect serves the provider's one redirect on ln and answers its
// code, when its state is this sign-in's.
func awaitRedirect(ctx context.Context, ln net.Listener, state string) (string, error) {
	type result struct {
		code string
		err  error
	}
	got := make(chan result, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /callback", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		var res result
		switch {
		case subtle.ConstantTimeCompare([]byte(q.Get("state")), []byte(state)) != 1:
			http.Error(w, "This is not the sign-in Countersign started.", http.StatusBadRequest)
			return // another page's redirect: keep waiting for ours
		case q.Get("error") != "":
			res.err = fmt.Errorf("login: the identity provider refused: %s %s", q.Get("error"), q.Get("error_description"))
		case q.Get("code") == "":
			res.err = errors.New("login: the identity provider sent no code")
		default:
			res.code = q.Get("code")
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if res.err != nil {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintln(w, "Countersign sign-in failed; see the terminal.")
		} else {
			fmt.Fprintln(w, "Signed in to Countersign. You can close this window and return to the terminal.")
		}
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		select {
		case got <- res:
		default:
		}
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer func() {
		// Gracefully: the browser's page is written out before the
		// listener goes (Close would cut the answer being written).
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	select {
	case res := <-got:
		return res.code, res.err
	case <-ctx.Done():
		return "", errors.New("login: no sign-in arrived in time; run 'countersign login' again")
	}
}

func cmdLogout(args []string, out io.Writer) error {
	fs := newFlagSet("logout", out)
	target := urlFlags(fs.FlagSet)
	if err := fs.Parse(args); err != nil {
		return err
	}
	url, _ := target()
	logins, path, err := readLogins()
	if err != nil {
		return err
	}
	if _, ok := logins[url]; !ok {
		fmt.Fprintf(out, "Not signed in to %s.\n", url)
		return nil
	}
	delete(logins, url)
	if err := writeLogins(path, logins); err != nil {
		return err
	}
	fmt.Fprintf(out, "Signed out of %s (the token is forgotten here; it stays valid at the provider until it expires).\n", url)
	return nil
}
