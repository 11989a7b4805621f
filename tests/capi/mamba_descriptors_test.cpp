// Mamba split views, byte-exact read lists and descriptor lists through the C API, for
// Nemotron-3-Nano-30B P TP4 -> D TP2 (P page: x 6144 | B 1536 | C 1536 | ssm 524288; D page:
// x 12288 | B 3072 | C 3072 | ssm 1048576).
#include <string>
#include <vector>

#include "capi_helpers.hpp"

using Catch::Matchers::Contains;

namespace {

struct DescListDeleter { void operator()(pdkv_descriptor_list_t* p) const { pdkv_descriptor_list_free(p); } };
using DescListPtr = std::unique_ptr<pdkv_descriptor_list_t, DescListDeleter>;

std::vector<pdkv_byte_range_t> ranges_local(const pdkv_geometry_t* g) {
  pdkv_byte_range_list_t* l = nullptr;
  REQUIRE_OK(pdkv_mamba_local_conv_offsets(g, &l, err));
  return take_byte_ranges(l);
}

std::vector<pdkv_byte_range_t> ranges_remote(const pdkv_geometry_t* g, uint32_t local_tp_rank, int32_t tp_ratio) {
  pdkv_byte_range_list_t* l = nullptr;
  REQUIRE_OK(pdkv_mamba_remote_conv_offsets(g, local_tp_rank, tp_ratio, &l, err));
  return take_byte_ranges(l);
}

std::vector<pdkv_mamba_read_t> reads_of(const pdkv_mamba_read_list_t* l) {
  const pdkv_mamba_read_t* r = nullptr;
  size_t n = 0;
  REQUIRE_OK(pdkv_mamba_read_list_items(l, &r, &n, err));
  return n == 0 ? std::vector<pdkv_mamba_read_t>{} : std::vector<pdkv_mamba_read_t>(r, r + n);
}

ReadListPtr make_reads(const pdkv_geometry_t* p, const pdkv_geometry_t* d, uint32_t d_tp_rank, int32_t rule) {
  pdkv_mamba_read_list_t* l = nullptr;
  REQUIRE_OK(pdkv_mamba_reads_new(p, d, d_tp_rank, rule, &l, err));
  return ReadListPtr(l);
}

std::vector<pdkv_descriptor_t> items(const pdkv_descriptor_list_t* l) {
  const pdkv_descriptor_t* d = nullptr;
  size_t n = 0;
  REQUIRE_OK(pdkv_descriptor_list_items(l, &d, &n, err));
  return n == 0 ? std::vector<pdkv_descriptor_t>{} : std::vector<pdkv_descriptor_t>(d, d + n);
}

bool same(const pdkv_descriptor_t& d, uint64_t addr, uint64_t len) { return d.addr == addr && d.len == len; }

}  // namespace

TEST_CASE("conv split views: local offsets, vLLM remote offsets, SSM read", "[capi][mamba]") {
  ModelPtr m = make_model(nemotron3_nano_desc());
  GeometryPtr d2 = make_geometry(m.get(), engine(2));
  GeometryPtr d4 = make_geometry(m.get(), engine(4));

  const auto local = ranges_local(d2.get());
  REQUIRE(local.size() == 3);
  CHECK((local[0].offset == 0 && local[0].size == 12288));
  CHECK((local[1].offset == 12288 && local[1].size == 3072));
  CHECK((local[2].offset == 15360 && local[2].size == 3072));

  // D TP2 <- P TP4 (tp_ratio -2): each whole P projection at its cumulative P offset.
  auto buf = ranges_remote(d2.get(), 1, -2);
  REQUIRE(buf.size() == 3);
  CHECK((buf[0].offset == 0 && buf[0].size == 6144));
  CHECK((buf[1].offset == 6144 && buf[1].size == 1536));
  CHECK((buf[2].offset == 7680 && buf[2].size == 1536));
  // D TP4 rank 1 <- P TP2 (tp_ratio 2): the rank's half of each P projection.
  buf = ranges_remote(d4.get(), 1, 2);
  REQUIRE(buf.size() == 3);
  CHECK((buf[0].offset == 6144 && buf[0].size == 6144));
  CHECK((buf[1].offset == 13824 && buf[1].size == 1536));
  CHECK((buf[2].offset == 16896 && buf[2].size == 1536));

  pdkv_byte_range_t ssm{};
  REQUIRE_OK(pdkv_mamba_ssm_read_range(d2.get(), 9216, 524288, 1, -2, &ssm, err));
  CHECK((ssm.offset == 9216 && ssm.size == 524288));
  REQUIRE_OK(pdkv_mamba_ssm_read_range(d4.get(), 18432, 1048576, 1, 2, &ssm, err));
  CHECK((ssm.offset == 18432 + 524288 && ssm.size == 524288));

  pdkv_byte_range_list_t* list = reinterpret_cast<pdkv_byte_range_list_t*>(0x1);  // NULL on failure
  auto r = capture([&](pdkv_error_t** err) { return pdkv_mamba_remote_conv_offsets(d2.get(), 1, 0, &list, err); });
  CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
  CHECK(list == nullptr);
  r = capture([&](pdkv_error_t** err) { return pdkv_mamba_local_conv_offsets(nullptr, &list, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(r.message, Contains("geometry"));
  r = capture([&](pdkv_error_t** err) { return pdkv_mamba_local_conv_offsets(d2.get(), nullptr, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(r.message, Contains("out"));
  r = capture([&](pdkv_error_t** err) { return pdkv_mamba_remote_conv_offsets(nullptr, 0, 1, &list, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  r = capture([&](pdkv_error_t** err) { return pdkv_mamba_remote_conv_offsets(d2.get(), 0, 1, nullptr, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  REQUIRE_OK(pdkv_mamba_local_conv_offsets(d2.get(), &list, err));
  const pdkv_byte_range_t* items = nullptr;
  size_t n = 0;
  r = capture([&](pdkv_error_t** err) { return pdkv_byte_range_list_items(list, nullptr, &n, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  r = capture([&](pdkv_error_t** err) { return pdkv_byte_range_list_items(nullptr, &items, &n, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  pdkv_byte_range_list_free(list);
  pdkv_byte_range_list_free(nullptr);
  r = capture([&](pdkv_error_t** err) { return pdkv_mamba_ssm_read_range(d2.get(), 0, 0, 0, 1, nullptr, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  r = capture([&](pdkv_error_t** err) { return pdkv_mamba_ssm_read_range(nullptr, 0, 0, 0, 1, &ssm, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);

  // A pure-attention geometry has no conv split.
  pdkv_model_desc_t attn = nemotron3_nano_desc();
  attn.mamba_type = PDKV_MAMBA_NONE;
  attn.layer_pattern = "****";
  ModelPtr am = make_model(attn);
  GeometryPtr ag = make_geometry(am.get(), engine(2));
  r = capture([&](pdkv_error_t** err) { return pdkv_mamba_local_conv_offsets(ag.get(), &list, err); });
  CHECK(r.status == PDKV_ERR_UNSUPPORTED_MAMBA_TYPE);
  r = capture([&](pdkv_error_t** err) { return pdkv_mamba_remote_conv_offsets(ag.get(), 0, 1, &list, err); });
  CHECK(r.status == PDKV_ERR_UNSUPPORTED_MAMBA_TYPE);
}

TEST_CASE("physical blocks per logical (vLLM's derived remote ratio)", "[capi][mamba]") {
  uint64_t out = 0;
  REQUIRE_OK(pdkv_physical_blocks_per_logical(36864, 2097152, 8192, &out, err));
  CHECK(out == 261);
  REQUIRE_OK(pdkv_physical_blocks_per_logical(18432, 1048576, 4096, &out, err));
  CHECK(out == 261);
  REQUIRE_OK(pdkv_physical_blocks_per_logical(9216, 524288, 4096, &out, err));
  CHECK(out == 131);
  auto r = capture([&](pdkv_error_t** err) { return pdkv_physical_blocks_per_logical(1, 1, 0, &out, err); });
  CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
  r = capture([&](pdkv_error_t** err) { return pdkv_physical_blocks_per_logical(1, 1, 1, nullptr, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
}

TEST_CASE("byte-exact Mamba reads, P TP4 -> D TP2 rank 1", "[capi][mamba]") {
  ModelPtr m = make_model(nemotron3_nano_desc());
  GeometryPtr p4 = make_geometry(m.get(), engine(4));
  GeometryPtr d2 = make_geometry(m.get(), engine(2));
  ReadListPtr l = make_reads(p4.get(), d2.get(), 1, PDKV_MAMBA_READS_PDKV);
  const auto reads = reads_of(l.get());
  struct E { uint32_t p; const char* part; uint64_t ro, lo, len; };
  const E expected[] = {
      {2, "x", 0, 0, 6144},        {3, "x", 0, 6144, 6144},
      {2, "B", 6144, 12288, 1536}, {3, "B", 6144, 13824, 1536},
      {2, "C", 7680, 15360, 1536}, {3, "C", 7680, 16896, 1536},
      {2, "ssm", 9216, 18432, 524288}, {3, "ssm", 9216, 542720, 524288},
  };
  REQUIRE(reads.size() == 8);
  for (size_t i = 0; i < 8; ++i) {
    INFO("read " << i);
    CHECK(reads[i].p_tp_rank == expected[i].p);
    CHECK(std::string(reads[i].part) == expected[i].part);
    CHECK(reads[i].remote_offset == expected[i].ro);
    CHECK(reads[i].local_offset == expected[i].lo);
    CHECK(reads[i].length == expected[i].len);
  }
  const uint32_t* src = nullptr;
  size_t n = 0;
  REQUIRE_OK(pdkv_mamba_read_list_source_ranks(l.get(), &src, &n, err));
  REQUIRE(n == 2);
  CHECK(src[0] == 2);
  CHECK(src[1] == 3);

  // vLLM agrees here (every group sharded).
  ReadListPtr v = make_reads(p4.get(), d2.get(), 1, PDKV_MAMBA_READS_VLLM);
  const auto vr = reads_of(v.get());
  REQUIRE(vr.size() == reads.size());
  for (size_t i = 0; i < vr.size(); ++i) {
    CHECK(vr[i].remote_offset == reads[i].remote_offset);
    CHECK(vr[i].local_offset == reads[i].local_offset);
    CHECK(vr[i].length == reads[i].length);
  }
}

TEST_CASE("replicated Mamba2 groups (n_groups < TP): pdkv fixes vLLM #55208", "[capi][mamba]") {
  pdkv_model_desc_t d = nemotron3_nano_desc();
  d.mamba_n_groups = 1;
  ModelPtr m = make_model(d);
  GeometryPtr p1 = make_geometry(m.get(), engine(1));
  GeometryPtr d2 = make_geometry(m.get(), engine(2));
  ReadListPtr ours = make_reads(p1.get(), d2.get(), 1, PDKV_MAMBA_READS_PDKV);
  ReadListPtr theirs = make_reads(p1.get(), d2.get(), 1, PDKV_MAMBA_READS_VLLM);
  const auto a = reads_of(ours.get());
  const auto b = reads_of(theirs.get());
  bool differ = a.size() != b.size();
  for (size_t i = 0; !differ && i < a.size(); ++i) differ = a[i].remote_offset != b[i].remote_offset;
  CHECK(differ);
  // pdkv reads B at the P page's B offset (the replicated group), not past it.
  pdkv_conv_projection_t pb{};
  pb.struct_size = sizeof pb;
  REQUIRE_OK(pdkv_geometry_projection(p1.get(), 1, &pb, err));
  bool found_b = false;
  for (const auto& r : a) {
    if (std::string(r.part) == "B") {
      found_b = true;
      CHECK(r.remote_offset == pb.offset);
    }
  }
  CHECK(found_b);
}

TEST_CASE("pdkv reads write every D byte exactly once for all TP pairs up to 16", "[capi][mamba][property]") {
  // Nemotron-3-Nano's 8 groups shard up to TP8; vLLM refuses TP16 (MambaMixer2: a TP that does
  // not divide n_groups needs n_groups 1), and so does pdkv. The one-group variant replicates its
  // group and runs up to TP16 (64 Mamba heads; K=2 limits nothing here).
  ModelPtr grouped = make_model(nemotron3_nano_desc());
  const pdkv_engine_config_t tp16 = engine(16);
  pdkv_geometry_t* refused = nullptr;
  auto r16 = capture([&](pdkv_error_t** err) { return pdkv_geometry_new(grouped.get(), &tp16, &refused, err); });
  CHECK(r16.status == PDKV_ERR_HEADS_NOT_DIVISIBLE);
  CHECK_THAT(r16.message, Contains("n_groups 8"));
  pdkv_model_desc_t one = nemotron3_nano_desc();
  one.mamba_n_groups = 1;
  ModelPtr one_group = make_model(one);
  for (const pdkv_model_t* m : {grouped.get(), one_group.get()}) {
    const uint32_t max_tp = m == grouped.get() ? 8 : 16;
    for (uint32_t p_tp_size = 1; p_tp_size <= max_tp; p_tp_size *= 2) {
      GeometryPtr p = make_geometry(m, engine(p_tp_size));
      const pdkv_geometry_info_t pi = info_of(p.get());
      for (uint32_t d_tp_size = 1; d_tp_size <= max_tp; d_tp_size *= 2) {
        GeometryPtr dg = make_geometry(m, engine(d_tp_size));
        const pdkv_geometry_info_t di = info_of(dg.get());
        for (uint32_t rank = 0; rank < d_tp_size; ++rank) {
          INFO("n_groups " << (m == grouped.get() ? 8 : 1) << " P TP" << p_tp_size << " -> D TP" << d_tp_size
                           << " rank " << rank);
          ReadListPtr l = make_reads(p.get(), dg.get(), rank, PDKV_MAMBA_READS_PDKV);
          std::vector<uint8_t> covered(di.mamba_page_bytes, 0);
          for (const auto& r : reads_of(l.get())) {
            REQUIRE(r.remote_offset + r.length <= pi.mamba_page_bytes);
            REQUIRE(r.local_offset + r.length <= di.mamba_page_bytes);
            for (uint64_t k = 0; k < r.length; ++k) covered[r.local_offset + k]++;
          }
          bool exact = true;
          for (uint8_t c : covered) exact = exact && c == 1;
          CHECK(exact);
        }
      }
    }
  }
}

TEST_CASE("Mamba read list error paths", "[capi][mamba][errors]") {
  ModelPtr m = make_model(nemotron3_nano_desc());
  GeometryPtr p4 = make_geometry(m.get(), engine(4));
  GeometryPtr d2 = make_geometry(m.get(), engine(2));
  pdkv_mamba_read_list_t* l = nullptr;
  auto r = capture([&](pdkv_error_t** err) { return pdkv_mamba_reads_new(p4.get(), d2.get(), 0, 2, &l, err); });
  CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
  CHECK_THAT(r.message, Contains("rule"));
  r = capture([&](pdkv_error_t** err) { return pdkv_mamba_reads_new(p4.get(), d2.get(), 2, 0, &l, err); });
  CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
  r = capture([&](pdkv_error_t** err) { return pdkv_mamba_reads_new(nullptr, d2.get(), 0, 0, &l, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(r.message, Contains("p_geometry"));
  r = capture([&](pdkv_error_t** err) { return pdkv_mamba_reads_new(p4.get(), nullptr, 0, 0, &l, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(r.message, Contains("d_geometry"));
  r = capture([&](pdkv_error_t** err) { return pdkv_mamba_reads_new(p4.get(), d2.get(), 0, 0, nullptr, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  // Geometries of different models cannot be paired.
  pdkv_model_desc_t other = nemotron3_nano_desc();
  other.mamba_d_state = 64;
  ModelPtr om = make_model(other);
  GeometryPtr og = make_geometry(om.get(), engine(2));
  r = capture([&](pdkv_error_t** err) { return pdkv_mamba_reads_new(p4.get(), og.get(), 0, 0, &l, err); });
  CHECK(r.status == PDKV_ERR_INCOMPATIBLE);
  CHECK(l == nullptr);

  ReadListPtr ok = make_reads(p4.get(), d2.get(), 0, PDKV_MAMBA_READS_PDKV);
  const pdkv_mamba_read_t* items = nullptr;
  const uint32_t* ranks = nullptr;
  size_t n = 0;
  r = capture([&](pdkv_error_t** err) { return pdkv_mamba_read_list_items(nullptr, &items, &n, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  r = capture([&](pdkv_error_t** err) { return pdkv_mamba_read_list_items(ok.get(), nullptr, &n, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  r = capture([&](pdkv_error_t** err) { return pdkv_mamba_read_list_items(ok.get(), &items, nullptr, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  r = capture([&](pdkv_error_t** err) { return pdkv_mamba_read_list_source_ranks(nullptr, &ranks, &n, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  r = capture([&](pdkv_error_t** err) { return pdkv_mamba_read_list_source_ranks(ok.get(), nullptr, &n, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  r = capture([&](pdkv_error_t** err) { return pdkv_mamba_read_list_source_ranks(ok.get(), &ranks, nullptr, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  pdkv_mamba_read_list_free(nullptr);
}

TEST_CASE("attention descriptors: local, remote, split", "[capi][descriptors]") {
  const pdkv_region_t local[] = {{1000, 512, 3}, {100000, 512, 3}};
  pdkv_descriptor_list_t* l = nullptr;
  REQUIRE_OK(pdkv_attention_local_descriptors(local, 2, 1, &l, err));
  DescListPtr lp(l);
  auto d = items(l);
  REQUIRE(d.size() == 6);
  CHECK(same(d[0], 1000, 512));
  CHECK(same(d[2], 2024, 512));
  CHECK(same(d[3], 100000, 512));
  REQUIRE_OK(pdkv_attention_local_descriptors(local, 2, 2, &l, err));
  DescListPtr halves(l);
  d = items(l);
  REQUIRE(d.size() == 12);
  CHECK(same(d[1], 1256, 256));

  // K=8, D rank 3 of TP4 (2 heads, L=1024) <- P TP2 (4 heads, 2048): offset factor 1.
  pdkv_tp_mapping_params_t p{sizeof(pdkv_tp_mapping_params_t), 0, 4, 3, 2, 8, 0, 0};
  pdkv_tp_mapping_t* mp = nullptr;
  REQUIRE_OK(pdkv_tp_mapping_new(&p, &mp, err));
  TpMappingPtr mapping(mp);
  const pdkv_region_t d_regions[] = {{0, 1024, 4}};
  const pdkv_region_t p_regions[] = {{1u << 20, 2048, 4}};
  REQUIRE_OK(pdkv_attention_remote_descriptors(d_regions, 1, p_regions, 1, mp, 1, &l, err));
  DescListPtr remote(l);
  d = items(l);
  REQUIRE(d.size() == 4);
  CHECK(same(d[0], (1u << 20) + 1024, 1024));
  CHECK(same(d[3], (1u << 20) + 1024 + 3 * 2048, 1024));
  auto r = capture([&](pdkv_error_t** err) {
    return pdkv_attention_remote_descriptors(d_regions, 1, p_regions, 0, mp, 1, &l, err);
  });
  CHECK(r.status == PDKV_ERR_INCOMPATIBLE);
  const pdkv_region_t wrong_len[] = {{1u << 20, 1024, 4}};
  r = capture([&](pdkv_error_t** err) {
    return pdkv_attention_remote_descriptors(d_regions, 1, wrong_len, 1, mp, 1, &l, err);
  });
  CHECK(r.status == PDKV_ERR_INCOMPATIBLE);
  // Split handles need tp_ratio < 0.
  r = capture([&](pdkv_error_t** err) { return pdkv_attention_split_descriptors(remote.get(), mp, 1, 0, &l, err); });
  CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);

  // K=2, D TP1 (2 heads, L=1024) <- P TP4 hybrid: attention sources [0, 2]; rank 1 is 0's twin.
  pdkv_tp_mapping_params_t q{sizeof(pdkv_tp_mapping_params_t), 0, 1, 0, 4, 2, 0, 1};
  REQUIRE_OK(pdkv_tp_mapping_new(&q, &mp, err));
  TpMappingPtr neg(mp);
  const pdkv_region_t one[] = {{4096, 1024, 2}};
  REQUIRE_OK(pdkv_attention_local_descriptors(one, 1, 1, &l, err));
  DescListPtr fa(l);
  REQUIRE_OK(pdkv_attention_split_descriptors(fa.get(), neg.get(), 1, 2, &l, err));
  DescListPtr split2(l);
  d = items(l);
  REQUIRE(d.size() == 2);
  CHECK(same(d[0], 4096 + 512, 512));
  CHECK(same(d[1], 4096 + 1024 + 512, 512));
  REQUIRE_OK(pdkv_attention_split_descriptors(fa.get(), neg.get(), 1, 1, &l, err));
  DescListPtr split1(l);
  CHECK(same(items(l)[0], 4096, 512));
  r = capture([&](pdkv_error_t** err) { return pdkv_attention_split_descriptors(fa.get(), neg.get(), 1, 9, &l, err); });
  CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
  CHECK_THAT(r.message, Contains("9"));
}

TEST_CASE("Mamba descriptors: local, remote, local split", "[capi][descriptors][mamba]") {
  ModelPtr m = make_model(nemotron3_nano_desc());
  GeometryPtr p4 = make_geometry(m.get(), engine(4));
  GeometryPtr d2 = make_geometry(m.get(), engine(2));
  const uint64_t d_page = info_of(d2.get()).kernel_page_bytes;  // 1073152, ppl 1
  const uint64_t p_page = info_of(p4.get()).kernel_page_bytes;  // 1056 * 512
  CHECK(d_page == 1073152);
  CHECK(p_page == 540672);
  const pdkv_region_t d_regions[] = {{0, d_page, 2}};
  const uint64_t pb = uint64_t{1} << 32;
  const pdkv_region_t p_regions[] = {{pb, p_page, 2}};

  pdkv_descriptor_list_t* l = nullptr;
  REQUIRE_OK(pdkv_mamba_local_descriptors(d_regions, 1, 1, d2.get(), &l, err));
  DescListPtr local(l);
  auto d = items(l);
  REQUIRE(d.size() == 8);  // (3 projections + ssm) x 2 blocks, region-major
  CHECK(same(d[0], 0, 12288));
  CHECK(same(d[1], d_page, 12288));
  CHECK(same(d[2], 12288, 3072));
  CHECK(same(d[7], d_page + 18432, 1048576));

  ReadListPtr reads = make_reads(p4.get(), d2.get(), 1, PDKV_MAMBA_READS_PDKV);
  REQUIRE_OK(pdkv_mamba_remote_descriptors(p_regions, 1, 1, p4.get(), reads.get(), 3, &l, err));
  DescListPtr remote(l);
  d = items(l);
  REQUIRE(d.size() == 8);
  CHECK(same(d[0], pb, 6144));
  CHECK(same(d[1], pb + p_page, 6144));
  CHECK(same(d[6], pb + 9216, 524288));
  REQUIRE_OK(pdkv_mamba_local_split_descriptors(d_regions, 1, 1, d2.get(), reads.get(), 3, &l, err));
  DescListPtr split(l);
  const auto s = items(l);
  REQUIRE(s.size() == d.size());
  CHECK(same(s[0], 6144, 6144));
  CHECK(same(s[6], 542720, 524288));
  for (size_t i = 0; i < s.size(); ++i) CHECK(s[i].len == d[i].len);
  // P rank 0 supplies nothing to D rank 1.
  REQUIRE_OK(pdkv_mamba_remote_descriptors(p_regions, 1, 1, p4.get(), reads.get(), 0, &l, err));
  DescListPtr none(l);
  CHECK(items(l).empty());

  auto r = capture([&](pdkv_error_t** err) { return pdkv_mamba_local_descriptors(d_regions, 1, 0, d2.get(), &l, err); });
  CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
  const pdkv_region_t small[] = {{0, 4096, 2}};
  r = capture([&](pdkv_error_t** err) { return pdkv_mamba_local_descriptors(small, 1, 1, d2.get(), &l, err); });
  CHECK(r.status == PDKV_ERR_OUT_OF_BOUNDS);
  const pdkv_region_t near_top[] = {{UINT64_MAX - d_page, d_page, 2}};
  r = capture([&](pdkv_error_t** err) { return pdkv_mamba_local_descriptors(near_top, 1, 1, d2.get(), &l, err); });
  CHECK(r.status == PDKV_ERR_OVERFLOW);
  r = capture([&](pdkv_error_t** err) { return pdkv_mamba_local_descriptors(nullptr, 1, 1, d2.get(), &l, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(r.message, Contains("regions"));
  r = capture([&](pdkv_error_t** err) { return pdkv_mamba_local_descriptors(d_regions, 1, 1, nullptr, &l, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(r.message, Contains("geometry"));
  r = capture([&](pdkv_error_t** err) { return pdkv_mamba_local_descriptors(d_regions, 1, 1, d2.get(), nullptr, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  r = capture([&](pdkv_error_t** err) {
    return pdkv_mamba_remote_descriptors(p_regions, 1, 1, p4.get(), nullptr, 3, &l, err);
  });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(r.message, Contains("reads"));
  r = capture([&](pdkv_error_t** err) {
    return pdkv_mamba_remote_descriptors(p_regions, 1, 1, nullptr, reads.get(), 3, &l, err);
  });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  r = capture([&](pdkv_error_t** err) {
    return pdkv_mamba_local_split_descriptors(d_regions, 1, 1, nullptr, reads.get(), 3, &l, err);
  });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  r = capture([&](pdkv_error_t** err) {
    return pdkv_mamba_local_split_descriptors(d_regions, 1, 1, d2.get(), nullptr, 3, &l, err);
  });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  const pdkv_descriptor_t* it = nullptr;
  size_t n = 0;
  r = capture([&](pdkv_error_t** err) { return pdkv_descriptor_list_items(nullptr, &it, &n, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  r = capture([&](pdkv_error_t** err) { return pdkv_descriptor_list_items(local.get(), nullptr, &n, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  r = capture([&](pdkv_error_t** err) { return pdkv_descriptor_list_items(local.get(), &it, nullptr, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  r = capture([&](pdkv_error_t** err) { return pdkv_attention_local_descriptors(nullptr, 2, 1, &l, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  r = capture([&](pdkv_error_t** err) { return pdkv_attention_local_descriptors(d_regions, 1, 0, &l, err); });
  CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
  r = capture([&](pdkv_error_t** err) { return pdkv_attention_local_descriptors(d_regions, 1, 1, nullptr, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  pdkv_descriptor_list_free(nullptr);
}
