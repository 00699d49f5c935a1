package orchestrator

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/countersign/countersign/contracts"
)

// A keyed waiter's subscriptions to the announcements of the records it
// waits on all deliver to one channel (nats.Conn.ChanSubscribe), not each
// to a goroutine of its own as a subscription with a handler does: a
// hundred thousand waits hold a hundred thousand subscriptions and no
// goroutine each. One goroutine moves what arrives to a queue, and up to
// announceWorkers goroutines, started when there is work and gone when
// there has been none for announceWorkerIdle, read the records announced.
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

// announceQueue is the queue of record keys announced to a keyed waiter.
type announceQueue struct {
	w  *Waiter
	ch chan *nats.Msg
	// done ends the goroutines when the waiter closes.
	done chan struct{}
	// more wakes one idle worker.
	more chan struct{}

	mu      sync.Mutex
	keys    []string
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

// receive moves each announcement's key to the queue.
func (a *announceQueue) receive() {
	defer a.w.running.Done()
	for {
		select {
		case m := <-a.ch:
			if len(a.ch) == cap(a.ch)-1 {
				// It was full: an announcement may have been dropped.
				a.overflowed()
			}
			if key, ok := announcedKey(m.Subject); ok {
				a.push(key)
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

// push queues key and makes sure a worker will take it.
func (a *announceQueue) push(key string) {
	a.mu.Lock()
	a.keys = append(a.keys, key)
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

// pop takes the oldest key queued.
func (a *announceQueue) pop() (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.keys) == 0 {
		return "", false
	}
	key := a.keys[0]
	a.keys[0] = ""
	a.keys = a.keys[1:]
	if len(a.keys) == 0 {
		a.keys = nil // let go of the consumed front
	}
	return key, true
}

// retire ends a worker that found nothing to do, unless work came in.
func (a *announceQueue) retire() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.keys) > 0 {
		return false
	}
	a.workers--
	return true
}

// work reads the records announced until there has been nothing to read
// for announceWorkerIdle.
func (a *announceQueue) work() {
	defer a.w.running.Done()
	idle := time.NewTimer(announceWorkerIdle)
	defer idle.Stop()
	for {
		if key, ok := a.pop(); ok {
			a.w.rereadCurrent(key)
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

// announcedKey is the record key of an announcement's subject.
func announcedKey(subject string) (string, bool) {
	for _, prefix := range []string{contracts.SubjectDecidedPrefix, contracts.SubjectChangedPrefix, contracts.SubjectCreatedPrefix} {
		if key, ok := strings.CutPrefix(subject, prefix); ok && key != "" {
			return key, true
		}
	}
	return "", false
}
