//! Prefix trimming of one KV-cache group (`pdkv_group_trim_t`).
use crate::blocks::{GroupKind, ZeroRange};
use crate::engine::MambaCacheMode;
use crate::error::{Error, Result, Status};
use crate::ffi_util::{check, slice, sp};
use pdkv_sys as sys;
use std::mem::{align_of, size_of};
use std::ptr::{self, NonNull};

/// One group's trimming inputs (`pdkv_group_trim_input_t`). Attention kinds use KERNEL block
/// ids of each side; Mamba groups use logical ids, exchange-clipped exactly once. Id 0 is the
/// null block.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupTrimInput {
    /// Group kind.
    pub kind: GroupKind,
    /// Mamba cache mode (Mamba groups only).
    pub cache_mode: MambaCacheMode,
    /// D blocks still to fill (after D's prefix hit).
    pub local_blocks: Vec<u64>,
    /// P blocks of the request.
    pub remote_blocks: Vec<u64>,
    /// Tokens per local block (`None` in a plan: from the metadata).
    pub local_tokens_per_block: Option<u64>,
    /// Tokens per remote block (`None` in a plan: from the metadata).
    pub remote_tokens_per_block: Option<u64>,
    /// Prompt tokens P computed (N-1 rule already applied).
    pub remote_computed_tokens: u64,
    /// Tokens D already holds (its prefix-cache hit).
    pub local_hit_tokens: u64,
    /// Sliding-window groups: window in tokens.
    pub sliding_window: u64,
    /// Block-table index of `local_blocks[0]`; None: `local_hit_tokens / tokens per block`.
    pub local_first_block: Option<u64>,
    /// Block-table index of `remote_blocks[0]` (0 unless clipped).
    pub remote_first_block: u64,
    /// Attention kinds: kernel blocks each listed local id stands for. `None` or 1: kernel ids; k > 1:
    /// logical ids as the block table keeps them (logical block b is kernel blocks b*k .. b*k+k-1;
    /// id 0 is null with all k), so nothing expands them. Block-table indexes and tokens per
    /// block stay in kernel blocks. Mamba groups: `None` or 1.
    pub local_kernel_blocks_per_id: Option<u64>,
    /// The same for the remote ids.
    pub remote_kernel_blocks_per_id: Option<u64>,
}

impl GroupTrimInput {
    /// The C struct; it borrows the block vectors of `self`.
    pub(crate) fn to_raw(&self) -> sys::pdkv_group_trim_input_t {
        sys::pdkv_group_trim_input_t {
            struct_size: size_of::<sys::pdkv_group_trim_input_t>(),
            field_mask: crate::trim::trim_field_mask(
                self.local_tokens_per_block,
                self.remote_tokens_per_block,
                self.local_first_block,
                self.local_kernel_blocks_per_id,
                self.remote_kernel_blocks_per_id,
            ),
            kind: self.kind.raw(),
            cache_mode: self.cache_mode.raw(),
            local_blocks: sp(&self.local_blocks),
            num_local_blocks: self.local_blocks.len(),
            remote_blocks: sp(&self.remote_blocks),
            num_remote_blocks: self.remote_blocks.len(),
            local_tokens_per_block: self.local_tokens_per_block.unwrap_or(0),
            remote_tokens_per_block: self.remote_tokens_per_block.unwrap_or(0),
            remote_computed_tokens: self.remote_computed_tokens,
            local_hit_tokens: self.local_hit_tokens,
            sliding_window: self.sliding_window,
            local_first_block: self.local_first_block.unwrap_or(0),
            remote_first_block: self.remote_first_block,
            local_kernel_blocks_per_id: self.local_kernel_blocks_per_id.unwrap_or(1),
            remote_kernel_blocks_per_id: self.remote_kernel_blocks_per_id.unwrap_or(1),
        }
    }
}

/// `num_tokens` tokens copied from `remote_block` into `local_block`; never crosses a block
/// boundary. Layout-identical to `pdkv_token_run_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TokenRun {
    /// D kernel block.
    pub local_block: u64,
    /// First token in the D block.
    pub local_token_begin: u64,
    /// P kernel block.
    pub remote_block: u64,
    /// First token in the P block.
    pub remote_token_begin: u64,
    /// Tokens copied.
    pub num_tokens: u64,
}

/// One whole Mamba state copied from `remote_block` into `local_block`. Layout-identical to
/// `pdkv_state_pair_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct StatePair {
    /// D block.
    pub local_block: u64,
    /// P block.
    pub remote_block: u64,
    /// Prompt tokens the state has consumed.
    pub tokens: u64,
}

const _: () = assert!(size_of::<TokenRun>() == size_of::<sys::pdkv_token_run_t>());
const _: () = assert!(align_of::<TokenRun>() == align_of::<sys::pdkv_token_run_t>());
const _: () = assert!(size_of::<StatePair>() == size_of::<sys::pdkv_state_pair_t>());
const _: () = assert!(align_of::<StatePair>() == align_of::<sys::pdkv_state_pair_t>());

/// The trimmed transfer of one group; immutable, freed on drop.
#[derive(Debug)]
pub struct GroupTrim {
    ptr: NonNull<sys::pdkv_group_trim_t>,
}

// SAFETY: immutable after creation; queries documented thread-safe; free only in Drop.
unsafe impl Send for GroupTrim {}
// SAFETY: &self methods are thread-safe const queries.
unsafe impl Sync for GroupTrim {}

impl Drop for GroupTrim {
    fn drop(&mut self) {
        // SAFETY: owned handle; borrows are tied to &self.
        unsafe { sys::pdkv_group_trim_free(self.ptr.as_ptr()) }
    }
}

macro_rules! borrowed_list {
    ($(#[$doc:meta])* $name:ident, $f:path, $t:ty, $raw:ty) => {
        $(#[$doc])*
        pub fn $name(&self) -> Result<&[$t]> {
            let (mut p, mut n): (*const $raw, usize) = (ptr::null(), 0);
            // SAFETY: live handle, valid out pointers.
            check(|e| unsafe { $f(self.ptr.as_ptr(), &mut p, &mut n, e) })?;
            // SAFETY: n entries owned by the trim, valid while &self lives; element types are
            // layout-identical (asserted above).
            Ok(unsafe { slice(p.cast::<$t>(), n) })
        }
    };
}

impl GroupTrim {
    /// Trims one group (`pdkv_group_trim_new`). A token or final state D needs without a slot
    /// or source is [`Status::Coverage`].
    pub fn new(input: &GroupTrimInput) -> Result<GroupTrim> {
        let raw = input.to_raw();
        let mut out = ptr::null_mut();
        // SAFETY: raw borrows input's vectors for the call; not retained.
        check(|e| unsafe { sys::pdkv_group_trim_new(&raw, &mut out, e) })?;
        NonNull::new(out)
            .map(|ptr| GroupTrim { ptr })
            .ok_or_else(|| Error::new(Status::Internal, "pdkv returned a NULL trim"))
    }

    /// `(kind, tokens transferred)` (`pdkv_group_trim_summary`).
    pub fn summary(&self) -> Result<(GroupKind, u64)> {
        let (mut kind, mut tokens) = (0i32, 0u64);
        // SAFETY: live handle, valid out pointers.
        check(|e| unsafe {
            sys::pdkv_group_trim_summary(self.ptr.as_ptr(), &mut kind, &mut tokens, e)
        })?;
        Ok((GroupKind::from_raw(kind), tokens))
    }

    borrowed_list!(
        /// Token runs (attention kinds, token order), borrowed (`pdkv_group_trim_runs`).
        runs, sys::pdkv_group_trim_runs, TokenRun, sys::pdkv_token_run_t);
    borrowed_list!(
        /// State pairs (Mamba groups, position order), borrowed (`pdkv_group_trim_states`).
        states, sys::pdkv_group_trim_states, StatePair, sys::pdkv_state_pair_t);
    borrowed_list!(
        /// Token ranges of listed local blocks to zero, borrowed (`pdkv_group_trim_zero_ranges`).
        zero_ranges, sys::pdkv_group_trim_zero_ranges, ZeroRange, sys::pdkv_zero_range_t);
    borrowed_list!(
        /// Local Mamba slots no remote state fills (never publish them as cache hits),
        /// borrowed (`pdkv_group_trim_unfilled_states`).
        unfilled_states, sys::pdkv_group_trim_unfilled_states, u64, u64);
}

/// The field_mask of a trim input: the bit of each optional field set (`Some`); of a pair
/// sharing one bit, a `None` side takes its default (tokens per block: 0, refused where needed;
/// kernel blocks per id: 1).
pub(crate) fn trim_field_mask(
    local_tokens_per_block: Option<u64>,
    remote_tokens_per_block: Option<u64>,
    local_first_block: Option<u64>,
    local_kernel_blocks_per_id: Option<u64>,
    remote_kernel_blocks_per_id: Option<u64>,
) -> u64 {
    let mut mask = 0;
    if local_tokens_per_block.is_some() || remote_tokens_per_block.is_some() {
        mask |= u64::from(sys::PDKV_TRIM_FIELD_TOKENS_PER_BLOCK);
    }
    if local_first_block.is_some() {
        mask |= u64::from(sys::PDKV_TRIM_FIELD_LOCAL_FIRST_BLOCK);
    }
    if local_kernel_blocks_per_id.is_some() || remote_kernel_blocks_per_id.is_some() {
        mask |= u64::from(sys::PDKV_TRIM_FIELD_KERNEL_BLOCKS_PER_ID);
    }
    mask
}
