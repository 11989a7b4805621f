package pdkv

/*
#include <pdkv.h>
*/
import "C"

import (
	"runtime"
	"sync"
	"syscall"
	"unsafe"
)

// HostBuffer is page-aligned host memory outside the Go heap (an anonymous mmap), meant to back
// one metadata region: peers read and write it through the agent, which Go heap memory must
// not be exposed to (cgo forbids C from keeping Go pointers, and the collector knows nothing
// of remote writers). Its address goes into EngineLayout.RegionBases.
//
// Free unmaps it; it is refused (ErrBusy) while an agent it was registered with is open,
// because the agent or a peer may still touch the memory. Only Free unmaps it: there is no
// finalizer, because a slice from Bytes points outside the Go heap and does not keep the
// *HostBuffer reachable, so a collector-run Free would unmap memory such a slice still uses (a
// fault, or a write into whatever is mapped there next). A HostBuffer never freed stays mapped
// until the process ends, as memory from syscall.Mmap does. Slices from Bytes must not be used
// after Free.
type HostBuffer struct {
	mu     sync.Mutex
	mem    []byte
	pins   int
	freed  bool
	shared *C.pdkv_shared_memory_t // NewSharedHostBuffer: the C allocation behind mem
}

// NewSharedHostBuffer allocates size zeroed bytes of host memory that same-host peer agents can
// map (pdkv_shared_memory_alloc): a region registered inside it is copied by a same-host SHM
// peer with memcpy instead of cross-memory attach (PeerInfo.MappedRegions). Otherwise it is a
// HostBuffer like any other (Bytes, Addr, Free refused while registered with an open agent).
// Errors: ErrInvalidArgument (size <= 0), ErrIO (the allocation failed; names the call and
// errno).
func NewSharedHostBuffer(size int) (*HostBuffer, error) {
	if size <= 0 {
		return nil, goErr(StatusInvalidArgument, "HostBuffer size %d: must be positive", size)
	}
	var sm *C.pdkv_shared_memory_t
	var cerr *C.pdkv_error_t
	if err := check(C.pdkv_shared_memory_alloc(C.size_t(size), &sm, &cerr), cerr); err != nil {
		return nil, err
	}
	var addr unsafe.Pointer
	var n C.size_t
	var aerr *C.pdkv_error_t
	if err := check(C.pdkv_shared_memory_address(sm, &addr, &n, &aerr), aerr); err != nil {
		C.pdkv_shared_memory_free(sm)
		return nil, err
	}
	// No finalizer: see HostBuffer (slices from Bytes outlive the *HostBuffer).
	return &HostBuffer{mem: unsafe.Slice((*byte)(addr), int(n)), shared: sm}, nil
}

// NewHostBuffer maps size zeroed bytes. Errors: ErrInvalidArgument (size <= 0), ErrIO (mmap
// failed; names errno).
func NewHostBuffer(size int) (*HostBuffer, error) {
	if size <= 0 {
		return nil, goErr(StatusInvalidArgument, "HostBuffer size %d: must be positive", size)
	}
	mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		e := goErr(StatusIO, "mmap of %d bytes for a HostBuffer: %v", size, err).(*Error)
		if errno, ok := err.(syscall.Errno); ok {
			e.CauseDomain, e.CauseCode = CauseErrno, int64(errno)
		}
		return nil, e
	}
	// No finalizer: see HostBuffer (slices from Bytes outlive the *HostBuffer).
	return &HostBuffer{mem: mem}, nil
}

// Bytes returns the memory (nil once freed; a slice taken before Free must not be used after
// it, and does not keep the HostBuffer from being collected, which leaves the memory mapped).
// While transfers that write the buffer are in
// flight, reads of it may observe partial data; do not write memory a transfer reads.
func (b *HostBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mem
}

// Addr returns the address to advertise (0 once freed).
func (b *HostBuffer) Addr() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.mem) == 0 {
		return 0
	}
	return uint64(uintptr(unsafe.Pointer(&b.mem[0])))
}

// Len returns the size in bytes (0 once freed).
func (b *HostBuffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.mem)
}

// Free unmaps the memory. Idempotent. Errors: ErrBusy while an agent it is registered with is
// open.
func (b *HostBuffer) Free() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.freed {
		return nil
	}
	if b.pins > 0 {
		return goErr(StatusBusy, "HostBuffer at %#x is registered with %d open agent(s): close them first", uintptr(unsafe.Pointer(&b.mem[0])), b.pins)
	}
	b.freed = true
	if b.shared != nil {
		C.pdkv_shared_memory_free(b.shared)
		b.shared, b.mem = nil, nil
		return nil
	}
	err := syscall.Munmap(b.mem)
	b.mem = nil
	if err != nil {
		return goErr(StatusIO, "munmap: %v", err)
	}
	return nil
}

// pinLive pins b and returns its address and length, or fails when it is already freed: a
// Free from then on is refused (ErrBusy) until unpin.
func (b *HostBuffer) pinLive() (uint64, int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.freed || len(b.mem) == 0 {
		return 0, 0, goErr(StatusInvalidArgument, "HostBuffer is freed")
	}
	b.pins++
	return uint64(uintptr(unsafe.Pointer(&b.mem[0]))), len(b.mem), nil
}

func (b *HostBuffer) unpin() {
	b.mu.Lock()
	b.pins--
	b.mu.Unlock()
}

// MemoryType is where registered memory lives (pdkv_memory_type_t).
type MemoryType int32

// Memory types.
const (
	// MemoryHost is host memory.
	MemoryHost MemoryType = C.PDKV_MEMORY_HOST
	// MemoryCUDA is GPU device memory (since 2.5): staged through host memory over the tcp data
	// connection; needs a CUDA driver where it is registered (see pdkv_agent_register_memory).
	MemoryCUDA MemoryType = C.PDKV_MEMORY_CUDA
)

// MemoryDesc describes one region's memory by address, for Agent.RegisterMemory.
type MemoryDesc struct {
	// Region is the region's index in the agent's metadata.
	Region uint32
	// Address must equal the region's advertised base, Length its block_len * num_blocks.
	Address, Length uint64
	// Type is the memory kind (default MemoryHost); Device the CUDA ordinal (CUDA only).
	Type   MemoryType
	Device int32
}

// Memory is a registration of one region's memory with an agent. Close deregisters (when no
// transfer uses the region; otherwise the library releases it when the last one ends) and
// frees the handle.
type Memory struct {
	h handle[C.pdkv_memory_t]
}

// RegisterBuffer registers buf as the memory of region (its address must be the region's
// advertised base and its length the region's size). buf stays pinned (HostBuffer.Free
// refused) until the agent is closed. Errors: ErrInvalidArgument (region out of range, range
// not the advertised one: names both), ErrBusy (region already registered), ErrShutdown,
// ErrTransport, ErrClosed.
func (a *Agent) RegisterBuffer(region uint32, buf *HostBuffer) (*Memory, error) {
	if _, err := a.ref().acquire(); err != nil {
		return nil, err
	}
	// Held until buf is in the pin list: a Close meanwhile waits for it, so the agent's free
	// unpins buf too (released earlier, a Close between the registration and the pin would free
	// the agent first and leave buf pinned for good).
	defer a.h.release()
	if buf == nil {
		return nil, nilErr("HostBuffer", "buf")
	}
	// Pinned before the C registration, not after it: a Free racing this call then either ran
	// first (refused here) or fails with ErrBusy; it never unmaps memory being registered.
	addr, n, err := buf.pinLive()
	if err != nil {
		return nil, err
	}
	m, err := a.register(MemoryDesc{Region: region, Address: addr, Length: uint64(n)})
	if err != nil {
		buf.unpin()
		return nil, err
	}
	a.pins.add(buf)
	return m, nil
}

// RegisterMemory registers memory given by address (e.g. memory another allocator owns). The
// caller keeps it valid for reads and writes by peers until the agent is closed. Errors: as
// RegisterBuffer, and ErrInvalidArgument for CUDA memory that is not device memory of desc.Device
// or where no CUDA driver is usable (the message says why).
func (a *Agent) RegisterMemory(desc MemoryDesc) (*Memory, error) { return a.register(desc) }

func (a *Agent) register(desc MemoryDesc) (*Memory, error) {
	p, err := a.ref().acquire()
	if err != nil {
		return nil, err
	}
	defer a.h.release()
	var cd C.pdkv_memory_desc_t
	cd.struct_size = C.size_t(unsafe.Sizeof(cd))
	cd.field_mask = C.uint64_t(fieldMemoryType | fieldMemoryDevice)
	cd.region = C.uint32_t(desc.Region)
	cd.address = C.uint64_t(desc.Address)
	cd.length = C.uint64_t(desc.Length)
	cd.memory_type = C.int32_t(desc.Type)
	cd.device = C.int32_t(desc.Device)
	var out *C.pdkv_memory_t
	var cerr *C.pdkv_error_t
	if err := check(C.pdkv_agent_register_memory(p, &cd, &out, &cerr), cerr); err != nil {
		return nil, err
	}
	m := &Memory{h: handle[C.pdkv_memory_t]{ptr: out, free: func(p *C.pdkv_memory_t) {
		C.pdkv_memory_deregister(p, nil) // BUSY: released by the library when its use ends
		C.pdkv_memory_free(p)
	}}}
	runtime.SetFinalizer(m, func(m *Memory) { m.h.close() })
	return m, nil
}

// Close deregisters and frees the handle. Idempotent.
func (m *Memory) Close() error { return closeHandle(m, m.ref()) }

func (m *Memory) ref() *handle[C.pdkv_memory_t] {
	if m == nil {
		return nil
	}
	return &m.h
}

// Deregister deregisters now. Errors: ErrBusy (a transfer uses the region; names it), and
// the registration stays. Calling it twice is fine.
func (m *Memory) Deregister() error {
	p, err := m.ref().acquire()
	if err != nil {
		return err
	}
	defer m.h.release()
	var cerr *C.pdkv_error_t
	return check(C.pdkv_memory_deregister(p, &cerr), cerr)
}
