package pdkv_test

// The transfer executor through the Go binding: a P and a D rank of the shared xfer setup (real
// memory) move a request and every byte is checked; context deadlines and cancellation
// (connect, transfer), Cancel and Close of an in-flight transfer, a peer that dies (closed in
// process, and SIGKILLed in a child process), leases, notifications, keys, refusals, idempotent
// Close and no goroutine left behind.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	pdkv "github.com/pdkv/pdkv/go"
	"github.com/pdkv/pdkv/go/internal/xfer"
)

const long = 10 * time.Second

func ok(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func isErr(t *testing.T, err error, targets ...error) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %v", targets)
	}
	for _, target := range targets {
		if !errors.Is(err, target) {
			t.Fatalf("error %v does not match %v", err, target)
		}
	}
}

func newNode(t *testing.T, prefill bool, o xfer.Options) *xfer.Node {
	t.Helper()
	m, err := xfer.Model()
	ok(t, err)
	defer m.Close()
	n, err := xfer.NewNode(m, prefill, o)
	ok(t, err)
	t.Cleanup(n.Close)
	return n
}

func address(t *testing.T, n *xfer.Node) string {
	t.Helper()
	a, err := n.Address()
	ok(t, err)
	return a
}

func bg() context.Context { return context.Background() }

func timeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(bg(), d)
	t.Cleanup(cancel)
	return ctx
}

func waitKind(t *testing.T, a *pdkv.Agent, kind pdkv.NotificationKind, request string) pdkv.Notification {
	t.Helper()
	n, err := a.WaitNotification(timeout(t, long), func(n pdkv.Notification) bool {
		return n.Kind == kind && n.RequestID == request
	})
	ok(t, err)
	return n
}

func plan(t *testing.T, d *xfer.Node) *pdkv.TransferPlan {
	t.Helper()
	p, err := xfer.PlanFromPeer(d)
	ok(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func read(plan *pdkv.TransferPlan, request string) pdkv.TransferParams {
	return pdkv.TransferParams{Op: pdkv.TransferRead, Plan: plan, PeerEngineID: xfer.PEngine, RequestID: request}
}

// pump drives a caller-mode agent's progress until the returned stop function is called.
func pump(a *pdkv.Agent) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			_, _ = a.Progress()
			time.Sleep(200 * time.Microsecond)
		}
	}()
	return func() { close(done); wg.Wait() }
}

// stalledPair is a D rank connected over TCP to a caller-mode P rank that nobody progresses
// after the handshake: a D read then makes no progress (UCX TCP needs the target to progress).
func stalledPair(t *testing.T) (p, d *xfer.Node) {
	p = newNode(t, true, xfer.Options{Transport: pdkv.TransportTCP, ProgressMode: pdkv.ProgressCaller})
	d = newNode(t, false, xfer.Options{Transport: pdkv.TransportTCP})
	stop := pump(p.Agent)
	peer, err := d.Agent.Connect(timeout(t, long), address(t, p))
	stop()
	ok(t, err)
	ok(t, peer.Close())
	return p, d
}

func TestAgentReadMovesEveryByte(t *testing.T) {
	p := newNode(t, true, xfer.Options{})
	d := newNode(t, false, xfer.Options{})
	ok(t, p.Agent.Lease("req-1", 1, long))
	peer, err := d.Agent.Connect(timeout(t, long), address(t, p))
	ok(t, err)
	defer peer.Close()
	pi, err := peer.Info()
	ok(t, err)
	if pi.EngineID != xfer.PEngine || pi.TpRank != 0 || !pi.Connected || pi.Inbound || pi.LostStatus != pdkv.StatusOK {
		t.Fatalf("peer info %+v", pi)
	}
	ai, err := d.Agent.Info()
	ok(t, err)
	if ai.EngineID != xfer.DEngine || ai.NumPeers != 1 || ai.Port == 0 || !strings.HasSuffix(ai.ListenAddress, fmt.Sprintf(":%d", ai.Port)) {
		t.Fatalf("agent info %+v", ai)
	}
	pl := plan(t, d)
	pinfo, err := pl.Info()
	ok(t, err)
	tr, err := d.Agent.Post(bg(), read(pl, "req-1"))
	ok(t, err)
	defer tr.Close()
	// The done fd: readable once the transfer is final, and still readable after.
	fd, err := tr.DoneFD()
	ok(t, err)
	if again, err := tr.DoneFD(); err != nil || again != fd {
		t.Fatalf("DoneFD again: %d, %v (first %d)", again, err, fd)
	}
	if !readable(t, fd, long) {
		t.Fatalf("done fd %d not readable within %v", fd, long)
	}
	ok(t, tr.Wait(timeout(t, long)))
	if !readable(t, fd, 0) {
		t.Fatalf("done fd %d no longer readable", fd)
	}
	ti, err := tr.Info()
	ok(t, err)
	if ti.State != pdkv.TransferDone || ti.Status != pdkv.StatusOK || ti.BytesDone != pinfo.Bytes || ti.BytesTotal != pinfo.Bytes || ti.ReadsFailed != 0 {
		t.Fatalf("transfer info %+v (plan %d bytes)", ti, pinfo.Bytes)
	}
	fr, err := tr.FailedReads()
	ok(t, err)
	if len(fr) != 0 {
		t.Fatalf("failed reads %v", fr)
	}
	n, err := xfer.Verify(pl, d.Buffers)
	ok(t, err)
	if n != pinfo.Bytes {
		t.Fatalf("verified %d bytes, plan moves %d", n, pinfo.Bytes)
	}
	for r, b := range p.Buffers { // a read leaves P's memory alone
		for o, x := range b.Bytes() {
			if x != xfer.Pattern(uint32(r), uint64(o)) {
				t.Fatalf("P region %d byte %d changed", r, o)
			}
		}
	}
	done := waitKind(t, p.Agent, pdkv.NotifyReadDone, "req-1")
	if done.EngineID != xfer.DEngine || done.Status != pdkv.StatusOK || done.Bytes != pinfo.Bytes || done.Count != 1 || done.Expected != 1 {
		t.Fatalf("READ_DONE %+v", done)
	}
	waitKind(t, p.Agent, pdkv.NotifyRequestComplete, "req-1")
	pi, err = peer.Info()
	ok(t, err)
	if pi.BytesRead != pinfo.Bytes || pi.TransfersDone != 1 {
		t.Fatalf("peer counters %+v", pi)
	}
	back, err := p.Agent.FindPeer(xfer.DEngine, 0)
	ok(t, err)
	defer back.Close()
	bi, err := back.Info()
	ok(t, err)
	if !bi.Inbound || !bi.Connected {
		t.Fatalf("P's view of D %+v", bi)
	}
	// Single-stage engines are stage 0; another stage is not connected.
	staged, err := p.Agent.FindStagePeer(xfer.DEngine, 0, 0)
	ok(t, err)
	defer staged.Close()
	if _, err := p.Agent.FindStagePeer(xfer.DEngine, 1, 0); !errors.Is(err, pdkv.ErrNotFound) ||
		!strings.Contains(err.Error(), "stage 1 rank 0") {
		t.Fatalf("stage 1 lookup: %v", err)
	}
}

func TestSharedHostBufferIsReadThroughThePeersMapping(t *testing.T) {
	p := newNode(t, true, xfer.Options{Transport: pdkv.TransportSHM, Shared: true})
	d := newNode(t, false, xfer.Options{Transport: pdkv.TransportSHM})
	peer, err := d.Agent.Connect(timeout(t, long), address(t, p))
	ok(t, err)
	defer peer.Close()
	pi, err := peer.Info()
	ok(t, err)
	if int(pi.MappedRegions) != len(p.Buffers) {
		t.Fatalf("mapped regions %d, want %d", pi.MappedRegions, len(p.Buffers))
	}
	pl := plan(t, d)
	tr, err := d.Agent.Post(bg(), read(pl, "req-m"))
	ok(t, err)
	defer tr.Close()
	ok(t, tr.Wait(timeout(t, long)))
	n, err := xfer.Verify(pl, d.Buffers)
	ok(t, err)
	pi, err = peer.Info()
	ok(t, err)
	if pi.BytesMapped != n || pi.BytesRead != n {
		t.Fatalf("bytes mapped %d, read %d, want %d", pi.BytesMapped, pi.BytesRead, n)
	}
	_, err = pdkv.NewSharedHostBuffer(0)
	isErr(t, err, pdkv.ErrInvalidArgument)
	b, err := pdkv.NewSharedHostBuffer(100)
	ok(t, err)
	if len(b.Bytes()) != 100 || b.Bytes()[99] != 0 || b.Addr()%4096 != 0 {
		t.Fatalf("shared buffer of %d bytes at %#x", len(b.Bytes()), b.Addr())
	}
	ok(t, b.Free())
	if b.Bytes() != nil {
		t.Fatal("Bytes after Free")
	}
}

func TestAgentWriteMovesEveryByte(t *testing.T) {
	p := newNode(t, true, xfer.Options{Transport: pdkv.TransportSHM})
	d := newNode(t, false, xfer.Options{Transport: pdkv.TransportSHM})
	peer, err := d.Agent.Connect(timeout(t, long), address(t, p))
	ok(t, err)
	ok(t, peer.Close())
	back, err := p.Agent.FindPeer(xfer.DEngine, 0)
	ok(t, err)
	defer back.Close()
	dm, err := back.Metadata()
	ok(t, err)
	defer dm.Close()
	pl, err := xfer.Plan(dm, p.Metadata)
	ok(t, err)
	defer pl.Close()
	ok(t, d.Agent.Lease("w-1", 1, long))
	tr, err := p.Agent.Post(timeout(t, long), pdkv.TransferParams{Op: pdkv.TransferWrite, Plan: pl, PeerEngineID: xfer.DEngine, RequestID: "w-1"})
	ok(t, err)
	defer tr.Close()
	ok(t, tr.Wait(bg()))
	n := waitKind(t, d.Agent, pdkv.NotifyWriteDone, "w-1")
	if n.EngineID != xfer.PEngine || n.Status != pdkv.StatusOK {
		t.Fatalf("WRITE_DONE %+v", n)
	}
	waitKind(t, d.Agent, pdkv.NotifyRequestComplete, "w-1")
	_, err = xfer.Verify(pl, d.Buffers)
	ok(t, err)
}

func TestAgentCallerModeProgress(t *testing.T) {
	p := newNode(t, true, xfer.Options{Transport: pdkv.TransportTCP, ProgressMode: pdkv.ProgressCaller})
	d := newNode(t, false, xfer.Options{Transport: pdkv.TransportTCP, ProgressMode: pdkv.ProgressCaller})
	fd, err := d.Agent.EventFD()
	ok(t, err)
	if fd < 0 {
		t.Fatalf("event fd %d", fd)
	}
	stopP := pump(p.Agent)
	defer stopP()
	stopD := pump(d.Agent)
	peer, err := d.Agent.Connect(timeout(t, long), address(t, p))
	stopD()
	ok(t, err)
	defer peer.Close()
	pl := plan(t, d)
	tr, err := d.Agent.Post(bg(), read(pl, "c-1"))
	ok(t, err)
	defer tr.Close()
	ok(t, tr.Wait(timeout(t, long))) // the wait drives D's progress itself
	_, err = xfer.Verify(pl, d.Buffers)
	ok(t, err)
}

func TestConnectDeadlineAndCancel(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	ok(t, err)
	target := silent.Addr().String()
	d := newNode(t, false, xfer.Options{Transport: pdkv.TransportTCP})
	start := time.Now()
	_, err = d.Agent.Connect(timeout(t, 300*time.Millisecond), target)
	isErr(t, err, pdkv.ErrTimedOut, context.DeadlineExceeded)
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("connect deadline took %v", el)
	}
	ctx, cancel := context.WithCancel(bg())
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	start = time.Now()
	_, err = d.Agent.Connect(ctx, target)
	isErr(t, err, pdkv.ErrCancelled, context.Canceled)
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("cancelled connect returned after %v", el)
	}
	_, err = d.Agent.Connect(ctx, target) // already cancelled: nothing is attempted
	isErr(t, err, pdkv.ErrCancelled, context.Canceled)
	ok(t, silent.Close())
	_, err = d.Agent.Connect(timeout(t, long), target)
	isErr(t, err, pdkv.ErrPeerLost)
}

func TestTransferDeadlineExpires(t *testing.T) {
	_, d := stalledPair(t)
	pl := plan(t, d)
	start := time.Now()
	tr, err := d.Agent.Post(timeout(t, 300*time.Millisecond), read(pl, "late"))
	ok(t, err)
	defer tr.Close()
	// A wait whose own context ends first reports that, and the transfer goes on.
	err = tr.Wait(timeout(t, 20*time.Millisecond))
	isErr(t, err, context.DeadlineExceeded)
	ti, err := tr.Info()
	ok(t, err)
	if ti.State != pdkv.TransferInFlight {
		t.Fatalf("state %v after a short wait", ti.State)
	}
	isErr(t, tr.Wait(bg()), pdkv.ErrTimedOut)
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("deadline took %v", el)
	}
	ti, err = tr.Info()
	ok(t, err)
	fr, err := tr.FailedReads()
	ok(t, err)
	if ti.State != pdkv.TransferFailed || ti.Status != pdkv.StatusTimedOut || len(fr) == 0 || uint64(len(fr)) != ti.ReadsFailed {
		t.Fatalf("info %+v, failed reads %v", ti, fr)
	}
}

// A transfer posted with a cancellable context that is never cancelled, and that nobody waits
// for, closes or asks about (the engine follows the notifications instead): its context
// watcher ends once the transfer is final, instead of keeping the Transfer (and itself) alive
// until the context ends.
func TestPostsContextWatcherEndsWithTheTransfer(t *testing.T) {
	t.Run("done fd", testPostsContextWatcherEndsWithTheTransfer)
	t.Run("looking at intervals (no done fd)", func(t *testing.T) {
		pdkv.WatchByLooking(true)
		defer pdkv.WatchByLooking(false)
		testPostsContextWatcherEndsWithTheTransfer(t)
	})
}

func testPostsContextWatcherEndsWithTheTransfer(t *testing.T) {
	// P drives no progress until the watcher is seen running: the transfer stays in flight.
	p, d := stalledPair(t)
	pl := plan(t, d)
	ctx, cancel := context.WithCancel(bg())
	defer cancel()
	before := pdkv.TransferWatchers()
	tr, err := d.Agent.Post(ctx, read(pl, "watched"))
	ok(t, err)
	if n := pdkv.TransferWatchers() - before; n != 1 {
		t.Fatalf("%d watchers after Post", n)
	}
	stop := pump(p.Agent)
	defer stop()
	waitKind(t, p.Agent, pdkv.NotifyReadDone, "watched") // D's read finished
	for end := time.Now().Add(long); pdkv.TransferWatchers() > before && time.Now().Before(end); {
		time.Sleep(time.Millisecond)
	}
	if n := pdkv.TransferWatchers() - before; n != 0 {
		t.Fatalf("the watcher of a finished transfer still runs (%d)", n)
	}
	runtime.KeepAlive(tr) // unclosed, not collected: only the watcher's own exit counts
	ok(t, tr.Wait(timeout(t, long)))
	ok(t, tr.Close())
}

// The watcher of a transfer that stays in flight sleeps in the runtime's poller on the done fd:
// it looks at the transfer once when it starts, not at intervals, and still forwards a
// cancellation at once.
func TestPostsContextWatcherSleepsOnTheDoneFD(t *testing.T) {
	p, d := stalledPair(t)
	pl := plan(t, d)
	ctx, cancel := context.WithCancel(bg())
	defer cancel()
	before, watchers := pdkv.WatchLooks(), pdkv.TransferWatchers()
	tr, err := d.Agent.Post(ctx, read(pl, "sleeping"))
	ok(t, err)
	defer tr.Close()
	time.Sleep(300 * time.Millisecond) // polling would have looked about 8 times by now
	if n := pdkv.WatchLooks() - before; n > 1 {
		t.Fatalf("the watcher looked %d times at a transfer in flight", n)
	}
	cancel()
	stop := pump(p.Agent) // the batches in flight complete, then the cancel takes effect
	defer stop()
	// Every read of this small plan is in flight already: they may all land before the cancel
	// takes effect (DONE), or not (CANCELLED).
	if err := tr.Wait(timeout(t, long)); err != nil && !errors.Is(err, pdkv.ErrCancelled) {
		t.Fatalf("Wait after cancel: %v", err)
	}
	for end := time.Now().Add(long); pdkv.TransferWatchers() > watchers && time.Now().Before(end); {
		time.Sleep(time.Millisecond)
	}
	if n := pdkv.TransferWatchers() - watchers; n != 0 {
		t.Fatalf("%d watchers left after the cancel", n)
	}
}

func TestTransferCancelAndClose(t *testing.T) {
	p, d := stalledPair(t)
	pl := plan(t, d)
	// Cancelling the context the transfer was posted with cancels the transfer.
	ctx, cancel := context.WithCancel(bg())
	tr, err := d.Agent.Post(ctx, read(pl, "ctx-cancelled"))
	ok(t, err)
	defer tr.Close()
	cancel()
	// The watcher cancels asynchronously; P stays stalled meanwhile, so the reads cannot
	// finish first. Progress P afterwards so the cancelled reads complete.
	time.Sleep(200 * time.Millisecond)
	stop := pump(p.Agent)
	isErr(t, tr.Wait(timeout(t, long)), pdkv.ErrCancelled)
	stop()
	// Cancel itself, on a fresh transfer.
	tr2, err := d.Agent.Post(bg(), read(pl, "cancelled"))
	ok(t, err)
	defer tr2.Close()
	ok(t, tr2.Cancel())
	stop = pump(p.Agent)
	isErr(t, tr2.Wait(timeout(t, long)), pdkv.ErrCancelled)
	ok(t, tr2.Cancel()) // no effect once finished
	stop()
	// Close of an in-flight transfer with a waiter: the waiter returns ErrClosed promptly.
	tr3, err := d.Agent.Post(bg(), read(pl, "closed"))
	ok(t, err)
	waited := make(chan error, 1)
	go func() { waited <- tr3.Wait(bg()) }()
	time.Sleep(30 * time.Millisecond)
	start := time.Now()
	ok(t, tr3.Close())
	ok(t, tr3.Close()) // idempotent
	select {
	case err := <-waited:
		if err != nil && !errors.Is(err, pdkv.ErrClosed) && !errors.Is(err, pdkv.ErrCancelled) {
			t.Fatalf("waiter got %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("a waiter of a closed transfer did not return")
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("Close took %v", el)
	}
	_, err = tr3.Info()
	isErr(t, err, pdkv.ErrClosed, pdkv.ErrNullPointer)
	// The agent keeps working.
	stop = pump(p.Agent)
	defer stop()
	tr4, err := d.Agent.Post(bg(), read(pl, "after"))
	ok(t, err)
	defer tr4.Close()
	ok(t, tr4.Wait(timeout(t, long)))
	_, err = xfer.Verify(pl, d.Buffers)
	ok(t, err)
}

func TestPeerClosedInProcess(t *testing.T) {
	p, d := stalledPair(t)
	pl := plan(t, d)
	peer, err := d.Agent.FindPeer(xfer.PEngine, 0)
	ok(t, err)
	defer peer.Close()
	tr, err := d.Agent.Post(bg(), read(pl, "orphan"))
	ok(t, err)
	defer tr.Close()
	start := time.Now()
	ok(t, p.Agent.Close())
	isErr(t, tr.Wait(timeout(t, long)), pdkv.ErrPeerLost)
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("peer loss noticed after %v", el)
	}
	lost, err := d.Agent.WaitNotification(timeout(t, long), func(n pdkv.Notification) bool { return n.Kind == pdkv.NotifyPeerLost })
	ok(t, err)
	if lost.EngineID != xfer.PEngine {
		t.Fatalf("PEER_LOST %+v", lost)
	}
	pi, err := peer.Info()
	ok(t, err)
	if pi.Connected || pi.LostStatus == pdkv.StatusOK || pi.TransfersFailed != 1 {
		t.Fatalf("lost peer %+v", pi)
	}
	_, err = d.Agent.Post(bg(), read(pl, "late"))
	isErr(t, err, pdkv.ErrNotFound)
	ok(t, peer.Disconnect()) // fine on a lost peer
}

// TestHelperPRank is not a test: run by TestPeerKilled in a child process, it serves a P rank in
// caller mode over TCP, progresses it until a D rank connects, then stops progressing and
// waits to be killed.
func TestHelperPRank(t *testing.T) {
	if os.Getenv("PDKV_HELPER_P") != "1" {
		t.Skip("helper process of TestPeerKilled")
	}
	p := newNode(t, true, xfer.Options{Transport: pdkv.TransportTCP, ProgressMode: pdkv.ProgressCaller})
	fmt.Printf("LISTEN %s\n", address(t, p))
	_, err := p.Agent.WaitNotification(timeout(t, long), func(n pdkv.Notification) bool { return n.Kind == pdkv.NotifyPeerConnected })
	ok(t, err)
	fmt.Println("CONNECTED")
	time.Sleep(time.Minute)
}

func TestPeerKilled(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperPRank$", "-test.v")
	cmd.Env = append(os.Environ(), "PDKV_HELPER_P=1")
	out, err := cmd.StdoutPipe()
	ok(t, err)
	ok(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	lines := bufio.NewScanner(out)
	next := func(prefix string) string {
		for lines.Scan() {
			if l := lines.Text(); strings.HasPrefix(l, prefix) {
				return strings.TrimSpace(strings.TrimPrefix(l, prefix))
			}
		}
		t.Fatalf("helper ended before %q", prefix)
		return ""
	}
	target := next("LISTEN ")
	d := newNode(t, false, xfer.Options{Transport: pdkv.TransportTCP})
	peer, err := d.Agent.Connect(timeout(t, long), target)
	ok(t, err)
	defer peer.Close()
	next("CONNECTED")
	pl := plan(t, d)
	tr, err := d.Agent.Post(bg(), read(pl, "killed"))
	ok(t, err)
	defer tr.Close()
	start := time.Now()
	ok(t, cmd.Process.Kill())
	isErr(t, tr.Wait(timeout(t, long)), pdkv.ErrPeerLost)
	// UCX may fail the reads before the control channel sees the connection drop: the peer
	// is marked lost (with a notification) soon after, within the heartbeat timeout.
	lost, err := d.Agent.WaitNotification(timeout(t, long), func(n pdkv.Notification) bool { return n.Kind == pdkv.NotifyPeerLost })
	ok(t, err)
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("killed peer noticed after %v", el)
	}
	pi, err := peer.Info()
	ok(t, err)
	if pi.Connected || lost.EngineID != xfer.PEngine || pi.TransfersFailed != 1 {
		t.Fatalf("killed peer %+v, notification %+v", pi, lost)
	}
}

func TestLeaseExpires(t *testing.T) {
	p := newNode(t, true, xfer.Options{})
	ok(t, p.Agent.Lease("never", 2, 100*time.Millisecond))
	n := waitKind(t, p.Agent, pdkv.NotifyLeaseExpired, "never")
	if n.Count != 0 || n.Expected != 2 {
		t.Fatalf("LEASE_EXPIRED %+v", n)
	}
	isErr(t, p.Agent.Lease("", 1, long), pdkv.ErrInvalidArgument)
	isErr(t, p.Agent.Lease("x", 0, long), pdkv.ErrInvalidArgument)
	isErr(t, p.Agent.Lease("x", 1, 0), pdkv.ErrInvalidArgument)
	isErr(t, p.Agent.Lease("x", 1, -time.Second), pdkv.ErrInvalidArgument)
	isErr(t, p.Agent.Lease(strings.Repeat("r", 1025), 1, long), pdkv.ErrInvalidArgument)
	isErr(t, p.Agent.Lease("a\x00b", 1, long), pdkv.ErrInvalidArgument)
}

// A read posted after P's lease of the request expired fails with ErrTimedOut naming the lease,
// every read listed as failed (2.7: P confirms its lease first); NoLeaseConfirm reads it as before
// (done when the data lands).
func TestAReadOfAnEndedLeaseFailsUnlessToldNotToConfirm(t *testing.T) {
	p := newNode(t, true, xfer.Options{})
	d := newNode(t, false, xfer.Options{})
	peer, err := d.Agent.Connect(timeout(t, long), address(t, p))
	ok(t, err)
	defer peer.Close()
	ok(t, p.Agent.Lease("late", 1, 30*time.Millisecond))
	waitKind(t, p.Agent, pdkv.NotifyLeaseExpired, "late")
	pl := plan(t, d)
	reads, _, err := pl.RankReads(0)
	ok(t, err)
	tr, err := d.Agent.Post(bg(), read(pl, "late"))
	ok(t, err)
	defer tr.Close()
	err = tr.Wait(timeout(t, long))
	isErr(t, err, pdkv.ErrTimedOut)
	if !strings.Contains(err.Error(), "lease of request 'late' expired before this READ asked") {
		t.Fatalf("error %q does not name the ended lease", err)
	}
	fr, err := tr.FailedReads()
	ok(t, err)
	if len(fr) != len(reads) {
		t.Fatalf("%d failed reads, want every one of the %d", len(fr), len(reads))
	}
	params := read(pl, "late")
	params.NoLeaseConfirm = true
	tr2, err := d.Agent.Post(bg(), params)
	ok(t, err)
	defer tr2.Close()
	ok(t, tr2.Wait(timeout(t, long)))
	pinfo, err := pl.Info()
	ok(t, err)
	n, err := xfer.Verify(pl, d.Buffers)
	ok(t, err)
	if n != pinfo.Bytes {
		t.Fatalf("verified %d bytes, plan moves %d", n, pinfo.Bytes)
	}
}

// A reader's keep-alives (KeepLeases, 2.6) hold P's lease open past its ttl; a lease nobody
// keeps expires beside it; an id with a comma is one id.
func TestKeepLeasesHoldsTheOtherSidesLeaseOpen(t *testing.T) {
	p := newNode(t, true, xfer.Options{})
	d := newNode(t, false, xfer.Options{})
	isErr(t, d.Agent.KeepLeases(xfer.PEngine, []string{"r"}), pdkv.ErrNotFound)
	peer, err := d.Agent.Connect(timeout(t, long), address(t, p))
	ok(t, err)
	defer peer.Close()
	ok(t, p.Agent.Lease("req,1", 1, time.Second))
	ok(t, p.Agent.Lease("plain", 1, time.Second))
	for end := time.Now().Add(2500 * time.Millisecond); time.Now().Before(end); {
		ok(t, d.Agent.KeepLeases(xfer.PEngine, []string{"req,1", "unknown"}))
		time.Sleep(50 * time.Millisecond)
	}
	notes, err := p.Agent.PollNotifications()
	ok(t, err)
	var expired []string
	for _, n := range notes {
		if n.Kind == pdkv.NotifyLeaseExpired {
			expired = append(expired, n.RequestID)
		}
	}
	if len(expired) != 1 || expired[0] != "plain" {
		t.Fatalf("expired while kept: %q, want only \"plain\"", expired)
	}
	waitKind(t, p.Agent, pdkv.NotifyLeaseExpired, "req,1")
	pi, err := peer.Info()
	ok(t, err)
	if pi.LeaseKeepsSent < 20 {
		t.Fatalf("lease keeps sent %d", pi.LeaseKeepsSent)
	}
	onP, err := p.Agent.FindPeer(xfer.DEngine, 0)
	ok(t, err)
	defer onP.Close()
	pp, err := onP.Info()
	ok(t, err)
	if pp.LeaseKeepsReceived != pi.LeaseKeepsSent {
		t.Fatalf("received %d, sent %d", pp.LeaseKeepsReceived, pi.LeaseKeepsSent)
	}
	isErr(t, d.Agent.KeepLeases(xfer.PEngine, []string{"a", ""}), pdkv.ErrInvalidArgument)
	isErr(t, d.Agent.KeepLeases(xfer.PEngine, []string{"a\x00b"}), pdkv.ErrInvalidArgument)
	ok(t, d.Agent.KeepLeases(xfer.PEngine, nil))
}

func TestPresharedKeys(t *testing.T) {
	key := []byte("0123456789abcdef-secret")
	p := newNode(t, true, xfer.Options{Key: key})
	good := newNode(t, false, xfer.Options{Key: key})
	bad := newNode(t, false, xfer.Options{Key: []byte("0123456789abcdef-wrong!")})
	_, err := bad.Agent.Connect(timeout(t, long), address(t, p))
	isErr(t, err, pdkv.ErrAuth)
	peer, err := good.Agent.Connect(timeout(t, long), address(t, p))
	ok(t, err)
	ok(t, peer.Close())
}

// Options printed with fmt, in every form, show the key's length and never its bytes.
func TestAgentOptionsNeverPrintTheKey(t *testing.T) {
	key := []byte("0123456789abcdef-do-not-print")
	o := pdkv.AgentOptions{ListenAddress: "127.0.0.1:0", PresharedKey: key, MaxOutstanding: 7, SealData: pdkv.Ptr(true)}
	for _, form := range []string{"%v", "%+v", "%#v", "%s"} {
		shown := fmt.Sprintf(form, o)
		if !strings.Contains(shown, "<29 bytes, not shown>") || !strings.Contains(shown, "127.0.0.1:0") {
			t.Fatalf("%s: %s lacks the key's length or another field", form, shown)
		}
		for _, needle := range []string{"do-not-print", "0123456789", "48 49 50", "0x30, 0x31", "[48"} {
			if strings.Contains(shown, needle) {
				t.Fatalf("%s: %q shows up in %s", form, needle, shown)
			}
		}
	}
	if shown := fmt.Sprintf("%+v", &o); strings.Contains(shown, "do-not-print") || strings.Contains(shown, "48 49") {
		t.Fatalf("a pointer to the options printed the key: %s", shown)
	}
	if shown := fmt.Sprintf("%+v", pdkv.AgentOptions{}); !strings.Contains(shown, "PresharedKey:<nil>") {
		t.Fatalf("no key: %s", shown)
	}
}

func TestSealDataIsPassedThrough(t *testing.T) {
	key := []byte("0123456789abcdef-secret")
	p := newNode(t, true, xfer.Options{Transport: pdkv.TransportTCP, Key: key, SealData: pdkv.Ptr(false)})
	// Sealed by default with a key: P's SealData false makes the pair differ.
	d := newNode(t, false, xfer.Options{Transport: pdkv.TransportTCP, Key: key})
	_, err := d.Agent.Connect(timeout(t, long), address(t, p))
	isErr(t, err, pdkv.ErrAuth)
	if !strings.Contains(err.Error(), "seal_data off") || !strings.Contains(err.Error(), "seal_data on") {
		t.Fatalf("%v does not name both settings", err)
	}
	clear := newNode(t, false, xfer.Options{Transport: pdkv.TransportTCP, Key: key, SealData: pdkv.Ptr(false)})
	peer, err := clear.Agent.Connect(timeout(t, long), address(t, p))
	ok(t, err)
	ok(t, peer.Close())
}

// MinPeerProtocolMinor (2.7) reaches the agent: a peer of this build passes a strict agent; a
// minor newer than this build's is refused at creation naming the field.
func TestMinPeerProtocolMinorIsPassedThrough(t *testing.T) {
	p := newNode(t, true, xfer.Options{MinPeerProtocolMinor: pdkv.ControlProtocolMinor})
	d := newNode(t, false, xfer.Options{MinPeerProtocolMinor: pdkv.ControlProtocolMinor})
	peer, err := d.Agent.Connect(timeout(t, long), address(t, p))
	ok(t, err)
	ok(t, peer.Close())
	m, err := xfer.Model()
	ok(t, err)
	defer m.Close()
	_, err = xfer.NewNode(m, true, xfer.Options{MinPeerProtocolMinor: pdkv.ControlProtocolMinor + 1})
	isErr(t, err, pdkv.ErrInvalidArgument)
	if !strings.Contains(err.Error(), fmt.Sprintf("min_peer_protocol_minor %d is newer", pdkv.ControlProtocolMinor+1)) {
		t.Fatalf("%v does not name the field", err)
	}
}

func TestAgentRefusals(t *testing.T) {
	m, err := xfer.Model()
	ok(t, err)
	defer m.Close()
	md, err := pdkv.EngineMetadataFromModel(m, pdkv.DefaultEngineConfig(), pdkv.DefaultEngineLayout())
	ok(t, err)
	defer md.Close()
	bad := func(o pdkv.AgentOptions, want error, parts ...string) {
		t.Helper()
		o.Metadata = md
		a, err := pdkv.NewAgent(o)
		if err == nil {
			_ = a.Close()
		}
		isErr(t, err, want)
		for _, p := range parts {
			if !strings.Contains(err.Error(), p) {
				t.Fatalf("%v does not name %q", err, p)
			}
		}
	}
	bad(pdkv.AgentOptions{Transport: 9}, pdkv.ErrInvalidArgument, "9")
	bad(pdkv.AgentOptions{ProgressMode: 7}, pdkv.ErrInvalidArgument)
	bad(pdkv.AgentOptions{PresharedKey: []byte("short")}, pdkv.ErrInvalidArgument)
	bad(pdkv.AgentOptions{SealData: pdkv.Ptr(true)}, pdkv.ErrInvalidArgument, "seal_data 1")
	bad(pdkv.AgentOptions{HeartbeatInterval: 2 * time.Second, HeartbeatTimeout: time.Second}, pdkv.ErrInvalidArgument)
	bad(pdkv.AgentOptions{DefaultTimeout: -time.Second}, pdkv.ErrInvalidArgument, "DefaultTimeout")
	bad(pdkv.AgentOptions{ListenAddress: "no-port"}, pdkv.ErrInvalidArgument)
	bad(pdkv.AgentOptions{ListenAddress: "a\x00b"}, pdkv.ErrInvalidArgument)
	bad(pdkv.AgentOptions{CopyThreads: 17}, pdkv.ErrInvalidArgument, "copy_threads", "17")
	for _, n := range []uint32{0, 1, 3, 16} {
		a, err := pdkv.NewAgent(pdkv.AgentOptions{Metadata: md, CopyThreads: n})
		ok(t, err)
		info, err := a.Info()
		ok(t, err)
		want := n
		if n == 0 {
			want = 1
			if runtime.NumCPU() >= 4 {
				want = 2
			}
		}
		if info.CopyThreads != want {
			t.Fatalf("CopyThreads %d: the agent copies with %d threads, want %d", n, info.CopyThreads, want)
		}
		_ = a.Close()
	}
	_, err = pdkv.NewAgent(pdkv.AgentOptions{})
	isErr(t, err, pdkv.ErrNullPointer)

	a, err := pdkv.NewAgent(pdkv.AgentOptions{Metadata: md})
	ok(t, err)
	defer a.Close()
	regions, err := md.Regions()
	ok(t, err)
	size := int(regions[0].BlockLen * regions[0].NumBlocks)
	hb, err := pdkv.NewHostBuffer(size)
	ok(t, err)
	defer hb.Free()
	_, err = a.RegisterBuffer(0, hb) // not at the advertised base
	isErr(t, err, pdkv.ErrInvalidArgument)
	_, err = a.RegisterBuffer(7, hb)
	isErr(t, err, pdkv.ErrInvalidArgument)
	_, err = a.RegisterMemory(pdkv.MemoryDesc{Region: 0, Address: regions[0].Base, Length: uint64(size), Type: pdkv.MemoryCUDA})
	isErr(t, err, pdkv.ErrInvalidArgument)
	_, err = a.RegisterBuffer(0, nil)
	isErr(t, err, pdkv.ErrNullPointer)
	_, err = pdkv.NewHostBuffer(0)
	isErr(t, err, pdkv.ErrInvalidArgument)
	_, err = a.FindPeer("nobody", 0)
	isErr(t, err, pdkv.ErrNotFound)
	_, err = a.Connect(bg(), "a\x00b")
	isErr(t, err, pdkv.ErrInvalidArgument)

	// A registered buffer stays pinned until its agent is closed.
	n := newNode(t, true, xfer.Options{})
	isErr(t, n.Buffers[0].Free(), pdkv.ErrBusy)
	ok(t, n.Memory[0].Deregister())
	ok(t, n.Memory[0].Deregister()) // twice is fine
	ok(t, n.Agent.Close())
	ok(t, n.Agent.Close()) // idempotent
	ok(t, n.Buffers[0].Free())
	_, err = n.Agent.Info()
	isErr(t, err, pdkv.ErrClosed)
	var nilAgent *pdkv.Agent
	ok(t, nilAgent.Close())
	_, err = nilAgent.Info()
	isErr(t, err, pdkv.ErrNullPointer)
}

func TestPostRefusals(t *testing.T) {
	p := newNode(t, true, xfer.Options{})
	d := newNode(t, false, xfer.Options{})
	peer, err := d.Agent.Connect(timeout(t, long), address(t, p))
	ok(t, err)
	ok(t, peer.Close())
	pl := plan(t, d)
	post := func(params pdkv.TransferParams, want error) {
		t.Helper()
		tr, err := d.Agent.Post(bg(), params)
		if err == nil {
			_ = tr.Close()
		}
		isErr(t, err, want)
	}
	post(read(pl, ""), pdkv.ErrInvalidArgument)
	post(read(pl, strings.Repeat("x", 1025)), pdkv.ErrInvalidArgument)
	bad := read(pl, "r")
	bad.Op = 5
	post(bad, pdkv.ErrInvalidArgument)
	bad = read(pl, "r")
	bad.PeerEngineID = "other-engine" // the plan names its P engine: another one is refused
	post(bad, pdkv.ErrInvalidArgument)
	bad = read(pl, "r")
	bad.Timeout = -time.Second
	post(bad, pdkv.ErrInvalidArgument)
	bad = read(nil, "r")
	post(bad, pdkv.ErrNullPointer)
	ctx, cancel := context.WithCancel(bg())
	cancel()
	_, err = d.Agent.Post(ctx, read(pl, "r"))
	isErr(t, err, pdkv.ErrCancelled, context.Canceled)
}

func TestHandlesOutliveTheAgent(t *testing.T) {
	p := newNode(t, true, xfer.Options{})
	d := newNode(t, false, xfer.Options{})
	peer, err := d.Agent.Connect(timeout(t, long), address(t, p))
	ok(t, err)
	defer peer.Close()
	pl := plan(t, d)
	tr, err := d.Agent.Post(bg(), read(pl, "r"))
	ok(t, err)
	defer tr.Close()
	ok(t, tr.Wait(timeout(t, long)))
	ok(t, d.Agent.Close())
	ti, err := tr.Info()
	ok(t, err)
	if ti.State != pdkv.TransferDone {
		t.Fatalf("state after agent close: %v", ti.State)
	}
	pi, err := peer.Info()
	ok(t, err)
	if pi.Connected {
		t.Fatal("peer of a closed agent still connected")
	}
	_, err = xfer.Verify(pl, d.Buffers)
	ok(t, err)
}

func TestNoGoroutineLeftAfterClose(t *testing.T) {
	settle := func() int {
		runtime.GC()
		time.Sleep(20 * time.Millisecond)
		return runtime.NumGoroutine()
	}
	before := settle()
	func() {
		m, err := xfer.Model()
		ok(t, err)
		defer m.Close()
		p, err := xfer.NewNode(m, true, xfer.Options{})
		ok(t, err)
		defer p.Close()
		d, err := xfer.NewNode(m, false, xfer.Options{})
		ok(t, err)
		defer d.Close()
		addr, err := p.Address()
		ok(t, err)
		ctx, cancel := context.WithCancel(bg())
		defer cancel()
		peer, err := d.Agent.Connect(ctx, addr) // a cancellable connect runs in a goroutine
		ok(t, err)
		defer peer.Close()
		pl, err := xfer.PlanFromPeer(d)
		ok(t, err)
		defer pl.Close()
		for i := 0; i < 4; i++ {
			// Transfers posted with a cancellable context have a watcher goroutine: some are
			// waited for, some only closed, one is left to the agent's Close.
			tr, err := d.Agent.Post(ctx, read(pl, fmt.Sprintf("g-%d", i)))
			ok(t, err)
			if i%2 == 0 {
				ok(t, tr.Wait(ctx))
			}
			if i < 3 {
				ok(t, tr.Close())
			}
		}
		_, err = p.Agent.WaitNotification(timeout(t, long), func(n pdkv.Notification) bool { return n.Kind == pdkv.NotifyReadDone })
		ok(t, err)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		after := settle()
		if after <= before {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("%d goroutines before, %d after every Close:\n%s", before, after, buf)
		}
	}
}
