package inbox_test

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/services/api"
)

// onReplica returns a client for the replica at base that carries w's cookies.
func (w *webClient) onReplica(t *testing.T, base string) *webClient {
	t.Helper()
	o := newWebClient(t, base)
	o.c.Jar.SetCookies(mustURL(t, base), w.c.Jar.Cookies(mustURL(t, w.base)))
	o.csrf = w.csrf
	return o
}

func wantSignInRedirect(t *testing.T, what string, r response) {
	t.Helper()
	if r.status != http.StatusSeeOther || !strings.HasPrefix(r.header.Get("Location"), "/login") {
		t.Fatalf("%s: %d %v, want a redirect to the sign-in page", what, r.status, r.header)
	}
}

func sessionsBucket(t *testing.T, e *env) jetstream.KeyValue {
	t.Helper()
	kv, err := e.js.KeyValue(context.Background(), contracts.BucketSessions)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

func sessionKeys(t *testing.T, kv jetstream.KeyValue) []string {
	t.Helper()
	keys, err := kv.Keys(context.Background())
	if err != nil && err != jetstream.ErrNoKeysFound {
		t.Fatal(err)
	}
	return keys
}

// A session started on one replica opens the inbox on another (also one
// started after the sign-in, as after a restart), a vote cast there counts,
// and a sign-out on the second ends the session on the first.
func TestInboxSessionWorksOnEveryReplica(t *testing.T) {
	e := setup(t)
	e.applyInboxPolicy(t)
	id := e.refund(t, "run-replicas", "Globex", "", 120)
	alice := e.signIn(t, "alice")

	other := alice.onReplica(t, e.replica(t, nil))
	page := other.get("/approvals/" + id)
	if page.status != http.StatusOK || !strings.Contains(string(page.body), `id="approve-form"`) {
		t.Fatalf("detail on the second replica: %d %s", page.status, page.body)
	}
	if m := csrfInput.FindSubmatch(page.body); m == nil || string(m[1]) != alice.csrf {
		t.Fatalf("the second replica shows another CSRF token than the first")
	}
	if r := other.followDecision(id, other.decide(id, url.Values{"decision": {"approve"}})); r.status != http.StatusOK {
		t.Fatalf("approve on the second replica: %d %s", r.status, r.body)
	}
	rec := e.record(t, id)
	if rec.Status != contracts.StatusApproved || rec.Votes[0].Approver != (contracts.Approver{ID: "alice", Via: contracts.ViaWeb}) {
		t.Fatalf("record: %+v", rec)
	}

	if r := other.post("/logout", url.Values{"csrf": {other.csrf}}); r.status != http.StatusSeeOther {
		t.Fatalf("logout on the second replica: %d %s", r.status, r.body)
	}
	wantSignInRedirect(t, "first replica after a sign-out on the second", alice.get("/"))
	if keys := sessionKeys(t, sessionsBucket(t, e)); len(keys) != 0 {
		t.Fatalf("sessions left after the sign-out: %v", keys)
	}
}

// The bucket holds neither the session id nor the token, and a CSRF token
// alone opens nothing.
func TestInboxSessionStoreHoldsNoSecrets(t *testing.T) {
	e := setup(t)
	alice := e.signIn(t, "alice")
	var sid string
	for _, c := range alice.c.Jar.Cookies(mustURL(t, e.url)) {
		if c.Name == "countersign_session" {
			sid = c.Value
		}
	}
	kv := sessionsBucket(t, e)
	keys := sessionKeys(t, kv)
	if sid == "" || len(keys) != 1 {
		t.Fatalf("session id %q, keys %v", sid, keys)
	}
	if keys[0] == sid || strings.Contains(keys[0], sid) {
		t.Fatalf("the bucket key is the session id")
	}
	entry, err := kv.Get(context.Background(), keys[0])
	if err != nil {
		t.Fatal(err)
	}
	value := string(entry.Value())
	for name, secret := range map[string]string{"session id": sid, "token": e.tokens["alice"]} {
		if strings.Contains(value, secret) {
			t.Fatalf("the stored session holds the %s: %s", name, value)
		}
	}
	// A cookie made up from the stored key is not a session.
	forged := newWebClient(t, e.url)
	forged.c.Jar.SetCookies(mustURL(t, e.url), []*http.Cookie{{Name: "countersign_session", Value: keys[0]}})
	wantSignInRedirect(t, "a cookie holding the bucket key", forged.get("/"))
}

// A session lives only while the token it was opened with is valid: a
// replica that no longer accepts the token ends the session for all.
func TestInboxSessionEndsWhenItsTokenIsRemoved(t *testing.T) {
	e := setup(t)
	alice := e.signIn(t, "alice")
	bob := e.signIn(t, "bob")
	revoked := e.replica(t, func(c *api.Config) {
		c.Tokens = slices.DeleteFunc(slices.Clone(c.Tokens), func(tok api.Token) bool { return tok.Name == "alice" })
	})
	wantSignInRedirect(t, "alice's session where her token is gone", alice.onReplica(t, revoked).get("/"))
	// Ended for every replica, also the one that still has the token.
	wantSignInRedirect(t, "alice's session on the first replica", alice.get("/"))
	if r := bob.onReplica(t, revoked).get("/"); r.status != http.StatusOK {
		t.Fatalf("bob's session on the replica without alice's token: %d", r.status)
	}
}

// A session ends after its lifetime (12 hours), measured by the API's clock.
func TestInboxSessionExpires(t *testing.T) {
	e := setup(t)
	alice := e.signIn(t, "alice")
	soon := e.replica(t, func(c *api.Config) { c.Now = func() time.Time { return time.Now().Add(11 * time.Hour) } })
	if r := alice.onReplica(t, soon).get("/"); r.status != http.StatusOK {
		t.Fatalf("session 11 hours after sign-in: %d", r.status)
	}
	later := e.replica(t, func(c *api.Config) { c.Now = func() time.Time { return time.Now().Add(12*time.Hour + time.Minute) } })
	wantSignInRedirect(t, "session 12 hours after sign-in", alice.onReplica(t, later).get("/"))
	if keys := sessionKeys(t, sessionsBucket(t, e)); len(keys) != 0 {
		t.Fatalf("the expired session is still stored: %v", keys)
	}
}
