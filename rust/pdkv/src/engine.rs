//! Engine settings (`pdkv_engine_config_t`) with a builder-style API.
use crate::error::Result;
use crate::ffi_util::{check, cstring, static_str};
use pdkv_sys as sys;
use std::mem;

/// Attention backend (`pdkv_attention_backend_t`); fixes the preferred and kernel block sizes.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Backend {
    /// FlashAttention, MultipleOf(16).
    #[default]
    FlashAttn,
    /// Triton, MultipleOf(16).
    Triton,
    /// FlashInfer, `[16, 32, 64]`.
    FlashInfer,
    /// FlashMLA, `[64]`, MLA only.
    FlashMla,
    /// CUTLASS MLA, `[128]`, MLA only.
    CutlassMla,
    /// FlashInfer MLA, `[32, 64]`, MLA only.
    FlashInferMla,
    /// Explicit sizes from [`EngineConfig`] (`preferred_block_size`, `kernel_block_sizes`,
    /// `kernel_block_multiple_of`).
    Custom,
    /// A raw value this version does not know (the library rejects unknown values).
    Other(i32),
}

impl Backend {
    /// Maps a raw `pdkv_attention_backend_t` value.
    pub fn from_raw(v: i32) -> Backend {
        match v {
            0 => Backend::FlashAttn,
            1 => Backend::Triton,
            2 => Backend::FlashInfer,
            3 => Backend::FlashMla,
            4 => Backend::CutlassMla,
            5 => Backend::FlashInferMla,
            100 => Backend::Custom,
            other => Backend::Other(other),
        }
    }

    /// The raw `pdkv_attention_backend_t` value.
    pub fn raw(self) -> i32 {
        match self {
            Backend::FlashAttn => 0,
            Backend::Triton => 1,
            Backend::FlashInfer => 2,
            Backend::FlashMla => 3,
            Backend::CutlassMla => 4,
            Backend::FlashInferMla => 5,
            Backend::Custom => 100,
            Backend::Other(v) => v,
        }
    }

    /// Backend from its pdkv or vLLM name, case-insensitive (`pdkv_backend_from_name`).
    pub fn from_name(name: &str) -> Result<Backend> {
        let c = cstring(name, "backend name")?;
        let mut out = 0i32;
        // SAFETY: valid C string and out pointer.
        check(|e| unsafe { sys::pdkv_backend_from_name(c.as_ptr(), &mut out, e) })?;
        Ok(Backend::from_raw(out))
    }

    /// The library's stable name ("flash_attn", ..., "custom"; "unknown" otherwise).
    pub fn name(self) -> &'static str {
        // SAFETY: any value accepted; static storage.
        unsafe { static_str(sys::pdkv_backend_name(self.raw())) }
    }
}

/// Prefix-cache mode of the Mamba state (vLLM "none" | "align" | "all").
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum MambaCacheMode {
    /// "none".
    #[default]
    None,
    /// "align".
    Align,
    /// "all".
    All,
    /// A raw value this version does not know.
    Other(i32),
}

impl MambaCacheMode {
    /// The raw `pdkv_mamba_cache_mode_t` value.
    pub fn raw(self) -> i32 {
        match self {
            MambaCacheMode::None => 0,
            MambaCacheMode::Align => 1,
            MambaCacheMode::All => 2,
            MambaCacheMode::Other(v) => v,
        }
    }

    /// Maps a raw value.
    pub fn from_raw(v: i32) -> MambaCacheMode {
        match v {
            0 => MambaCacheMode::None,
            1 => MambaCacheMode::Align,
            2 => MambaCacheMode::All,
            other => MambaCacheMode::Other(other),
        }
    }
}

/// Layout of the Mamba conv state; only DS can be transferred byte-exactly.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ConvLayout {
    /// DS: each projection contiguous.
    #[default]
    Ds,
    /// SD: rejected by geometry derivation with `UnsupportedLayout`.
    Sd,
    /// A raw value this version does not know.
    Other(i32),
}

impl ConvLayout {
    /// The raw `pdkv_conv_layout_t` value.
    pub fn raw(self) -> i32 {
        match self {
            ConvLayout::Ds => 0,
            ConvLayout::Sd => 1,
            ConvLayout::Other(v) => v,
        }
    }

    /// Maps a raw value.
    pub fn from_raw(v: i32) -> ConvLayout {
        match v {
            0 => ConvLayout::Ds,
            1 => ConvLayout::Sd,
            other => ConvLayout::Other(other),
        }
    }
}

/// The identity of an element format beyond its byte size (`pdkv_element_format_t`). Formats of
/// equal size (fp8 e4m3 and e5m2, int8 and fp8 per-token-head, bfloat16 and float16) move the
/// same bytes but decode differently, so the handshake refuses a pair whose named formats differ.
/// [`ElementFormat::Unknown`] (the default): not named, compatible with any format.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ElementFormat {
    /// Not named (only byte sizes given), or metadata from an older pdkv.
    #[default]
    Unknown,
    /// bfloat16.
    BFloat16,
    /// float16.
    Float16,
    /// float32.
    Float32,
    /// fp8 e4m3 (vLLM's "fp8" on CUDA and "fp8_e4m3").
    Fp8E4m3,
    /// fp8 e5m2.
    Fp8E5m2,
    /// int8 K/V with two fp32 scales per token and head (KV cache only).
    Int8PerTokenHead,
    /// fp8 K/V with two fp32 scales per token and head (KV cache only).
    Fp8PerTokenHead,
    /// int4 K/V with two fp32 scales per token and head (KV cache only).
    Int4PerTokenHead,
    /// A raw value this version does not know (the library rejects unknown values).
    Other(i32),
}

impl ElementFormat {
    /// Maps a raw `pdkv_element_format_t` value.
    pub fn from_raw(v: i32) -> ElementFormat {
        match v {
            0 => ElementFormat::Unknown,
            1 => ElementFormat::BFloat16,
            2 => ElementFormat::Float16,
            3 => ElementFormat::Float32,
            4 => ElementFormat::Fp8E4m3,
            5 => ElementFormat::Fp8E5m2,
            6 => ElementFormat::Int8PerTokenHead,
            7 => ElementFormat::Fp8PerTokenHead,
            8 => ElementFormat::Int4PerTokenHead,
            other => ElementFormat::Other(other),
        }
    }

    /// The raw `pdkv_element_format_t` value.
    pub fn raw(self) -> i32 {
        match self {
            ElementFormat::Unknown => 0,
            ElementFormat::BFloat16 => 1,
            ElementFormat::Float16 => 2,
            ElementFormat::Float32 => 3,
            ElementFormat::Fp8E4m3 => 4,
            ElementFormat::Fp8E5m2 => 5,
            ElementFormat::Int8PerTokenHead => 6,
            ElementFormat::Fp8PerTokenHead => 7,
            ElementFormat::Int4PerTokenHead => 8,
            ElementFormat::Other(v) => v,
        }
    }

    /// The format of a canonical or vLLM name, case-insensitive ("fp8_e5m2", "fp8" = fp8_e4m3,
    /// "bf16", "int8_per_token_head"; "auto": [`ElementFormat::Unknown`])
    /// (`pdkv_element_format_from_name`). Errors: `NotFound` naming the string.
    pub fn from_name(name: &str) -> Result<ElementFormat> {
        let c = cstring(name, "element format name")?;
        let mut out = 0i32;
        // SAFETY: valid C string and out pointer.
        check(|e| unsafe { sys::pdkv_element_format_from_name(c.as_ptr(), &mut out, e) })?;
        Ok(ElementFormat::from_raw(out))
    }

    /// The canonical name ("fp8_e4m3", "bfloat16", ...; "unknown" otherwise).
    pub fn name(self) -> &'static str {
        // SAFETY: any value accepted; static storage.
        unsafe { static_str(sys::pdkv_element_format_name(self.raw())) }
    }
}

/// Settings of one engine (P or D) that change the geometry. `None` leaves an optional field
/// unset (vLLM's "auto" or "not given").
///
/// `Default` takes the library's defaults (`pdkv_engine_config_init`: TP 1, auto dtypes,
/// FlashAttention, cache mode none, DS layout); the consuming setters of the same names build
/// on it: `EngineConfig::default().tp_size(4).backend(Backend::FlashInfer)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineConfig {
    /// TP size, >= 1.
    pub tp_size: u32,
    /// KV cache dtype bytes; `None`: the model dtype.
    pub kv_cache_dtype_bytes: Option<u32>,
    /// Conv state dtype bytes; `None`: the model dtype.
    pub conv_state_dtype_bytes: Option<u32>,
    /// SSM state dtype bytes; `None`: the model default, else the conv dtype.
    pub ssm_state_dtype_bytes: Option<u32>,
    /// Speculative tokens.
    pub num_speculative_tokens: u32,
    /// `--block-size`; `None`: not given.
    pub user_block_size: Option<u32>,
    /// `--mamba-block-size` ("all" mode); `None`: the model chunk size.
    pub user_mamba_block_size: Option<u32>,
    /// Attention backend.
    pub backend: Backend,
    /// [`Backend::Custom`] only: preferred block size.
    pub preferred_block_size: u32,
    /// [`Backend::Custom`] only: explicit supported kernel sizes (empty: use multiple_of).
    pub kernel_block_sizes: Vec<u32>,
    /// [`Backend::Custom`] only: MultipleOf(n) when no explicit list is given.
    pub kernel_block_multiple_of: u32,
    /// Mamba prefix-cache mode.
    pub mamba_cache_mode: MambaCacheMode,
    /// Conv state layout.
    pub conv_layout: ConvLayout,
    /// KV element format: bits per K/V element (4, 8, 16, 32, 64); `None`: 8 * the KV dtype
    /// bytes. A set `kv_cache_dtype_bytes` must agree with it.
    pub kv_cache_element_bits: Option<u32>,
    /// Bytes packed per token per KV head beside K and V (vLLM's per-token-head scales: 8);
    /// they travel with the head in every head-sliced read. 0: none.
    pub kv_cache_head_extra_bytes: u32,
    /// Element format of the model (`--dtype`); [`ElementFormat::Unknown`]: not named. The
    /// named formats label the sizes above and must agree with them; the handshake refuses a
    /// peer whose known format differs and treats an unknown one as compatible.
    pub model_format: ElementFormat,
    /// Element format of the KV cache (`--kv-cache-dtype`); unknown: `model_format` when the KV
    /// size is left auto, else not named.
    pub kv_cache_format: ElementFormat,
    /// Element format of the Mamba conv state; unknown: `model_format` when its size is auto.
    pub conv_state_format: ElementFormat,
    /// Element format of the Mamba SSM state; unknown: the conv state's when its size is auto
    /// and the model has no default SSM dtype.
    pub ssm_state_format: ElementFormat,
}

impl Default for EngineConfig {
    fn default() -> EngineConfig {
        // SAFETY: all-zero is a valid value (NULL kernel sizes); init fills the defaults and
        // only fails for a NULL pointer, which we never pass.
        let mut raw: sys::pdkv_engine_config_t = unsafe { mem::zeroed() };
        let _ = unsafe { sys::pdkv_engine_config_init(&mut raw, std::ptr::null_mut()) };
        EngineConfig {
            tp_size: raw.tp_size,
            kv_cache_dtype_bytes: None,
            conv_state_dtype_bytes: None,
            ssm_state_dtype_bytes: None,
            num_speculative_tokens: raw.num_speculative_tokens,
            user_block_size: None,
            user_mamba_block_size: None,
            backend: Backend::from_raw(raw.attention_backend),
            preferred_block_size: raw.preferred_block_size,
            kernel_block_sizes: Vec::new(),
            kernel_block_multiple_of: raw.kernel_block_multiple_of,
            mamba_cache_mode: MambaCacheMode::from_raw(raw.mamba_cache_mode),
            conv_layout: ConvLayout::from_raw(raw.conv_layout),
            kv_cache_element_bits: None,
            kv_cache_head_extra_bytes: raw.kv_cache_head_extra_bytes as u32,
            model_format: ElementFormat::from_raw(raw.model_format),
            kv_cache_format: ElementFormat::from_raw(raw.kv_cache_format),
            conv_state_format: ElementFormat::from_raw(raw.conv_state_format),
            ssm_state_format: ElementFormat::from_raw(raw.ssm_state_format),
        }
    }
}

macro_rules! setter {
    ($(#[$doc:meta] $field:ident: $ty:ty),* $(,)?) => {
        $(
            #[$doc]
            #[must_use]
            pub fn $field(mut self, value: $ty) -> Self {
                self.$field = value;
                self
            }
        )*
    };
}

/// Consuming setters of optional fields: `value` sets the field (`Some(value)`).
macro_rules! optional_setter {
    ($(#[$doc:meta] $field:ident: $ty:ty),* $(,)?) => {
        $(
            #[$doc]
            #[must_use]
            pub fn $field(mut self, value: $ty) -> Self {
                self.$field = Some(value);
                self
            }
        )*
    };
}

impl EngineConfig {
    /// Defaults with the given TP size.
    pub fn with_tp(tp_size: u32) -> EngineConfig {
        EngineConfig::default().tp_size(tp_size)
    }

    setter! {
        /// Sets the TP size.
        tp_size: u32,
        /// Sets the number of speculative tokens.
        num_speculative_tokens: u32,
        /// Sets the attention backend.
        backend: Backend,
        /// Sets the preferred block size ([`Backend::Custom`]).
        preferred_block_size: u32,
        /// Sets the explicit kernel block sizes ([`Backend::Custom`]).
        kernel_block_sizes: Vec<u32>,
        /// Sets MultipleOf(n) ([`Backend::Custom`]).
        kernel_block_multiple_of: u32,
        /// Sets the Mamba prefix-cache mode.
        mamba_cache_mode: MambaCacheMode,
        /// Sets the conv state layout.
        conv_layout: ConvLayout,
        /// Sets the bytes packed per token per KV head (per-token-head scales).
        kv_cache_head_extra_bytes: u32,
        /// Names the model's element format (`--dtype`).
        model_format: ElementFormat,
        /// Names the KV cache's element format (`--kv-cache-dtype`).
        kv_cache_format: ElementFormat,
        /// Names the Mamba conv state's element format.
        conv_state_format: ElementFormat,
        /// Names the Mamba SSM state's element format.
        ssm_state_format: ElementFormat,
    }

    optional_setter! {
        /// Sets the KV cache dtype bytes (unset: the model dtype).
        kv_cache_dtype_bytes: u32,
        /// Sets the conv state dtype bytes (unset: the model dtype).
        conv_state_dtype_bytes: u32,
        /// Sets the SSM state dtype bytes (unset: auto).
        ssm_state_dtype_bytes: u32,
        /// Sets `--block-size` (unset: not given).
        user_block_size: u32,
        /// Sets `--mamba-block-size` (unset: the chunk size).
        user_mamba_block_size: u32,
        /// Sets the KV element bits (unset: 8 * the KV dtype bytes).
        kv_cache_element_bits: u32,
    }

    /// The C struct; it borrows `kernel_block_sizes` from `self`.
    pub(crate) fn to_raw(&self) -> sys::pdkv_engine_config_t {
        sys::pdkv_engine_config_t {
            struct_size: mem::size_of::<sys::pdkv_engine_config_t>(),
            field_mask: optional_bit(
                self.kv_cache_dtype_bytes,
                sys::PDKV_CONFIG_FIELD_KV_CACHE_DTYPE,
            ) | optional_bit(
                self.conv_state_dtype_bytes,
                sys::PDKV_CONFIG_FIELD_CONV_STATE_DTYPE,
            ) | optional_bit(
                self.ssm_state_dtype_bytes,
                sys::PDKV_CONFIG_FIELD_SSM_STATE_DTYPE,
            ) | optional_bit(self.user_block_size, sys::PDKV_CONFIG_FIELD_BLOCK_SIZE)
                | optional_bit(
                    self.user_mamba_block_size,
                    sys::PDKV_CONFIG_FIELD_MAMBA_BLOCK_SIZE,
                )
                | optional_bit(
                    self.kv_cache_element_bits,
                    sys::PDKV_CONFIG_FIELD_KV_CACHE_ELEMENT_BITS,
                )
                | format_bit(self.model_format, sys::PDKV_CONFIG_FIELD_MODEL_FORMAT)
                | format_bit(self.kv_cache_format, sys::PDKV_CONFIG_FIELD_KV_CACHE_FORMAT)
                | format_bit(
                    self.conv_state_format,
                    sys::PDKV_CONFIG_FIELD_CONV_STATE_FORMAT,
                )
                | format_bit(
                    self.ssm_state_format,
                    sys::PDKV_CONFIG_FIELD_SSM_STATE_FORMAT,
                ),
            tp_size: self.tp_size,
            kv_cache_dtype_bytes: self.kv_cache_dtype_bytes.unwrap_or(0),
            conv_state_dtype_bytes: self.conv_state_dtype_bytes.unwrap_or(0),
            ssm_state_dtype_bytes: self.ssm_state_dtype_bytes.unwrap_or(0),
            num_speculative_tokens: self.num_speculative_tokens,
            user_block_size: self.user_block_size.unwrap_or(0),
            user_mamba_block_size: self.user_mamba_block_size.unwrap_or(0),
            attention_backend: self.backend.raw(),
            preferred_block_size: self.preferred_block_size,
            kernel_block_sizes: if self.kernel_block_sizes.is_empty() {
                std::ptr::null()
            } else {
                self.kernel_block_sizes.as_ptr()
            },
            num_kernel_block_sizes: self.kernel_block_sizes.len(),
            kernel_block_multiple_of: self.kernel_block_multiple_of,
            mamba_cache_mode: self.mamba_cache_mode.raw(),
            conv_layout: self.conv_layout.raw(),
            kv_cache_element_bits: u64::from(self.kv_cache_element_bits.unwrap_or(0)),
            kv_cache_head_extra_bytes: u64::from(self.kv_cache_head_extra_bytes),
            model_format: self.model_format.raw(),
            kv_cache_format: self.kv_cache_format.raw(),
            conv_state_format: self.conv_state_format.raw(),
            ssm_state_format: self.ssm_state_format.raw(),
        }
    }
}

/// The field_mask bit of a format field: `bit` when it names a format, else 0.
fn format_bit(format: ElementFormat, bit: u32) -> u64 {
    if format == ElementFormat::Unknown {
        0
    } else {
        u64::from(bit)
    }
}

/// The field_mask bit of an optional field: `bit` when it is set, else 0.
pub(crate) fn optional_bit<T>(value: Option<T>, bit: u32) -> u64 {
    if value.is_some() {
        u64::from(bit)
    } else {
        0
    }
}
