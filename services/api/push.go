package api

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier/push"
)

// This file is the server side of approving from a phone: the VAPID key a
// browser subscribes with, each person's Web Push subscriptions (one per
// device, in the hitl_push bucket), and the endpoint a notification's
// one-tap action posts its token to.

// PushConfig turns Web Push on; zero: off (the routes answer push_off).
type PushConfig struct {
	// PublicKey is the server's VAPID public key (base64url), which
	// PushManager.subscribe takes as applicationServerKey.
	PublicKey string
	// Actions verifies the tokens of one-tap actions (nil: none accepted).
	Actions *push.Actions
	// AllowInsecure accepts http:// endpoints on loopback hosts (tests).
	AllowInsecure bool
}

// Codes of the push endpoints.
const (
	CodePushOff        = "push_off"
	CodeInvalidToken   = "invalid_token"
	CodeTooManyDevices = "too_many_devices"
)

// maxDeviceName bounds a device's name.
const maxDeviceName = 64

// PushKey is the VAPID public key for PushManager.subscribe, and whether
// push is on.
func (s *Server) PushKey() (string, bool) {
	return s.cfg.Push.PublicKey, s.cfg.Push.PublicKey != ""
}

// pushStore opens the subscriptions bucket once.
func (s *Server) pushStore(ctx context.Context) (*push.Store, *Error) {
	if s.cfg.Push.PublicKey == "" {
		return nil, errorf(http.StatusNotFound, CodePushOff, "push notifications are not set up on this server (notify.push)")
	}
	s.pushMu.Lock()
	defer s.pushMu.Unlock()
	if s.push == nil {
		st, err := push.OpenStore(ctx, s.cfg.JS)
		if err != nil {
			s.log.Error("push subscriptions unavailable", "err", err)
			return nil, errorf(http.StatusServiceUnavailable, CodeUnavailable, "push subscriptions are unavailable")
		}
		s.push = st
	}
	return s.push, nil
}

// PushSubscription is what a browser's PushSubscription.toJSON gives, with
// the name the person gives the device.
type PushSubscription struct {
	Endpoint string `json:"endpoint"`
	Keys     struct {
		P256DH string `json:"p256dh"`
		Auth   string `json:"auth"`
	} `json:"keys"`
	DeviceName string `json:"device_name,omitempty"`
}

// SubscribePush stores sub as one of p's devices (a browser subscribing
// again with the same endpoint replaces its entry and keeps its id) and
// returns the stored device. The endpoint must be https (or loopback http
// where allowed), the keys a P-256 point and a 16-byte secret.
func (s *Server) SubscribePush(ctx context.Context, p Principal, sub PushSubscription) (contracts.PushDevice, *Error) {
	st, aerr := s.pushStore(ctx)
	if aerr != nil {
		return contracts.PushDevice{}, aerr
	}
	if aerr := s.checkSubscription(&sub); aerr != nil {
		return contracts.PushDevice{}, aerr
	}
	var id [12]byte
	_, _ = rand.Read(id[:])
	d := contracts.PushDevice{ID: base64.RawURLEncoding.EncodeToString(id[:]), Name: sub.DeviceName, Endpoint: sub.Endpoint,
		P256DH: sub.Keys.P256DH, Auth: sub.Keys.Auth, Tenants: p.Tenants, CreatedAt: s.cfg.Now().UTC()}
	d, err := st.Add(ctx, p.Subject, d)
	switch {
	case errors.Is(err, push.ErrTooManyDevices):
		return contracts.PushDevice{}, errorf(http.StatusConflict, CodeTooManyDevices, "at most %d devices may be subscribed; remove one first", push.MaxDevices)
	case err != nil:
		s.log.Error("push subscription not stored", "person", p.Subject, "err", err)
		return contracts.PushDevice{}, errorf(http.StatusServiceUnavailable, CodeUnavailable, "the subscription could not be stored")
	}
	s.log.Info("push device subscribed", "person", p.Subject, "device", d.ID)
	return d, nil
}

// checkSubscription validates a subscription strictly.
func (s *Server) checkSubscription(sub *PushSubscription) *Error {
	if err := push.CheckEndpoint(sub.Endpoint, s.cfg.Push.AllowInsecure); err != nil {
		return fieldError(http.StatusBadRequest, CodeInvalidField, "endpoint", "%v", err)
	}
	if _, _, err := push.ParseKeys(sub.Keys.P256DH, sub.Keys.Auth); err != nil {
		field := "keys.p256dh"
		if strings.HasPrefix(err.Error(), "keys.auth") {
			field = "keys.auth"
		}
		return fieldError(http.StatusBadRequest, CodeInvalidField, field, "%v", err)
	}
	sub.DeviceName = strings.TrimSpace(sub.DeviceName)
	if len(sub.DeviceName) > maxDeviceName || !utf8.ValidString(sub.DeviceName) || strings.ContainsFunc(sub.DeviceName, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return fieldError(http.StatusBadRequest, CodeInvalidField, "device_name", "a device name is at most %d bytes of printable text", maxDeviceName)
	}
	return nil
}

// PushDevice is a subscribed device as its person sees it: no keys.
type PushDevice struct {
	ID   string `json:"id"`
	Name string `json:"name,omitempty"`
	// Service is the push service's host (fcm.googleapis.com, …).
	Service   string `json:"service"`
	CreatedAt string `json:"created_at"`
	// LastDeliveredAt is when the device's push service last took a
	// notification for it, to within an hour (absent: never).
	LastDeliveredAt string `json:"last_delivered_at,omitempty"`
}

func shownDevice(d contracts.PushDevice) PushDevice {
	host := d.Endpoint
	if o, err := push.Origin(d.Endpoint); err == nil {
		host = strings.TrimPrefix(strings.TrimPrefix(o, "https://"), "http://")
	}
	shown := PushDevice{ID: d.ID, Name: d.Name, Service: host, CreatedAt: d.CreatedAt.UTC().Format("2006-01-02T15:04:05Z")}
	if !d.LastDeliveredAt.IsZero() {
		shown.LastDeliveredAt = d.LastDeliveredAt.UTC().Format("2006-01-02T15:04:05Z")
	}
	return shown
}

// PushDevices lists p's subscribed devices.
func (s *Server) PushDevices(ctx context.Context, p Principal) ([]PushDevice, *Error) {
	st, aerr := s.pushStore(ctx)
	if aerr != nil {
		return nil, aerr
	}
	devs, err := st.Devices(ctx, p.Subject)
	if err != nil {
		s.log.Error("push devices unreadable", "person", p.Subject, "err", err)
		return nil, errorf(http.StatusServiceUnavailable, CodeUnavailable, "push devices are unavailable")
	}
	out := make([]PushDevice, 0, len(devs))
	for _, d := range devs {
		out = append(out, shownDevice(d))
	}
	return out, nil
}

// RemovePushDevice drops p's device id; a device p does not have is
// not_found.
func (s *Server) RemovePushDevice(ctx context.Context, p Principal, id string) *Error {
	st, aerr := s.pushStore(ctx)
	if aerr != nil {
		return aerr
	}
	found, err := st.Remove(ctx, p.Subject, id)
	if err != nil {
		s.log.Error("push device not removed", "person", p.Subject, "err", err)
		return errorf(http.StatusServiceUnavailable, CodeUnavailable, "the device could not be removed")
	}
	if !found {
		return errorf(http.StatusNotFound, CodeNotFound, "no such device")
	}
	s.log.Info("push device removed", "person", p.Subject, "device", id)
	return nil
}
