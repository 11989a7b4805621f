//! Safe, idiomatic Rust API of **pdkv**: the transfer configuration of prefill/decode (P/D)
//! disaggregated LLM serving — which prefill ranks a decode rank reads attention KV and Mamba
//! state from, byte-exact descriptors and per-engine geometry — over the stable C API
//! `capi/include/pdkv.h` (`libpdkv.so`).
//!
//! * Every handle ([`Model`], [`TpMapping`], [`Geometry`], [`MambaReadList`],
//!   [`DescriptorList`], [`GroupTrim`], [`EngineMetadata`], [`PlanContext`], [`TransferPlan`],
//!   the engine-level [`Engine`] (`pdkv/engine.h`: describe an engine once, plan each request
//!   from its block table),
//!   and the executor's [`Agent`], [`Memory`], [`Peer`], [`Transfer`]) owns its C object and
//!   frees it in `Drop` (dropping a [`Transfer`] still in flight cancels it).
//! * Every fallible call returns [`Result<T>`] whose [`Error`] carries a [`Status`] and the
//!   library's message (which names the offending values).
//! * Handles are immutable after creation and their queries are thread-safe in C, so they are
//!   `Send + Sync`. The executor's handles are `Send + Sync` because `pdkv/agent.h` documents
//!   every call on them as thread-safe (see the `agent` module docs); deadlines are
//!   [`std::time::Duration`]s.
//! * There is no closed handle: a handle is freed only by `Drop`, and functions borrow handles
//!   (`&Model`, `&Geometry`...), so the borrow checker rules out calls on a freed or NULL handle
//!   (what the Go binding reports as `ErrClosed` and Python as `ClosedError`, both with status
//!   NULL_POINTER).
//! * Bad input: integer parameters are typed (`u32`, `u64`, `usize`), so a negative or too-wide
//!   value cannot be passed (Python raises `InvalidArgumentError` for those); a `&str` holding
//!   an interior NUL byte is an [`Error`] with [`Status::InvalidArgument`] naming the parameter
//!   and the value, raised before C is called (as in Go and Python); values outside the
//!   library's domain (rank >= TP, an index past the end, an `Other(v)` enum value the library
//!   does not know) get the library's status (`InvalidArgument`, `OutOfBounds`...).
//!
//! # Finding libpdkv
//!
//! Nothing needs to be set to build or run a program using this crate: `pdkv-sys` loads
//! `libpdkv.so.2` when it is first needed, from `$PDKV_LIB_DIR` (the directory variable every
//! pdkv binding shares), next to the executable, the directory found when `pdkv-sys` was built
//! (`PDKV_LIB_DIR` then, else `pkg-config --variable=libdir pdkv`: an installed prefix), or the
//! dynamic loader's own search. [`load_library`] reports where it came from, or every place
//! tried; a call made when no candidate loads panics with that report.
//!
//! ```no_run
//! use pdkv::{EngineConfig, Geometry, Model};
//! let model = Model::from_preset("nemotron-3-nano-30b")?;
//! let d = Geometry::new(&model, &EngineConfig::default().tp_size(2))?;
//! println!("block size {}", d.info()?.block_size);
//! # Ok::<(), pdkv::Error>(())
//! ```
#![deny(missing_docs)]

mod agent;
mod blocks;
mod descriptors;
mod engine;
mod engine_level;
mod error;
mod ffi_util;
mod geometry;
mod mamba;
mod memory;
mod metadata;
mod model;
mod pipeline;
mod shared_bytes;
#[rustfmt::skip]
mod plain;
mod plan;
mod scheduler;
mod status;
mod topology;
mod transfer;
mod trim;

pub use agent::{
    Agent, AgentInfo, AgentOptions, Notification, NotificationKind, Peer, PeerInfo, ProgressMode,
    Transport, CONTROL_PROTOCOL_MAJOR, CONTROL_PROTOCOL_MINOR,
};
pub use blocks::{
    clip_exchange_blocks, descriptor_ids, logical_to_kernel_block_ids, mamba_descriptor_ids,
    map_block_ids_for_block_size_ratio, receive_zero_ranges, uncovered_token_ranges,
    DescriptorLayout, ExchangeClipParams, GroupBlockIds, GroupKind, TokenInterval, ZeroRange,
};
pub use descriptors::{
    attention_local_descriptors, attention_remote_descriptors, attention_split_descriptors,
    mamba_local_descriptors, mamba_local_split_descriptors, mamba_remote_descriptors, Descriptor,
    DescriptorList, Region,
};
pub use engine::{Backend, ConvLayout, ElementFormat, EngineConfig, MambaCacheMode};
pub use engine_level::{Engine, EngineGroup, EngineInfo, EngineOptions, RequestGroup};
pub use error::{Cause, Error, Result, Status};
pub use geometry::{ConvProjection, Geometry, GeometryInfo};
pub use mamba::{ByteRange, MambaRead, MambaReadList, MambaReadsRule};
pub use memory::{HostBuffer, Memory, MemoryDesc, MemoryType};
pub use metadata::{
    crc32c, handshake_require_compatible, handshake_validate, handshake_validate_engine_ranks,
    metadata_wire_version, EngineLayout, EngineMetadata, EngineMetadataInfo, Incompatibility,
    KvLayout, MetadataRegion, RegionKind,
};
pub use model::{preset_at, preset_count, presets, MambaType, Model, ModelDesc, Preset};
pub use pipeline::{pipeline_notifications_expected, pipeline_stage_pairs, StagePair};
pub use plain::{
    backend_kernel_block_size, block_size_ratio, d_num_new_matched_tokens, handshake_target_ranks,
    notifications_expected_per_request, physical_blocks_per_logical, physical_head_range,
    pipeline_layer_window, sliding_window_blocks_to_keep, tp_ratio,
};
pub use plan::{
    permute_kv_block, BlockPermute, PlanContext, PlanContextParams, PlanGroup, PlanGroupRef,
    PlanGroupZero, PlanRead, TransferPlan, TransferPlanInfo,
};
pub use scheduler::{
    derive_offload_geometry, mamba_aligned_split, mamba_aligned_split_v0604,
    plan_remote_decode_prefill, truncate_for_remote_decode, AlignedSplitInput,
    AlignedSplitV0604Input, OffloadGeometry, OffloadLayer, RemoteDecodePrefill,
    RemoteDecodePrefillPlan,
};
pub use topology::{TpList, TpMapping, TpMappingInfo, TpMappingParams};
pub use transfer::{FailedRead, Transfer, TransferInfo, TransferOp, TransferParams, TransferState};
pub use trim::{GroupTrim, GroupTrimInput, StatePair, TokenRun};

/// Raw FFI declarations (re-export of the `pdkv-sys` crate) for what the safe API does not
/// cover; everything there is `unsafe`.
pub use pdkv_sys as sys;

/// Loads libpdkv now, if no call has yet, and returns the path it was loaded from; the error
/// lists every place tried and why each failed. Call it at startup to report a missing library
/// as an error rather than as the panic of the first call that needs it.
pub fn load_library() -> std::result::Result<&'static std::path::Path, &'static sys::LoadError> {
    sys::load()
}

/// Runtime version of the linked library as `(major, minor, patch)`.
pub fn version() -> (u32, u32, u32) {
    // SAFETY: no arguments, never fails, thread-safe.
    let v = unsafe { sys::pdkv_version() };
    (v >> 16, (v >> 8) & 0xff, v & 0xff)
}

/// Runtime version string of the linked library, `"MAJOR.MINOR.PATCH"`.
pub fn version_string() -> &'static str {
    // SAFETY: static storage, NUL-terminated.
    unsafe { ffi_util::static_str(sys::pdkv_version_string()) }
}

/// Version of the header these bindings were generated from, `(major, minor, patch)`.
pub const HEADER_VERSION: (u32, u32, u32) = (
    sys::PDKV_VERSION_MAJOR,
    sys::PDKV_VERSION_MINOR,
    sys::PDKV_VERSION_PATCH,
);
