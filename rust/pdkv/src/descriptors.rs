//! Registered regions and transfer descriptors (attention and Mamba).
use crate::error::{Error, Result, Status};
use crate::ffi_util::{check, slice};
use crate::geometry::Geometry;
use crate::mamba::MambaReadList;
use crate::topology::TpMapping;
use pdkv_sys as sys;
use std::mem::{align_of, size_of};
use std::ptr::{self, NonNull};

/// One registered KV tensor of an engine: `num_blocks` kernel blocks of `block_len` bytes at
/// `base`. Layout-identical to `pdkv_region_t`, so slices pass to C without copying.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Region {
    /// Base address.
    pub base: u64,
    /// Bytes per kernel block.
    pub block_len: u64,
    /// Number of kernel blocks.
    pub num_blocks: u64,
}

/// One contiguous transfer unit `(addr, len)`. Layout-identical to `pdkv_descriptor_t`, so a
/// [`DescriptorList`] is borrowed as `&[Descriptor]` without copying.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Descriptor {
    /// Address.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
}

// The element layouts are fixed for the major version; these asserts make a mismatch a
// compile error rather than a silent misread.
const _: () = assert!(size_of::<Region>() == size_of::<sys::pdkv_region_t>());
const _: () = assert!(align_of::<Region>() == align_of::<sys::pdkv_region_t>());
const _: () = assert!(size_of::<Descriptor>() == size_of::<sys::pdkv_descriptor_t>());
const _: () = assert!(align_of::<Descriptor>() == align_of::<sys::pdkv_descriptor_t>());

fn regions_ptr(r: &[Region]) -> *const sys::pdkv_region_t {
    if r.is_empty() {
        ptr::null()
    } else {
        r.as_ptr().cast()
    }
}

/// An immutable list of descriptors; freed on drop.
#[derive(Debug)]
pub struct DescriptorList {
    ptr: NonNull<sys::pdkv_descriptor_list_t>,
}

// SAFETY: immutable after creation; queries documented thread-safe; free only in Drop.
unsafe impl Send for DescriptorList {}
// SAFETY: &self methods are thread-safe const queries.
unsafe impl Sync for DescriptorList {}

impl Drop for DescriptorList {
    fn drop(&mut self) {
        // SAFETY: owned handle; borrows are tied to &self.
        unsafe { sys::pdkv_descriptor_list_free(self.ptr.as_ptr()) }
    }
}

impl DescriptorList {
    pub(crate) fn from_out(out: *mut sys::pdkv_descriptor_list_t) -> Result<DescriptorList> {
        NonNull::new(out)
            .map(|ptr| DescriptorList { ptr })
            .ok_or_else(|| Error::new(Status::Internal, "pdkv returned a NULL descriptor list"))
    }

    /// The descriptors, borrowed from the list (`pdkv_descriptor_list_items`).
    pub fn items(&self) -> Result<&[Descriptor]> {
        let (mut p, mut n) = (ptr::null(), 0usize);
        // SAFETY: live handle, valid out pointers.
        check(|e| unsafe {
            sys::pdkv_descriptor_list_items(self.ptr.as_ptr(), &mut p, &mut n, e)
        })?;
        // SAFETY: n entries owned by the list, valid while &self lives; Descriptor has the
        // same layout as pdkv_descriptor_t (asserted above).
        Ok(unsafe { slice(p.cast::<Descriptor>(), n) })
    }

    /// The raw handle, borrowed (still owned by `self`).
    pub fn as_ptr(&self) -> *const sys::pdkv_descriptor_list_t {
        self.ptr.as_ptr()
    }
}

/// Local attention descriptors, region-major (`pdkv_attention_local_descriptors`).
pub fn attention_local_descriptors(
    regions: &[Region],
    block_size_ratio: u32,
) -> Result<DescriptorList> {
    let mut out = ptr::null_mut();
    // SAFETY: regions is read, not retained; NULL only with count 0.
    check(|e| unsafe {
        sys::pdkv_attention_local_descriptors(
            regions_ptr(regions),
            regions.len(),
            block_size_ratio,
            &mut out,
            e,
        )
    })?;
    DescriptorList::from_out(out)
}

/// Remote attention descriptors in one P rank's regions for the local rank of `mapping`
/// (`pdkv_attention_remote_descriptors`).
pub fn attention_remote_descriptors(
    local_regions: &[Region],
    remote_regions: &[Region],
    mapping: &TpMapping,
    block_size_ratio: u32,
) -> Result<DescriptorList> {
    let mut out = ptr::null_mut();
    // SAFETY: slices read, not retained; live mapping.
    check(|e| unsafe {
        sys::pdkv_attention_remote_descriptors(
            regions_ptr(local_regions),
            local_regions.len(),
            regions_ptr(remote_regions),
            remote_regions.len(),
            mapping.as_ptr(),
            block_size_ratio,
            &mut out,
            e,
        )
    })?;
    DescriptorList::from_out(out)
}

/// The local split handle for remote rank `p_tp_rank` (D_TP < P_TP;
/// `pdkv_attention_split_descriptors`).
pub fn attention_split_descriptors(
    local_attention: &DescriptorList,
    mapping: &TpMapping,
    block_size_ratio: u32,
    p_tp_rank: u32,
) -> Result<DescriptorList> {
    let mut out = ptr::null_mut();
    // SAFETY: live handles.
    check(|e| unsafe {
        sys::pdkv_attention_split_descriptors(
            local_attention.as_ptr(),
            mapping.as_ptr(),
            block_size_ratio,
            p_tp_rank,
            &mut out,
            e,
        )
    })?;
    DescriptorList::from_out(out)
}

/// The engine's full local Mamba descriptors as registered (`pdkv_mamba_local_descriptors`).
pub fn mamba_local_descriptors(
    regions: &[Region],
    ppl: u64,
    geometry: &Geometry,
) -> Result<DescriptorList> {
    let mut out = ptr::null_mut();
    // SAFETY: regions read, not retained; live geometry.
    check(|e| unsafe {
        sys::pdkv_mamba_local_descriptors(
            regions_ptr(regions),
            regions.len(),
            ppl,
            geometry.as_ptr(),
            &mut out,
            e,
        )
    })?;
    DescriptorList::from_out(out)
}

/// Descriptors in P rank `p_tp_rank`'s Mamba regions for the reads of `reads` whose p_tp_rank
/// matches (`pdkv_mamba_remote_descriptors`).
pub fn mamba_remote_descriptors(
    p_regions: &[Region],
    p_ppl: u64,
    p_geometry: &Geometry,
    reads: &MambaReadList,
    p_tp_rank: u32,
) -> Result<DescriptorList> {
    let mut out = ptr::null_mut();
    // SAFETY: regions read, not retained; live handles.
    check(|e| unsafe {
        sys::pdkv_mamba_remote_descriptors(
            regions_ptr(p_regions),
            p_regions.len(),
            p_ppl,
            p_geometry.as_ptr(),
            reads.as_ptr(),
            p_tp_rank,
            &mut out,
            e,
        )
    })?;
    DescriptorList::from_out(out)
}

/// The D rank's local destinations matching [`mamba_remote_descriptors`] one to one
/// (`pdkv_mamba_local_split_descriptors`).
pub fn mamba_local_split_descriptors(
    d_regions: &[Region],
    d_ppl: u64,
    d_geometry: &Geometry,
    reads: &MambaReadList,
    p_tp_rank: u32,
) -> Result<DescriptorList> {
    let mut out = ptr::null_mut();
    // SAFETY: regions read, not retained; live handles.
    check(|e| unsafe {
        sys::pdkv_mamba_local_split_descriptors(
            regions_ptr(d_regions),
            d_regions.len(),
            d_ppl,
            d_geometry.as_ptr(),
            reads.as_ptr(),
            p_tp_rank,
            &mut out,
            e,
        )
    })?;
    DescriptorList::from_out(out)
}
