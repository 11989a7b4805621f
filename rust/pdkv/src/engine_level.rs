//! The engine-level API (`pdkv/engine.h`): describe an engine rank once, plan each request from
//! what its scheduler holds.
//!
//! An [`Engine`] (model, settings, TP rank, where its KV tensors live) derives its KV-cache
//! groups as vLLM's hybrid KV-cache manager forms them, its handshake metadata and its
//! registration descriptors. Per request, [`Engine::plan_request`] takes per group the logical
//! block ids of D's block table and those P exported, the prompt length and D's prefix-cache
//! hit, and returns the same [`TransferPlan`] [`TransferPlan::compile`] does: the N-1 rule,
//! kernel-id expansion and the Mamba slots of each cache mode are pdkv's job. A request that
//! does not fit the engine is [`Status::InvalidArgument`] saying what to pass instead.
use crate::blocks::GroupKind;
use crate::descriptors::DescriptorList;
use crate::engine::{EngineConfig, MambaCacheMode};
use crate::error::{Error, Result, Status};
use crate::ffi_util::{check, cstring, slice, sp};
use crate::metadata::{EngineMetadata, KvLayout};
use crate::model::Model;
use crate::plan::{PlanContext, TransferPlan};
use pdkv_sys as sys;
use std::mem::{size_of, zeroed};
use std::ptr::{self, NonNull};

/// Where an engine rank's regions live and what it advertises beyond its settings
/// (`pdkv_engine_options_t` without the model and config).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineOptions {
    /// Non-empty id the engine advertises.
    pub engine_id: String,
    /// This rank, below the TP size.
    pub tp_rank: u32,
    /// Logical blocks per region, null block 0 included.
    pub num_logical_blocks: u64,
    /// Address of region 0 when `region_bases` is empty (regions back to back).
    pub base: u64,
    /// One address per region, or empty.
    pub region_bases: Vec<u64>,
    /// Attention KV layout.
    pub kv_layout: KvLayout,
    /// None: derived (on iff the Mamba cache mode is not none); else on or off.
    pub prefix_caching: Option<bool>,
}

impl Default for EngineOptions {
    /// The library's defaults (`pdkv_engine_options_init`): engine id "engine", rank 0, 64
    /// logical blocks, regions back to back from 2^40, HND, derived prefix caching.
    fn default() -> EngineOptions {
        // SAFETY: a plain C struct; zero is a valid value for every field.
        let mut c: sys::pdkv_engine_options_t = unsafe { zeroed() };
        // SAFETY: valid out pointer; the defaults cannot fail on a non-NULL struct.
        check(|e| unsafe { sys::pdkv_engine_options_init(&mut c, e) })
            .expect("pdkv_engine_options_init");
        // SAFETY: the library sets engine_id to a static NUL-terminated string.
        let id = unsafe { std::ffi::CStr::from_ptr(c.engine_id) };
        EngineOptions {
            engine_id: id.to_string_lossy().into_owned(),
            tp_rank: c.tp_rank,
            num_logical_blocks: c.num_logical_blocks,
            base: c.base,
            region_bases: Vec::new(),
            kv_layout: KvLayout::from_raw(c.kv_layout),
            prefix_caching: None,
        }
    }
}

impl EngineOptions {
    /// Options for rank `tp_rank` of engine `engine_id` with `num_logical_blocks` blocks per
    /// region, the rest defaulted.
    pub fn new(engine_id: &str, tp_rank: u32, num_logical_blocks: u64) -> EngineOptions {
        EngineOptions {
            engine_id: engine_id.to_owned(),
            tp_rank,
            num_logical_blocks,
            ..EngineOptions::default()
        }
    }
}

/// Scalars of an [`Engine`] (`pdkv_engine_info_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineInfo {
    /// KV-cache groups ([`Engine::groups`]).
    pub num_groups: usize,
    /// Registered KV tensors: the largest group's layers.
    pub num_regions: u32,
    /// TP size.
    pub tp_size: u32,
    /// This rank.
    pub tp_rank: u32,
    /// Mamba cache mode (pure attention: none).
    pub cache_mode: MambaCacheMode,
    /// Tokens per block of the block table.
    pub logical_block_size: u64,
    /// Tokens per kernel block.
    pub kernel_block_size: u64,
    /// Kernel blocks per logical block (ppl).
    pub physical_blocks_per_logical: u64,
    /// Logical blocks per region.
    pub num_logical_blocks: u64,
    /// Mamba scratch slots at the end of each Mamba list.
    pub num_speculative_tokens: u64,
    /// The engine can hold a prefix-cache hit.
    pub prefix_caching: bool,
}

/// One KV-cache group (`pdkv_engine_group_t`), borrowed from its engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineGroup<'a> {
    /// Group kind.
    pub kind: GroupKind,
    /// Model layers, ascending.
    pub layers: &'a [u32],
    /// `regions[i]`: the region `layers[i]` uses.
    pub regions: &'a [u32],
}

/// One group of a request, in the engine's group order, borrowing the caller's ids (read in
/// place, never copied).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestGroup<'a> {
    /// D's block table for the group: logical ids from the request's first block, hit blocks
    /// included; a Mamba list as the table holds it.
    pub local_block_ids: &'a [u64],
    /// P's logical ids as P exported them (exchange-clipped).
    pub remote_block_ids: &'a [u64],
}

/// One engine rank described once (`pdkv_engine_t`); immutable, freed on drop.
#[derive(Debug)]
pub struct Engine {
    ptr: NonNull<sys::pdkv_engine_t>,
}

// SAFETY: immutable after creation; every query is documented thread-safe; free only in Drop.
unsafe impl Send for Engine {}
// SAFETY: &self methods are thread-safe const queries.
unsafe impl Sync for Engine {}

impl Drop for Engine {
    fn drop(&mut self) {
        // SAFETY: owned handle; borrows of its arrays are tied to &self.
        unsafe { sys::pdkv_engine_free(self.ptr.as_ptr()) }
    }
}

impl Engine {
    /// Describes an engine rank running `model` with `config` (`pdkv_engine_new`).
    pub fn new(model: &Model, config: &EngineConfig, options: &EngineOptions) -> Result<Engine> {
        let id = cstring(&options.engine_id, "engine id")?;
        let cc = config.to_raw();
        let raw = sys::pdkv_engine_options_t {
            struct_size: size_of::<sys::pdkv_engine_options_t>(),
            field_mask: crate::engine::optional_bit(
                options.prefix_caching,
                sys::PDKV_ENGINE_FIELD_PREFIX_CACHING,
            ),
            model: model.as_ptr(),
            config: &cc,
            engine_id: id.as_ptr(),
            tp_rank: options.tp_rank,
            num_logical_blocks: options.num_logical_blocks,
            base: options.base,
            region_bases: sp(&options.region_bases),
            num_region_bases: options.region_bases.len(),
            kv_layout: options.kv_layout.raw(),
            prefix_caching: u8::from(options.prefix_caching.unwrap_or(false)),
        };
        let mut out = ptr::null_mut();
        // SAFETY: every pointer lives for the call; nothing is retained.
        check(|e| unsafe { sys::pdkv_engine_new(&raw, &mut out, e) })?;
        NonNull::new(out)
            .map(|ptr| Engine { ptr })
            .ok_or_else(|| Error::new(Status::Internal, "pdkv returned a NULL engine"))
    }

    /// The engine's scalars (`pdkv_engine_get_info`).
    pub fn info(&self) -> Result<EngineInfo> {
        // SAFETY: a plain C struct; zero is valid.
        let mut i: sys::pdkv_engine_info_t = unsafe { zeroed() };
        i.struct_size = size_of::<sys::pdkv_engine_info_t>();
        // SAFETY: live handle, valid out pointer.
        check(|e| unsafe { sys::pdkv_engine_get_info(self.ptr.as_ptr(), &mut i, e) })?;
        Ok(EngineInfo {
            num_groups: i.num_groups,
            num_regions: i.num_regions,
            tp_size: i.tp_size,
            tp_rank: i.tp_rank,
            cache_mode: MambaCacheMode::from_raw(i.cache_mode),
            logical_block_size: i.logical_block_size,
            kernel_block_size: i.kernel_block_size,
            physical_blocks_per_logical: i.physical_blocks_per_logical,
            num_logical_blocks: i.num_logical_blocks,
            num_speculative_tokens: i.num_speculative_tokens,
            prefix_caching: i.prefix_caching != 0,
        })
    }

    /// KV-cache group `index` (`pdkv_engine_group`), borrowed from the engine;
    /// [`Status::OutOfBounds`] past the last group.
    pub fn group(&self, index: usize) -> Result<EngineGroup<'_>> {
        // SAFETY: a plain C struct; zero is valid.
        let mut g: sys::pdkv_engine_group_t = unsafe { zeroed() };
        g.struct_size = size_of::<sys::pdkv_engine_group_t>();
        // SAFETY: live handle, valid out pointer.
        check(|e| unsafe { sys::pdkv_engine_group(self.ptr.as_ptr(), index, &mut g, e) })?;
        // SAFETY: the arrays are owned by the engine, which outlives the borrow.
        Ok(unsafe {
            EngineGroup {
                kind: GroupKind::from_raw(g.kind),
                layers: slice(g.layers, g.num_layers),
                regions: slice(g.regions, g.num_regions),
            }
        })
    }

    /// Every KV-cache group, in the order a request lists its groups.
    pub fn groups(&self) -> Result<Vec<EngineGroup<'_>>> {
        (0..self.info()?.num_groups)
            .map(|i| self.group(i))
            .collect()
    }

    /// The metadata this rank advertises in the handshake, a new handle
    /// (`pdkv_engine_get_metadata`).
    pub fn metadata(&self) -> Result<EngineMetadata> {
        let mut out = ptr::null_mut();
        // SAFETY: live handle, valid out pointer.
        check(|e| unsafe { sys::pdkv_engine_get_metadata(self.ptr.as_ptr(), &mut out, e) })?;
        EngineMetadata::wrap(out)
    }

    /// The rank's registration descriptors in vLLM's local-handle order: every kernel block of
    /// every region as attention descriptors, then (Mamba models) every logical block's conv
    /// projections and temporal state (`pdkv_engine_registration_descriptors`).
    pub fn registration_descriptors(&self) -> Result<DescriptorList> {
        let mut out = ptr::null_mut();
        // SAFETY: live handle, valid out pointer.
        check(|e| unsafe {
            sys::pdkv_engine_registration_descriptors(self.ptr.as_ptr(), &mut out, e)
        })?;
        DescriptorList::from_out(out)
    }

    /// The plan context of this (D) engine and one P engine: the metadata of each of its ranks
    /// (any order, each once) and its settings (`pdkv_engine_plan_context_new`).
    pub fn plan_context(
        &self,
        remote: &[&EngineMetadata],
        remote_config: &EngineConfig,
        permute_on_receive: bool,
    ) -> Result<PlanContext> {
        let ptrs: Vec<*const sys::pdkv_engine_metadata_t> =
            remote.iter().map(|m| m.as_ptr()).collect();
        let cc = remote_config.to_raw();
        let peer = sys::pdkv_engine_peer_t {
            struct_size: size_of::<sys::pdkv_engine_peer_t>(),
            field_mask: 0,
            remote: sp(&ptrs),
            num_remote: ptrs.len(),
            remote_config: &cc,
            permute_on_receive: u8::from(permute_on_receive),
        };
        let mut out = ptr::null_mut();
        // SAFETY: every pointer lives for the call; nothing is retained.
        check(|e| unsafe {
            sys::pdkv_engine_plan_context_new(self.ptr.as_ptr(), &peer, &mut out, e)
        })?;
        NonNull::new(out)
            .map(|ptr| PlanContext { ptr })
            .ok_or_else(|| Error::new(Status::Internal, "pdkv returned a NULL plan context"))
    }

    /// Compiles one request's plan against `ctx` (built for this engine): one [`RequestGroup`]
    /// per engine group, the prompt length and D's prefix-cache hit
    /// (`pdkv_engine_plan_request`). The ids are read in place.
    pub fn plan_request(
        &self,
        ctx: &PlanContext,
        groups: &[RequestGroup<'_>],
        num_prompt_tokens: u64,
        num_local_computed_tokens: u64,
    ) -> Result<TransferPlan> {
        let raw = raw_request_groups(groups);
        let req = raw_request(&raw, num_prompt_tokens, num_local_computed_tokens);
        let mut out = ptr::null_mut();
        // SAFETY: raw points into the caller's slices, alive for the call; nothing retained.
        check(|e| unsafe {
            sys::pdkv_engine_plan_request(self.ptr.as_ptr(), ctx.ptr.as_ptr(), &req, &mut out, e)
        })?;
        NonNull::new(out)
            .map(|ptr| TransferPlan { ptr })
            .ok_or_else(|| Error::new(Status::Internal, "pdkv returned a NULL plan"))
    }

    /// [`Engine::plan_request`] into `plan` (from [`TransferPlan::new_empty`] or an earlier plan),
    /// replacing its content (`pdkv_engine_plan_request_into`), as
    /// [`TransferPlan::compile_into`] is to [`TransferPlan::compile`]: the same plan and errors
    /// without a new handle, the library reusing the plan's buffers (nothing allocated once the
    /// plan has grown). `&mut TransferPlan`: nothing else reads the plan meanwhile and no view
    /// of its old content outlives the call. On failure the plan is empty.
    pub fn plan_request_into(
        &self,
        ctx: &PlanContext,
        groups: &[RequestGroup<'_>],
        num_prompt_tokens: u64,
        num_local_computed_tokens: u64,
        plan: &mut TransferPlan,
    ) -> Result<()> {
        let raw = raw_request_groups(groups);
        let req = raw_request(&raw, num_prompt_tokens, num_local_computed_tokens);
        // SAFETY: raw points into the caller's slices, alive for the call; the plan is
        // exclusively borrowed; nothing retained.
        check(|e| unsafe {
            sys::pdkv_engine_plan_request_into(
                self.ptr.as_ptr(),
                ctx.ptr.as_ptr(),
                &req,
                plan.ptr.as_ptr(),
                e,
            )
        })
    }

    /// The C handle, valid while `self` lives.
    pub fn as_ptr(&self) -> *const sys::pdkv_engine_t {
        self.ptr.as_ptr()
    }
}

/// The C form of a request's groups (pointers into the caller's slices).
fn raw_request_groups(groups: &[RequestGroup<'_>]) -> Vec<sys::pdkv_engine_request_group_t> {
    groups
        .iter()
        .map(|g| sys::pdkv_engine_request_group_t {
            local_block_ids: sp(g.local_block_ids),
            num_local_block_ids: g.local_block_ids.len(),
            remote_block_ids: sp(g.remote_block_ids),
            num_remote_block_ids: g.remote_block_ids.len(),
        })
        .collect()
}

/// The C request over `raw` (which must outlive its use).
fn raw_request(
    raw: &[sys::pdkv_engine_request_group_t],
    num_prompt_tokens: u64,
    num_local_computed_tokens: u64,
) -> sys::pdkv_engine_request_t {
    sys::pdkv_engine_request_t {
        struct_size: size_of::<sys::pdkv_engine_request_t>(),
        field_mask: 0,
        groups: sp(raw),
        num_groups: raw.len(),
        num_prompt_tokens,
        num_local_computed_tokens,
    }
}
