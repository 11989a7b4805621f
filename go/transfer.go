package pdkv

/*
#include <pdkv.h>
*/
import "C"

import (
	"context"
	"math"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// TransferOp is the direction of a transfer (pdkv_transfer_op_t).
type TransferOp int32

// Transfer directions.
const (
	// TransferRead is posted by the D rank the plan was compiled for: D pulls from P.
	TransferRead TransferOp = C.PDKV_TRANSFER_READ
	// TransferWrite is posted by a P rank with the same plan: it pushes its reads into D.
	TransferWrite TransferOp = C.PDKV_TRANSFER_WRITE
)

// TransferState is the state of a transfer (pdkv_transfer_state_t).
type TransferState int32

// Transfer states.
const (
	TransferInFlight TransferState = C.PDKV_TRANSFER_IN_FLIGHT
	TransferDone     TransferState = C.PDKV_TRANSFER_DONE
	TransferFailed   TransferState = C.PDKV_TRANSFER_FAILED
)

// TransferParams say what Agent.Post executes.
type TransferParams struct {
	Op   TransferOp
	Plan *TransferPlan // required (copied by the library)
	// PeerEngineID is the P engine for a read, the D engine for a write.
	PeerEngineID string
	// RequestID is non-empty, at most 1024 bytes, and travels in notifications.
	RequestID string
	// Timeout bounds the transfer (0: the context's deadline, else the agent's default; with
	// both, the shorter).
	Timeout time.Duration
	// NoNotify skips notifying the plan's peers after the data (they are notified by default).
	NoNotify bool
	// NoLeaseConfirm (since 2.7): a read is done when its data lands and a write starts at once,
	// without each peer rank first confirming its lease of RequestID is open (one control round
	// trip sooner). By default a transfer of an ended lease fails with ErrTimedOut or
	// ErrIncompatible instead (a write then wrote nothing).
	NoLeaseConfirm bool
}

// TransferInfo is a transfer's progress.
type TransferInfo struct {
	State TransferState
	// Status is StatusOK, or why the transfer failed.
	Status                          Status
	BytesTotal, BytesDone           uint64
	OperationsTotal, OperationsDone uint64
	// ReadsFailed counts plan reads that did not complete.
	ReadsFailed uint64
	// Elapsed is the time from post to the final state (or now).
	Elapsed time.Duration
}

// FailedRead is one plan read that did not complete.
type FailedRead struct {
	// PTpRank is the P rank whose read list holds it; ReadIndex its index in
	// TransferPlan.RankReads(PTpRank).
	PTpRank   uint32
	ReadIndex uint64
	Status    Status
}

// waitSlice bounds each blocking C wait, so that Close (which cancels, then waits for calls in
// flight) and context cancellation are noticed within this time.
const waitSlice = 20 * time.Millisecond

// Transfer is one posted transfer. Close cancels a transfer still in flight and frees it;
// wait for it first to let it finish.
type Transfer struct {
	h        handle[C.pdkv_transfer_t]
	stopOnce sync.Once
	// stop ends the context watcher of a transfer posted with a cancellable context: closed
	// once Wait or Info sees the final state, or by Close. Until then (or until the watcher
	// sees the final state itself) the watcher keeps the Transfer reachable, as a goroutine
	// tied to a context does.
	stop chan struct{}
}

func (t *Transfer) stopWatcher() { t.stopOnce.Do(func() { close(t.stop) }) }

// transferWatchers counts the context watchers running (tests read it).
var transferWatchers atomic.Int64

// Post posts a transfer and returns at once. ctx's deadline becomes the transfer's deadline
// (with Timeout, the shorter); cancelling ctx cancels the transfer (it then fails with
// ErrCancelled): a goroutine watches ctx until the transfer is final (it learns of that from
// the transfer's done fd through the runtime's poller, so it costs no thread and no timer),
// closed, or ctx ends. Errors: ErrInvalidArgument (op, empty or long request id, a plan for another
// rank: names both), ErrNotFound (a peer rank the plan needs is not connected), ErrOutOfBounds
// (a range outside the registrations: names the read, side, region and range), ErrShutdown,
// ErrCancelled / ErrTimedOut wrapping ctx.Err() for a context already done, ErrClosed.
func (a *Agent) Post(ctx context.Context, params TransferParams) (*Transfer, error) {
	p, err := a.ref().acquire()
	if err != nil {
		return nil, err
	}
	defer a.h.release()
	pp, err := params.Plan.ref().acquireArg("params.Plan")
	if err != nil {
		return nil, err
	}
	defer params.Plan.h.release()
	ms, _, err := ctxTimeout(ctx, "transfer "+params.RequestID, params.Timeout)
	if err != nil {
		return nil, err
	}
	var arena cArena
	defer arena.free()
	peer, err := arena.str("params.PeerEngineID", params.PeerEngineID)
	if err != nil {
		return nil, err
	}
	req, err := arena.str("params.RequestID", params.RequestID)
	if err != nil {
		return nil, err
	}
	var cp C.pdkv_transfer_params_t
	cp.struct_size = C.size_t(unsafe.Sizeof(cp))
	mask := uint64(0)
	if ms > 0 {
		mask |= fieldXferTimeout
		cp.timeout_ms = C.uint64_t(ms)
	}
	if params.NoNotify {
		mask |= fieldXferNotify
		cp.notify = 0
	}
	if params.NoLeaseConfirm {
		mask |= fieldXferConfirm
		cp.confirm_lease = 0
	}
	cp.field_mask = C.uint64_t(mask)
	cp.op = C.int32_t(params.Op)
	cp.plan = pp
	cp.peer_engine_id = peer
	cp.request_id = req
	var out *C.pdkv_transfer_t
	var cerr *C.pdkv_error_t
	st := C.pdkv_agent_post(p, &cp, &out, &cerr)
	runtime.KeepAlive(a)
	runtime.KeepAlive(params.Plan)
	if err := check(st, cerr); err != nil {
		return nil, err
	}
	t := &Transfer{stop: make(chan struct{})}
	t.h = handle[C.pdkv_transfer_t]{ptr: out, free: func(p *C.pdkv_transfer_t) { C.pdkv_transfer_free(p) }}
	runtime.SetFinalizer(t, func(t *Transfer) { _ = t.Close() })
	if done := ctx.Done(); done != nil {
		transferWatchers.Add(1)
		go func() {
			defer transferWatchers.Add(-1)
			// The watcher returns once the transfer is final (else a transfer that nobody waits
			// for, asks about or closes kept this goroutine, and the Transfer it holds, until ctx
			// ended: never, for one that is never cancelled). It learns of it from the
			// transfer's done fd through the runtime's poller, without a thread or a timer;
			// where no descriptor can be had it looks (after 1 ms, then at doubling intervals up
			// to watchMaxLook).
			finalCh, stopDone := t.watchDoneFD()
			defer stopDone()
			if finalCh != nil {
				t.watchOnce(ctx, done, ms, finalCh, nil)
				return
			}
			look := time.Millisecond
			timer := time.NewTimer(look)
			defer timer.Stop()
			for !t.watchOnce(ctx, done, ms, nil, timer.C) {
				if look < watchMaxLook {
					look *= 2
				}
				timer.Reset(look)
			}
		}()
	}
	return t, nil
}

// watchOnce waits for one event of Post's watcher: ctx done (a cancellation is forwarded to the
// transfer), Close, the final state (finalCh closed), or a tick after which the transfer is
// final. True when the watcher is done.
func (t *Transfer) watchOnce(ctx context.Context, done <-chan struct{}, ms uint64, finalCh <-chan struct{}, tick <-chan time.Time) bool {
	select {
	case <-done:
		// The context's deadline is the library's own (ctxTimeout put it into timeout_ms): the
		// library ends the transfer there as TIMED_OUT. Cancelling here too would race it and
		// could report a deadline as CANCELLED; only a cancellation is forwarded.
		if ms > 0 && ctx.Err() == context.DeadlineExceeded {
			return true
		}
		if tp, err := t.h.acquire(); err == nil {
			C.pdkv_transfer_cancel(tp, nil)
			t.h.release()
		}
		return true
	case <-t.stop:
		return true
	case <-finalCh:
		return true
	case <-tick:
		watchLooks.Add(1)
		return t.final()
	}
}

// watchDoneFD returns a channel closed once the transfer is final, fed by a goroutine that waits
// for the transfer's done fd (pdkv_transfer_done_fd) to become readable in the runtime's poller
// (a duplicate of it: the library owns the original; nothing reads it, which the library's
// waits rely on), and a stop function that ends that goroutine and waits for it. nil when no
// descriptor can be had (the caller then looks at intervals).
func (t *Transfer) watchDoneFD() (<-chan struct{}, func()) {
	if watchByLooking.Load() {
		return nil, func() {}
	}
	fd, err := t.DoneFD()
	if err != nil {
		return nil, func() {}
	}
	dup, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_DUPFD_CLOEXEC, 0)
	if errno != 0 {
		return nil, func() {}
	}
	f := os.NewFile(dup, "pdkv-transfer-done") // non-blocking: the runtime's poller watches it
	rc, err := f.SyscallConn()
	if err != nil {
		_ = f.Close()
		return nil, func() {}
	}
	finalCh := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		// Called at once, then each time the poller reports the descriptor readable; returns
		// (ends the wait) once the transfer is final or closed, or with an error once f is closed.
		if rc.Read(func(uintptr) bool { watchLooks.Add(1); return t.final() }) == nil {
			close(finalCh)
		}
	}()
	return finalCh, func() {
		_ = f.Close() // ends a wait still in the poller
		<-exited
	}
}

// watchMaxLook bounds the interval at which Post's context watcher looks whether its
// transfer is final when it has no done fd to watch.
const watchMaxLook = 100 * time.Millisecond

// watchByLooking makes Post's watchers look at intervals as they do without a done fd (tests).
var watchByLooking atomic.Bool

// watchLooks counts the times Post's context watchers looked at a transfer's state (tests read
// it: with the done fd, a watcher looks once, and once more when the transfer is final).
var watchLooks atomic.Int64

// final reports whether the transfer is in its final state, or closed (for Post's watcher).
func (t *Transfer) final() bool {
	p, err := t.h.acquire()
	if err != nil {
		return true
	}
	defer t.h.release()
	var ci C.pdkv_transfer_info_t
	ci.struct_size = C.size_t(unsafe.Sizeof(ci))
	if C.pdkv_transfer_get_info(p, &ci, nil) != C.PDKV_OK {
		return false
	}
	return TransferState(ci.state) != TransferInFlight
}

// Close cancels the transfer if it is still in flight and frees it (the library releases its
// resources when its last operation ends). Idempotent; waits for calls in flight, which end
// within a short slice (Wait notices the close). Close on a nil *Transfer does nothing.
func (t *Transfer) Close() error {
	if t == nil {
		return nil
	}
	t.stopWatcher()
	if p, err := t.h.acquire(); err == nil {
		C.pdkv_transfer_cancel(p, nil) // so that waiters see the end promptly
		t.h.release()
	}
	return closeHandle(t, &t.h)
}

func (t *Transfer) ref() *handle[C.pdkv_transfer_t] {
	if t == nil {
		return nil
	}
	return &t.h
}

// Info returns the transfer's progress (a poll: never blocks).
func (t *Transfer) Info() (TransferInfo, error) {
	p, err := t.ref().acquire()
	if err != nil {
		return TransferInfo{}, err
	}
	defer t.h.release()
	var ci C.pdkv_transfer_info_t
	ci.struct_size = C.size_t(unsafe.Sizeof(ci))
	var cerr *C.pdkv_error_t
	if err := check(C.pdkv_transfer_get_info(p, &ci, &cerr), cerr); err != nil {
		return TransferInfo{}, err
	}
	info := TransferInfo{
		State: TransferState(ci.state), Status: Status(ci.status),
		BytesTotal: uint64(ci.bytes_total), BytesDone: uint64(ci.bytes_done),
		OperationsTotal: uint64(ci.operations_total), OperationsDone: uint64(ci.operations_done),
		ReadsFailed: uint64(ci.reads_failed), Elapsed: time.Duration(ci.elapsed_us) * time.Microsecond,
	}
	if info.State != TransferInFlight {
		t.stopWatcher()
	}
	return info, nil
}

// Wait waits for the final state: nil when the transfer is done, its failure (*Error: ErrTimedOut,
// ErrCancelled, ErrPeerLost, ErrShutdown..., naming the reads and peers) when it failed, or
// ctx.Err() when ctx ends first (the transfer goes on). Several goroutines may wait on one
// transfer. With ProgressCaller the wait drives the agent's progress itself.
func (t *Transfer) Wait(ctx context.Context) error {
	if _, err := t.ref().acquire(); err != nil {
		return err
	}
	t.h.release()
	for {
		slice := waitSlice
		if dl, ok := ctx.Deadline(); ok {
			if left := time.Until(dl); left < slice {
				slice = left
			}
		}
		if slice < 0 {
			slice = 0
		}
		finished, err := t.waitOnce(slice)
		if finished || err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// waitOnce is one bounded C wait.
func (t *Transfer) waitOnce(d time.Duration) (bool, error) {
	p, err := t.ref().acquire()
	if err != nil {
		return false, err
	}
	defer t.h.release()
	ms, err := millis("wait", d, math.MaxUint64-1)
	if err != nil {
		return false, err
	}
	var finished C.uint8_t
	var cerr *C.pdkv_error_t
	err = check(C.pdkv_transfer_wait(p, C.uint64_t(ms), &finished, &cerr), cerr)
	if finished != 0 {
		t.stopWatcher()
		return true, err
	}
	return false, err
}

// Cancel asks the transfer to stop: nothing more is posted and it fails with ErrCancelled
// once the operations in flight complete (bounded by its deadline; a WRITE flushes first).
// No effect once finished.
func (t *Transfer) Cancel() error {
	p, err := t.ref().acquire()
	if err != nil {
		return err
	}
	defer t.h.release()
	var cerr *C.pdkv_error_t
	return check(C.pdkv_transfer_cancel(p, &cerr), cerr)
}

// DoneFD returns a descriptor that becomes readable once the transfer is final and stays
// readable (pdkv_transfer_done_fd, since 2.5), for an event loop of the caller's own (poll,
// epoll). Poll it only: never read or close it; it is valid until the transfer is closed. In
// ProgressCaller mode someone must still call Agent.Progress for the transfer to move. On error
// the descriptor is 0 (not valid: check the error).
func (t *Transfer) DoneFD() (int, error) {
	p, err := t.ref().acquire()
	if err != nil {
		return 0, err
	}
	defer t.h.release()
	var fd C.int
	var cerr *C.pdkv_error_t
	if err := check(C.pdkv_transfer_done_fd(p, &fd, &cerr), cerr); err != nil {
		return 0, err
	}
	return int(fd), nil
}

// FailedReads returns the reads that did not complete, by P rank then index (empty while in
// flight or when done).
func (t *Transfer) FailedReads() ([]FailedRead, error) {
	p, err := t.ref().acquire()
	if err != nil {
		return nil, err
	}
	defer t.h.release()
	var reads *C.pdkv_failed_read_t
	var n C.size_t
	var cerr *C.pdkv_error_t
	if err := check(C.pdkv_transfer_failed_reads(p, &reads, &n, &cerr), cerr); err != nil {
		return nil, err
	}
	out := make([]FailedRead, int(n))
	if n > 0 {
		for i, r := range unsafe.Slice(reads, int(n)) {
			out[i] = FailedRead{PTpRank: uint32(r.p_tp_rank), ReadIndex: uint64(r.read_index), Status: Status(r.status)}
		}
	}
	return out, nil
}
