package pdkv_test

import (
	"context"
	"errors"
	"sort"
	"sync"
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
// on a connected, silent agent drive progress a few times (the 100 us..5 ms naps it replaced
// made ~65 calls). The same in caller mode, whose wait must still drive P's side of a read.
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
		before := pdkv.WaitProgressCalls(p.Agent)
		start := time.Now()
		_, err = p.Agent.WaitNotification(timeout(t, 300*time.Millisecond), never)
		isErr(t, err, context.DeadlineExceeded)
		if el := time.Since(start); el < 290*time.Millisecond || el > 5*time.Second {
			t.Fatalf("waited %v", el)
		}
		if calls := pdkv.WaitProgressCalls(p.Agent) - before; calls < 1 || calls > 8 {
			t.Fatalf("%+v: %d progress calls in a 300 ms idle wait", o, calls)
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

// Cancelling ctx ends both the goroutine that sleeps on the event fd and one that waits on the
// channel promptly; a later wait still works (the fd was given back). Close ends both with
// ErrClosed.
func TestWaitNotificationCancelAndClose(t *testing.T) {
	p := newNode(t, true, xfer.Options{})
	for _, how := range []string{"cancel", "close"} {
		ctx, cancel := context.WithCancel(bg())
		errs := make(chan error, 2)
		var wg sync.WaitGroup
		for i := 0; i < 2; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := p.Agent.WaitNotification(ctx, never)
				errs <- err
			}()
		}
		time.Sleep(100 * time.Millisecond)
		start := time.Now()
		if how == "cancel" {
			cancel()
		} else {
			ok(t, p.Agent.Close())
		}
		wg.Wait()
		if el := time.Since(start); el > 2*time.Second {
			t.Fatalf("%s: waiters returned after %v", how, el)
		}
		for i := 0; i < 2; i++ {
			err := <-errs
			if how == "cancel" && !errors.Is(err, context.Canceled) || how == "close" && !errors.Is(err, pdkv.ErrClosed) {
				t.Fatalf("%s: %v", how, err)
			}
		}
		cancel()
		if how == "cancel" {
			if pdkv.WaitLeading(p.Agent) {
				t.Fatal("the cancelled leader kept the event fd")
			}
			ok(t, p.Agent.Lease("soon", 1, 50*time.Millisecond))
			n, err := p.Agent.WaitNotification(timeout(t, long), kindIs(pdkv.NotifyLeaseExpired))
			ok(t, err)
			if n.RequestID != "soon" {
				t.Fatalf("got %+v", n)
			}
		}
	}
}
