//! Engine metadata (the handshake payload), its wire format, CRC-32C and handshake validation.
use crate::engine::{ConvLayout, ElementFormat, EngineConfig, MambaCacheMode};
use crate::error::{Error, Result, Status};
use crate::ffi_util::{borrowed_str, check, cstring, owned_str, slice, sp};
use crate::model::{MambaType, Model};
use pdkv_sys as sys;
use std::mem::{size_of, zeroed};
use std::ptr::{self, NonNull};

/// Attention KV layout of a kernel block (`pdkv_kv_layout_t`).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum KvLayout {
    /// Heads first: what head-sliced (heterogeneous TP) reads need.
    #[default]
    Hnd,
    /// Tokens first.
    Nhd,
    /// A raw value this version does not know.
    Other(i32),
}

impl KvLayout {
    /// The raw value.
    pub fn raw(self) -> i32 {
        match self {
            KvLayout::Hnd => 0,
            KvLayout::Nhd => 1,
            KvLayout::Other(v) => v,
        }
    }

    /// Maps a raw value.
    pub fn from_raw(v: i32) -> KvLayout {
        match v {
            0 => KvLayout::Hnd,
            1 => KvLayout::Nhd,
            other => KvLayout::Other(other),
        }
    }
}

/// Kind of the first layer using a registered region (`pdkv_region_kind_t`).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RegionKind {
    /// Attention KV.
    Attention,
    /// Mamba state.
    Mamba,
    /// An MLA-typed attention region of a GQA model: one latent replicated on every rank, read
    /// whole from one prefill rank (metadata format 1.1).
    Mla,
    /// A raw value this version does not know.
    Other(i32),
}

impl RegionKind {
    /// Maps a raw value.
    pub fn from_raw(v: i32) -> RegionKind {
        match v {
            0 => RegionKind::Attention,
            1 => RegionKind::Mamba,
            2 => RegionKind::Mla,
            other => RegionKind::Other(other),
        }
    }

    /// The raw `pdkv_region_kind_t` value.
    pub fn raw(self) -> i32 {
        match self {
            RegionKind::Attention => 0,
            RegionKind::Mamba => 1,
            RegionKind::Mla => 2,
            RegionKind::Other(v) => v,
        }
    }
}

/// Where an engine's regions live and what it advertises beyond its geometry
/// (`pdkv_engine_layout_t`). `Default` takes `pdkv_engine_layout_init`'s values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineLayout {
    /// Non-empty UTF-8, at most 256 bytes.
    pub engine_id: String,
    /// This rank, `< tp_size`.
    pub tp_rank: u32,
    /// Per region; kernel blocks = this * ppl.
    pub num_logical_blocks: u64,
    /// Registered KV tensors.
    pub num_regions: u32,
    /// Address of region 0; regions follow back to back.
    pub base: u64,
    /// Explicit region addresses (empty: back to back from `base`).
    pub region_bases: Vec<u64>,
    /// KV layout.
    pub kv_layout: KvLayout,
    /// None: on iff the Mamba cache mode is not "none"; else forced.
    pub prefix_caching: Option<bool>,
    /// Kind of each region (empty: derived; `Mamba` for hybrids, else `Attention`, and for a
    /// model with MLA-typed layers its attention layers' kinds in layer-pattern order).
    pub region_kinds: Vec<RegionKind>,
    /// Pipeline stage (metadata format 1.2): stage `pp_rank` of `pp_size` holding the model
    /// layers `[layer_begin, layer_end)`; `layer_end` `None` means through the model's last layer.
    /// One stage (the default) holds every layer.
    pub pp_size: u32,
    /// This stage, `< pp_size`.
    pub pp_rank: u32,
    /// First layer of the stage.
    pub layer_begin: u32,
    /// One past its last layer (`None`: through the model's last layer).
    pub layer_end: Option<u32>,
}

impl Default for EngineLayout {
    fn default() -> EngineLayout {
        // SAFETY: all-zero valid; init only fails on NULL, which we never pass.
        let mut raw: sys::pdkv_engine_layout_t = unsafe { zeroed() };
        let _ = unsafe { sys::pdkv_engine_layout_init(&mut raw, ptr::null_mut()) };
        EngineLayout {
            // SAFETY: init sets a static string (or leaves NULL: "").
            engine_id: unsafe { owned_str(raw.engine_id) },
            tp_rank: raw.tp_rank,
            num_logical_blocks: raw.num_logical_blocks,
            num_regions: raw.num_regions,
            base: raw.base,
            region_bases: Vec::new(),
            region_kinds: Vec::new(),
            kv_layout: KvLayout::from_raw(raw.kv_layout),
            prefix_caching: None,
            pp_size: raw.pp_size,
            pp_rank: raw.pp_rank,
            layer_begin: raw.layer_begin,
            layer_end: None,
        }
    }
}

/// Scalars of an engine metadata (`pdkv_engine_metadata_info_t`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineMetadataInfo {
    /// Engine id.
    pub engine_id: String,
    /// TP size.
    pub tp_size: u32,
    /// TP rank.
    pub tp_rank: u32,
    /// KV layout.
    pub kv_layout: KvLayout,
    /// Conv layout.
    pub conv_layout: ConvLayout,
    /// Tokens per logical (HMA) block.
    pub logical_block_size: u32,
    /// Tokens per kernel block.
    pub kernel_block_size: u32,
    /// ppl.
    pub physical_blocks_per_logical: u32,
    /// Kernel blocks per region.
    pub num_kernel_blocks: u64,
    /// Regions.
    pub num_regions: usize,
    /// Mamba type (None: pure attention).
    pub mamba_type: MambaType,
    /// Conv bytes per rank per logical block.
    pub conv_bytes: u64,
    /// SSM bytes per rank per logical block.
    pub ssm_bytes: u64,
    /// Conv projections.
    pub num_conv_projections: usize,
    /// Attention bytes per token per rank.
    pub attention_bytes_per_token: u64,
    /// MLA.
    pub use_mla: bool,
    /// Total KV heads.
    pub total_kv_heads: u32,
    /// Prefix caching on.
    pub prefix_caching: bool,
    /// Mamba cache mode.
    pub cache_mode: MambaCacheMode,
    /// [`Model::fingerprint`] of the model.
    pub model_fingerprint: u64,
    /// Pipeline stages of the engine (1 without PP).
    pub pp_size: u32,
    /// This rank's stage.
    pub pp_rank: u32,
    /// First model layer the stage holds.
    pub layer_begin: u32,
    /// One past its last layer; 0: through the model's last layer.
    pub layer_end: u32,
    /// Element formats (metadata format 1.3); [`ElementFormat::Unknown`]: not named, or
    /// metadata from an older pdkv (compatible with any format in the handshake).
    pub model_format: ElementFormat,
    /// The KV cache's element format.
    pub kv_cache_format: ElementFormat,
    /// The Mamba conv state's element format.
    pub conv_state_format: ElementFormat,
    /// The Mamba SSM state's element format.
    pub ssm_state_format: ElementFormat,
}

/// One advertised region (`pdkv_metadata_region_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetadataRegion {
    /// Base address.
    pub base: u64,
    /// Kernel page bytes.
    pub block_len: u64,
    /// Kernel blocks.
    pub num_blocks: u64,
    /// Kind of the first user.
    pub kind: RegionKind,
    /// Model layer index of the first user.
    pub layer: u32,
}

/// What one engine rank advertises in the handshake (wire format 1.x); immutable, freed on drop.
/// `==` compares field for field (`pdkv_engine_metadata_equal`).
#[derive(Debug)]
pub struct EngineMetadata {
    ptr: NonNull<sys::pdkv_engine_metadata_t>,
}

// SAFETY: immutable after creation; queries documented thread-safe; free only in Drop.
unsafe impl Send for EngineMetadata {}
// SAFETY: &self methods are thread-safe const queries.
unsafe impl Sync for EngineMetadata {}

impl Drop for EngineMetadata {
    fn drop(&mut self) {
        // SAFETY: owned handle; borrows are tied to &self.
        unsafe { sys::pdkv_engine_metadata_free(self.ptr.as_ptr()) }
    }
}

impl PartialEq for EngineMetadata {
    /// Field-for-field equality; a library failure (impossible with live handles) is unequal.
    fn eq(&self, other: &EngineMetadata) -> bool {
        let mut out = 0u8;
        // SAFETY: live handles, valid out pointer.
        check(|e| unsafe {
            sys::pdkv_engine_metadata_equal(self.as_ptr(), other.as_ptr(), &mut out, e)
        })
        .is_ok()
            && out == 1
    }
}

impl EngineMetadata {
    pub(crate) fn wrap(out: *mut sys::pdkv_engine_metadata_t) -> Result<EngineMetadata> {
        NonNull::new(out)
            .map(|ptr| EngineMetadata { ptr })
            .ok_or_else(|| Error::new(Status::Internal, "pdkv returned a NULL metadata"))
    }

    /// Metadata of rank `layout.tp_rank` of an engine running `model` with `config`
    /// (`pdkv_engine_metadata_from_model`).
    pub fn from_model(
        model: &Model,
        config: &EngineConfig,
        layout: &EngineLayout,
    ) -> Result<EngineMetadata> {
        let id = cstring(&layout.engine_id, "engine id")?;
        let kinds: Vec<i32> = layout.region_kinds.iter().map(|k| k.raw()).collect();
        if !kinds.is_empty() && kinds.len() != layout.num_regions as usize {
            return Err(Error::new(
                Status::InvalidArgument,
                format!(
                    "region_kinds has {} entries but num_regions is {}",
                    kinds.len(),
                    layout.num_regions
                ),
            ));
        }
        let raw_layout = sys::pdkv_engine_layout_t {
            struct_size: size_of::<sys::pdkv_engine_layout_t>(),
            field_mask: crate::engine::optional_bit(
                layout.prefix_caching,
                sys::PDKV_LAYOUT_FIELD_PREFIX_CACHING,
            ) | u64::from(sys::PDKV_LAYOUT_FIELD_PIPELINE)
                | crate::engine::optional_bit(layout.layer_end, sys::PDKV_LAYOUT_FIELD_LAYER_END),
            engine_id: id.as_ptr(),
            tp_rank: layout.tp_rank,
            num_logical_blocks: layout.num_logical_blocks,
            num_regions: layout.num_regions,
            base: layout.base,
            region_bases: sp(&layout.region_bases),
            kv_layout: layout.kv_layout.raw(),
            prefix_caching: u8::from(layout.prefix_caching.unwrap_or(false)),
            region_kinds: if kinds.is_empty() {
                ptr::null()
            } else {
                kinds.as_ptr()
            },
            pp_size: layout.pp_size,
            pp_rank: layout.pp_rank,
            layer_begin: layout.layer_begin,
            layer_end: layout.layer_end.unwrap_or(0),
        };
        if !layout.region_bases.is_empty()
            && layout.region_bases.len() != layout.num_regions as usize
        {
            return Err(Error::new(
                Status::InvalidArgument,
                format!(
                    "region_bases has {} entries but num_regions is {}",
                    layout.region_bases.len(),
                    layout.num_regions
                ),
            ));
        }
        let raw_config = config.to_raw();
        let mut out = ptr::null_mut();
        // SAFETY: all inputs live for the call; nothing retained.
        check(|e| unsafe {
            sys::pdkv_engine_metadata_from_model(
                model.as_ptr(),
                &raw_config,
                &raw_layout,
                &mut out,
                e,
            )
        })?;
        EngineMetadata::wrap(out)
    }

    /// Decodes untrusted bytes from a peer (`pdkv_engine_metadata_decode`): [`Status::Parse`],
    /// [`Status::Checksum`] or [`Status::OutOfBounds`] on bad input, never a crash.
    pub fn decode(bytes: &[u8]) -> Result<EngineMetadata> {
        let mut out = ptr::null_mut();
        // SAFETY: bytes read during the call only.
        check(|e| unsafe {
            sys::pdkv_engine_metadata_decode(sp(bytes), bytes.len(), &mut out, e)
        })?;
        EngineMetadata::wrap(out)
    }

    /// Encodes into a caller buffer sized by a first call (`pdkv_engine_metadata_encode`).
    pub fn encode(&self) -> Result<Vec<u8>> {
        // SAFETY: fill_vec passes a buffer of `cap` bytes (or NULL, 0).
        crate::ffi_util::fill_vec(|buf, cap, n, e| unsafe {
            sys::pdkv_engine_metadata_encode(self.as_ptr(), buf, cap, n, e)
        })
    }

    /// Encodes through the library-owned buffer (`pdkv_engine_metadata_encode_bytes`); same
    /// bytes as [`EngineMetadata::encode`].
    pub fn encode_bytes(&self) -> Result<Vec<u8>> {
        let mut b = ptr::null_mut();
        // SAFETY: live handle, valid out pointer.
        check(|e| unsafe { sys::pdkv_engine_metadata_encode_bytes(self.as_ptr(), &mut b, e) })?;
        let (mut p, mut n) = (ptr::null(), 0usize);
        // SAFETY: b is an owned buffer; copied then freed exactly once.
        let r = check(|e| unsafe { sys::pdkv_bytes_data(b, &mut p, &mut n, e) })
            .map(|()| unsafe { slice(p, n) }.to_vec());
        // SAFETY: we own b.
        unsafe { sys::pdkv_bytes_free(b) };
        r
    }

    /// The scalars (`pdkv_engine_metadata_get_info`).
    pub fn info(&self) -> Result<EngineMetadataInfo> {
        // SAFETY: plain-data struct, all-zero valid.
        let mut r: sys::pdkv_engine_metadata_info_t = unsafe { zeroed() };
        r.struct_size = size_of::<sys::pdkv_engine_metadata_info_t>();
        // SAFETY: live handle, valid out struct.
        check(|e| unsafe { sys::pdkv_engine_metadata_get_info(self.as_ptr(), &mut r, e) })?;
        Ok(EngineMetadataInfo {
            // SAFETY: owned by the live metadata; copied now.
            engine_id: unsafe { borrowed_str(r.engine_id) }.to_owned(),
            tp_size: r.tp_size,
            tp_rank: r.tp_rank,
            kv_layout: KvLayout::from_raw(r.kv_layout),
            conv_layout: ConvLayout::from_raw(r.conv_layout),
            logical_block_size: r.logical_block_size,
            kernel_block_size: r.kernel_block_size,
            physical_blocks_per_logical: r.physical_blocks_per_logical,
            num_kernel_blocks: r.num_kernel_blocks,
            num_regions: r.num_regions,
            mamba_type: MambaType::from_raw(r.mamba_type),
            conv_bytes: r.conv_bytes,
            ssm_bytes: r.ssm_bytes,
            num_conv_projections: r.num_conv_projections,
            attention_bytes_per_token: r.attention_bytes_per_token,
            use_mla: r.use_mla != 0,
            total_kv_heads: r.total_kv_heads,
            prefix_caching: r.prefix_caching != 0,
            cache_mode: MambaCacheMode::from_raw(r.cache_mode),
            model_fingerprint: r.model_fingerprint,
            pp_size: r.pp_size,
            pp_rank: r.pp_rank,
            layer_begin: r.layer_begin,
            layer_end: r.layer_end,
            model_format: ElementFormat::from_raw(r.model_format),
            kv_cache_format: ElementFormat::from_raw(r.kv_cache_format),
            conv_state_format: ElementFormat::from_raw(r.conv_state_format),
            ssm_state_format: ElementFormat::from_raw(r.ssm_state_format),
        })
    }

    /// The advertised regions (`pdkv_engine_metadata_regions`).
    pub fn regions(&self) -> Result<Vec<MetadataRegion>> {
        let (mut p, mut n) = (ptr::null(), 0usize);
        // SAFETY: live handle, valid out pointers.
        check(|e| unsafe { sys::pdkv_engine_metadata_regions(self.as_ptr(), &mut p, &mut n, e) })?;
        // SAFETY: n entries owned by the metadata, copied now.
        Ok(unsafe { slice(p, n) }
            .iter()
            .map(|r| MetadataRegion {
                base: r.base,
                block_len: r.block_len,
                num_blocks: r.num_blocks,
                kind: RegionKind::from_raw(r.kind),
                layer: r.layer,
            })
            .collect())
    }

    /// Conv projection bytes in DS page order, borrowed
    /// (`pdkv_engine_metadata_conv_projection_bytes`).
    pub fn conv_projection_bytes(&self) -> Result<&[u64]> {
        let (mut p, mut n) = (ptr::null(), 0usize);
        // SAFETY: live handle, valid out pointers.
        check(|e| unsafe {
            sys::pdkv_engine_metadata_conv_projection_bytes(self.as_ptr(), &mut p, &mut n, e)
        })?;
        // SAFETY: owned by the metadata, valid while &self lives.
        Ok(unsafe { slice(p, n) })
    }

    /// The raw handle, borrowed (still owned by `self`).
    pub fn as_ptr(&self) -> *const sys::pdkv_engine_metadata_t {
        self.ptr.as_ptr()
    }
}

/// Wire format version this library writes, `(major, minor)` (`pdkv_metadata_wire_version`).
pub fn metadata_wire_version() -> (u16, u16) {
    let (mut a, mut b) = (0u16, 0u16);
    // SAFETY: valid out pointers; never fails.
    unsafe { sys::pdkv_metadata_wire_version(&mut a, &mut b) };
    (a, b)
}

/// CRC-32C (Castagnoli) as the metadata header uses (`pdkv_crc32c`).
pub fn crc32c(bytes: &[u8]) -> Result<u32> {
    let mut out = 0u32;
    // SAFETY: bytes read during the call.
    check(|e| unsafe { sys::pdkv_crc32c(sp(bytes), bytes.len(), &mut out, e) })?;
    Ok(out)
}

impl Model {
    /// Stable 64-bit fingerprint of what changes transfer geometry (`pdkv_model_fingerprint`).
    pub fn fingerprint(&self) -> Result<u64> {
        let mut out = 0u64;
        // SAFETY: live model, valid out pointer.
        check(|e| unsafe { sys::pdkv_model_fingerprint(self.as_ptr(), &mut out, e) })?;
        Ok(out)
    }
}

/// One incompatibility found by a handshake validation (`pdkv_incompatibility_t`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incompatibility {
    /// Incompatible, TpNotDivisible, ...
    pub status: Status,
    /// Metadata field, e.g. `kv_layout`, `regions[3].num_blocks`.
    pub field: String,
    /// Local value.
    pub local_value: String,
    /// Remote value.
    pub remote_value: String,
    /// What is wrong, naming the values.
    pub message: String,
    /// What the operator can change.
    pub fix: String,
    /// `"<STATUS> <field>: <message> (local: v, remote: v). Fix: <fix>"`.
    pub text: String,
}

/// Copies every item of a report handle and frees it.
fn take_report(report: *mut sys::pdkv_handshake_report_t) -> Result<Vec<Incompatibility>> {
    struct Guard(*mut sys::pdkv_handshake_report_t);
    impl Drop for Guard {
        fn drop(&mut self) {
            // SAFETY: we own the report; NULL is allowed.
            unsafe { sys::pdkv_handshake_report_free(self.0) }
        }
    }
    let g = Guard(report);
    let mut n = 0usize;
    // SAFETY: live report (or NULL: NULL_POINTER error).
    check(|e| unsafe { sys::pdkv_handshake_report_count(g.0, &mut n, e) })?;
    (0..n)
        .map(|i| {
            // SAFETY: plain-data struct, all-zero valid.
            let mut r: sys::pdkv_incompatibility_t = unsafe { zeroed() };
            r.struct_size = size_of::<sys::pdkv_incompatibility_t>();
            // SAFETY: live report, valid out struct.
            check(|e| unsafe { sys::pdkv_handshake_report_item(g.0, i, &mut r, e) })?;
            // SAFETY: the strings are owned by the live report; copied now.
            unsafe {
                Ok(Incompatibility {
                    status: Status::from_raw(r.status as sys::pdkv_status_t),
                    field: owned_str(r.field),
                    local_value: owned_str(r.local_value),
                    remote_value: owned_str(r.remote_value),
                    message: owned_str(r.message),
                    fix: owned_str(r.fix),
                    text: owned_str(r.text),
                })
            }
        })
        .collect()
}

/// Validates a (local, remote) pair; "local" runs the check (D when pulling). An incompatible
/// pair is not an error: every item is listed, empty means the pair can be served
/// (`pdkv_handshake_validate`).
pub fn handshake_validate(
    local: &EngineMetadata,
    remote: &EngineMetadata,
) -> Result<Vec<Incompatibility>> {
    let mut out = ptr::null_mut();
    // SAFETY: live handles, valid out pointer.
    check(|e| unsafe {
        sys::pdkv_handshake_validate(local.as_ptr(), remote.as_ptr(), &mut out, e)
    })?;
    take_report(out)
}

/// Checks that the ranks of ONE remote engine agree; items compare `ranks[0]` with the
/// offending rank (`pdkv_handshake_validate_engine_ranks`).
pub fn handshake_validate_engine_ranks(ranks: &[&EngineMetadata]) -> Result<Vec<Incompatibility>> {
    let raw: Vec<*const sys::pdkv_engine_metadata_t> = ranks.iter().map(|m| m.as_ptr()).collect();
    let mut out = ptr::null_mut();
    // SAFETY: raw holds live handles borrowed for the call.
    check(|e| unsafe {
        sys::pdkv_handshake_validate_engine_ranks(sp(&raw), raw.len(), &mut out, e)
    })?;
    take_report(out)
}

/// Require-style validation: `Ok` when the pair can be served, else [`Status::Incompatible`]
/// joining every item's text (`pdkv_handshake_require_compatible`).
pub fn handshake_require_compatible(local: &EngineMetadata, remote: &EngineMetadata) -> Result<()> {
    // SAFETY: live handles.
    check(|e| unsafe { sys::pdkv_handshake_require_compatible(local.as_ptr(), remote.as_ptr(), e) })
}
