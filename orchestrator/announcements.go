package orchestrator

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/events"
)

// A keyed waiter's subscriptions to the announcements of the records it
// waits on all deliver to one channel (nats.Conn.ChanSubscribe), not each
// to a goroutine of its own as a subscription with a handler does: a
// hundred thousand waits hold a hundred thousand subscriptions and no
// goroutine each. One goroutine moves what arrives to a queue, and up to
// announceWorkers goroutines, started when there is work and gone when
// there has been none for announceWorkerIdle, answer the waits from the
// decided announcements that can answer them (Waiter.answer) and read the
// records announced for every other wait.
const (
	// announceBuffer is the channel's room. The connection drops what
	// arrives while it is full (a slow consumer); the queue behind it
	// takes what arrives at memory speed, so it fills only when the
	// process is starved of CPU, and then every wait reads its record
	// again (announceQueue.overflowed).
	announceBuffer     = 1 << 12
	announceWorkers    = 16
	announceWorkerIdle = time.Second
)

// announced is one announcement queued: the record's key, and for a
// decided announcement its body (nil for the others); or the server's
// copy of a write of the record (record, at revision rev).
type announced struct {
	key     string
	decided []byte
	record  []byte
	rev     uint64
	pending bool // the copy's record is pending, by its summary header
}

// announceQueue is the queue of announcements to a keyed waiter.
type announceQueue struct {
	w  *Waiter
	ch chan *nats.Msg
	// done ends the goroutines when the waiter closes.
	done chan struct{}
	// more wakes one idle worker.
	more chan struct{}

	mu      sync.Mutex
	items   []announced
	workers int
	// rechecking is set while an overflow's re-read of every wait runs:
	// overflows meanwhile add none.
	rechecking atomic.Bool
}

func newAnnounceQueue(w *Waiter) *announceQueue {
	a := &announceQueue{w: w, ch: make(chan *nats.Msg, announceBuffer), done: make(chan struct{}), more: make(chan struct{}, 1)}
	w.running.Add(1)
	go a.receive()
	return a
}

// subscribe delivers subject's messages to the queue.
func (a *announceQueue) subscribe(nc *nats.Conn, subject string) (*nats.Subscription, error) {
	return nc.ChanSubscribe(subject, a.ch)
}

// close ends the goroutines; subscriptions are the waiter's to end.
func (a *announceQueue) close() { close(a.done) }

// receive moves each announcement to the queue.
func (a *announceQueue) receive() {
	defer a.w.running.Done()
	for {
		select {
		case m := <-a.ch:
			if len(a.ch) == cap(a.ch)-1 {
				// It was full: an announcement may have been dropped.
				a.overflowed()
			}
			if item, ok := recordCopy(m); ok {
				a.push(item)
			} else if key, decided, ok := announcedKey(m.Subject); ok {
				item := announced{key: key}
				if decided {
					item.decided = m.Data
				}
				a.push(item)
			}
		case <-a.done:
			return
		}
	}
}

// overflowed makes every wait read its record again, as after a reconnect:
// what a dropped announcement told is then read.
func (a *announceQueue) overflowed() {
	if !a.rechecking.CompareAndSwap(false, true) {
		return
	}
	a.w.log.Warn("announcements arrived faster than this process took them; every pending wait reads its record again")
	a.w.running.Add(1)
	go func() {
		defer a.w.running.Done()
		defer a.rechecking.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		a.w.recheck(ctx)
	}()
}

// push queues item and makes sure a worker will take it.
func (a *announceQueue) push(item announced) {
	a.mu.Lock()
	a.items = append(a.items, item)
	start := a.workers < announceWorkers
	if start {
		a.workers++
	}
	a.mu.Unlock()
	if start {
		a.w.running.Add(1)
		go a.work()
		return
	}
	select {
	case a.more <- struct{}{}:
	default:
	}
}

// pop takes the oldest announcement queued.
func (a *announceQueue) pop() (announced, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.items) == 0 {
		return announced{}, false
	}
	item := a.items[0]
	a.items[0] = announced{}
	a.items = a.items[1:]
	if len(a.items) == 0 {
		a.items = nil // let go of the consumed front
	}
	return item, true
}

// retire ends a worker that found nothing to do, unless work came in.
func (a *announceQueue) retire() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.items) > 0 {
		return false
	}
	a.workers--
	return true
}

// work takes the announcements queued until there have been none for
// announceWorkerIdle.
func (a *announceQueue) work() {
	defer a.w.running.Done()
	idle := time.NewTimer(announceWorkerIdle)
	defer idle.Stop()
	for {
		if item, ok := a.pop(); ok {
			if item.record != nil {
				a.w.recorded(item.key, item.record, item.rev, item.pending)
			} else {
				a.w.announced(item.key, item.decided)
			}
			continue
		}
		idle.Reset(announceWorkerIdle)
		select {
		case <-a.more:
		case <-idle.C:
			if a.retire() {
				return
			}
		case <-a.done:
			a.mu.Lock()
			a.workers--
			a.mu.Unlock()
			return
		}
	}
}

// recordCopy is m as the server's copy of a record write: its subject
// names the record (a message a push consumer delivers keeps the subject
// it was stored under, so it cannot pass for one), its Nats-Sequence
// header is the revision, and a deletion or purge marker is none.
func recordCopy(m *nats.Msg) (announced, bool) {
	key, ok := strings.CutPrefix(m.Subject, contracts.SubjectRecordPrefix)
	if !ok || key == "" || m.Header == nil || m.Header.Get("KV-Operation") != "" {
		return announced{}, false
	}
	rev, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil || rev == 0 || len(m.Data) == 0 {
		return announced{}, false
	}
	// The record's summary header (events.HeaderRecordStatus) says, before
	// any decoding, whether the copy can be a decision.
	return announced{key: key, record: m.Data, rev: rev, pending: m.Header.Get(events.HeaderRecordStatus) == contracts.StatusPending}, true
}

// announcedKey is the record key of an announcement's subject, and whether
// it is a decided announcement.
func announcedKey(subject string) (key string, decided, ok bool) {
	if key, ok := strings.CutPrefix(subject, contracts.SubjectDecidedPrefix); ok && key != "" {
		return key, true, true
	}
	for _, prefix := range []string{contracts.SubjectChangedPrefix, contracts.SubjectCreatedPrefix} {
		if key, ok := strings.CutPrefix(subject, prefix); ok && key != "" {
			return key, false, true
		}
	}
	return "", false, false
}
