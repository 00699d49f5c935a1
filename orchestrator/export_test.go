package orchestrator

import "time"

// MissAnnouncementsForTest ends a keyed waiter's subscriptions to key's
// announcements while its waits stay, as if the connection had dropped
// every announcement of key.
func (w *Waiter) MissAnnouncementsForTest(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ks := w.subs[key]; ks != nil {
		ks.unsubscribe()
	}
}

// OverflowForTest is what the waiter does when its announcements channel
// was full: an announcement may have been dropped.
func (w *Waiter) OverflowForTest() { w.ann.overflowed() }

// HistoryHorizonForTest is how far back the gate's window of the history
// keeps facts, 0 when it has none open.
func (g *Gate) HistoryHorizonForTest() time.Duration {
	g.hist.mu.Lock()
	defer g.hist.mu.Unlock()
	if g.hist.store == nil {
		return 0
	}
	return g.hist.horizon
}
