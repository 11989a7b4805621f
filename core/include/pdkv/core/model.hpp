// What pdkv needs to know about a model, and the per-engine settings that change its geometry.
// A ModelDesc is small and plain on purpose: presets (presets.hpp) and Hugging Face config.json
// parsing (hf_config.hpp) both produce one, and everything else derives from it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pdkv::core {

// Kinds of Mamba-like (SSM / linear-attention) layers. Only Mamba1, Mamba2 and Gdn have a
// conv-state split rule; the others exist so a model can be described and then rejected with
// a clear UnsupportedMambaType error instead of being misread.
enum class MambaType : int32_t {
  None = 0,       // pure attention model
  Mamba1 = 1,     // Jamba: conv [x], temporal (d_inner/TP, d_state)
  Mamba2 = 2,     // Nemotron-H, Falcon-H1, Granite-4.0-H, Zamba2: conv [x | B | C]
  Gdn = 3,        // gated delta net (Qwen3-Next, Qwen3.5): conv [Q | K | V]
  ShortConv = 4,  // LFM2 (unsupported for transfer)
  Linear = 5,     // lightning / linear attention (unsupported for transfer)
  Kda = 6,        // Kimi delta attention (unsupported for transfer)
};

const char* mamba_type_name(MambaType t) noexcept;

// Layout of the Mamba conv state inside a page. Only DS (dim-first: (dim, rows)) keeps each
// projection contiguous, which the 3-read transfer needs.
enum class ConvLayout : int32_t { DS = 0, SD = 1 };

// Prefix-cache mode of the Mamba state ("none" | "align" | "all" in vLLM).
enum class MambaCacheMode : int32_t { None = 0, Align = 1, All = 2 };

struct AttentionDesc {
  uint32_t num_kv_heads = 0;  // total KV heads K (MLA: 1)
  uint32_t head_size = 0;     // K head dim (MLA: kv_lora_rank + qk_rope_head_dim)
  uint32_t head_size_v = 0;   // V head dim (MLA: 0, the latent holds both)
  bool use_mla = false;       // MLA: one latent "head", replicated on every rank
  uint32_t sliding_window = 0;  // 0: full attention
};

struct MambaDesc {
  MambaType type = MambaType::None;
  // Mamba2: mamba heads / head dim.  GDN: value heads Hv / value head dim dv.  Mamba1: unused.
  uint32_t num_heads = 0;
  uint32_t head_dim = 0;
  // Mamba1/Mamba2: d_state.  GDN: key head dim dk.
  uint32_t d_state = 0;
  // Mamba2: n_groups (B and C are per group).  GDN: key heads Hk.  Mamba1: unused.
  uint32_t n_groups = 0;
  // Mamba1 only: d_inner (Mamba2 and GDN derive the inner size from heads x head_dim; using
  // expand x hidden there is a classic mistake: Nemotron-Nano-9B-v2 has 128*80=10240, not 8960).
  uint64_t d_inner = 0;
  uint32_t conv_kernel = 0;       // d_conv; the conv state keeps conv_kernel - 1 (+spec) rows
  uint32_t chunk_size = 0;        // model chunk size for "all" cache mode; 0 means 2048
  bool conv_rows_include_spec = false;  // NemotronH Mamba2 and GDN add speculative tokens
};

// Layer kinds, one char per layer in ModelDesc::layer_pattern.
constexpr char kLayerAttention = '*';
constexpr char kLayerMamba = 'M';
constexpr char kLayerParallel = 'P';  // attention AND Mamba in the same layer (Falcon-H1)
constexpr char kLayerOther = '-';     // MLP / MoE only, no KV state
// An MLA-typed attention layer in a model whose other attention layers are GQA (a side cache
// that vLLM registers as an MLA spec, e.g. MiniMax-M3's lightning indexer): one latent "head" of
// ModelDesc::mla_head_size elements, replicated on every rank rather than split by heads.
constexpr char kLayerMla = 'L';

struct ModelDesc {
  std::string name;    // e.g. "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"
  std::string source;  // where the numbers come from (for presets: the published config)
  AttentionDesc attention;
  MambaDesc mamba;
  uint32_t dtype_bytes = 2;            // model dtype (torch_dtype)
  uint32_t default_ssm_dtype_bytes = 0;  // what the engine picks for an "auto" SSM state dtype
  std::string layer_pattern;           // see kLayer*; empty means "unknown"
  // Width of the latent of the 'L' (MLA-typed) layers of a GQA model, in elements (kv_lora_rank
  // + qk_rope_head_dim for a DeepSeek-style latent, the indexer key width for an indexer). 0:
  // the model has no such layers. A pure MLA model (attention.use_mla) describes its latent in
  // `attention` instead and leaves this 0.
  uint32_t mla_head_size = 0;

  uint32_t num_attention_layers() const;  // '*', 'P' and 'L'
  uint32_t num_mamba_layers() const;      // 'M' and 'P'
  bool is_hybrid() const { return mamba.type != MambaType::None; }
  // True when attention layers of both kinds exist: GQA ('*') and MLA-typed ('L') layers.
  bool mixes_mla() const { return mla_head_size != 0; }
};

// Throws InvalidArgument naming the first field that makes no sense (zero heads, ...), with its
// value. MLA-typed layers ('L') need mla_head_size > 0 and the reverse, a GQA model
// (attention.use_mla off), and no Mamba layers: a hybrid whose attention layers have two page
// sizes would need vLLM's page unification across three kinds, which pdkv does not derive. dtype_bytes must be 1, 2, 4 or 8 and default_ssm_dtype_bytes 0 (auto), 1, 2, 4 or 8: the
// sizes validate_engine_config accepts (e.g. "dtype_bytes = 3" is refused).
void validate_model(const ModelDesc& m);

// The identity of an element format, beyond its byte size: formats of equal size (fp8_e4m3 and
// fp8_e5m2, int8_per_token_head and fp8_per_token_head, bfloat16 and float16) hold the same bytes
// but decode differently, so a P/D pair must agree on them (handshake.hpp). Unknown (0): the
// engine gave only byte sizes (or runs a pdkv from before format 1.3); an unknown format is
// compatible with any other. Numeric values are stable (they travel in the metadata).
enum class ElementFormat : uint8_t {
  Unknown = 0,
  BFloat16 = 1,
  Float16 = 2,
  Float32 = 3,
  Fp8E4m3 = 4,           // vLLM's "fp8" (on CUDA) and "fp8_e4m3"
  Fp8E5m2 = 5,
  Int8PerTokenHead = 6,  // KV cache only: 8-bit K/V + two fp32 scales per token and head
  Fp8PerTokenHead = 7,   // KV cache only
  Int4PerTokenHead = 8,  // KV cache only: 4-bit K/V + two fp32 scales
};
inline constexpr ElementFormat kLastElementFormat = ElementFormat::Int4PerTokenHead;

// Canonical lower-case name ("fp8_e4m3", "bfloat16", ...; "unknown" for Unknown and values out of
// range). Static storage.
const char* element_format_name(ElementFormat f) noexcept;
// The format of a name, case-insensitive: the canonical names, "auto" and "unknown" (Unknown),
// and the aliases bf16, fp16/half, fp32/float, fp8 (= fp8_e4m3, as vLLM on CUDA). NotFound names
// the string and lists the canonical names.
ElementFormat element_format_from_name(const std::string& name);
// True for the per-token-head formats (KV cache only).
bool is_per_token_head_format(ElementFormat f) noexcept;

// Settings of one engine (P or D) that change the geometry. Byte sizes of 0 mean "auto".
struct EngineConfig {
  uint32_t tp_size = 1;
  uint32_t kv_cache_dtype_bytes = 0;    // 0: model dtype
  uint32_t conv_state_dtype_bytes = 0;  // 0: model dtype
  uint32_t ssm_state_dtype_bytes = 0;   // 0: model default (default_ssm_dtype_bytes or conv dtype)
  uint32_t num_speculative_tokens = 0;
  uint32_t user_block_size = 0;         // --block-size; 0: not set
  // Attention backend: the preferred block size and the kernel block sizes it supports.
  uint32_t preferred_block_size = 16;
  std::vector<uint32_t> kernel_block_sizes = {};  // explicit supported sizes, or empty with:
  uint32_t kernel_block_multiple_of = 16;         // MultipleOf(n) (FlashAttention, Triton)
  MambaCacheMode cache_mode = MambaCacheMode::None;
  ConvLayout conv_layout = ConvLayout::DS;
  // The KV cache's element format: the KV dtype as a described layout, not only a byte size.
  // One KV head's entry per token is its K and V elements of kv_cache_element_bits each, then
  // kv_cache_head_extra_bytes packed beside them (the per-token-head quantization scales of
  // vLLM's int8/fp8/int4_per_token_head modes: two fp32 scales, 8 bytes), so a head-sliced read
  // moves a head's scales with its data (kv_head_bytes_per_token). 0 bits: 8 * the KV dtype's
  // bytes (kv_cache_dtype_bytes or the model dtype); when both are set they must agree.
  uint32_t kv_cache_element_bits = 0;
  uint32_t kv_cache_head_extra_bytes = 0;
  // Named element formats (vLLM's --dtype, --kv-cache-dtype, --mamba-cache-dtype,
  // --mamba-ssm-cache-dtype), advertised in the metadata so the handshake refuses a pair whose
  // formats differ with equal sizes. Unknown: not given (only the byte sizes above are known).
  // They label, never size: a named format must agree with the sizes the fields above resolve to
  // (validate_engine_formats), e.g. kv_cache_format fp8_e5m2 needs kv_cache_dtype_bytes 1 (or
  // kv_cache_element_bits 8), int8_per_token_head also kv_cache_head_extra_bytes 8.
  ElementFormat model_format = ElementFormat::Unknown;
  ElementFormat kv_cache_format = ElementFormat::Unknown;
  ElementFormat conv_state_format = ElementFormat::Unknown;
  ElementFormat ssm_state_format = ElementFormat::Unknown;
};

// A named KV cache format (vLLM's --kv-cache-dtype): bits per K/V element (0: the model dtype)
// and bytes packed per token per KV head beside them.
struct KvCacheFormat {
  uint32_t element_bits = 0;
  uint32_t head_extra_bytes = 0;
  friend bool operator==(const KvCacheFormat&, const KvCacheFormat&) = default;
};

// The format of a vLLM --kv-cache-dtype name, case-insensitive: "auto" {0, 0}; "bfloat16",
// "float16" {16, 0}; "float32" {32, 0}; "fp8", "fp8_e4m3", "fp8_e5m2" {8, 0};
// "int8_per_token_head", "fp8_per_token_head" {8, 8}; "int4_per_token_head" {4, 8} (two int4
// per byte; K and V each carry one fp32 scale per token and head). NotFound names the string and
// lists the valid names. (NVFP4's block scales grow with the head size and are not described.)
KvCacheFormat kv_cache_format_from_name(const std::string& name);
// The KV format of a named element format ({bits, extra bytes}; Unknown: {0, 0}).
KvCacheFormat kv_cache_format_of(ElementFormat f) noexcept;

// Bounds of the KV element format (validate_engine_config).
constexpr uint32_t kMaxKvHeadExtraBytes = 4096;

// Bounds of EngineConfig fields (validate_engine_config). vLLM has no hard cap on speculative
// tokens, but nothing it ships uses more than a handful; 64 is the practical bound pdkv accepts.
constexpr uint32_t kEngineMaxSpeculativeTokens = 64;
constexpr uint32_t kEngineMaxUserBlockSize = 1u << 20;  // --block-size and --mamba-block-size, in tokens
constexpr uint32_t kEngineMaxTpSize = 1u << 16;

// True for the dtype byte sizes an engine field may hold: 0 (auto), 1, 2, 4 or 8.
bool is_valid_dtype_bytes(uint32_t bytes) noexcept;

// Throws InvalidArgument naming the first field of `e` out of its domain, with its value:
// tp_size 0 or > kEngineMaxTpSize, a dtype byte size other than 0/1/2/4/8 (e.g.
// "kv_cache_dtype_bytes = 3"), num_speculative_tokens > kEngineMaxSpeculativeTokens, user_block_size
// > kEngineMaxUserBlockSize, kv_cache_element_bits other than 0/4/8/16/32/64 or disagreeing with a
// set kv_cache_dtype_bytes (naming both), kv_cache_head_extra_bytes > kMaxKvHeadExtraBytes.
// derive_geometry and derive_mamba_state call it first.
void validate_engine_config(const EngineConfig& e);

// Dtype resolution ("auto" rules). KV cache: engine value or model dtype. Conv state: engine value
// or model dtype. SSM temporal state: engine value, else the model's default (NemotronH and
// Qwen3.5 default to float32), else the conv-state dtype.
uint32_t resolved_kv_dtype_bytes(const ModelDesc& m, const EngineConfig& e);
// Bits per K/V element: kv_cache_element_bits, else 8 * resolved_kv_dtype_bytes.
uint32_t resolved_kv_element_bits(const ModelDesc& m, const EngineConfig& e);
// Bytes of one KV head's entry per token: (head_size + head_size_v) * bits / 8 +
// kv_cache_head_extra_bytes (MLA: the latent's elements, no extras). InvalidArgument, naming the
// values, when K or V of a head is not a whole number of bytes (e.g. int4 with an odd head size)
// or when per-token-head extras are asked of a model with MLA latents (a pure MLA model or one
// with MLA-typed layers: vLLM's per-token-head modes scale GQA K/V heads).
uint64_t kv_head_bytes_per_token(const ModelDesc& m, const EngineConfig& e);
uint32_t resolved_conv_dtype_bytes(const ModelDesc& m, const EngineConfig& e);
uint32_t resolved_ssm_dtype_bytes(const ModelDesc& m, const EngineConfig& e);

// Throws InvalidArgument when a named format of `e` disagrees with the sizes it labels, naming the
// field, the format and the resolved size: model_format vs the model's dtype_bytes, kv_cache_format
// vs resolved_kv_element_bits and kv_cache_head_extra_bytes, conv_state_format / ssm_state_format
// vs resolved_conv_dtype_bytes / resolved_ssm_dtype_bytes, or a per-token-head format named for
// anything but the KV cache. derive_geometry calls it after validate_engine_config.
void validate_engine_formats(const ModelDesc& m, const EngineConfig& e);

// The formats an engine advertises (EngineMetadata), resolved through the "auto" rules: a named
// field; else, for a size left "auto", the format it falls back to when that one is named (KV
// cache and conv state: model_format; SSM state: the conv state's, when the model has no default
// SSM dtype); else Unknown. Conv and SSM formats are Unknown for a model without Mamba layers.
struct ResolvedFormats {
  ElementFormat model_format = ElementFormat::Unknown;
  ElementFormat kv_cache_format = ElementFormat::Unknown;
  ElementFormat conv_state_format = ElementFormat::Unknown;
  ElementFormat ssm_state_format = ElementFormat::Unknown;
};
ResolvedFormats resolved_formats(const ModelDesc& m, const EngineConfig& e);

// Byte size of a dtype name ("bfloat16", "bf16", "float16", "fp8", "float32", "auto" -> 0).
// Throws NotFound naming the string.
uint32_t dtype_bytes_from_name(const std::string& name);

}  // namespace pdkv::core
