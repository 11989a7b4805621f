//! Transfers (`pdkv_transfer_t`): one posted plan being executed by an [`Agent`](crate::Agent).
use crate::agent::{millis, status_of, Shared};
use crate::error::{Error, Result, Status};
use crate::ffi_util::{check, slice};
use crate::plan::TransferPlan;
use pdkv_sys as sys;
use std::mem::{size_of, zeroed};
use std::ptr::{self, NonNull};
use std::sync::Arc;
use std::time::Duration;

/// Direction of a transfer (`pdkv_transfer_op_t`).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TransferOp {
    /// Posted by the D rank the plan was compiled for: D pulls from the P ranks.
    #[default]
    Read,
    /// Posted by a P rank with the same plan: it pushes its own reads into the D rank.
    Write,
    /// A raw value this version does not know (the library refuses it).
    Other(i32),
}

impl TransferOp {
    /// The raw value.
    pub fn raw(self) -> i32 {
        match self {
            TransferOp::Read => 0,
            TransferOp::Write => 1,
            TransferOp::Other(v) => v,
        }
    }
}

/// State of a transfer (`pdkv_transfer_state_t`).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransferState {
    /// Still moving.
    InFlight,
    /// Every byte is in place (remotely complete for a write).
    Done,
    /// Failed: see the status and [`Transfer::failed_reads`].
    Failed,
    /// A raw value this version does not know.
    Other(i32),
}

impl TransferState {
    /// Maps a raw value.
    pub fn from_raw(v: i32) -> TransferState {
        match v {
            0 => TransferState::InFlight,
            1 => TransferState::Done,
            2 => TransferState::Failed,
            other => TransferState::Other(other),
        }
    }
}

/// What to execute (`pdkv_transfer_params_t`).
#[derive(Debug, Clone, Copy)]
pub struct TransferParams<'a> {
    /// Read (on D) or write (on P).
    pub op: TransferOp,
    /// The compiled plan (copied by the library).
    pub plan: &'a TransferPlan,
    /// Read: the P engine; write: the D engine.
    pub peer_engine_id: &'a str,
    /// Non-empty, at most 1024 bytes; travels in notifications.
    pub request_id: &'a str,
    /// Deadline; None: the agent's default.
    pub timeout: Option<Duration>,
    /// Notify the plan's peers after the data; None: the library's default (yes).
    pub notify: Option<bool>,
    /// Since 2.7: each peer rank first confirms its lease of `request_id` is open (a read counts
    /// its bytes, a write sends them, only then; a transfer of an ended lease fails with
    /// [`Status::TimedOut`] or [`Status::Incompatible`]); `Some(false)`: as before 2.7, one
    /// control round trip sooner. None: the library's default (yes).
    pub confirm_lease: Option<bool>,
}

impl<'a> TransferParams<'a> {
    /// A read of `plan` from engine `peer_engine_id` for `request_id`, default deadline, notify.
    pub fn read(
        plan: &'a TransferPlan,
        peer_engine_id: &'a str,
        request_id: &'a str,
    ) -> TransferParams<'a> {
        TransferParams {
            op: TransferOp::Read,
            plan,
            peer_engine_id,
            request_id,
            timeout: None,
            notify: None,
            confirm_lease: None,
        }
    }

    /// A write of `plan` into engine `peer_engine_id` for `request_id`.
    pub fn write(
        plan: &'a TransferPlan,
        peer_engine_id: &'a str,
        request_id: &'a str,
    ) -> TransferParams<'a> {
        TransferParams {
            op: TransferOp::Write,
            ..TransferParams::read(plan, peer_engine_id, request_id)
        }
    }

    /// Sets the deadline.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Sets whether the plan's peers are notified.
    #[must_use]
    pub fn notify(mut self, notify: bool) -> Self {
        self.notify = Some(notify);
        self
    }

    /// Sets whether a read waits for each P rank to confirm its lease (see
    /// [`TransferParams::confirm_lease`]).
    pub fn confirm_lease(mut self, confirm: bool) -> Self {
        self.confirm_lease = Some(confirm);
        self
    }
}

/// A transfer's progress (`pdkv_transfer_info_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransferInfo {
    /// State.
    pub state: TransferState,
    /// None, or why it failed ([`Status::TimedOut`], [`Status::Cancelled`], [`Status::PeerLost`]...).
    pub status: Option<Status>,
    /// Bytes of the plan.
    pub bytes_total: u64,
    /// Bytes moved so far.
    pub bytes_done: u64,
    /// Operations of the plan.
    pub operations_total: u64,
    /// Operations completed.
    pub operations_done: u64,
    /// Plan reads that did not complete.
    pub reads_failed: u64,
    /// From post to the final state (or now).
    pub elapsed: Duration,
}

/// One plan read that did not complete (`pdkv_failed_read_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailedRead {
    /// The P rank whose read list holds it.
    pub p_tp_rank: u32,
    /// Index in [`TransferPlan::rank_reads`]`(p_tp_rank)`.
    pub read_index: u64,
    /// Why.
    pub status: Status,
}

/// One posted transfer (`pdkv_transfer_t`). Dropping it cancels a transfer still in flight
/// (its resources are released when its last operation ends); to let a transfer finish, wait
/// for it first.
#[derive(Debug)]
pub struct Transfer {
    ptr: NonNull<sys::pdkv_transfer_t>,
    _shared: Arc<Shared>,
}

// SAFETY: pdkv/agent.h documents get_info, wait, cancel and failed_reads as thread-safe
// ("several threads may wait on one transfer"); free only in Drop.
unsafe impl Send for Transfer {}
// SAFETY: as above.
unsafe impl Sync for Transfer {}

impl Drop for Transfer {
    fn drop(&mut self) {
        // SAFETY: owned handle, exclusive in Drop; the library cancels an in-flight transfer.
        unsafe { sys::pdkv_transfer_free(self.ptr.as_ptr()) }
    }
}

impl Transfer {
    pub(crate) fn new(ptr: *mut sys::pdkv_transfer_t, shared: Arc<Shared>) -> Result<Transfer> {
        let ptr = NonNull::new(ptr)
            .ok_or_else(|| Error::new(Status::Internal, "pdkv returned a NULL transfer"))?;
        Ok(Transfer {
            ptr,
            _shared: shared,
        })
    }

    /// Progress, without blocking (`pdkv_transfer_get_info`).
    pub fn info(&self) -> Result<TransferInfo> {
        // SAFETY: plain-data struct, all-zero valid.
        let mut r: sys::pdkv_transfer_info_t = unsafe { zeroed() };
        r.struct_size = size_of::<sys::pdkv_transfer_info_t>();
        // SAFETY: live handle, valid out struct.
        check(|e| unsafe { sys::pdkv_transfer_get_info(self.ptr.as_ptr(), &mut r, e) })?;
        Ok(TransferInfo {
            state: TransferState::from_raw(r.state),
            status: status_of(r.status),
            bytes_total: r.bytes_total,
            bytes_done: r.bytes_done,
            operations_total: r.operations_total,
            operations_done: r.operations_done,
            reads_failed: r.reads_failed,
            elapsed: Duration::from_micros(r.elapsed_us),
        })
    }

    /// Waits up to `timeout` for the final state (`pdkv_transfer_wait`; None: until it ends,
    /// which the transfer's own deadline bounds; `Duration::ZERO`: a poll). `Ok(true)`: done;
    /// `Ok(false)`: still in flight when the wait ended; `Err`: the transfer failed, with its
    /// status ([`Status::TimedOut`], [`Status::Cancelled`], [`Status::PeerLost`]...) and a
    /// message naming the reads and peers.
    pub fn wait(&self, timeout: Option<Duration>) -> Result<bool> {
        let ms = match timeout {
            None => u64::MAX,
            Some(d) if d.is_zero() => 0,
            // Saturate below u64::MAX, which means "forever" to the library.
            Some(d) => millis("wait timeout", d, u64::MAX - 1).unwrap_or(u64::MAX - 1),
        };
        let mut finished = 0u8;
        // SAFETY: live handle, valid out pointer.
        check(|e| unsafe { sys::pdkv_transfer_wait(self.ptr.as_ptr(), ms, &mut finished, e) })?;
        Ok(finished != 0)
    }

    /// Asks the transfer to stop (`pdkv_transfer_cancel`): it fails with
    /// [`Status::Cancelled`] once its operations in flight complete (a WRITE flushes first); no
    /// effect when finished.
    pub fn cancel(&self) -> Result<()> {
        // SAFETY: live handle.
        check(|e| unsafe { sys::pdkv_transfer_cancel(self.ptr.as_ptr(), e) })
    }

    /// A file descriptor that becomes readable once the transfer is final and stays readable
    /// (`pdkv_transfer_done_fd`, since 2.5), for an event loop (poll, epoll, mio, tokio's
    /// `AsyncFd`). Poll it only: never read or close it; it belongs to the transfer and is
    /// valid while `self` lives. In [`crate::ProgressMode::Caller`] someone must still call
    /// [`crate::Agent::progress`] for the transfer to move.
    pub fn done_fd(&self) -> Result<std::os::fd::RawFd> {
        let mut fd = -1;
        // SAFETY: live handle, valid out pointer.
        check(|e| unsafe { sys::pdkv_transfer_done_fd(self.ptr.as_ptr(), &mut fd, e) })?;
        Ok(fd)
    }

    /// The reads that did not complete, by P rank then index (empty while in flight or when
    /// done) (`pdkv_transfer_failed_reads`).
    pub fn failed_reads(&self) -> Result<Vec<FailedRead>> {
        let (mut p, mut n) = (ptr::null(), 0usize);
        // SAFETY: live handle, valid out pointers.
        check(|e| unsafe {
            sys::pdkv_transfer_failed_reads(self.ptr.as_ptr(), &mut p, &mut n, e)
        })?;
        // SAFETY: n entries owned by the transfer, copied now.
        Ok(unsafe { slice(p, n) }
            .iter()
            .map(|r| FailedRead {
                p_tp_rank: r.p_tp_rank,
                read_index: r.read_index,
                status: Status::from_raw(r.status as sys::pdkv_status_t),
            })
            .collect())
    }
}
