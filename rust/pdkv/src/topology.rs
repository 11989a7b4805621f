//! TP topology: tp_ratio, handshake targets, GQA head placement and per-rank TP mappings.
use crate::error::{Error, Result, Status};
use crate::ffi_util::{check, slice};
use pdkv_sys as sys;
use std::mem;
use std::ptr::{self, NonNull};

/// Inputs of a TP mapping: one local rank against one remote engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TpMappingParams {
    /// Local TP size.
    pub local_tp_size: u32,
    /// Local rank, `< local_tp_size`.
    pub local_tp_rank: u32,
    /// Remote TP size.
    pub remote_tp_size: u32,
    /// Total KV heads K (MLA: 1).
    pub total_kv_heads: u32,
    /// Multi-head latent attention.
    pub use_mla: bool,
    /// The model has SSM groups (always TP-sharded).
    pub has_mamba: bool,
}

/// Scalars of a TP mapping (`pdkv_tp_mapping_info_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TpMappingInfo {
    /// See [`crate::tp_ratio`].
    pub tp_ratio: i32,
    /// Head-slice offset in the remote block, in local block_lens.
    pub rank_offset_factor: u32,
    /// `local_tp_size > K`.
    pub local_replicated: bool,
    /// `remote_tp_size > K`.
    pub remote_replicated: bool,
    /// `max(1, K/local_tp_size)`.
    pub local_physical_heads: u32,
    /// `max(1, K/remote_tp_size)`.
    pub remote_physical_heads: u32,
    /// Number of attention source ranks.
    pub num_attention_reads: u32,
    /// Notifications per request on each remote (P) rank.
    pub notifications_expected: u32,
}

/// Which rank list [`TpMapping::ranks`] returns (`pdkv_tp_mapping_list_t`).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TpList {
    /// Remote ranks this rank handshakes with.
    HandshakeTargets,
    /// Remote ranks attention KV is read from (GQA dedup).
    AttentionSources,
    /// Remote ranks Mamba state is read from (empty without Mamba).
    MambaSources,
    /// Sorted union of attention and Mamba sources.
    AllSources,
    /// Parallel to `AllSources`: index into `AttentionSources`.
    AttentionSlots,
    /// Remote ranks notified per request.
    NotifyTargets,
    /// A raw value this version does not know (the library rejects unknown values).
    Other(i32),
}

impl TpList {
    /// The raw `pdkv_tp_mapping_list_t` value.
    pub fn raw(self) -> i32 {
        match self {
            TpList::HandshakeTargets => sys::PDKV_TP_LIST_HANDSHAKE_TARGETS as i32,
            TpList::AttentionSources => sys::PDKV_TP_LIST_ATTENTION_SOURCES as i32,
            TpList::MambaSources => sys::PDKV_TP_LIST_MAMBA_SOURCES as i32,
            TpList::AllSources => sys::PDKV_TP_LIST_ALL_SOURCES as i32,
            TpList::AttentionSlots => sys::PDKV_TP_LIST_ATTENTION_SLOTS as i32,
            TpList::NotifyTargets => sys::PDKV_TP_LIST_NOTIFY_TARGETS as i32,
            TpList::Other(v) => v,
        }
    }
}

/// Which remote ranks a local rank reads from, and where (`pdkv_tp_mapping_t`); immutable,
/// freed on drop.
#[derive(Debug)]
pub struct TpMapping {
    ptr: NonNull<sys::pdkv_tp_mapping_t>,
}

// SAFETY: immutable after creation; all queries are documented thread-safe; freeing happens
// only in Drop, which requires exclusive ownership.
unsafe impl Send for TpMapping {}
// SAFETY: every &self method is a thread-safe const query.
unsafe impl Sync for TpMapping {}

impl Drop for TpMapping {
    fn drop(&mut self) {
        // SAFETY: owned handle, no outstanding borrows (they are tied to &self).
        unsafe { sys::pdkv_tp_mapping_free(self.ptr.as_ptr()) }
    }
}

impl TpMapping {
    /// Computes the mapping (`pdkv_tp_mapping_new`).
    pub fn new(params: &TpMappingParams) -> Result<TpMapping> {
        let raw = sys::pdkv_tp_mapping_params_t {
            struct_size: mem::size_of::<sys::pdkv_tp_mapping_params_t>(),
            field_mask: 0,
            local_tp_size: params.local_tp_size,
            local_tp_rank: params.local_tp_rank,
            remote_tp_size: params.remote_tp_size,
            total_kv_heads: params.total_kv_heads,
            use_mla: params.use_mla as u8,
            has_mamba: params.has_mamba as u8,
        };
        let mut out = ptr::null_mut();
        // SAFETY: valid params and out pointer.
        check(|e| unsafe { sys::pdkv_tp_mapping_new(&raw, &mut out, e) })?;
        NonNull::new(out)
            .map(|ptr| TpMapping { ptr })
            .ok_or_else(|| Error::new(Status::Internal, "pdkv returned a NULL mapping"))
    }

    /// The mapping's scalars (`pdkv_tp_mapping_get_info`).
    pub fn info(&self) -> Result<TpMappingInfo> {
        // SAFETY: all-zero is a valid value of this plain-data struct.
        let mut raw: sys::pdkv_tp_mapping_info_t = unsafe { mem::zeroed() };
        raw.struct_size = mem::size_of::<sys::pdkv_tp_mapping_info_t>();
        // SAFETY: live handle, valid out struct.
        check(|e| unsafe { sys::pdkv_tp_mapping_get_info(self.ptr.as_ptr(), &mut raw, e) })?;
        Ok(TpMappingInfo {
            tp_ratio: raw.tp_ratio,
            rank_offset_factor: raw.rank_offset_factor,
            local_replicated: raw.local_replicated != 0,
            remote_replicated: raw.remote_replicated != 0,
            local_physical_heads: raw.local_physical_heads,
            remote_physical_heads: raw.remote_physical_heads,
            num_attention_reads: raw.num_attention_reads,
            notifications_expected: raw.notifications_expected,
        })
    }

    /// One rank list, borrowed from the mapping (`pdkv_tp_mapping_ranks`).
    pub fn ranks(&self, which: TpList) -> Result<&[u32]> {
        let (mut p, mut n) = (ptr::null(), 0usize);
        // SAFETY: live handle, valid out pointers.
        check(|e| unsafe {
            sys::pdkv_tp_mapping_ranks(self.ptr.as_ptr(), which.raw(), &mut p, &mut n, e)
        })?;
        // SAFETY: n entries owned by the mapping, valid while &self lives.
        Ok(unsafe { slice(p, n) })
    }

    /// Attention slot of `remote_tp_rank` (`pdkv_tp_mapping_attention_slot`).
    pub fn attention_slot(&self, remote_tp_rank: u32) -> Result<u32> {
        let mut out = 0u32;
        // SAFETY: live handle, valid out pointer.
        check(|e| unsafe {
            sys::pdkv_tp_mapping_attention_slot(self.ptr.as_ptr(), remote_tp_rank, &mut out, e)
        })?;
        Ok(out)
    }

    /// The raw handle, borrowed (still owned by `self`).
    pub fn as_ptr(&self) -> *const sys::pdkv_tp_mapping_t {
        self.ptr.as_ptr()
    }
}

impl TpMapping {
    /// Wraps a freshly returned mapping handle.
    pub(crate) fn from_raw(out: *mut sys::pdkv_tp_mapping_t) -> Result<TpMapping> {
        NonNull::new(out)
            .map(|ptr| TpMapping { ptr })
            .ok_or_else(|| Error::new(Status::Internal, "pdkv returned a NULL mapping"))
    }
}
