package pdkv_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	pdkv "github.com/pdkv/pdkv/go"
	"github.com/pdkv/pdkv/go/internal/xfer"
)

func never(pdkv.Notification) bool { return false }

func kindIs(kind pdkv.NotificationKind) func(pdkv.Notification) bool {
	return func(n pdkv.Notification) bool { return n.Kind == kind }
}

// An idle WaitNotification sleeps on the agent's event fd instead of waking on a timer: 300 ms
// on a connected, silent agent drive progress once or twice (the 100 us..5 ms naps it replaced
// made ~65 calls) and poll once, for the whole wait (the 50 ms slices before woke 6 times; a
// second poll only if a signal interrupted the first). The same in caller mode, whose wait must
// still drive P's side of a read.
func TestWaitNotificationSleepsOnTheEventFD(t *testing.T) {
	for _, o := range []xfer.Options{{}, {Transport: pdkv.TransportTCP, ProgressMode: pdkv.ProgressCaller}} {
		p := newNode(t, true, o)
		d := newNode(t, false, o)
		stopP, stopD := pump(p.Agent), pump(d.Agent)
		peer, err := d.Agent.Connect(timeout(t, long), address(t, p))
		stopP()
		ok(t, err)
		ok(t, peer.Close())
		_, err = p.Agent.PollNotifications()
		ok(t, err)
		before, polls := pdkv.WaitProgressCalls(p.Agent), pdkv.WaitPolls(p.Agent)
		start := time.Now()
		_, err = p.Agent.WaitNotification(timeout(t, 300*time.Millisecond), never)
		isErr(t, err, context.DeadlineExceeded)
		if el := time.Since(start); el < 290*time.Millisecond || el > 5*time.Second {
			t.Fatalf("waited %v", el)
		}
		if calls := pdkv.WaitProgressCalls(p.Agent) - before; calls < 1 || calls > 2 {
			t.Fatalf("%+v: %d progress calls in a 300 ms idle wait", o, calls)
		}
		if n := pdkv.WaitPolls(p.Agent) - polls; n < 1 || n > 2 {
			t.Fatalf("%+v: %d polls in a 300 ms idle wait", o, n)
		}
		// Caller mode: nobody pumps P, so D's read moves only while P's wait drives it.
		pl := plan(t, d)
		tr, err := d.Agent.Post(bg(), read(pl, "ev-1"))
		ok(t, err)
		n := waitKind(t, p.Agent, pdkv.NotifyReadDone, "ev-1")
		if n.EngineID != xfer.DEngine {
			t.Fatalf("READ_DONE from %q", n.EngineID)
		}
		ok(t, tr.Wait(timeout(t, long)))
		stopD()
		ok(t, tr.Close())
		_, err = xfer.Verify(pl, d.Buffers)
		ok(t, err)
	}
}

// A goroutine waiting while a peer disconnects gets PEER_LOST; the latency from the disconnect
// call to the wait's return is logged (a measurement, not asserted: go test -v shows it).
func TestPeersNotificationWakesAWaitingGoroutine(t *testing.T) {
	p := newNode(t, true, xfer.Options{})
	d := newNode(t, false, xfer.Options{})
	var lat []time.Duration
	for i := 0; i < 10; i++ {
		peer, err := d.Agent.Connect(timeout(t, long), address(t, p))
		ok(t, err)
		_, err = p.Agent.WaitNotification(timeout(t, long), kindIs(pdkv.NotifyPeerConnected))
		ok(t, err)
		_, err = p.Agent.PollNotifications()
		ok(t, err)
		type result struct {
			n   pdkv.Notification
			err error
			at  time.Time
		}
		got := make(chan result, 1)
		go func() {
			n, err := p.Agent.WaitNotification(timeout(t, long), kindIs(pdkv.NotifyPeerLost))
			got <- result{n, err, time.Now()}
		}()
		time.Sleep(50 * time.Millisecond) // the waiter sleeps (the old naps had grown to 5 ms)
		start := time.Now()
		ok(t, peer.Disconnect())
		r := <-got
		ok(t, r.err)
		ok(t, peer.Close())
		if r.n.EngineID != xfer.DEngine {
			t.Fatalf("PEER_LOST from %q", r.n.EngineID)
		}
		lat = append(lat, r.at.Sub(start))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	t.Logf("WaitNotification PEER_LOST latency: median %v, max %v over %d", lat[len(lat)/2], lat[len(lat)-1], len(lat))
}

// Waiter B sleeps on the event fd; waiter A (started later, so it waits on the channel) wants
// only PEER_CONNECTED. B's take moves it into the shared queue and must wake A at once, not
// when B's own wait ends; B then gets its PEER_LOST, and nothing else is lost.
func TestTwoWaitersWithDifferentPredicates(t *testing.T) {
	p := newNode(t, true, xfer.Options{})
	d := newNode(t, false, xfer.Options{})
	type result struct {
		n   pdkv.Notification
		err error
		at  time.Time
	}
	wait := func(kind pdkv.NotificationKind) chan result {
		ch := make(chan result, 1)
		go func() {
			n, err := p.Agent.WaitNotification(timeout(t, long), kindIs(kind))
			ch <- result{n, err, time.Now()}
		}()
		return ch
	}
	b := wait(pdkv.NotifyPeerLost)
	for end := time.Now().Add(long); !pdkv.WaitLeading(p.Agent) && time.Now().Before(end); {
		time.Sleep(time.Millisecond)
	}
	if !pdkv.WaitLeading(p.Agent) {
		t.Fatal("B does not sleep on the event fd")
	}
	a := wait(pdkv.NotifyPeerConnected)
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	peer, err := d.Agent.Connect(timeout(t, long), address(t, p))
	ok(t, err)
	select {
	case r := <-a:
		ok(t, r.err)
		if r.n.Kind != pdkv.NotifyPeerConnected || r.at.Sub(start) > 2*time.Second {
			t.Fatalf("A got %+v after %v", r.n, r.at.Sub(start))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("A was not woken by B's take") // B's wait lasts until the disconnect below (or 10 s)
	}
	select {
	case r := <-b:
		t.Fatalf("B returned early: %+v %v", r.n, r.err)
	default:
	}
	ok(t, peer.Disconnect())
	ok(t, peer.Close())
	r := <-b
	ok(t, r.err)
	if r.n.Kind != pdkv.NotifyPeerLost {
		t.Fatalf("B got %+v", r.n)
	}
	left, err := p.Agent.PollNotifications()
	ok(t, err)
	if len(left) != 0 {
		t.Fatalf("left pending: %+v", left)
	}
}

// settledGoroutines waits (up to 2 s) until at most want goroutines run and returns how many do.
func settledGoroutines(want int) int {
	n := runtime.NumGoroutine()
	for end := time.Now().Add(2 * time.Second); n > want && time.Now().Before(end); n = runtime.NumGoroutine() {
		time.Sleep(time.Millisecond)
	}
	return n
}

// Cancelling ctx (which has no deadline) ends both the goroutine that sleeps on the event fd and
// one that waits on the channel promptly; a later wait still works (the fd was given back, and
// the ctx watcher's wakeup drained: the next idle wait polls once). Close ends both with
// ErrClosed. The leader sleeps in one poll without a timeout until then, and no goroutine
// outlives the waits (their ctx is still live when Close ends them). The 2 s bounds only guard
// against a hang.
func TestWaitNotificationCancelAndClose(t *testing.T) {
	p := newNode(t, true, xfer.Options{})
	for _, how := range []string{"cancel", "close"} {
		ctx, cancel := context.WithCancel(bg())
		errs := make(chan error, 2)
		var wg sync.WaitGroup
		base := runtime.NumGoroutine()
		polls := pdkv.WaitPolls(p.Agent)
		for i := 0; i < 2; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := p.Agent.WaitNotification(ctx, never)
				errs <- err
			}()
		}
		time.Sleep(200 * time.Millisecond)
		if n := pdkv.WaitPolls(p.Agent) - polls; n != 1 {
			t.Fatalf("%s: %d polls in 200 ms of an idle wait without a deadline", how, n)
		}
		start := time.Now()
		ended := make(chan error, 1)
		go func() {
			var err error
			if how == "cancel" {
				cancel()
			} else {
				err = p.Agent.Close() // waits for the leader's poll
			}
			wg.Wait()
			ended <- err
		}()
		select {
		case err := <-ended:
			ok(t, err)
		case <-time.After(2 * time.Second):
			t.Fatalf("%s: the waits still run after 2 s", how) // the cleanup's Close may hang then
		}
		t.Logf("%s: the waits ended %v after it", how, time.Since(start))
		for i := 0; i < 2; i++ {
			err := <-errs
			if how == "cancel" && !errors.Is(err, context.Canceled) || how == "close" && !errors.Is(err, pdkv.ErrClosed) {
				t.Fatalf("%s: %v", how, err)
			}
		}
		if n := settledGoroutines(base); n > base {
			t.Fatalf("%s: %d goroutines after the waits, %d before", how, n, base)
		}
		cancel()
		if how == "cancel" {
			if pdkv.WaitLeading(p.Agent) {
				t.Fatal("the cancelled leader kept the event fd")
			}
			polls := pdkv.WaitPolls(p.Agent)
			_, err := p.Agent.WaitNotification(timeout(t, 100*time.Millisecond), never)
			isErr(t, err, context.DeadlineExceeded)
			if n := pdkv.WaitPolls(p.Agent) - polls; n != 1 {
				t.Fatalf("%d polls in a 100 ms idle wait after a cancelled one", n)
			}
			ok(t, p.Agent.Lease("soon", 1, 50*time.Millisecond))
			n, err := p.Agent.WaitNotification(timeout(t, long), kindIs(pdkv.NotifyLeaseExpired))
			ok(t, err)
			if n.RequestID != "soon" {
				t.Fatalf("got %+v", n)
			}
		} else {
			if pdkv.WakeOpen(p.Agent) {
				t.Fatal("the wake descriptor outlived Close and the waits")
			}
			_, err := p.Agent.WaitNotification(bg(), never)
			isErr(t, err, pdkv.ErrClosed)
		}
	}
}

// Close during a wait leaves the wake descriptor that woke it open (the wait may still poll it:
// a closed number could be reused by then); the wait closes it as it returns.
func TestTheWakeDescriptorOutlivesTheWaitsThatPollIt(t *testing.T) {
	p := newNode(t, true, xfer.Options{})
	woke, gate := make(chan struct{}, 1), make(chan struct{})
	pdkv.SetAfterPoll(p.Agent, func() {
		select {
		case woke <- struct{}{}:
		default:
		}
		<-gate // the wait is still in WaitNotification when Close returns
	})
	errs := make(chan error, 1)
	go func() {
		_, err := p.Agent.WaitNotification(bg(), never)
		errs <- err
	}()
	for end := time.Now().Add(long); !pdkv.WaitLeading(p.Agent) && time.Now().Before(end); {
		time.Sleep(time.Millisecond)
	}
	ok(t, p.Agent.Close())
	select {
	case <-woke: // Close woke the sleeping wait
	case <-time.After(long):
		t.Fatal("Close did not wake the wait")
	}
	if !pdkv.WakeOpen(p.Agent) {
		t.Fatal("Close closed the wake descriptor under a running wait")
	}
	close(gate)
	isErr(t, <-errs, pdkv.ErrClosed)
	if pdkv.WakeOpen(p.Agent) {
		t.Fatal("the last wait did not close the wake descriptor")
	}
}

// leftOpenIfHung is newNode whose cleanup leaves the node open when *hung is set: Close would
// wait for the lock a hung wait holds, so the failed test would hang the run instead.
func leftOpenIfHung(t *testing.T, hung *atomic.Bool) *xfer.Node {
	t.Helper()
	m, err := xfer.Model()
	ok(t, err)
	defer m.Close()
	n, err := xfer.NewNode(m, true, xfer.Options{})
	ok(t, err)
	t.Cleanup(func() {
		if !hung.Load() {
			n.Close()
		}
	})
	return n
}

// within runs f on a goroutine and fails the test (setting *hung) when it has not returned in 5 s.
func within(t *testing.T, hung *atomic.Bool, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		hung.Store(true)
		t.Fatal("hung (a predicate that calls back into the agent deadlocked)")
	}
}

// The predicate runs without the queue's lock: one that calls PollNotifications gets the
// notification (once) instead of deadlocking, and the wait, whose match that poll took, goes on
// until its ctx ends; nothing is delivered twice.
func TestAPredicateMayPollTheAgent(t *testing.T) {
	var hung atomic.Bool
	p := leftOpenIfHung(t, &hung)
	ok(t, p.Agent.Lease("poll-a", 1, 10*time.Millisecond))
	var polled []string
	var err error
	ctx := timeout(t, 300*time.Millisecond)
	within(t, &hung, func() {
		_, err = p.Agent.WaitNotification(ctx, func(n pdkv.Notification) bool {
			got, err := p.Agent.PollNotifications()
			if err != nil {
				t.Error(err)
			}
			for _, g := range got {
				polled = append(polled, g.RequestID)
			}
			return n.RequestID == "poll-a"
		})
	})
	isErr(t, err, context.DeadlineExceeded)
	if len(polled) != 1 || polled[0] != "poll-a" {
		t.Fatalf("polled %v", polled)
	}
	left, err := p.Agent.PollNotifications()
	ok(t, err)
	if len(left) != 0 {
		t.Fatalf("left pending: %+v", left)
	}
}

// A predicate may run another wait on the same agent (even while its own wait is the one that
// sleeps on the event fd): each returns its own notification.
func TestAPredicateMayWaitAgain(t *testing.T) {
	var hung atomic.Bool
	p := leftOpenIfHung(t, &hung)
	ok(t, p.Agent.Lease("outer", 1, 10*time.Millisecond))
	ok(t, p.Agent.Lease("inner", 1, 10*time.Millisecond))
	var outer, inner pdkv.Notification
	var outerErr, innerErr error
	ctx := timeout(t, long)
	within(t, &hung, func() {
		outer, outerErr = p.Agent.WaitNotification(ctx, func(n pdkv.Notification) bool {
			if n.RequestID != "outer" {
				return false
			}
			inner, innerErr = p.Agent.WaitNotification(ctx, func(m pdkv.Notification) bool {
				return m.RequestID == "inner"
			})
			return true
		})
	})
	ok(t, outerErr)
	ok(t, innerErr)
	if outer.RequestID != "outer" || inner.RequestID != "inner" {
		t.Fatalf("outer %+v, inner %+v", outer, inner)
	}
	left, err := p.Agent.PollNotifications()
	ok(t, err)
	if len(left) != 0 {
		t.Fatalf("left pending: %+v", left)
	}
}

// Close from a predicate ends that wait with ErrClosed instead of deadlocking.
func TestAPredicateMayCloseTheAgent(t *testing.T) {
	var hung atomic.Bool
	p := leftOpenIfHung(t, &hung)
	ok(t, p.Agent.Lease("close", 1, 10*time.Millisecond))
	var err, closeErr error
	ctx := timeout(t, long)
	within(t, &hung, func() {
		_, err = p.Agent.WaitNotification(ctx, func(pdkv.Notification) bool {
			closeErr = p.Agent.Close()
			return false
		})
	})
	ok(t, closeErr)
	isErr(t, err, pdkv.ErrClosed)
	if pdkv.WakeOpen(p.Agent) {
		t.Fatal("the wake descriptor outlived Close and the wait")
	}
}

// Predicates run outside the lock, so several run at once and the queue changes under them:
// still every waiter gets exactly its own notification, and a poller gets only the ones left,
// so none is lost or delivered twice.
func TestManyWaitersWithSlowPredicatesGetEachNotificationOnce(t *testing.T) {
	p := newNode(t, true, xfer.Options{})
	const waiters = 8
	got := make(chan string, waiters)
	errs := make(chan error, waiters)
	ctx := timeout(t, long)
	for i := 0; i < waiters; i++ {
		id := fmt.Sprintf("many-%d", i)
		go func() {
			n, err := p.Agent.WaitNotification(ctx, func(n pdkv.Notification) bool {
				time.Sleep(time.Millisecond) // widens the window in which others change the queue
				return n.RequestID == id
			})
			errs <- err
			got <- n.RequestID
		}()
	}
	want := map[string]bool{}
	for i := 0; i < waiters; i++ {
		id := fmt.Sprintf("many-%d", i)
		want[id] = true
		ok(t, p.Agent.Lease(id, 1, 10*time.Millisecond))
	}
	ok(t, p.Agent.Lease("spare-1", 1, 10*time.Millisecond))
	ok(t, p.Agent.Lease("spare-2", 1, 10*time.Millisecond))
	for i := 0; i < waiters; i++ {
		ok(t, <-errs)
		id := <-got
		if !want[id] {
			t.Fatalf("got %q twice or unasked", id)
		}
		delete(want, id)
	}
	var spare []string
	for end := time.Now().Add(long); len(spare) < 2 && time.Now().Before(end); {
		left, err := p.Agent.PollNotifications()
		ok(t, err)
		for _, n := range left {
			spare = append(spare, n.RequestID)
		}
		time.Sleep(10 * time.Millisecond)
	}
	sort.Strings(spare)
	if len(spare) != 2 || spare[0] != "spare-1" || spare[1] != "spare-2" {
		t.Fatalf("left: %v", spare)
	}
}

// While one wait sleeps on the event fd, another wait's look leaves the library's
// notifications to it: a take there drained the event fd under the sleeping wait, which then
// slept on (here until its 5 s deadline) with the notification only it wanted in the queue.
func TestAWaitLeavesTheLibraryToTheOneSleepingOnTheEventFD(t *testing.T) {
	p := newNode(t, true, xfer.Options{})
	gated, fLooked := make(chan struct{}), make(chan struct{})
	var gate, look sync.Once
	pdkv.SetBeforePoll(p.Agent, func() {
		gate.Do(func() { // the first leader: it polls once F has looked (or after 1 s)
			close(gated)
			select {
			case <-fLooked:
			case <-time.After(time.Second):
			}
		})
	})
	type result struct {
		n   pdkv.Notification
		err error
		at  time.Time
	}
	leader := make(chan result, 1)
	go func() {
		n, err := p.Agent.WaitNotification(timeout(t, 5*time.Second), func(n pdkv.Notification) bool {
			return n.RequestID == "for-leader"
		})
		leader <- result{n, err, time.Now()}
	}()
	<-gated
	ok(t, p.Agent.Lease("for-leader", 1, 10*time.Millisecond))
	fd, err := p.Agent.EventFD()
	ok(t, err)
	if !readable(t, fd, long) {
		t.Fatal("no notification in the library")
	}
	start := time.Now()
	follower := make(chan error, 1)
	go func() {
		_, err := p.Agent.WaitNotification(timeout(t, 500*time.Millisecond), func(pdkv.Notification) bool {
			look.Do(func() { close(fLooked) }) // F saw a notification: it took it from the library
			return false
		})
		follower <- err
	}()
	r := <-leader
	ok(t, r.err)
	if r.n.RequestID != "for-leader" || r.at.Sub(start) > 2*time.Second {
		t.Fatalf("the leader got %+v after %v", r.n, r.at.Sub(start))
	}
	isErr(t, <-follower, context.DeadlineExceeded)
}

// readable waits up to d for fd to be readable (select(2)).
func readable(t *testing.T, fd int, d time.Duration) bool {
	t.Helper()
	var set syscall.FdSet
	set.Bits[fd/64] |= 1 << (uint(fd) % 64)
	tv := syscall.NsecToTimeval(d.Nanoseconds())
	n, err := syscall.Select(fd+1, &set, nil, nil, &tv)
	ok(t, err)
	return n > 0
}
