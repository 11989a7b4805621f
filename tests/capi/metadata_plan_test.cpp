// C API tests: engine metadata (build from a model, accessors, encode to a caller buffer or owned
// bytes, decode of untrusted bytes with every error class), model fingerprint, CRC-32C, handshake
// reports and the require-style call, and transfer plans for Nemotron-3-Nano-30B P TP4 -> D TP2
// (block sizes 1056 / 2096) with the numbers of core/transfer_plan_test.cpp, plus their errors.
#include <cstdint>
#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "capi_helpers.hpp"

using Catch::Matchers::Contains;
using V = std::vector<uint64_t>;

namespace {

struct MetadataDeleter { void operator()(pdkv_engine_metadata_t* p) const { pdkv_engine_metadata_free(p); } };
struct BytesDeleter { void operator()(pdkv_bytes_t* p) const { pdkv_bytes_free(p); } };
struct ReportDeleter { void operator()(pdkv_handshake_report_t* p) const { pdkv_handshake_report_free(p); } };
struct ContextDeleter { void operator()(pdkv_plan_context_t* p) const { pdkv_plan_context_free(p); } };
struct PlanDeleter { void operator()(pdkv_transfer_plan_t* p) const { pdkv_transfer_plan_free(p); } };
struct StringDeleter { void operator()(pdkv_string_t* p) const { pdkv_string_free(p); } };
using MetadataPtr = std::unique_ptr<pdkv_engine_metadata_t, MetadataDeleter>;
using BytesPtr = std::unique_ptr<pdkv_bytes_t, BytesDeleter>;
using ReportPtr = std::unique_ptr<pdkv_handshake_report_t, ReportDeleter>;
using ContextPtr = std::unique_ptr<pdkv_plan_context_t, ContextDeleter>;
using PlanPtr = std::unique_ptr<pdkv_transfer_plan_t, PlanDeleter>;
using StringPtr = std::unique_ptr<pdkv_string_t, StringDeleter>;

constexpr uint64_t kLd = 2096ull * 512;  // D TP2 kernel block: one KV head of 128+128 bf16
constexpr uint64_t kLp = 1056ull * 512;  // P TP4 kernel block

MetadataPtr metadata(const pdkv_model_t* m, uint32_t tp, uint32_t rank, const char* id, uint64_t base,
                     uint32_t regions = 6, int32_t kv_layout = PDKV_KV_LAYOUT_HND) {
  const pdkv_engine_config_t c = engine(tp);
  pdkv_engine_layout_t l;
  REQUIRE_OK(pdkv_engine_layout_init(&l, err));
  l.engine_id = id;
  l.tp_rank = rank;
  l.num_regions = regions;
  l.base = base;
  l.kv_layout = kv_layout;
  pdkv_engine_metadata_t* md = nullptr;
  REQUIRE_OK(pdkv_engine_metadata_from_model(m, &c, &l, &md, err));
  return MetadataPtr(md);
}

pdkv_engine_metadata_info_t info_of(const pdkv_engine_metadata_t* md) {
  pdkv_engine_metadata_info_t i{};
  i.struct_size = sizeof i;
  REQUIRE_OK(pdkv_engine_metadata_get_info(md, &i, err));
  return i;
}

std::vector<uint8_t> encoded(const pdkv_engine_metadata_t* md) {
  pdkv_bytes_t* b = nullptr;
  REQUIRE_OK(pdkv_engine_metadata_encode_bytes(md, &b, err));
  BytesPtr owner(b);
  const uint8_t* data = nullptr;
  size_t len = 0;
  REQUIRE_OK(pdkv_bytes_data(b, &data, &len, err));
  return std::vector<uint8_t>(data, data + len);
}

CallResult decode_status(const std::vector<uint8_t>& bytes) {
  return capture([&](pdkv_error_t** e) {
    pdkv_engine_metadata_t* md = nullptr;
    const pdkv_status_t st = pdkv_engine_metadata_decode(bytes.data(), bytes.size(), &md, e);
    if (st != PDKV_OK) REQUIRE(md == nullptr);
    pdkv_engine_metadata_free(md);
    return st;
  });
}

// The P TP4 -> D TP2 Nemotron-3-Nano deployment of the core tests: D rank 0, 6 regions of 64
// logical blocks, D at 2^40, P rank r at (2 + r) * 2^40.
struct Nano {
  ModelPtr model = make_model(nemotron3_nano_desc());
  MetadataPtr d = metadata(model.get(), 2, 0, "d", 1ull << 40);
  std::vector<MetadataPtr> p;
  GeometryPtr dg = make_geometry(model.get(), engine(2));
  GeometryPtr pg = make_geometry(model.get(), engine(4));
  ContextPtr ctx;
  Nano() {
    for (uint32_t r = 0; r < 4; ++r) p.push_back(metadata(model.get(), 4, r, "p", (2ull + r) << 40));
    ctx = make_context(true);
  }
  std::vector<const pdkv_engine_metadata_t*> remote() const {
    std::vector<const pdkv_engine_metadata_t*> v;
    for (const auto& m : p) v.push_back(m.get());
    return v;
  }
  pdkv_plan_context_params_t params(const std::vector<const pdkv_engine_metadata_t*>& r, bool geometries) const {
    pdkv_plan_context_params_t c{};
    c.struct_size = sizeof c;
    c.local = d.get();
    c.remote = r.data();
    c.num_remote = r.size();
    c.local_geometry = geometries ? dg.get() : nullptr;
    c.remote_geometry = geometries ? pg.get() : nullptr;
    return c;
  }
  ContextPtr make_context(bool geometries) const {
    const auto r = remote();
    const auto c = params(r, geometries);
    pdkv_plan_context_t* out = nullptr;
    REQUIRE_OK(pdkv_plan_context_new(&c, &out, err));
    return ContextPtr(out);
  }
};

// A group description whose arrays live as long as the struct.
struct Group {
  V local, remote;
  std::vector<uint32_t> regions;
  pdkv_group_trim_input_t trim{};
  pdkv_plan_group_t group{};
  Group(int32_t kind, V l, V r, uint64_t computed, uint64_t hit = 0) : local(std::move(l)), remote(std::move(r)) {
    trim.struct_size = sizeof trim;
    trim.kind = kind;
    trim.cache_mode = PDKV_MAMBA_CACHE_NONE;
    trim.remote_computed_tokens = computed;
    trim.local_hit_tokens = hit;
    bind();
  }
  Group(const Group& o) : local(o.local), remote(o.remote), regions(o.regions), trim(o.trim), group(o.group) { bind(); }
  void bind() {
    trim.local_blocks = local.data();
    trim.num_local_blocks = local.size();
    trim.remote_blocks = remote.data();
    trim.num_remote_blocks = remote.size();
    group.struct_size = sizeof group;
    group.trim = &trim;
    group.regions = regions.empty() ? nullptr : regions.data();
    group.num_regions = regions.size();
  }
};

std::vector<pdkv_plan_group_t> flat(std::vector<Group>& groups) {
  std::vector<pdkv_plan_group_t> out;
  for (auto& g : groups) {
    g.bind();
    out.push_back(g.group);
  }
  return out;
}

PlanPtr compile(const pdkv_plan_context_t* ctx, std::vector<Group>& groups) {
  auto flat_groups = flat(groups);
  pdkv_transfer_plan_t* plan = nullptr;
  REQUIRE_OK(pdkv_transfer_plan_compile(ctx, flat_groups.data(), flat_groups.size(), &plan, err));
  return PlanPtr(plan);
}

CallResult compile_status(const pdkv_plan_context_t* ctx, std::vector<Group>& groups) {
  auto flat_groups = flat(groups);
  return capture([&](pdkv_error_t** e) {
    pdkv_transfer_plan_t* plan = nullptr;
    const pdkv_status_t st = pdkv_transfer_plan_compile(ctx, flat_groups.data(), flat_groups.size(), &plan, e);
    if (st != PDKV_OK) REQUIRE(plan == nullptr);
    pdkv_transfer_plan_free(plan);
    return st;
  });
}

std::vector<pdkv_plan_read_t> reads_of(const pdkv_transfer_plan_t* plan, uint32_t p_tp_rank, uint64_t* bytes = nullptr) {
  const pdkv_plan_read_t* reads = nullptr;
  size_t n = 0;
  REQUIRE_OK(pdkv_transfer_plan_rank_reads(plan, p_tp_rank, &reads, &n, bytes, err));
  return n == 0 ? std::vector<pdkv_plan_read_t>{} : std::vector<pdkv_plan_read_t>(reads, reads + n);
}

bool same(const pdkv_plan_read_t& r, uint32_t lr, uint64_t lo, uint32_t rr, uint64_t ro, uint64_t len) {
  return r.local_region == lr && r.local_offset == lo && r.remote_region == rr && r.remote_offset == ro &&
         r.length == len;
}

}  // namespace

TEST_CASE("engine metadata from a model: Nemotron-3-Nano D TP2 worked numbers", "[capi][metadata]") {
  const ModelPtr m = make_model(nemotron3_nano_desc());
  const MetadataPtr d = metadata(m.get(), 2, 1, "decode-0", 1ull << 40);
  const auto i = info_of(d.get());
  CHECK(std::string(i.engine_id) == "decode-0");
  CHECK(i.tp_size == 2);
  CHECK(i.tp_rank == 1);
  CHECK(i.kv_layout == PDKV_KV_LAYOUT_HND);
  CHECK(i.conv_layout == PDKV_CONV_LAYOUT_DS);
  CHECK(i.logical_block_size == 2096);
  CHECK(i.kernel_block_size == 2096);
  CHECK(i.physical_blocks_per_logical == 1);
  CHECK(i.num_kernel_blocks == 64);
  CHECK(i.num_regions == 6);
  CHECK(i.mamba_type == PDKV_MAMBA_MAMBA2);
  CHECK(i.conv_bytes == 18432);
  CHECK(i.ssm_bytes == 1048576);
  CHECK(i.num_conv_projections == 3);
  CHECK(i.attention_bytes_per_token == 512);
  CHECK(i.use_mla == 0);
  CHECK(i.total_kv_heads == 2);
  CHECK(i.prefix_caching == 0);
  CHECK(i.cache_mode == PDKV_MAMBA_CACHE_NONE);
  uint64_t fp = 0;
  REQUIRE_OK(pdkv_model_fingerprint(m.get(), &fp, err));
  CHECK(i.model_fingerprint == fp);
  CHECK(fp != 0);

  const pdkv_metadata_region_t* regions = nullptr;
  size_t n = 0;
  REQUIRE_OK(pdkv_engine_metadata_regions(d.get(), &regions, &n, err));
  REQUIRE(n == 6);
  CHECK(regions[0].base == (1ull << 40));
  CHECK(regions[0].block_len == kLd);
  CHECK(regions[0].num_blocks == 64);
  CHECK(regions[0].kind == PDKV_REGION_MAMBA);
  CHECK(regions[5].layer == 5);
  CHECK(regions[1].base == (1ull << 40) + 64 * kLd);
  const uint64_t* proj = nullptr;
  REQUIRE_OK(pdkv_engine_metadata_conv_projection_bytes(d.get(), &proj, &n, err));
  REQUIRE(n == 3);
  CHECK(proj[0] == 12288);
  CHECK(proj[1] == 3072);
  CHECK(proj[2] == 3072);

  SECTION("an info struct below its 2.0 size is refused") {
    pdkv_engine_metadata_info_t small{};
    small.struct_size = offsetof(pdkv_engine_metadata_info_t, pp_size);
    const CallResult r = capture([&](pdkv_error_t** e) { return pdkv_engine_metadata_get_info(d.get(), &small, e); });
    CHECK(r.status == PDKV_ERR_STRUCT_SIZE);
    CHECK_THAT(r.message, Contains("pdkv_engine_metadata_info_t.struct_size = " +
                                   std::to_string(offsetof(pdkv_engine_metadata_info_t, pp_size))));
  }
  SECTION("fingerprints ignore names but not geometry") {
    pdkv_model_desc_t other = nemotron3_nano_desc();
    other.name = "renamed";
    const ModelPtr renamed = make_model(other);
    uint64_t fp2 = 0;
    REQUIRE_OK(pdkv_model_fingerprint(renamed.get(), &fp2, err));
    CHECK(fp2 == fp);
    other.num_kv_heads = 4;
    const ModelPtr changed = make_model(other);
    REQUIRE_OK(pdkv_model_fingerprint(changed.get(), &fp2, err));
    CHECK(fp2 != fp);
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_model_fingerprint(nullptr, &fp2, e); }).status ==
          PDKV_ERR_NULL_POINTER);
  }
  SECTION("explicit region bases, layout and prefix caching") {
    const pdkv_engine_config_t c = engine(2);
    pdkv_engine_layout_t l;
    REQUIRE_OK(pdkv_engine_layout_init(&l, err));
    CHECK(l.struct_size == sizeof l);
    CHECK(std::string(l.engine_id) == "engine");
    CHECK(l.num_logical_blocks == 64);
    CHECK(l.field_mask == 0);  // prefix caching derived
    const uint64_t bases[2] = {5ull << 40, 3ull << 40};
    l.num_regions = 2;
    l.region_bases = bases;
    l.kv_layout = PDKV_KV_LAYOUT_NHD;
    l.field_mask |= PDKV_LAYOUT_FIELD_PREFIX_CACHING;
    l.prefix_caching = 1;
    pdkv_engine_metadata_t* md = nullptr;
    REQUIRE_OK(pdkv_engine_metadata_from_model(m.get(), &c, &l, &md, err));
    MetadataPtr owner(md);
    REQUIRE_OK(pdkv_engine_metadata_regions(md, &regions, &n, err));
    REQUIRE(n == 2);
    CHECK(regions[0].base == (5ull << 40));
    CHECK(regions[1].base == (3ull << 40));
    const auto j = info_of(md);
    CHECK(j.kv_layout == PDKV_KV_LAYOUT_NHD);
    CHECK(j.prefix_caching == 1);
  }
  SECTION("errors") {
    const pdkv_engine_config_t c = engine(2);
    pdkv_engine_layout_t l;
    REQUIRE_OK(pdkv_engine_layout_init(&l, err));
    pdkv_engine_metadata_t* md = nullptr;
    auto build = [&](const pdkv_engine_layout_t& lay, const pdkv_engine_config_t& cfg) {
      return capture([&](pdkv_error_t** e) {
        const pdkv_status_t st = pdkv_engine_metadata_from_model(m.get(), &cfg, &lay, &md, e);
        if (st != PDKV_OK) REQUIRE(md == nullptr);
        pdkv_engine_metadata_free(md);
        md = nullptr;
        return st;
      });
    };
    pdkv_engine_layout_t bad = l;
    bad.tp_rank = 2;
    auto r = build(bad, c);
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("tp_rank"));
    bad = l;
    bad.engine_id = "";
    CHECK(build(bad, c).status == PDKV_ERR_INVALID_ARGUMENT);
    bad.engine_id = nullptr;
    r = build(bad, c);
    CHECK(r.status == PDKV_ERR_NULL_POINTER);
    CHECK_THAT(r.message, Contains("engine_id"));
    bad = l;
    bad.kv_layout = 2;
    r = build(bad, c);
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("kv_layout = 2"));
    bad = l;
    bad.prefix_caching = 2;
    CHECK(build(bad, c).status == PDKV_OK);  // unset: never read
    bad.field_mask |= PDKV_LAYOUT_FIELD_PREFIX_CACHING;
    r = build(bad, c);
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("prefix_caching = 2"));
    bad = l;
    bad.struct_size = offsetof(pdkv_engine_layout_t, prefix_caching);  // below the 2.0 size
    r = build(bad, c);
    CHECK(r.status == PDKV_ERR_STRUCT_SIZE);
    CHECK_THAT(r.message, Contains("pdkv_engine_layout_t"));
    bad = l;
    bad.num_logical_blocks = UINT64_MAX;
    CHECK(build(bad, c).status == PDKV_ERR_OVERFLOW);
    bad = l;
    bad.base = UINT64_MAX - 10;
    const auto st = build(bad, c).status;
    CHECK((st == PDKV_ERR_OVERFLOW || st == PDKV_ERR_INVALID_ARGUMENT || st == PDKV_ERR_OUT_OF_BOUNDS));
    pdkv_engine_config_t c3 = engine(3);
    CHECK(build(l, c3).status == PDKV_ERR_HEADS_NOT_DIVISIBLE);
    pdkv_engine_config_t cs = c;
    cs.struct_size = 1;
    CHECK(build(l, cs).status == PDKV_ERR_STRUCT_SIZE);
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_engine_metadata_from_model(nullptr, &c, &l, &md, e); })
              .status == PDKV_ERR_NULL_POINTER);
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_engine_metadata_from_model(m.get(), &c, nullptr, &md, e); })
              .status == PDKV_ERR_NULL_POINTER);
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_engine_layout_init(nullptr, e); }).status ==
          PDKV_ERR_NULL_POINTER);
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_engine_metadata_regions(d.get(), nullptr, &n, e); }).status ==
          PDKV_ERR_NULL_POINTER);
    CHECK(capture([&](pdkv_error_t** e) {
            return pdkv_engine_metadata_conv_projection_bytes(nullptr, &proj, &n, e);
          }).status == PDKV_ERR_NULL_POINTER);
  }
}

TEST_CASE("engine metadata: encode, decode and every decode error class", "[capi][metadata]") {
  const ModelPtr m = make_model(nemotron3_nano_desc());
  const MetadataPtr d = metadata(m.get(), 2, 0, "d", 1ull << 40);
  const std::vector<uint8_t> bytes = encoded(d.get());
  REQUIRE(bytes.size() > 16);
  CHECK(std::memcmp(bytes.data(), "PDKV", 4) == 0);
  uint16_t major = 0, minor = 9;
  pdkv_metadata_wire_version(&major, &minor);
  CHECK(major == 1);
  CHECK(minor == 3);  // the newest this library reads and writes
  CHECK(bytes[6] == 0);  // an encoding without mla regions is labelled 1.0
  pdkv_metadata_wire_version(nullptr, nullptr);

  SECTION("caller buffer: size query, too small, exact") {
    size_t need = 0;
    auto r = capture([&](pdkv_error_t** e) { return pdkv_engine_metadata_encode(d.get(), nullptr, 0, &need, e); });
    CHECK(r.status == PDKV_ERR_BUFFER_TOO_SMALL);
    CHECK(need == bytes.size());
    CHECK_THAT(r.message, Contains(std::to_string(bytes.size())));
    std::vector<uint8_t> buf(need - 1);
    r = capture([&](pdkv_error_t** e) { return pdkv_engine_metadata_encode(d.get(), buf.data(), buf.size(), &need, e); });
    CHECK(r.status == PDKV_ERR_BUFFER_TOO_SMALL);
    buf.resize(need + 3);
    size_t len = 0;
    REQUIRE_OK(pdkv_engine_metadata_encode(d.get(), buf.data(), buf.size(), &len, err));
    CHECK(len == bytes.size());
    CHECK(std::vector<uint8_t>(buf.begin(), buf.begin() + len) == bytes);
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_engine_metadata_encode(d.get(), nullptr, 10000, &len, e); })
              .status == PDKV_ERR_NULL_POINTER);
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_engine_metadata_encode(d.get(), buf.data(), 1, nullptr, e); })
              .status == PDKV_ERR_NULL_POINTER);
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_engine_metadata_encode(nullptr, buf.data(), 1, &len, e); })
              .status == PDKV_ERR_NULL_POINTER);
  }
  SECTION("round trip") {
    pdkv_engine_metadata_t* back = nullptr;
    REQUIRE_OK(pdkv_engine_metadata_decode(bytes.data(), bytes.size(), &back, err));
    MetadataPtr owner(back);
    uint8_t eq = 0;
    REQUIRE_OK(pdkv_engine_metadata_equal(d.get(), back, &eq, err));
    CHECK(eq == 1);
    CHECK(encoded(back) == bytes);
    const MetadataPtr other = metadata(m.get(), 2, 1, "d", 1ull << 40);
    REQUIRE_OK(pdkv_engine_metadata_equal(d.get(), other.get(), &eq, err));
    CHECK(eq == 0);
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_engine_metadata_equal(d.get(), nullptr, &eq, e); }).status ==
          PDKV_ERR_NULL_POINTER);
  }
  SECTION("truncated") {
    for (size_t len : {size_t{0}, size_t{2}, size_t{15}, size_t{16}, bytes.size() - 1}) {
      const auto r = decode_status(std::vector<uint8_t>(bytes.begin(), bytes.begin() + len));
      INFO(len << ": " << r.message);
      CHECK(r.status == PDKV_ERR_PARSE);
      CHECK(!r.message.empty());
    }
    CHECK_THAT(decode_status({'P', 'D'}).message, Contains("truncated") && Contains("2 bytes"));
  }
  SECTION("bad checksum") {
    std::vector<uint8_t> b = bytes;
    b[20] ^= 0x01;
    const auto r = decode_status(b);
    CHECK(r.status == PDKV_ERR_CHECKSUM);
    CHECK_THAT(r.message, Contains("checksum mismatch"));
  }
  SECTION("bad magic and version") {
    std::vector<uint8_t> b = bytes;
    b[0] = 'X';
    auto r = decode_status(b);
    CHECK(r.status == PDKV_ERR_PARSE);
    CHECK_THAT(r.message, Contains("magic"));
    b = bytes;
    b[4] = 2;  // major version 2 (little-endian u16)
    r = decode_status(b);
    CHECK(r.status == PDKV_ERR_PARSE);
    CHECK_THAT(r.message, Contains("major version 2"));
  }
  SECTION("a resealed out-of-range field is still rejected") {
    // tp_rank is the u32 after the engine id (u32 length + bytes): set it to 7 of TP 2, reseal.
    std::vector<uint8_t> b = bytes;
    const size_t at = 16 + 4 + 1 + 4;  // header, id length, "d", tp_size
    b[at] = 7;
    uint32_t crc = 0;
    REQUIRE_OK(pdkv_crc32c(b.data() + 16, b.size() - 16, &crc, err));
    for (int k = 0; k < 4; ++k) b[12 + k] = static_cast<uint8_t>(crc >> (8 * k));
    const auto r = decode_status(b);
    CHECK(r.status == PDKV_ERR_PARSE);
    CHECK_THAT(r.message, Contains("tp_rank"));
  }
  SECTION("null pointers") {
    pdkv_engine_metadata_t* md = nullptr;
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_engine_metadata_decode(nullptr, 10, &md, e); }).status ==
          PDKV_ERR_NULL_POINTER);
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_engine_metadata_decode(bytes.data(), 10, nullptr, e); })
              .status == PDKV_ERR_NULL_POINTER);
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_engine_metadata_encode_bytes(d.get(), nullptr, e); }).status ==
          PDKV_ERR_NULL_POINTER);
    const uint8_t* data = nullptr;
    size_t len = 0;
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_bytes_data(nullptr, &data, &len, e); }).status ==
          PDKV_ERR_NULL_POINTER);
    pdkv_bytes_free(nullptr);
    pdkv_engine_metadata_free(nullptr);
  }
}

TEST_CASE("crc32c check values", "[capi][metadata]") {
  const char* s = "123456789";
  uint32_t crc = 0;
  REQUIRE_OK(pdkv_crc32c(reinterpret_cast<const uint8_t*>(s), 9, &crc, err));
  CHECK(crc == 0xE3069283u);
  REQUIRE_OK(pdkv_crc32c(nullptr, 0, &crc, err));
  CHECK(crc == 0u);
  CHECK(capture([&](pdkv_error_t** e) { return pdkv_crc32c(nullptr, 1, &crc, e); }).status == PDKV_ERR_NULL_POINTER);
  CHECK(capture([&](pdkv_error_t** e) { return pdkv_crc32c(reinterpret_cast<const uint8_t*>(s), 9, nullptr, e); })
            .status == PDKV_ERR_NULL_POINTER);
}

TEST_CASE("handshake: reports list every incompatibility, require joins them", "[capi][handshake]") {
  const ModelPtr m = make_model(nemotron3_nano_desc());
  const MetadataPtr d = metadata(m.get(), 2, 0, "d", 1ull << 40);
  const MetadataPtr p = metadata(m.get(), 4, 0, "p", 2ull << 40);
  pdkv_handshake_report_t* rep = nullptr;
  REQUIRE_OK(pdkv_handshake_validate(d.get(), p.get(), &rep, err));
  ReportPtr ok_report(rep);
  size_t n = 99;
  REQUIRE_OK(pdkv_handshake_report_count(rep, &n, err));
  CHECK(n == 0);
  REQUIRE_OK(pdkv_handshake_require_compatible(d.get(), p.get(), err));

  SECTION("NHD layout and a different model: the model is refused, the layout is not") {
    pdkv_model_desc_t other = nemotron3_nano_desc();
    other.mamba_d_state = 64;
    const ModelPtr m2 = make_model(other);
    const MetadataPtr bad = metadata(m2.get(), 4, 0, "p", 2ull << 40, 6, PDKV_KV_LAYOUT_NHD);
    REQUIRE_OK(pdkv_handshake_validate(d.get(), bad.get(), &rep, err));
    ReportPtr owner(rep);
    REQUIRE_OK(pdkv_handshake_report_count(rep, &n, err));
    REQUIRE(n >= 2);
    bool saw_layout = false, saw_fingerprint = false;
    std::vector<std::string> texts;
    for (size_t i = 0; i < n; ++i) {
      pdkv_incompatibility_t item{};
      item.struct_size = sizeof item;
      REQUIRE_OK(pdkv_handshake_report_item(rep, i, &item, err));
      texts.push_back(item.text);
      CHECK(std::string(item.message).size() > 0);
      CHECK(std::string(item.fix).size() > 0);
      CHECK_THAT(std::string(item.text), Contains(item.field));
      // Different layouts are served (D permutes on receive); one KV head per rank on both sides.
      if (std::string(item.field) == "kv_layout") saw_layout = true;
      if (std::string(item.field) == "model_fingerprint") saw_fingerprint = true;
    }
    CHECK_FALSE(saw_layout);
    CHECK(saw_fingerprint);
    const auto r = capture([&](pdkv_error_t** e) { return pdkv_handshake_require_compatible(d.get(), bad.get(), e); });
    CHECK(r.status == PDKV_ERR_INCOMPATIBLE);
    for (const auto& t : texts) CHECK_THAT(r.message, Contains(t));
    pdkv_incompatibility_t item{};
    item.struct_size = sizeof item;
    auto oob = capture([&](pdkv_error_t** e) { return pdkv_handshake_report_item(rep, n, &item, e); });
    CHECK(oob.status == PDKV_ERR_OUT_OF_BOUNDS);
    CHECK_THAT(oob.message, Contains(std::to_string(n)));
    item.struct_size = sizeof item + 1;
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_handshake_report_item(rep, 0, &item, e); }).status ==
          PDKV_ERR_STRUCT_SIZE);
  }
  SECTION("TP sizes that do not divide are a TP_NOT_DIVISIBLE item") {
    pdkv_model_desc_t tiny{};
    tiny.struct_size = sizeof tiny;
    tiny.name = "tiny";
    tiny.num_kv_heads = 6;
    tiny.head_size = 8;
    tiny.head_size_v = 8;
    tiny.dtype_bytes = 1;
    const ModelPtr m6 = make_model(tiny);
    const MetadataPtr d2 = metadata(m6.get(), 2, 0, "d", 1ull << 40, 1);
    const MetadataPtr p3 = metadata(m6.get(), 3, 0, "p", 2ull << 40, 1);
    REQUIRE_OK(pdkv_handshake_validate(d2.get(), p3.get(), &rep, err));
    ReportPtr owner(rep);
    REQUIRE_OK(pdkv_handshake_report_count(rep, &n, err));
    REQUIRE(n >= 1);
    bool saw = false;
    for (size_t i = 0; i < n; ++i) {
      pdkv_incompatibility_t item{};
      item.struct_size = sizeof item;
      REQUIRE_OK(pdkv_handshake_report_item(rep, i, &item, err));
      if (item.status == PDKV_ERR_TP_NOT_DIVISIBLE) {
        saw = true;
        CHECK(std::string(item.local_value) == "2");
        CHECK(std::string(item.remote_value) == "3");
      }
    }
    CHECK(saw);
    const auto r = capture([&](pdkv_error_t** e) { return pdkv_handshake_require_compatible(d2.get(), p3.get(), e); });
    CHECK(r.status == PDKV_ERR_INCOMPATIBLE);
    CHECK_THAT(r.message, Contains("PDKV_ERR_TP_NOT_DIVISIBLE"));
  }
  SECTION("ranks of one engine must agree") {
    const MetadataPtr p1 = metadata(m.get(), 4, 1, "p", 3ull << 40);
    const MetadataPtr p1dup = metadata(m.get(), 4, 1, "p", 4ull << 40);
    const MetadataPtr other = metadata(m.get(), 2, 1, "q", 5ull << 40);
    const pdkv_engine_metadata_t* good[2] = {p.get(), p1.get()};
    REQUIRE_OK(pdkv_handshake_validate_engine_ranks(good, 2, &rep, err));
    ReportPtr a(rep);
    REQUIRE_OK(pdkv_handshake_report_count(rep, &n, err));
    CHECK(n == 0);
    const pdkv_engine_metadata_t* bad[3] = {p.get(), p1dup.get(), p1.get()};
    REQUIRE_OK(pdkv_handshake_validate_engine_ranks(bad, 3, &rep, err));
    ReportPtr b(rep);
    REQUIRE_OK(pdkv_handshake_report_count(rep, &n, err));
    CHECK(n >= 1);
    const pdkv_engine_metadata_t* mixed[2] = {p.get(), other.get()};
    REQUIRE_OK(pdkv_handshake_validate_engine_ranks(mixed, 2, &rep, err));
    ReportPtr c(rep);
    REQUIRE_OK(pdkv_handshake_report_count(rep, &n, err));
    CHECK(n >= 2);  // engine id and TP size at least
    const pdkv_engine_metadata_t* with_null[2] = {p.get(), nullptr};
    auto r = capture([&](pdkv_error_t** e) { return pdkv_handshake_validate_engine_ranks(with_null, 2, &rep, e); });
    CHECK(r.status == PDKV_ERR_NULL_POINTER);
    CHECK_THAT(r.message, Contains("ranks[1]"));
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_handshake_validate_engine_ranks(nullptr, 2, &rep, e); })
              .status == PDKV_ERR_NULL_POINTER);
  }
  SECTION("null pointers") {
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_handshake_validate(nullptr, p.get(), &rep, e); }).status ==
          PDKV_ERR_NULL_POINTER);
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_handshake_validate(d.get(), p.get(), nullptr, e); }).status ==
          PDKV_ERR_NULL_POINTER);
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_handshake_require_compatible(d.get(), nullptr, e); }).status ==
          PDKV_ERR_NULL_POINTER);
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_handshake_report_count(nullptr, &n, e); }).status ==
          PDKV_ERR_NULL_POINTER);
    pdkv_handshake_report_free(nullptr);
  }
}

TEST_CASE("transfer plan: Nemotron-3-Nano P TP4 -> D TP2, attention token runs per head", "[capi][plan]") {
  const Nano n;
  std::vector<Group> groups = {Group(PDKV_GROUP_ATTENTION, {10, 12}, {20, 25, 22}, 3000)};
  const PlanPtr plan = compile(n.ctx.get(), groups);
  pdkv_transfer_plan_info_t info{};
  info.struct_size = sizeof info;
  REQUIRE_OK(pdkv_transfer_plan_get_info(plan.get(), &info, err));
  CHECK(info.d_tp_rank == 0);
  CHECK(info.d_tp_size == 2);
  CHECK(info.p_tp_size == 4);
  CHECK(info.num_read_ranks == 1);  // P rank 1 holds the same head (GQA twin)
  CHECK(info.num_notify_ranks == 2);
  CHECK(info.notifications_per_p_rank == 1);
  CHECK(info.num_groups == 1);
  CHECK(info.bytes == 6ull * 3000 * 512);
  CHECK(info.attention_bytes == info.bytes);
  CHECK(info.mamba_bytes == 0);
  CHECK(info.empty == 0);
  const uint32_t* ranks = nullptr;
  size_t count = 0;
  REQUIRE_OK(pdkv_transfer_plan_read_ranks(plan.get(), &ranks, &count, err));
  REQUIRE(count == 1);
  CHECK(ranks[0] == 0);
  REQUIRE_OK(pdkv_transfer_plan_notify_ranks(plan.get(), &ranks, &count, err));
  REQUIRE(count == 2);
  CHECK(ranks[0] == 0);
  CHECK(ranks[1] == 1);
  uint64_t bytes = 0;
  const auto reads = reads_of(plan.get(), 0, &bytes);
  CHECK(bytes == info.bytes);
  REQUIRE(reads.size() == 24);
  for (uint32_t r = 0; r < 6; ++r) {
    CHECK(same(reads[4 * r + 0], r, 10 * kLd, r, 20 * kLp, 1056 * 512));
    CHECK(same(reads[4 * r + 1], r, 10 * kLd + 1056 * 512, r, 25 * kLp, 1040 * 512));
    CHECK(same(reads[4 * r + 2], r, 12 * kLd, r, 25 * kLp + 1040 * 512, 16 * 512));
    CHECK(same(reads[4 * r + 3], r, 12 * kLd + 16 * 512, r, 22 * kLp, 888 * 512));
  }
  CHECK(reads_of(plan.get(), 1).empty());
  pdkv_plan_group_zero_t z{};
  z.struct_size = sizeof z;
  REQUIRE_OK(pdkv_transfer_plan_group_zero(plan.get(), 0, &z, err));
  CHECK(z.kind == PDKV_GROUP_ATTENTION);
  CHECK(z.num_regions == 6);
  REQUIRE(z.num_zero == 1);
  CHECK(z.zero[0].block == 12);
  CHECK(z.zero[0].token_begin == 904);
  CHECK(z.zero[0].token_end == 2096);
  CHECK(z.num_unfilled_states == 0);
  auto flat_groups = flat(groups);
  REQUIRE_OK(pdkv_transfer_plan_validate(plan.get(), n.ctx.get(), flat_groups.data(), 1, err));

  SECTION("consecutive ids coalesce to one read per region") {
    std::vector<Group> g2 = {Group(PDKV_GROUP_ATTENTION, {10, 11}, {20, 21, 22}, 3000)};
    const PlanPtr p2 = compile(n.ctx.get(), g2);
    const auto r2 = reads_of(p2.get(), 0);
    REQUIRE(r2.size() == 6);
    CHECK(same(r2[0], 0, 10 * kLd, 0, 20 * kLp, 3000 * 512));
    REQUIRE_OK(pdkv_transfer_plan_get_info(p2.get(), &info, err));
    CHECK(info.pieces_before_coalescing == 24);
    CHECK(info.pieces_after_coalescing == 6);
    // Validating plan 1 against plan 2's groups: the D bytes differ -> Coverage.
    auto fg2 = flat(g2);
    const auto r = capture([&](pdkv_error_t** e) { return pdkv_transfer_plan_validate(plan.get(), n.ctx.get(), fg2.data(), 1, e); });
    CHECK(r.status == PDKV_ERR_COVERAGE);
    CHECK_THAT(r.message, Contains("D region"));
  }
  SECTION("JSON into a caller buffer and as an owned string") {
    size_t len = 0;
    auto r = capture([&](pdkv_error_t** e) { return pdkv_transfer_plan_to_json(plan.get(), nullptr, 0, &len, e); });
    CHECK(r.status == PDKV_ERR_BUFFER_TOO_SMALL);
    CHECK_THAT(r.message, Contains(std::to_string(len + 1)));
    std::vector<char> buf(len);  // one short: no room for the NUL
    r = capture([&](pdkv_error_t** e) { return pdkv_transfer_plan_to_json(plan.get(), buf.data(), buf.size(), &len, e); });
    CHECK(r.status == PDKV_ERR_BUFFER_TOO_SMALL);
    buf.resize(len + 1);
    size_t len2 = 0;
    REQUIRE_OK(pdkv_transfer_plan_to_json(plan.get(), buf.data(), buf.size(), &len2, err));
    CHECK(len2 == len);
    CHECK(buf[len] == '\0');
    pdkv_string_t* s = nullptr;
    REQUIRE_OK(pdkv_transfer_plan_to_json_string(plan.get(), &s, err));
    StringPtr owner(s);
    const char* text = nullptr;
    size_t tlen = 0;
    REQUIRE_OK(pdkv_string_text(s, &text, &tlen, err));
    CHECK(tlen == len);
    CHECK(std::string(text) == std::string(buf.data()));
    CHECK_THAT(std::string(text), Contains("\"p_tp_size\"") && Contains("\"notify_ranks\""));
    REQUIRE_OK(pdkv_string_text(s, &text, nullptr, err));
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_string_text(s, nullptr, &tlen, e); }).status ==
          PDKV_ERR_NULL_POINTER);
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_transfer_plan_to_json(plan.get(), nullptr, 5, &len, e); })
              .status == PDKV_ERR_BUFFER_TOO_SMALL);
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_transfer_plan_to_json(plan.get(), nullptr, 1 << 20, &len, e); })
              .status == PDKV_ERR_NULL_POINTER);
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_transfer_plan_to_json_string(nullptr, &s, e); }).status ==
          PDKV_ERR_NULL_POINTER);
    pdkv_string_free(nullptr);
  }
  SECTION("accessor errors") {
    const pdkv_plan_read_t* rd = nullptr;
    auto r = capture([&](pdkv_error_t** e) { return pdkv_transfer_plan_rank_reads(plan.get(), 4, &rd, &count, nullptr, e); });
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("p_tp_rank 4") && Contains("P TP 4"));
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_transfer_plan_rank_reads(plan.get(), 0, nullptr, &count, nullptr, e); })
              .status == PDKV_ERR_NULL_POINTER);
    r = capture([&](pdkv_error_t** e) { return pdkv_transfer_plan_group_zero(plan.get(), 1, &z, e); });
    CHECK(r.status == PDKV_ERR_OUT_OF_BOUNDS);
    CHECK_THAT(r.message, Contains("index 1") && Contains("count 1"));
    z.struct_size = 3;
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_transfer_plan_group_zero(plan.get(), 0, &z, e); }).status ==
          PDKV_ERR_STRUCT_SIZE);
    info.struct_size = sizeof info + 1;
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_transfer_plan_get_info(plan.get(), &info, e); }).status ==
          PDKV_ERR_STRUCT_SIZE);
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_transfer_plan_get_info(nullptr, &info, e); }).status ==
          PDKV_ERR_NULL_POINTER);
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_transfer_plan_read_ranks(nullptr, &ranks, &count, e); }).status ==
          PDKV_ERR_NULL_POINTER);
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_transfer_plan_notify_ranks(plan.get(), &ranks, nullptr, e); })
              .status == PDKV_ERR_NULL_POINTER);
    pdkv_transfer_plan_free(nullptr);
  }
}

TEST_CASE("transfer plan: Nemotron-3-Nano Mamba groups read both SSM shards", "[capi][plan]") {
  const Nano n;
  // HMA: 6 attention layers -> group size 6; 23 Mamba layers -> 4 groups (6, 6, 6, 5 regions).
  std::vector<Group> groups = {Group(PDKV_GROUP_ATTENTION, {10, 11}, {20, 21, 22}, 3000)};
  for (uint64_t g = 0; g < 4; ++g) {
    groups.emplace_back(PDKV_GROUP_MAMBA, V{40 + g}, V{50 + g}, 3000);
    if (g == 3) groups.back().regions = {0, 1, 2, 3, 4};
  }
  const PlanPtr plan = compile(n.ctx.get(), groups);
  pdkv_transfer_plan_info_t info{};
  info.struct_size = sizeof info;
  REQUIRE_OK(pdkv_transfer_plan_get_info(plan.get(), &info, err));
  CHECK(info.num_read_ranks == 2);
  CHECK(info.num_groups == 5);
  CHECK(info.mamba_bytes == 23ull * (18432 + 1048576));
  CHECK(info.attention_bytes == 6ull * 3000 * 512);
  uint64_t b0 = 0, b1 = 0;
  reads_of(plan.get(), 0, &b0);
  const auto r1 = reads_of(plan.get(), 1, &b1);
  CHECK(b0 + b1 == info.bytes);
  REQUIRE(r1.size() == 23u * 4);
  CHECK(same(r1[0], 0, 40 * kLd + 6144, 0, 50 * kLp, 6144));
  CHECK(same(r1[3], 0, 40 * kLd + 18432 + 524288, 0, 50 * kLp + 9216, 524288));
  pdkv_plan_group_zero_t z{};
  z.struct_size = sizeof z;
  REQUIRE_OK(pdkv_transfer_plan_group_zero(plan.get(), 4, &z, err));
  CHECK(z.kind == PDKV_GROUP_MAMBA);
  CHECK(z.num_regions == 5);
  CHECK(z.regions[4] == 4);

  SECTION("a full hit on every group is an empty plan that still notifies") {
    std::vector<Group> hit = {Group(PDKV_GROUP_ATTENTION, {}, {20}, 1000, 1000),
                              Group(PDKV_GROUP_MAMBA, {40}, {50}, 1000, 1000)};
    const PlanPtr p = compile(n.ctx.get(), hit);
    REQUIRE_OK(pdkv_transfer_plan_get_info(p.get(), &info, err));
    CHECK(info.empty == 1);
    CHECK(info.bytes == 0);
    CHECK(info.num_notify_ranks == 2);
    const uint32_t* ranks = reinterpret_cast<const uint32_t*>(0x1);
    size_t count = 5;
    REQUIRE_OK(pdkv_transfer_plan_read_ranks(p.get(), &ranks, &count, err));
    CHECK(count == 0);
    CHECK(ranks == nullptr);
  }
  SECTION("Mamba groups without geometries are refused") {
    const ContextPtr no_state = n.make_context(false);
    std::vector<Group> g = {Group(PDKV_GROUP_MAMBA, {40}, {50}, 100)};
    const auto r = compile_status(no_state.get(), g);
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("MambaState"));
  }
}

namespace {

std::string json_of(const pdkv_transfer_plan_t* plan) {
  size_t n = 0;
  pdkv_transfer_plan_to_json(plan, nullptr, 0, &n, nullptr);
  std::string text(n + 1, '\0');
  REQUIRE_OK(pdkv_transfer_plan_to_json(plan, text.data(), text.size(), &n, err));
  text.resize(n);
  return text;
}

}  // namespace

TEST_CASE("transfer plan: compile_into recompiles one plan handle request after request", "[capi][plan]") {
  const Nano n;
  auto request = [](uint64_t base, uint64_t tokens, bool short_list = false) {
    std::vector<Group> groups = {
        Group(PDKV_GROUP_ATTENTION, short_list ? V{base} : V{base, base + 1}, {20, 21, 22}, tokens)};
    for (uint64_t g = 0; g < 4; ++g) {
      groups.emplace_back(PDKV_GROUP_MAMBA, V{40 + g}, V{50 + 2 * g}, tokens);
      if (g == 3) groups.back().regions = {0, 1, 2, 3, 4};
    }
    return groups;
  };
  pdkv_transfer_plan_t* raw = nullptr;
  REQUIRE_OK(pdkv_transfer_plan_new(&raw, err));
  const PlanPtr reused(raw);
  pdkv_transfer_plan_info_t info{};
  info.struct_size = sizeof info;
  auto expect_empty = [&] {
    REQUIRE_OK(pdkv_transfer_plan_get_info(reused.get(), &info, err));
    CHECK(info.num_groups == 0);
    CHECK(info.num_read_ranks == 0);
    CHECK(info.empty == 1);
    CHECK(info.bytes == 0);
    CHECK(reads_of(reused.get(), 0).empty());
  };
  expect_empty();
  // Larger, smaller and larger again: stale reads or zero ranges of an earlier request would show.
  for (const auto& [base, tokens] : {std::pair<uint64_t, uint64_t>{10, 3000}, {14, 700}, {30, 3160}, {10, 3000}}) {
    auto groups = request(base, tokens);
    const PlanPtr fresh = compile(n.ctx.get(), groups);
    auto fg = flat(groups);
    REQUIRE_OK(pdkv_transfer_plan_compile_into(n.ctx.get(), fg.data(), fg.size(), reused.get(), err));
    CHECK(json_of(reused.get()) == json_of(fresh.get()));
    const uint32_t *ra = nullptr, *rb = nullptr;
    size_t na = 0, nb = 0;
    REQUIRE_OK(pdkv_transfer_plan_read_ranks(reused.get(), &ra, &na, err));
    REQUIRE_OK(pdkv_transfer_plan_read_ranks(fresh.get(), &rb, &nb, err));
    REQUIRE(na == nb);
    CHECK(std::equal(ra, ra + na, rb));
    for (uint32_t p = 0; p < 4; ++p) {
      const auto a = reads_of(reused.get(), p), b = reads_of(fresh.get(), p);
      REQUIRE(a.size() == b.size());
      for (size_t i = 0; i < a.size(); ++i)
        CHECK(same(a[i], b[i].local_region, b[i].local_offset, b[i].remote_region, b[i].remote_offset, b[i].length));
    }
    pdkv_plan_group_zero_t za{}, zb{};
    za.struct_size = zb.struct_size = sizeof za;
    REQUIRE_OK(pdkv_transfer_plan_group_zero(reused.get(), 0, &za, err));
    REQUIRE_OK(pdkv_transfer_plan_group_zero(fresh.get(), 0, &zb, err));
    REQUIRE(za.num_zero == zb.num_zero);
    for (size_t i = 0; i < za.num_zero; ++i) {
      CHECK(za.zero[i].block == zb.zero[i].block);
      CHECK(za.zero[i].token_begin == zb.zero[i].token_begin);
      CHECK(za.zero[i].token_end == zb.zero[i].token_end);
    }
  }
  // An error leaves an empty plan, with the message compile gives, and the plan stays usable.
  auto bad = request(10, 3000, true);
  const auto want = compile_status(n.ctx.get(), bad);
  REQUIRE(want.status == PDKV_ERR_COVERAGE);
  auto fb = flat(bad);
  const auto got = capture(
      [&](pdkv_error_t** e) { return pdkv_transfer_plan_compile_into(n.ctx.get(), fb.data(), fb.size(), reused.get(), e); });
  CHECK(got.status == want.status);
  CHECK(got.message == want.message);
  expect_empty();
  auto good = request(10, 3000);
  auto fg = flat(good);
  REQUIRE_OK(pdkv_transfer_plan_compile_into(n.ctx.get(), fg.data(), fg.size(), reused.get(), err));
  REQUIRE_OK(pdkv_transfer_plan_get_info(reused.get(), &info, err));
  CHECK(info.num_groups == 5);
  CHECK(info.num_read_ranks == 2);
  CHECK(capture([&](pdkv_error_t** e) {
          return pdkv_transfer_plan_compile_into(n.ctx.get(), fg.data(), fg.size(), nullptr, e);
        }).status == PDKV_ERR_NULL_POINTER);
  CHECK(capture([&](pdkv_error_t** e) {
          return pdkv_transfer_plan_compile_into(nullptr, fg.data(), fg.size(), reused.get(), e);
        }).status == PDKV_ERR_NULL_POINTER);
  CHECK(capture([&](pdkv_error_t** e) { return pdkv_transfer_plan_new(nullptr, e); }).status == PDKV_ERR_NULL_POINTER);
}

TEST_CASE("transfer plan: compile_args is compile_into with its arguments in one struct", "[capi][plan]") {
  const Nano n;
  auto request = [](uint64_t base, uint64_t tokens, bool short_list = false) {
    std::vector<Group> groups = {
        Group(PDKV_GROUP_ATTENTION, short_list ? V{base} : V{base, base + 1}, {20, 21, 22}, tokens)};
    for (uint64_t g = 0; g < 4; ++g) groups.emplace_back(PDKV_GROUP_MAMBA, V{40 + g}, V{50 + 2 * g}, tokens);
    return groups;
  };
  pdkv_transfer_plan_t* raw = nullptr;
  REQUIRE_OK(pdkv_transfer_plan_new(&raw, err));
  const PlanPtr plan(raw);
  pdkv_error_t* slot = nullptr;
  pdkv_compile_args_t args{};
  args.struct_size = sizeof args;
  args.ctx = n.ctx.get();
  args.err = &slot;
  for (const auto& [base, tokens] : {std::pair<uint64_t, uint64_t>{10, 3000}, {14, 700}, {30, 3160}}) {
    auto groups = request(base, tokens);
    const PlanPtr fresh = compile(n.ctx.get(), groups);
    auto fg = flat(groups);
    args.groups = fg.data();
    args.n_groups = fg.size();
    slot = reinterpret_cast<pdkv_error_t*>(&args);  // a stale value: success must clear it
    REQUIRE(pdkv_transfer_plan_compile_args(plan.get(), &args) == PDKV_OK);
    CHECK(slot == nullptr);
    CHECK(json_of(plan.get()) == json_of(fresh.get()));
  }
  // An error goes where args.err points, with the status and message compile_into gives.
  auto bad_groups = request(10, 3000, true);
  auto bad = flat(bad_groups);
  const auto want = capture(
      [&](pdkv_error_t** e) { return pdkv_transfer_plan_compile_into(n.ctx.get(), bad.data(), bad.size(), plan.get(), e); });
  REQUIRE(want.status == PDKV_ERR_COVERAGE);
  args.groups = bad.data();
  args.n_groups = bad.size();
  REQUIRE(pdkv_transfer_plan_compile_args(plan.get(), &args) == PDKV_ERR_COVERAGE);
  REQUIRE(slot != nullptr);
  CHECK(pdkv_error_status(slot) == PDKV_ERR_COVERAGE);
  CHECK(std::string(pdkv_error_message(slot)) == want.message);
  pdkv_error_free(slot);
  slot = nullptr;
  args.err = nullptr;  // no error object wanted: the status alone
  CHECK(pdkv_transfer_plan_compile_args(plan.get(), &args) == PDKV_ERR_COVERAGE);
  args.err = &slot;
  CHECK(pdkv_transfer_plan_compile_args(nullptr, &args) == PDKV_ERR_NULL_POINTER);
  REQUIRE(slot != nullptr);
  CHECK_THAT(pdkv_error_message(slot), Contains("plan"));
  pdkv_error_free(slot);
  slot = nullptr;
  // Without args, or with a struct_size that may not hold `err`, there is nowhere to put an error.
  CHECK(pdkv_transfer_plan_compile_args(plan.get(), nullptr) == PDKV_ERR_NULL_POINTER);
  args.struct_size = offsetof(pdkv_compile_args_t, err);
  CHECK(pdkv_transfer_plan_compile_args(plan.get(), &args) == PDKV_ERR_STRUCT_SIZE);
  CHECK(slot == nullptr);
  args.struct_size = sizeof args + 8;  // a newer caller's struct: refused by name
  CHECK(pdkv_transfer_plan_compile_args(plan.get(), &args) == PDKV_ERR_STRUCT_SIZE);
  REQUIRE(slot != nullptr);
  CHECK_THAT(pdkv_error_message(slot), Contains("pdkv_compile_args_t"));
  pdkv_error_free(slot);
}

TEST_CASE("transfer plan: context and compile errors", "[capi][plan]") {
  const Nano n;
  pdkv_plan_context_t* ctx = nullptr;
  auto remote = n.remote();
  SECTION("context parameters") {
    pdkv_plan_context_params_t c = n.params(remote, true);
    c.struct_size = offsetof(pdkv_plan_context_params_t, mapping);  // below the 2.0 size
    auto r = capture([&](pdkv_error_t** e) { return pdkv_plan_context_new(&c, &ctx, e); });
    CHECK(r.status == PDKV_ERR_STRUCT_SIZE);
    CHECK_THAT(r.message, Contains("pdkv_plan_context_params_t"));
    c.struct_size = sizeof c + 8;
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_plan_context_new(&c, &ctx, e); }).status == PDKV_ERR_STRUCT_SIZE);
    c = n.params(remote, true);
    c.permute_on_receive = 2;
    r = capture([&](pdkv_error_t** e) { return pdkv_plan_context_new(&c, &ctx, e); });
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("permute_on_receive = 2"));
    c = n.params(remote, true);
    c.num_remote = 0;
    r = capture([&](pdkv_error_t** e) { return pdkv_plan_context_new(&c, &ctx, e); });
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("num_remote is 0"));
    c = n.params(remote, true);
    c.remote_geometry = nullptr;
    r = capture([&](pdkv_error_t** e) { return pdkv_plan_context_new(&c, &ctx, e); });
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("only the local geometry"));
    c = n.params(remote, true);
    c.local = nullptr;
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_plan_context_new(&c, &ctx, e); }).status == PDKV_ERR_NULL_POINTER);
    c = n.params(remote, true);
    c.remote = nullptr;
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_plan_context_new(&c, &ctx, e); }).status == PDKV_ERR_NULL_POINTER);
    std::vector<const pdkv_engine_metadata_t*> with_null = remote;
    with_null[2] = nullptr;
    c = n.params(with_null, true);
    r = capture([&](pdkv_error_t** e) { return pdkv_plan_context_new(&c, &ctx, e); });
    CHECK(r.status == PDKV_ERR_NULL_POINTER);
    CHECK_THAT(r.message, Contains("remote[2]"));
    const MetadataPtr tp2 = metadata(n.model.get(), 2, 1, "p", 9ull << 40);
    std::vector<const pdkv_engine_metadata_t*> mixed = remote;
    mixed[1] = tp2.get();
    c = n.params(mixed, true);
    r = capture([&](pdkv_error_t** e) { return pdkv_plan_context_new(&c, &ctx, e); });
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("remote[1].tp_size = 2") && Contains("remote[0].tp_size = 4"));
    // The same P rank twice is refused at context creation (it used to pass and fail only at
    // compile): the same handle listed twice, and two distinct metadata of one rank.
    std::vector<const pdkv_engine_metadata_t*> same_handle = remote;
    same_handle[3] = remote[1];
    c = n.params(same_handle, true);
    r = capture([&](pdkv_error_t** e) { return pdkv_plan_context_new(&c, &ctx, e); });
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("remote[1] and remote[3] are both P rank 1"));
    CHECK(ctx == nullptr);
    const MetadataPtr rank2_again = metadata(n.model.get(), 4, 2, "p", 12ull << 40);
    std::vector<const pdkv_engine_metadata_t*> same_rank = remote;
    same_rank.push_back(rank2_again.get());
    c = n.params(same_rank, true);
    r = capture([&](pdkv_error_t** e) { return pdkv_plan_context_new(&c, &ctx, e); });
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("remote[2] and remote[4] are both P rank 2"));
    CHECK(ctx == nullptr);
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_plan_context_new(nullptr, &ctx, e); }).status ==
          PDKV_ERR_NULL_POINTER);
    c = n.params(remote, true);
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_plan_context_new(&c, nullptr, e); }).status ==
          PDKV_ERR_NULL_POINTER);
  }
  SECTION("non-divisible TP: a tiny one-head model on P TP3 against D TP2") {
    pdkv_model_desc_t d{};
    d.struct_size = sizeof d;
    d.name = "tiny";
    d.num_kv_heads = 6;
    d.head_size = 8;
    d.head_size_v = 8;
    d.dtype_bytes = 1;
    const ModelPtr m = make_model(d);
    const MetadataPtr dm = metadata(m.get(), 2, 0, "d", 1ull << 40, 1);
    const MetadataPtr pm = metadata(m.get(), 3, 0, "p", 2ull << 40, 1);
    const pdkv_engine_metadata_t* rem[1] = {pm.get()};
    pdkv_plan_context_params_t c{};
    c.struct_size = sizeof c;
    c.local = dm.get();
    c.remote = rem;
    c.num_remote = 1;
    const auto r = capture([&](pdkv_error_t** e) { return pdkv_plan_context_new(&c, &ctx, e); });
    CHECK(r.status == PDKV_ERR_TP_NOT_DIVISIBLE);
    CHECK_THAT(r.message, Contains("2") && Contains("3"));
  }
  SECTION("an explicit mapping and the context's mapping") {
    pdkv_tp_mapping_t* mapping = nullptr;
    REQUIRE_OK(pdkv_plan_context_mapping(n.ctx.get(), &mapping, err));
    TpMappingPtr owner(mapping);
    pdkv_tp_mapping_info_t mi{};
    mi.struct_size = sizeof mi;
    REQUIRE_OK(pdkv_tp_mapping_get_info(mapping, &mi, err));
    CHECK(mi.tp_ratio == -2);
    CHECK(mi.num_attention_reads == 1);
    pdkv_plan_context_params_t c = n.params(remote, true);
    c.mapping = mapping;
    REQUIRE_OK(pdkv_plan_context_new(&c, &ctx, err));
    ContextPtr explicit_ctx(ctx);
    std::vector<Group> g = {Group(PDKV_GROUP_ATTENTION, {10, 11}, {20, 21, 22}, 3000)};
    const PlanPtr p = compile(explicit_ctx.get(), g);
    CHECK(reads_of(p.get(), 0).size() == 6);
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_plan_context_mapping(nullptr, &mapping, e); }).status ==
          PDKV_ERR_NULL_POINTER);
    pdkv_plan_context_free(nullptr);
  }
  SECTION("compile errors") {
    // Coverage from trimming: D holds blocks for 2096 tokens but P computed 3000.
    std::vector<Group> g = {Group(PDKV_GROUP_ATTENTION, {10}, {20, 21, 22}, 3000)};
    auto r = compile_status(n.ctx.get(), g);
    CHECK(r.status == PDKV_ERR_COVERAGE);
    CHECK_THAT(r.message, Contains("group 0 (attention)"));
    // Two groups writing the same block.
    g = {Group(PDKV_GROUP_ATTENTION, {3}, {7}, 100), Group(PDKV_GROUP_ATTENTION, {3}, {8}, 100)};
    CHECK(compile_status(n.ctx.get(), g).status == PDKV_ERR_COVERAGE);
    // A block outside the registered region.
    g = {Group(PDKV_GROUP_ATTENTION, {64}, {7}, 100)};
    r = compile_status(n.ctx.get(), g);
    CHECK(r.status == PDKV_ERR_OUT_OF_BOUNDS);
    CHECK_THAT(r.message, Contains("D region 0"));
    // Region index out of range.
    g = {Group(PDKV_GROUP_ATTENTION, {1}, {1}, 100)};
    g[0].regions = {6};
    r = compile_status(n.ctx.get(), g);
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("region index 6 is out of range"));
    // Tokens per block disagreeing with the metadata.
    g = {Group(PDKV_GROUP_ATTENTION, {1}, {1}, 100)};
    g[0].trim.field_mask |= PDKV_TRIM_FIELD_TOKENS_PER_BLOCK;
    g[0].trim.local_tokens_per_block = 16;
    g[0].trim.remote_tokens_per_block = 2096;
    r = compile_status(n.ctx.get(), g);
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("16 disagrees with the metadata's 2096"));
    // Overflow-sized token counts.
    g = {Group(PDKV_GROUP_ATTENTION, {1}, {1}, UINT64_MAX)};
    const auto st = compile_status(n.ctx.get(), g).status;
    CHECK((st == PDKV_ERR_OVERFLOW || st == PDKV_ERR_COVERAGE));
    // A P rank the plan reads from without metadata.
    std::vector<const pdkv_engine_metadata_t*> missing = {remote[0], remote[2], remote[3]};
    pdkv_plan_context_params_t c = n.params(missing, true);
    REQUIRE_OK(pdkv_plan_context_new(&c, &ctx, err));
    ContextPtr missing_ctx(ctx);
    g = {Group(PDKV_GROUP_MAMBA, {40}, {50}, 100)};
    r = compile_status(missing_ctx.get(), g);
    CHECK(r.status == PDKV_ERR_NOT_FOUND);
    CHECK_THAT(r.message, Contains("P rank 1"));
    // Struct sizes and pointers.
    g = {Group(PDKV_GROUP_ATTENTION, {1}, {1}, 100)};
    g[0].trim.struct_size = 8;
    r = compile_status(n.ctx.get(), g);
    CHECK(r.status == PDKV_ERR_STRUCT_SIZE);
    CHECK_THAT(r.message, Contains("pdkv_group_trim_input_t"));
    auto fg = flat(g);
    g[0].trim.struct_size = sizeof(pdkv_group_trim_input_t);
    fg = flat(g);
    fg[0].struct_size = sizeof(pdkv_plan_group_t) + 8;
    pdkv_transfer_plan_t* plan = nullptr;
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_transfer_plan_compile(n.ctx.get(), fg.data(), 1, &plan, e); })
              .status == PDKV_ERR_STRUCT_SIZE);
    std::vector<Group> two = {Group(PDKV_GROUP_ATTENTION, {1}, {1}, 100), Group(PDKV_GROUP_MAMBA, {40}, {50}, 100)};
    fg = flat(two);
    fg[1].struct_size = 8;
    r = capture([&](pdkv_error_t** e) { return pdkv_transfer_plan_compile(n.ctx.get(), fg.data(), 2, &plan, e); });
    CHECK(r.status == PDKV_ERR_STRUCT_SIZE);
    CHECK_THAT(r.message, Contains("groups[1].struct_size = 8"));
    fg = flat(two);
    fg[1].trim = nullptr;
    r = capture([&](pdkv_error_t** e) { return pdkv_transfer_plan_compile(n.ctx.get(), fg.data(), 2, &plan, e); });
    CHECK(r.status == PDKV_ERR_NULL_POINTER);
    CHECK_THAT(r.message, Contains("groups[1].trim"));
    fg = flat(two);
    fg[0].regions = nullptr;
    fg[0].num_regions = 2;
    r = capture([&](pdkv_error_t** e) { return pdkv_transfer_plan_compile(n.ctx.get(), fg.data(), 2, &plan, e); });
    CHECK(r.status == PDKV_ERR_NULL_POINTER);
    CHECK_THAT(r.message, Contains("groups[0].regions"));
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_transfer_plan_compile(n.ctx.get(), nullptr, 1, &plan, e); })
              .status == PDKV_ERR_NULL_POINTER);
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_transfer_plan_compile(nullptr, fg.data(), 1, &plan, e); })
              .status == PDKV_ERR_NULL_POINTER);
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_transfer_plan_compile(n.ctx.get(), fg.data(), 1, nullptr, e); })
              .status == PDKV_ERR_NULL_POINTER);
    // No groups: an empty plan.
    REQUIRE_OK(pdkv_transfer_plan_compile(n.ctx.get(), nullptr, 0, &plan, err));
    PlanPtr empty(plan);
    pdkv_transfer_plan_info_t info{};
    info.struct_size = sizeof info;
    REQUIRE_OK(pdkv_transfer_plan_get_info(plan, &info, err));
    CHECK(info.empty == 1);
    CHECK(info.num_groups == 0);
    CHECK(capture([&](pdkv_error_t** e) { return pdkv_transfer_plan_validate(nullptr, n.ctx.get(), nullptr, 0, e); })
              .status == PDKV_ERR_NULL_POINTER);
  }
}

TEST_CASE("mixed MLA model: region kinds, geometry, handshake and a plan through the C API", "[capi][plan][mla]") {
  // 4 GQA heads of 8+8 bf16 elements (32 B per head per token) and MLA-typed layers with a
  // 24-element latent (48 B per token at every TP); layers GQA, MLA; block size 16.
  pdkv_model_desc_t desc{};
  desc.struct_size = sizeof desc;
  desc.name = "mixed-gqa-mla";
  desc.num_kv_heads = 4;
  desc.head_size = 8;
  desc.head_size_v = 8;
  desc.dtype_bytes = 2;
  desc.layer_pattern = "*L";
  desc.mla_head_size = 24;
  const ModelPtr m = make_model(desc);
  pdkv_model_desc_t back{};
  back.struct_size = sizeof back;
  REQUIRE_OK(pdkv_model_describe(m.get(), &back, err));
  CHECK(back.mla_head_size == 24);

  pdkv_engine_config_t c2 = engine(2), c4 = engine(4);
  c2.user_block_size = c4.user_block_size = 16;
  c2.field_mask |= PDKV_CONFIG_FIELD_BLOCK_SIZE;
  c4.field_mask |= PDKV_CONFIG_FIELD_BLOCK_SIZE;
  const GeometryPtr g2 = make_geometry(m.get(), c2);
  const pdkv_geometry_info_t gi = info_of(g2.get());
  CHECK(gi.attn_bytes_per_token == 64);
  CHECK(gi.mla_bytes_per_token == 48);
  CHECK(gi.mla_kernel_page_bytes == 16 * 48);

  auto build = [&](const pdkv_engine_config_t& c, uint32_t rank, const char* id, uint64_t base,
                   const int32_t* kinds) {
    pdkv_engine_layout_t l;
    REQUIRE_OK(pdkv_engine_layout_init(&l, err));
    CHECK(l.region_kinds == nullptr);
    l.engine_id = id;
    l.tp_rank = rank;
    l.num_logical_blocks = 8;
    l.num_regions = 2;
    l.base = base;
    l.region_kinds = kinds;
    pdkv_engine_metadata_t* md = nullptr;
    REQUIRE_OK(pdkv_engine_metadata_from_model(m.get(), &c, &l, &md, err));
    return MetadataPtr(md);
  };
  const MetadataPtr d = build(c2, 1, "d", 1ull << 40, nullptr);
  const pdkv_metadata_region_t* regions = nullptr;
  size_t count = 0;
  REQUIRE_OK(pdkv_engine_metadata_regions(d.get(), &regions, &count, err));
  REQUIRE(count == 2);
  CHECK(regions[0].kind == PDKV_REGION_ATTENTION);
  CHECK(regions[0].block_len == 16 * 64);
  CHECK(regions[1].kind == PDKV_REGION_MLA);
  CHECK(regions[1].block_len == 16 * 48);
  CHECK(encoded(d.get())[6] == 1);  // labelled 1.1: an mla region

  const int32_t bad_kind[2] = {PDKV_REGION_ATTENTION, 7};
  pdkv_engine_layout_t bl;
  REQUIRE_OK(pdkv_engine_layout_init(&bl, err));
  bl.num_regions = 2;
  bl.region_kinds = bad_kind;
  const auto r = capture([&](pdkv_error_t** e) {
    pdkv_engine_metadata_t* md = nullptr;
    const pdkv_status_t st = pdkv_engine_metadata_from_model(m.get(), &c2, &bl, &md, e);
    pdkv_engine_metadata_free(md);
    return st;
  });
  CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
  CHECK_THAT(r.message, Contains("region_kinds[1] = 7"));

  std::vector<MetadataPtr> p;
  for (uint32_t rank = 0; rank < 4; ++rank) p.push_back(build(c4, rank, "p", (2ull + rank) << 40, nullptr));
  std::vector<const pdkv_engine_metadata_t*> remote;
  for (const auto& x : p) remote.push_back(x.get());
  pdkv_plan_context_params_t cp{};
  cp.struct_size = sizeof cp;
  cp.local = d.get();
  cp.remote = remote.data();
  cp.num_remote = remote.size();
  pdkv_plan_context_t* raw = nullptr;
  REQUIRE_OK(pdkv_plan_context_new(&cp, &raw, err));
  const ContextPtr ctx(raw);
  // D rank 1 <- P TP4: GQA heads 2 and 3 from P ranks 2 and 3 (whole 512-byte P blocks at their
  // head slots of D's 1024-byte block), the MLA latent once, from P rank 2.
  std::vector<Group> groups = {Group(PDKV_GROUP_ATTENTION, {3}, {5}, 16)};
  const PlanPtr plan = compile(ctx.get(), groups);
  const auto r2 = reads_of(plan.get(), 2);
  REQUIRE(r2.size() == 2);
  CHECK(same(r2[0], 0, 3 * 1024, 0, 5 * 512, 512));
  CHECK(same(r2[1], 1, 3 * 768, 1, 5 * 768, 768));
  const auto r3 = reads_of(plan.get(), 3);
  REQUIRE(r3.size() == 1);
  CHECK(same(r3[0], 0, 3 * 1024 + 512, 0, 5 * 512, 512));

  // Explicit region kinds equal to the derived ones give the same metadata: the pair passes.
  const int32_t both_mla[2] = {PDKV_REGION_ATTENTION, PDKV_REGION_MLA};
  const MetadataPtr p_again = build(c4, 0, "p", 2ull << 40, both_mla);
  ReportPtr ok;
  {
    pdkv_handshake_report_t* rep = nullptr;
    REQUIRE_OK(pdkv_handshake_validate(d.get(), p_again.get(), &rep, err));
    ok.reset(rep);
  }
  size_t items = 9;
  REQUIRE_OK(pdkv_handshake_report_count(ok.get(), &items, err));
  CHECK(items == 0);
}

TEST_CASE("element formats: a pair differing only in a format's name is INCOMPATIBLE naming both", "[capi][handshake]") {
  pdkv_model_t* raw = nullptr;
  REQUIRE_OK(pdkv_model_from_preset("qwen3.5-27b", &raw, err));
  const ModelPtr m(raw);
  const auto config = [](uint32_t tp, int32_t kv_format) {
    pdkv_engine_config_t c = engine(tp);
    c.kv_cache_dtype_bytes = 1;
    c.field_mask |= PDKV_CONFIG_FIELD_KV_CACHE_DTYPE;
    if (kv_format != PDKV_FORMAT_UNKNOWN) {
      c.kv_cache_format = kv_format;
      c.field_mask |= PDKV_CONFIG_FIELD_KV_CACHE_FORMAT;
    }
    return c;
  };
  const auto make = [&](const pdkv_engine_config_t& c, const char* id) {
    pdkv_engine_layout_t l;
    REQUIRE_OK(pdkv_engine_layout_init(&l, err));
    l.engine_id = id;
    l.num_regions = 4;
    pdkv_engine_metadata_t* md = nullptr;
    REQUIRE_OK(pdkv_engine_metadata_from_model(m.get(), &c, &l, &md, err));
    return MetadataPtr(md);
  };
  const MetadataPtr p = make(config(1, PDKV_FORMAT_FP8_E4M3), "p");
  const MetadataPtr d = make(config(2, PDKV_FORMAT_FP8_E5M2), "d");
  CHECK(info_of(p.get()).kv_cache_format == PDKV_FORMAT_FP8_E4M3);
  CHECK(info_of(d.get()).kv_cache_format == PDKV_FORMAT_FP8_E5M2);
  CHECK(info_of(d.get()).model_format == PDKV_FORMAT_UNKNOWN);

  // Through the wire: the formats survive encode / decode (format 1.3).
  const std::vector<uint8_t> pb = encoded(p.get());
  CHECK(pb[6] == 3);
  pdkv_engine_metadata_t* decoded = nullptr;
  REQUIRE_OK(pdkv_engine_metadata_decode(pb.data(), pb.size(), &decoded, err));
  const MetadataPtr p_wire(decoded);
  CHECK(info_of(p_wire.get()).kv_cache_format == PDKV_FORMAT_FP8_E4M3);

  const CallResult r =
      capture([&](pdkv_error_t** e) { return pdkv_handshake_require_compatible(d.get(), p_wire.get(), e); });
  CHECK(r.status == PDKV_ERR_INCOMPATIBLE);
  CHECK_THAT(r.message, Contains("kv_cache_format: fp8_e5m2 vs fp8_e4m3") && Contains("--kv-cache-dtype"));
  pdkv_handshake_report_t* rep = nullptr;
  REQUIRE_OK(pdkv_handshake_validate(d.get(), p_wire.get(), &rep, err));
  size_t n = 0;
  REQUIRE_OK(pdkv_handshake_report_count(rep, &n, err));
  REQUIRE(n == 1);
  pdkv_incompatibility_t it{};
  it.struct_size = sizeof it;
  REQUIRE_OK(pdkv_handshake_report_item(rep, 0, &it, err));
  CHECK(it.status == PDKV_ERR_INCOMPATIBLE);
  CHECK(std::string(it.field) == "kv_cache_format");
  CHECK(std::string(it.local_value) == "fp8_e5m2");
  CHECK(std::string(it.remote_value) == "fp8_e4m3");
  pdkv_handshake_report_free(rep);

  // Sizes only (no format named) on one side: unknown, compatible.
  const MetadataPtr d_plain = make(config(2, PDKV_FORMAT_UNKNOWN), "d");
  CHECK(info_of(d_plain.get()).kv_cache_format == PDKV_FORMAT_UNKNOWN);
  REQUIRE_OK(pdkv_handshake_require_compatible(d_plain.get(), p.get(), err));

  // A named format must agree with the sizes it labels, and be a format.
  pdkv_engine_config_t bad = config(1, PDKV_FORMAT_FP8_E5M2);
  bad.field_mask &= ~PDKV_CONFIG_FIELD_KV_CACHE_DTYPE;  // KV bytes back to "auto": the model's bf16
  CallResult b = capture([&](pdkv_error_t** e) {
    pdkv_geometry_t* g = nullptr;
    const pdkv_status_t st = pdkv_geometry_new(m.get(), &bad, &g, e);
    pdkv_geometry_free(g);
    return st;
  });
  CHECK(b.status == PDKV_ERR_INVALID_ARGUMENT);
  CHECK_THAT(b.message, Contains("kv_cache_format = fp8_e5m2 (8 bits)") && Contains("16 bits"));
  bad = config(1, 42);
  b = capture([&](pdkv_error_t** e) {
    pdkv_geometry_t* g = nullptr;
    const pdkv_status_t st = pdkv_geometry_new(m.get(), &bad, &g, e);
    pdkv_geometry_free(g);
    return st;
  });
  CHECK(b.status == PDKV_ERR_INVALID_ARGUMENT);
  CHECK_THAT(b.message, Contains("pdkv_engine_config_t.kv_cache_format = 42"));
  // Its bit set in a struct too old to hold it is STRUCT_SIZE.
  bad = config(1, PDKV_FORMAT_FP8_E5M2);
  bad.struct_size = 104;
  b = capture([&](pdkv_error_t** e) {
    pdkv_geometry_t* g = nullptr;
    const pdkv_status_t st = pdkv_geometry_new(m.get(), &bad, &g, e);
    pdkv_geometry_free(g);
    return st;
  });
  CHECK(b.status == PDKV_ERR_STRUCT_SIZE);
  CHECK_THAT(b.message, Contains("kv_cache_format"));

  // Names.
  int32_t f = -1;
  REQUIRE_OK(pdkv_element_format_from_name("FP8", &f, err));
  CHECK(f == PDKV_FORMAT_FP8_E4M3);
  REQUIRE_OK(pdkv_element_format_from_name("auto", &f, err));
  CHECK(f == PDKV_FORMAT_UNKNOWN);
  CHECK(std::string(pdkv_element_format_name(PDKV_FORMAT_INT8_PER_TOKEN_HEAD)) == "int8_per_token_head");
  CHECK(std::string(pdkv_element_format_name(99)) == "unknown");
  const CallResult nf = capture([&](pdkv_error_t** e) { return pdkv_element_format_from_name("nvfp4", &f, e); });
  CHECK(nf.status == PDKV_ERR_NOT_FOUND);
  CHECK_THAT(nf.message, Contains("nvfp4"));
  CHECK(capture([&](pdkv_error_t** e) { return pdkv_element_format_from_name(nullptr, &f, e); }).status ==
        PDKV_ERR_NULL_POINTER);
}
