//! Mamba state transfer: conv offsets, SSM read ranges and byte-exact read lists.
use crate::error::{Error, Result, Status};
use crate::ffi_util::{borrowed_str, check, slice, take_list};
use crate::geometry::Geometry;
use pdkv_sys as sys;
use std::ptr::{self, NonNull};

/// A byte range inside one logical Mamba page of one layer. Layout-identical to
/// `pdkv_byte_range_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ByteRange {
    /// Offset in bytes.
    pub offset: u64,
    /// Size in bytes.
    pub size: u64,
}

impl From<sys::pdkv_byte_range_t> for ByteRange {
    fn from(r: sys::pdkv_byte_range_t) -> ByteRange {
        ByteRange {
            offset: r.offset,
            size: r.size,
        }
    }
}

const _: () =
    assert!(std::mem::size_of::<ByteRange>() == std::mem::size_of::<sys::pdkv_byte_range_t>());
const _: () =
    assert!(std::mem::align_of::<ByteRange>() == std::mem::align_of::<sys::pdkv_byte_range_t>());

fn byte_range_of(r: &sys::pdkv_byte_range_t) -> ByteRange {
    ByteRange {
        offset: r.offset,
        size: r.size,
    }
}

impl Geometry {
    /// Cumulative (offset, size) of each conv projection in the local page
    /// (`pdkv_mamba_local_conv_offsets`).
    pub fn mamba_local_conv_offsets(&self) -> Result<Vec<ByteRange>> {
        take_list(
            // SAFETY: live handle, valid out pointers.
            |out, e| unsafe { sys::pdkv_mamba_local_conv_offsets(self.as_ptr(), out, e) },
            sys::pdkv_byte_range_list_items,
            sys::pdkv_byte_range_list_free,
            byte_range_of,
        )
    }

    /// vLLM main's remote conv slices for `local_tp_rank` (this geometry is the LOCAL engine's;
    /// `pdkv_mamba_remote_conv_offsets`). Wrong for Mamba2 with n_groups < TP (vLLM #55208):
    /// plan with [`MambaReadList::new`].
    pub fn mamba_remote_conv_offsets(
        &self,
        local_tp_rank: u32,
        tp_ratio: i32,
    ) -> Result<Vec<ByteRange>> {
        take_list(
            // SAFETY: live handle, valid out pointers.
            |out, e| unsafe {
                sys::pdkv_mamba_remote_conv_offsets(self.as_ptr(), local_tp_rank, tp_ratio, out, e)
            },
            sys::pdkv_byte_range_list_items,
            sys::pdkv_byte_range_list_free,
            byte_range_of,
        )
    }

    /// vLLM's SSM temporal-state read in the remote page (`pdkv_mamba_ssm_read_range`).
    pub fn mamba_ssm_read_range(
        &self,
        remote_conv_bytes: u64,
        remote_ssm_bytes: u64,
        local_tp_rank: u32,
        tp_ratio: i32,
    ) -> Result<ByteRange> {
        let mut out = sys::pdkv_byte_range_t { offset: 0, size: 0 };
        // SAFETY: live geometry, valid out struct.
        check(|e| unsafe {
            sys::pdkv_mamba_ssm_read_range(
                self.as_ptr(),
                remote_conv_bytes,
                remote_ssm_bytes,
                local_tp_rank,
                tp_ratio,
                &mut out,
                e,
            )
        })?;
        Ok(out.into())
    }
}

/// Which rule computes Mamba reads (`pdkv_mamba_reads_rule_t`).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum MambaReadsRule {
    /// pdkv: every D byte written exactly once, replicated groups right.
    #[default]
    Pdkv,
    /// What vLLM main reads (reproduces #55208), to diagnose a peer.
    Vllm,
    /// A raw value this version does not know (the library rejects unknown values).
    Other(i32),
}

impl MambaReadsRule {
    /// The raw value.
    pub fn raw(self) -> i32 {
        match self {
            MambaReadsRule::Pdkv => sys::PDKV_MAMBA_READS_PDKV as i32,
            MambaReadsRule::Vllm => sys::PDKV_MAMBA_READS_VLLM as i32,
            MambaReadsRule::Other(v) => v,
        }
    }
}

/// One contiguous copy from a P rank's Mamba page into the D rank's page, borrowed from its
/// [`MambaReadList`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MambaRead<'a> {
    /// Remote (P) rank.
    pub p_tp_rank: u32,
    /// "x", "B", "C", "Q", "K", "V" or "ssm".
    pub part: &'a str,
    /// Offset in the P rank's page.
    pub remote_offset: u64,
    /// Offset in the D rank's page.
    pub local_offset: u64,
    /// Bytes to copy.
    pub length: u64,
}

/// A byte-exact list of Mamba reads for one D rank; immutable, freed on drop.
#[derive(Debug)]
pub struct MambaReadList {
    ptr: NonNull<sys::pdkv_mamba_read_list_t>,
}

// SAFETY: immutable after creation; queries documented thread-safe; free only in Drop.
unsafe impl Send for MambaReadList {}
// SAFETY: &self methods are thread-safe const queries.
unsafe impl Sync for MambaReadList {}

impl Drop for MambaReadList {
    fn drop(&mut self) {
        // SAFETY: owned handle; borrows are tied to &self.
        unsafe { sys::pdkv_mamba_read_list_free(self.ptr.as_ptr()) }
    }
}

impl MambaReadList {
    /// Reads of D rank `d_tp_rank` given the P and D geometries of the same model
    /// (`pdkv_mamba_reads_new`).
    pub fn new(
        p: &Geometry,
        d: &Geometry,
        d_tp_rank: u32,
        rule: MambaReadsRule,
    ) -> Result<MambaReadList> {
        let mut out = ptr::null_mut();
        // SAFETY: live geometries, valid out pointer; neither is retained.
        check(|e| unsafe {
            sys::pdkv_mamba_reads_new(p.as_ptr(), d.as_ptr(), d_tp_rank, rule.raw(), &mut out, e)
        })?;
        NonNull::new(out)
            .map(|ptr| MambaReadList { ptr })
            .ok_or_else(|| Error::new(Status::Internal, "pdkv returned a NULL read list"))
    }

    /// The reads in page order, ssm last (`pdkv_mamba_read_list_items`).
    pub fn items(&self) -> Result<Vec<MambaRead<'_>>> {
        let (mut p, mut n) = (ptr::null(), 0usize);
        // SAFETY: live handle, valid out pointers.
        check(|e| unsafe {
            sys::pdkv_mamba_read_list_items(self.ptr.as_ptr(), &mut p, &mut n, e)
        })?;
        // SAFETY: n entries owned by the list, valid while &self lives; so are their strings.
        let raw = unsafe { slice(p, n) };
        Ok(raw
            .iter()
            .map(|r| MambaRead {
                p_tp_rank: r.p_tp_rank,
                // SAFETY: `part` is owned by the list.
                part: unsafe { borrowed_str(r.part) },
                remote_offset: r.remote_offset,
                local_offset: r.local_offset,
                length: r.length,
            })
            .collect())
    }

    /// Distinct P ranks the reads touch, ascending (`pdkv_mamba_read_list_source_ranks`).
    pub fn source_ranks(&self) -> Result<&[u32]> {
        let (mut p, mut n) = (ptr::null(), 0usize);
        // SAFETY: live handle, valid out pointers.
        check(|e| unsafe {
            sys::pdkv_mamba_read_list_source_ranks(self.ptr.as_ptr(), &mut p, &mut n, e)
        })?;
        // SAFETY: owned by the list, valid while &self lives.
        Ok(unsafe { slice(p, n) })
    }

    /// The raw handle, borrowed (still owned by `self`).
    pub fn as_ptr(&self) -> *const sys::pdkv_mamba_read_list_t {
        self.ptr.as_ptr()
    }
}
