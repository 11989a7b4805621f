//! Models: presets, Hugging Face `config.json` and explicit descriptions.
use crate::error::{Error, Result, Status};
use crate::ffi_util::{check, cstring, owned_str, static_str};
use pdkv_sys as sys;
use std::mem;
use std::path::Path;
use std::ptr::{self, NonNull};

/// Kind of the Mamba-like layers of a model (`pdkv_mamba_type_t`).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum MambaType {
    /// Pure attention model.
    #[default]
    None,
    /// Mamba1 (Jamba).
    Mamba1,
    /// Mamba2 (Nemotron-H, Falcon-H1, Granite-4.0-H, Zamba2).
    Mamba2,
    /// Gated delta net (Qwen3-Next, Qwen3.5).
    Gdn,
    /// LFM2 short conv (described but not transferable).
    ShortConv,
    /// Lightning / linear attention (not transferable).
    Linear,
    /// Kimi delta attention (not transferable).
    Kda,
    /// A raw value this version does not know (passed through unchanged).
    Other(i32),
}

impl MambaType {
    /// Maps a raw `pdkv_mamba_type_t` value.
    pub fn from_raw(v: i32) -> MambaType {
        match v {
            0 => MambaType::None,
            1 => MambaType::Mamba1,
            2 => MambaType::Mamba2,
            3 => MambaType::Gdn,
            4 => MambaType::ShortConv,
            5 => MambaType::Linear,
            6 => MambaType::Kda,
            other => MambaType::Other(other),
        }
    }

    /// The raw `pdkv_mamba_type_t` value.
    pub fn raw(self) -> i32 {
        match self {
            MambaType::None => 0,
            MambaType::Mamba1 => 1,
            MambaType::Mamba2 => 2,
            MambaType::Gdn => 3,
            MambaType::ShortConv => 4,
            MambaType::Linear => 5,
            MambaType::Kda => 6,
            MambaType::Other(v) => v,
        }
    }

    /// The library's lower-case name ("mamba2", "gdn", ...; "unknown" for other values).
    pub fn name(self) -> &'static str {
        // SAFETY: any value is accepted; static storage.
        unsafe { static_str(sys::pdkv_mamba_type_name(self.raw())) }
    }
}

/// Everything pdkv needs to know about a model (`pdkv_model_desc_t`), as owned Rust values.
/// Used as input of [`Model::new`] and output of [`Model::describe`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ModelDesc {
    /// Model name, e.g. "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16".
    pub name: String,
    /// Where the numbers come from.
    pub source: String,
    /// Total KV heads (MLA: 1).
    pub num_kv_heads: u32,
    /// K head dim (MLA: kv_lora_rank + qk_rope_head_dim).
    pub head_size: u32,
    /// V head dim (MLA: 0).
    pub head_size_v: u32,
    /// Multi-head latent attention.
    pub use_mla: bool,
    /// Sliding window in tokens; 0 is full attention.
    pub sliding_window: u32,
    /// Kind of the Mamba-like layers.
    pub mamba_type: MambaType,
    /// Mamba2: heads; GDN: value heads.
    pub mamba_num_heads: u32,
    /// Mamba2: head dim; GDN: value head dim.
    pub mamba_head_dim: u32,
    /// Mamba1/2: d_state; GDN: key head dim.
    pub mamba_d_state: u32,
    /// Mamba2: n_groups; GDN: key heads.
    pub mamba_n_groups: u32,
    /// Mamba1 only: d_inner.
    pub mamba_d_inner: u64,
    /// d_conv.
    pub mamba_conv_kernel: u32,
    /// Chunk size; `None`: 2048.
    pub mamba_chunk_size: Option<u32>,
    /// Speculative tokens add conv rows (NemotronH, GDN).
    pub mamba_conv_rows_include_spec: bool,
    /// Model dtype size in bytes, 1..8.
    pub dtype_bytes: u32,
    /// The SSM state dtype an engine's "auto" picks; `None`: the conv dtype.
    pub default_ssm_dtype_bytes: Option<u32>,
    /// One char per layer: '*' attention, 'M' Mamba, 'P' both, 'L' MLA-typed attention in a
    /// GQA model, '-' neither; "" = unknown.
    pub layer_pattern: String,
    /// Latent width (elements) of the 'L' layers of a GQA model: one head replicated on every
    /// rank, read whole from one prefill rank. 0: no such layers (a pure MLA model uses
    /// `use_mla`).
    pub mla_head_size: u32,
}

/// An immutable model (`pdkv_model_t`), freed on drop.
#[derive(Debug)]
pub struct Model {
    ptr: NonNull<sys::pdkv_model_t>,
}

// SAFETY: pdkv.h documents models as immutable after creation, with thread-safe const
// queries; pdkv_model_free is only reached through Drop, which needs exclusive ownership.
unsafe impl Send for Model {}
// SAFETY: every &self method calls a const query documented "Thread-safe".
unsafe impl Sync for Model {}

impl Drop for Model {
    fn drop(&mut self) {
        // SAFETY: we own the model and nobody else can use it anymore.
        unsafe { sys::pdkv_model_free(self.ptr.as_ptr()) }
    }
}

/// Wraps a freshly created handle, turning a NULL (which the library never returns on
/// success) into an internal error instead of UB.
fn wrap(ptr: *mut sys::pdkv_model_t) -> Result<Model> {
    NonNull::new(ptr)
        .map(|ptr| Model { ptr })
        .ok_or_else(|| Error::new(Status::Internal, "pdkv returned a NULL model"))
}

impl Model {
    /// Creates a model from a description (`pdkv_model_new`).
    pub fn new(desc: &ModelDesc) -> Result<Model> {
        let name = cstring(&desc.name, "model name")?;
        let source = cstring(&desc.source, "model source")?;
        let pattern = cstring(&desc.layer_pattern, "layer pattern")?;
        let raw = sys::pdkv_model_desc_t {
            struct_size: mem::size_of::<sys::pdkv_model_desc_t>(),
            field_mask: crate::engine::optional_bit(
                desc.mamba_chunk_size,
                sys::PDKV_MODEL_FIELD_MAMBA_CHUNK_SIZE,
            ) | crate::engine::optional_bit(
                desc.default_ssm_dtype_bytes,
                sys::PDKV_MODEL_FIELD_DEFAULT_SSM_DTYPE,
            ),
            name: name.as_ptr(),
            source: source.as_ptr(),
            num_kv_heads: desc.num_kv_heads,
            head_size: desc.head_size,
            head_size_v: desc.head_size_v,
            use_mla: desc.use_mla as u8,
            sliding_window: desc.sliding_window,
            mamba_type: desc.mamba_type.raw(),
            mamba_num_heads: desc.mamba_num_heads,
            mamba_head_dim: desc.mamba_head_dim,
            mamba_d_state: desc.mamba_d_state,
            mamba_n_groups: desc.mamba_n_groups,
            mamba_d_inner: desc.mamba_d_inner,
            mamba_conv_kernel: desc.mamba_conv_kernel,
            mamba_chunk_size: desc.mamba_chunk_size.unwrap_or(0),
            mamba_conv_rows_include_spec: desc.mamba_conv_rows_include_spec as u8,
            dtype_bytes: desc.dtype_bytes,
            default_ssm_dtype_bytes: desc.default_ssm_dtype_bytes.unwrap_or(0),
            layer_pattern: pattern.as_ptr(),
            mla_head_size: desc.mla_head_size,
        };
        let mut out = ptr::null_mut();
        // SAFETY: raw and its strings outlive the call; the library copies them.
        check(|e| unsafe { sys::pdkv_model_new(&raw, &mut out, e) })?;
        wrap(out)
    }

    /// Creates a model from a built-in preset, by short name or Hugging Face repo id,
    /// case-insensitive (`pdkv_model_from_preset`). Unknown names are [`Status::NotFound`].
    pub fn from_preset(name: &str) -> Result<Model> {
        let name = cstring(name, "preset name")?;
        let mut out = ptr::null_mut();
        // SAFETY: valid C string and out pointer.
        check(|e| unsafe { sys::pdkv_model_from_preset(name.as_ptr(), &mut out, e) })?;
        wrap(out)
    }

    /// Reads a Hugging Face `config.json` file (`pdkv_model_from_hf_config_file`). `name`
    /// overrides the stored model name (None keeps the config's `_name_or_path`, else the path).
    pub fn from_hf_config_file(path: impl AsRef<Path>, name: Option<&str>) -> Result<Model> {
        let path = path.as_ref();
        let path_str = path.to_str().ok_or_else(|| {
            Error::new(
                Status::InvalidArgument,
                format!("path is not valid UTF-8: {}", path.display()),
            )
        })?;
        let cpath = cstring(path_str, "config path")?;
        let cname = name.map(|n| cstring(n, "model name")).transpose()?;
        let mut out = ptr::null_mut();
        // SAFETY: valid C strings (name may be NULL) and out pointer.
        check(|e| unsafe {
            sys::pdkv_model_from_hf_config_file(
                cpath.as_ptr(),
                cname.as_ref().map_or(ptr::null(), |c| c.as_ptr()),
                &mut out,
                e,
            )
        })?;
        wrap(out)
    }

    /// Derives a model from Hugging Face `config.json` text in memory
    /// (`pdkv_model_from_hf_config_json`).
    pub fn from_hf_config_json(json: &str, name: Option<&str>) -> Result<Model> {
        let cname = name.map(|n| cstring(n, "model name")).transpose()?;
        let mut out = ptr::null_mut();
        // SAFETY: json is read for len bytes and not retained; an empty &str still has a
        // non-NULL dangling-but-aligned pointer, which the library never dereferences for len 0.
        check(|e| unsafe {
            sys::pdkv_model_from_hf_config_json(
                json.as_ptr().cast(),
                json.len(),
                cname.as_ref().map_or(ptr::null(), |c| c.as_ptr()),
                &mut out,
                e,
            )
        })?;
        wrap(out)
    }

    /// The model's description (`pdkv_model_describe`), copied into owned values.
    pub fn describe(&self) -> Result<ModelDesc> {
        // SAFETY: an all-zero pdkv_model_desc_t is valid (NULL strings, zero numbers).
        let mut raw: sys::pdkv_model_desc_t = unsafe { mem::zeroed() };
        raw.struct_size = mem::size_of::<sys::pdkv_model_desc_t>();
        // SAFETY: live model, valid out struct.
        check(|e| unsafe { sys::pdkv_model_describe(self.ptr.as_ptr(), &mut raw, e) })?;
        // SAFETY: the strings are owned by the model, which is alive; we copy them now.
        unsafe {
            Ok(ModelDesc {
                name: owned_str(raw.name),
                source: owned_str(raw.source),
                num_kv_heads: raw.num_kv_heads,
                head_size: raw.head_size,
                head_size_v: raw.head_size_v,
                use_mla: raw.use_mla != 0,
                sliding_window: raw.sliding_window,
                mamba_type: MambaType::from_raw(raw.mamba_type),
                mamba_num_heads: raw.mamba_num_heads,
                mamba_head_dim: raw.mamba_head_dim,
                mamba_d_state: raw.mamba_d_state,
                mamba_n_groups: raw.mamba_n_groups,
                mamba_d_inner: raw.mamba_d_inner,
                mamba_conv_kernel: raw.mamba_conv_kernel,
                mamba_chunk_size: (raw.field_mask
                    & u64::from(sys::PDKV_MODEL_FIELD_MAMBA_CHUNK_SIZE)
                    != 0)
                    .then_some(raw.mamba_chunk_size),
                mamba_conv_rows_include_spec: raw.mamba_conv_rows_include_spec != 0,
                dtype_bytes: raw.dtype_bytes,
                default_ssm_dtype_bytes: (raw.field_mask
                    & u64::from(sys::PDKV_MODEL_FIELD_DEFAULT_SSM_DTYPE)
                    != 0)
                    .then_some(raw.default_ssm_dtype_bytes),
                layer_pattern: owned_str(raw.layer_pattern),
                mla_head_size: raw.mla_head_size,
            })
        }
    }

    /// `(attention layers, Mamba layers)` from the layer pattern (`pdkv_model_layer_counts`).
    pub fn layer_counts(&self) -> Result<(u32, u32)> {
        let (mut a, mut m) = (0u32, 0u32);
        // SAFETY: live model, valid out pointers.
        check(|e| unsafe { sys::pdkv_model_layer_counts(self.ptr.as_ptr(), &mut a, &mut m, e) })?;
        Ok((a, m))
    }

    /// The raw handle, borrowed (still owned by `self`).
    pub fn as_ptr(&self) -> *const sys::pdkv_model_t {
        self.ptr.as_ptr()
    }
}

/// One built-in model preset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preset {
    /// Short name, e.g. "nemotron-3-nano-30b".
    pub name: &'static str,
    /// Hugging Face repo id (also accepted by [`Model::from_preset`]).
    pub hf_name: &'static str,
    /// Source of the numbers.
    pub source: &'static str,
}

/// Number of built-in presets (`pdkv_preset_count`).
pub fn preset_count() -> usize {
    // SAFETY: never fails, thread-safe.
    unsafe { sys::pdkv_preset_count() }
}

/// Preset `index` (`pdkv_preset_at`); an index past the end is [`Status::OutOfBounds`].
pub fn preset_at(index: usize) -> Result<Preset> {
    let (mut n, mut h, mut s) = (ptr::null(), ptr::null(), ptr::null());
    // SAFETY: valid out pointers; the strings are static storage.
    check(|e| unsafe { sys::pdkv_preset_at(index, &mut n, &mut h, &mut s, e) })?;
    // SAFETY: static storage per pdkv.h.
    unsafe {
        Ok(Preset {
            name: static_str(n),
            hf_name: static_str(h),
            source: static_str(s),
        })
    }
}

/// All built-in presets, in library order.
pub fn presets() -> Result<Vec<Preset>> {
    (0..preset_count()).map(preset_at).collect()
}
