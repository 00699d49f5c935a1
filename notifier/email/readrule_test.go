package email_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/notifier"
	"github.com/countersign/countersign/notifier/email"
)

// A link issued to someone who may not read the request (another
// tenant's approver, say) shows nothing of it: GET and POST are answered
// byte for byte as for a request that does not exist, and nothing votes.
func TestPageOfAnUnreadableRequestIsAnsweredAsAMissingOne(t *testing.T) {
	req := toolRequest()
	req.Run.Tenant = "acme"
	req.Quorum.Approvers = []string{"alice", "gina"} // the policy names both
	rec := pendingRecord(req)
	links := newLinks(t)
	res := newResolver(rec)
	// gina is globex's: the directory keeps her out of acme's requests.
	people := map[string]contracts.DirectoryPerson{
		"alice": {ID: "alice", Tenants: []string{"acme"}},
		"gina":  {ID: "gina", Tenants: []string{"globex"}},
	}
	rule := func(_ context.Context, id string, rec *contracts.Record) (bool, error) {
		p, ok := people[id]
		if !ok {
			return false, nil
		}
		ok, _ = notifier.MayTell(rec, p)
		return ok, nil
	}
	h, err := email.NewPages(email.PagesConfig{Links: links, Resolver: res, ReadRule: rule, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/e/", h)
	p := &pagesServer{links: links, res: res, h: mux}
	sign := func(event, approver string) string {
		tok, err := links.Sign(email.Claims{EventID: event, Approver: approver, Expires: now.Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	// The page is the same for any token; only the status and body count.
	missing := sign("0190d1a2-0000-7def-8123-456789abcdef", "gina")
	unreadable := sign(req.EventID, "gina")
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		form := approveForm(req, "")
		if method == http.MethodGet {
			form = nil
		}
		want, got := p.do(method, missing, form), p.do(method, unreadable, form)
		if got.status != http.StatusNotFound || got.status != want.status || got.body != want.body {
			t.Errorf("%s of another tenant's request: %d\n%s\nwant as for a missing one: %d\n%s", method, got.status, got.body, want.status, want.body)
		}
		mustNotContain(t, got, req.Run.Agent, req.Run.ID, req.Run.RequestedBy, "5000", "ACME Ltd")
	}
	noVotes(t, p)
	// Her colleague at acme reads it.
	if r := p.get(sign(req.EventID, "alice")); r.status != http.StatusOK {
		t.Errorf("acme's approver: status %d", r.status)
	}
}
