// EngineMetadata wire format: round trips, the header layout, and one test per corruption class
// (truncation, magic, version, length, checksum, absurd counts, strings, address overflow, field
// ranges), plus exhaustive truncation/bit-flip sweeps and a seeded random-mutation property.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "pdkv/core/engine_metadata.hpp"

using namespace pdkv::core;

namespace {

// Nemotron-3-Nano-30B at TP2 with fp8 KV (docs/semantics.md §4 test values): conv 18432 =
// x 12288 + B 3072 + C 3072, ssm 1048576, kernel page 4096 = 16 tokens * 256 B, ppl 261.
EngineMetadata nemotron_tp2(uint32_t rank = 0) {
  EngineMetadata m;
  m.engine_id = "prefill-0";
  m.tp_size = 2;
  m.tp_rank = rank;
  m.kernel_block_size = 16;
  m.physical_blocks_per_logical = 261;
  m.logical_block_size = 16 * 261;
  m.num_kernel_blocks = 261 * 100;
  m.mamba_type = MambaType::Mamba2;
  m.conv_projection_bytes = {12288, 3072, 3072};
  m.conv_bytes = 18432;
  m.ssm_bytes = 1048576;
  m.attention_bytes_per_token = 256;
  m.total_kv_heads = 2;
  m.prefix_caching = true;
  m.cache_mode = MambaCacheMode::Align;
  m.model_fingerprint = 0x85f1d3f73a3e02c8ull;
  for (uint32_t i = 0; i < 4; ++i) {
    MetadataRegion r;
    r.region = {(uint64_t{i} + 1) << 32, 4096, m.num_kernel_blocks};
    r.kind = i % 2 == 0 ? RegionKind::Mamba : RegionKind::Attention;
    r.layer = i * 2;
    m.regions.push_back(r);
  }
  return m;
}

EngineMetadata llama_mla() {
  EngineMetadata m;
  m.engine_id = "decode-\xC3\xA9\xE2\x82\xAC";  // "decode-é€": multi-byte UTF-8 is fine
  m.tp_size = 8;
  m.tp_rank = 7;
  m.kv_layout = KvLayout::NHD;
  m.kernel_block_size = 64;
  m.logical_block_size = 64;
  m.num_kernel_blocks = 5000;
  m.attention_bytes_per_token = 1152;
  m.use_mla = true;
  m.total_kv_heads = 1;
  m.regions.push_back({{0x7f0000000000, 64 * 1152, 5000}, RegionKind::Attention, 0});
  return m;
}

// Wire offsets (payload-relative) for an engine id of `id_len` bytes and `np` projections.
struct Offsets {
  size_t id_len, np;
  size_t tp_size() const { return 2 + id_len; }
  size_t tp_rank() const { return tp_size() + 4; }
  size_t kv_layout() const { return tp_rank() + 4; }
  size_t kernel_block_size() const { return kv_layout() + 2 + 4; }
  size_t mamba_type() const { return kernel_block_size() + 4 + 4 + 8; }
  size_t flags() const { return mamba_type() + 1 + 8 + 8 + 1 + 8 * np + 8; }
  size_t regions_count() const { return flags() + 1 + 4 + 1 + 8; }
  size_t region(size_t i) const { return regions_count() + 4 + 29 * i; }
};
Offsets offsets_of(const EngineMetadata& m) {
  return {m.engine_id.size(), m.conv_projection_bytes.size()};
}

// Recomputes payload length and CRC so a corruption reaches the field parser.
void reseal(std::vector<uint8_t>& b) {
  const uint32_t len = static_cast<uint32_t>(b.size() - kMetadataHeaderBytes);
  const uint32_t crc = crc32c(std::span<const uint8_t>(b).subspan(kMetadataHeaderBytes));
  for (int i = 0; i < 4; ++i) {
    b[8 + i] = static_cast<uint8_t>(len >> (8 * i));
    b[12 + i] = static_cast<uint8_t>(crc >> (8 * i));
  }
}
void put_le(std::vector<uint8_t>& b, size_t payload_off, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) b[kMetadataHeaderBytes + payload_off + i] = static_cast<uint8_t>(v >> (8 * i));
}

// Decodes and expects an Error with `status` whose message contains every `needle`.
void expect_error(const std::vector<uint8_t>& b, Status status,
                  std::initializer_list<std::string> needles) {
  try {
    decode(b);
    FAIL() << "decode accepted corrupt bytes; expected " << status_name(status);
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), status) << e.what();
    for (const auto& n : needles) {
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos)
          << "message lacks '" << n << "': " << e.what();
    }
  }
}

}  // namespace

TEST(Crc32c, StandardCheckValues) {
  const std::string s = "123456789";
  EXPECT_EQ(crc32c(std::span(reinterpret_cast<const uint8_t*>(s.data()), s.size())), 0xE3069283u);
  EXPECT_EQ(crc32c({}), 0u);
  const std::vector<uint8_t> zeros(32, 0);  // RFC 3720 B.4 test vector
  EXPECT_EQ(crc32c(zeros), 0x8A9136AAu);
}

TEST(EngineMetadata, RoundTripHybridAndMla) {
  for (const EngineMetadata& m : {nemotron_tp2(1), llama_mla()}) {
    const auto bytes = encode(m);
    EXPECT_EQ(decode(bytes), m);
    EXPECT_EQ(encode(decode(bytes)), bytes);
  }
}

TEST(EngineMetadata, HeaderLayoutAndSize) {
  const EngineMetadata m = nemotron_tp2();
  const auto b = encode(m);
  ASSERT_GE(b.size(), kMetadataHeaderBytes);
  EXPECT_EQ(std::string(b.begin(), b.begin() + 4), "PDKV");
  EXPECT_EQ(b[4] | b[5] << 8, 1);  // major
  EXPECT_EQ(b[6] | b[7] << 8, 0);  // minor
  // payload: 2+9 id, 8 tp, 2 layouts, 12 block sizes, 8 blocks, 1 type, 16 sizes, 1+24 proj,
  // 8 attn, 1 flags, 4 heads, 1 mode, 8 fp, 4 + 4*29 regions = 225
  EXPECT_EQ(b.size(), kMetadataHeaderBytes + 225);
  EXPECT_EQ(uint32_t(b[8] | b[9] << 8 | b[10] << 16 | b[11] << 24), 225u);
  // spot-check a field at its documented offset: tp_size = 2 at payload offset 11
  EXPECT_EQ(b[kMetadataHeaderBytes + offsets_of(m).tp_size()], 2);
}

TEST(EngineMetadata, TruncatedAtEveryLength) {
  const auto full = encode(nemotron_tp2());
  for (size_t n = 0; n < full.size(); ++n) {
    std::vector<uint8_t> cut(full.begin(), full.begin() + n);
    try {
      decode(cut);
      FAIL() << "accepted a " << n << "-byte prefix";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::Parse) << n << ": " << e.what();
    }
  }
  expect_error({'P', 'D'}, Status::Parse, {"truncated", "2 bytes"});
}

// Truncated payload with a valid header: the field reader must stop at the buffer end.
TEST(EngineMetadata, TruncatedPayloadNamesField) {
  auto b = encode(nemotron_tp2());
  const Offsets o = offsets_of(nemotron_tp2());
  b.resize(kMetadataHeaderBytes + o.region(2) + 3);  // inside regions[2].base
  reseal(b);
  expect_error(b, Status::Parse, {"truncated", "'regions"});
  auto b2 = encode(nemotron_tp2());
  b2.resize(kMetadataHeaderBytes + o.tp_rank() + 1);
  reseal(b2);
  expect_error(b2, Status::Parse, {"'tp_rank'", "needs 4 bytes", "only 1 left"});
}

TEST(EngineMetadata, WrongMagic) {
  auto b = encode(nemotron_tp2());
  b[0] = 'X';
  expect_error(b, Status::Parse, {"magic", "PDKV"});
}

TEST(EngineMetadata, UnknownMajorVersion) {
  auto b = encode(nemotron_tp2());
  b[4] = 2;
  expect_error(b, Status::Parse, {"major version 2", "reads 1"});
}

TEST(EngineMetadata, NewerMinorMayAppendFieldsSameMinorMayNot) {
  auto b = encode(nemotron_tp2());
  b.push_back(0xAB);
  b.push_back(0xCD);
  reseal(b);
  expect_error(b, Status::Parse, {"2 unexpected trailing payload bytes", "1.0"});
  b[6] = 1;  // 1.1 appended no field either: this reader knows 1.1
  reseal(b);
  expect_error(b, Status::Parse, {"2 unexpected trailing payload bytes", "1.1"});
  b[6] = 2;  // 1.2 appends its pipeline fields only behind the pipeline flag
  reseal(b);
  expect_error(b, Status::Parse, {"2 unexpected trailing payload bytes", "1.2"});
  b[6] = 3;  // 1.3 appends the element formats: 0xAB is no format
  reseal(b);
  expect_error(b, Status::Parse, {"model_format", "unknown value 171"});
  // minor 4: the 1.3 formats (here all unknown, which only a newer minor may write), then fields
  // we do not know yet, skipped
  b.resize(b.size() - 2);
  for (uint8_t v : {0, 0, 0, 0, 0xAB, 0xCD}) b.push_back(v);
  b[6] = 4;
  reseal(b);
  EXPECT_EQ(decode(b), nemotron_tp2());
}

TEST(EngineMetadata, ElementFormatsRoundTripAsMinor3AndOldMetadataDecodesUnknown) {
  EngineMetadata m = nemotron_tp2();
  const auto old_bytes = encode(m);  // no format known: the 1.0 encoding, byte for byte
  EXPECT_EQ(old_bytes[6], 0);
  const EngineMetadata old = decode(old_bytes);
  EXPECT_EQ(old.kv_cache_format, ElementFormat::Unknown);
  EXPECT_EQ(old.model_format, ElementFormat::Unknown);
  EXPECT_FALSE(old.has_formats());

  m.model_format = ElementFormat::BFloat16;
  m.kv_cache_format = ElementFormat::Fp8E5m2;
  m.conv_state_format = ElementFormat::BFloat16;
  m.ssm_state_format = ElementFormat::Float32;
  const auto b = encode(m);
  EXPECT_EQ(b[6], 3);  // labelled 1.3
  EXPECT_EQ(b.size(), old_bytes.size() + 4);
  const std::vector<uint8_t> tail(b.end() - 4, b.end());
  EXPECT_EQ(tail, (std::vector<uint8_t>{1, 5, 1, 3}));  // model, KV, conv, SSM, stable values
  const EngineMetadata back = decode(b);
  EXPECT_EQ(back, m);
  EXPECT_EQ(back.kv_cache_format, ElementFormat::Fp8E5m2);
  EXPECT_EQ(encode(back), b);

  // A 1.2 reader's view: the same payload minus the formats under label 1.2 is the old metadata
  // (what a 1.2 reader decodes when it skips a newer minor's trailing bytes).
  auto as_12 = std::vector<uint8_t>(b.begin(), b.end() - 4);
  as_12[6] = 2;
  reseal(as_12);
  EXPECT_EQ(decode(as_12), nemotron_tp2());

  // 1.3 with every format unknown is not how such metadata is encoded.
  auto zeros = b;
  for (size_t i = zeros.size() - 4; i < zeros.size(); ++i) zeros[i] = 0;
  reseal(zeros);
  expect_error(zeros, Status::Parse, {"kv_cache_format", "all unknown"});
  // An out-of-range format and a per-token-head format outside the KV cache are refused.
  auto bad = b;
  bad[bad.size() - 3] = 9;
  reseal(bad);
  expect_error(bad, Status::Parse, {"kv_cache_format", "unknown value 9"});
  bad = b;
  bad[bad.size() - 4] = static_cast<uint8_t>(ElementFormat::Int8PerTokenHead);
  reseal(bad);
  expect_error(bad, Status::Parse, {"model_format", "int8_per_token_head"});
  // Truncated formats name the field.
  bad = std::vector<uint8_t>(b.begin(), b.end() - 1);
  reseal(bad);
  expect_error(bad, Status::Parse, {"truncated", "ssm_state_format"});
  // A pipeline stage with formats: its 1.2 fields, then the formats, labelled 1.3.
  m.pp_size = 2;
  m.layer_end = 8;
  const auto staged = encode(m);
  EXPECT_EQ(staged[6], 3);
  EXPECT_EQ(decode(staged), m);
  EXPECT_EQ(std::vector<uint8_t>(staged.end() - 4, staged.end()), (std::vector<uint8_t>{1, 5, 1, 3}));
}

TEST(EngineMetadata, PayloadLengthMismatch) {
  auto b = encode(nemotron_tp2());
  b[8] = static_cast<uint8_t>(b[8] + 1);
  expect_error(b, Status::Parse, {"payload_len 226", "225 payload bytes"});
}

TEST(EngineMetadata, ChecksumDetectsEveryPayloadBitFlip) {
  const auto good = encode(nemotron_tp2());
  for (size_t i = kMetadataHeaderBytes; i < good.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      auto b = good;
      b[i] ^= static_cast<uint8_t>(1u << bit);
      try {
        decode(b);
        FAIL() << "flip of byte " << i << " bit " << bit << " not detected";
      } catch (const Error& e) {
        ASSERT_EQ(e.status(), Status::Checksum) << e.what();
      }
    }
  }
  auto b = good;
  b[12] ^= 1;  // the stored CRC itself
  expect_error(b, Status::Checksum, {"checksum mismatch", "0x"});
}

TEST(EngineMetadata, AbsurdRegionCountIsRejectedBeforeAllocating) {
  const EngineMetadata m = nemotron_tp2();
  const Offsets o = offsets_of(m);
  auto b = encode(m);
  put_le(b, o.regions_count(), 0xFFFFFFFFu, 4);
  reseal(b);
  expect_error(b, Status::Parse, {"'regions'", "4294967295", "limit 65536"});
  put_le(b, o.regions_count(), 60000, 4);  // under the limit but needs 1.7 MB in a 241 B buffer
  reseal(b);
  expect_error(b, Status::Parse, {"claims 60000 entries of 29 bytes", "116 payload bytes remain"});
}

TEST(EngineMetadata, AbsurdProjectionCount) {
  const EngineMetadata m = nemotron_tp2();
  auto b = encode(m);
  b[kMetadataHeaderBytes + offsets_of(m).mamba_type() + 17] = 200;
  reseal(b);
  expect_error(b, Status::Parse, {"'conv_projection_bytes' count 200", "limit 3"});
}

TEST(EngineMetadata, EngineIdMustBeShortPrintableUtf8) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"p\xC0\xAF", "invalid byte 192 at offset 1"},       // overlong '/'
      {"p\xED\xA0\x80", "invalid byte 237 at offset 1"},   // UTF-16 surrogate
      {"\x80xyz", "invalid byte 128 at offset 0"},         // lone continuation byte
      {"ab\xE2\x82", "invalid byte 226 at offset 2"},      // truncated sequence
      {"p\xF4\x90\x80\x80", "invalid byte 244"},           // above U+10FFFF
      {"a\nb", "invalid byte 10 at offset 1"},             // control character
  };
  for (const auto& [id, needle] : bad) {
    EngineMetadata m = nemotron_tp2();
    m.engine_id = "prefill-0";
    auto b = encode(m);
    // replace the 9-byte id with `id`, keeping everything after it
    std::vector<uint8_t> out(b.begin(), b.begin() + kMetadataHeaderBytes);
    out.push_back(static_cast<uint8_t>(id.size()));
    out.push_back(0);
    out.insert(out.end(), id.begin(), id.end());
    out.insert(out.end(), b.begin() + kMetadataHeaderBytes + 2 + 9, b.end());
    reseal(out);
    expect_error(out, Status::Parse, {"'engine_id'", "not printable UTF-8", needle});
  }
  auto b = encode(nemotron_tp2());
  put_le(b, 0, 300, 2);  // id length 300 > 256
  reseal(b);
  expect_error(b, Status::Parse, {"'engine_id' length 300", "limit 256"});
}

TEST(EngineMetadata, RegionOverflowingAddressSpace) {
  const EngineMetadata m = nemotron_tp2();
  auto b = encode(m);
  put_le(b, offsets_of(m).region(1), 0xFFFFFFFFFFFF0000ull, 8);  // base near 2^64
  reseal(b);
  expect_error(b, Status::OutOfBounds,
               {"regions[1]", "base 18446744073709486080", "block_len 4096", "num_blocks 26100"});
}

TEST(EngineMetadata, FieldRanges) {
  const EngineMetadata m = nemotron_tp2();
  const Offsets o = offsets_of(m);
  struct Case {
    size_t off;
    uint64_t value;
    int width;
    std::vector<std::string> needles;
  };
  const std::vector<Case> cases = {
      {o.tp_rank(), 2, 4, {"'tp_rank' = 2 must be < tp_size 2"}},
      {o.tp_size(), 0, 4, {"'tp_size' = 0"}},
      {o.kernel_block_size(), 0, 4, {"'kernel_block_size' = 0"}},
      {o.kernel_block_size(), 32, 4, {"logical_block_size' = 4176", "kernel_block_size 32"}},
      {o.kv_layout(), 7, 1, {"'kv_layout' has unknown value 7"}},
      {o.kv_layout() + 1, 2, 1, {"'conv_layout' has unknown value 2"}},
      {o.mamba_type(), 9, 1, {"'mamba_type' has unknown value 9"}},
      {o.mamba_type(), 1, 1, {"'conv_projection_bytes' has 3 entries", "mamba1 needs 1"}},
      {o.mamba_type() + 1, 18433, 8, {"'conv_bytes' = 18433", "sum of conv_projection_bytes 18432"}},
      {o.flags(), 0x88, 1, {"'flags' = 136 sets unknown bits 136"}},
      // The pipeline bit (format 1.2) under this encoding's 1.0 label.
      {o.flags(), 0x04, 1, {"pipeline bit (4)", "format 1.0", "needs 1.2"}},
      {o.flags(), 0x01, 1, {"'total_kv_heads' = 2 but MLA"}},
      {o.region(0) + 24, 5, 1, {"'regions[0].kind' has unknown value 5"}},
      {o.region(3) + 8, 0, 8, {"'regions[3].block_len' = 0"}},
  };
  for (const Case& c : cases) {
    auto b = encode(m);
    put_le(b, c.off, c.value, c.width);
    reseal(b);
    try {
      decode(b);
      FAIL() << "accepted " << c.needles[0];
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::Parse) << e.what();
      for (const auto& n : c.needles) {
        EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
      }
    }
  }
}

TEST(EngineMetadata, MambaStateMustFitTheLogicalPage) {
  EngineMetadata m = nemotron_tp2();
  m.ssm_bytes = 4096 * 261;  // conv + ssm > block_len * ppl
  try {
    encode(m);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::OutOfBounds);
    EXPECT_NE(std::string(e.what()).find("block_len 4096 * physical_blocks_per_logical 261"),
              std::string::npos)
        << e.what();
  }
}

TEST(EngineMetadata, EncodeRejectsInvalidMetadata) {
  EngineMetadata m = nemotron_tp2();
  m.tp_rank = 5;
  try {
    encode(m);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("tp_rank' = 5 must be < tp_size 2"), std::string::npos);
  }
  m = nemotron_tp2();
  m.regions.clear();
  EXPECT_THROW(encode(m), Error);
  m = llama_mla();
  m.conv_bytes = 10;  // Mamba sizes on a pure attention engine
  EXPECT_THROW(encode(m), Error);
}

// Property: any mutation of a valid encoding (resealed so it passes the checksum) either fails
// with Parse/OutOfBounds or decodes to metadata that re-encodes to exactly the same bytes.
TEST(EngineMetadata, RandomMutationsFailCleanlyOrRoundTrip) {
  std::mt19937_64 rng(12345);
  const std::vector<std::vector<uint8_t>> seeds = {encode(nemotron_tp2()), encode(llama_mla())};
  size_t accepted = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    auto b = seeds[iter % 2];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t pos = kMetadataHeaderBytes + rng() % (b.size() - kMetadataHeaderBytes);
      switch (rng() % 3) {
        case 0: b[pos] = static_cast<uint8_t>(rng()); break;
        case 1: b.erase(b.begin() + static_cast<long>(pos)); break;
        default: b.insert(b.begin() + static_cast<long>(pos), static_cast<uint8_t>(rng())); break;
      }
    }
    reseal(b);
    try {
      const EngineMetadata m = decode(b);
      ++accepted;
      ASSERT_EQ(encode(m), b) << "iteration " << iter;
    } catch (const Error& e) {
      ASSERT_TRUE(e.status() == Status::Parse || e.status() == Status::OutOfBounds)
          << status_name(e.status()) << ": " << e.what();
    }
  }
  EXPECT_GT(accepted, 0u);  // the property is not vacuous: some mutations stay valid
}

// ---- overlapping regions ----

TEST(RegionOverlap, FindsTheFirstOverlapInAddressOrder) {
  auto reg = [](uint64_t base, uint64_t len, uint64_t n) {
    return MetadataRegion{{base, len, n}, RegionKind::Attention, 0};
  };
  EXPECT_FALSE(find_region_overlap(std::vector<MetadataRegion>{}));
  // Touching ranges and empty regions never overlap, in any order.
  EXPECT_FALSE(find_region_overlap(std::vector{reg(200, 10, 10), reg(100, 10, 10), reg(150, 0, 9),
                                               reg(300, 10, 0), reg(305, 1, 1)}));
  // regions[2] [0, 1000) reaches past regions[0] [100, 110) and regions[1] [500, 510).
  auto o = find_region_overlap(std::vector{reg(100, 10, 1), reg(500, 10, 1), reg(0, 100, 10)});
  ASSERT_TRUE(o);
  EXPECT_EQ(o->first, 0u);
  EXPECT_EQ(o->second, 2u);
  EXPECT_EQ(to_string(*o), "regions[0] [100, 110) overlaps regions[2] [0, 1000)");
  // A far-reaching region is remembered past a short one in between.
  o = find_region_overlap(std::vector{reg(0, 100, 10), reg(1000, 1, 1), reg(10, 1, 1)});
  ASSERT_TRUE(o);
  EXPECT_EQ(to_string(*o), "regions[0] [0, 1000) overlaps regions[2] [10, 11)");
  o = find_region_overlap(std::vector{reg(0, 100, 10), reg(2000, 1, 1), reg(999, 1, 1)});
  ASSERT_TRUE(o);
  EXPECT_EQ(o->second, 2u);
  // Identical bases: the same tensor registered twice.
  o = find_region_overlap(std::vector{reg(64, 8, 2), reg(64, 8, 2)});
  ASSERT_TRUE(o);
  EXPECT_EQ(to_string(*o), "regions[0] [64, 80) overlaps regions[1] [64, 80)");
  // An end past 2^64 saturates instead of wrapping to a small number.
  o = find_region_overlap(std::vector{reg(UINT64_MAX - 10, 1u << 20, 1), reg(UINT64_MAX - 5, 1, 1)});
  ASSERT_TRUE(o);
  EXPECT_EQ(o->first_end, UINT64_MAX);
}

// Two regions sharing bytes: a plan would write one layer's bytes into another's. encode()
// refuses with InvalidArgument, decode() with Parse, naming both indexes and ranges.
TEST(EngineMetadata, OverlappingRegionsAreRejected) {
  EngineMetadata m = nemotron_tp2();
  const uint64_t size = 4096ull * 26100;
  m.regions[3].region.base = m.regions[1].region.base + size - 4096;  // shares the last block
  const std::string want = "regions[1] [" + std::to_string(2ull << 32) + ", " +
                           std::to_string((2ull << 32) + size) + ") overlaps regions[3] [" +
                           std::to_string((2ull << 32) + size - 4096) + ", " +
                           std::to_string((2ull << 32) + 2 * size - 4096) + ")";
  try {
    encode(m);
    FAIL() << "encode accepted overlapping regions";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
  const EngineMetadata good = nemotron_tp2();
  auto b = encode(good);
  put_le(b, offsets_of(good).region(2), 1ull << 32, 8);  // regions[2] at regions[0]'s base
  reseal(b);
  expect_error(b, Status::Parse, {"'regions'", "regions[0] [4294967296, ", "overlaps regions[2] [4294967296, "});
  // Back to back is fine.
  m.regions[3].region.base = m.regions[1].region.base + size;
  m.regions[2].region.base = m.regions[3].region.base + size;
  EXPECT_EQ(decode(encode(m)), m);
}

// ---- plausibility limits ----

TEST(EngineMetadata, ImplausibleSizesAreRejectedNamingFieldAndValue) {
  // What a reviewer sent: 2^40 kernel blocks in every region (offsets near 1e18 in a plan).
  {
    EngineMetadata m = llama_mla();
    m.num_kernel_blocks = 1ull << 40;
    m.regions[0].region.num_blocks = 1ull << 40;
    m.regions[0].region.block_len = 1;  // keep it inside the address space
    const EngineMetadata ok = llama_mla();
    auto b = encode(ok);
    put_le(b, offsets_of(ok).kernel_block_size() + 8, 1ull << 40, 8);
    put_le(b, offsets_of(ok).region(0) + 16, 1ull << 40, 8);
    reseal(b);
    expect_error(b, Status::Parse,
                 {"'num_kernel_blocks' = 1099511627776", "plausibility limit 4294967296"});
    EXPECT_THROW(encode(m), Error);
  }
  struct Case {
    uint64_t block_len, num_blocks;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {(1ull << 32) + 1, 1, "'regions[0].block_len' = 4294967297 exceeds the plausibility limit 4294967296"},
      {64, (1ull << 32) + 1, "'regions[0].num_blocks' = 4294967297 exceeds the plausibility limit 4294967296"},
      {1ull << 20, 1ull << 29,
       "'regions[0]' block_len 1048576 * num_blocks 536870912 = 562949953421312 bytes exceeds the "
       "plausibility limit 281474976710656"},
  };
  for (const Case& c : cases) {
    EngineMetadata m = llama_mla();
    m.regions[0].region.block_len = c.block_len;
    m.regions[0].region.num_blocks = c.num_blocks;
    try {
      encode(m);
      FAIL() << "accepted " << c.needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::InvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find(c.needle), std::string::npos) << e.what();
    }
    const EngineMetadata ok = llama_mla();
    auto b = encode(ok);
    put_le(b, offsets_of(ok).region(0) + 8, c.block_len, 8);
    put_le(b, offsets_of(ok).region(0) + 16, c.num_blocks, 8);
    reseal(b);
    expect_error(b, Status::Parse, {c.needle});
  }
  // Right at the limits is accepted: 2^32 blocks of 2^16 bytes = 2^48 bytes.
  EngineMetadata m = llama_mla();
  m.num_kernel_blocks = 1ull << 32;
  m.regions[0].region = {1ull << 50, 1ull << 16, 1ull << 32};
  m.attention_bytes_per_token = (1ull << 16) / 64;  // block_len = kernel_block_size * bytes/token
  EXPECT_EQ(decode(encode(m)), m);
}

// ---- attention bytes per token tied to the kernel page ----

// A peer that doubles attention_bytes_per_token (CRC re-sealed) used to pass decode: nothing tied
// it to block_len. Every region's block_len must be kernel_block_size * attention_bytes_per_token
// (Mamba regions too: the Mamba page is padded to the attention page).
TEST(EngineMetadata, AttentionBytesPerTokenMustMatchTheKernelPage) {
  struct Fixture {
    EngineMetadata m;
    std::string needle;
  };
  const std::vector<Fixture> fixtures = {
      {nemotron_tp2(),  // hybrid: regions 0 and 2 are Mamba, 1 and 3 attention
       "'regions[0].block_len' = 4096 is not kernel_block_size 16 * attention_bytes_per_token "
       "512 = 8192"},
      {llama_mla(),
       "'regions[0].block_len' = 73728 is not kernel_block_size 64 * attention_bytes_per_token "
       "2304 = 147456"}};
  for (const Fixture& f : fixtures) {
    const auto good = encode(f.m);
    EXPECT_EQ(decode(good), f.m);
    auto b = good;
    const size_t abpt_off = offsets_of(f.m).flags() - 8;
    put_le(b, abpt_off, f.m.attention_bytes_per_token * 2, 8);
    reseal(b);
    expect_error(b, Status::Parse, {f.needle});
    EngineMetadata doubled = f.m;
    doubled.attention_bytes_per_token *= 2;
    try {
      encode(doubled);
      FAIL() << "encode accepted a doubled attention_bytes_per_token";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::InvalidArgument);
      EXPECT_NE(std::string(e.what()).find(f.needle), std::string::npos) << e.what();
    }
  }
  // Also a single region whose block_len alone is off (bytes per token unchanged).
  EngineMetadata m = nemotron_tp2();
  m.regions[3].region.block_len = 8192;
  m.regions[3].region.num_blocks = m.num_kernel_blocks;
  m.regions[3].region.base = 1ull << 40;
  try {
    encode(m);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'regions[3].block_len' = 8192 is not kernel_block_size "
                                         "16 * attention_bytes_per_token 256 = 4096"),
              std::string::npos)
        << e.what();
  }
}

// Bytes per token must split into whole KV heads of the rank (max(1, K / tp); MLA 1).
TEST(EngineMetadata, AttentionBytesPerTokenSplitsIntoWholeHeads) {
  EngineMetadata m = nemotron_tp2();  // K = 2 at TP2: one head per rank, any value splits
  m.total_kv_heads = 8;               // 4 heads per rank: 256 splits, 260 does not
  EXPECT_NO_THROW(check_metadata(m, Status::InvalidArgument));
  m.attention_bytes_per_token = 258;
  for (auto& r : m.regions) r.region.block_len = 16 * 258;
  try {
    check_metadata(m, Status::Parse);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::Parse);
    EXPECT_NE(std::string(e.what()).find("'attention_bytes_per_token' = 258 is not a whole number "
                                         "of bytes per KV head (4 heads per rank"),
              std::string::npos)
        << e.what();
  }
}
