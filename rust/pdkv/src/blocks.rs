//! Block ids, descriptor ids, exchange clipping and receive-side zeroing.
use crate::engine::MambaCacheMode;
use crate::error::Result;
use crate::ffi_util::{check, sp, static_str, take_u64_list, take_zero_ranges};
use pdkv_sys as sys;
use std::mem::{align_of, size_of};
use std::ptr;

/// Kind of one KV cache group (`pdkv_group_kind_t`).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum GroupKind {
    /// Full attention (incl. MLA): one slot per token.
    #[default]
    Attention,
    /// Attention that only needs the last `window` tokens.
    SlidingWindow,
    /// SSM state: one block is the whole state.
    Mamba,
    /// A raw value this version does not know (the library rejects unknown values).
    Other(i32),
}

impl GroupKind {
    /// The raw value.
    pub fn raw(self) -> i32 {
        match self {
            GroupKind::Attention => 0,
            GroupKind::SlidingWindow => 1,
            GroupKind::Mamba => 2,
            GroupKind::Other(v) => v,
        }
    }

    /// Maps a raw value.
    pub fn from_raw(v: i32) -> GroupKind {
        match v {
            0 => GroupKind::Attention,
            1 => GroupKind::SlidingWindow,
            2 => GroupKind::Mamba,
            other => GroupKind::Other(other),
        }
    }

    /// The library's name ("attention", "sliding_window", "mamba"; "unknown" otherwise).
    pub fn name(self) -> &'static str {
        // SAFETY: any value accepted; static storage.
        unsafe { static_str(sys::pdkv_group_kind_name(self.raw())) }
    }
}

/// Logical -> kernel block ids with the owning engine's ppl
/// (`pdkv_logical_to_kernel_block_ids`).
pub fn logical_to_kernel_block_ids(
    logical: &[u64],
    kind: GroupKind,
    blocks_per_logical: u64,
) -> Result<Vec<u64>> {
    let mut out = ptr::null_mut();
    // SAFETY: slice read during the call; valid out pointer.
    check(|e| unsafe {
        sys::pdkv_logical_to_kernel_block_ids(
            sp(logical),
            logical.len(),
            kind.raw(),
            blocks_per_logical,
            &mut out,
            e,
        )
    })?;
    take_u64_list(out)
}

/// Local kernel ids -> remote kernel granularity for a block-size ratio
/// (`pdkv_map_block_ids_for_block_size_ratio`).
pub fn map_block_ids_for_block_size_ratio(
    local: &[u64],
    kind: GroupKind,
    block_size_ratio: u64,
    remote_len: u64,
) -> Result<Vec<u64>> {
    let mut out = ptr::null_mut();
    // SAFETY: slice read during the call; valid out pointer.
    check(|e| unsafe {
        sys::pdkv_map_block_ids_for_block_size_ratio(
            sp(local),
            local.len(),
            kind.raw(),
            block_size_ratio,
            remote_len,
            &mut out,
            e,
        )
    })?;
    take_u64_list(out)
}

/// One group's block ids for [`descriptor_ids`]: kernel ids (attention kinds) or logical ids
/// (Mamba).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupBlockIds {
    /// Group kind.
    pub kind: GroupKind,
    /// Block ids.
    pub ids: Vec<u64>,
}

/// How an engine's descriptors are laid out (`pdkv_descriptor_layout_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DescriptorLayout {
    /// Kernel blocks of the engine whose handle is addressed.
    pub num_blocks: u64,
    /// bsr (local handle only; the remote uses 1).
    pub block_size_ratio: u64,
    /// ppl of that engine.
    pub blocks_per_logical: u64,
    /// Attention regions.
    pub num_attention_regions: u64,
    /// Mamba regions.
    pub num_mamba_regions: u64,
}

/// Descriptor ids for the groups, in order (`pdkv_descriptor_ids`).
pub fn descriptor_ids(groups: &[GroupBlockIds], layout: &DescriptorLayout) -> Result<Vec<u64>> {
    let raw_groups: Vec<sys::pdkv_group_block_ids_t> = groups
        .iter()
        .map(|g| sys::pdkv_group_block_ids_t {
            kind: g.kind.raw(),
            ids: sp(&g.ids),
            num_ids: g.ids.len(),
        })
        .collect();
    let raw_layout = sys::pdkv_descriptor_layout_t {
        struct_size: size_of::<sys::pdkv_descriptor_layout_t>(),
        field_mask: 0,
        num_blocks: layout.num_blocks,
        block_size_ratio: layout.block_size_ratio,
        blocks_per_logical: layout.blocks_per_logical,
        num_attention_regions: layout.num_attention_regions,
        num_mamba_regions: layout.num_mamba_regions,
    };
    let mut out = ptr::null_mut();
    // SAFETY: raw_groups borrows `groups`, both alive for the call.
    check(|e| unsafe {
        sys::pdkv_descriptor_ids(sp(&raw_groups), raw_groups.len(), &raw_layout, &mut out, e)
    })?;
    take_u64_list(out)
}

/// Mamba descriptor ids of logical blocks in a region-major list (`pdkv_mamba_descriptor_ids`).
pub fn mamba_descriptor_ids(
    logical_block_ids: &[u64],
    num_logical_blocks: u64,
    num_regions: u64,
    descs_per_region: u64,
    first_id: u64,
) -> Result<Vec<u64>> {
    let mut out = ptr::null_mut();
    // SAFETY: slice read during the call; valid out pointer.
    check(|e| unsafe {
        sys::pdkv_mamba_descriptor_ids(
            sp(logical_block_ids),
            logical_block_ids.len(),
            num_logical_blocks,
            num_regions,
            descs_per_region,
            first_id,
            &mut out,
            e,
        )
    })?;
    take_u64_list(out)
}

/// Which of a request's block ids are worth exchanging (`pdkv_exchange_clip_params_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExchangeClipParams {
    /// Group kind.
    pub kind: GroupKind,
    /// Without the hybrid manager lists pass unchanged.
    pub hma_enabled: bool,
    /// Tokens (sliding-window groups).
    pub sliding_window: u64,
    /// Tokens per logical block (sliding-window groups).
    pub block_size: u64,
    /// Mamba cache mode (Mamba groups).
    pub cache_mode: MambaCacheMode,
    /// Mamba scratch slots at the end of the list.
    pub num_speculative_blocks: u64,
}

/// Clips one group's list (`pdkv_clip_exchange_blocks`). Clip Mamba "all" lists exactly once.
pub fn clip_exchange_blocks(ids: &[u64], params: &ExchangeClipParams) -> Result<Vec<u64>> {
    let raw = sys::pdkv_exchange_clip_params_t {
        struct_size: size_of::<sys::pdkv_exchange_clip_params_t>(),
        field_mask: 0,
        kind: params.kind.raw(),
        hma_enabled: params.hma_enabled as u8,
        sliding_window: params.sliding_window,
        block_size: params.block_size,
        cache_mode: params.cache_mode.raw(),
        num_speculative_blocks: params.num_speculative_blocks,
    };
    let mut out = ptr::null_mut();
    // SAFETY: slice and params read during the call.
    check(|e| unsafe { sys::pdkv_clip_exchange_blocks(sp(ids), ids.len(), &raw, &mut out, e) })?;
    take_u64_list(out)
}

/// Tokens `[token_begin, token_end)` inside kernel block `block`. Layout-identical to
/// `pdkv_zero_range_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ZeroRange {
    /// Kernel block id.
    pub block: u64,
    /// First token (offset within the block).
    pub token_begin: u64,
    /// One past the last token.
    pub token_end: u64,
}

/// Absolute token positions `[begin, end)` of a request. Layout-identical to
/// `pdkv_token_interval_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TokenInterval {
    /// First token.
    pub begin: u64,
    /// One past the last token.
    pub end: u64,
}

const _: () = assert!(size_of::<ZeroRange>() == size_of::<sys::pdkv_zero_range_t>());
const _: () = assert!(align_of::<ZeroRange>() == align_of::<sys::pdkv_zero_range_t>());
const _: () = assert!(size_of::<TokenInterval>() == size_of::<sys::pdkv_token_interval_t>());
const _: () = assert!(align_of::<TokenInterval>() == align_of::<sys::pdkv_token_interval_t>());

/// vLLM's receive-side zeroing for one attention group (`pdkv_receive_zero_ranges`).
pub fn receive_zero_ranges(
    local_blocks: &[u64],
    tokens_per_block: u64,
    block_size_ratio: u64,
    remote_kernel_len: u64,
) -> Result<Vec<ZeroRange>> {
    let mut out = ptr::null_mut();
    // SAFETY: slice read during the call; valid out pointer.
    check(|e| unsafe {
        sys::pdkv_receive_zero_ranges(
            sp(local_blocks),
            local_blocks.len(),
            tokens_per_block,
            block_size_ratio,
            remote_kernel_len,
            &mut out,
            e,
        )
    })?;
    take_zero_ranges(out)
}

/// Every token D neither holds nor receives, merged per block (`pdkv_uncovered_token_ranges`).
pub fn uncovered_token_ranges(
    local_blocks: &[u64],
    first_block_index: u64,
    tokens_per_block: u64,
    held_tokens: u64,
    written: &[TokenInterval],
) -> Result<Vec<ZeroRange>> {
    let mut out = ptr::null_mut();
    // SAFETY: slices read during the call (TokenInterval is layout-identical); valid out.
    check(|e| unsafe {
        sys::pdkv_uncovered_token_ranges(
            sp(local_blocks),
            local_blocks.len(),
            first_block_index,
            tokens_per_block,
            held_tokens,
            sp(written),
            written.len(),
            &mut out,
            e,
        )
    })?;
    take_zero_ranges(out)
}
