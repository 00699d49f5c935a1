package webhook_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
	"github.com/countersign/countersign/notifier/webhook"
)

// An endpoint receives the events of its tenants only: "*" takes every
// request, and an endpoint without tenants only requests that name none.
// A notification of another tenant's request is refused before anything is
// sent, and Takes tells the notifier so while it routes.
func TestEndpointReceivesOnlyItsTenants(t *testing.T) {
	rc := newReceiver(t, status(http.StatusNoContent))
	f := newChannel(t,
		webhook.Endpoint{Name: "acme", URL: rc.URL, Secrets: []string{secretA}, Tenants: []string{"acme"}},
		webhook.Endpoint{Name: "all", URL: rc.URL, Secrets: []string{secretA}, Tenants: []string{"*"}},
		webhook.Endpoint{Name: "legacy", URL: rc.URL, Secrets: []string{secretA}},
	)
	for _, c := range []struct {
		endpoint, tenant string
		takes            bool
	}{
		{"acme", "acme", true}, {"acme", "globex", false}, {"acme", "", false},
		{"all", "acme", true}, {"all", "", true},
		{"legacy", "", true}, {"legacy", "acme", false},
		{"nosuch", "", false},
	} {
		if got := f.ch.Takes(c.endpoint, c.tenant); got != c.takes {
			t.Errorf("Takes(%q, %q) = %v, want %v", c.endpoint, c.tenant, got, c.takes)
		}
	}
	req := request()
	req.Run.Tenant = "globex"
	before := len(rc.deliveries())
	for _, name := range []string{"acme", "legacy"} {
		_, err := f.ch.Notify(context.Background(), notifier.Requested(req, target(name)))
		assertPermanent(t, err)
		rec := contracts.Record{Request: req, Status: contracts.StatusApproved}
		_, err = f.ch.Update(context.Background(), notifier.Decided(rec, target(name), ""))
		assertPermanent(t, err)
	}
	if n := len(rc.deliveries()) - before; n != 0 {
		t.Fatalf("%d deliveries of a globex request to endpoints of other tenants", n)
	}
	if _, err := f.ch.Notify(context.Background(), notifier.Requested(req, target("all"))); err != nil {
		t.Fatalf("the endpoint of every tenant: %v", err)
	}
}

func TestEndpointTenantsAreValidated(t *testing.T) {
	_, err := webhook.New(webhook.Config{Endpoints: []webhook.Endpoint{
		{Name: "a", URL: "https://example.com/h", Secrets: []string{secretA}, Tenants: []string{"acme", " "}},
	}})
	if err == nil {
		t.Fatal("a blank tenant was accepted")
	}
}
