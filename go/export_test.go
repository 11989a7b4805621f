package pdkv

// WaitProgressCalls is the number of Progress calls a's WaitNotification made (for tests).
func WaitProgressCalls(a *Agent) uint64 { return a.waitProgress.Load() }

// WaitLeading reports whether a WaitNotification of a sleeps on the event fd (for tests).
func WaitLeading(a *Agent) bool {
	a.pendingMu.Lock()
	defer a.pendingMu.Unlock()
	return a.leading
}

// WaitPolls is the number of polls of the event fd a's WaitNotification made (for tests).
func WaitPolls(a *Agent) uint64 { return a.waitPolls.Load() }

// WakeOpen reports whether a's wake descriptor is still open (for tests).
func WakeOpen(a *Agent) bool {
	a.pendingMu.Lock()
	defer a.pendingMu.Unlock()
	return a.wakeFD >= 0
}

// SetAfterPoll makes f run after each poll of a's WaitNotification (set before any wait).
func SetAfterPoll(a *Agent, f func()) { a.afterPoll = f }

// TransferWatchers is the number of Post's context watchers running (for tests).
func TransferWatchers() int64 { return transferWatchers.Load() }

// SetBeforePoll makes f run before each poll of a's WaitNotification (set before any wait).
func SetBeforePoll(a *Agent, f func()) { a.beforePoll = f }

// PinnedBuffers is the number of HostBuffers a's pin list holds (for tests).
func PinnedBuffers(a *Agent) int {
	a.pins.mu.Lock()
	defer a.pins.mu.Unlock()
	return len(a.pins.bufs)
}

// WatchLooks is the number of times Post's context watchers looked at a transfer's state.
func WatchLooks() int64 { return watchLooks.Load() }

// WatchByLooking makes Post's context watchers look at intervals instead of watching the done
// fd, as they do when no descriptor can be had.
func WatchByLooking(on bool) { watchByLooking.Store(on) }
