//! Host memory for the transfer executor: page-aligned buffers whose address goes into the
//! engine metadata (`EngineLayout::region_bases`), and their registrations with an agent.
use crate::agent::Shared;
use crate::error::{Error, Result, Status};
use crate::ffi_util::check;
use crate::shared_bytes;
use pdkv_sys as sys;
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::{self, NonNull};
use std::sync::Arc;

/// Alignment of [`HostBuffer`] memory: one page, so that a region never shares a page with
/// unrelated data that a peer could reach through the registration.
const PAGE: usize = 4096;

/// A zeroed, page-aligned block of host memory with a stable address, meant to back one
/// metadata region. Before registration it is an ordinary owned buffer ([`HostBuffer::as_mut_slice`]);
/// once moved into [`Agent::register_buffer`](crate::Agent::register_buffer), peers may read or
/// write it at any time, so it is then only reachable through the copying methods of `&self`
/// (never as a Rust reference that a peer's write could change under it). Those copies are
/// atomic word by word, so threads may call them on one buffer at the same time, even on
/// overlapping bytes, without a data race: each byte ends up with one of the values written.
#[derive(Debug)]
pub struct HostBuffer {
    ptr: NonNull<u8>,
    len: usize,
    // new_shared: the pdkv shared allocation behind ptr (freed with pdkv_shared_memory_free).
    shared: Option<NonNull<sys::pdkv_shared_memory_t>>,
}

// SAFETY: the buffer owns its allocation; &self methods only copy through raw pointers.
unsafe impl Send for HostBuffer {}
// SAFETY: as above: no method hands out a reference into the memory from &self.
unsafe impl Sync for HostBuffer {}

impl HostBuffer {
    /// Allocates `len` zeroed bytes aligned to 4096. `len` 0 is refused (a region is never
    /// empty), as is a size the allocator cannot describe.
    pub fn new(len: usize) -> Result<HostBuffer> {
        if len == 0 {
            return Err(Error::new(
                Status::InvalidArgument,
                "HostBuffer length 0: a region holds at least one block",
            ));
        }
        let layout = Self::layout(len)?;
        // SAFETY: non-zero size.
        let p = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(p).ok_or_else(|| {
            Error::new(
                Status::Internal,
                format!("allocation of {len} bytes for a HostBuffer failed"),
            )
        })?;
        Ok(HostBuffer {
            ptr,
            len,
            shared: None,
        })
    }

    /// The allocation behind `new(len)`: whole 8-byte words (the copies access the word holding
    /// each byte, the last one included), page-aligned.
    fn layout(len: usize) -> Result<Layout> {
        let words = len.checked_next_multiple_of(8);
        words
            .and_then(|n| Layout::from_size_align(n, PAGE).ok())
            .ok_or_else(|| {
                Error::new(
                    Status::Overflow,
                    format!("HostBuffer length {len} is too large to allocate"),
                )
            })
    }

    /// Allocates `len` zeroed, page-aligned bytes that same-host peer agents can map
    /// (`pdkv_shared_memory_alloc`): a region registered inside it is copied by a same-host SHM
    /// peer with memcpy instead of cross-memory attach (`PeerInfo::mapped_regions`). Otherwise
    /// it is a `HostBuffer` like any other. `len` 0 is refused (InvalidArgument).
    pub fn new_shared(len: usize) -> Result<HostBuffer> {
        let mut out: *mut sys::pdkv_shared_memory_t = ptr::null_mut();
        check(|e| unsafe { sys::pdkv_shared_memory_alloc(len, &mut out, e) })?;
        let shared = NonNull::new(out)
            .ok_or_else(|| Error::new(Status::Internal, "pdkv returned a NULL shared memory"))?;
        let mut addr: *mut std::ffi::c_void = ptr::null_mut();
        let mut n: usize = 0;
        // SAFETY: a live allocation; out-pointers to locals.
        if let Err(e) = check(|e| unsafe {
            sys::pdkv_shared_memory_address(shared.as_ptr(), &mut addr, &mut n, e)
        }) {
            // SAFETY: allocated above, freed once.
            unsafe { sys::pdkv_shared_memory_free(shared.as_ptr()) };
            return Err(e);
        }
        let Some(ptr) = NonNull::new(addr.cast::<u8>()) else {
            // Freed here: returning the error with `?` leaked the allocation (no HostBuffer owns
            // it yet). No test: the library never returns NULL for a live allocation, and it
            // has no fault-injection hook to make it.
            // SAFETY: allocated above, freed once.
            unsafe { sys::pdkv_shared_memory_free(shared.as_ptr()) };
            return Err(Error::new(Status::Internal, "pdkv returned a NULL address"));
        };
        Ok(HostBuffer {
            ptr,
            len: n,
            shared: Some(shared),
        })
    }

    /// The address to advertise (`EngineLayout::region_bases`).
    pub fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    /// The start of the memory.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false (a buffer is never empty); present for API symmetry.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes, mutably: only while the buffer is not registered (it is owned here).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: exclusive ownership, len bytes allocated and initialised (zeroed).
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    fn range(&self, offset: usize, n: usize) -> Result<()> {
        match offset.checked_add(n) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Error::new(
                Status::OutOfBounds,
                format!("range [{offset}, +{n}) leaves the {}-byte buffer", self.len),
            )),
        }
    }

    /// Copies `dst.len()` bytes starting at `offset` out of the buffer. While transfers that
    /// write this buffer are in flight the copy may observe partial data. Safe to call from
    /// several threads, and beside [`HostBuffer::write_at`] (word-atomic copies).
    pub fn read_at(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.range(offset, dst.len())?;
        // SAFETY: in bounds; the memory is page-aligned and holds whole words past len (new:
        // layout; new_shared: whole pages), and Rust code reaches it only through shared_bytes.
        unsafe { shared_bytes::load(self.ptr.as_ptr(), offset, dst) };
        Ok(())
    }

    /// Copies `src` into the buffer at `offset`. Do not write memory a transfer is reading.
    /// Safe to call from several threads at once, even on overlapping bytes (each byte keeps
    /// one of the values written; bytes of a word that are not written keep theirs).
    pub fn write_at(&self, offset: usize, src: &[u8]) -> Result<()> {
        self.range(offset, src.len())?;
        // SAFETY: as read_at.
        unsafe { shared_bytes::store(self.ptr.as_ptr(), offset, src) };
        Ok(())
    }

    /// A copy of the whole buffer.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.len];
        // SAFETY: as read_at, for [0, len).
        unsafe { shared_bytes::load(self.ptr.as_ptr(), 0, &mut v) };
        v
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        if let Some(shared) = self.shared {
            // SAFETY: allocated in new_shared; freed once, here.
            unsafe { sys::pdkv_shared_memory_free(shared.as_ptr()) };
            return;
        }
        let layout = Self::layout(self.len).expect("the layout new allocated with");
        // SAFETY: allocated in new with this layout.
        unsafe { dealloc(self.ptr.as_ptr(), layout) }
    }
}

/// Memory kind of a registration (`pdkv_memory_type_t`).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum MemoryType {
    /// Host memory.
    #[default]
    Host,
    /// GPU device memory (since 2.5): staged through host memory over the tcp data connection;
    /// registering it needs a CUDA driver (see `pdkv_agent_register_memory`).
    Cuda,
    /// A raw value this version does not know.
    Other(i32),
}

impl MemoryType {
    /// The raw value.
    pub fn raw(self) -> i32 {
        match self {
            MemoryType::Host => 0,
            MemoryType::Cuda => 1,
            MemoryType::Other(v) => v,
        }
    }
}

/// One region's memory to register by address (`pdkv_memory_desc_t`), for
/// [`Agent::register_memory`](crate::Agent::register_memory).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryDesc {
    /// Index of the region in the agent's metadata.
    pub region: u32,
    /// Must equal the region's advertised base.
    pub address: u64,
    /// Must equal the region's `block_len * num_blocks`.
    pub length: u64,
    /// Memory kind (default host).
    pub memory_type: MemoryType,
    /// CUDA device ordinal (CUDA only).
    pub device: i32,
}

impl MemoryDesc {
    pub(crate) fn to_raw(self) -> sys::pdkv_memory_desc_t {
        sys::pdkv_memory_desc_t {
            struct_size: std::mem::size_of::<sys::pdkv_memory_desc_t>(),
            field_mask: crate::agent::FIELD_MEMORY_TYPE | crate::agent::FIELD_MEMORY_DEVICE,
            region: self.region,
            address: self.address,
            length: self.length,
            memory_type: self.memory_type.raw(),
            device: self.device,
        }
    }
}

/// A registration of one region's memory (`pdkv_memory_t`). Dropping it deregisters and
/// frees the handle; a [`HostBuffer`] it owns is kept alive until the agent and every handle
/// taken from it (transfers, peers, registrations) are dropped, because UCX or a peer holding
/// the old key may still touch it until then.
#[derive(Debug)]
pub struct Memory {
    ptr: NonNull<sys::pdkv_memory_t>,
    buffer: Option<Arc<HostBuffer>>,
    shared: Arc<Shared>,
}

// SAFETY: pdkv/agent.h documents deregister as thread-safe; free happens only in Drop, which
// has exclusive ownership.
unsafe impl Send for Memory {}
// SAFETY: the only &self call (deregister) is thread-safe.
unsafe impl Sync for Memory {}

impl Memory {
    pub(crate) fn new(
        ptr: *mut sys::pdkv_memory_t,
        buffer: Option<Arc<HostBuffer>>,
        shared: Arc<Shared>,
    ) -> Result<Memory> {
        let ptr = NonNull::new(ptr)
            .ok_or_else(|| Error::new(Status::Internal, "pdkv returned a NULL registration"))?;
        Ok(Memory {
            ptr,
            buffer,
            shared,
        })
    }

    /// The registered buffer, when the registration owns one
    /// ([`Agent::register_buffer`](crate::Agent::register_buffer)).
    pub fn buffer(&self) -> Option<&HostBuffer> {
        self.buffer.as_deref()
    }

    /// Deregisters now (`pdkv_memory_deregister`): [`Status::Busy`] while a transfer uses the
    /// region (the registration stays); calling it twice is fine.
    pub fn deregister(&self) -> Result<()> {
        // SAFETY: live handle.
        check(|e| unsafe { sys::pdkv_memory_deregister(self.ptr.as_ptr(), e) })
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        // A BUSY registration is released by the library when its last operation ends; the
        // buffer outlives it either way (moved to the agent's keep-alive list below).
        // SAFETY: owned handle, no other user (Drop has exclusive access).
        unsafe {
            let _ = sys::pdkv_memory_deregister(self.ptr.as_ptr(), ptr::null_mut());
            sys::pdkv_memory_free(self.ptr.as_ptr());
        }
        if let Some(b) = self.buffer.take() {
            self.shared.keep(b);
        }
    }
}
