// C API tests for the silent wrong-transfer fixes: transfer plans honour the NHD KV layout (one
// contiguous piece per token run, UNSUPPORTED_LAYOUT where NHD would need head subsets, as the
// handshake says), metadata with overlapping regions or implausible sizes is refused on build and
// on decode, and a Mamba state D needs without a local slot is COVERAGE, not an empty trim.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "capi_helpers.hpp"

using Catch::Matchers::Contains;

namespace {

struct MdDeleter { void operator()(pdkv_engine_metadata_t* p) const { pdkv_engine_metadata_free(p); } };
struct CtxDeleter { void operator()(pdkv_plan_context_t* p) const { pdkv_plan_context_free(p); } };
struct PlanDeleter { void operator()(pdkv_transfer_plan_t* p) const { pdkv_transfer_plan_free(p); } };
struct ReportDeleter { void operator()(pdkv_handshake_report_t* p) const { pdkv_handshake_report_free(p); } };
using MdPtr = std::unique_ptr<pdkv_engine_metadata_t, MdDeleter>;
using CtxPtr = std::unique_ptr<pdkv_plan_context_t, CtxDeleter>;
using PlanPtr = std::unique_ptr<pdkv_transfer_plan_t, PlanDeleter>;
using ReportPtr = std::unique_ptr<pdkv_handshake_report_t, ReportDeleter>;

// Pure attention, K=8 KV heads of 128 (+128 for V), bf16: 512 B per head per token.
ModelPtr gqa8() {
  pdkv_model_desc_t d{};
  d.struct_size = sizeof d;
  d.name = "gqa8";
  d.source = "test";
  d.num_kv_heads = 8;
  d.head_size = 128;
  d.head_size_v = 128;
  d.mamba_type = PDKV_MAMBA_NONE;
  d.dtype_bytes = 2;
  return make_model(d);
}

pdkv_engine_layout_t layout(const char* id, uint32_t rank, uint64_t base, int32_t kv_layout,
                            uint32_t regions = 1) {
  pdkv_engine_layout_t l;
  REQUIRE_OK(pdkv_engine_layout_init(&l, err));
  l.engine_id = id;
  l.tp_rank = rank;
  l.base = base;
  l.num_regions = regions;
  l.kv_layout = kv_layout;
  return l;
}

MdPtr metadata(const pdkv_model_t* m, uint32_t tp, const pdkv_engine_layout_t& l) {
  const pdkv_engine_config_t c = engine(tp);
  pdkv_engine_metadata_t* md = nullptr;
  REQUIRE_OK(pdkv_engine_metadata_from_model(m, &c, &l, &md, err));
  return MdPtr(md);
}

// D rank 0 of d_tp_size reading from every rank of a P engine of p_tp_size, both in `kv_layout`.
struct Pair {
  ModelPtr model = gqa8();
  MdPtr d;
  std::vector<MdPtr> p;
  Pair(uint32_t d_tp_size, uint32_t p_tp_size, int32_t kv_layout) {
    d = metadata(model.get(), d_tp_size, layout("d", 0, 1ull << 40, kv_layout));
    for (uint32_t r = 0; r < p_tp_size; ++r)
      p.push_back(metadata(model.get(), p_tp_size, layout("p", r, (2ull + r) << 40, kv_layout)));
  }
  CtxPtr context() const {
    std::vector<const pdkv_engine_metadata_t*> r;
    for (const auto& m : p) r.push_back(m.get());
    pdkv_plan_context_params_t c{};
    c.struct_size = sizeof c;
    c.local = d.get();
    c.remote = r.data();
    c.num_remote = r.size();
    pdkv_plan_context_t* out = nullptr;
    REQUIRE_OK(pdkv_plan_context_new(&c, &out, err));
    return CtxPtr(out);
  }
};

struct AttentionGroup {
  std::vector<uint64_t> local, remote;
  pdkv_group_trim_input_t trim{};
  pdkv_plan_group_t group{};
  AttentionGroup(std::vector<uint64_t> l, std::vector<uint64_t> r, uint64_t computed)
      : local(std::move(l)), remote(std::move(r)) {
    trim.struct_size = sizeof trim;
    trim.kind = PDKV_GROUP_ATTENTION;
    trim.local_blocks = local.data();
    trim.num_local_blocks = local.size();
    trim.remote_blocks = remote.data();
    trim.num_remote_blocks = remote.size();
    trim.remote_computed_tokens = computed;
    group.struct_size = sizeof group;
    group.trim = &trim;
  }
};

std::vector<uint8_t> encoded(const pdkv_engine_metadata_t* md) {
  pdkv_bytes_t* b = nullptr;
  REQUIRE_OK(pdkv_engine_metadata_encode_bytes(md, &b, err));
  const uint8_t* data = nullptr;
  size_t len = 0;
  REQUIRE_OK(pdkv_bytes_data(b, &data, &len, err));
  std::vector<uint8_t> out(data, data + len);
  pdkv_bytes_free(b);
  return out;
}

void put_le64(std::vector<uint8_t>& b, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}

// Recomputes the header CRC so the corruption reaches the field checks.
void reseal(std::vector<uint8_t>& b) {
  uint32_t crc = 0;
  REQUIRE_OK(pdkv_crc32c(b.data() + 16, b.size() - 16, &crc, err));
  for (int i = 0; i < 4; ++i) b[12 + i] = static_cast<uint8_t>(crc >> (8 * i));
}

CallResult decode(const std::vector<uint8_t>& b) {
  return capture([&](pdkv_error_t** e) {
    pdkv_engine_metadata_t* md = nullptr;
    const pdkv_status_t st = pdkv_engine_metadata_decode(b.data(), b.size(), &md, e);
    pdkv_engine_metadata_free(md);
    return st;
  });
}

}  // namespace

TEST_CASE("NHD plans read each token run as one contiguous piece", "[plan][layout]") {
  // TP2 on both sides: 4 heads per rank, 2048 B per token, 16-token blocks of 32768 B.
  const Pair pair(2, 2, PDKV_KV_LAYOUT_NHD);
  const CtxPtr ctx = pair.context();
  AttentionGroup g({5, 3}, {8, 2}, 20);
  pdkv_transfer_plan_t* raw = nullptr;
  REQUIRE_OK(pdkv_transfer_plan_compile(ctx.get(), &g.group, 1, &raw, err));
  const PlanPtr plan(raw);
  const pdkv_plan_read_t* reads = nullptr;
  size_t count = 0;
  uint64_t bytes = 0;
  REQUIRE_OK(pdkv_transfer_plan_rank_reads(plan.get(), 0, &reads, &count, &bytes, err));
  const uint64_t L = 32768, tok = 2048;
  REQUIRE(count == 2);
  CHECK(reads[0].local_offset == 5 * L);
  CHECK(reads[0].remote_offset == 8 * L);
  CHECK(reads[0].length == 16 * tok);
  // The partial block: tokens 16..20 into D block 3 from P block 2, one piece (not 4 per-head
  // pieces at HND offsets).
  CHECK(reads[1].local_offset == 3 * L);
  CHECK(reads[1].remote_offset == 2 * L);
  CHECK(reads[1].length == 4 * tok);
  CHECK(bytes == 20 * tok);
  REQUIRE_OK(pdkv_transfer_plan_validate(plan.get(), ctx.get(), &g.group, 1, err));
}

TEST_CASE("NHD with different heads per rank is UNSUPPORTED_LAYOUT, as in the handshake",
          "[plan][layout]") {
  const Pair pair(2, 4, PDKV_KV_LAYOUT_NHD);  // 4 vs 2 KV heads per rank
  pdkv_handshake_report_t* rep = nullptr;
  REQUIRE_OK(pdkv_handshake_validate(pair.d.get(), pair.p[0].get(), &rep, err));
  const ReportPtr report(rep);
  size_t n = 0;
  REQUIRE_OK(pdkv_handshake_report_count(report.get(), &n, err));
  bool layout_item = false;
  for (size_t i = 0; i < n; ++i) {
    pdkv_incompatibility_t it{};
    it.struct_size = sizeof it;
    REQUIRE_OK(pdkv_handshake_report_item(report.get(), i, &it, err));
    layout_item = layout_item || (std::string(it.field) == "kv_layout" &&
                                  it.status == PDKV_ERR_UNSUPPORTED_LAYOUT);
  }
  CHECK(layout_item);
  const CtxPtr ctx = pair.context();
  AttentionGroup g({5}, {8}, 10);
  const CallResult r = capture([&](pdkv_error_t** e) {
    pdkv_transfer_plan_t* p = nullptr;
    const pdkv_status_t st = pdkv_transfer_plan_compile(ctx.get(), &g.group, 1, &p, e);
    pdkv_transfer_plan_free(p);
    return st;
  });
  CHECK(r.status == PDKV_ERR_UNSUPPORTED_LAYOUT);
  CHECK_THAT(r.message, Contains("NHD") && Contains("use the HND KV cache layout on the prefill engine"));
}

TEST_CASE("Metadata with overlapping regions is refused on build and on decode", "[metadata]") {
  const ModelPtr m = gqa8();
  const pdkv_engine_config_t c = engine(2);
  const uint64_t bases[2] = {1ull << 40, (1ull << 40) + 32768};  // region 1 starts in region 0
  pdkv_engine_layout_t l = layout("p", 0, 1ull << 40, PDKV_KV_LAYOUT_HND, 2);
  l.region_bases = bases;
  const CallResult built = capture([&](pdkv_error_t** e) {
    pdkv_engine_metadata_t* md = nullptr;
    const pdkv_status_t st = pdkv_engine_metadata_from_model(m.get(), &c, &l, &md, e);
    pdkv_engine_metadata_free(md);
    return st;
  });
  CHECK(built.status == PDKV_ERR_INVALID_ARGUMENT);
  CHECK_THAT(built.message, Contains("regions[0] [1099511627776, ") &&
                                Contains("overlaps regions[1] [1099511660544, "));

  // The same overlap arriving over the wire: regions are the payload's last field, 29 B each.
  const MdPtr good = metadata(m.get(), 2, layout("p", 0, 1ull << 40, PDKV_KV_LAYOUT_HND, 2));
  std::vector<uint8_t> b = encoded(good.get());
  put_le64(b, b.size() - 29, (1ull << 40) + 32768);  // regions[1].base
  reseal(b);
  const CallResult decoded = decode(b);
  CHECK(decoded.status == PDKV_ERR_PARSE);
  CHECK_THAT(decoded.message, Contains("regions[0]") && Contains("overlaps regions[1]"));
}

TEST_CASE("Metadata advertising implausible sizes is refused on decode", "[metadata]") {
  const ModelPtr m = gqa8();
  const MdPtr good = metadata(m.get(), 2, layout("p", 0, 1ull << 40, PDKV_KV_LAYOUT_HND));
  std::vector<uint8_t> b = encoded(good.get());
  put_le64(b, b.size() - 29 + 16, 1ull << 40);  // regions[0].num_blocks = 2^40
  reseal(b);
  const CallResult r = decode(b);
  CHECK(r.status == PDKV_ERR_PARSE);
  CHECK_THAT(r.message, Contains("'regions[0].num_blocks' = 1099511627776") &&
                            Contains("plausibility limit 4294967296"));
}

TEST_CASE("A Mamba state D needs without a local slot is COVERAGE", "[trim]") {
  const uint64_t remote[3] = {0, 0, 14};
  for (const int32_t mode : {PDKV_MAMBA_CACHE_NONE, PDKV_MAMBA_CACHE_ALIGN}) {
    pdkv_group_trim_input_t in{};
    in.struct_size = sizeof in;
    in.kind = PDKV_GROUP_MAMBA;
    in.cache_mode = mode;
    in.remote_blocks = remote;
    in.num_remote_blocks = 3;
    in.remote_computed_tokens = 100;
    in.local_hit_tokens = 0;
    const CallResult r = capture([&](pdkv_error_t** e) {
      pdkv_group_trim_t* t = nullptr;
      const pdkv_status_t st = pdkv_group_trim_new(&in, &t, e);
      pdkv_group_trim_free(t);
      return st;
    });
    CHECK(r.status == PDKV_ERR_COVERAGE);
    CHECK_THAT(r.message, Contains("after 100 tokens (it holds 0)"));
    in.local_hit_tokens = 100;  // D holds every token: nothing is needed
    pdkv_group_trim_t* t = nullptr;
    REQUIRE_OK(pdkv_group_trim_new(&in, &t, err));
    pdkv_group_trim_free(t);
  }
}
