// Package audience follows the live directory (contracts.DirectoryKey in
// the hitl_policy bucket, published by the API role) for the notifier and
// the interactive channels, so that who may be told of a request is judged
// by the same people, tenants and roles the arbiter judges votes by.
//
// A Directory watches the key and keeps the newest document in memory;
// until its watch has delivered what the bucket holds (and whenever the
// watch stops), it reads the key instead. No directory published at all
// (a deployment without the API role, a test) is reported as a nil Roster:
// callers then judge by the address book they were given.
package audience

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/events/livekey"
	"github.com/countersign/countersign/notifier"
)

// Directory is the live directory as the notifier reads it. It is safe for
// concurrent use. Run keeps it current.
type Directory struct {
	js  jetstream.JetStream
	log *slog.Logger

	mu     sync.Mutex
	ready  bool // the watch delivered the bucket's state and runs
	roster *approval.Roster
	rev    uint64
}

// New returns a Directory that reads through js, which must be able to
// read and watch the key contracts.DirectoryKey of contracts.BucketPolicy.
func New(js jetstream.JetStream, log *slog.Logger) *Directory {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Directory{js: js, log: log}
}

// Run watches the directory until ctx ends, watching again a second after
// a watch fails.
func (d *Directory) Run(ctx context.Context) {
	w := livekey.Watcher{
		Bucket: func(ctx context.Context) (jetstream.KeyValue, error) {
			return d.js.KeyValue(ctx, contracts.BucketPolicy)
		},
		Keys:    []string{contracts.DirectoryKey},
		Install: d.install,
		Ready:   d.setReady,
		Failed: func(err error) {
			d.log.Warn("watching the live directory failed; reading it instead until the watch is back", "err", err)
		},
	}
	w.Run(ctx)
}

// setReady records whether the watch vouches for the directory it
// installed.
func (d *Directory) setReady(ok bool) {
	d.mu.Lock()
	d.ready = ok
	d.mu.Unlock()
}

// install takes one change of the key.
func (d *Directory) install(e jetstream.KeyValueEntry) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e.Revision() <= d.rev {
		return
	}
	r, err := decode(e)
	if err != nil {
		// Unreadable: judge by reads of the key, which fail, rather than
		// by an older directory.
		d.log.Warn("the live directory is unreadable", "revision", e.Revision(), "err", err)
		d.ready = false
		return
	}
	d.roster, d.rev = r, e.Revision()
}

func decode(e jetstream.KeyValueEntry) (*approval.Roster, error) {
	if e.Operation() != jetstream.KeyValuePut {
		return nil, nil
	}
	return approval.ParseRoster(e.Value())
}

// Roster returns the live directory: the watched one once the watch is
// ready, else the key as read now. nil means none is published.
func (d *Directory) Roster(ctx context.Context) (*approval.Roster, error) {
	d.mu.Lock()
	r, ready := d.roster, d.ready
	d.mu.Unlock()
	if ready {
		return r, nil
	}
	e, err := readKey(ctx, d.js)
	if err != nil || e == nil {
		return nil, err
	}
	r, err = decode(e)
	if err != nil {
		return nil, fmt.Errorf("audience: live directory revision %d: %w", e.Revision(), err)
	}
	return r, nil
}

// readKey reads the directory's key with a watch of that key alone (nil:
// not published), the one read the notifier's NATS user may make of the
// policy bucket: a message get names its key in the request's body, which
// no grant can pin to one key.
func readKey(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValueEntry, error) {
	kv, err := js.KeyValue(ctx, contracts.BucketPolicy)
	if err != nil {
		return nil, fmt.Errorf("audience: live directory: %w", err)
	}
	w, err := kv.Watch(ctx, contracts.DirectoryKey)
	if err != nil {
		return nil, fmt.Errorf("audience: live directory: %w", err)
	}
	defer func() { _ = w.Stop() }()
	var last jetstream.KeyValueEntry
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("audience: live directory: the watch ended")
			}
			if e == nil {
				return last, nil // the key's value as of now, or none
			}
			last = e
		case <-ctx.Done():
			return nil, fmt.Errorf("audience: live directory: %w", ctx.Err())
		}
	}
}

// Revision is the revision of the watched directory (0: none seen yet).
func (d *Directory) Revision() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.rev
}

// Book is an address book's view of a person, used only where no live
// directory is published; nil knows nobody.
type Book func(id string) (contracts.DirectoryPerson, bool)

// Person returns what the live directory says of id, or, where none is
// published, what book says.
func Person(r *approval.Roster, book Book, id string) (contracts.DirectoryPerson, bool) {
	if r != nil {
		return r.Find(id)
	}
	if book == nil {
		return contracts.DirectoryPerson{}, false
	}
	return book(id)
}

// ReadRule is the read rule of the interactive channels over d: id may
// read rec when the live directory (or, where none is published, book)
// lists them and notifier.MayTell lets them.
func (d *Directory) ReadRule(book Book) notifier.ReadRule {
	return func(ctx context.Context, id string, rec *contracts.Record) (bool, error) {
		r, err := d.Roster(ctx)
		if err != nil {
			return false, err
		}
		p, ok := Person(r, book, id)
		if !ok {
			return false, nil
		}
		ok, _ = notifier.MayTell(rec, p)
		return ok, nil
	}
}
