// What one engine (one TP rank of a P or D instance) tells its peer in the handshake, and the
// binary wire format for it. This is pdkv's counterpart of vLLM's NixlAgentMetadata
// (docs/semantics.md §1), extended with what the validation in handshake.hpp needs: the logical
// block size, per-token attention bytes, total KV heads, prefix caching and a model fingerprint.
//
// Wire format (version 1.3), all integers little-endian:
//   header  (16 B): "PDKV" | u16 major | u16 minor | u32 payload_len | u32 crc32c(payload)
//   payload       : fields in the order of EngineMetadata below (see engine_metadata.cpp).
// A reader accepts any minor version of its major and ignores payload bytes after the fields it
// knows only when the sender's minor is newer (fields are only ever appended within a major).
// Minor versions: 1.0 the original; 1.1 adds the region kind `mla` (2), with the same payload
// layout. The writer labels each encoding with the lowest minor that describes it (1.1 only when
// a region is `mla`), so metadata a 1.0 reader can plan with stays byte-identical to 1.0 and a
// 1.0 reader refuses an `mla` region with a Parse error naming it; a reader refuses `mla` under
// a 1.0 label. 1.2 adds a pipeline stage's fields (flag bit 4, after the regions). 1.3 appends
// the element formats (4 x u8 ElementFormat: model, KV cache, conv state, SSM state) after
// everything else, written (and labelled 1.3) only when one of them is known: a 1.2 reader
// ignores them as a newer minor's trailing bytes, and metadata from a pdkv before 1.3 (or with no
// format named) decodes with every format Unknown, which the handshake treats as compatible with
// any format.
//
// The bytes come from the network: decode() never reads outside the buffer, never allocates from
// an unchecked count, and rejects out-of-range fields, so a decoded value is always safe to plan
// with. Implemented in core/src/engine_metadata.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "pdkv/core/descriptor.hpp"
#include "pdkv/core/error.hpp"
#include "pdkv/core/model.hpp"

namespace pdkv::core {

// Attention KV layout of a kernel block. HND keeps each head's tokens contiguous, which is
// what splitting a block by heads (heterogeneous TP) needs.
enum class KvLayout : uint8_t { HND = 0, NHD = 1 };
const char* kv_layout_name(KvLayout l) noexcept;

// Kind of the first layer using a registered region. `Mla` is an MLA-typed attention region of
// a GQA model (ModelDesc::mla_head_size, layer kind 'L'): one latent head replicated on every
// rank, so D reads it whole from one P rank and its size does not scale with TP. In a pure MLA
// model (use_mla) every attention region is MLA and keeps the kind `Attention`, as in format 1.0.
enum class RegionKind : uint8_t { Attention = 0, Mamba = 1, Mla = 2 };
const char* region_kind_name(RegionKind k) noexcept;

// layer_end of a stage that holds the model's layers through its last one (a single-stage engine,
// and optionally the last pipeline stage): the window is open-ended, so intersecting it with a
// peer's window never needs the model's layer count.
inline constexpr uint32_t kLayerEndOpen = 0;

// One registered KV tensor. Under HMA one tensor is shared by an attention and a Mamba layer;
// kind/layer describe the first layer that uses it (vLLM deduplicates regions in layer order).
struct MetadataRegion {
  Region region;                          // base, kernel block_len, kernel num_blocks
  RegionKind kind = RegionKind::Attention;
  uint32_t layer = 0;                     // model layer index of the first user
  friend bool operator==(const MetadataRegion& a, const MetadataRegion& b) {
    return a.region.base == b.region.base && a.region.block_len == b.region.block_len &&
           a.region.num_blocks == b.region.num_blocks && a.kind == b.kind && a.layer == b.layer;
  }
};

struct EngineMetadata {
  std::string engine_id;                  // non-empty UTF-8, at most kMaxEngineIdBytes
  uint32_t tp_size = 1;
  uint32_t tp_rank = 0;                   // < tp_size
  KvLayout kv_layout = KvLayout::HND;
  ConvLayout conv_layout = ConvLayout::DS;
  uint32_t logical_block_size = 16;       // tokens per logical (HMA) block
  uint32_t kernel_block_size = 16;        // tokens per kernel block
  uint32_t physical_blocks_per_logical = 1;  // logical / kernel ("ppl")
  uint64_t num_kernel_blocks = 0;         // kernel blocks per region (vLLM num_blocks)
  std::vector<MetadataRegion> regions;
  // Mamba state per rank per logical block (all zero / empty for pure attention models).
  MambaType mamba_type = MambaType::None;
  uint64_t conv_bytes = 0;                // sum of conv_projection_bytes
  uint64_t ssm_bytes = 0;                 // temporal state
  std::vector<uint64_t> conv_projection_bytes;  // DS page order: [x|B|C], [Q|K|V] or [x]
  uint64_t attention_bytes_per_token = 0; // per rank: heads_per_rank*(head_size+head_size_v)*dtype
  bool use_mla = false;
  uint32_t total_kv_heads = 1;            // model-wide K (MLA: 1)
  bool prefix_caching = false;
  MambaCacheMode cache_mode = MambaCacheMode::None;
  uint64_t model_fingerprint = 0;         // fingerprint.hpp
  // Pipeline parallelism: this rank belongs to stage pp_rank of pp_size, which holds the model
  // layers [layer_begin, layer_end) (layer_end kLayerEndOpen: through the model's last layer) and
  // registers regions for those layers only. A single-stage engine (pp_size 1) holds every layer:
  // window [0, open). Stage 0 starts at layer 0; every stage but the last names its end.
  uint32_t pp_size = 1;
  uint32_t pp_rank = 0;
  uint32_t layer_begin = 0;
  uint32_t layer_end = kLayerEndOpen;
  // Format 1.3: the engine's element formats (model.hpp ElementFormat), resolved through the
  // "auto" rules (resolved_formats). Unknown: the engine named none, or runs an older pdkv; the
  // handshake compares two formats only when both are known.
  ElementFormat model_format = ElementFormat::Unknown;
  ElementFormat kv_cache_format = ElementFormat::Unknown;
  ElementFormat conv_state_format = ElementFormat::Unknown;
  ElementFormat ssm_state_format = ElementFormat::Unknown;

  bool has_formats() const {
    return model_format != ElementFormat::Unknown || kv_cache_format != ElementFormat::Unknown ||
           conv_state_format != ElementFormat::Unknown || ssm_state_format != ElementFormat::Unknown;
  }
  bool is_hybrid() const { return mamba_type != MambaType::None; }
  // Whether region i holds an MLA latent (replicated, read whole from one P rank): every
  // attention region of a pure MLA model, and the `Mla` regions of a GQA model.
  bool region_is_mla(size_t i) const { return use_mla || regions[i].kind == RegionKind::Mla; }
  // Attention bytes per token of region i: block_len / kernel_block_size. Every region of a model
  // without MLA-typed regions has attention_bytes_per_token; an `Mla` region has its own (the
  // latent's, TP-invariant), which check_metadata requires to be whole.
  uint64_t region_bytes_per_token(size_t i) const {
    return kernel_block_size == 0 ? 0 : regions[i].region.block_len / kernel_block_size;
  }
  // One past the stage's last layer as a 64-bit bound: layer_end, or 2^32 for an open end.
  uint64_t layer_end_bound() const { return layer_end == kLayerEndOpen ? uint64_t{1} << 32 : layer_end; }
  bool holds_layer(uint64_t layer) const { return layer >= layer_begin && layer < layer_end_bound(); }
  bool is_pipeline_stage() const { return pp_size > 1; }
  friend bool operator==(const EngineMetadata&, const EngineMetadata&) = default;
};

inline constexpr uint16_t kMetadataMajorVersion = 1;
inline constexpr uint16_t kMetadataMinorVersion = 3;  // the newest minor this pdkv reads and writes
inline constexpr size_t kMetadataHeaderBytes = 16;
inline constexpr size_t kMaxEngineIdBytes = 256;
inline constexpr size_t kMaxRegions = 1u << 16;        // far above any real model's layer count
inline constexpr size_t kMaxConvProjections = 3;
inline constexpr uint32_t kMaxPpSize = 1u << 10;       // far above any real pipeline depth
// Plausibility limits on what a peer may advertise (check_metadata). Far above any real engine
// (a 141 GB H200 holds < 2^38 bytes; a kernel page is at most a few MiB), low enough that a
// corrupt or hostile peer cannot make a plan address 10^18 bytes into a registered region:
//   num_kernel_blocks and every region's num_blocks <= kMaxKernelBlocks,
//   every region's block_len <= kMaxBlockLen,
//   every region's block_len * num_blocks <= kMaxRegionBytes.
inline constexpr uint64_t kMaxKernelBlocks = uint64_t{1} << 32;
inline constexpr uint64_t kMaxBlockLen = uint64_t{1} << 32;
inline constexpr uint64_t kMaxRegionBytes = uint64_t{1} << 48;

// Two registered regions whose byte ranges [base, base + block_len * num_blocks) intersect:
// a plan would write one layer's bytes into another's. `first` < `second` are region indexes;
// the ends are exclusive (and may exceed 2^64 - 1 only for metadata that also fails the
// address-space check, in which case they saturate at UINT64_MAX).
struct RegionOverlap {
  size_t first = 0;
  size_t second = 0;
  uint64_t first_begin = 0, first_end = 0;
  uint64_t second_begin = 0, second_end = 0;
};

// The first overlapping pair of `regions` in base-address order (deterministic for a given list),
// or nullopt when the regions are pairwise disjoint. Empty regions (block_len or num_blocks 0)
// overlap nothing. O(n log n); never throws except std::bad_alloc.
std::optional<RegionOverlap> find_region_overlap(std::span<const MetadataRegion> regions);

// "regions[i] [begin, end) overlaps regions[j] [begin, end)", decimal byte addresses.
std::string to_string(const RegionOverlap& o);

// Checks every field's range and the internal consistency the wire format promises (rank < size,
// logical = kernel * ppl, conv bytes = sum of projections, regions inside the address space,
// Mamba page inside the logical page, every region's block_len == kernel_block_size *
// attention_bytes_per_token (for the `attention` and `mamba` kinds: hybrids pad the Mamba page to
// the attention page; the message names the region, both factors and the product), an `mla`
// region's block_len a whole number of bytes per token (its latent's) in a model that is neither
// MLA (use_mla) nor hybrid, attention_bytes_per_token a
// whole number of bytes per KV head (heads per rank max(1, total_kv_heads / tp_size), MLA 1),
// ...), the plausibility limits above (kMaxKernelBlocks,
// kMaxBlockLen, kMaxRegionBytes: the message names the field, its value and the limit), the
// pipeline fields (pp_size 1..kMaxPpSize, pp_rank < pp_size, layer_begin < layer_end, a single
// stage holding [0, open), stage 0 starting at layer 0, every stage but the last naming its end,
// every region's `layer` inside the window) and that no two regions overlap (the message names both region indexes and their byte ranges).
// Throws Error(`status`, message naming the field and value): encode() uses InvalidArgument,
// decode() uses Parse (OutOfBounds for a region or page leaving the 64-bit address space or
// its logical page).
void check_metadata(const EngineMetadata& m, Status status);

// Serialises `m` (check_metadata first). Deterministic: equal metadata give equal bytes.
std::vector<uint8_t> encode(const EngineMetadata& m);

// Parses bytes received from a peer. Errors: Parse (truncated, wrong magic, unknown major version,
// payload length mismatch, bad UTF-8, absurd counts, out-of-range fields), Checksum (CRC32C
// mismatch), OutOfBounds (a region or page that would leave its memory). Messages name the field.
EngineMetadata decode(std::span<const uint8_t> bytes);

// CRC-32C (Castagnoli, reflected, init/xorout 0xFFFFFFFF); crc32c("123456789") == 0xE3069283.
uint32_t crc32c(std::span<const uint8_t> bytes) noexcept;

}  // namespace pdkv::core
