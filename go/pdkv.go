// Package pdkv is the Go binding of pdkv, which derives the transfer configuration of
// prefill/decode (P/D) disaggregated LLM serving: which prefill ranks a decode rank reads
// attention KV and Mamba state from, byte-exact descriptors and transfer plans.
//
// The package wraps the stable C API (pdkv.h, library libpdkv.so) with cgo and the standard
// library only. cgo finds the header and the library with pkg-config ("#cgo pkg-config: pdkv"):
//
//   - after "cmake --install build --prefix P", pdkv.pc is in P/lib/pkgconfig, which pkg-config
//     searches by default for P = /usr/local or /usr; for another prefix, point the standard
//     PKG_CONFIG_PATH at P/lib/pkgconfig;
//   - in the repository, a build tree B carries a pdkv.pc for itself in B/pkgconfig
//     (PKG_CONFIG_PATH=B/pkgconfig).
//
// That pdkv.pc adds -Wl,-rpath,<libdir>, so programs built with this package find libpdkv.so.2
// when they run, with no LD_LIBRARY_PATH (a build configured with -DPDKV_PKGCONFIG_RPATH=OFF
// leaves it out, for prefixes the dynamic loader searches anyway). cgo cannot read other
// variables: PDKV_LIB_DIR, which the Rust and Python bindings honour, does not apply to Go.
//
// Conventions:
//   - Fallible functions return an error; a failure reported by the library is a *Error
//     carrying its Status and Message. errors.Is(err, ErrTpNotDivisible) and the other
//     per-status sentinels match by status.
//   - Handles (Model, Geometry, TpMapping, MambaReadList, DescriptorList, ...) own a C object.
//     Close releases it, is idempotent and safe to call concurrently with other methods (it
//     waits for calls in flight). A finalizer releases forgotten handles as a safety net.
//     Methods on a closed handle (or a zero-value one), and functions given one as an argument,
//     return a *Error of StatusNullPointer naming the handle type ("pdkv.Model is closed"):
//     errors.Is(err, ErrClosed) and errors.Is(err, ErrNullPointer) both hold.
//   - Nil handle pointers never panic. Every method called on a nil receiver (var m *Model;
//     m.Describe()) returns a *Error of StatusNullPointer naming the handle type
//     ("pdkv.Model is nil"); a function or method given a nil handle argument returns the same
//     error naming the parameter too ("pdkv.Geometry is nil (p_geometry)"). These errors match
//     ErrNullPointer but not ErrClosed (nothing was closed). Close on a nil handle does nothing
//     and returns nil, as a second Close does. Optional handle fields documented as "nil: not
//     given" (PlanContextParams.LocalGeometry...) keep that meaning.
//   - Bad input the binding can see before calling C is a *Error too: a string holding a NUL
//     byte is StatusInvalidArgument naming the parameter and the value; a negative index
//     (PresetAt, Geometry.Projection, TransferPlan.GroupZero...) is StatusOutOfBounds, as an
//     index past the end. Other integer parameters are typed (uint32, uint64), so Go's type
//     system rules out negative or too-wide values (Python raises InvalidArgumentError for
//     those); values out of the library's domain (rank >= TP, an unknown enum value...) are
//     reported by the library, with their status.
//   - Handles are immutable: their query methods may run concurrently from many goroutines.
//   - Arrays the library returns are copied into Go slices; no Go pointer is retained by C.
package pdkv

/*
#cgo pkg-config: pdkv
#include <stdlib.h>
#include <pdkv.h>
*/
import "C"

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"unsafe"
)

// Status is a pdkv status code (pdkv_status_t). Numeric values are stable.
type Status int32

// The Status constants (StatusOK, StatusInvalidArgument, ...), their list allStatuses and the
// errors.Is sentinels (ErrInvalidArgument, ...) are generated from the header into
// zz_generated.go by scripts/gen_bindings.py.

// String returns the stable name of the status ("PDKV_ERR_TP_NOT_DIVISIBLE"), as
// pdkv_status_name gives it.
func (s Status) String() string {
	return C.GoString(C.pdkv_status_name(C.pdkv_status_t(s)))
}

// StatusFromName returns the status whose stable name (Status.String) is name.
func StatusFromName(name string) (Status, bool) {
	for _, s := range allStatuses {
		if s.String() == name {
			return s, true
		}
	}
	return 0, false
}

// CauseDomain is the lower layer behind an error (pdkv_cause_domain_t).
type CauseDomain int32

// Cause domains of the C API.
const (
	// CauseNone: no lower layer caused the error.
	CauseNone CauseDomain = C.PDKV_CAUSE_NONE
	// CauseUCX: the code is a UCX ucs_status_t.
	CauseUCX CauseDomain = C.PDKV_CAUSE_UCX
	// CauseErrno: the code is an errno value.
	CauseErrno CauseDomain = C.PDKV_CAUSE_ERRNO
	// CauseCUDA: the code is a CUDA driver API CUresult.
	CauseCUDA CauseDomain = C.PDKV_CAUSE_CUDA
	// CauseOpenSSL: the code is an OpenSSL ERR_get_error() value.
	CauseOpenSSL CauseDomain = C.PDKV_CAUSE_OPENSSL
)

// Error is a failure reported by pdkv: a status plus a human-readable message naming the
// offending values. The binding also returns *Error values for input it rejects before calling
// C (a string holding a NUL byte: StatusInvalidArgument; a nil handle receiver or argument:
// StatusNullPointer) and for a call on a closed handle (StatusNullPointer, see ErrClosed).
type Error struct {
	// Status is the status code of the failure.
	Status Status
	// Message describes the failure; it names the offending values.
	Message string
	// CauseDomain says which lower layer caused the failure (CauseNone when none did), and
	// CauseCode is that layer's own code (a ucs_status_t, an errno, ...): pdkv_error_cause.
	CauseDomain CauseDomain
	CauseCode   int64
	// closed marks the errors of calls on a closed handle (ErrClosed and what closedErr builds).
	closed bool
	// wrapped is the Go error behind a binding-side failure, when there is one (the
	// context.Context error of a cancelled or expired call): see Unwrap.
	wrapped error
}

// Unwrap returns the Go error behind the failure, if any: the context error of an executor
// call whose context was cancelled or expired, so that errors.Is(err, context.Canceled) and
// errors.Is(err, context.DeadlineExceeded) hold besides the status sentinels.
func (e *Error) Unwrap() error { return e.wrapped }

// Error implements the error interface: "PDKV_ERR_...: message".
func (e *Error) Error() string {
	if e.Message == "" {
		return "pdkv: " + e.Status.String()
	}
	return "pdkv: " + e.Status.String() + ": " + e.Message
}

// Is reports whether target is a *Error with the same status and either an empty message
// (a sentinel such as ErrTpNotDivisible) or the same message. ErrClosed is matched only by the
// errors of calls on a closed handle, whatever handle type their message names; those errors
// also match ErrNullPointer (their status).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok || t == nil {
		return false
	}
	if t.closed {
		return e.closed
	}
	return t.Status == e.Status && (t.Message == "" || t.Message == e.Message)
}

// ErrClosed matches the error every method of a handle returns after Close (and any call
// passing a closed handle as an argument). That error is a *Error of StatusNullPointer (a closed
// handle is a NULL pointer to the library) whose message names the handle type, e.g.
// "pdkv.Model is closed" (the message Python's ClosedError carries), so both
// errors.Is(err, ErrClosed) and errors.Is(err, ErrNullPointer) hold. Errors the C library
// reports with StatusNullPointer do not match ErrClosed, nor do the errors of nil handle pointers
// ("pdkv.Model is nil", see the package doc).
var ErrClosed = &Error{Status: StatusNullPointer, Message: "handle is closed", closed: true}

// closedErr is the error of a call on a closed handle of the Go type named typeName.
func closedErr(typeName string) error {
	return &Error{Status: StatusNullPointer, Message: "pdkv." + typeName + " is closed", closed: true}
}

// busyErr is the error of a call on a handle another call is changing in place, or of changing
// one other calls hold: a *Error of StatusBusy matching ErrBusy.
func busyErr(typeName string) error {
	return &Error{Status: StatusBusy, Message: "pdkv." + typeName + " is in use by another call"}
}

// nilErr is the error of a call on, or given, a nil handle pointer of the Go type named typeName:
// a *Error of StatusNullPointer matching ErrNullPointer (not ErrClosed: nothing was closed)
// whose message is "pdkv.<Type> is nil", followed by " (<arg>)" when arg names the parameter.
func nilErr(typeName, arg string) error {
	msg := "pdkv." + typeName + " is nil"
	if arg != "" {
		msg += " (" + arg + ")"
	}
	return &Error{Status: StatusNullPointer, Message: msg}
}

// handleTypeName names the Go handle type that owns a C object of type T (for closed errors).
func handleTypeName[T any]() string {
	switch any((*T)(nil)).(type) {
	case *C.pdkv_model_t:
		return "Model"
	case *C.pdkv_geometry_t:
		return "Geometry"
	case *C.pdkv_tp_mapping_t:
		return "TpMapping"
	case *C.pdkv_mamba_read_list_t:
		return "MambaReadList"
	case *C.pdkv_descriptor_list_t:
		return "DescriptorList"
	case *C.pdkv_engine_metadata_t:
		return "EngineMetadata"
	case *C.pdkv_group_trim_t:
		return "GroupTrim"
	case *C.pdkv_plan_context_t:
		return "PlanContext"
	case *C.pdkv_transfer_plan_t:
		return "TransferPlan"
	case *C.pdkv_agent_t:
		return "Agent"
	case *C.pdkv_memory_t:
		return "Memory"
	case *C.pdkv_peer_t:
		return "Peer"
	case *C.pdkv_transfer_t:
		return "Transfer"
	case *C.pdkv_engine_t:
		return "Engine"
	default:
		return "handle"
	}
}

// check converts a C status and owned error object into a Go error, freeing the object.
// appendViaCallerBuffer runs the two-call caller-buffer protocol of the C API: call(nil, 0) reports
// the needed size through PDKV_ERR_BUFFER_TOO_SMALL, then call writes into dst's new tail. The
// library writes straight into Go memory, which it does not retain. reserve is extra room the
// call needs beyond the reported size (1 for a trailing NUL). Returns dst extended by the bytes
// written, or dst unchanged with the error.
func appendViaCallerBuffer(dst []byte, reserve int,
	call func(buf unsafe.Pointer, capacity C.size_t, written *C.size_t, cerr **C.pdkv_error_t) C.pdkv_status_t) ([]byte, error) {
	var need C.size_t
	var cerr *C.pdkv_error_t
	st := call(nil, 0, &need, &cerr)
	if st != C.PDKV_ERR_BUFFER_TOO_SMALL {
		if err := check(st, cerr); err != nil {
			return dst, err
		}
		return dst, nil
	}
	C.pdkv_error_free(cerr)
	start := len(dst)
	buf := append(dst, make([]byte, int(need)+reserve)...)
	var n C.size_t
	cerr = nil
	st = call(unsafe.Pointer(&buf[start]), need+C.size_t(reserve), &n, &cerr)
	if err := check(st, cerr); err != nil {
		return dst, err
	}
	return buf[:start+int(n)], nil
}

func check(st C.pdkv_status_t, cerr *C.pdkv_error_t) error {
	if st == C.PDKV_OK {
		C.pdkv_error_free(cerr)
		return nil
	}
	e := &Error{Status: Status(st), Message: C.GoString(C.pdkv_error_message(cerr))}
	var domain C.int32_t
	var code C.int64_t
	C.pdkv_error_cause(cerr, &domain, &code)
	e.CauseDomain, e.CauseCode = CauseDomain(domain), int64(code)
	if cerr != nil {
		if s := Status(C.pdkv_error_status(cerr)); s != e.Status {
			e.Message += fmt.Sprintf(" (error object status %s)", s)
		}
	}
	C.pdkv_error_free(cerr)
	return e
}

// goErr builds a Go-side *Error for input the binding rejects before calling C.
func goErr(st Status, format string, args ...interface{}) error {
	return &Error{Status: st, Message: fmt.Sprintf(format, args...)}
}

// cString copies s into C memory (free with C.free). Strings holding a NUL byte cannot be
// passed to C and are rejected with StatusInvalidArgument naming the argument.
func cString(arg, s string) (*C.char, error) {
	if strings.IndexByte(s, 0) >= 0 {
		return nil, goErr(StatusInvalidArgument, "%s %q contains a NUL byte", arg, s)
	}
	return C.CString(s), nil
}

// Version returns the runtime library version as major, minor, patch.
func Version() (major, minor, patch uint32) {
	v := uint32(C.pdkv_version())
	return v >> 16, (v >> 8) & 0xff, v & 0xff
}

// VersionString returns the runtime library version "MAJOR.MINOR.PATCH".
func VersionString() string { return C.GoString(C.pdkv_version_string()) }

// HeaderVersion returns the version of the pdkv.h this package was compiled against.
func HeaderVersion() (major, minor, patch uint32) {
	return C.PDKV_VERSION_MAJOR, C.PDKV_VERSION_MINOR, C.PDKV_VERSION_PATCH
}

// handle owns one C object of type T. Methods count themselves in flight while they use the
// pointer (acquire ... release); Close marks the handle closed, so later acquires fail with
// ErrClosed, waits until the calls in flight have released it, and only then frees the object.
// Unlike a sync.RWMutex read lock, an acquire never blocks: one call may acquire the same handle
// more than once (m.Equal(m), a plan context listing one metadata twice) without deadlocking
// against a concurrent Close, whose waiting writer would block the second RLock forever.
// Concurrent queries on one handle stay concurrent. The zero value of the bookkeeping fields is
// ready to use (handles are built as {ptr, free} literals).
type handle[T any] struct {
	mu        sync.Mutex
	ptr       *T
	free      func(*T)
	inFlight  int           // acquires not yet released
	exclusive bool          // held by acquireExclusive: every other acquire fails with ErrBusy
	closing   bool          // close began: acquire fails from now on
	drained   chan struct{} // made by close while calls are in flight; closed by the last release
	done      chan struct{} // made by the first close; closed once the object is freed
}

// acquire returns the pointer and counts the caller in flight (end with release), or the
// closed error naming the handle type (matching ErrClosed and ErrNullPointer) once close began
// or for a zero-value handle. A nil h (the ref of a nil handle pointer, e.g. a nil *Model
// receiver) gives nilErr instead of panicking: every method acquires through here, which makes
// every method nil-safe.
func (h *handle[T]) acquire() (*T, error) {
	if h == nil {
		return nil, nilErr(handleTypeName[T](), "")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closing || h.ptr == nil {
		return nil, closedErr(handleTypeName[T]())
	}
	if h.exclusive {
		return nil, busyErr(handleTypeName[T]())
	}
	h.inFlight++
	return h.ptr, nil
}

// acquireExclusive is acquire for a call that changes the object in place (a plan compiled into
// again): it fails with ErrBusy, never waiting, while any other call holds the handle, and every
// other acquire fails with ErrBusy until releaseExclusive. So a goroutine reading a plan never
// sees it change under it.
func (h *handle[T]) acquireExclusive() (*T, error) {
	if h == nil {
		return nil, nilErr(handleTypeName[T](), "")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closing || h.ptr == nil {
		return nil, closedErr(handleTypeName[T]())
	}
	if h.exclusive || h.inFlight != 0 {
		return nil, busyErr(handleTypeName[T]())
	}
	h.exclusive = true
	h.inFlight++
	return h.ptr, nil
}

func (h *handle[T]) releaseExclusive() {
	h.mu.Lock()
	h.exclusive = false
	h.mu.Unlock()
	h.release()
}

// acquireArg is acquire for a handle passed as the parameter named arg: a nil handle's error
// also names the parameter ("pdkv.Geometry is nil (p_geometry)"). Functions taking handles
// acquire them through here rather than checking for nil themselves.
func (h *handle[T]) acquireArg(arg string) (*T, error) {
	if h == nil {
		return nil, nilErr(handleTypeName[T](), arg)
	}
	return h.acquire()
}

// closeHandle is the Close method of every handle type: it closes h (see close) and disarms the
// finalizer of owner, the *Model, *Geometry... that holds h. A nil h (a nil owner) has nothing
// to free: closing it does nothing and returns nil, as closing twice does.
func closeHandle[T any](owner any, h *handle[T]) error {
	if h == nil {
		return nil
	}
	h.close()
	runtime.SetFinalizer(owner, nil)
	return nil
}

// release ends one acquire; the last one wakes a waiting close.
func (h *handle[T]) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.inFlight--
	if h.inFlight < 0 {
		panic("pdkv: handle released more often than acquired")
	}
	if h.inFlight == 0 && h.drained != nil {
		close(h.drained)
		h.drained = nil
	}
}

// close frees the object once, after every call in flight released it; later calls do nothing
// (a close racing the first one returns once the object is freed). Must not be called by a
// goroutine that holds an acquire of the same handle.
func (h *handle[T]) close() {
	h.mu.Lock()
	if h.closing {
		done := h.done
		h.mu.Unlock()
		if done != nil {
			<-done
		}
		return
	}
	h.closing = true
	done := make(chan struct{})
	h.done = done
	var wait chan struct{}
	if h.inFlight > 0 {
		h.drained = make(chan struct{})
		wait = h.drained
	}
	h.mu.Unlock()
	if wait != nil {
		<-wait // no new acquire can start: closing is set
	}
	h.mu.Lock()
	p := h.ptr
	h.ptr = nil
	h.mu.Unlock()
	if p != nil {
		h.free(p)
	}
	close(done)
}

// u32Slice copies n uint32 values from C memory into a new Go slice (never nil).
func u32Slice(p *C.uint32_t, n C.size_t) []uint32 {
	out := make([]uint32, int(n))
	if n > 0 && p != nil {
		copy(out, unsafe.Slice((*uint32)(unsafe.Pointer(p)), int(n)))
	}
	return out
}

// u64Slice copies n uint64 values from C memory into a new Go slice (never nil).
func u64Slice(p *C.uint64_t, n C.size_t) []uint64 {
	out := make([]uint64, int(n))
	if n > 0 && p != nil {
		copy(out, unsafe.Slice((*uint64)(unsafe.Pointer(p)), int(n)))
	}
	return out
}

// cBool converts a Go bool to the 0/1 uint8 of the C structs.
func cBool(b bool) C.uint8_t {
	if b {
		return 1
	}
	return 0
}
