package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier/push"
	"github.com/countersign/countersign/orchestrator/directory"
	"github.com/countersign/countersign/services/api"
)

// pushConfig is notify.push: Web Push to the devices people subscribe in
// the inbox.
type pushConfig struct {
	// Subject is the contact push services may reach the operator at, in
	// every VAPID token: mailto:… or https://… (required).
	Subject string `yaml:"subject"`
	// VAPIDPrivateKey is the server's VAPID key (base64url of the P-256
	// scalar, as web-push generate-vapid-keys prints it; env:NAME reads the
	// environment). Default: COUNTERSIGN_VAPID_PRIVATE_KEY, else
	// <data>/vapid-key, generated (mode 0600) on first start. Every
	// notifier and API replica needs the same key: browsers subscribe to it.
	VAPIDPrivateKey string `yaml:"vapid_private_key"`
	// QuietHours hold a person's non-critical pushes: person id to
	// "22:00-07:00 Europe/Berlin".
	QuietHours map[string]string `yaml:"quiet_hours"`
	// AllowInsecureEndpoints accepts http:// push endpoints on loopback
	// (tests and local push services only).
	AllowInsecureEndpoints bool `yaml:"allow_insecure_endpoints"`
}

// directoryQuiet answers a person's quiet_hours from the live directory
// (nil without one): theirs win over notify.push.quiet_hours.
func directoryQuiet(dir directory.Source) func(string) (push.QuietHours, bool) {
	if dir == nil {
		return nil
	}
	return func(person string) (push.QuietHours, bool) {
		d := dir.Current()
		if d == nil {
			return push.QuietHours{}, false
		}
		u, ok := d.User(person)
		if !ok || u.Quiet == nil {
			return push.QuietHours{}, false
		}
		return *u.Quiet, true
	}
}

// fileVAPIDKey is the VAPID key serve generates under the data directory.
const fileVAPIDKey = "vapid-key"

// buildPush adds the push channel to p and sets what the API needs of it.
// The one-tap actions are signed with the email link keys (configured or
// generated), under a context of their own.
func buildPush(cfg serveConfig, publicURL string, dir directory.Source, log *slog.Logger, p *notifierParts) error {
	pc := cfg.Notify.Push
	if pc == nil {
		return nil
	}
	key, source, err := vapidKey(cfg, pc.VAPIDPrivateKey, log)
	if err != nil {
		return err
	}
	vapid, err := push.NewVAPID(key, pc.Subject)
	if err != nil {
		return fmt.Errorf("config: notify.push (key from %s): %w", source, err)
	}
	var linkCfg []string
	if cfg.Notify.Email != nil {
		linkCfg = cfg.Notify.Email.LinkKeys
	}
	links, err := linkKeys(cfg, linkCfg)
	if err != nil {
		return err
	}
	keys := make([]push.Key, len(links))
	for i, k := range links {
		keys[i] = push.Key{ID: k.ID, Secret: k.Secret}
	}
	actions, err := push.NewActions(keys)
	if err != nil {
		return fmt.Errorf("config: notify.push: %w", err)
	}
	quiet := map[string]push.QuietHours{}
	for person, s := range pc.QuietHours {
		q, err := push.ParseQuietHours(s)
		if err != nil {
			return fmt.Errorf("config: notify.push.quiet_hours.%s: %w", person, err)
		}
		quiet[person] = q
	}
	p.pushDevices = &lazyDevices{}
	ch, err := push.New(push.Config{VAPID: vapid, Devices: p.pushDevices, Actions: actions, PublicURL: publicURL,
		Quiet: quiet, QuietOf: directoryQuiet(dir), AllowInsecure: pc.AllowInsecureEndpoints, Logger: log.With("channel", "push")})
	if err != nil {
		return fmt.Errorf("config: notify.push: %w", err)
	}
	p.channels = append(p.channels, ch)
	p.push = api.PushConfig{PublicKey: vapid.PublicKey(), Actions: actions, AllowInsecure: pc.AllowInsecureEndpoints}
	p.summary = append(p.summary, "push")
	return nil
}

// vapidKey is the configured key, the environment's, or the data
// directory's (generated once), and where it came from.
func vapidKey(cfg serveConfig, configured string, log *slog.Logger) (string, string, error) {
	if configured != "" {
		v, err := secret("notify.push.vapid_private_key", configured)
		return v, "notify.push.vapid_private_key", err
	}
	if env := os.Getenv("COUNTERSIGN_VAPID_PRIVATE_KEY"); env != "" {
		return env, "COUNTERSIGN_VAPID_PRIVATE_KEY", nil
	}
	path := filepath.Join(cfg.Data, fileVAPIDKey)
	info, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		k, err := push.GenerateVAPIDKey()
		if err != nil {
			return "", "", err
		}
		if err := os.WriteFile(path, []byte(k+"\n"), 0o600); err != nil {
			return "", "", fmt.Errorf("serve: VAPID key: %w", err)
		}
		if cfg.NATS.URL != "" {
			log.Warn("generated a VAPID key in the data directory; give every notifier and API replica the same key (notify.push.vapid_private_key or COUNTERSIGN_VAPID_PRIVATE_KEY)", "path", path)
		} else {
			log.Info("generated a VAPID key", "path", path)
		}
		return k, path, nil
	case err != nil:
		return "", "", fmt.Errorf("serve: VAPID key: %w", err)
	case info.Mode().Perm()&0o077 != 0:
		return "", "", fmt.Errorf("VAPID key %s: a private key must be readable by its owner only (chmod 600 %s)", path, path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return "", "", fmt.Errorf("serve: VAPID key: %w", err)
	}
	return strings.TrimSpace(string(data)), path, nil
}

// lazyDevices is the push channel's subscriptions, opened through the
// notifier's connection once the notifier role starts.
type lazyDevices struct {
	mu    sync.Mutex
	js    jetstream.JetStream
	store *push.Store
}

func (l *lazyDevices) use(js jetstream.JetStream) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.js = js
}

func (l *lazyDevices) get(ctx context.Context) (*push.Store, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.store == nil {
		if l.js == nil {
			return nil, errors.New("push: the notifier is not connected")
		}
		st, err := push.OpenStore(ctx, l.js)
		if err != nil {
			return nil, err
		}
		l.store = st
	}
	return l.store, nil
}

func (l *lazyDevices) Devices(ctx context.Context, person string) ([]contracts.PushDevice, error) {
	st, err := l.get(ctx)
	if err != nil {
		return nil, err
	}
	return st.Devices(ctx, person)
}

func (l *lazyDevices) Forget(ctx context.Context, person, id string) error {
	st, err := l.get(ctx)
	if err != nil {
		return err
	}
	return st.Forget(ctx, person, id)
}

func (l *lazyDevices) Delivered(ctx context.Context, person string, ids []string, at time.Time) error {
	st, err := l.get(ctx)
	if err != nil {
		return err
	}
	return st.Delivered(ctx, person, ids, at)
}
