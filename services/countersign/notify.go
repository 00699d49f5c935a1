package main

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
	"github.com/countersign/countersign/notifier/dispatch"
	"github.com/countersign/countersign/notifier/email"
	"github.com/countersign/countersign/notifier/slack"
	"github.com/countersign/countersign/notifier/webhook"
	"github.com/countersign/countersign/orchestrator/directory"
	"github.com/countersign/countersign/services/api"
)

// notifyConfig is the notify: section of countersign.yaml: the channels the
// notifier delivers through. Every secret may be written as env:NAME to take
// it from the environment variable NAME; policies never hold secrets.
type notifyConfig struct {
	Slack    *slackConfig    `yaml:"slack"`
	Email    *emailConfig    `yaml:"email"`
	Webhooks []webhookConfig `yaml:"webhooks"`
	Push     *pushConfig     `yaml:"push"`
	Retry    retryConfig     `yaml:"retry"`
	Fanout   fanoutConfig    `yaml:"fanout"`
}

// fanoutConfig is notify.fanout: the cap on what one destination is sent
// per window under a flood of requests (dispatch.FanoutPolicy).
type fanoutConfig struct {
	// MaxMessages per destination and channel within Window (default 20;
	// -1: no cap).
	MaxMessages int `yaml:"max_messages"`
	// Window, a duration (default 1m).
	Window string `yaml:"window"`
}

func (f fanoutConfig) policy() (dispatch.FanoutPolicy, error) {
	p := dispatch.FanoutPolicy{Max: f.MaxMessages}
	if f.MaxMessages < -1 {
		return p, fmt.Errorf("config: notify.fanout.max_messages: want a positive number, or -1 for no cap, got %d", f.MaxMessages)
	}
	if f.Window != "" {
		d, err := time.ParseDuration(f.Window)
		if err != nil || d <= 0 {
			return p, fmt.Errorf("config: notify.fanout.window: want a positive duration, got %q", f.Window)
		}
		p.Window = d
	}
	return p, nil
}

type slackConfig struct {
	BotToken      string `yaml:"bot_token"`
	SigningSecret string `yaml:"signing_secret"`
	// APIURL is the Web API base (default https://slack.com/api/).
	APIURL string `yaml:"api_url"`
}

type emailConfig struct {
	From     string `yaml:"from"`
	Host     string `yaml:"host"`
	Port     int    `yaml:"port"`
	Username string `yaml:"username"`
	Password string `yaml:"password"`
	// TLS is starttls (default), opportunistic, tls or none.
	TLS  string `yaml:"tls"`
	HELO string `yaml:"helo"`
	// LinkKeys sign the personal links ("<id>:<base64 secret>", the first
	// signs, all verify). Empty: a key is generated once into the data
	// directory (fine for one node; replicas need the same keys).
	LinkKeys []string `yaml:"link_keys"`
}

type webhookConfig struct {
	Name    string   `yaml:"name"`
	URL     string   `yaml:"url"`
	Secrets []string `yaml:"secrets"`
	Timeout string   `yaml:"timeout"`
	// IncludeSensitive sends the endpoint the real values of sensitive
	// arguments (masked by default).
	IncludeSensitive bool `yaml:"include_sensitive"`
	// Tenants whose requests the endpoint receives ("*": every request);
	// without them, only requests that name no tenant.
	Tenants []string `yaml:"tenants"`
}

type retryConfig struct {
	Attempts int    `yaml:"attempts"`
	Initial  string `yaml:"initial"`
	Max      string `yaml:"max"`
}

// secret resolves a configured secret: env:NAME reads the environment.
func secret(what, v string) (string, error) {
	name, ok := strings.CutPrefix(v, "env:")
	if !ok {
		return v, nil
	}
	s := os.Getenv(name)
	if s == "" {
		return "", fmt.Errorf("config: %s: environment variable %s is empty or not set", what, name)
	}
	return s, nil
}

// notifierParts is what the notifier role and the HTTP surfaces of the
// channels are built from.
type notifierParts struct {
	channels  []notifier.Channel
	endpoints []string
	slackCfg  *slack.InteractionsConfig // nil without Slack
	links     *email.Links              // nil without email
	summary   []string
	// push is what the API serves of the push channel (zero without it);
	// pushDevices its subscriptions, bound to the notifier's connection.
	push        api.PushConfig
	pushDevices *lazyDevices
}

// buildChannels creates the configured channels.
func buildChannels(cfg serveConfig, publicURL string, dir directory.Source, log *slog.Logger) (*notifierParts, error) {
	p := &notifierParts{}
	n := cfg.Notify
	if n.Slack != nil {
		token, err := secret("notify.slack.bot_token", n.Slack.BotToken)
		if err != nil {
			return nil, err
		}
		signing, err := secret("notify.slack.signing_secret", n.Slack.SigningSecret)
		if err != nil {
			return nil, err
		}
		ch, err := slack.New(slack.Config{BotToken: token, APIURL: n.Slack.APIURL, PublicURL: publicURL, Logger: log.With("channel", "slack")})
		if err != nil {
			return nil, fmt.Errorf("config: notify.slack: %w", err)
		}
		p.channels = append(p.channels, ch)
		p.slackCfg = &slack.InteractionsConfig{SigningSecret: signing, BotToken: token, APIURL: n.Slack.APIURL,
			PublicURL: publicURL, Logger: log.With("channel", "slack")}
		p.summary = append(p.summary, "slack")
	}
	if n.Email != nil {
		pw, err := secret("notify.email.password", n.Email.Password)
		if err != nil {
			return nil, err
		}
		keys, err := linkKeys(cfg, n.Email.LinkKeys)
		if err != nil {
			return nil, err
		}
		links, err := email.NewLinks(keys)
		if err != nil {
			return nil, fmt.Errorf("config: notify.email.link_keys: %w", err)
		}
		ch, err := email.New(email.Config{
			SMTP: email.SMTPConfig{Host: n.Email.Host, Port: n.Email.Port, Username: n.Email.Username, Password: pw,
				TLS: n.Email.TLS, HELO: n.Email.HELO},
			From: n.Email.From, PublicURL: publicURL, Links: links, Logger: log.With("channel", "email"),
		})
		if err != nil {
			return nil, fmt.Errorf("config: notify.email: %w", err)
		}
		p.channels = append(p.channels, ch)
		p.links = links
		p.summary = append(p.summary, fmt.Sprintf("email via %s:%d", n.Email.Host, n.Email.Port))
	}
	if len(n.Webhooks) > 0 {
		var eps []webhook.Endpoint
		for i, w := range n.Webhooks {
			ep := webhook.Endpoint{Name: w.Name, URL: w.URL, IncludeSensitive: w.IncludeSensitive, Tenants: w.Tenants}
			for j, s := range w.Secrets {
				v, err := secret(fmt.Sprintf("notify.webhooks[%d].secrets[%d]", i, j), s)
				if err != nil {
					return nil, err
				}
				ep.Secrets = append(ep.Secrets, v)
			}
			if w.Timeout != "" {
				d, err := time.ParseDuration(w.Timeout)
				if err != nil || d <= 0 {
					return nil, fmt.Errorf("config: notify.webhooks[%d].timeout: want a positive duration, got %q", i, w.Timeout)
				}
				ep.Timeout = d
			}
			eps = append(eps, ep)
			p.endpoints = append(p.endpoints, w.Name)
		}
		ch, err := webhook.New(webhook.Config{Endpoints: eps, Logger: log.With("channel", "webhook")})
		if err != nil {
			return nil, fmt.Errorf("config: notify.webhooks: %w", err)
		}
		p.channels = append(p.channels, ch)
		p.summary = append(p.summary, fmt.Sprintf("webhooks %s", strings.Join(p.endpoints, ", ")))
	}
	if err := buildPush(cfg, publicURL, dir, log, p); err != nil {
		return nil, err
	}
	return p, nil
}

func (r retryConfig) policy() (dispatch.RetryPolicy, error) {
	p := dispatch.RetryPolicy{Attempts: r.Attempts}
	for _, x := range []struct {
		name string
		v    string
		dst  *time.Duration
	}{{"initial", r.Initial, &p.Initial}, {"max", r.Max, &p.Max}} {
		if x.v == "" {
			continue
		}
		d, err := time.ParseDuration(x.v)
		if err != nil || d <= 0 {
			return p, fmt.Errorf("config: notify.retry.%s: want a positive duration, got %q", x.name, x.v)
		}
		*x.dst = d
	}
	return p, nil
}

// fileLinkKey holds the generated email link key.
const fileLinkKey = "email-link-key"

// linkKeys parses the configured keys, or loads (creating once) a key kept
// in the data directory.
func linkKeys(cfg serveConfig, configured []string) ([]email.Key, error) {
	var keys []email.Key
	for i, s := range configured {
		v, err := secret(fmt.Sprintf("notify.email.link_keys[%d]", i), s)
		if err != nil {
			return nil, err
		}
		k, err := email.ParseKey(v)
		if err != nil {
			return nil, fmt.Errorf("config: notify.email.link_keys[%d]: %w", i, err)
		}
		keys = append(keys, k)
	}
	if len(keys) > 0 {
		return keys, nil
	}
	path := filepath.Join(cfg.Data, fileLinkKey)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		var b [32]byte
		_, _ = rand.Read(b[:])
		data = []byte("local-" + time.Now().UTC().Format("20060102") + ":" + base64.StdEncoding.EncodeToString(b[:]) + "\n")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, fmt.Errorf("serve: email link key: %w", err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("serve: email link key: %w", err)
	}
	k, err := email.ParseKey(strings.TrimSpace(string(data)))
	if err != nil {
		return nil, fmt.Errorf("serve: email link key %s: %w", path, err)
	}
	return []email.Key{k}, nil
}

// people adapts the approver directory for routing.
type people struct{ src directory.Source }

func (p people) dir() *directory.Directory {
	if p.src == nil {
		return nil
	}
	return p.src.Current()
}

func person(u directory.User) dispatch.Person {
	return dispatch.Person{ID: u.ID, Email: u.Email, SlackUserID: u.SlackUserID, Tenants: u.Tenants, Roles: roles(u)}
}

// roles are every role u's tokens hold.
func roles(u directory.User) []string {
	var out []string
	for _, t := range u.Tokens {
		for _, r := range t.Roles {
			if !slices.Contains(out, r) {
				out = append(out, r)
			}
		}
	}
	return out
}

// book is the directory file as the read rule's address book, for where no
// live directory is published.
func (p people) book(id string) (contracts.DirectoryPerson, bool) {
	u, ok := p.dir().User(id)
	if !ok {
		return contracts.DirectoryPerson{}, false
	}
	return contracts.DirectoryPerson{ID: u.ID, Email: u.Email, Tenants: u.Tenants, Roles: roles(u)}, true
}

func (p people) Person(id string) (dispatch.Person, bool) {
	u, ok := p.dir().User(id)
	return person(u), ok
}

func (p people) BySlackID(id string) (dispatch.Person, bool) {
	u, ok := p.dir().BySlackID(id)
	return person(u), ok
}

func (p people) ByEmail(addr string) (dispatch.Person, bool) {
	u, ok := p.dir().ByEmail(addr)
	return person(u), ok
}

func (p people) Members(group string) ([]string, bool) {
	d := p.dir()
	if !d.HasGroup(group) {
		return nil, false
	}
	return d.Members(group), true
}

// slackUsers maps a Slack user id to an approver through the directory.
func (p people) slackUsers(id string) (string, bool) {
	u, ok := p.dir().BySlackID(id)
	return u.ID, ok
}

// channelRoutes mounts the interactive channels' endpoints in front of the
// API: POST /slack/interactions and /e/{token}.
func channelRoutes(api http.Handler, slackH, emailH http.Handler) http.Handler {
	if slackH == nil && emailH == nil {
		return api
	}
	mux := http.NewServeMux()
	mux.Handle("/", api)
	if slackH != nil {
		mux.Handle("POST /slack/interactions", slackH)
	}
	if emailH != nil {
		mux.Handle("/e/{token}", emailH)
	}
	return mux
}
