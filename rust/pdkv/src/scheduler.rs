//! Scheduler helpers (N-1 rule, Mamba aligned chunk split) and KV offload geometry.
use crate::engine::optional_bit;
use crate::error::Result;
use crate::ffi_util::{check, sp};
use pdkv_sys as sys;
use std::mem::{align_of, size_of, zeroed};

/// Inputs of the v0604 Mamba align-mode block-aligned chunk split (vLLM #42554).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AlignedSplitV0604Input {
    /// Tokens already computed.
    pub num_computed_tokens: u64,
    /// New local prefix-cache hit.
    pub num_new_local_computed_tokens: u64,
    /// Tokens provided by the connector.
    pub num_external_computed_tokens: u64,
    /// Proposed by budget / threshold.
    pub num_new_tokens: u64,
    /// Prompt tokens.
    pub num_prompt_tokens: u64,
    /// Prompt + output so far.
    pub num_tokens: u64,
    /// Mamba block size (tokens).
    pub block_size: u64,
    /// EAGLE keeps one block back.
    pub use_eagle: bool,
    /// Asynchronous connector load: no split.
    pub load_kv_async: bool,
}

/// The (possibly reduced) number of new tokens, v0604 form (`pdkv_mamba_aligned_split_v0604`).
pub fn mamba_aligned_split_v0604(input: &AlignedSplitV0604Input) -> Result<u64> {
    let raw = sys::pdkv_aligned_split_v0604_input_t {
        struct_size: size_of::<sys::pdkv_aligned_split_v0604_input_t>(),
        field_mask: 0,
        num_computed_tokens: input.num_computed_tokens,
        num_new_local_computed_tokens: input.num_new_local_computed_tokens,
        num_external_computed_tokens: input.num_external_computed_tokens,
        num_new_tokens: input.num_new_tokens,
        num_prompt_tokens: input.num_prompt_tokens,
        num_tokens: input.num_tokens,
        block_size: input.block_size,
        use_eagle: input.use_eagle as u8,
        load_kv_async: input.load_kv_async as u8,
    };
    let mut out = 0u64;
    // SAFETY: valid input and out pointer.
    check(|e| unsafe { sys::pdkv_mamba_aligned_split_v0604(&raw, &mut out, e) })?;
    Ok(out)
}

/// Inputs of the main-branch Mamba align-mode split.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AlignedSplitInput {
    /// Tokens already computed (incl. external).
    pub start: u64,
    /// Proposed by budget / threshold.
    pub num_new_tokens: u64,
    /// Prompt tokens.
    pub num_prompt_tokens: u64,
    /// Prompt + output so far.
    pub num_tokens: u64,
    /// Mamba block size.
    pub block_size: u64,
    /// A finer unit to floor a sub-block chunk end to, used when the block is wider than every
    /// chunk and that floor still advances; `None`: no floor (vLLM main).
    pub floor_unit: Option<u64>,
    /// Fine-grained tail hits; `None`: off.
    pub tail_hash_block_size: Option<u64>,
    /// 0: no shared prefix.
    pub shared_prefix_tokens: u64,
    /// `None`: unlimited.
    pub max_num_scheduled_tokens: Option<u64>,
    /// `None`: no threshold.
    pub long_prefill_token_threshold: Option<u64>,
    /// EAGLE keeps one block back.
    pub use_eagle: bool,
    /// Asynchronous connector load.
    pub load_kv_async: bool,
    /// Return 0 (the request waits) instead of a sub-block chunk that no floor keeps when the
    /// block is wider than every chunk. `false` is vLLM main's default: the request progresses.
    pub defer_oversized_block: bool,
}

/// New tokens for this step, main-branch form (`pdkv_mamba_aligned_split`). 0 means the request
/// waits this step: a block that fits in a chunk is not reached by this step's budget, or
/// `defer_oversized_block` asked for it.
pub fn mamba_aligned_split(input: &AlignedSplitInput) -> Result<u64> {
    let raw = sys::pdkv_aligned_split_input_t {
        struct_size: size_of::<sys::pdkv_aligned_split_input_t>(),
        field_mask: optional_bit(input.floor_unit, sys::PDKV_SPLIT_FIELD_FLOOR_UNIT)
            | optional_bit(
                input.tail_hash_block_size,
                sys::PDKV_SPLIT_FIELD_TAIL_HASH_BLOCK_SIZE,
            )
            | optional_bit(
                input.max_num_scheduled_tokens,
                sys::PDKV_SPLIT_FIELD_MAX_NUM_SCHEDULED_TOKENS,
            )
            | optional_bit(
                input.long_prefill_token_threshold,
                sys::PDKV_SPLIT_FIELD_LONG_PREFILL_TOKEN_THRESHOLD,
            ),
        start: input.start,
        num_new_tokens: input.num_new_tokens,
        num_prompt_tokens: input.num_prompt_tokens,
        num_tokens: input.num_tokens,
        block_size: input.block_size,
        floor_unit: input.floor_unit.unwrap_or(0),
        tail_hash_block_size: input.tail_hash_block_size.unwrap_or(0),
        shared_prefix_tokens: input.shared_prefix_tokens,
        max_num_scheduled_tokens: input.max_num_scheduled_tokens.unwrap_or(0),
        long_prefill_token_threshold: input.long_prefill_token_threshold.unwrap_or(0),
        use_eagle: input.use_eagle as u8,
        load_kv_async: input.load_kv_async as u8,
        defer_oversized_block: input.defer_oversized_block as u64,
    };
    let mut out = 0u64;
    // SAFETY: valid input and out pointer.
    check(|e| unsafe { sys::pdkv_mamba_aligned_split(&raw, &mut out, e) })?;
    Ok(out)
}

/// P side of a request decoded remotely (`pdkv_remote_decode_prefill_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RemoteDecodePrefill {
    /// Prompt tokens.
    pub num_prompt_tokens: u64,
    /// Max tokens to generate.
    pub max_tokens: u64,
    /// The N-1 truncation was applied.
    pub truncated: bool,
}

/// Mamba: truncates the prompt to N-1 and sets max_tokens to 1, once (idempotent); non-Mamba
/// models only get max_tokens = 1 (`pdkv_truncate_for_remote_decode`).
pub fn truncate_for_remote_decode(
    input: &RemoteDecodePrefill,
    has_mamba: bool,
) -> Result<RemoteDecodePrefill> {
    let raw = sys::pdkv_remote_decode_prefill_t {
        struct_size: size_of::<sys::pdkv_remote_decode_prefill_t>(),
        field_mask: 0,
        num_prompt_tokens: input.num_prompt_tokens,
        max_tokens: input.max_tokens,
        truncated: input.truncated as u8,
    };
    let mut out = raw;
    // SAFETY: valid in/out structs.
    check(|e| unsafe { sys::pdkv_truncate_for_remote_decode(&raw, has_mamba as u8, &mut out, e) })?;
    Ok(RemoteDecodePrefill {
        num_prompt_tokens: out.num_prompt_tokens,
        max_tokens: out.max_tokens,
        truncated: out.truncated != 0,
    })
}

/// What P schedules for a remotely decoded request (`pdkv_remote_decode_prefill_plan_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RemoteDecodePrefillPlan {
    /// After truncation.
    pub num_prompt_tokens: u64,
    /// Usable local hit.
    pub computed_tokens: u64,
    /// Tokens to compute, >= 1.
    pub new_tokens: u64,
}

/// P's schedule for a remotely decoded request given its own prefix hit; fixes vLLM #53514
/// (`pdkv_plan_remote_decode_prefill`).
pub fn plan_remote_decode_prefill(
    num_prompt_tokens: u64,
    local_hit_tokens: u64,
    block_size: u64,
    has_mamba: bool,
) -> Result<RemoteDecodePrefillPlan> {
    // SAFETY: plain-data struct, all-zero valid.
    let mut out: sys::pdkv_remote_decode_prefill_plan_t = unsafe { zeroed() };
    out.struct_size = size_of::<sys::pdkv_remote_decode_prefill_plan_t>();
    // SAFETY: valid out struct.
    check(|e| unsafe {
        sys::pdkv_plan_remote_decode_prefill(
            num_prompt_tokens,
            local_hit_tokens,
            block_size,
            has_mamba as u8,
            &mut out,
            e,
        )
    })?;
    Ok(RemoteDecodePrefillPlan {
        num_prompt_tokens: out.num_prompt_tokens,
        computed_tokens: out.computed_tokens,
        new_tokens: out.new_tokens,
    })
}

/// One registered KV tensor for offloading. Layout-identical to `pdkv_offload_layer_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct OffloadLayer {
    /// Tensor size in bytes.
    pub tensor_bytes: u64,
    /// Page (bytes per block) of the layer using it.
    pub page_bytes: u64,
}

const _: () = assert!(size_of::<OffloadLayer>() == size_of::<sys::pdkv_offload_layer_t>());
const _: () = assert!(align_of::<OffloadLayer>() == align_of::<sys::pdkv_offload_layer_t>());

/// Offload geometry (`pdkv_offload_geometry_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OffloadGeometry {
    /// From the KV cache configuration, never a tensor shape.
    pub num_blocks: u64,
    /// gpu_block_size / hash_block_size.
    pub hash_blocks_per_block: u64,
}

/// Offload geometry (vLLM #38554; `pdkv_derive_offload_geometry`).
pub fn derive_offload_geometry(
    config_num_blocks: u64,
    gpu_block_size: u64,
    hash_block_size: u64,
    layers: &[OffloadLayer],
) -> Result<OffloadGeometry> {
    // SAFETY: plain-data struct, all-zero valid.
    let mut out: sys::pdkv_offload_geometry_t = unsafe { zeroed() };
    out.struct_size = size_of::<sys::pdkv_offload_geometry_t>();
    // SAFETY: layers read during the call (layout-identical); valid out struct.
    check(|e| unsafe {
        sys::pdkv_derive_offload_geometry(
            config_num_blocks,
            gpu_block_size,
            hash_block_size,
            sp(layers),
            layers.len(),
            &mut out,
            e,
        )
    })?;
    Ok(OffloadGeometry {
        num_blocks: out.num_blocks,
        hash_blocks_per_block: out.hash_blocks_per_block,
    })
}
