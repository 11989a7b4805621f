package pdkv

/*
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <pdkv.h>

// Sleeps until fd or wake is readable or ms milliseconds pass (ms < 0: no limit). Returns a
// mask: 1 fd is ready, 2 wake is; 0 neither (timed out, or a signal interrupted the sleep: the
// caller looks again); -1 with errno on failure.
static int go_wait_readable(int fd, int wake, int ms) {
  struct pollfd p[2] = {{fd, POLLIN, 0}, {wake, POLLIN, 0}};
  int r = poll(p, 2, ms);
  if (r < 0) return errno == EINTR ? 0 : -1;
  return (p[0].revents ? 1 : 0) | (p[1].revents ? 2 : 0);
}

// The wake descriptor of an Agent: a non-blocking eventfd (-1 with errno on failure).
static int go_wake_new(void) { return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }

// Makes wake readable (until drained).
static void go_wake_signal(int wake) {
  uint64_t one = 1;
  while (write(wake, &one, sizeof one) < 0 && errno == EINTR) {
  }
}

// Makes wake unreadable again.
static void go_wake_drain(int wake) {
  uint64_t n;
  while (read(wake, &n, sizeof n) < 0 && errno == EINTR) {
  }
}
*/
import "C"

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// The transfer executor (pdkv/agent.h): one Agent per engine rank, its memory registrations
// (memory.go), peers, transfers (transfer.go), notifications and leases.
//
// Every call of the executor may run from any goroutine, concurrently with any other (the C
// header documents them thread-safe). Close of each handle is idempotent and waits for the
// calls in flight on that handle; a Transfer's Wait runs in short slices so that Close never
// waits for the network. Deadlines come from a context.Context (its deadline becomes the C
// call's timeout, its cancellation cancels the operation) or from time.Duration fields,
// rounded up to whole milliseconds; negative durations are ErrInvalidArgument.

// Transport says how an agent moves a peer's bytes (pdkv_transport_t).
type Transport int32

// Transports.
const (
	// TransportAuto is cross-memory attach for a peer on the same host that both sides can
	// attach to, TCP otherwise.
	TransportAuto Transport = C.PDKV_TRANSPORT_AUTO
	// TransportSHM is cross-memory attach (process_vm_readv/writev, one host; the connect fails
	// with StatusTransport where the two processes cannot attach to each other).
	TransportSHM Transport = C.PDKV_TRANSPORT_SHM
	// TransportTCP is pdkv's TCP data connection (sealed with a pre-shared key unless
	// AgentOptions.SealData is false).
	TransportTCP Transport = C.PDKV_TRANSPORT_TCP
)

// The control protocol this build speaks to its peers (pdkv.h PDKV_CONTROL_PROTOCOL_*): pdkv
// 2.7 speaks 3.5. AgentOptions.MinPeerProtocolMinor may be at most ControlProtocolMinor.
const (
	ControlProtocolMajor uint16 = C.PDKV_CONTROL_PROTOCOL_MAJOR
	ControlProtocolMinor uint16 = C.PDKV_CONTROL_PROTOCOL_MINOR
)

// ProgressMode says who drives UCX progress (pdkv_progress_mode_t).
type ProgressMode int32

// Progress modes.
const (
	// ProgressThread: a background thread of the agent (the default).
	ProgressThread ProgressMode = C.PDKV_PROGRESS_THREAD
	// ProgressCaller: the caller calls Agent.Progress (e.g. when Agent.EventFD is readable).
	ProgressCaller ProgressMode = C.PDKV_PROGRESS_CALLER
)

// NotificationKind is the kind of a notification (pdkv_notification_kind_t).
type NotificationKind int32

// Notification kinds.
const (
	// NotifyReadDone (on P): a D rank finished reading a request from this rank.
	NotifyReadDone NotificationKind = C.PDKV_NOTIFY_READ_DONE
	// NotifyWriteDone (on D): a P rank finished writing a request into this rank.
	NotifyWriteDone NotificationKind = C.PDKV_NOTIFY_WRITE_DONE
	// NotifyRequestComplete: a leased request received its expected count.
	NotifyRequestComplete NotificationKind = C.PDKV_NOTIFY_REQUEST_COMPLETE
	// NotifyLeaseExpired: a lease's time ran out before its count was reached.
	NotifyLeaseExpired NotificationKind = C.PDKV_NOTIFY_LEASE_EXPIRED
	// NotifyPeerConnected: a peer completed the handshake (either direction).
	NotifyPeerConnected NotificationKind = C.PDKV_NOTIFY_PEER_CONNECTED
	// NotifyPeerLost: a peer died, closed, failed heartbeats or misbehaved.
	NotifyPeerLost NotificationKind = C.PDKV_NOTIFY_PEER_LOST
)

// Field bits of the options structs (PDKV_*_FIELD_*).
const (
	fieldListenAddress  = uint64(C.PDKV_AGENT_FIELD_LISTEN_ADDRESS)
	fieldTransport      = uint64(C.PDKV_AGENT_FIELD_TRANSPORT)
	fieldProgressMode   = uint64(C.PDKV_AGENT_FIELD_PROGRESS_MODE)
	fieldDefaultTimeout = uint64(C.PDKV_AGENT_FIELD_DEFAULT_TIMEOUT)
	fieldPresharedKey   = uint64(C.PDKV_AGENT_FIELD_PRESHARED_KEY)
	fieldHeartbeat      = uint64(C.PDKV_AGENT_FIELD_HEARTBEAT)
	fieldMaxOutstanding = uint64(C.PDKV_AGENT_FIELD_MAX_OUTSTANDING)
	fieldCopyThreads    = uint64(C.PDKV_AGENT_FIELD_COPY_THREADS)
	fieldSealData       = uint64(C.PDKV_AGENT_FIELD_SEAL_DATA)
	fieldMinPeerMinor   = uint64(C.PDKV_AGENT_FIELD_MIN_PEER_PROTOCOL_MINOR)
	fieldMemoryType     = uint64(C.PDKV_MEMORY_FIELD_MEMORY_TYPE)
	fieldMemoryDevice   = uint64(C.PDKV_MEMORY_FIELD_DEVICE)
	fieldConnectTimeout = uint64(C.PDKV_CONNECT_FIELD_TIMEOUT)
	fieldXferTimeout    = uint64(C.PDKV_TRANSFER_FIELD_TIMEOUT)
	fieldXferNotify     = uint64(C.PDKV_TRANSFER_FIELD_NOTIFY)
	fieldXferConfirm    = uint64(C.PDKV_TRANSFER_FIELD_CONFIRM_LEASE)
)

// millis converts d to whole milliseconds, rounded up so a deadline never expires earlier than
// asked. Negative durations are ErrInvalidArgument naming what; zero gives 0 (the caller
// decides what 0 means); values above max are ErrInvalidArgument.
func millis(what string, d time.Duration, max uint64) (uint64, error) {
	if d < 0 {
		return 0, goErr(StatusInvalidArgument, "%s = %v is negative", what, d)
	}
	ms := uint64(d / time.Millisecond)
	if d%time.Millisecond != 0 {
		ms++
	}
	if ms > max {
		return 0, goErr(StatusInvalidArgument, "%s = %v is longer than the %d ms the C field holds", what, d, max)
	}
	return ms, nil
}

// ctxTimeout is the C timeout for a call under ctx: the time left until ctx's deadline
// (rounded up, at least 1 ms) combined with explicit (0: none) by taking the shorter; 0 when
// neither is set (the agent's default). fromCtx says the context's deadline set it. A ctx
// already done gives its error.
func ctxTimeout(ctx context.Context, what string, explicit time.Duration) (ms uint64, fromCtx bool, err error) {
	if ctx.Err() != nil {
		return 0, false, ctxErr(ctx, what)
	}
	if explicit < 0 {
		return 0, false, goErr(StatusInvalidArgument, "%s = %v is negative", what, explicit)
	}
	d := explicit
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		if left <= 0 {
			return 0, false, ctxErr(ctx, what)
		}
		if d == 0 || left < d {
			d, fromCtx = left, true
		}
	}
	ms, err = millis(what, d, math.MaxUint64)
	return ms, fromCtx, err
}

// ctxErr is the *Error of a call whose context ended: ErrTimedOut for an expired deadline,
// ErrCancelled otherwise, wrapping ctx.Err() (errors.Is matches both).
func ctxErr(ctx context.Context, what string) error {
	cause := ctx.Err()
	if cause == nil {
		cause = context.Canceled
	}
	st := StatusCancelled
	if cause == context.DeadlineExceeded {
		st = StatusTimedOut
	}
	return &Error{Status: st, Message: what + ": " + cause.Error(), wrapped: cause}
}

// withCtx makes a library timeout whose deadline came from the context (fromCtx) also match
// context.DeadlineExceeded: the library and the context measure the same deadline, and
// whichever notices first, the caller sees one kind of error.
func withCtx(err error, fromCtx bool) error {
	if e, ok := err.(*Error); ok && fromCtx && e.wrapped == nil && e.Status == StatusTimedOut {
		e.wrapped = context.DeadlineExceeded
	}
	return err
}

// AgentOptions configure NewAgent. Zero values take the library's defaults.
type AgentOptions struct {
	// Metadata is this rank's metadata (required; copied).
	Metadata *EngineMetadata
	// ListenAddress is the control listener "host:port" (port 0: a free port). "": 127.0.0.1:0.
	ListenAddress string
	// Transport is the data transport (default TransportAuto).
	Transport Transport
	// ProgressMode says who drives progress (default ProgressThread).
	ProgressMode ProgressMode
	// DefaultTimeout is the deadline of connects and transfers without one (0: 30 s).
	DefaultTimeout time.Duration
	// PresharedKey is the key both sides must hold (>= 16 bytes; nil: none).
	PresharedKey []byte
	// HeartbeatInterval is the ping period per peer (0: 500 ms); HeartbeatTimeout the silence
	// after which a peer is lost (0: 5 s), on its control channel or on a tcp data connection
	// with work pending (a caller-progress agent must call Progress at least this often while a
	// transfer moves). Setting either sets both (the other at its default).
	HeartbeatInterval, HeartbeatTimeout time.Duration
	// MaxOutstanding is the most operations (plan reads) in flight per peer, across all
	// transfers with that peer, which take turns (0: 64); see
	// pdkv_agent_options_t.max_outstanding.
	MaxOutstanding uint32
	// CopyThreads is how many threads copy each shm batch, 1 to 16 (0: 2 where the machine
	// has 4+ hardware threads, else 1); see pdkv_agent_options_t.copy_threads.
	CopyThreads uint32
	// SealData says whether, with a PresharedKey, the TCP data connections are sealed
	// (AES-256-GCM; pdkv_agent_options_t.seal_data): nil is the default (sealed with a key),
	// pdkv.Ptr(false) sends them in clear (trusted fabrics only). Both agents of a pair must
	// agree (a mismatch is ErrAuth at connect); pdkv.Ptr(true) without a key is refused.
	SealData *bool
	// MinPeerProtocolMinor (since 2.7) refuses peers running an older control protocol minor
	// at connect (ErrIncompatible naming both versions); 0: any. 5 guarantees every transfer
	// asks the other side about its lease; above this build's minor is refused.
	MinPeerProtocolMinor uint16
}

// Format prints the options as fmt prints a struct (%v, %+v, %#v, %s), except that the
// pre-shared key shows only its length: options logged with fmt never reveal the key.
func (o AgentOptions) Format(f fmt.State, verb rune) {
	// The same fields, the key replaced by its length (a local type: %#v names it pdkv.AgentOptions).
	type AgentOptions struct {
		Metadata                            *EngineMetadata
		ListenAddress                       string
		Transport                           Transport
		ProgressMode                        ProgressMode
		DefaultTimeout                      time.Duration
		PresharedKey                        string
		HeartbeatInterval, HeartbeatTimeout time.Duration
		MaxOutstanding                      uint32
		CopyThreads                         uint32
		SealData                            *bool
		MinPeerProtocolMinor                uint16
	}
	key := "<nil>"
	if o.PresharedKey != nil {
		key = fmt.Sprintf("<%d bytes, not shown>", len(o.PresharedKey))
	}
	shown := AgentOptions{o.Metadata, o.ListenAddress, o.Transport, o.ProgressMode, o.DefaultTimeout, key,
		o.HeartbeatInterval, o.HeartbeatTimeout, o.MaxOutstanding, o.CopyThreads, o.SealData, o.MinPeerProtocolMinor}
	format := "%"
	for _, flag := range "+#" {
		if f.Flag(int(flag)) {
			format += string(flag)
		}
	}
	fmt.Fprintf(f, format+string(verb), shown)
}

// AgentInfo holds an agent's scalars.
type AgentInfo struct {
	EngineID          string
	TpRank, TpSize    uint32
	ListenAddress     string // "host:port" actually bound
	Port              uint16
	Transport         Transport
	ProgressMode      ProgressMode
	NumPeers          int
	TransfersInFlight int
	CopyThreads       uint32 // threads copying each shm batch (the option or its default)
}

// Agent is one engine rank's executor: UCX context and worker, control listener, peers.
// Close shuts it down (transfers in flight fail with ErrShutdown, peers are told goodbye);
// peers, registrations and transfers taken from it stay usable and report that state.
type Agent struct {
	h    handle[C.pdkv_agent_t]
	pins *pinList // buffers registered with this agent, pinned until it is freed

	// pending holds notifications taken from the library but not yet returned:
	// WaitNotification keeps those that did not match here, so nothing is lost. queued counts
	// the notifications ever added to it (each entry's id is its number).
	pendingMu sync.Mutex
	pending   []queued
	queued    uint64
	// leading is true while a WaitNotification sleeps on the event fd (for the sleep only); the
	// other waiters wait for wake, which is closed (and replaced) whenever notifications come
	// into pending or the waiter that last slept on the fd returns. Both guarded by pendingMu.
	leading bool
	wake    chan struct{}
	// wakeFD is an eventfd the leader polls with the event fd, so that it sleeps without a
	// timeout yet wakes at once for Close (which writes it and sets closing; never drained
	// after that, so every later poll returns at once) or for its ctx (its watcher goroutine
	// writes it; the leader drains that). It stays open while any WaitNotification counted in
	// waiters runs: Close closes it when none does, else the last one to return; the finalizer
	// when the agent is collected unclosed. -1 once closed. All guarded by pendingMu.
	wakeFD  C.int
	closing bool
	waiters int
	// waitProgress counts the Progress calls WaitNotification made, waitPolls its polls of the
	// event fd (tests read them).
	waitProgress atomic.Uint64
	waitPolls    atomic.Uint64
	// afterPoll and beforePoll, when set (by tests, before any wait), run after and before
	// each poll of the event fd.
	afterPoll, beforePoll func()
}

// pinList holds the HostBuffers registered with one agent. It is separate from the Agent so
// that the free function can release them without referring to the Agent (which would make
// the Agent reachable from itself and keep its finalizer from ever running).
type pinList struct {
	mu   sync.Mutex
	bufs map[*HostBuffer]struct{}
}

// add keeps b, pinned by the caller, pinned until the agent is freed. A buffer registered
// again (after its registration was closed) keeps its one entry and one pin: an entry and a pin
// per registration grew the list with every register/close cycle of an engine that registers
// per request, and made Free's error count registrations as agents.
func (l *pinList) add(b *HostBuffer) {
	l.mu.Lock()
	_, again := l.bufs[b]
	if !again {
		if l.bufs == nil {
			l.bufs = map[*HostBuffer]struct{}{}
		}
		l.bufs[b] = struct{}{}
	}
	l.mu.Unlock()
	if again {
		b.unpin() // the caller's pin: the entry's pin already keeps it
	}
}

// releaseAll unpins every buffer (the agent is freed: nothing of it touches them any more).
func (l *pinList) releaseAll() {
	l.mu.Lock()
	bufs := l.bufs
	l.bufs = nil
	l.mu.Unlock()
	for b := range bufs {
		b.unpin()
	}
}

// NewAgent creates an agent; its control listener is bound before it returns. Errors:
// ErrInvalidArgument (unknown enum values, bad address, short key, heartbeat timeout not above
// the interval; names the field), ErrIO (the address cannot be bound), ErrTransport, ErrClosed.
func NewAgent(opts AgentOptions) (*Agent, error) {
	mp, err := opts.Metadata.ref().acquireArg("opts.Metadata")
	if err != nil {
		return nil, err
	}
	defer opts.Metadata.h.release()
	var a cArena
	defer a.free()
	var co C.pdkv_agent_options_t
	co.struct_size = C.size_t(unsafe.Sizeof(co))
	co.metadata = mp
	mask := uint64(0)
	if opts.ListenAddress != "" {
		s, err := a.str("opts.ListenAddress", opts.ListenAddress)
		if err != nil {
			return nil, err
		}
		co.listen_address = s
		mask |= fieldListenAddress
	}
	if opts.Transport != TransportAuto {
		co.transport = C.int32_t(opts.Transport)
		mask |= fieldTransport
	}
	if opts.ProgressMode != ProgressThread {
		co.progress_mode = C.int32_t(opts.ProgressMode)
		mask |= fieldProgressMode
	}
	if opts.DefaultTimeout != 0 {
		ms, err := millis("opts.DefaultTimeout", opts.DefaultTimeout, math.MaxUint64)
		if err != nil {
			return nil, err
		}
		co.default_timeout_ms = C.uint64_t(ms)
		mask |= fieldDefaultTimeout
	}
	if opts.PresharedKey != nil {
		if len(opts.PresharedKey) > 0 {
			co.preshared_key = (*C.uint8_t)(a.secret(opts.PresharedKey))
		}
		co.preshared_key_len = C.size_t(len(opts.PresharedKey))
		mask |= fieldPresharedKey
	}
	if opts.HeartbeatInterval != 0 || opts.HeartbeatTimeout != 0 {
		iv, to := opts.HeartbeatInterval, opts.HeartbeatTimeout
		if iv == 0 {
			iv = 500 * time.Millisecond
		}
		if to == 0 {
			to = 5 * time.Second
		}
		ivms, err := millis("opts.HeartbeatInterval", iv, math.MaxUint32)
		if err != nil {
			return nil, err
		}
		toms, err := millis("opts.HeartbeatTimeout", to, math.MaxUint32)
		if err != nil {
			return nil, err
		}
		co.heartbeat_interval_ms = C.uint32_t(ivms)
		co.heartbeat_timeout_ms = C.uint32_t(toms)
		mask |= fieldHeartbeat
	}
	if opts.MaxOutstanding != 0 {
		co.max_outstanding = C.uint32_t(opts.MaxOutstanding)
		mask |= fieldMaxOutstanding
	}
	if opts.CopyThreads != 0 {
		co.copy_threads = C.uint32_t(opts.CopyThreads)
		mask |= fieldCopyThreads
	}
	if opts.SealData != nil {
		co.seal_data = 0
		if *opts.SealData {
			co.seal_data = 1
		}
		mask |= fieldSealData
	}
	if opts.MinPeerProtocolMinor != 0 {
		co.min_peer_protocol_minor = C.uint16_t(opts.MinPeerProtocolMinor)
		mask |= fieldMinPeerMinor
	}
	co.field_mask = C.uint64_t(mask)
	var out *C.pdkv_agent_t
	var cerr *C.pdkv_error_t
	st := C.pdkv_agent_new(&co, &out, &cerr)
	runtime.KeepAlive(opts.Metadata)
	if err := check(st, cerr); err != nil {
		return nil, err
	}
	wake, errno := C.go_wake_new()
	if wake < 0 {
		C.pdkv_agent_free(out)
		return nil, goErr(StatusIO, "eventfd for the agent's waits: %v", errno)
	}
	pins := &pinList{}
	ag := &Agent{pins: pins, wakeFD: wake, h: handle[C.pdkv_agent_t]{ptr: out, free: func(p *C.pdkv_agent_t) {
		C.pdkv_agent_free(p)
		pins.releaseAll()
	}}}
	runtime.SetFinalizer(ag, func(ag *Agent) {
		ag.h.close()
		ag.closeWakeLocked() // unreachable: no wait runs, nobody else holds pendingMu
	})
	return ag, nil
}

// Close shuts the agent down and frees it. Idempotent; waits for calls in flight (a Connect
// in progress ends within its deadline) and ends every WaitNotification at once with
// ErrClosed. Close on a nil *Agent does nothing.
func (a *Agent) Close() error {
	if a == nil {
		return nil
	}
	a.pendingMu.Lock()
	if !a.closing && a.wakeFD >= 0 {
		C.go_wake_signal(a.wakeFD) // under pendingMu: no waiter can close it meanwhile
	}
	a.closing = true
	a.pendingMu.Unlock()
	err := closeHandle(a, a.ref())
	a.pendingMu.Lock()
	if a.waiters == 0 {
		a.closeWakeLocked()
	} // else the last waiter closes it
	a.pendingMu.Unlock()
	return err
}

// closeWakeLocked closes wakeFD once (pendingMu held; no WaitNotification runs).
func (a *Agent) closeWakeLocked() {
	if a.wakeFD >= 0 {
		C.close(a.wakeFD)
		a.wakeFD = -1
	}
}

func (a *Agent) ref() *handle[C.pdkv_agent_t] {
	if a == nil {
		return nil
	}
	return &a.h
}

// Info returns the agent's scalars.
func (a *Agent) Info() (AgentInfo, error) {
	p, err := a.ref().acquire()
	if err != nil {
		return AgentInfo{}, err
	}
	defer a.h.release()
	var ci C.pdkv_agent_info_t
	ci.struct_size = C.size_t(unsafe.Sizeof(ci))
	var cerr *C.pdkv_error_t
	if err := check(C.pdkv_agent_get_info(p, &ci, &cerr), cerr); err != nil {
		return AgentInfo{}, err
	}
	return AgentInfo{
		EngineID: C.GoString(ci.engine_id), TpRank: uint32(ci.tp_rank), TpSize: uint32(ci.tp_size),
		ListenAddress: C.GoString(ci.listen_address), Port: uint16(ci.port),
		Transport: Transport(ci.transport), ProgressMode: ProgressMode(ci.progress_mode),
		NumPeers: int(ci.num_peers), TransfersInFlight: int(ci.transfers_in_flight),
		CopyThreads: uint32(ci.copy_threads),
	}, nil
}

// Progress drives UCX progress, deadlines and retries once without blocking and returns the
// completions handled. Needed with ProgressCaller; harmless otherwise.
func (a *Agent) Progress() (uint32, error) {
	p, err := a.ref().acquire()
	if err != nil {
		return 0, err
	}
	defer a.h.release()
	var events C.uint32_t
	var cerr *C.pdkv_error_t
	if err := check(C.pdkv_agent_progress(p, &events, &cerr), cerr); err != nil {
		return 0, err
	}
	return uint32(events), nil
}

// EventFD returns a descriptor that is readable when Progress or PollNotifications has work
// (level-triggered). The agent owns it: never close it. On error the descriptor is 0 (not
// valid: check the error).
func (a *Agent) EventFD() (int, error) {
	p, err := a.ref().acquire()
	if err != nil {
		return 0, err
	}
	defer a.h.release()
	var fd C.int
	var cerr *C.pdkv_error_t
	if err := check(C.pdkv_agent_event_fd(p, &fd, &cerr), cerr); err != nil {
		return 0, err
	}
	return int(fd), nil
}

// Connect connects to the agent at address ("host:port") and runs the handshake. ctx's
// deadline bounds it (none: the agent's default); cancelling ctx returns at once with an error
// matching ErrCancelled and context.Canceled while the attempt finishes in the background
// (bounded by the deadline) and a peer it may still produce is disconnected. Errors:
// ErrInvalidArgument, ErrPeerLost (refused or closed), ErrTimedOut, ErrAuth, ErrProtocol,
// ErrIncompatible, ErrShutdown, ErrTransport, ErrClosed.
func (a *Agent) Connect(ctx context.Context, address string) (*Peer, error) {
	p, err := a.ref().acquire()
	if err != nil {
		return nil, err
	}
	ms, fromCtx, err := ctxTimeout(ctx, "connect "+address, 0)
	if err != nil {
		a.h.release()
		return nil, err
	}
	var arena cArena
	s, err := arena.str("address", address)
	if err != nil {
		a.h.release()
		arena.free()
		return nil, err
	}
	call := func() (*Peer, error) {
		defer a.h.release()
		defer arena.free()
		var co C.pdkv_connect_options_t
		co.struct_size = C.size_t(unsafe.Sizeof(co))
		co.address = s
		if ms > 0 {
			co.field_mask = C.uint64_t(fieldConnectTimeout)
			co.timeout_ms = C.uint64_t(ms)
		}
		var out *C.pdkv_peer_t
		var cerr *C.pdkv_error_t
		st := C.pdkv_agent_connect(p, &co, &out, &cerr)
		runtime.KeepAlive(a)
		if err := check(st, cerr); err != nil {
			return nil, withCtx(err, fromCtx)
		}
		return newPeer(out), nil
	}
	if ctx.Done() == nil {
		return call()
	}
	type result struct {
		peer *Peer
		err  error
	}
	done := make(chan result, 1)
	go func() {
		pe, err := call()
		done <- result{pe, err}
	}()
	select {
	case r := <-done:
		return r.peer, r.err
	case <-ctx.Done():
		go func() { // the handshake ends within its deadline; drop what it produced
			if r := <-done; r.peer != nil {
				_ = r.peer.Disconnect()
				_ = r.peer.Close()
			}
		}()
		return nil, ctxErr(ctx, "connect "+address)
	}
}

// FindPeer returns the connected peer (engineID, tpRank), whichever side connected. Errors:
// ErrNotFound (names the engine and rank), ErrInvalidArgument (the engine is connected as
// several pipeline stages at tpRank: use FindStagePeer), ErrClosed.
func (a *Agent) FindPeer(engineID string, tpRank uint32) (*Peer, error) {
	p, err := a.ref().acquire()
	if err != nil {
		return nil, err
	}
	defer a.h.release()
	var arena cArena
	defer arena.free()
	s, err := arena.str("engineID", engineID)
	if err != nil {
		return nil, err
	}
	var out *C.pdkv_peer_t
	var cerr *C.pdkv_error_t
	if err := check(C.pdkv_agent_find_peer(p, s, C.uint32_t(tpRank), &out, &cerr), cerr); err != nil {
		return nil, err
	}
	return newPeer(out), nil
}

// FindStagePeer returns the connected peer (engineID, pipeline stage ppRank, tpRank). Errors:
// ErrNotFound (names the engine, stage and rank), ErrClosed.
func (a *Agent) FindStagePeer(engineID string, ppRank, tpRank uint32) (*Peer, error) {
	p, err := a.ref().acquire()
	if err != nil {
		return nil, err
	}
	defer a.h.release()
	var arena cArena
	defer arena.free()
	s, err := arena.str("engineID", engineID)
	if err != nil {
		return nil, err
	}
	var out *C.pdkv_peer_t
	var cerr *C.pdkv_error_t
	if err := check(C.pdkv_agent_find_stage_peer(p, s, C.uint32_t(ppRank), C.uint32_t(tpRank), &out, &cerr), cerr); err != nil {
		return nil, err
	}
	return newPeer(out), nil
}

// Lease leases a request's blocks on this rank: after expected successful READ_DONE /
// WRITE_DONE notifications for requestID from distinct ranks of one remote engine (ranks of
// another engine notifying the same id never add up with them) a NotifyRequestComplete follows, or
// NotifyLeaseExpired once ttl passes first. A reader's READ of the request keeps the lease open
// while it reads (2.7). Errors: ErrInvalidArgument (empty or long id,
// expected 0, ttl not positive), ErrShutdown, ErrClosed.
func (a *Agent) Lease(requestID string, expected uint32, ttl time.Duration) error {
	p, err := a.ref().acquire()
	if err != nil {
		return err
	}
	defer a.h.release()
	if ttl <= 0 {
		return goErr(StatusInvalidArgument, "lease ttl = %v: must be positive", ttl)
	}
	ms, err := millis("lease ttl", ttl, math.MaxUint64)
	if err != nil {
		return err
	}
	var arena cArena
	defer arena.free()
	s, err := arena.str("requestID", requestID)
	if err != nil {
		return err
	}
	var cerr *C.pdkv_error_t
	return check(C.pdkv_agent_lease(p, s, C.uint32_t(expected), C.uint64_t(ms), &cerr), cerr)
}

// KeepLeases asks every connected rank of engine peerEngineID (all its pipeline stages) to keep
// its leases of requestIDs open: each such rank moves the deadline of each of those requests it
// leases to at least now + that lease's own ttl; ids it does not lease are ignored there. Call it
// on a reader (D) for requests it will read later, more often than the other side's ttl, as
// vLLM's "HB:" notifications do. It returns once the frames are queued. Errors: ErrNotFound (no
// connected rank of that engine), ErrIncompatible (a rank runs control protocol before 3.4; nothing
// is sent), ErrInvalidArgument (an empty, long or NUL-holding id), ErrShutdown, ErrClosed.
func (a *Agent) KeepLeases(peerEngineID string, requestIDs []string) error {
	p, err := a.ref().acquire()
	if err != nil {
		return err
	}
	defer a.h.release()
	var arena cArena
	defer arena.free()
	engine, err := arena.str("peerEngineID", peerEngineID)
	if err != nil {
		return err
	}
	var ids **C.char
	if len(requestIDs) > 0 {
		ids = (**C.char)(arena.raw(uintptr(len(requestIDs)) * unsafe.Sizeof((*C.char)(nil))))
		slots := unsafe.Slice(ids, len(requestIDs))
		for i, id := range requestIDs {
			if slots[i], err = arena.str(fmt.Sprintf("requestIDs[%d]", i), id); err != nil {
				return err
			}
		}
	}
	var cerr *C.pdkv_error_t
	return check(C.pdkv_agent_keep_leases(p, engine, ids, C.size_t(len(requestIDs)), &cerr), cerr)
}

// Notification is one notification, copied out of the library.
type Notification struct {
	Kind NotificationKind
	// Status is StatusOK, the failure a peer reported, or why a peer was lost.
	Status Status
	// RequestID is "" for peer notifications.
	RequestID string
	// EngineID and TpRank name the remote rank ("" for lease notifications).
	EngineID string
	TpRank   uint32
	// Count is the successful notifications received for the request so far; Expected the
	// lease's expected count (0: no lease).
	Count, Expected uint32
	// Bytes the sender moved for this request.
	Bytes uint64
	// PpRank is the remote rank's pipeline stage (0 without pipeline parallelism).
	PpRank uint32
}

// PollNotifications takes every pending notification, oldest first, including those
// WaitNotification took but did not return.
func (a *Agent) PollNotifications() ([]Notification, error) {
	if _, err := a.ref().acquire(); err != nil {
		return nil, err
	}
	a.h.release()
	a.pendingMu.Lock()
	defer a.pendingMu.Unlock()
	if err := a.takeNotifications(); err != nil {
		return nil, err
	}
	out := make([]Notification, len(a.pending))
	for i, q := range a.pending {
		out[i] = q.n
	}
	a.pending = nil
	return out, nil
}

// queued is a notification in Agent.pending, with an id that names it while a predicate of
// WaitNotification looks at a copy of the queue without pendingMu.
type queued struct {
	id uint64
	n  Notification
}

// takeNotifications appends the library's pending notifications to a.pending (pendingMu held).
func (a *Agent) takeNotifications() error {
	p, err := a.ref().acquire()
	if err != nil {
		return err
	}
	defer a.h.release()
	var list *C.pdkv_notification_list_t
	var cerr *C.pdkv_error_t
	if err := check(C.pdkv_agent_poll_notifications(p, &list, &cerr), cerr); err != nil {
		return err
	}
	defer C.pdkv_notification_list_free(list)
	var items *C.pdkv_notification_t
	var n C.size_t
	if err := check(C.pdkv_notification_list_items(list, &items, &n, &cerr), cerr); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	for _, cn := range unsafe.Slice(items, int(n)) {
		a.queued++
		a.pending = append(a.pending, queued{id: a.queued, n: Notification{
			Kind: NotificationKind(cn.kind), Status: Status(cn.status),
			RequestID: C.GoString(cn.request_id), EngineID: C.GoString(cn.engine_id),
			TpRank: uint32(cn.tp_rank), Count: uint32(cn.count), Expected: uint32(cn.expected),
			Bytes: uint64(cn.bytes), PpRank: uint32(cn.pp_rank),
		}})
	}
	return nil
}

// WaitNotification waits until a notification satisfies match and returns it; the others
// stay pending, in order, for the next poll or wait. It returns ctx.Err() (matching
// context.DeadlineExceeded / context.Canceled) when ctx ends first, and ErrClosed when the
// agent is closed meanwhile. It drives Progress as it waits, so it also serves ProgressCaller
// agents.
//
// It sleeps on the agent's EventFD (poll(2)), so it wakes when a notification arrives or
// Progress has work, not on a timer. Several goroutines may wait at once, with different
// predicates: one of them sleeps on the descriptor and the others on a channel that every take
// of notifications into the shared queue closes. The one on the descriptor polls an eventfd of
// the binding's own with it, which Close writes, and which a goroutine watching ctx writes
// when ctx ends, so an idle wait does not wake until something happens; those on the channel
// return as soon as ctx ends.
//
// match runs without any lock of the agent's held, on a copy of the queue, so it may call this
// agent's PollNotifications, another WaitNotification or Close (this wait then returns
// ErrClosed). A notification it matches is returned only if it is still pending by then (a poll
// or another wait may have taken it meanwhile: the wait looks again), so each is delivered to
// exactly one caller. It may be called more than once on the same notification.
func (a *Agent) WaitNotification(ctx context.Context, match func(Notification) bool) (Notification, error) {
	fd, err := a.EventFD()
	if err != nil {
		return Notification{}, err
	}
	a.pendingMu.Lock()
	if a.closing { // Close began: wakeFD may be gone
		a.pendingMu.Unlock()
		return Notification{}, closedErr("Agent")
	}
	a.waiters++ // wakeFD stays open until this wait returns
	wake := a.wakeFD
	a.pendingMu.Unlock()
	// led: this wait slept on the event fd and has not seen another waiter take that over
	// since; the waiters on the channel may be waiting for it, so it wakes them as it returns.
	led := false
	defer func() {
		a.pendingMu.Lock()
		defer a.pendingMu.Unlock()
		if led {
			a.wakeWaitersLocked() // another waiter takes over the event fd
		}
		a.waiters--
		if a.waiters == 0 && a.closing {
			a.closeWakeLocked() // Close ran meanwhile and left it open for this wait
		}
	}()
	ready := true // drive progress before the next look (first look, or the fd was readable)
	for {
		if ready {
			a.waitProgress.Add(1)
			if _, err := a.Progress(); err != nil {
				return Notification{}, err
			}
		}
		ready = false
		candidates, count, err := a.look()
		if err != nil {
			return Notification{}, err
		}
		// match runs without pendingMu: with it held, a match calling PollNotifications,
		// another WaitNotification or Close on this agent deadlocked.
		var id uint64
		for _, q := range candidates {
			if match(q.n) {
				id = q.id
				break
			}
		}
		if err := ctx.Err(); err != nil {
			return Notification{}, err
		}
		n, found, again, ch, err := a.settle(id, count, &led)
		if err != nil || found {
			return n, err
		}
		if again {
			continue
		}
		if ch != nil {
			select {
			case <-ctx.Done():
				return Notification{}, ctx.Err()
			case <-ch:
			}
			continue
		}
		if ready, err = a.lead(ctx, fd, wake); err != nil {
			return Notification{}, err
		}
	}
}

// lead sleeps on the event fd for WaitNotification, which settle made the leader, until it is
// readable, Close writes wake, or ctx ends, and then gives the role up (the wait looks and runs
// its match without it: a wait in its match may take it). When ctx can end, a goroutine writes
// wake if it does during the sleep; lead stops it (and drains its write) before it gives the
// role up, so one wait's watcher never wakes another's sleep. ready: the event fd is readable.
func (a *Agent) lead(ctx context.Context, fd int, wake C.int) (ready bool, err error) {
	var w *ctxWatch
	defer func() {
		a.pendingMu.Lock()
		defer a.pendingMu.Unlock()
		if w != nil && w.stop() && !a.closing {
			C.go_wake_drain(wake) // its write is not meant for the next leader
		}
		a.leading = false
	}()
	ms := -1 // no deadline: sleep until an event, Close or ctx's cancellation
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		if left <= 0 { // ctx's timer fires any moment now: no poll(0) until then
			<-ctx.Done()
			return false, ctx.Err()
		}
		if left = (left + time.Millisecond - 1) / time.Millisecond; left < math.MaxInt32 {
			ms = int(left)
		}
	}
	if ctx.Done() != nil {
		w = watchCtx(ctx, wake)
	}
	if a.beforePoll != nil {
		a.beforePoll()
	}
	ready, woken, err := a.waitEventFD(fd, wake, ms)
	if err != nil {
		return false, err
	}
	if a.afterPoll != nil {
		a.afterPoll()
	}
	if woken {
		a.pendingMu.Lock()
		closing := a.closing
		a.pendingMu.Unlock()
		if closing {
			return false, closedErr("Agent")
		}
		// Else this sleep's ctx watcher wrote it (nothing else does: only the leader has one):
		// ctx ended, and the deferred stop drains it.
		if err := ctx.Err(); err != nil {
			return false, err
		}
	}
	return ready, nil
}

// ctxWatch is the goroutine a leading WaitNotification starts to write the agent's wakeFD
// when its ctx ends, so that its poll has no timeout to wake for.
type ctxWatch struct {
	quit, done chan struct{}
	fired      bool // wrote the fd; read after done is closed
}

// watchCtx starts a watch of ctx (whose Done channel is not nil) that writes wake.
func watchCtx(ctx context.Context, wake C.int) *ctxWatch {
	w := &ctxWatch{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		select {
		case <-ctx.Done():
			C.go_wake_signal(wake)
			w.fired = true
		case <-w.quit:
		}
	}()
	return w
}

// stop ends the watch and waits until its goroutine has returned (so it never writes the fd
// after this, and none leaks); true when it wrote the fd.
func (w *ctxWatch) stop() bool {
	close(w.quit)
	<-w.done
	return w.fired
}

// look takes the library's notifications into a.pending (waking the other waiters when any
// came) and returns a copy of it for WaitNotification's match, with a.queued. It leaves them
// in the library while another wait sleeps on the event fd: a take here drained the fd under
// that wait, which then slept on with what only it matched in the queue. That wait takes them
// when it wakes (and wakes this one).
func (a *Agent) look() ([]queued, uint64, error) {
	a.pendingMu.Lock()
	defer a.pendingMu.Unlock()
	before := a.queued
	var err error
	if !a.leading {
		err = a.takeNotifications()
	}
	if a.queued != before {
		a.wakeWaitersLocked() // their predicates may match what came
	}
	if err != nil {
		return nil, 0, err
	}
	return append([]queued(nil), a.pending...), a.queued, nil
}

// settle decides, after WaitNotification's match looked at look's copy (count: a.queued then;
// id: the notification it matched, 0 for none), what the wait does: found, it removes and
// returns that notification if it is still pending; again, it looks again at once (the match
// was taken meanwhile, or more came while match ran); else it waits for ch when another waiter
// sleeps on the event fd, or sleeps there itself (ch nil; a.leading and *led set). ErrClosed
// once Close began (the leader must not sleep after Close wrote wakeFD, in case its write was
// drained).
func (a *Agent) settle(id, count uint64, led *bool) (n Notification, found, again bool, ch <-chan struct{}, err error) {
	a.pendingMu.Lock()
	defer a.pendingMu.Unlock()
	if id != 0 {
		for i, q := range a.pending {
			if q.id == id {
				a.pending = append(a.pending[:i], a.pending[i+1:]...)
				return q.n, true, false, nil, nil
			}
		}
	}
	if a.closing {
		return Notification{}, false, false, nil, closedErr("Agent")
	}
	if id != 0 || a.queued != count {
		return Notification{}, false, true, nil, nil
	}
	if a.leading {
		*led = false // the waiter on the fd wakes the channel's waiters as it returns
		if a.wake == nil {
			a.wake = make(chan struct{})
		}
		return Notification{}, false, false, a.wake, nil
	}
	a.leading, *led = true, true
	return Notification{}, false, false, nil, nil
}

// wakeWaitersLocked wakes every WaitNotification waiting on the channel (pendingMu held).
func (a *Agent) wakeWaitersLocked() {
	if a.wake != nil {
		close(a.wake)
		a.wake = nil
	}
}

// waitEventFD sleeps until the event fd or wake is readable or ms milliseconds pass (-1: no
// limit), holding the handle so that Close does not free the event fd meanwhile (Close writes
// wake first). ready: the event fd is readable; woken: wake is. ErrClosed once the agent is
// closed.
func (a *Agent) waitEventFD(fd int, wake C.int, ms int) (ready, woken bool, err error) {
	if _, err := a.ref().acquire(); err != nil {
		return false, false, err
	}
	defer a.h.release()
	a.waitPolls.Add(1)
	r, errno := C.go_wait_readable(C.int(fd), wake, C.int(ms))
	if r < 0 {
		return false, false, goErr(StatusIO, "poll of the agent's event fd %d: %v", fd, errno)
	}
	return r&1 != 0, r&2 != 0, nil
}

// PeerInfo holds a peer's identity, state and counters.
type PeerInfo struct {
	EngineID string
	TpRank   uint32
	// Address is the control connection's remote "ip:port".
	Address string
	// Connected is false once lost or disconnected; Inbound is true when the peer connected
	// to us.
	Connected, Inbound bool
	Transport          Transport
	// LostStatus says why it was lost (StatusOK while connected).
	LostStatus            Status
	BytesRead             uint64
	BytesWritten          uint64
	TransfersDone         uint64
	TransfersFailed       uint64
	OperationsFailed      uint64
	NotificationsSent     uint64
	NotificationsReceived uint64
	HeartbeatRTT          time.Duration
	// MappedRegions counts the peer's regions mapped at connect (same-host peers whose regions
	// lie in a NewSharedHostBuffer): their bytes move with memcpy, the others' with cross-memory
	// attach. BytesMapped counts the bytes copied through those mappings.
	MappedRegions uint32
	BytesMapped   uint64
	// LeaseKeepsSent and LeaseKeepsReceived count the request ids this side asked the peer to
	// keep leased (KeepLeases) and those the peer asked this side to.
	LeaseKeepsSent     uint64
	LeaseKeepsReceived uint64
}

// Peer is a connected (or formerly connected) remote engine rank. Close frees the handle and
// keeps the connection; Disconnect closes the connection.
type Peer struct {
	h handle[C.pdkv_peer_t]
}

func newPeer(p *C.pdkv_peer_t) *Peer {
	pe := &Peer{h: handle[C.pdkv_peer_t]{ptr: p, free: func(p *C.pdkv_peer_t) { C.pdkv_peer_free(p) }}}
	runtime.SetFinalizer(pe, func(pe *Peer) { pe.h.close() })
	return pe
}

// Close frees the handle (the connection stays). Idempotent.
func (pe *Peer) Close() error { return closeHandle(pe, pe.ref()) }

func (pe *Peer) ref() *handle[C.pdkv_peer_t] {
	if pe == nil {
		return nil
	}
	return &pe.h
}

// Info returns the peer's identity, state and counters.
func (pe *Peer) Info() (PeerInfo, error) {
	p, err := pe.ref().acquire()
	if err != nil {
		return PeerInfo{}, err
	}
	defer pe.h.release()
	var ci C.pdkv_peer_info_t
	ci.struct_size = C.size_t(unsafe.Sizeof(ci))
	var cerr *C.pdkv_error_t
	if err := check(C.pdkv_peer_get_info(p, &ci, &cerr), cerr); err != nil {
		return PeerInfo{}, err
	}
	return PeerInfo{
		EngineID: C.GoString(ci.engine_id), TpRank: uint32(ci.tp_rank), Address: C.GoString(ci.address),
		Connected: ci.connected != 0, Inbound: ci.inbound != 0, Transport: Transport(ci.transport),
		LostStatus: Status(ci.lost_status), BytesRead: uint64(ci.bytes_read),
		BytesWritten: uint64(ci.bytes_written), TransfersDone: uint64(ci.transfers_done),
		TransfersFailed: uint64(ci.transfers_failed), OperationsFailed: uint64(ci.operations_failed),
		NotificationsSent: uint64(ci.notifications_sent), NotificationsReceived: uint64(ci.notifications_received),
		HeartbeatRTT:  time.Duration(ci.heartbeat_rtt_us) * time.Microsecond,
		MappedRegions: uint32(ci.mapped_regions), BytesMapped: uint64(ci.bytes_mapped),
		LeaseKeepsSent: uint64(ci.lease_keeps_sent), LeaseKeepsReceived: uint64(ci.lease_keeps_received),
	}, nil
}

// Metadata returns a copy of the metadata the peer advertised.
func (pe *Peer) Metadata() (*EngineMetadata, error) {
	p, err := pe.ref().acquire()
	if err != nil {
		return nil, err
	}
	defer pe.h.release()
	var out *C.pdkv_engine_metadata_t
	var cerr *C.pdkv_error_t
	if err := check(C.pdkv_peer_metadata(p, &out, &cerr), cerr); err != nil {
		return nil, err
	}
	return newEngineMetadata(out), nil
}

// Disconnect closes the connection (Bye); transfers in flight with this peer fail with
// ErrPeerLost. Fine on a lost peer.
func (pe *Peer) Disconnect() error {
	p, err := pe.ref().acquire()
	if err != nil {
		return err
	}
	defer pe.h.release()
	var cerr *C.pdkv_error_t
	return check(C.pdkv_peer_disconnect(p, &cerr), cerr)
}
