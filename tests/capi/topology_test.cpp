// TP topology through the C API: tp_ratio, handshake targets, head ranges, TP mapping handles
// (worked examples of docs/semantics.md §2.2).
#include <vector>

#include "capi_helpers.hpp"

using Catch::Matchers::Contains;

namespace {

std::vector<uint32_t> ranks_of(const pdkv_tp_mapping_t* m, int32_t which) {
  const uint32_t* r = nullptr;
  size_t n = 0;
  REQUIRE_OK(pdkv_tp_mapping_ranks(m, which, &r, &n, err));
  return n == 0 ? std::vector<uint32_t>{} : std::vector<uint32_t>(r, r + n);
}

TpMappingPtr mapping(uint32_t local_tp_size, uint32_t local_tp_rank, uint32_t remote_tp_size, uint32_t k, bool mla, bool mamba) {
  pdkv_tp_mapping_params_t p{};
  p.struct_size = sizeof p;
  p.local_tp_size = local_tp_size;
  p.local_tp_rank = local_tp_rank;
  p.remote_tp_size = remote_tp_size;
  p.total_kv_heads = k;
  p.use_mla = mla ? 1 : 0;
  p.has_mamba = mamba ? 1 : 0;
  pdkv_tp_mapping_t* m = nullptr;
  REQUIRE_OK(pdkv_tp_mapping_new(&p, &m, err));
  return TpMappingPtr(m);
}

pdkv_tp_mapping_info_t info(const pdkv_tp_mapping_t* m) {
  pdkv_tp_mapping_info_t i{};
  i.struct_size = sizeof i;
  REQUIRE_OK(pdkv_tp_mapping_get_info(m, &i, err));
  return i;
}

using V = std::vector<uint32_t>;

}  // namespace

TEST_CASE("tp_ratio sign convention", "[capi][topology]") {
  int32_t r = 0;
  REQUIRE_OK(pdkv_tp_ratio(4, 2, &r, err));
  CHECK(r == 2);
  REQUIRE_OK(pdkv_tp_ratio(2, 4, &r, err));
  CHECK(r == -2);
  REQUIRE_OK(pdkv_tp_ratio(8, 8, &r, err));
  CHECK(r == 1);
  auto res = capture([&](pdkv_error_t** err) { return pdkv_tp_ratio(3, 2, &r, err); });
  CHECK(res.status == PDKV_ERR_TP_NOT_DIVISIBLE);
  CHECK_THAT(res.message, Contains("tp_size 3") && Contains("tp_size 2"));
  res = capture([&](pdkv_error_t** err) { return pdkv_tp_ratio(0, 2, &r, err); });
  CHECK(res.status == PDKV_ERR_INVALID_ARGUMENT);
  res = capture([&](pdkv_error_t** err) { return pdkv_tp_ratio(4, 2, nullptr, err); });
  CHECK(res.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(res.message, Contains("out"));
}

TEST_CASE("handshake targets come back as an owned u32 list", "[capi][topology]") {
  pdkv_u32_list_t* list = nullptr;
  REQUIRE_OK(pdkv_handshake_target_ranks(2, 1, 4, &list, err));
  CHECK(take_u32s(list) == std::vector<uint32_t>{2, 3});
  REQUIRE_OK(pdkv_handshake_target_ranks(4, 3, 2, &list, err));
  CHECK(take_u32s(list) == std::vector<uint32_t>{1});
  REQUIRE_OK(pdkv_handshake_target_ranks(1, 0, 8, &list, err));
  CHECK(take_u32s(list) == std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6, 7});

  // The list accessors refuse NULL and name the argument; free accepts NULL.
  REQUIRE_OK(pdkv_handshake_target_ranks(2, 0, 4, &list, err));
  const uint32_t* items = nullptr;
  size_t n = 0;
  auto r = capture([&](pdkv_error_t** err) { return pdkv_u32_list_items(list, nullptr, &n, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(r.message, Contains("items"));
  r = capture([&](pdkv_error_t** err) { return pdkv_u32_list_items(list, &items, nullptr, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(r.message, Contains("count"));
  r = capture([&](pdkv_error_t** err) { return pdkv_u32_list_items(nullptr, &items, &n, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(r.message, Contains("list"));
  pdkv_u32_list_free(list);
  pdkv_u32_list_free(nullptr);

  list = reinterpret_cast<pdkv_u32_list_t*>(0x1);  // set to NULL on failure
  r = capture([&](pdkv_error_t** err) { return pdkv_handshake_target_ranks(2, 2, 4, &list, err); });
  CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
  CHECK(list == nullptr);
  r = capture([&](pdkv_error_t** err) { return pdkv_handshake_target_ranks(3, 0, 2, &list, err); });
  CHECK(r.status == PDKV_ERR_TP_NOT_DIVISIBLE);
  CHECK_THAT(r.message, Contains("3") && Contains("2"));
  r = capture([&](pdkv_error_t** err) { return pdkv_handshake_target_ranks(2, 0, 4, nullptr, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(r.message, Contains("out"));
}

TEST_CASE("physical head ranges", "[capi][topology]") {
  uint32_t b = 0, e = 0;
  REQUIRE_OK(pdkv_physical_head_range(4, 1, 8, &b, &e, err));
  CHECK(b == 2);
  CHECK(e == 4);
  REQUIRE_OK(pdkv_physical_head_range(8, 5, 2, &b, &e, err));  // replicated: h = 5*2/8
  CHECK(b == 1);
  CHECK(e == 2);
  auto r = capture([&](pdkv_error_t** err) { return pdkv_physical_head_range(3, 0, 8, &b, &e, err); });
  CHECK(r.status == PDKV_ERR_HEADS_NOT_DIVISIBLE);
  CHECK_THAT(r.message, Contains("8") && Contains("3"));
  r = capture([&](pdkv_error_t** err) { return pdkv_physical_head_range(4, 4, 8, &b, &e, err); });
  CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
  r = capture([&](pdkv_error_t** err) { return pdkv_physical_head_range(4, 0, 8, nullptr, &e, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(r.message, Contains("begin"));
  r = capture([&](pdkv_error_t** err) { return pdkv_physical_head_range(4, 0, 8, &b, nullptr, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(r.message, Contains("end"));
}

TEST_CASE("notifications expected per request", "[capi][topology]") {
  uint32_t n = 0;
  REQUIRE_OK(pdkv_notifications_expected_per_request(1, 4, &n, err));
  CHECK(n == 4);
  REQUIRE_OK(pdkv_notifications_expected_per_request(4, 2, &n, err));
  CHECK(n == 1);
  auto r = capture([&](pdkv_error_t** err) { return pdkv_notifications_expected_per_request(3, 2, &n, err); });
  CHECK(r.status == PDKV_ERR_TP_NOT_DIVISIBLE);
  r = capture([&](pdkv_error_t** err) { return pdkv_notifications_expected_per_request(1, 4, nullptr, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
}

TEST_CASE("TP mapping: K=2, D TP1 <- P TP4, hybrid", "[capi][topology][mapping]") {
  TpMappingPtr m = mapping(1, 0, 4, 2, false, true);
  CHECK(ranks_of(m.get(), PDKV_TP_LIST_ATTENTION_SOURCES) == V{0, 2});
  CHECK(ranks_of(m.get(), PDKV_TP_LIST_MAMBA_SOURCES) == V{0, 1, 2, 3});
  CHECK(ranks_of(m.get(), PDKV_TP_LIST_ALL_SOURCES) == V{0, 1, 2, 3});
  CHECK(ranks_of(m.get(), PDKV_TP_LIST_ATTENTION_SLOTS) == V{0, 0, 1, 1});
  CHECK(ranks_of(m.get(), PDKV_TP_LIST_HANDSHAKE_TARGETS) == V{0, 1, 2, 3});
  CHECK(ranks_of(m.get(), PDKV_TP_LIST_NOTIFY_TARGETS) == V{0, 1, 2, 3});
  const pdkv_tp_mapping_info_t i = info(m.get());
  CHECK(i.tp_ratio == -4);
  CHECK(i.rank_offset_factor == 0);
  CHECK(i.local_replicated == 0);
  CHECK(i.remote_replicated == 1);
  CHECK(i.local_physical_heads == 2);
  CHECK(i.remote_physical_heads == 1);
  CHECK(i.num_attention_reads == 2);
  CHECK(i.notifications_expected == 1);
  uint32_t slot = 9;
  REQUIRE_OK(pdkv_tp_mapping_attention_slot(m.get(), 3, &slot, err));
  CHECK(slot == 1);
  auto r = capture([&](pdkv_error_t** err) { return pdkv_tp_mapping_attention_slot(m.get(), 7, &slot, err); });
  CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
  CHECK_THAT(r.message, Contains("7"));
}

TEST_CASE("TP mapping: offset factors and MLA", "[capi][topology][mapping]") {
  // D rank 3 of TP4 <- P TP1, K=2: D replicated, offset factor 1; each P rank expects 4 reads.
  TpMappingPtr a = mapping(4, 3, 1, 2, false, false);
  CHECK(info(a.get()).rank_offset_factor == 1);
  CHECK(info(a.get()).local_replicated == 1);
  CHECK(info(a.get()).notifications_expected == 4);
  CHECK(ranks_of(a.get(), PDKV_TP_LIST_MAMBA_SOURCES).empty());
  // K=8, D rank 3 of TP4 <- P TP2: offset 1.
  TpMappingPtr b = mapping(4, 3, 2, 8, false, false);
  CHECK(info(b.get()).rank_offset_factor == 1);
  CHECK(ranks_of(b.get(), PDKV_TP_LIST_ATTENTION_SOURCES) == V{1});
  // MLA+SSM, D rank 1 of TP2 <- P TP8: attention [4], SSM [4..7].
  TpMappingPtr c = mapping(2, 1, 8, 1, true, true);
  CHECK(ranks_of(c.get(), PDKV_TP_LIST_ATTENTION_SOURCES) == V{4});
  CHECK(ranks_of(c.get(), PDKV_TP_LIST_MAMBA_SOURCES) == V{4, 5, 6, 7});
  CHECK(info(c.get()).num_attention_reads == 1);
}

TEST_CASE("TP mapping error paths", "[capi][topology][mapping][errors]") {
  pdkv_tp_mapping_params_t p{};
  p.struct_size = sizeof p;
  p.local_tp_size = 2;
  p.local_tp_rank = 0;
  p.remote_tp_size = 3;
  p.total_kv_heads = 6;
  pdkv_tp_mapping_t* m = nullptr;
  auto r = capture([&](pdkv_error_t** err) { return pdkv_tp_mapping_new(&p, &m, err); });
  CHECK(r.status == PDKV_ERR_TP_NOT_DIVISIBLE);
  CHECK_THAT(r.message, Contains("2") && Contains("3"));
  CHECK(m == nullptr);
  p.remote_tp_size = 4;
  p.local_tp_rank = 2;
  r = capture([&](pdkv_error_t** err) { return pdkv_tp_mapping_new(&p, &m, err); });
  CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
  p.local_tp_rank = 0;
  p.total_kv_heads = 0;
  r = capture([&](pdkv_error_t** err) { return pdkv_tp_mapping_new(&p, &m, err); });
  CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
  p.total_kv_heads = 6;
  for (size_t bad : {size_t{4}, sizeof p + 1}) {
    p.struct_size = bad;
    r = capture([&](pdkv_error_t** err) { return pdkv_tp_mapping_new(&p, &m, err); });
    CHECK(r.status == PDKV_ERR_STRUCT_SIZE);
    CHECK_THAT(r.message, Contains("pdkv_tp_mapping_params_t") && Contains(std::to_string(bad)));
  }
  r = capture([&](pdkv_error_t** err) { return pdkv_tp_mapping_new(nullptr, &m, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(r.message, Contains("params"));
  p.struct_size = sizeof p;
  r = capture([&](pdkv_error_t** err) { return pdkv_tp_mapping_new(&p, nullptr, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(r.message, Contains("out"));

  TpMappingPtr ok = mapping(2, 0, 4, 2, false, true);
  const uint32_t* ranks = nullptr;
  size_t n = 0;
  r = capture([&](pdkv_error_t** err) { return pdkv_tp_mapping_ranks(ok.get(), 6, &ranks, &n, err); });
  CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
  CHECK_THAT(r.message, Contains("6"));
  r = capture([&](pdkv_error_t** err) { return pdkv_tp_mapping_ranks(nullptr, 0, &ranks, &n, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  r = capture([&](pdkv_error_t** err) { return pdkv_tp_mapping_ranks(ok.get(), 0, nullptr, &n, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  r = capture([&](pdkv_error_t** err) { return pdkv_tp_mapping_ranks(ok.get(), 0, &ranks, nullptr, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  pdkv_tp_mapping_info_t i{};
  i.struct_size = sizeof i + 4;
  r = capture([&](pdkv_error_t** err) { return pdkv_tp_mapping_get_info(ok.get(), &i, err); });
  CHECK(r.status == PDKV_ERR_STRUCT_SIZE);
  i.struct_size = 0;
  r = capture([&](pdkv_error_t** err) { return pdkv_tp_mapping_get_info(ok.get(), &i, err); });
  CHECK(r.status == PDKV_ERR_STRUCT_SIZE);
  r = capture([&](pdkv_error_t** err) { return pdkv_tp_mapping_get_info(nullptr, &i, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  r = capture([&](pdkv_error_t** err) { return pdkv_tp_mapping_get_info(ok.get(), nullptr, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  uint32_t slot = 0;
  r = capture([&](pdkv_error_t** err) { return pdkv_tp_mapping_attention_slot(nullptr, 0, &slot, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  r = capture([&](pdkv_error_t** err) { return pdkv_tp_mapping_attention_slot(ok.get(), 0, nullptr, err); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  pdkv_tp_mapping_free(nullptr);
}

TEST_CASE("TP mapping lists agree with pdkv_handshake_target_ranks for every pair up to TP 16",
          "[capi][topology][mapping][property]") {
  const uint32_t sizes[] = {1, 2, 4, 8, 16};
  for (uint32_t d_tp_size : sizes) {
    for (uint32_t p_tp_size : sizes) {
      for (uint32_t rank = 0; rank < d_tp_size; ++rank) {
        TpMappingPtr m = mapping(d_tp_size, rank, p_tp_size, 16, false, true);
        pdkv_u32_list_t* list = nullptr;
        REQUIRE_OK(pdkv_handshake_target_ranks(d_tp_size, rank, p_tp_size, &list, err));
        const std::vector<uint32_t> targets = take_u32s(list);
        CHECK(ranks_of(m.get(), PDKV_TP_LIST_HANDSHAKE_TARGETS) == V(targets.begin(), targets.end()));
        // Mamba state is sharded: a D rank reads from every handshake target.
        CHECK(ranks_of(m.get(), PDKV_TP_LIST_MAMBA_SOURCES) == V(targets.begin(), targets.end()));
        CHECK(ranks_of(m.get(), PDKV_TP_LIST_ALL_SOURCES).size() ==
              ranks_of(m.get(), PDKV_TP_LIST_ATTENTION_SLOTS).size());
      }
    }
  }
}
