package orchestrator

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
