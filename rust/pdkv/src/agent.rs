//! The transfer executor (`pdkv/agent.h`): one [`Agent`] per engine rank, its memory
//! registrations, its peers (connected remote ranks), and its notifications and leases.
//! Transfers are in [`crate::transfer`].
//!
//! Thread safety follows the C header: every agent function may be called from any thread,
//! concurrently with any other, so [`Agent`], [`Peer`], [`Memory`] and [`Transfer`] are
//! `Send + Sync`. The one rule the C API leaves to the binding, "never free a handle while
//! another thread is inside a call on it", holds by construction: a handle is freed only by
//! `Drop`, which needs exclusive ownership.
//!
//! Deadlines are [`Duration`]s, rounded up to whole milliseconds (a deadline never expires
//! earlier than asked); a zero deadline, or one too long for the C field, is an
//! [`Status::InvalidArgument`] error naming the value, never a silent substitute.
use crate::error::{Error, Result, Status};
use crate::ffi_util::{borrowed_str, check, cstring, slice};
use crate::memory::{HostBuffer, Memory, MemoryDesc};
use crate::metadata::EngineMetadata;
use crate::transfer::{Transfer, TransferParams};
use pdkv_sys as sys;
use std::collections::VecDeque;
use std::fmt;
use std::mem::{size_of, zeroed};
use std::ptr::{self, NonNull};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

// Field bits of the options structs (bindgen types the `PDKV_*_FIELD_*` macros as u32).
pub(crate) const FIELD_LISTEN_ADDRESS: u64 = sys::PDKV_AGENT_FIELD_LISTEN_ADDRESS as u64;
pub(crate) const FIELD_TRANSPORT: u64 = sys::PDKV_AGENT_FIELD_TRANSPORT as u64;
pub(crate) const FIELD_PROGRESS_MODE: u64 = sys::PDKV_AGENT_FIELD_PROGRESS_MODE as u64;
pub(crate) const FIELD_DEFAULT_TIMEOUT: u64 = sys::PDKV_AGENT_FIELD_DEFAULT_TIMEOUT as u64;
pub(crate) const FIELD_PRESHARED_KEY: u64 = sys::PDKV_AGENT_FIELD_PRESHARED_KEY as u64;
pub(crate) const FIELD_HEARTBEAT: u64 = sys::PDKV_AGENT_FIELD_HEARTBEAT as u64;
pub(crate) const FIELD_MAX_OUTSTANDING: u64 = sys::PDKV_AGENT_FIELD_MAX_OUTSTANDING as u64;
pub(crate) const FIELD_COPY_THREADS: u64 = sys::PDKV_AGENT_FIELD_COPY_THREADS as u64;
/// The control protocol this build speaks to its peers (`PDKV_CONTROL_PROTOCOL_MAJOR`): pdkv 2.7
/// speaks 3.5.
pub const CONTROL_PROTOCOL_MAJOR: u16 = sys::PDKV_CONTROL_PROTOCOL_MAJOR as u16;
/// Its minor (`PDKV_CONTROL_PROTOCOL_MINOR`): [`AgentOptions::min_peer_protocol_minor`] may be at
/// most this.
pub const CONTROL_PROTOCOL_MINOR: u16 = sys::PDKV_CONTROL_PROTOCOL_MINOR as u16;
pub(crate) const FIELD_SEAL_DATA: u64 = sys::PDKV_AGENT_FIELD_SEAL_DATA as u64;
pub(crate) const FIELD_MIN_PEER_PROTOCOL_MINOR: u64 =
    sys::PDKV_AGENT_FIELD_MIN_PEER_PROTOCOL_MINOR as u64;
pub(crate) const FIELD_MEMORY_TYPE: u64 = sys::PDKV_MEMORY_FIELD_MEMORY_TYPE as u64;
pub(crate) const FIELD_MEMORY_DEVICE: u64 = sys::PDKV_MEMORY_FIELD_DEVICE as u64;
pub(crate) const FIELD_CONNECT_TIMEOUT: u64 = sys::PDKV_CONNECT_FIELD_TIMEOUT as u64;
pub(crate) const FIELD_TRANSFER_TIMEOUT: u64 = sys::PDKV_TRANSFER_FIELD_TIMEOUT as u64;
pub(crate) const FIELD_TRANSFER_NOTIFY: u64 = sys::PDKV_TRANSFER_FIELD_NOTIFY as u64;
pub(crate) const FIELD_TRANSFER_CONFIRM_LEASE: u64 = sys::PDKV_TRANSFER_FIELD_CONFIRM_LEASE as u64;

/// `d` in whole milliseconds, rounded up; zero and values above `max` are refused naming
/// `what` and the value.
pub(crate) fn millis(what: &str, d: Duration, max: u64) -> Result<u64> {
    let ms = d.as_nanos().div_ceil(1_000_000);
    if ms == 0 {
        return Err(Error::new(
            Status::InvalidArgument,
            format!("{what} = {d:?}: a deadline must be at least 1 ns (it is rounded up to 1 ms)"),
        ));
    }
    u64::try_from(ms).ok().filter(|&v| v <= max).ok_or_else(|| {
        Error::new(
            Status::InvalidArgument,
            format!("{what} = {d:?} is longer than the {max} ms the C field holds"),
        )
    })
}

/// How an agent moves a peer's bytes (`pdkv_transport_t`).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Transport {
    /// Cross-memory attach for a same-host peer both sides can attach to, TCP otherwise.
    #[default]
    Auto,
    /// Cross-memory attach (`process_vm_readv`/`writev`, one host; the connect fails with
    /// `Status::Transport` where the two processes cannot attach to each other).
    Shm,
    /// UCX over TCP with peer error handling.
    Tcp,
    /// A raw value this version does not know.
    Other(i32),
}

impl Transport {
    /// The raw value.
    pub fn raw(self) -> i32 {
        match self {
            Transport::Auto => 0,
            Transport::Shm => 1,
            Transport::Tcp => 2,
            Transport::Other(v) => v,
        }
    }

    /// Maps a raw value.
    pub fn from_raw(v: i32) -> Transport {
        match v {
            0 => Transport::Auto,
            1 => Transport::Shm,
            2 => Transport::Tcp,
            other => Transport::Other(other),
        }
    }
}

/// Who drives UCX progress (`pdkv_progress_mode_t`).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ProgressMode {
    /// A background thread of the agent.
    #[default]
    Thread,
    /// The caller calls [`Agent::progress`] (e.g. when [`Agent::event_fd`] is readable).
    Caller,
    /// A raw value this version does not know.
    Other(i32),
}

impl ProgressMode {
    /// The raw value.
    pub fn raw(self) -> i32 {
        match self {
            ProgressMode::Thread => 0,
            ProgressMode::Caller => 1,
            ProgressMode::Other(v) => v,
        }
    }

    /// Maps a raw value.
    pub fn from_raw(v: i32) -> ProgressMode {
        match v {
            0 => ProgressMode::Thread,
            1 => ProgressMode::Caller,
            other => ProgressMode::Other(other),
        }
    }
}

/// Options of [`Agent::new`] (`pdkv_agent_options_t`); every unset field takes the library's
/// default. Builder style: `AgentOptions::new(&metadata).transport(Transport::Tcp)`.
///
/// The pre-shared key is never printed (`Debug` shows its length only) and its copy is zeroed
/// when the options are dropped.
#[derive(Clone)]
pub struct AgentOptions<'a> {
    metadata: &'a EngineMetadata,
    listen_address: Option<String>,
    transport: Option<Transport>,
    progress_mode: Option<ProgressMode>,
    default_timeout: Option<Duration>,
    preshared_key: Option<SecretKey>,
    heartbeat: Option<(Duration, Duration)>,
    max_outstanding: Option<u32>,
    copy_threads: Option<u32>,
    seal_data: Option<bool>,
    min_peer_protocol_minor: Option<u16>,
}

impl fmt::Debug for AgentOptions<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentOptions")
            .field("metadata", &self.metadata)
            .field("listen_address", &self.listen_address)
            .field("transport", &self.transport)
            .field("progress_mode", &self.progress_mode)
            .field("default_timeout", &self.default_timeout)
            .field(
                "preshared_key",
                &self
                    .preshared_key
                    .as_ref()
                    .map(|k| format!("<{} bytes, not shown>", k.0.len())),
            )
            .field("heartbeat", &self.heartbeat)
            .field("max_outstanding", &self.max_outstanding)
            .field("copy_threads", &self.copy_threads)
            .field("seal_data", &self.seal_data)
            .field("min_peer_protocol_minor", &self.min_peer_protocol_minor)
            .finish()
    }
}

/// A copy of a pre-shared key, zeroed when dropped (a type of its own, without the options'
/// lifetime, so that `AgentOptions` itself needs no `Drop` and borrows as before).
#[derive(Clone)]
struct SecretKey(Vec<u8>);

impl SecretKey {
    fn wipe(&mut self) {
        for b in self.0.iter_mut() {
            // SAFETY: `b` is a valid, aligned, exclusive reference to one byte; a volatile store
            // is one the optimizer may not drop as dead.
            unsafe { ptr::write_volatile(b, 0) };
        }
        std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for SecretKey {
    fn drop(&mut self) {
        self.wipe();
    }
}

#[cfg(test)]
mod secret_key_tests {
    #[test]
    fn wipe_zeroes_every_byte() {
        let mut k = super::SecretKey(b"0123456789abcdef-key".to_vec());
        k.wipe();
        assert_eq!(k.0, vec![0u8; 20]);
    }
}

impl<'a> AgentOptions<'a> {
    /// Options for the rank described by `metadata` (copied by the agent).
    pub fn new(metadata: &'a EngineMetadata) -> AgentOptions<'a> {
        AgentOptions {
            metadata,
            listen_address: None,
            transport: None,
            progress_mode: None,
            default_timeout: None,
            preshared_key: None,
            heartbeat: None,
            max_outstanding: None,
            copy_threads: None,
            seal_data: None,
            min_peer_protocol_minor: None,
        }
    }

    /// Control listener "host:port" (port 0 picks a free one). Default "127.0.0.1:0".
    #[must_use]
    pub fn listen_address(mut self, address: impl Into<String>) -> Self {
        self.listen_address = Some(address.into());
        self
    }

    /// Data transport. Default [`Transport::Auto`].
    #[must_use]
    pub fn transport(mut self, transport: Transport) -> Self {
        self.transport = Some(transport);
        self
    }

    /// Progress mode. Default [`ProgressMode::Thread`].
    #[must_use]
    pub fn progress_mode(mut self, mode: ProgressMode) -> Self {
        self.progress_mode = Some(mode);
        self
    }

    /// Deadline of connects and transfers posted without one. Default 30 s.
    #[must_use]
    pub fn default_timeout(mut self, timeout: Duration) -> Self {
        self.default_timeout = Some(timeout);
        self
    }

    /// Pre-shared key both sides must hold (at least 16 bytes, copied). Default: none.
    #[must_use]
    pub fn preshared_key(mut self, key: &[u8]) -> Self {
        self.preshared_key = Some(SecretKey(key.to_vec()));
        self
    }

    /// Heartbeat period and the silence after which a peer is lost, on its control channel or on
    /// a tcp data connection with work pending (a caller-progress agent must call progress at
    /// least this often while a transfer moves). Default 500 ms / 5 s.
    #[must_use]
    pub fn heartbeat(mut self, interval: Duration, timeout: Duration) -> Self {
        self.heartbeat = Some((interval, timeout));
        self
    }

    /// The most operations (plan reads) in flight per peer, across all transfers with that
    /// peer, which take turns (`pdkv_agent_options_t.max_outstanding`). Default 64.
    #[must_use]
    pub fn max_outstanding(mut self, n: u32) -> Self {
        self.max_outstanding = Some(n);
        self
    }

    /// Threads that copy each shm batch, 1 to 16 (`pdkv_agent_options_t.copy_threads`).
    /// Default: 2 where the machine has at least 4 hardware threads, else 1.
    #[must_use]
    pub fn copy_threads(mut self, n: u32) -> Self {
        self.copy_threads = Some(n);
        self
    }

    /// With a pre-shared key, whether the TCP data connections are sealed (AES-256-GCM;
    /// `pdkv_agent_options_t.seal_data`). `false` sends them in clear, for trusted fabrics
    /// only; both agents of a pair must agree (a mismatch is refused at connect with
    /// [`Status::Auth`]). `true` without a key is refused. Default: sealed with a key.
    #[must_use]
    pub fn seal_data(mut self, seal: bool) -> Self {
        self.seal_data = Some(seal);
        self
    }

    /// Since 2.7: refuse peers running an older control protocol minor at connect
    /// ([`Status::Incompatible`] naming both versions;
    /// `pdkv_agent_options_t.min_peer_protocol_minor`). 5 guarantees every transfer asks the
    /// other side about its lease; above this build's minor is refused. Default: any.
    #[must_use]
    pub fn min_peer_protocol_minor(mut self, minor: u16) -> Self {
        self.min_peer_protocol_minor = Some(minor);
        self
    }
}

/// Scalars of an agent (`pdkv_agent_info_t`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentInfo {
    /// This rank's engine id.
    pub engine_id: String,
    /// This rank.
    pub tp_rank: u32,
    /// Its TP size.
    pub tp_size: u32,
    /// "host:port" actually bound.
    pub listen_address: String,
    /// The bound port.
    pub port: u16,
    /// Transport.
    pub transport: Transport,
    /// Progress mode.
    pub progress_mode: ProgressMode,
    /// Peers currently connected.
    pub num_peers: usize,
    /// Transfers in flight.
    pub transfers_in_flight: usize,
    /// Threads copying each shm batch (the option or its default).
    pub copy_threads: u32,
}

/// What outlives the C agent for the binding's sake: the registered buffers, which must stay
/// allocated until nothing of the agent (registrations, transfers, peers) can touch them.
///
/// `buffers` holds those of dropped registrations, even when their deregistration succeeded:
/// a same-host peer connected earlier writes a region with process_vm_writev at the address it
/// was told, without asking this side, so freeing the buffer then would let a stale write land
/// in reused memory. The list stays bounded by the region count: a region is registered only
/// at its advertised base, which a kept buffer occupies, so no second buffer can be registered
/// for it (an engine that cycles registrations uses `register_memory` on memory it owns).
#[derive(Debug, Default)]
pub(crate) struct Shared {
    buffers: Mutex<Vec<Arc<HostBuffer>>>,
}

impl Shared {
    pub(crate) fn keep(&self, b: Arc<HostBuffer>) {
        self.buffers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(b);
    }

    fn kept(&self) -> usize {
        self.buffers.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// One engine rank's executor (`pdkv_agent_t`): UCX context and worker, control listener,
/// peers. Dropping it shuts it down (transfers in flight fail with [`Status::Shutdown`], peers
/// are told goodbye); handles taken from it stay usable and report that state.
#[derive(Debug)]
pub struct Agent {
    ptr: NonNull<sys::pdkv_agent_t>,
    shared: Arc<Shared>,
    // Notifications taken from the library but not yet returned (wait_notification keeps
    // those that did not match here, so nothing is lost), and whether a wait_notification
    // sleeps on the event fd (for the sleep only); the other waiters sleep on `pending_cv`,
    // notified whenever notifications come into the queue or the waiter that last slept on
    // the fd returns.
    pending: Mutex<Pending>,
    pending_cv: Condvar,
    // Runs before each sleep of a wait_notification on the event fd (set by tests).
    before_sleep: std::sync::OnceLock<Hook>,
}

/// A test hook (see [`Agent::set_before_sleep`]).
struct Hook(Box<dyn Fn() + Send + Sync>);

impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hook")
    }
}

#[derive(Debug, Default)]
struct Pending {
    // Each with an id (its number in `queued`, the count of notifications ever queued) that
    // names it while a predicate looks at a copy of the queue without the lock.
    queue: VecDeque<(u64, Notification)>,
    queued: u64,
    leading: bool,
}

// SAFETY: pdkv/agent.h: every agent function may be called from any thread, concurrently with
// any other; pdkv_agent_free (Drop) needs exclusive ownership, which Drop has.
unsafe impl Send for Agent {}
// SAFETY: as above.
unsafe impl Sync for Agent {}

impl Drop for Agent {
    fn drop(&mut self) {
        // SAFETY: owned handle; no call on it can be running (Drop has exclusive access).
        unsafe { sys::pdkv_agent_free(self.ptr.as_ptr()) }
    }
}

impl Agent {
    /// Creates an agent (`pdkv_agent_new`): the control listener is bound before this returns.
    pub fn new(options: &AgentOptions<'_>) -> Result<Agent> {
        // SAFETY: plain-data struct, all-zero valid.
        let mut raw: sys::pdkv_agent_options_t = unsafe { zeroed() };
        raw.struct_size = size_of::<sys::pdkv_agent_options_t>();
        raw.metadata = options.metadata.as_ptr();
        let address = match &options.listen_address {
            Some(a) => Some(cstring(a, "listen address")?),
            None => None,
        };
        if let Some(a) = &address {
            raw.field_mask |= FIELD_LISTEN_ADDRESS;
            raw.listen_address = a.as_ptr();
        }
        if let Some(t) = options.transport {
            raw.field_mask |= FIELD_TRANSPORT;
            raw.transport = t.raw();
        }
        if let Some(m) = options.progress_mode {
            raw.field_mask |= FIELD_PROGRESS_MODE;
            raw.progress_mode = m.raw();
        }
        if let Some(d) = options.default_timeout {
            raw.field_mask |= FIELD_DEFAULT_TIMEOUT;
            raw.default_timeout_ms = millis("default_timeout", d, u64::MAX)?;
        }
        if let Some(SecretKey(k)) = &options.preshared_key {
            raw.field_mask |= FIELD_PRESHARED_KEY;
            raw.preshared_key = if k.is_empty() {
                ptr::null()
            } else {
                k.as_ptr()
            };
            raw.preshared_key_len = k.len();
        }
        if let Some((interval, timeout)) = options.heartbeat {
            raw.field_mask |= FIELD_HEARTBEAT;
            raw.heartbeat_interval_ms =
                millis("heartbeat interval", interval, u32::MAX.into())? as u32;
            raw.heartbeat_timeout_ms =
                millis("heartbeat timeout", timeout, u32::MAX.into())? as u32;
        }
        if let Some(n) = options.max_outstanding {
            raw.field_mask |= FIELD_MAX_OUTSTANDING;
            raw.max_outstanding = n;
        }
        if let Some(n) = options.copy_threads {
            raw.field_mask |= FIELD_COPY_THREADS;
            raw.copy_threads = n;
        }
        if let Some(seal) = options.seal_data {
            raw.field_mask |= FIELD_SEAL_DATA;
            raw.seal_data = u8::from(seal);
        }
        if let Some(minor) = options.min_peer_protocol_minor {
            raw.field_mask |= FIELD_MIN_PEER_PROTOCOL_MINOR;
            raw.min_peer_protocol_minor = minor;
        }
        let mut out = ptr::null_mut();
        // SAFETY: raw and the strings/key it points to live for the call; all copied.
        check(|e| unsafe { sys::pdkv_agent_new(&raw, &mut out, e) })?;
        let ptr = NonNull::new(out)
            .ok_or_else(|| Error::new(Status::Internal, "pdkv returned a NULL agent"))?;
        Ok(Agent {
            ptr,
            shared: Arc::default(),
            pending: Mutex::default(),
            pending_cv: Condvar::new(),
            before_sleep: std::sync::OnceLock::new(),
        })
    }

    /// The raw handle, borrowed (still owned by `self`).
    pub fn as_ptr(&self) -> *mut sys::pdkv_agent_t {
        self.ptr.as_ptr()
    }

    pub(crate) fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    /// Makes `f` run before each sleep of [`Agent::wait_notification`] on the event fd (for
    /// tests; once per agent, before any wait).
    #[doc(hidden)]
    pub fn set_before_sleep(&self, f: impl Fn() + Send + Sync + 'static) {
        let _ = self.before_sleep.set(Hook(Box::new(f)));
    }

    /// How many buffers of dropped registrations the agent keeps alive (for tests).
    #[doc(hidden)]
    pub fn kept_buffers(&self) -> usize {
        self.shared.kept()
    }

    /// The scalars (`pdkv_agent_get_info`).
    pub fn info(&self) -> Result<AgentInfo> {
        // SAFETY: plain-data struct, all-zero valid.
        let mut r: sys::pdkv_agent_info_t = unsafe { zeroed() };
        r.struct_size = size_of::<sys::pdkv_agent_info_t>();
        // SAFETY: live handle, valid out struct.
        check(|e| unsafe { sys::pdkv_agent_get_info(self.ptr.as_ptr(), &mut r, e) })?;
        Ok(AgentInfo {
            // SAFETY: strings owned by the live agent; copied now.
            engine_id: unsafe { borrowed_str(r.engine_id) }.to_owned(),
            tp_rank: r.tp_rank,
            tp_size: r.tp_size,
            listen_address: unsafe { borrowed_str(r.listen_address) }.to_owned(),
            port: r.port,
            transport: Transport::from_raw(r.transport),
            progress_mode: ProgressMode::from_raw(r.progress_mode),
            num_peers: r.num_peers,
            transfers_in_flight: r.transfers_in_flight,
            copy_threads: r.copy_threads,
        })
    }

    /// Drives progress once without blocking (`pdkv_agent_progress`); returns the completions
    /// handled. Needed in [`ProgressMode::Caller`], harmless otherwise.
    pub fn progress(&self) -> Result<u32> {
        let mut events = 0u32;
        // SAFETY: live handle, valid out pointer.
        check(|e| unsafe { sys::pdkv_agent_progress(self.ptr.as_ptr(), &mut events, e) })?;
        Ok(events)
    }

    /// A file descriptor that is readable when [`Agent::progress`] or
    /// [`Agent::poll_notifications`] has work (level-triggered; owned by the agent: never
    /// close it) (`pdkv_agent_event_fd`).
    pub fn event_fd(&self) -> Result<std::os::fd::RawFd> {
        let mut fd = -1;
        // SAFETY: live handle, valid out pointer.
        check(|e| unsafe { sys::pdkv_agent_event_fd(self.ptr.as_ptr(), &mut fd, e) })?;
        Ok(fd)
    }

    /// Registers a region's memory by address (`pdkv_agent_register_memory`). The range must
    /// equal the region the metadata advertises.
    ///
    /// # Safety
    /// `[address, address + length)` must stay valid for reads and writes by peers and by the
    /// agent's transfers until the agent, this registration and every transfer of the agent are
    /// dropped, and must not be accessed through Rust references while a transfer may write
    /// it. [`Agent::register_buffer`] is the safe form.
    pub unsafe fn register_memory(&self, desc: &MemoryDesc) -> Result<Memory> {
        let raw = desc.to_raw();
        let mut out = ptr::null_mut();
        check(|e| sys::pdkv_agent_register_memory(self.ptr.as_ptr(), &raw, &mut out, e))?;
        Memory::new(out, None, self.shared())
    }

    /// Registers `buffer` as the memory of `region` (its address must be the region's
    /// advertised base and its length the region's size). The registration owns the buffer
    /// and keeps it allocated until nothing of this agent can touch it.
    pub fn register_buffer(&self, region: u32, buffer: HostBuffer) -> Result<Memory> {
        let desc = MemoryDesc {
            region,
            address: buffer.addr(),
            length: buffer.len() as u64,
            memory_type: crate::memory::MemoryType::Host,
            device: 0,
        };
        let raw = desc.to_raw();
        let buffer = Arc::new(buffer);
        let mut out = ptr::null_mut();
        // SAFETY: the buffer is owned by the registration, then by the keep-alive list, so it
        // outlives every use the library or a peer can make of it.
        check(|e| unsafe {
            sys::pdkv_agent_register_memory(self.ptr.as_ptr(), &raw, &mut out, e)
        })?;
        Memory::new(out, Some(buffer), self.shared())
    }

    /// Connects to the agent at `address` ("host:port") and runs the handshake, blocking
    /// until done or `timeout` (None: the agent's default) (`pdkv_agent_connect`).
    pub fn connect(&self, address: &str, timeout: Option<Duration>) -> Result<Peer> {
        let a = cstring(address, "peer address")?;
        let raw = sys::pdkv_connect_options_t {
            struct_size: size_of::<sys::pdkv_connect_options_t>(),
            field_mask: if timeout.is_some() {
                FIELD_CONNECT_TIMEOUT
            } else {
                0
            },
            address: a.as_ptr(),
            timeout_ms: match timeout {
                Some(d) => millis("connect timeout", d, u64::MAX)?,
                None => 0,
            },
        };
        let mut out = ptr::null_mut();
        // SAFETY: raw and the address live for the call.
        check(|e| unsafe { sys::pdkv_agent_connect(self.ptr.as_ptr(), &raw, &mut out, e) })?;
        Peer::new(out, self.shared())
    }

    /// The connected peer `(engine_id, tp_rank)`, whichever side connected
    /// (`pdkv_agent_find_peer`): [`Status::NotFound`] when there is none,
    /// [`Status::InvalidArgument`] when the engine is connected as several pipeline stages at
    /// `tp_rank` (use [`Agent::find_stage_peer`]).
    pub fn find_peer(&self, engine_id: &str, tp_rank: u32) -> Result<Peer> {
        let id = cstring(engine_id, "engine id")?;
        let mut out = ptr::null_mut();
        // SAFETY: live handle, valid string and out pointer.
        check(|e| unsafe {
            sys::pdkv_agent_find_peer(self.ptr.as_ptr(), id.as_ptr(), tp_rank, &mut out, e)
        })?;
        Peer::new(out, self.shared())
    }

    /// The connected peer `(engine_id, pipeline stage pp_rank, tp_rank)`
    /// (`pdkv_agent_find_stage_peer`): [`Status::NotFound`] when there is none. Use it when an
    /// engine is connected as several stages, where [`Agent::find_peer`] refuses to pick one.
    pub fn find_stage_peer(&self, engine_id: &str, pp_rank: u32, tp_rank: u32) -> Result<Peer> {
        let id = cstring(engine_id, "engine id")?;
        let mut out = ptr::null_mut();
        // SAFETY: live handle, valid string and out pointer.
        check(|e| unsafe {
            sys::pdkv_agent_find_stage_peer(
                self.ptr.as_ptr(),
                id.as_ptr(),
                pp_rank,
                tp_rank,
                &mut out,
                e,
            )
        })?;
        Peer::new(out, self.shared())
    }

    /// Posts a transfer and returns at once (`pdkv_agent_post`); see [`TransferParams`].
    pub fn post(&self, params: &TransferParams<'_>) -> Result<Transfer> {
        let peer = cstring(params.peer_engine_id, "peer engine id")?;
        let request = cstring(params.request_id, "request id")?;
        let mut mask = 0;
        let mut timeout_ms = 0;
        if let Some(d) = params.timeout {
            mask |= FIELD_TRANSFER_TIMEOUT;
            timeout_ms = millis("transfer timeout", d, u64::MAX)?;
        }
        if params.notify.is_some() {
            mask |= FIELD_TRANSFER_NOTIFY;
        }
        if params.confirm_lease.is_some() {
            mask |= FIELD_TRANSFER_CONFIRM_LEASE;
        }
        let raw = sys::pdkv_transfer_params_t {
            struct_size: size_of::<sys::pdkv_transfer_params_t>(),
            field_mask: mask,
            op: params.op.raw(),
            plan: params.plan.as_ptr(),
            peer_engine_id: peer.as_ptr(),
            request_id: request.as_ptr(),
            timeout_ms,
            notify: params.notify.unwrap_or(true) as u8,
            confirm_lease: params.confirm_lease.unwrap_or(true) as u8,
        };
        let mut out = ptr::null_mut();
        // SAFETY: raw, the strings and the plan live for the call; the plan is copied.
        check(|e| unsafe { sys::pdkv_agent_post(self.ptr.as_ptr(), &raw, &mut out, e) })?;
        Transfer::new(out, self.shared())
    }

    /// Leases a request's blocks on this rank (`pdkv_agent_lease`): after `expected` successful
    /// READ_DONE / WRITE_DONE notifications for `request_id` from distinct ranks of one remote
    /// engine (ranks of another engine notifying the same id never add up with them) a
    /// [`NotificationKind::RequestComplete`] follows, or [`NotificationKind::LeaseExpired`]
    /// once `ttl` passes first. A reader's READ of the request keeps the lease open while it
    /// reads (2.7).
    pub fn lease(&self, request_id: &str, expected: u32, ttl: Duration) -> Result<()> {
        let id = cstring(request_id, "request id")?;
        let ttl_ms = millis("lease ttl", ttl, u64::MAX)?;
        // SAFETY: live handle, valid string.
        check(|e| unsafe {
            sys::pdkv_agent_lease(self.ptr.as_ptr(), id.as_ptr(), expected, ttl_ms, e)
        })
    }

    /// Asks every connected rank of engine `peer_engine_id` (all its pipeline stages) to keep
    /// its leases of `request_ids` open (`pdkv_agent_keep_leases`): each such rank moves the
    /// deadline of each of those requests it leases to at least now + that lease's own ttl; ids
    /// it does not lease are ignored there. Call it on a reader (D) for requests it will read
    /// later, more often than the other side's ttl, as vLLM's `HB:` notifications do. Returns
    /// once the frames are queued. Errors: [`Status::NotFound`] (no connected rank of that
    /// engine), [`Status::Incompatible`] (a rank runs control protocol before 3.4; nothing is
    /// sent), [`Status::InvalidArgument`] (an empty, long or NUL-holding id).
    pub fn keep_leases<S: AsRef<str>>(
        &self,
        peer_engine_id: &str,
        request_ids: &[S],
    ) -> Result<()> {
        let engine = cstring(peer_engine_id, "peer engine id")?;
        let ids = request_ids
            .iter()
            .enumerate()
            .map(|(i, id)| cstring(id.as_ref(), &format!("request_ids[{i}]")))
            .collect::<Result<Vec<_>>>()?;
        let ptrs: Vec<*const std::os::raw::c_char> = ids.iter().map(|s| s.as_ptr()).collect();
        // SAFETY: live handle; `ptrs` holds ptrs.len() valid strings that outlive the call (the
        // library reads them during the call only).
        check(|e| unsafe {
            sys::pdkv_agent_keep_leases(
                self.ptr.as_ptr(),
                engine.as_ptr(),
                ptrs.as_ptr(),
                ptrs.len(),
                e,
            )
        })
    }

    /// Takes every pending notification, oldest first (`pdkv_agent_poll_notifications`),
    /// including those [`Agent::wait_notification`] took but did not return.
    pub fn poll_notifications(&self) -> Result<Vec<Notification>> {
        let mut p = self.pending_state();
        self.take_into(&mut p)?;
        Ok(p.queue.drain(..).map(|(_, n)| n).collect())
    }

    /// Waits until a notification satisfies `pred` or `timeout` passes, and returns it (None
    /// on timeout). The others stay pending, in order, for the next poll or wait. In
    /// [`ProgressMode::Caller`] it drives [`Agent::progress`] as it waits.
    ///
    /// It sleeps on the agent's [`Agent::event_fd`] (`poll(2)`), so it wakes when a
    /// notification arrives or progress has work, not on a timer. Several threads may wait at
    /// once, with different predicates: one of them sleeps on the descriptor, the others on a
    /// condition variable that every take of notifications into the shared queue signals
    /// (only the one on the descriptor takes them while it sleeps there).
    ///
    /// `pred` runs without any lock of the agent's held, on a copy of the queue, so it may call
    /// this agent's [`Agent::poll_notifications`] or another wait (it cannot drop the agent it
    /// borrows). A notification it matches is returned only if it is still pending by then (a
    /// poll or another wait may have taken it meanwhile: the wait looks again), so each is
    /// delivered to exactly one caller. It may be called more than once on the same
    /// notification.
    pub fn wait_notification(
        &self,
        timeout: Duration,
        mut pred: impl FnMut(&Notification) -> bool,
    ) -> Result<Option<Notification>> {
        // None: a timeout too long for an Instant, waited without end.
        let end = Instant::now().checked_add(timeout);
        let fd = self.event_fd()?;
        // Some while this wait slept on the event fd and has not seen another waiter take that
        // over since: the waiters on the condition variable may be waiting for it, so it wakes
        // them when the wait ends, by a return, an error or a panic of pred.
        let mut led: Option<Led<'_>> = None;
        let mut ready = true; // drive progress before the next look (first, or fd readable)
        loop {
            if ready {
                self.progress()?;
            }
            let (candidates, queued) = {
                let mut p = self.pending_state();
                let before = p.queued;
                // Not while another wait sleeps on the event fd: a take here drains it under
                // that wait, which then slept on with what only it matched in the queue. It
                // takes them itself when it wakes (and wakes this one).
                let taken = if p.leading {
                    Ok(())
                } else {
                    self.take_into(&mut p)
                };
                if p.queued != before {
                    self.pending_cv.notify_all(); // other waiters' predicates may match
                }
                taken?;
                (p.queue.clone(), p.queued)
            };
            // pred runs without the lock: with it held, a pred calling poll_notifications or
            // another wait on this agent deadlocked.
            let id = candidates.iter().find(|(_, n)| pred(n)).map(|(id, _)| *id);
            let mut p = self.pending_state();
            if let Some(id) = id {
                if let Some(i) = p.queue.iter().position(|(q, _)| *q == id) {
                    return Ok(p.queue.remove(i).map(|(_, n)| n)); // still pending: it is ours
                }
            }
            ready = false;
            if id.is_some() || p.queued != queued {
                continue; // the queue moved while pred ran: look again
            }
            let left = match end {
                Some(end) => match end.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => return Ok(None),
                },
                None => None,
            };
            if p.leading {
                led = None; // the waiter on the fd wakes the others when it returns
                let p = match left {
                    Some(left) => self
                        .pending_cv
                        .wait_timeout(p, left)
                        .map(|(p, _)| p)
                        .unwrap_or_else(|e| e.into_inner().0),
                    None => self.pending_cv.wait(p).unwrap_or_else(|e| e.into_inner()),
                };
                drop(p);
                continue;
            }
            p.leading = true;
            led.get_or_insert(Led(self));
            drop(p);
            if let Some(Hook(f)) = self.before_sleep.get() {
                f();
            }
            let slept = wait_readable(fd, left);
            // Given up while this wait looks and runs pred (a wait in pred takes it then);
            // taken again before the next sleep unless another waiter has.
            self.pending_state().leading = false;
            ready = slept?;
        }
    }

    fn pending_state(&self) -> MutexGuard<'_, Pending> {
        // No code that can panic runs with the lock held (predicates run without it); recover
        // a poisoned lock anyway: the queue stays consistent.
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends the library's pending notifications to `p`'s queue, numbering them.
    fn take_into(&self, p: &mut Pending) -> Result<()> {
        let mut list = ptr::null_mut();
        // SAFETY: live handle, valid out pointer.
        check(|e| unsafe { sys::pdkv_agent_poll_notifications(self.ptr.as_ptr(), &mut list, e) })?;
        struct Guard(*mut sys::pdkv_notification_list_t);
        impl Drop for Guard {
            fn drop(&mut self) {
                // SAFETY: we own the list; NULL allowed.
                unsafe { sys::pdkv_notification_list_free(self.0) }
            }
        }
        let g = Guard(list);
        let (mut items, mut n) = (ptr::null(), 0usize);
        // SAFETY: live list, valid out pointers.
        check(|e| unsafe { sys::pdkv_notification_list_items(g.0, &mut items, &mut n, e) })?;
        // SAFETY: n items owned by the live list, copied below before it is freed.
        for r in unsafe { slice(items, n) } {
            p.queued += 1;
            let id = p.queued;
            p.queue.push_back((
                id,
                Notification {
                    kind: NotificationKind::from_raw(r.kind),
                    status: status_of(r.status),
                    // SAFETY: strings owned by the live list; copied now.
                    request_id: unsafe { borrowed_str(r.request_id) }.to_owned(),
                    engine_id: unsafe { borrowed_str(r.engine_id) }.to_owned(),
                    tp_rank: r.tp_rank,
                    count: r.count,
                    expected: r.expected,
                    bytes: r.bytes,
                    pp_rank: r.pp_rank,
                },
            ));
        }
        Ok(())
    }
}

/// Held by a [`Agent::wait_notification`] that slept on the event fd (which it gives back
/// after each sleep) until it sees another waiter sleep there; dropping it wakes the other
/// waiters, so that one of them takes over.
struct Led<'a>(&'a Agent);

impl Drop for Led<'_> {
    fn drop(&mut self) {
        // `leading` was cleared under the lock after the sleep: a waiter that saw it set is
        // already waiting, so a notify without the lock reaches it.
        self.0.pending_cv.notify_all();
    }
}

#[repr(C)]
struct PollFd {
    fd: std::os::raw::c_int,
    events: std::os::raw::c_short,
    revents: std::os::raw::c_short,
}

const POLLIN: std::os::raw::c_short = 0x1;

extern "C" {
    // poll(2) of the C library (linked anyway): no crate needed for one call.
    fn poll(
        fds: *mut PollFd,
        nfds: std::os::raw::c_ulong,
        timeout: std::os::raw::c_int,
    ) -> std::os::raw::c_int;
}

/// Sleeps until `fd` is readable or `left` passes (None: no limit), rounded up to whole
/// milliseconds. True when readable; false after the time or a signal (the caller looks again).
fn wait_readable(fd: std::os::fd::RawFd, left: Option<Duration>) -> Result<bool> {
    let ms = match left {
        Some(d) => i32::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(i32::MAX),
        None => -1,
    };
    let mut p = PollFd {
        fd,
        events: POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the call; the agent owns fd and outlives the wait (&self).
    let r = unsafe { poll(&mut p, 1, ms) };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(Error::new(
            Status::Io,
            format!("poll of the agent's event fd {fd}: {e}"),
        ));
    }
    Ok(r > 0)
}

/// `None` for PDKV_OK, else the status.
pub(crate) fn status_of(raw: i32) -> Option<Status> {
    if raw == sys::PDKV_OK as i32 {
        None
    } else {
        Some(Status::from_raw(raw as sys::pdkv_status_t))
    }
}

/// Kinds of notification (`pdkv_notification_kind_t`).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NotificationKind {
    /// (On P) a D rank finished reading a request from this rank.
    ReadDone,
    /// (On D) a P rank finished writing a request into this rank.
    WriteDone,
    /// A leased request received its expected count.
    RequestComplete,
    /// A lease's time ran out before its count was reached.
    LeaseExpired,
    /// A peer completed the handshake (either direction).
    PeerConnected,
    /// A peer died, closed, failed heartbeats or misbehaved.
    PeerLost,
    /// A raw value this version does not know.
    Other(i32),
}

impl NotificationKind {
    /// Maps a raw value.
    pub fn from_raw(v: i32) -> NotificationKind {
        match v {
            0 => NotificationKind::ReadDone,
            1 => NotificationKind::WriteDone,
            2 => NotificationKind::RequestComplete,
            3 => NotificationKind::LeaseExpired,
            4 => NotificationKind::PeerConnected,
            5 => NotificationKind::PeerLost,
            other => NotificationKind::Other(other),
        }
    }
}

/// One notification (`pdkv_notification_t`), copied out of the library's list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    /// What happened.
    pub kind: NotificationKind,
    /// None: success; else the failure a peer reported, or why a peer was lost.
    pub status: Option<Status>,
    /// The request ("" for peer notifications).
    pub request_id: String,
    /// The remote engine ("" for lease notifications).
    pub engine_id: String,
    /// The remote rank.
    pub tp_rank: u32,
    /// Successful notifications received for the request so far.
    pub count: u32,
    /// The lease's expected count (0: no lease).
    pub expected: u32,
    /// Bytes the sender moved for this request.
    pub bytes: u64,
    /// The remote rank's pipeline stage (0 without pipeline parallelism).
    pub pp_rank: u32,
}

/// A peer's identity, state and counters (`pdkv_peer_info_t`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerInfo {
    /// Remote engine id.
    pub engine_id: String,
    /// Remote rank.
    pub tp_rank: u32,
    /// The control connection's remote "ip:port".
    pub address: String,
    /// False once lost or disconnected.
    pub connected: bool,
    /// The peer connected to us.
    pub inbound: bool,
    /// Transport chosen for this peer.
    pub transport: Transport,
    /// Why it was lost (None while connected).
    pub lost_status: Option<Status>,
    /// Bytes read by READ transfers from this peer.
    pub bytes_read: u64,
    /// Bytes written by WRITE transfers into this peer.
    pub bytes_written: u64,
    /// Transfers done.
    pub transfers_done: u64,
    /// Transfers failed.
    pub transfers_failed: u64,
    /// UCX operations that completed with an error.
    pub operations_failed: u64,
    /// Notifications sent.
    pub notifications_sent: u64,
    /// Notifications received.
    pub notifications_received: u64,
    /// Last heartbeat round trip.
    pub heartbeat_rtt: Duration,
    /// The peer's regions mapped at connect (same-host peers whose regions lie in
    /// [`HostBuffer::new_shared`] memory): their bytes move with memcpy, the others' with
    /// cross-memory attach.
    pub mapped_regions: u32,
    /// Bytes copied through those mappings.
    pub bytes_mapped: u64,
    /// Request ids this side asked the peer to keep leased ([`Agent::keep_leases`]).
    pub lease_keeps_sent: u64,
    /// Request ids the peer asked this side to keep leased.
    pub lease_keeps_received: u64,
}

/// A connected (or formerly connected) remote engine rank (`pdkv_peer_t`). Dropping the handle
/// keeps the connection; [`Peer::disconnect`] closes it.
#[derive(Debug)]
pub struct Peer {
    ptr: NonNull<sys::pdkv_peer_t>,
    _shared: Arc<Shared>,
}

// SAFETY: pdkv/agent.h documents every peer function as thread-safe; free only in Drop.
unsafe impl Send for Peer {}
// SAFETY: as above.
unsafe impl Sync for Peer {}

impl Drop for Peer {
    fn drop(&mut self) {
        // SAFETY: owned handle, exclusive in Drop.
        unsafe { sys::pdkv_peer_free(self.ptr.as_ptr()) }
    }
}

impl Peer {
    fn new(ptr: *mut sys::pdkv_peer_t, shared: Arc<Shared>) -> Result<Peer> {
        let ptr = NonNull::new(ptr)
            .ok_or_else(|| Error::new(Status::Internal, "pdkv returned a NULL peer"))?;
        Ok(Peer {
            ptr,
            _shared: shared,
        })
    }

    /// Identity, state and counters (`pdkv_peer_get_info`).
    pub fn info(&self) -> Result<PeerInfo> {
        // SAFETY: plain-data struct, all-zero valid.
        let mut r: sys::pdkv_peer_info_t = unsafe { zeroed() };
        r.struct_size = size_of::<sys::pdkv_peer_info_t>();
        // SAFETY: live handle, valid out struct.
        check(|e| unsafe { sys::pdkv_peer_get_info(self.ptr.as_ptr(), &mut r, e) })?;
        Ok(PeerInfo {
            // SAFETY: strings owned by the live peer handle; copied now.
            engine_id: unsafe { borrowed_str(r.engine_id) }.to_owned(),
            tp_rank: r.tp_rank,
            address: unsafe { borrowed_str(r.address) }.to_owned(),
            connected: r.connected != 0,
            inbound: r.inbound != 0,
            transport: Transport::from_raw(r.transport),
            lost_status: status_of(r.lost_status),
            bytes_read: r.bytes_read,
            bytes_written: r.bytes_written,
            transfers_done: r.transfers_done,
            transfers_failed: r.transfers_failed,
            operations_failed: r.operations_failed,
            notifications_sent: r.notifications_sent,
            notifications_received: r.notifications_received,
            heartbeat_rtt: Duration::from_micros(r.heartbeat_rtt_us),
            mapped_regions: r.mapped_regions,
            bytes_mapped: r.bytes_mapped,
            lease_keeps_sent: r.lease_keeps_sent,
            lease_keeps_received: r.lease_keeps_received,
        })
    }

    /// A copy of the metadata the peer advertised (`pdkv_peer_metadata`).
    pub fn metadata(&self) -> Result<EngineMetadata> {
        let mut out = ptr::null_mut();
        // SAFETY: live handle, valid out pointer.
        check(|e| unsafe { sys::pdkv_peer_metadata(self.ptr.as_ptr(), &mut out, e) })?;
        EngineMetadata::wrap(out)
    }

    /// Closes the connection (`pdkv_peer_disconnect`); transfers in flight with this peer fail
    /// with [`Status::PeerLost`]. Fine on a lost peer.
    pub fn disconnect(&self) -> Result<()> {
        // SAFETY: live handle.
        check(|e| unsafe { sys::pdkv_peer_disconnect(self.ptr.as_ptr(), e) })
    }
}
