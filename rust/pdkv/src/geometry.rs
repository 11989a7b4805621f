//! Per-engine geometry of a model (`pdkv_geometry_t`).
use crate::engine::EngineConfig;
use crate::error::{Error, Result, Status};
use crate::ffi_util::{borrowed_str, check, slice};
use crate::model::{MambaType, Model};
use pdkv_sys as sys;
use std::mem;
use std::ptr::{self, NonNull};

/// Scalars of a geometry (`pdkv_geometry_info_t`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GeometryInfo {
    /// TP size of the engine.
    pub tp_size: u32,
    /// `max(1, K/TP)`; MLA: 1.
    pub kv_heads_per_rank: u32,
    /// Attention bytes per token, per rank.
    pub attn_bytes_per_token: u64,
    /// The model has Mamba layers.
    pub hybrid: bool,
    /// Kind of the Mamba layers.
    pub mamba_type: MambaType,
    /// `conv_kernel - 1` (+ speculative tokens).
    pub conv_rows: u64,
    /// Conv channels per rank.
    pub conv_dim_local: u64,
    /// Conv state dtype bytes.
    pub conv_dtype_bytes: u32,
    /// SSM state dtype bytes.
    pub ssm_dtype_bytes: u32,
    /// Conv bytes per rank per logical block.
    pub conv_bytes: u64,
    /// SSM (temporal) bytes per rank per logical block.
    pub ssm_bytes: u64,
    /// conv + ssm, unpadded.
    pub mamba_page_bytes: u64,
    /// Rounding unit of the block-size rule.
    pub align: u32,
    /// Smallest block whose attention page holds a Mamba page.
    pub min_block_size: u64,
    /// Logical block size in tokens.
    pub block_size: u64,
    /// The block size was raised to `min_block_size`.
    pub block_size_raised: bool,
    /// Tokens per Mamba state ("none": 0).
    pub mamba_block_size: u64,
    /// `block_size * attn_bytes_per_token`.
    pub attn_page_bytes: u64,
    /// Equals `attn_page_bytes` for hybrids, else 0.
    pub mamba_page_padded_bytes: u64,
    /// `1e6 * (padded - page) / page`, rounded down.
    pub padding_ppm: u64,
    /// `100 * (padded - page) / page`.
    pub padding_percent: f64,
    /// Tokens per kernel block.
    pub kernel_block_size: u64,
    /// `block_size / kernel_block_size`.
    pub physical_per_logical: u64,
    /// `attn_page_bytes / ppl` (block_len in the handshake).
    pub kernel_page_bytes: u64,
    /// Number of conv projections.
    pub num_projections: usize,
    /// Rank of the temporal state.
    pub num_temporal_dims: usize,
    /// Number of vLLM log lines.
    pub num_log_lines: usize,
    /// MLA-typed layers of a GQA model: bytes per token of their replicated latent (the same at
    /// every TP); 0 for other models.
    pub mla_bytes_per_token: u64,
    /// `kernel_block_size * mla_bytes_per_token`.
    pub mla_kernel_page_bytes: u64,
    /// One KV head's entry per token: its K and V elements plus the per-token-head extras;
    /// `attn_bytes_per_token = kv_heads_per_rank * kv_head_bytes_per_token`.
    pub kv_head_bytes_per_token: u64,
}

/// One projection of the conv channels (Mamba2 x/B/C, GDN Q/K/V, Mamba1 x), DS layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConvProjection {
    /// "x", "B", "C", "Q", "K" or "V".
    pub name: String,
    /// Channels held by one rank.
    pub dim_local: u64,
    /// Channels of the whole model.
    pub dim_total: u64,
    /// Each rank holds a copy (Mamba2 B/C with n_groups < TP).
    pub replicated: bool,
    /// `dim_local * conv_rows * conv dtype`.
    pub bytes: u64,
    /// Byte offset in the page.
    pub offset: u64,
}

/// Geometry of a model on one engine; immutable, freed on drop.
#[derive(Debug)]
pub struct Geometry {
    ptr: NonNull<sys::pdkv_geometry_t>,
}

// SAFETY: immutable after creation; every query is documented thread-safe; free only in Drop.
unsafe impl Send for Geometry {}
// SAFETY: &self methods are thread-safe const queries.
unsafe impl Sync for Geometry {}

impl Drop for Geometry {
    fn drop(&mut self) {
        // SAFETY: owned handle; borrows of its data are tied to &self.
        unsafe { sys::pdkv_geometry_free(self.ptr.as_ptr()) }
    }
}

impl Geometry {
    /// Derives the geometry of `model` on the engine `config` (`pdkv_geometry_new`).
    pub fn new(model: &Model, config: &EngineConfig) -> Result<Geometry> {
        let raw = config.to_raw();
        let mut out = ptr::null_mut();
        // SAFETY: live model, raw borrows config's vector for the duration of the call.
        check(|e| unsafe { sys::pdkv_geometry_new(model.as_ptr(), &raw, &mut out, e) })?;
        NonNull::new(out)
            .map(|ptr| Geometry { ptr })
            .ok_or_else(|| Error::new(Status::Internal, "pdkv returned a NULL geometry"))
    }

    /// The geometry's scalars (`pdkv_geometry_get_info`).
    pub fn info(&self) -> Result<GeometryInfo> {
        // SAFETY: plain-data struct, all-zero valid.
        let mut r: sys::pdkv_geometry_info_t = unsafe { mem::zeroed() };
        r.struct_size = mem::size_of::<sys::pdkv_geometry_info_t>();
        // SAFETY: live handle, valid out struct.
        check(|e| unsafe { sys::pdkv_geometry_get_info(self.ptr.as_ptr(), &mut r, e) })?;
        Ok(GeometryInfo {
            tp_size: r.tp_size,
            kv_heads_per_rank: r.kv_heads_per_rank,
            attn_bytes_per_token: r.attn_bytes_per_token,
            hybrid: r.hybrid != 0,
            mamba_type: MambaType::from_raw(r.mamba_type),
            conv_rows: r.conv_rows,
            conv_dim_local: r.conv_dim_local,
            conv_dtype_bytes: r.conv_dtype_bytes,
            ssm_dtype_bytes: r.ssm_dtype_bytes,
            conv_bytes: r.conv_bytes,
            ssm_bytes: r.ssm_bytes,
            mamba_page_bytes: r.mamba_page_bytes,
            align: r.align,
            min_block_size: r.min_block_size,
            block_size: r.block_size,
            block_size_raised: r.block_size_raised != 0,
            mamba_block_size: r.mamba_block_size,
            attn_page_bytes: r.attn_page_bytes,
            mamba_page_padded_bytes: r.mamba_page_padded_bytes,
            padding_ppm: r.padding_ppm,
            padding_percent: r.padding_percent,
            kernel_block_size: r.kernel_block_size,
            physical_per_logical: r.physical_per_logical,
            kernel_page_bytes: r.kernel_page_bytes,
            num_projections: r.num_projections,
            num_temporal_dims: r.num_temporal_dims,
            num_log_lines: r.num_log_lines,
            mla_bytes_per_token: r.mla_bytes_per_token,
            mla_kernel_page_bytes: r.mla_kernel_page_bytes,
            kv_head_bytes_per_token: r.kv_head_bytes_per_token,
        })
    }

    /// Conv projection `index` (`pdkv_geometry_projection`); past the end is
    /// [`Status::OutOfBounds`].
    pub fn projection(&self, index: usize) -> Result<ConvProjection> {
        // SAFETY: plain-data struct, all-zero valid.
        let mut r: sys::pdkv_conv_projection_t = unsafe { mem::zeroed() };
        r.struct_size = mem::size_of::<sys::pdkv_conv_projection_t>();
        // SAFETY: live handle, valid out struct.
        check(|e| unsafe { sys::pdkv_geometry_projection(self.ptr.as_ptr(), index, &mut r, e) })?;
        Ok(ConvProjection {
            // SAFETY: owned by the live geometry; copied now.
            name: unsafe { borrowed_str(r.name) }.to_owned(),
            dim_local: r.dim_local,
            dim_total: r.dim_total,
            replicated: r.replicated != 0,
            bytes: r.bytes,
            offset: r.offset,
        })
    }

    /// All conv projections, in page order.
    pub fn projections(&self) -> Result<Vec<ConvProjection>> {
        (0..self.info()?.num_projections)
            .map(|i| self.projection(i))
            .collect()
    }

    /// Per-rank temporal state shape, borrowed from the geometry
    /// (`pdkv_geometry_temporal_shape`).
    pub fn temporal_shape(&self) -> Result<&[u64]> {
        let (mut p, mut n) = (ptr::null(), 0usize);
        // SAFETY: live handle, valid out pointers.
        check(|e| unsafe {
            sys::pdkv_geometry_temporal_shape(self.ptr.as_ptr(), &mut p, &mut n, e)
        })?;
        // SAFETY: n entries owned by the geometry, valid while &self lives.
        Ok(unsafe { slice(p, n) })
    }

    /// vLLM's INFO log line `index`, verbatim, borrowed from the geometry
    /// (`pdkv_geometry_log_line`).
    pub fn log_line(&self, index: usize) -> Result<&str> {
        let mut p = ptr::null();
        // SAFETY: live handle, valid out pointer.
        check(|e| unsafe { sys::pdkv_geometry_log_line(self.ptr.as_ptr(), index, &mut p, e) })?;
        // SAFETY: owned by the geometry, valid while &self lives.
        Ok(unsafe { borrowed_str(p) })
    }

    /// All vLLM log lines for this engine.
    pub fn log_lines(&self) -> Result<Vec<&str>> {
        (0..self.info()?.num_log_lines)
            .map(|i| self.log_line(i))
            .collect()
    }

    /// The raw handle, borrowed (still owned by `self`).
    pub fn as_ptr(&self) -> *const sys::pdkv_geometry_t {
        self.ptr.as_ptr()
    }
}
