package dispatch

import (
	"context"
	"fmt"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/notifier"
	"github.com/countersign/countersign/notifier/audience"
)

// readers is the read rule for one record: the Audience the dispatcher
// routes it with, and the check of a target it already knows (the
// outcome's updates). A person is judged as the live directory lists them
// at this moment; where none is published, as the address book does.
type readers struct {
	rec      *contracts.Record
	roster   *approval.Roster
	people   People
	channels map[string]notifier.Channel
}

// readers returns the read rule for rec, with the live directory as it is now.
func (d *Dispatcher) readers(ctx context.Context, rec *contracts.Record) (*readers, error) {
	roster, err := d.dir.Roster(ctx)
	if err != nil {
		return nil, err
	}
	return &readers{rec: rec, roster: roster, people: d.cfg.People, channels: d.channels}, nil
}

// Person implements Audience.
func (a *readers) Person(p Person) (bool, string) {
	who, ok := audience.Person(a.roster, func(string) (contracts.DirectoryPerson, bool) {
		return contracts.DirectoryPerson{ID: p.ID, Email: p.Email, Tenants: p.Tenants, Roles: p.Roles}, true
	}, p.ID)
	if !ok {
		return false, fmt.Sprintf("%s is not in the live directory", p.ID)
	}
	return notifier.MayTell(a.rec, who)
}

// Shared implements Audience: a destination takes the request unless its
// channel limits it to other tenants (notifier.Scoped).
func (a *readers) Shared(channel, address string) (bool, string) {
	s, ok := a.channels[channel].(notifier.Scoped)
	if !ok || s.Takes(address, a.rec.Request.Run.Tenant) {
		return true, ""
	}
	return false, fmt.Sprintf("%s endpoint %s does not take requests of this tenant", channel, address)
}

// target reports whether t may still be shown the record: a person's
// target when that person may read it, a shared one when it takes it.
func (a *readers) target(t notifier.Target) bool {
	if t.Approver == "" {
		ok, _ := a.Shared(t.Channel, t.Address)
		return ok
	}
	p, ok := a.people.Person(t.Approver)
	if !ok {
		p = Person{ID: t.Approver}
		if a.roster == nil {
			return false // nobody knows them
		}
	}
	ok, _ = a.Person(p)
	return ok
}

// routing resolves routes for approvers with the read rule.
func (d *Dispatcher) routing(a *readers, approvers, routes []string) ([]notifier.Target, []Problem) {
	return Routing{Approvers: approvers, Routes: routes, People: d.cfg.People, Endpoints: d.cfg.Endpoints, Audience: a}.Resolve()
}
