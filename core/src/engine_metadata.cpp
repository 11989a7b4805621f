// Binary encoding of EngineMetadata (format in engine_metadata.hpp) and its range checks.
// Decoding treats the input as hostile: every read is bounds-checked against the payload, counts
// are checked against the bytes that remain before anything is allocated, enum bytes are checked
// before they are cast, and the decoded struct goes through the same check_metadata() as encode().
#include "pdkv/core/engine_metadata.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <string>

#include "pdkv/core/error.hpp"
#include "pdkv/core/mamba_kind.hpp"

namespace pdkv::core {
namespace {

__extension__ typedef unsigned __int128 u128;  // exact region sizes for the overlap sweep

constexpr std::array<uint8_t, 4> kMagic = {'P', 'D', 'K', 'V'};
constexpr uint32_t kMaxTpSize = 1u << 16;  // sanity bound; real deployments use <= 64
constexpr size_t kRegionWireBytes = 8 + 8 + 8 + 1 + 4;
constexpr uint8_t kFlagMla = 1u << 0;
constexpr uint8_t kFlagPrefixCaching = 1u << 1;
constexpr uint8_t kFlagPipeline = 1u << 2;  // format 1.2: pipeline fields follow the regions
constexpr uint8_t kKnownFlags = kFlagMla | kFlagPrefixCaching | kFlagPipeline;

std::string q(const std::string& field) { return "metadata field '" + field + "'"; }

// ---- CRC-32C table, built at compile time (no mutable global state). ----
constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : (c >> 1);
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kCrc32cTable = make_crc32c_table();

// Strict RFC 3629 UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF. Also rejects
// control characters because engine ids end up in log lines and error messages.
bool valid_utf8_printable(const std::string& s, size_t* bad_at) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    unsigned char c = p[i];
    size_t len = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      if (c < 0x20 || c == 0x7F) break;
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2, cp = c & 0x1Fu;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0Fu;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, cp = c & 0x07u;
    } else {
      break;
    }
    if (i + len > n) break;
    bool ok = true;
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) ok = false;
      cp = (cp << 6) | (p[i + k] & 0x3Fu);
    }
    static constexpr uint32_t kMinForLen[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (!ok || cp < kMinForLen[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) break;
    i += len;
  }
  *bad_at = i;
  return i == n;
}

// ---- Writer / Reader: explicit little-endian, independent of host byte order. ----
class Writer {
 public:
  void u8(uint8_t v) { out_.push_back(v); }
  void u16(uint16_t v) { le(v, 2); }
  void u32(uint32_t v) { le(v, 4); }
  void u64(uint64_t v) { le(v, 8); }
  void bytes(const std::string& s) { out_.insert(out_.end(), s.begin(), s.end()); }
  std::vector<uint8_t>& out() { return out_; }

 private:
  void le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  std::vector<uint8_t> out_;
};

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> b) : b_(b) {}
  size_t remaining() const { return b_.size() - pos_; }
  uint8_t u8(const std::string& f) { return static_cast<uint8_t>(le(f, 1)); }
  uint16_t u16(const std::string& f) { return static_cast<uint16_t>(le(f, 2)); }
  uint32_t u32(const std::string& f) { return static_cast<uint32_t>(le(f, 4)); }
  uint64_t u64(const std::string& f) { return le(f, 8); }
  std::string str(size_t n, const std::string& f) {
    need(n, f);
    std::string s(reinterpret_cast<const char*>(b_.data() + pos_), n);
    pos_ += n;
    return s;
  }
  // Fails before the caller allocates: `count` items of `item_bytes` must fit in what is left.
  void need_items(uint64_t count, size_t item_bytes, const std::string& f) {
    if (count > remaining() / item_bytes) {
      fail(Status::Parse, q(f) + " claims " + std::to_string(count) + " entries of " +
                              std::to_string(item_bytes) + " bytes, but only " +
                              std::to_string(remaining()) + " payload bytes remain at offset " +
                              std::to_string(pos_) + " (corrupt or truncated metadata)");
    }
  }

 private:
  void need(size_t n, const std::string& f) {
    if (n > remaining()) {
      fail(Status::Parse, "metadata truncated: " + q(f) + " needs " + std::to_string(n) +
                              " bytes at payload offset " + std::to_string(pos_) + ", only " +
                              std::to_string(remaining()) + " left");
    }
  }
  uint64_t le(const std::string& f, int n) {
    need(static_cast<size_t>(n), f);
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(b_[pos_ + i]) << (8 * i);
    pos_ += static_cast<size_t>(n);
    return v;
  }
  std::span<const uint8_t> b_;
  size_t pos_ = 0;
};

uint32_t read_le32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

// Enum bytes from the wire are range-checked before the cast (an out-of-range enum is UB-free
// but would silently flow into switch statements downstream).
template <typename E>
E checked_enum(uint64_t raw, uint64_t max, const std::string& field) {
  if (raw > max) {
    fail(Status::Parse, q(field) + " has unknown value " + std::to_string(raw) + " (known: 0.." +
                            std::to_string(max) + "); the peer may run a newer pdkv");
  }
  return static_cast<E>(raw);
}

std::string hex(uint32_t v) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s = "0x";
  for (int i = 7; i >= 0; --i) s.push_back(kDigits[(v >> (4 * i)) & 0xF]);
  return s;
}

}  // namespace

const char* kv_layout_name(KvLayout l) noexcept {
  switch (l) {
    case KvLayout::HND: return "HND";
    case KvLayout::NHD: return "NHD";
  }
  return "unknown";
}

const char* region_kind_name(RegionKind k) noexcept {
  switch (k) {
    case RegionKind::Attention: return "attention";
    case RegionKind::Mamba: return "mamba";
    case RegionKind::Mla: return "mla";
  }
  return "unknown";
}

uint32_t crc32c(std::span<const uint8_t> bytes) noexcept {
  uint32_t c = 0xFFFFFFFFu;
  for (uint8_t b : bytes) c = kCrc32cTable[(c ^ b) & 0xFFu] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

void check_metadata(const EngineMetadata& m, Status status) {
  auto bad = [&](const std::string& field, const std::string& what) {
    fail(status, q(field) + " " + what);
  };
  auto num = [](uint64_t v) { return std::to_string(v); };

  if (m.engine_id.empty()) bad("engine_id", "is empty; every engine needs a unique id");
  if (m.engine_id.size() > kMaxEngineIdBytes) {
    bad("engine_id", "is " + num(m.engine_id.size()) + " bytes, more than the limit of " +
                         num(kMaxEngineIdBytes));
  }
  size_t bad_at = 0;
  if (!valid_utf8_printable(m.engine_id, &bad_at)) {
    bad("engine_id", "is not printable UTF-8 (invalid byte " +
                         num(static_cast<uint8_t>(m.engine_id[bad_at])) + " at offset " +
                         num(bad_at) + ")");
  }
  if (m.tp_size == 0 || m.tp_size > kMaxTpSize) {
    bad("tp_size", "= " + num(m.tp_size) + " is out of range 1.." + num(kMaxTpSize));
  }
  if (m.tp_rank >= m.tp_size) {
    bad("tp_rank", "= " + num(m.tp_rank) + " must be < tp_size " + num(m.tp_size));
  }
  // Pipeline stage: its window of model layers. A single stage holds them all, so its window is
  // [0, open) and nothing else: single-stage metadata keeps meaning what it meant before 1.2.
  if (m.pp_size == 0 || m.pp_size > kMaxPpSize) {
    bad("pp_size", "= " + num(m.pp_size) + " is out of range 1.." + num(kMaxPpSize));
  }
  if (m.pp_rank >= m.pp_size) {
    bad("pp_rank", "= " + num(m.pp_rank) + " must be < pp_size " + num(m.pp_size));
  }
  auto window = [&] {
    return "[" + num(m.layer_begin) + ", " +
           (m.layer_end == kLayerEndOpen ? std::string("open") : num(m.layer_end)) + ")";
  };
  if (m.layer_end != kLayerEndOpen && m.layer_begin >= m.layer_end) {
    bad("layer_end", "= " + num(m.layer_end) + " must be above layer_begin " + num(m.layer_begin) +
                         " (a stage holds at least one layer)");
  }
  if (m.pp_size == 1 && (m.layer_begin != 0 || m.layer_end != kLayerEndOpen)) {
    bad("layer_begin", "/ layer_end give the window " + window() +
                           " but pp_size is 1: a single stage holds every layer, window [0, open)");
  }
  if (m.pp_rank == 0 && m.layer_begin != 0) {
    bad("layer_begin", "= " + num(m.layer_begin) + " for pp_rank 0; the first stage starts at layer 0");
  }
  if (m.pp_rank + 1 < m.pp_size && m.layer_end == kLayerEndOpen) {
    bad("layer_end", "is open for pp_rank " + num(m.pp_rank) + " of pp_size " + num(m.pp_size) +
                         "; only the last stage may hold the layers through the model's last one");
  }
  {
    const ElementFormat formats[] = {m.model_format, m.kv_cache_format, m.conv_state_format, m.ssm_state_format};
    const char* names[] = {"model_format", "kv_cache_format", "conv_state_format", "ssm_state_format"};
    for (size_t k = 0; k < 4; ++k) {
      if (static_cast<uint8_t>(formats[k]) > static_cast<uint8_t>(kLastElementFormat)) {
        bad(names[k], "has unknown value " + num(static_cast<uint8_t>(formats[k])));
      }
      if (k != 1 && is_per_token_head_format(formats[k])) {
        bad(names[k], "= " + std::string(element_format_name(formats[k])) + " is a KV cache format");
      }
    }
  }
  if (static_cast<uint8_t>(m.kv_layout) > 1) {
    bad("kv_layout", "has unknown value " + num(static_cast<uint8_t>(m.kv_layout)));
  }
  if (static_cast<int32_t>(m.conv_layout) < 0 || static_cast<int32_t>(m.conv_layout) > 1) {
    bad("conv_layout", "has unknown value " + std::to_string(static_cast<int32_t>(m.conv_layout)));
  }
  if (m.kernel_block_size == 0) bad("kernel_block_size", "= 0; it must be at least 1 token");
  if (m.physical_blocks_per_logical == 0) bad("physical_blocks_per_logical", "= 0; must be >= 1");
  if (static_cast<uint64_t>(m.kernel_block_size) * m.physical_blocks_per_logical !=
      m.logical_block_size) {
    bad("logical_block_size", "= " + num(m.logical_block_size) + " is not kernel_block_size " +
                                  num(m.kernel_block_size) + " * physical_blocks_per_logical " +
                                  num(m.physical_blocks_per_logical));
  }
  if (m.num_kernel_blocks == 0) bad("num_kernel_blocks", "= 0; an engine needs KV blocks");
  if (m.num_kernel_blocks > kMaxKernelBlocks) {
    bad("num_kernel_blocks", "= " + num(m.num_kernel_blocks) + " exceeds the plausibility limit " +
                                 num(kMaxKernelBlocks) + " (2^32) kernel blocks per region");
  }
  if (m.num_kernel_blocks % m.physical_blocks_per_logical != 0) {
    bad("num_kernel_blocks", "= " + num(m.num_kernel_blocks) +
                                 " is not a whole number of logical blocks (ppl " +
                                 num(m.physical_blocks_per_logical) + ")");
  }
  const auto type = static_cast<int32_t>(m.mamba_type);
  if (type < 0 || type > static_cast<int32_t>(last_mamba_type())) {
    bad("mamba_type", "has unknown value " + std::to_string(type));
  }
  const auto mode = static_cast<int32_t>(m.cache_mode);
  if (mode < 0 || mode > static_cast<int32_t>(MambaCacheMode::All)) {
    bad("cache_mode", "has unknown value " + std::to_string(mode));
  }
  if (m.total_kv_heads == 0) bad("total_kv_heads", "= 0; must be >= 1");
  if (m.use_mla && m.total_kv_heads != 1) {
    bad("total_kv_heads", "= " + num(m.total_kv_heads) + " but MLA has exactly 1 latent head");
  }

  // Mamba sizes: absent for pure attention, internally consistent for hybrids.
  if (!m.is_hybrid()) {
    if (m.conv_bytes != 0 || m.ssm_bytes != 0 || !m.conv_projection_bytes.empty()) {
      bad("conv_bytes", "= " + num(m.conv_bytes) + " / ssm_bytes = " + num(m.ssm_bytes) +
                            " are set but mamba_type is none");
    }
  } else {
    size_t np = m.conv_projection_bytes.size();
    // The kind's projection count; 0 (a kind pdkv does not transfer, or an unknown value the
    // check above reports) accepts 1..kMaxConvProjections.
    const size_t want = type >= 0 && type <= static_cast<int32_t>(last_mamba_type())
                            ? mamba_kind(m.mamba_type).conv_projection_count()
                            : 0;
    if (np == 0 || np > kMaxConvProjections || (want != 0 && np != want)) {
      bad("conv_projection_bytes", "has " + num(np) + " entries; " +
                                       std::string(mamba_type_name(m.mamba_type)) + " needs " +
                                       (want ? num(want) : std::string("1..3")));
    }
    uint64_t sum = 0;
    for (size_t i = 0; i < np; ++i) {
      uint64_t p = m.conv_projection_bytes[i];
      if (p == 0) bad("conv_projection_bytes[" + num(i) + "]", "= 0; projections are non-empty");
      if (__builtin_add_overflow(sum, p, &sum)) {
        bad("conv_projection_bytes", "sum overflows 64 bits");
      }
    }
    if (sum != m.conv_bytes) {
      bad("conv_bytes", "= " + num(m.conv_bytes) + " differs from the sum of conv_projection_bytes " +
                            num(sum));
    }
    if (m.ssm_bytes == 0 && want != 0) bad("ssm_bytes", "= 0 for a " +
                                               std::string(mamba_type_name(m.mamba_type)) + " model");
  }

  if (m.regions.empty()) bad("regions", "is empty; an engine registers at least one KV tensor");
  if (m.regions.size() > kMaxRegions) {
    bad("regions", "has " + num(m.regions.size()) + " entries, more than the limit " +
                       num(kMaxRegions));
  }
  for (size_t i = 0; i < m.regions.size(); ++i) {
    const MetadataRegion& r = m.regions[i];
    const std::string f = "regions[" + num(i) + "]";
    if (static_cast<uint8_t>(r.kind) > static_cast<uint8_t>(RegionKind::Mla)) {
      bad(f + ".kind", "has unknown value " + num(static_cast<uint8_t>(r.kind)));
    }
    if (r.kind == RegionKind::Mla) {
      // `mla` marks the MLA-typed layers of a GQA model; a pure MLA model's regions are all MLA
      // already (use_mla), and hybrids with two attention page sizes are not described.
      if (m.use_mla) bad(f + ".kind", "is mla but use_mla is on (a pure MLA model marks its attention regions 'attention')");
      if (m.is_hybrid()) bad(f + ".kind", "is mla in a hybrid model (mamba_type " + std::string(mamba_type_name(m.mamba_type)) + "), which pdkv does not describe");
    }
    if (!m.holds_layer(r.layer)) {
      bad(f + ".layer", "= " + num(r.layer) + " is outside the stage's layer window " + window() +
                            " (pp_rank " + num(m.pp_rank) + " of pp_size " + num(m.pp_size) + ")");
    }
    if (r.region.block_len == 0) bad(f + ".block_len", "= 0; a kernel page has bytes");
    if (r.region.block_len > kMaxBlockLen) {
      bad(f + ".block_len", "= " + num(r.region.block_len) + " exceeds the plausibility limit " +
                                num(kMaxBlockLen) + " (2^32) bytes per kernel page");
    }
    if (r.region.num_blocks > kMaxKernelBlocks) {
      bad(f + ".num_blocks", "= " + num(r.region.num_blocks) + " exceeds the plausibility limit " +
                                 num(kMaxKernelBlocks) + " (2^32) kernel blocks");
    }
    // Both factors are <= 2^32 here, so the product cannot overflow.
    if (r.region.block_len * r.region.num_blocks > kMaxRegionBytes) {
      bad(f, "block_len " + num(r.region.block_len) + " * num_blocks " + num(r.region.num_blocks) +
                 " = " + num(r.region.block_len * r.region.num_blocks) +
                 " bytes exceeds the plausibility limit " + num(kMaxRegionBytes) +
                 " (2^48) bytes per region");
    }
    uint64_t len = 0;
    uint64_t end = 0;
    if (__builtin_mul_overflow(r.region.block_len, r.region.num_blocks, &len) ||
        __builtin_add_overflow(r.region.base, len, &end)) {
      fail(Status::OutOfBounds,
           q(f) + " base " + num(r.region.base) + " + block_len " + num(r.region.block_len) +
               " * num_blocks " + num(r.region.num_blocks) + " runs past the 64-bit address space");
    }
    if (r.kind == RegionKind::Attention && m.attention_bytes_per_token == 0) {
      bad("attention_bytes_per_token", "= 0 but " + f + " is an attention region");
    }
    if (r.kind == RegionKind::Mamba) {
      if (!m.is_hybrid()) bad(f + ".kind", "is mamba but mamba_type is none");
      // One Mamba state lives in one logical page (block_len * ppl); a bigger state would make
      // every Mamba read spill into the next block.
      uint64_t page = 0;
      uint64_t state = 0;
      if (__builtin_mul_overflow(r.region.block_len, m.physical_blocks_per_logical, &page) ||
          __builtin_add_overflow(m.conv_bytes, m.ssm_bytes, &state) || state > page) {
        fail(Status::OutOfBounds,
             q(f) + ": Mamba state conv_bytes " + num(m.conv_bytes) + " + ssm_bytes " +
                 num(m.ssm_bytes) + " does not fit in the logical page block_len " +
                 num(r.region.block_len) + " * physical_blocks_per_logical " +
                 num(m.physical_blocks_per_logical));
      }
    }
  }
  // Every kernel page is kernel_block_size tokens of attention_bytes_per_token. This holds for
  // every region kind and model kind, because vLLM sizes all KV tensors from the attention page:
  //  * pure attention (GQA and MLA): block_len = kernel_block_size * bytes per token, where MLA's
  //    bytes per token are those of its one latent head (kv_lora_rank + rope dims);
  //  * hybrids: the Mamba page is padded to exactly the attention page (block_size *
  //    attention_bytes_per_token, Platform._align_hybrid_block_size) and split into ppl kernel
  //    blocks, so a Mamba region's block_len is kernel_block_size * attention_bytes_per_token too
  //    (metadata_from_geometry: kernel_page_bytes = attn_page_bytes / ppl).
  // Without this tie a peer could double attention_bytes_per_token (or block_len) and D would
  // slice P's attention pages at the wrong per-token stride.
  // An `mla` region holds its latent's bytes per token instead (TP-invariant; the handshake
  // compares it with the peer's region by region), so only whole tokens are required of it.
  for (size_t i = 0; i < m.regions.size(); ++i) {
    if (m.regions[i].kind == RegionKind::Mla) {
      if (m.regions[i].region.block_len % m.kernel_block_size != 0) {
        bad("regions[" + num(i) + "].block_len",
            "= " + num(m.regions[i].region.block_len) + " of an mla region is not a whole number "
            "of bytes per token for kernel_block_size " + num(m.kernel_block_size));
      }
      continue;
    }
    const u128 page = static_cast<u128>(m.kernel_block_size) * m.attention_bytes_per_token;
    if (page != m.regions[i].region.block_len) {
      bad("regions[" + num(i) + "].block_len",
          "= " + num(m.regions[i].region.block_len) + " is not kernel_block_size " +
              num(m.kernel_block_size) + " * attention_bytes_per_token " +
              num(m.attention_bytes_per_token) + " = " +
              (page > UINT64_MAX ? std::string("> 2^64") : num(static_cast<uint64_t>(page))) +
              " (every kernel page holds kernel_block_size tokens of attention KV)");
    }
  }
  // Attention bytes per token are heads_per_rank * per-head bytes (K/V of one head): a value that
  // does not split into whole heads cannot come from a real engine, and D slices P's blocks by
  // head. heads_per_rank is max(1, K / tp) (MLA: 1), as vLLM places heads.
  {
    const uint64_t heads = m.use_mla ? 1
                           : m.total_kv_heads >= m.tp_size ? m.total_kv_heads / m.tp_size
                                                           : 1;
    if (m.attention_bytes_per_token % heads != 0) {
      bad("attention_bytes_per_token",
          "= " + num(m.attention_bytes_per_token) + " is not a whole number of bytes per KV head (" +
              num(heads) + " heads per rank for total_kv_heads " + num(m.total_kv_heads) +
              " at tp_size " + num(m.tp_size) + ")");
    }
  }
  // Regions are distinct tensors (vLLM deduplicates them by base address): two that share bytes
  // would make a plan write one layer's KV into another's.
  if (const auto o = find_region_overlap(m.regions)) {
    fail(status, q("regions") + ": " + to_string(*o) +
                     "; every registered KV tensor must own its bytes");
  }
}

std::optional<RegionOverlap> find_region_overlap(std::span<const MetadataRegion> regions) {
  // Fast path without allocating (plan compiles run this per rank on every call): regions
  // registered in ascending, non-overlapping base order, as engines lay them out. Any other
  // order falls through to the sort below, which also finds the reported pair.
  {
    bool sorted_disjoint = true;
    u128 prev_end = 0;
    for (const MetadataRegion& m : regions) {
      const u128 len = static_cast<u128>(m.region.block_len) * m.region.num_blocks;
      if (len == 0) continue;
      if (m.region.base < prev_end) {
        sorted_disjoint = false;
        break;
      }
      prev_end = static_cast<u128>(m.region.base) + len;
    }
    if (sorted_disjoint) return std::nullopt;
  }
  struct Span {
    uint64_t begin, end;
    size_t index;
  };
  std::vector<Span> v;
  v.reserve(regions.size());
  for (size_t i = 0; i < regions.size(); ++i) {
    const Region& r = regions[i].region;
    const u128 len = static_cast<u128>(r.block_len) * r.num_blocks;
    if (len == 0) continue;
    const u128 end = static_cast<u128>(r.base) + len;
    v.push_back({r.base, end > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(end), i});
  }
  std::sort(v.begin(), v.end(), [](const Span& a, const Span& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.index < b.index;
  });
  // Sweep in base order keeping the range that reaches furthest: any later range starting
  // before its end overlaps it.
  size_t far = 0;
  for (size_t k = 1; k < v.size(); ++k) {
    if (v[k].begin < v[far].end) {
      const Span& a = v[far].index < v[k].index ? v[far] : v[k];
      const Span& b = v[far].index < v[k].index ? v[k] : v[far];
      return RegionOverlap{a.index, b.index, a.begin, a.end, b.begin, b.end};
    }
    if (v[k].end > v[far].end) far = k;
  }
  return std::nullopt;
}

std::string to_string(const RegionOverlap& o) {
  auto range = [](uint64_t b, uint64_t e) {
    return "[" + std::to_string(b) + ", " + std::to_string(e) + ")";
  };
  return "regions[" + std::to_string(o.first) + "] " + range(o.first_begin, o.first_end) +
         " overlaps regions[" + std::to_string(o.second) + "] " +
         range(o.second_begin, o.second_end);
}

std::vector<uint8_t> encode(const EngineMetadata& m) {
  check_metadata(m, Status::InvalidArgument);
  Writer w;
  for (uint8_t c : kMagic) w.u8(c);
  // The lowest minor that describes `m` (see the header): 1.1 only for an `mla` region.
  const bool has_mla_region = std::any_of(m.regions.begin(), m.regions.end(), [](const MetadataRegion& r) {
    return r.kind == RegionKind::Mla;
  });
  w.u16(kMetadataMajorVersion);
  w.u16(m.has_formats() ? 3 : m.is_pipeline_stage() ? 2 : has_mla_region ? 1 : 0);
  w.u32(0);  // payload length, patched below
  w.u32(0);  // checksum, patched below

  w.u16(static_cast<uint16_t>(m.engine_id.size()));
  w.bytes(m.engine_id);
  w.u32(m.tp_size);
  w.u32(m.tp_rank);
  w.u8(static_cast<uint8_t>(m.kv_layout));
  w.u8(static_cast<uint8_t>(m.conv_layout));
  w.u32(m.logical_block_size);
  w.u32(m.kernel_block_size);
  w.u32(m.physical_blocks_per_logical);
  w.u64(m.num_kernel_blocks);
  w.u8(static_cast<uint8_t>(m.mamba_type));
  w.u64(m.conv_bytes);
  w.u64(m.ssm_bytes);
  w.u8(static_cast<uint8_t>(m.conv_projection_bytes.size()));
  for (uint64_t p : m.conv_projection_bytes) w.u64(p);
  w.u64(m.attention_bytes_per_token);
  w.u8(static_cast<uint8_t>((m.use_mla ? kFlagMla : 0) | (m.prefix_caching ? kFlagPrefixCaching : 0) |
                            (m.is_pipeline_stage() ? kFlagPipeline : 0)));
  w.u32(m.total_kv_heads);
  w.u8(static_cast<uint8_t>(m.cache_mode));
  w.u64(m.model_fingerprint);
  w.u32(static_cast<uint32_t>(m.regions.size()));
  for (const MetadataRegion& r : m.regions) {
    w.u64(r.region.base);
    w.u64(r.region.block_len);
    w.u64(r.region.num_blocks);
    w.u8(static_cast<uint8_t>(r.kind));
    w.u32(r.layer);
  }
  if (m.is_pipeline_stage()) {
    w.u32(m.pp_size);
    w.u32(m.pp_rank);
    w.u32(m.layer_begin);
    w.u32(m.layer_end);
  }
  if (m.has_formats()) {  // 1.3, last: a 1.2 reader skips it as a newer minor's trailing bytes
    w.u8(static_cast<uint8_t>(m.model_format));
    w.u8(static_cast<uint8_t>(m.kv_cache_format));
    w.u8(static_cast<uint8_t>(m.conv_state_format));
    w.u8(static_cast<uint8_t>(m.ssm_state_format));
  }

  std::vector<uint8_t>& out = w.out();
  const size_t payload_len = out.size() - kMetadataHeaderBytes;  // bounded by kMaxRegions
  const uint32_t crc =
      crc32c(std::span<const uint8_t>(out.data() + kMetadataHeaderBytes, payload_len));
  for (int i = 0; i < 4; ++i) {
    out[8 + i] = static_cast<uint8_t>(payload_len >> (8 * i));
    out[12 + i] = static_cast<uint8_t>(crc >> (8 * i));
  }
  return std::move(out);
}

EngineMetadata decode(std::span<const uint8_t> bytes) {
  if (bytes.size() < kMetadataHeaderBytes) {
    fail(Status::Parse, "metadata truncated: " + std::to_string(bytes.size()) +
                            " bytes, the header alone needs " +
                            std::to_string(kMetadataHeaderBytes));
  }
  if (std::memcmp(bytes.data(), kMagic.data(), kMagic.size()) != 0) {
    fail(Status::Parse, "metadata magic is " + hex(read_le32(bytes.data())) +
                            ", expected \"PDKV\" (" + hex(read_le32(kMagic.data())) +
                            "); the peer is not speaking the pdkv handshake");
  }
  const uint16_t major = static_cast<uint16_t>(bytes[4] | bytes[5] << 8);
  const uint16_t minor = static_cast<uint16_t>(bytes[6] | bytes[7] << 8);
  if (major != kMetadataMajorVersion) {
    fail(Status::Parse, "metadata format major version " + std::to_string(major) +
                            " is not supported (this pdkv reads " +
                            std::to_string(kMetadataMajorVersion) +
                            "); run the same pdkv major version on P and D");
  }
  const uint32_t payload_len = read_le32(bytes.data() + 8);
  const size_t actual = bytes.size() - kMetadataHeaderBytes;
  if (payload_len != actual) {
    fail(Status::Parse, "metadata payload_len " + std::to_string(payload_len) + " but " +
                            std::to_string(actual) + " payload bytes were received");
  }
  const std::span<const uint8_t> payload = bytes.subspan(kMetadataHeaderBytes);
  const uint32_t want_crc = read_le32(bytes.data() + 12);
  const uint32_t got_crc = crc32c(payload);
  if (want_crc != got_crc) {
    fail(Status::Checksum, "metadata checksum mismatch: header says " + hex(want_crc) +
                               ", payload hashes to " + hex(got_crc) +
                               " (corrupted in transit)");
  }

  Reader r(payload);
  EngineMetadata m;
  const uint16_t id_len = r.u16("engine_id.length");
  if (id_len > kMaxEngineIdBytes) {
    fail(Status::Parse, q("engine_id") + " length " + std::to_string(id_len) +
                            " exceeds the limit " + std::to_string(kMaxEngineIdBytes));
  }
  m.engine_id = r.str(id_len, "engine_id");
  m.tp_size = r.u32("tp_size");
  m.tp_rank = r.u32("tp_rank");
  m.kv_layout = checked_enum<KvLayout>(r.u8("kv_layout"), 1, "kv_layout");
  m.conv_layout = checked_enum<ConvLayout>(r.u8("conv_layout"), 1, "conv_layout");
  m.logical_block_size = r.u32("logical_block_size");
  m.kernel_block_size = r.u32("kernel_block_size");
  m.physical_blocks_per_logical = r.u32("physical_blocks_per_logical");
  m.num_kernel_blocks = r.u64("num_kernel_blocks");
  m.mamba_type = checked_enum<MambaType>(r.u8("mamba_type"),
                                         static_cast<uint64_t>(last_mamba_type()), "mamba_type");
  m.conv_bytes = r.u64("conv_bytes");
  m.ssm_bytes = r.u64("ssm_bytes");
  const uint8_t np = r.u8("conv_projection_bytes.count");
  if (np > kMaxConvProjections) {
    fail(Status::Parse, q("conv_projection_bytes") + " count " + std::to_string(np) +
                            " exceeds the limit " + std::to_string(kMaxConvProjections));
  }
  for (uint8_t i = 0; i < np; ++i) {
    m.conv_projection_bytes.push_back(r.u64("conv_projection_bytes[" + std::to_string(i) + "]"));
  }
  m.attention_bytes_per_token = r.u64("attention_bytes_per_token");
  const uint8_t flags = r.u8("flags");
  if ((flags & ~kKnownFlags) != 0) {
    fail(Status::Parse, q("flags") + " = " + std::to_string(flags) + " sets unknown bits " +
                            std::to_string(flags & ~kKnownFlags));
  }
  m.use_mla = (flags & kFlagMla) != 0;
  m.prefix_caching = (flags & kFlagPrefixCaching) != 0;
  const bool pipeline = (flags & kFlagPipeline) != 0;
  if (pipeline && minor < 2) {
    fail(Status::Parse, q("flags") + " sets the pipeline bit (4), which format " + std::to_string(major) +
                            "." + std::to_string(minor) + " does not define (it needs 1.2)");
  }
  m.total_kv_heads = r.u32("total_kv_heads");
  m.cache_mode = checked_enum<MambaCacheMode>(
      r.u8("cache_mode"), static_cast<uint64_t>(MambaCacheMode::All), "cache_mode");
  m.model_fingerprint = r.u64("model_fingerprint");
  const uint32_t nregions = r.u32("regions.count");
  if (nregions > kMaxRegions) {
    fail(Status::Parse, q("regions") + " count " + std::to_string(nregions) +
                            " exceeds the limit " + std::to_string(kMaxRegions));
  }
  r.need_items(nregions, kRegionWireBytes, "regions");
  m.regions.reserve(nregions);  // safe: bounded by the bytes actually present
  for (uint32_t i = 0; i < nregions; ++i) {
    const std::string f = "regions[" + std::to_string(i) + "]";
    MetadataRegion reg;
    reg.region.base = r.u64(f + ".base");
    reg.region.block_len = r.u64(f + ".block_len");
    reg.region.num_blocks = r.u64(f + ".num_blocks");
    reg.kind = checked_enum<RegionKind>(r.u8(f + ".kind"), static_cast<uint64_t>(RegionKind::Mla), f + ".kind");
    if (reg.kind == RegionKind::Mla && minor < 1) {
      fail(Status::Parse, q(f + ".kind") + " is mla (2), which format " + std::to_string(major) + "." +
                              std::to_string(minor) + " does not define (it needs 1.1)");
    }
    reg.layer = r.u32(f + ".layer");
    m.regions.push_back(reg);
  }
  if (pipeline) {
    m.pp_size = r.u32("pp_size");
    m.pp_rank = r.u32("pp_rank");
    m.layer_begin = r.u32("layer_begin");
    m.layer_end = r.u32("layer_end");
    // The bit marks a stage of a pipeline; a single stage is written without it (one encoding per
    // metadata, so equal metadata give equal bytes).
    if (m.pp_size < 2) {
      fail(Status::Parse, q("pp_size") + " = " + std::to_string(m.pp_size) +
                              " under the pipeline flag; single-stage metadata is encoded without it");
    }
  }
  if (minor >= 3) {
    const auto fmt = [&](const char* f) {
      return checked_enum<ElementFormat>(r.u8(f), static_cast<uint64_t>(kLastElementFormat), f);
    };
    m.model_format = fmt("model_format");
    m.kv_cache_format = fmt("kv_cache_format");
    m.conv_state_format = fmt("conv_state_format");
    m.ssm_state_format = fmt("ssm_state_format");
    // Written only when a format is known (one encoding per metadata): all Unknown is 1.2's. A
    // newer minor may carry them all Unknown ahead of its own fields.
    if (minor == 3 && !m.has_formats()) {
      fail(Status::Parse, q("kv_cache_format") + ": format " + std::to_string(major) + "." + std::to_string(minor) +
                              " element formats are all unknown; such metadata is encoded without them (1.2)");
    }
  }
  // Newer minors append fields we do not know yet; within our own minor, extra bytes mean
  // the sender and we disagree about the layout.
  if (r.remaining() != 0 && minor <= kMetadataMinorVersion) {
    fail(Status::Parse, "metadata has " + std::to_string(r.remaining()) +
                            " unexpected trailing payload bytes for format version " +
                            std::to_string(major) + "." + std::to_string(minor));
  }
  check_metadata(m, Status::Parse);
  return m;
}

}  // namespace pdkv::core
