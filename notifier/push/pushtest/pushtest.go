// Package pushtest is a Web Push service for tests: an RFC 8030 push
// resource on loopback that checks each message as a real push service
// and a browser together would (the VAPID JWT's signature, aud and exp,
// the aes128gcm body decrypted with the subscription's private keys) and
// keeps what it received.
package pushtest

import (
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier/push"
)

// Subscription is what a browser would hand the server after
// PushManager.subscribe, with the private half the test service keeps.
type Subscription struct {
	ID       string
	Endpoint string
	// P256DH and Auth are base64url, as PushSubscription.toJSON gives them.
	P256DH string
	Auth   string

	key  *ecdh.PrivateKey
	auth []byte
}

// Device is the subscription as the API stores it.
func (s Subscription) Device(id, name string) contracts.PushDevice {
	return contracts.PushDevice{ID: id, Name: name, Endpoint: s.Endpoint, P256DH: s.P256DH, Auth: s.Auth}
}

// Message is one push the service accepted.
type Message struct {
	Subscription string
	// Plaintext is the decrypted body.
	Plaintext []byte
	TTL       int
	Urgency   string
	Topic     string
	VAPID     push.VAPIDClaims
	// VAPIDKey is the k of the Authorization header.
	VAPIDKey string
}

// Server is the test push service. Its methods are safe for concurrent use.
type Server struct {
	srv *httptest.Server
	// Now is the time VAPID tokens are checked at (default time.Now).
	Now func() time.Time

	mu       sync.Mutex
	subs     map[string]*Subscription
	answers  map[string][]int // queued status codes per subscription
	next     []int            // queued status codes for any subscription
	gone     map[string]bool
	received []Message
	refused  []string
	arrived  chan Message
}

// New starts a push service on loopback; Close stops it.
func New() *Server {
	s := &Server{subs: map[string]*Subscription{}, answers: map[string][]int{}, gone: map[string]bool{},
		arrived: make(chan Message, 1024), Now: time.Now}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// Close stops the service.
func (s *Server) Close() { s.srv.Close() }

// URL is the service's origin, the aud its VAPID tokens must carry.
func (s *Server) URL() string { return s.srv.URL }

// Subscribe makes a new subscription with fresh keys, as a browser would.
func (s *Server) Subscribe() Subscription {
	key, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		panic(err)
	}
	auth := make([]byte, push.AuthSecretLen)
	_, _ = rand.Read(auth)
	idb := make([]byte, 12)
	_, _ = rand.Read(idb)
	id := base64.RawURLEncoding.EncodeToString(idb)
	sub := &Subscription{ID: id, Endpoint: s.srv.URL + "/push/" + id,
		P256DH: base64.RawURLEncoding.EncodeToString(key.PublicKey().Bytes()),
		Auth:   base64.RawURLEncoding.EncodeToString(auth), key: key, auth: auth}
	s.mu.Lock()
	s.subs[id] = sub
	s.mu.Unlock()
	return *sub
}

// Gone makes the service answer 410 for subscription id from now on.
func (s *Server) Gone(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gone[id] = true
}

// Answer queues status codes for the next messages to subscription id
// (then it accepts again).
func (s *Server) Answer(id string, codes ...int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answers[id] = append(s.answers[id], codes...)
}

// AnswerNext queues status codes for the next messages to any
// subscription.
func (s *Server) AnswerNext(codes ...int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next = append(s.next, codes...)
}

// Received returns every message accepted so far.
func (s *Server) Received() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Message(nil), s.received...)
}

// Refused returns why each refused request was refused.
func (s *Server) Refused() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.refused...)
}

// Next waits for the next accepted message or the end of ctx.
func (s *Server) Next(ctx context.Context) (Message, error) {
	select {
	case m := <-s.arrived:
		return m, nil
	case <-ctx.Done():
		return Message{}, ctx.Err()
	}
}

func (s *Server) refuse(w http.ResponseWriter, code int, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.mu.Lock()
	s.refused = append(s.refused, msg)
	s.mu.Unlock()
	http.Error(w, msg, code)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	id, ok := strings.CutPrefix(r.URL.Path, "/push/")
	s.mu.Lock()
	sub := s.subs[id]
	gone := s.gone[id]
	var code int
	if q := s.answers[id]; len(q) > 0 && sub != nil {
		code, s.answers[id] = q[0], q[1:]
	} else if len(s.next) > 0 && sub != nil {
		code, s.next = s.next[0], s.next[1:]
	}
	s.mu.Unlock()
	switch {
	case r.Method != http.MethodPost || !ok || sub == nil:
		s.refuse(w, http.StatusNotFound, "no such push resource %s %s", r.Method, r.URL.Path)
		return
	case gone:
		s.refuse(w, http.StatusGone, "subscription %s is gone", id)
		return
	case code != 0:
		s.refuse(w, code, "queued answer %d", code)
		return
	}
	m, status, err := s.check(r, sub)
	if err != nil {
		s.refuse(w, status, "%v", err)
		return
	}
	s.mu.Lock()
	s.received = append(s.received, m)
	n := len(s.received)
	s.mu.Unlock()
	s.arrived <- m
	w.Header().Set("Location", s.srv.URL+"/message/"+strconv.Itoa(n))
	w.WriteHeader(http.StatusCreated)
}

// check verifies a request as a push service (VAPID, headers) and a
// browser (decryption) would.
func (s *Server) check(r *http.Request, sub *Subscription) (Message, int, error) {
	claims, k, err := push.VerifyAuthorization(r.Header.Get("Authorization"), s.srv.URL, s.Now())
	if err != nil {
		return Message{}, http.StatusUnauthorized, err
	}
	ttl, err := strconv.Atoi(r.Header.Get("TTL"))
	if err != nil || ttl < 0 {
		return Message{}, http.StatusBadRequest, fmt.Errorf("TTL header %q", r.Header.Get("TTL"))
	}
	if ce := r.Header.Get("Content-Encoding"); ce != "aes128gcm" {
		return Message{}, http.StatusUnsupportedMediaType, fmt.Errorf("Content-Encoding %q", ce)
	}
	switch u := r.Header.Get("Urgency"); u {
	case "", "very-low", "low", "normal", "high":
	default:
		return Message{}, http.StatusBadRequest, fmt.Errorf("Urgency %q", u)
	}
	topic := r.Header.Get("Topic")
	if len(topic) > 32 || strings.Trim(topic, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
		return Message{}, http.StatusBadRequest, fmt.Errorf("Topic %q is not at most 32 base64url characters", topic)
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 4097))
	if err != nil || len(body) > 4096 {
		return Message{}, http.StatusRequestEntityTooLarge, fmt.Errorf("body over 4096 bytes")
	}
	plain, err := push.Decrypt(body, sub.key, sub.auth)
	if err != nil {
		return Message{}, http.StatusBadRequest, err
	}
	return Message{Subscription: sub.ID, Plaintext: plain, TTL: ttl, Urgency: r.Header.Get("Urgency"), Topic: topic,
		VAPID: claims, VAPIDKey: k}, 0, nil
}
