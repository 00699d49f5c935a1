package arbiter

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/approval"
	"github.com/countersign/countersign/events/livekey"
	"github.com/countersign/countersign/orchestrator"
)

// This file keeps what the arbiter judges by in memory, as it changes: the
// live directory (contracts.DirectoryKey) and the live policy version
// (orchestrator.PolicyKey), both in hitl_policy. One watch of the two keys
// replaces a read of the bucket for every vote, command and request; until
// the watch has delivered what the bucket holds (and whenever it stops),
// the arbiter reads the keys instead.

// liveKeys is the watched state.
type liveKeys struct {
	mu    sync.Mutex
	ready bool // the watch delivered the bucket's state and runs
	// roster is the directory at rosterRev (nil: none published).
	roster    *approval.Roster
	rosterRev uint64
	// live is the live policy version at liveRev ("": none applied).
	live    string
	liveRev uint64

	revision prometheus.Gauge
}

func newLiveKeys(reg prometheus.Registerer) *liveKeys {
	k := &liveKeys{revision: prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "countersign_arbiter_directory_revision",
		Help: "Revision, in the hitl_policy bucket, of the directory the arbiter judges votes and commands by (0: none published yet).",
	})}
	if reg != nil {
		reg.MustRegister(k.revision)
	}
	return k
}

// watch follows the two keys until ctx ends, watching again a second after
// a watch fails (events/livekey).
func (k *liveKeys) watch(ctx context.Context, b *policyBook, log *slog.Logger) {
	w := livekey.Watcher{
		Bucket:  b.bucket,
		Keys:    []string{contracts.DirectoryKey, orchestrator.PolicyKey},
		Install: k.install,
		Ready:   k.setReady,
		Failed: func(err error) {
			log.Warn("the watch of the directory and the live policy stopped; reading the keys until it is back", "err", err)
		},
	}
	w.Run(ctx)
}

// setReady says whether the watch vouches for the copy.
func (k *liveKeys) setReady(ok bool) {
	k.mu.Lock()
	k.ready = ok
	k.mu.Unlock()
}

// install takes one change of a watched key.
func (k *liveKeys) install(e jetstream.KeyValueEntry) {
	k.mu.Lock()
	defer k.mu.Unlock()
	switch e.Key() {
	case contracts.DirectoryKey:
		if e.Revision() <= k.rosterRev {
			return
		}
		if e.Operation() != jetstream.KeyValuePut {
			k.roster, k.rosterRev = nil, e.Revision()
			break
		}
		r, err := approval.ParseRoster(e.Value())
		if err != nil {
			// Unreadable: judge by reads of the key, which fail the
			// operation, rather than by an older directory.
			k.ready = false
			return
		}
		k.roster, k.rosterRev = r, e.Revision()
		k.revision.Set(float64(e.Revision()))
	case orchestrator.PolicyKey:
		if e.Revision() <= k.liveRev {
			return
		}
		k.liveRev, k.live = e.Revision(), ""
		var doc struct {
			Version string `json:"version"`
		}
		if e.Operation() == jetstream.KeyValuePut && json.Unmarshal(e.Value(), &doc) == nil {
			k.live = doc.Version
		}
	}
}

// directory is the watched directory, or ok false when the watch cannot
// vouch for it (not started yet, stopped, or an unreadable document).
func (k *liveKeys) directory() (r *approval.Roster, ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.roster, k.ready
}

// liveVersion is the watched live policy version, or ok false as above.
func (k *liveKeys) liveVersion() (string, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.live, k.ready
}
