package pdkv

// WaitProgressCalls is the number of Progress calls a's WaitNotification made (for tests).
func WaitProgressCalls(a *Agent) uint64 { return a.waitProgress.Load() }

// WaitLeading reports whether a WaitNotification of a sleeps on the event fd (for tests).
func WaitLeading(a *Agent) bool {
	a.pendingMu.Lock()
	defer a.pendingMu.Unlock()
	return a.leading
}
