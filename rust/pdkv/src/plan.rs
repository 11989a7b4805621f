//! Transfer plans: per (D rank, P engine) contexts and per-request compiled, validated plans.
use crate::blocks::{GroupKind, ZeroRange};
use crate::engine::MambaCacheMode;
use crate::error::{Error, Result, Status};
use crate::ffi_util::{check, owned_str, slice, sp};
use crate::geometry::Geometry;
use crate::metadata::{EngineMetadata, KvLayout};
use crate::topology::TpMapping;
use crate::trim::GroupTrimInput;
use pdkv_sys as sys;
use std::mem::{align_of, size_of, zeroed};
use std::ptr::{self, NonNull};

/// Inputs of a plan context (`pdkv_plan_context_params_t`); nothing is retained.
#[derive(Debug, Clone, Copy)]
pub struct PlanContextParams<'a> {
    /// The D rank (reader).
    pub local: &'a EngineMetadata,
    /// P ranks of ONE engine, any order (at least one).
    pub remote: &'a [&'a EngineMetadata],
    /// D geometry; required with `remote_geometry` when a group is Mamba.
    pub local_geometry: Option<&'a Geometry>,
    /// P geometry; required with `local_geometry` when a group is Mamba.
    pub remote_geometry: Option<&'a Geometry>,
    /// None: derived from the metadata; else this mapping is used (copied).
    pub mapping: Option<&'a TpMapping>,
    /// When D's and P's KV layouts differ, D writes received attention blocks in P's layout and
    /// permutes them into its own after receipt (vLLM's `enable_permute_local_kv`); without it
    /// different layouts are [`Status::UnsupportedLayout`].
    pub permute_on_receive: bool,
}

impl<'a> PlanContextParams<'a> {
    /// Params for a pure-attention or derived-mapping context: no geometries, no mapping.
    pub fn new(
        local: &'a EngineMetadata,
        remote: &'a [&'a EngineMetadata],
    ) -> PlanContextParams<'a> {
        PlanContextParams {
            local,
            remote,
            local_geometry: None,
            remote_geometry: None,
            mapping: None,
            permute_on_receive: false,
        }
    }

    /// Lets D read P's blocks in P's KV layout and permute them into its own after receipt.
    #[must_use]
    pub fn permute_on_receive(mut self, on: bool) -> PlanContextParams<'a> {
        self.permute_on_receive = on;
        self
    }

    /// Sets the D and P geometries (needed for Mamba groups).
    #[must_use]
    pub fn geometries(
        mut self,
        local: &'a Geometry,
        remote: &'a Geometry,
    ) -> PlanContextParams<'a> {
        self.local_geometry = Some(local);
        self.remote_geometry = Some(remote);
        self
    }

    /// Uses an explicit TP mapping instead of deriving it.
    #[must_use]
    pub fn mapping(mut self, mapping: &'a TpMapping) -> PlanContextParams<'a> {
        self.mapping = Some(mapping);
        self
    }
}

/// Everything about one (D rank, P engine) pair that does not change per request; immutable,
/// freed on drop.
#[derive(Debug)]
pub struct PlanContext {
    pub(crate) ptr: NonNull<sys::pdkv_plan_context_t>,
}

// SAFETY: immutable after creation; queries documented thread-safe; free only in Drop.
unsafe impl Send for PlanContext {}
// SAFETY: &self methods are thread-safe const queries (compile only reads the context).
unsafe impl Sync for PlanContext {}

impl Drop for PlanContext {
    fn drop(&mut self) {
        // SAFETY: owned handle.
        unsafe { sys::pdkv_plan_context_free(self.ptr.as_ptr()) }
    }
}

impl PlanContext {
    /// Builds a context (`pdkv_plan_context_new`).
    pub fn new(params: &PlanContextParams<'_>) -> Result<PlanContext> {
        let remote: Vec<*const sys::pdkv_engine_metadata_t> =
            params.remote.iter().map(|m| m.as_ptr()).collect();
        let raw = sys::pdkv_plan_context_params_t {
            struct_size: size_of::<sys::pdkv_plan_context_params_t>(),
            field_mask: 0,
            local: params.local.as_ptr(),
            remote: sp(&remote),
            num_remote: remote.len(),
            local_geometry: params.local_geometry.map_or(ptr::null(), |g| g.as_ptr()),
            remote_geometry: params.remote_geometry.map_or(ptr::null(), |g| g.as_ptr()),
            mapping: params.mapping.map_or(ptr::null(), |m| m.as_ptr()),
            permute_on_receive: u8::from(params.permute_on_receive),
        };
        let mut out = ptr::null_mut();
        // SAFETY: all handles live for the call; nothing retained.
        check(|e| unsafe { sys::pdkv_plan_context_new(&raw, &mut out, e) })?;
        NonNull::new(out)
            .map(|ptr| PlanContext { ptr })
            .ok_or_else(|| Error::new(Status::Internal, "pdkv returned a NULL plan context"))
    }

    /// The context's TP mapping as a new handle (`pdkv_plan_context_mapping`).
    pub fn mapping(&self) -> Result<TpMapping> {
        let mut out = ptr::null_mut();
        // SAFETY: live handle, valid out pointer.
        check(|e| unsafe { sys::pdkv_plan_context_mapping(self.ptr.as_ptr(), &mut out, e) })?;
        TpMapping::from_raw(out)
    }
}

/// One KV-cache group of a request (`pdkv_plan_group_t`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PlanGroup {
    /// Kind, blocks, tokens (tokens per block 0: from the metadata).
    pub trim: GroupTrimInput,
    /// Region indices of the group's layers; empty: all.
    pub regions: Vec<u32>,
    /// The group's model layers over the whole model, strictly ascending (exclusive with
    /// `regions`): needed when D's and P's pipeline stages hold different layer windows; a
    /// layer's region on a stage is its position among the group's layers in that stage's
    /// window. Empty: regions are paired by index.
    pub layers: Vec<u32>,
}

/// One KV-cache group of a request borrowed from the caller: the block ids and regions are
/// read in place by the library during the call (no `Vec` to build, no copy of the ids). Fields
/// as [`GroupTrimInput`] and [`PlanGroup`]; compile with [`TransferPlan::compile_borrowed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PlanGroupRef<'a> {
    /// Group kind.
    pub kind: GroupKind,
    /// Mamba cache mode (Mamba groups only).
    pub cache_mode: MambaCacheMode,
    /// D blocks still to fill (after D's prefix hit).
    pub local_blocks: &'a [u64],
    /// P blocks of the request.
    pub remote_blocks: &'a [u64],
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
    /// Region indices of the group's layers; empty: all.
    pub regions: &'a [u32],
    /// The group's model layers (see [`PlanGroup::layers`]); empty: paired by region index.
    pub layers: &'a [u32],
}

impl PlanGroupRef<'_> {
    fn raw_trim(self) -> sys::pdkv_group_trim_input_t {
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
            local_blocks: sp(self.local_blocks),
            num_local_blocks: self.local_blocks.len(),
            remote_blocks: sp(self.remote_blocks),
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

impl<'a> From<&'a PlanGroup> for PlanGroupRef<'a> {
    fn from(g: &'a PlanGroup) -> Self {
        let t = &g.trim;
        PlanGroupRef {
            kind: t.kind,
            cache_mode: t.cache_mode,
            local_blocks: &t.local_blocks,
            remote_blocks: &t.remote_blocks,
            local_tokens_per_block: t.local_tokens_per_block,
            remote_tokens_per_block: t.remote_tokens_per_block,
            remote_computed_tokens: t.remote_computed_tokens,
            local_hit_tokens: t.local_hit_tokens,
            sliding_window: t.sliding_window,
            local_first_block: t.local_first_block,
            remote_first_block: t.remote_first_block,
            local_kernel_blocks_per_id: t.local_kernel_blocks_per_id,
            remote_kernel_blocks_per_id: t.remote_kernel_blocks_per_id,
            regions: &g.regions,
            layers: &g.layers,
        }
    }
}

/// Builds the C arrays for `groups`; the returned raw groups point into `trims` and `groups`.
fn raw_groups(
    groups: &[PlanGroup],
    trims: &[sys::pdkv_group_trim_input_t],
) -> Vec<sys::pdkv_plan_group_t> {
    groups
        .iter()
        .zip(trims)
        .map(|(g, t)| sys::pdkv_plan_group_t {
            struct_size: size_of::<sys::pdkv_plan_group_t>(),
            field_mask: 0,
            trim: t,
            regions: sp(&g.regions),
            num_regions: g.regions.len(),
            layers: sp(&g.layers),
            num_layers: g.layers.len(),
        })
        .collect()
}

/// One read: D's `[local_offset, +length)` of `local_region` receives P's
/// `[remote_offset, +length)` of `remote_region` (offsets relative to the region bases).
/// Layout-identical to `pdkv_plan_read_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PlanRead {
    /// D region index.
    pub local_region: u32,
    /// Offset in the D region.
    pub local_offset: u64,
    /// P region index.
    pub remote_region: u32,
    /// Offset in the P region.
    pub remote_offset: u64,
    /// Bytes.
    pub length: u64,
}

const _: () = assert!(size_of::<PlanRead>() == size_of::<sys::pdkv_plan_read_t>());
const _: () = assert!(align_of::<PlanRead>() == align_of::<sys::pdkv_plan_read_t>());

/// Scalars of a plan (`pdkv_transfer_plan_info_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransferPlanInfo {
    /// P TP size.
    pub p_tp_size: u32,
    /// D TP size.
    pub d_tp_size: u32,
    /// The reading D rank.
    pub d_tp_rank: u32,
    /// P ranks with at least one read.
    pub num_read_ranks: usize,
    /// P ranks notified.
    pub num_notify_ranks: usize,
    /// Notifications each P rank waits for per request.
    pub notifications_per_p_rank: u32,
    /// Groups.
    pub num_groups: usize,
    /// Pieces before coalescing.
    pub pieces_before_coalescing: u64,
    /// Pieces after coalescing.
    pub pieces_after_coalescing: u64,
    /// Total bytes moved.
    pub bytes: u64,
    /// Attention bytes.
    pub attention_bytes: u64,
    /// Mamba bytes.
    pub mamba_bytes: u64,
    /// Nothing to read (full prefix hit): notify only.
    pub empty: bool,
    /// Pipeline stages of P (1 without PP); the plan's P ranks are TP ranks of stage
    /// `p_pp_rank`.
    pub p_pp_size: u32,
    /// P's stage.
    pub p_pp_rank: u32,
    /// Pipeline stages of D (1 without PP).
    pub d_pp_size: u32,
    /// The D rank's stage.
    pub d_pp_rank: u32,
    /// First model layer the plan moves.
    pub layer_begin: u32,
    /// One past its last layer; 0: through the model's last layer.
    pub layer_end: u32,
    /// The receive-side permutation of the blocks each group lists
    /// ([`PlanGroupZero::permute_blocks`]); inactive (equal layouts) when nothing is permuted.
    pub permute: BlockPermute,
}

/// How D permutes one received attention KV block: from the layout the bytes arrive in (P's) to
/// D's, one block being `heads` x `tokens` x `head_bytes` (`pdkv_transfer_plan_info_t.permute_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockPermute {
    /// Layout of the received bytes (P's).
    pub from: KvLayout,
    /// D's layout.
    pub to: KvLayout,
    /// D's KV heads per rank.
    pub heads: u64,
    /// D's kernel block size in tokens.
    pub tokens: u64,
    /// Bytes of one head of one token (scales included).
    pub head_bytes: u64,
}

impl BlockPermute {
    /// Whether any block is permuted (the layouts differ).
    pub fn active(&self) -> bool {
        self.from != self.to
    }

    /// Permutes one block in place (`pdkv_permute_kv_block`); [`Status::InvalidArgument`] when
    /// `block` is not `heads * tokens * head_bytes` bytes.
    pub fn apply(&self, block: &mut [u8]) -> Result<()> {
        permute_kv_block(
            block,
            self.from,
            self.to,
            self.heads,
            self.tokens,
            self.head_bytes,
        )
    }
}

/// Permutes one attention KV block of `heads` x `tokens` x `head_bytes` in place from layout
/// `from` to `to` (`pdkv_permute_kv_block`).
pub fn permute_kv_block(
    block: &mut [u8],
    from: KvLayout,
    to: KvLayout,
    heads: u64,
    tokens: u64,
    head_bytes: u64,
) -> Result<()> {
    let p = if block.is_empty() {
        ptr::null_mut()
    } else {
        block.as_mut_ptr()
    };
    // SAFETY: the block is written in place during the call only.
    check(|e| unsafe {
        sys::pdkv_permute_kv_block(
            p,
            block.len(),
            from.raw(),
            to.raw(),
            heads,
            tokens,
            head_bytes,
            e,
        )
    })
}

/// Receive-side work of one group, borrowed from the plan (`pdkv_plan_group_zero_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanGroupZero<'a> {
    /// Group kind.
    pub kind: GroupKind,
    /// Resolved region indices to zero in.
    pub regions: &'a [u32],
    /// D kernel block + token range.
    pub zero: &'a [ZeroRange],
    /// Mamba slots never to publish as cache hits.
    pub unfilled_states: &'a [u64],
    /// D kernel blocks (ascending) that arrive in P's layout and must be permuted into D's
    /// ([`TransferPlanInfo::permute`]) in each of `permute_regions`, after the data and before
    /// the zero ranges.
    pub permute_blocks: &'a [u64],
    /// Regions the blocks are permuted in (the group's regions that are not MLA).
    pub permute_regions: &'a [u32],
}

/// One request's compiled, validated transfer plan; immutable, freed on drop.
#[derive(Debug)]
pub struct TransferPlan {
    pub(crate) ptr: NonNull<sys::pdkv_transfer_plan_t>,
}

// SAFETY: changed only through &mut self (compile_into); queries documented thread-safe; free
// only in Drop.
unsafe impl Send for TransferPlan {}
// SAFETY: &self methods are thread-safe const queries.
unsafe impl Sync for TransferPlan {}

impl Drop for TransferPlan {
    fn drop(&mut self) {
        // SAFETY: owned handle; borrows are tied to &self.
        unsafe { sys::pdkv_transfer_plan_free(self.ptr.as_ptr()) }
    }
}

impl TransferPlan {
    /// Compiles and validates one request's plan: every D byte needed is written exactly once
    /// and no read leaves a registered region (`pdkv_transfer_plan_compile`).
    pub fn compile(ctx: &PlanContext, groups: &[PlanGroup]) -> Result<TransferPlan> {
        let trims: Vec<_> = groups.iter().map(|g| g.trim.to_raw()).collect();
        let raw = raw_groups(groups, &trims);
        let mut out = ptr::null_mut();
        // SAFETY: raw points into trims/groups, alive for the call; nothing retained.
        check(|e| unsafe {
            sys::pdkv_transfer_plan_compile(ctx.ptr.as_ptr(), sp(&raw), raw.len(), &mut out, e)
        })?;
        NonNull::new(out)
            .map(|ptr| TransferPlan { ptr })
            .ok_or_else(|| Error::new(Status::Internal, "pdkv returned a NULL plan"))
    }

    /// [`TransferPlan::compile`] from borrowed groups: the ids and regions are read from the
    /// caller's slices in place (only the small per-group structs are built).
    pub fn compile_borrowed(
        ctx: &PlanContext,
        groups: &[PlanGroupRef<'_>],
    ) -> Result<TransferPlan> {
        let trims: Vec<_> = groups.iter().map(|g| g.raw_trim()).collect();
        let raw: Vec<_> = groups
            .iter()
            .zip(&trims)
            .map(|(g, t)| sys::pdkv_plan_group_t {
                struct_size: size_of::<sys::pdkv_plan_group_t>(),
                field_mask: 0,
                trim: t,
                regions: sp(g.regions),
                num_regions: g.regions.len(),
                layers: sp(g.layers),
                num_layers: g.layers.len(),
            })
            .collect();
        let mut out = ptr::null_mut();
        // SAFETY: raw points into trims and the caller's slices, alive for the call; nothing
        // is retained.
        check(|e| unsafe {
            sys::pdkv_transfer_plan_compile(ctx.ptr.as_ptr(), sp(&raw), raw.len(), &mut out, e)
        })?;
        NonNull::new(out)
            .map(|ptr| TransferPlan { ptr })
            .ok_or_else(|| Error::new(Status::Internal, "pdkv returned a NULL plan"))
    }

    /// An empty plan (no reads, no groups) to be filled by [`TransferPlan::compile_into`]
    /// (`pdkv_transfer_plan_new`).
    pub fn new_empty() -> Result<TransferPlan> {
        let mut out = ptr::null_mut();
        // SAFETY: valid out pointer.
        check(|e| unsafe { sys::pdkv_transfer_plan_new(&mut out, e) })?;
        NonNull::new(out)
            .map(|ptr| TransferPlan { ptr })
            .ok_or_else(|| Error::new(Status::Internal, "pdkv returned a NULL plan"))
    }

    /// Compiles one request's plan into this one, replacing its content and reusing its buffers
    /// (`pdkv_transfer_plan_compile_into`): the same plan and errors as
    /// [`TransferPlan::compile`], without a new handle per request. `&mut self` is what the C
    /// call needs: nothing else may read the plan meanwhile, and no borrowed view of the old
    /// content outlives the call. On failure the plan is empty and may be compiled into again.
    pub fn compile_into(&mut self, ctx: &PlanContext, groups: &[PlanGroup]) -> Result<()> {
        let trims: Vec<_> = groups.iter().map(|g| g.trim.to_raw()).collect();
        let raw = raw_groups(groups, &trims);
        // SAFETY: raw points into trims/groups, alive for the call; the plan is exclusively
        // borrowed; nothing retained.
        check(|e| unsafe {
            sys::pdkv_transfer_plan_compile_into(
                ctx.ptr.as_ptr(),
                sp(&raw),
                raw.len(),
                self.ptr.as_ptr(),
                e,
            )
        })
    }

    /// [`TransferPlan::compile_into`] through `pdkv_transfer_plan_compile_args`, the C entry
    /// that takes the call's arguments (all but the plan) in one struct, for bindings whose
    /// foreign calls cost per argument (Python's ctypes); Rust's do not, so Rust engines have no
    /// reason to prefer it. The same plan and errors as `compile_into`.
    pub fn compile_into_args(&mut self, ctx: &PlanContext, groups: &[PlanGroup]) -> Result<()> {
        let trims: Vec<_> = groups.iter().map(|g| g.trim.to_raw()).collect();
        let raw = raw_groups(groups, &trims);
        check(|e| {
            let args = sys::pdkv_compile_args_t {
                struct_size: std::mem::size_of::<sys::pdkv_compile_args_t>(),
                ctx: ctx.ptr.as_ptr(),
                groups: sp(&raw),
                n_groups: raw.len(),
                err: e,
            };
            // SAFETY: args and what it points to (raw, trims, the error slot) outlive the call;
            // the plan is exclusively borrowed; nothing retained.
            unsafe { sys::pdkv_transfer_plan_compile_args(self.ptr.as_ptr(), &args) }
        })
    }

    /// Re-runs the coverage and bounds check against `(ctx, groups)`
    /// (`pdkv_transfer_plan_validate`).
    pub fn validate(&self, ctx: &PlanContext, groups: &[PlanGroup]) -> Result<()> {
        let trims: Vec<_> = groups.iter().map(|g| g.trim.to_raw()).collect();
        let raw = raw_groups(groups, &trims);
        // SAFETY: as in compile.
        check(|e| unsafe {
            sys::pdkv_transfer_plan_validate(
                self.ptr.as_ptr(),
                ctx.ptr.as_ptr(),
                sp(&raw),
                raw.len(),
                e,
            )
        })
    }

    /// The raw handle, borrowed (still owned by `self`).
    pub fn as_ptr(&self) -> *const sys::pdkv_transfer_plan_t {
        self.ptr.as_ptr()
    }

    /// The scalars (`pdkv_transfer_plan_get_info`).
    pub fn info(&self) -> Result<TransferPlanInfo> {
        // SAFETY: plain-data struct, all-zero valid.
        let mut r: sys::pdkv_transfer_plan_info_t = unsafe { zeroed() };
        r.struct_size = size_of::<sys::pdkv_transfer_plan_info_t>();
        // SAFETY: live handle, valid out struct.
        check(|e| unsafe { sys::pdkv_transfer_plan_get_info(self.ptr.as_ptr(), &mut r, e) })?;
        Ok(TransferPlanInfo {
            p_tp_size: r.p_tp_size,
            d_tp_size: r.d_tp_size,
            d_tp_rank: r.d_tp_rank,
            num_read_ranks: r.num_read_ranks,
            num_notify_ranks: r.num_notify_ranks,
            notifications_per_p_rank: r.notifications_per_p_rank,
            num_groups: r.num_groups,
            pieces_before_coalescing: r.pieces_before_coalescing,
            pieces_after_coalescing: r.pieces_after_coalescing,
            bytes: r.bytes,
            attention_bytes: r.attention_bytes,
            mamba_bytes: r.mamba_bytes,
            empty: r.empty != 0,
            // The library's values are u32 stage numbers and layers in u64 fields.
            p_pp_size: r.p_pp_size as u32,
            p_pp_rank: r.p_pp_rank as u32,
            d_pp_size: r.d_pp_size as u32,
            d_pp_rank: r.d_pp_rank as u32,
            layer_begin: r.layer_begin as u32,
            layer_end: r.layer_end as u32,
            permute: BlockPermute {
                from: KvLayout::from_raw(r.permute_from_layout as i32),
                to: KvLayout::from_raw(r.permute_to_layout as i32),
                heads: r.permute_heads,
                tokens: r.permute_tokens,
                head_bytes: r.permute_head_bytes,
            },
        })
    }

    /// P ranks D reads from, ascending, borrowed (`pdkv_transfer_plan_read_ranks`).
    pub fn read_ranks(&self) -> Result<&[u32]> {
        let (mut p, mut n) = (ptr::null(), 0usize);
        // SAFETY: live handle, valid out pointers.
        check(|e| unsafe {
            sys::pdkv_transfer_plan_read_ranks(self.ptr.as_ptr(), &mut p, &mut n, e)
        })?;
        // SAFETY: owned by the plan, valid while &self lives.
        Ok(unsafe { slice(p, n) })
    }

    /// The reads against P rank `p_tp_rank` in issue order, and their total bytes
    /// (`pdkv_transfer_plan_rank_reads`).
    pub fn rank_reads(&self, p_tp_rank: u32) -> Result<(&[PlanRead], u64)> {
        let (mut p, mut n, mut bytes) = (ptr::null(), 0usize, 0u64);
        // SAFETY: live handle, valid out pointers.
        check(|e| unsafe {
            sys::pdkv_transfer_plan_rank_reads(
                self.ptr.as_ptr(),
                p_tp_rank,
                &mut p,
                &mut n,
                &mut bytes,
                e,
            )
        })?;
        // SAFETY: owned by the plan, valid while &self lives; PlanRead is layout-identical.
        Ok((unsafe { slice(p.cast::<PlanRead>(), n) }, bytes))
    }

    /// P ranks D notifies after its reads, ascending, borrowed
    /// (`pdkv_transfer_plan_notify_ranks`).
    pub fn notify_ranks(&self) -> Result<&[u32]> {
        let (mut p, mut n) = (ptr::null(), 0usize);
        // SAFETY: live handle, valid out pointers.
        check(|e| unsafe {
            sys::pdkv_transfer_plan_notify_ranks(self.ptr.as_ptr(), &mut p, &mut n, e)
        })?;
        // SAFETY: owned by the plan, valid while &self lives.
        Ok(unsafe { slice(p, n) })
    }

    /// Receive-side work of group `index` (`pdkv_transfer_plan_group_zero`).
    pub fn group_zero(&self, index: usize) -> Result<PlanGroupZero<'_>> {
        // SAFETY: plain-data struct, all-zero valid.
        let mut r: sys::pdkv_plan_group_zero_t = unsafe { zeroed() };
        r.struct_size = size_of::<sys::pdkv_plan_group_zero_t>();
        // SAFETY: live handle, valid out struct.
        check(|e| unsafe {
            sys::pdkv_transfer_plan_group_zero(self.ptr.as_ptr(), index, &mut r, e)
        })?;
        // SAFETY: arrays owned by the plan, valid while &self lives.
        unsafe {
            Ok(PlanGroupZero {
                kind: GroupKind::from_raw(r.kind),
                regions: slice(r.regions, r.num_regions),
                zero: slice(r.zero.cast::<ZeroRange>(), r.num_zero),
                unfilled_states: slice(r.unfilled_states, r.num_unfilled_states),
                permute_blocks: slice(r.permute_blocks, r.num_permute_blocks),
                permute_regions: slice(r.permute_regions, r.num_permute_regions),
            })
        }
    }

    /// Human-readable JSON dump with stable key order, through a caller buffer
    /// (`pdkv_transfer_plan_to_json`).
    pub fn to_json(&self) -> Result<String> {
        // The library needs capacity >= len + 1 (for the NUL); ask for the length first.
        let mut len = 0usize;
        let first = check(|e| unsafe {
            sys::pdkv_transfer_plan_to_json(self.ptr.as_ptr(), ptr::null_mut(), 0, &mut len, e)
        });
        match first {
            Ok(()) => {}
            Err(e) if e.status() == Status::BufferTooSmall => {}
            Err(e) => return Err(e),
        }
        let mut buf = vec![0u8; len + 1];
        let mut written = 0usize;
        // SAFETY: buf has len + 1 bytes.
        check(|e| unsafe {
            sys::pdkv_transfer_plan_to_json(
                self.ptr.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut written,
                e,
            )
        })?;
        buf.truncate(written);
        String::from_utf8(buf).map_err(|_| Error::new(Status::Internal, "plan JSON is not UTF-8"))
    }

    /// The same JSON through the library-owned string (`pdkv_transfer_plan_to_json_string`).
    pub fn to_json_string(&self) -> Result<String> {
        let mut s = ptr::null_mut();
        // SAFETY: live handle, valid out pointer.
        check(|e| unsafe { sys::pdkv_transfer_plan_to_json_string(self.ptr.as_ptr(), &mut s, e) })?;
        let mut text = ptr::null();
        let mut len = 0usize;
        // SAFETY: s is owned; copied, then freed exactly once.
        let r = check(|e| unsafe { sys::pdkv_string_text(s, &mut text, &mut len, e) })
            .map(|()| unsafe { owned_str(text) });
        // SAFETY: we own s.
        unsafe { sys::pdkv_string_free(s) };
        r
    }
}
