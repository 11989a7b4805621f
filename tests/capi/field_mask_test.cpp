// C API tests of pdkv.h's growth rule for input structs: field_mask right after struct_size, an
// optional field read only when its PDKV_*_FIELD_* bit is set (an unset one takes its default
// whatever its bytes hold), a set one honoured, unknown bits refused naming the struct and the bits.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "capi_helpers.hpp"

using Catch::Matchers::Contains;

namespace {

struct EngineDeleter { void operator()(pdkv_engine_t* p) const { pdkv_engine_free(p); } };
struct MetadataDeleter { void operator()(pdkv_engine_metadata_t* p) const { pdkv_engine_metadata_free(p); } };
struct ContextDeleter { void operator()(pdkv_plan_context_t* p) const { pdkv_plan_context_free(p); } };
struct PlanDeleter { void operator()(pdkv_transfer_plan_t* p) const { pdkv_transfer_plan_free(p); } };
struct TrimDeleter { void operator()(pdkv_group_trim_t* p) const { pdkv_group_trim_free(p); } };
using EnginePtr = std::unique_ptr<pdkv_engine_t, EngineDeleter>;
using MetadataPtr = std::unique_ptr<pdkv_engine_metadata_t, MetadataDeleter>;
using ContextPtr = std::unique_ptr<pdkv_plan_context_t, ContextDeleter>;
using PlanPtr = std::unique_ptr<pdkv_transfer_plan_t, PlanDeleter>;
using TrimPtr = std::unique_ptr<pdkv_group_trim_t, TrimDeleter>;
using V = std::vector<uint64_t>;

constexpr uint64_t kTopBit = 1ULL << 63;

// `call(mask, err)` makes one call with the struct's field_mask = mask. The known bits pass the
// mask check (what they do after it is the caller's business); the lowest bit above them and the
// top bit are INVALID_ARGUMENT naming `type` and exactly the unknown bits.
template <typename F>
void check_unknown_bits(const std::string& type, uint64_t known, F&& call) {
  INFO(type);
  const unsigned lowest_unknown = known == 0 ? 0 : 64 - static_cast<unsigned>(__builtin_clzll(known));
  const uint64_t unknowns[] = {uint64_t{1} << lowest_unknown, kTopBit};
  for (const uint64_t unknown : unknowns) {
    const CallResult r = capture([&](pdkv_error_t** e) { return call(known | unknown, e); });
    INFO(r.message);
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    char hex[32];
    std::snprintf(hex, sizeof hex, "0x%llx", static_cast<unsigned long long>(unknown));
    CHECK_THAT(r.message, Contains(type + ".field_mask has unknown bits " + hex));
  }
}

pdkv_group_trim_input_t attention_trim(const V& local, const V& remote, uint64_t tokens, uint64_t hit) {
  pdkv_group_trim_input_t in{};
  in.struct_size = sizeof in;
  in.field_mask = PDKV_TRIM_FIELD_TOKENS_PER_BLOCK;
  in.kind = PDKV_GROUP_ATTENTION;
  in.local_blocks = local.data();
  in.num_local_blocks = local.size();
  in.remote_blocks = remote.data();
  in.num_remote_blocks = remote.size();
  in.local_tokens_per_block = 16;
  in.remote_tokens_per_block = 16;
  in.remote_computed_tokens = tokens;
  in.local_hit_tokens = hit;
  return in;
}

CallResult trim_status(const pdkv_group_trim_input_t& in, uint64_t* transferred = nullptr) {
  return capture([&](pdkv_error_t** e) {
    pdkv_group_trim_t* t = nullptr;
    const pdkv_status_t st = pdkv_group_trim_new(&in, &t, e);
    const TrimPtr owner(t);
    if (st == PDKV_OK && transferred != nullptr) {
      REQUIRE(pdkv_group_trim_summary(t, nullptr, transferred, nullptr) == PDKV_OK);
    }
    return st;
  });
}

pdkv_engine_options_t engine_options(const pdkv_model_t* m, const pdkv_engine_config_t* c, const char* id) {
  pdkv_engine_options_t o;
  REQUIRE_OK(pdkv_engine_options_init(&o, err));
  o.model = m;
  o.config = c;
  o.engine_id = id;
  return o;
}

EnginePtr make_engine(const pdkv_engine_options_t& o) {
  pdkv_engine_t* e = nullptr;
  REQUIRE_OK(pdkv_engine_new(&o, &e, err));
  return EnginePtr(e);
}

pdkv_engine_info_t engine_info(const pdkv_engine_t* e) {
  pdkv_engine_info_t i{};
  i.struct_size = sizeof i;
  REQUIRE_OK(pdkv_engine_get_info(e, &i, err));
  return i;
}

pdkv_engine_metadata_info_t metadata_info(const pdkv_engine_metadata_t* md) {
  pdkv_engine_metadata_info_t i{};
  i.struct_size = sizeof i;
  REQUIRE_OK(pdkv_engine_metadata_get_info(md, &i, err));
  return i;
}

}  // namespace

TEST_CASE("field_mask: unknown bits are refused naming the struct and the bits", "[capi][abi][field_mask]") {
  const ModelPtr nano = make_model(nemotron3_nano_desc());
  const pdkv_engine_config_t c1 = engine(1);

  check_unknown_bits("pdkv_model_desc_t", PDKV_MODEL_FIELD_MAMBA_CHUNK_SIZE | PDKV_MODEL_FIELD_DEFAULT_SSM_DTYPE,
                     [&](uint64_t mask, pdkv_error_t** e) {
                       pdkv_model_desc_t d = nemotron3_nano_desc();
                       d.field_mask = mask;
                       pdkv_model_t* m = nullptr;
                       const pdkv_status_t st = pdkv_model_new(&d, &m, e);
                       pdkv_model_free(m);
                       return st;
                     });
  constexpr uint64_t kConfigBits = PDKV_CONFIG_FIELD_KV_CACHE_DTYPE | PDKV_CONFIG_FIELD_CONV_STATE_DTYPE |
                                   PDKV_CONFIG_FIELD_SSM_STATE_DTYPE | PDKV_CONFIG_FIELD_BLOCK_SIZE |
                                   PDKV_CONFIG_FIELD_MAMBA_BLOCK_SIZE | PDKV_CONFIG_FIELD_KV_CACHE_ELEMENT_BITS |
                                   PDKV_CONFIG_FIELD_MODEL_FORMAT | PDKV_CONFIG_FIELD_KV_CACHE_FORMAT |
                                   PDKV_CONFIG_FIELD_CONV_STATE_FORMAT | PDKV_CONFIG_FIELD_SSM_STATE_FORMAT;
  check_unknown_bits("pdkv_engine_config_t", kConfigBits, [&](uint64_t mask, pdkv_error_t** e) {
    pdkv_engine_config_t c = engine(2);
    c.field_mask = mask;
    pdkv_geometry_t* g = nullptr;
    const pdkv_status_t st = pdkv_geometry_new(nano.get(), &c, &g, e);
    pdkv_geometry_free(g);
    return st;
  });
  check_unknown_bits("pdkv_tp_mapping_params_t", 0, [&](uint64_t mask, pdkv_error_t** e) {
    pdkv_tp_mapping_params_t p{};
    p.struct_size = sizeof p;
    p.field_mask = mask;
    p.local_tp_size = p.remote_tp_size = p.total_kv_heads = 2;
    pdkv_tp_mapping_t* m = nullptr;
    const pdkv_status_t st = pdkv_tp_mapping_new(&p, &m, e);
    pdkv_tp_mapping_free(m);
    return st;
  });
  check_unknown_bits("pdkv_exchange_clip_params_t", 0, [&](uint64_t mask, pdkv_error_t** e) {
    pdkv_exchange_clip_params_t p{};
    p.struct_size = sizeof p;
    p.field_mask = mask;
    const uint64_t ids[] = {1, 2};
    pdkv_u64_list_t* out = nullptr;
    const pdkv_status_t st = pdkv_clip_exchange_blocks(ids, 2, &p, &out, e);
    pdkv_u64_list_free(out);
    return st;
  });
  const V local_ids{3, 4}, remote_ids{8, 9};
  check_unknown_bits("pdkv_group_trim_input_t",
                     PDKV_TRIM_FIELD_LOCAL_FIRST_BLOCK | PDKV_TRIM_FIELD_KERNEL_BLOCKS_PER_ID |
                         PDKV_TRIM_FIELD_TOKENS_PER_BLOCK,
                     [&](uint64_t mask, pdkv_error_t** e) {
                       pdkv_group_trim_input_t in = attention_trim(local_ids, remote_ids, 32, 0);
                       in.field_mask = mask;
                       pdkv_group_trim_t* t = nullptr;
                       const pdkv_status_t st = pdkv_group_trim_new(&in, &t, e);
                       pdkv_group_trim_free(t);
                       return st;
                     });
  check_unknown_bits("pdkv_descriptor_layout_t", 0, [&](uint64_t mask, pdkv_error_t** e) {
    pdkv_descriptor_layout_t l{};
    l.struct_size = sizeof l;
    l.field_mask = mask;
    l.num_blocks = 8;
    l.block_size_ratio = l.blocks_per_logical = l.num_attention_regions = 1;
    pdkv_u64_list_t* out = nullptr;
    const pdkv_status_t st = pdkv_descriptor_ids(nullptr, 0, &l, &out, e);
    pdkv_u64_list_free(out);
    return st;
  });
  check_unknown_bits("pdkv_aligned_split_input_t",
                     PDKV_SPLIT_FIELD_FLOOR_UNIT | PDKV_SPLIT_FIELD_TAIL_HASH_BLOCK_SIZE |
                         PDKV_SPLIT_FIELD_MAX_NUM_SCHEDULED_TOKENS | PDKV_SPLIT_FIELD_LONG_PREFILL_TOKEN_THRESHOLD,
                     [&](uint64_t mask, pdkv_error_t** e) {
    pdkv_aligned_split_input_t a{};
    a.struct_size = sizeof a;
    a.field_mask = mask;
    a.num_new_tokens = a.num_prompt_tokens = a.num_tokens = 100;
    a.block_size = 16;
    uint64_t out = 0;
    return pdkv_mamba_aligned_split(&a, &out, e);
  });
  check_unknown_bits("pdkv_aligned_split_v0604_input_t", 0, [&](uint64_t mask, pdkv_error_t** e) {
    pdkv_aligned_split_v0604_input_t a{};
    a.struct_size = sizeof a;
    a.field_mask = mask;
    a.num_new_tokens = a.num_prompt_tokens = a.num_tokens = 100;
    a.block_size = 16;
    uint64_t out = 0;
    return pdkv_mamba_aligned_split_v0604(&a, &out, e);
  });
  check_unknown_bits("pdkv_remote_decode_prefill_t", 0, [&](uint64_t mask, pdkv_error_t** e) {
    pdkv_remote_decode_prefill_t in{};
    in.struct_size = sizeof in;
    in.field_mask = mask;
    in.num_prompt_tokens = 10;
    pdkv_remote_decode_prefill_t out{};
    out.struct_size = sizeof out;
    return pdkv_truncate_for_remote_decode(&in, 1, &out, e);
  });
  check_unknown_bits("pdkv_engine_layout_t",
                     PDKV_LAYOUT_FIELD_PREFIX_CACHING | PDKV_LAYOUT_FIELD_PIPELINE | PDKV_LAYOUT_FIELD_LAYER_END,
                     [&](uint64_t mask, pdkv_error_t** e) {
                       pdkv_engine_layout_t l;
                       REQUIRE_OK(pdkv_engine_layout_init(&l, err));
                       l.field_mask = mask;
                       pdkv_engine_metadata_t* md = nullptr;
                       const pdkv_status_t st = pdkv_engine_metadata_from_model(nano.get(), &c1, &l, &md, e);
                       pdkv_engine_metadata_free(md);
                       return st;
                     });
  check_unknown_bits("pdkv_engine_options_t", PDKV_ENGINE_FIELD_PREFIX_CACHING, [&](uint64_t mask, pdkv_error_t** e) {
    pdkv_engine_options_t o = engine_options(nano.get(), &c1, "d");
    o.field_mask = mask;
    pdkv_engine_t* x = nullptr;
    const pdkv_status_t st = pdkv_engine_new(&o, &x, e);
    pdkv_engine_free(x);
    return st;
  });

  // The structs that need engines around them.
  const EnginePtr d = make_engine(engine_options(nano.get(), &c1, "decode"));
  const EnginePtr p = make_engine(engine_options(nano.get(), &c1, "prefill"));
  pdkv_engine_metadata_t* raw = nullptr;
  REQUIRE_OK(pdkv_engine_get_metadata(d.get(), &raw, err));
  const MetadataPtr d_md(raw);
  REQUIRE_OK(pdkv_engine_get_metadata(p.get(), &raw, err));
  const MetadataPtr p_md(raw);
  const pdkv_engine_metadata_t* remote[] = {p_md.get()};
  check_unknown_bits("pdkv_engine_peer_t", 0, [&](uint64_t mask, pdkv_error_t** e) {
    pdkv_engine_peer_t peer{};
    peer.struct_size = sizeof peer;
    peer.field_mask = mask;
    peer.remote = remote;
    peer.num_remote = 1;
    peer.remote_config = &c1;
    pdkv_plan_context_t* ctx = nullptr;
    const pdkv_status_t st = pdkv_engine_plan_context_new(d.get(), &peer, &ctx, e);
    pdkv_plan_context_free(ctx);
    return st;
  });
  check_unknown_bits("pdkv_plan_context_params_t", 0, [&](uint64_t mask, pdkv_error_t** e) {
    pdkv_plan_context_params_t params{};
    params.struct_size = sizeof params;
    params.field_mask = mask;
    params.local = d_md.get();
    params.remote = remote;
    params.num_remote = 1;
    pdkv_plan_context_t* ctx = nullptr;
    const pdkv_status_t st = pdkv_plan_context_new(&params, &ctx, e);
    pdkv_plan_context_free(ctx);
    return st;
  });
  pdkv_engine_peer_t peer{};
  peer.struct_size = sizeof peer;
  peer.remote = remote;
  peer.num_remote = 1;
  peer.remote_config = &c1;
  pdkv_plan_context_t* ctx_raw = nullptr;
  REQUIRE_OK(pdkv_engine_plan_context_new(d.get(), &peer, &ctx_raw, err));
  const ContextPtr ctx(ctx_raw);
  check_unknown_bits("pdkv_engine_request_t", 0, [&](uint64_t mask, pdkv_error_t** e) {
    pdkv_engine_request_t r{};
    r.struct_size = sizeof r;
    r.field_mask = mask;
    pdkv_transfer_plan_t* plan = nullptr;
    const pdkv_status_t st = pdkv_engine_plan_request(d.get(), ctx.get(), &r, &plan, e);
    pdkv_transfer_plan_free(plan);
    return st;
  });
  check_unknown_bits("groups[0] (pdkv_plan_group_t)", 0, [&](uint64_t mask, pdkv_error_t** e) {
    pdkv_group_trim_input_t trim = attention_trim(local_ids, remote_ids, 32, 0);
    trim.field_mask = 0;  // tokens per block from the metadata
    pdkv_plan_group_t g{};
    g.struct_size = sizeof g;
    g.field_mask = mask;
    g.trim = &trim;
    pdkv_transfer_plan_t* plan = nullptr;
    const pdkv_status_t st = pdkv_transfer_plan_compile(ctx.get(), &g, 1, &plan, e);
    pdkv_transfer_plan_free(plan);
    return st;
  });
}

TEST_CASE("field_mask: an unset optional field is never read, a set one is honoured", "[capi][abi][field_mask]") {
  const ModelPtr nano = make_model(nemotron3_nano_desc());
  const pdkv_engine_config_t c1 = engine(1);

  SECTION("pdkv_engine_options_t.prefix_caching") {
    pdkv_engine_options_t o = engine_options(nano.get(), &c1, "d");
    CHECK(o.field_mask == 0);
    o.prefix_caching = 7;  // not a boolean: would be refused if read
    CHECK(engine_info(make_engine(o).get()).prefix_caching == 0);  // derived: cache mode none
    o.field_mask = PDKV_ENGINE_FIELD_PREFIX_CACHING;
    const CallResult r = capture([&](pdkv_error_t** e) {
      pdkv_engine_t* x = nullptr;
      const pdkv_status_t st = pdkv_engine_new(&o, &x, e);
      pdkv_engine_free(x);
      return st;
    });
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("prefix_caching = 7"));
    o.prefix_caching = 1;
    CHECK(engine_info(make_engine(o).get()).prefix_caching == 1);
  }
  SECTION("pdkv_engine_layout_t: prefix caching and the pipeline stage") {
    pdkv_engine_layout_t l;
    REQUIRE_OK(pdkv_engine_layout_init(&l, err));
    CHECK(l.field_mask == 0);
    l.prefix_caching = 9;
    l.pp_size = 0;
    l.pp_rank = 5;
    l.layer_begin = 3;
    l.layer_end = 1;
    pdkv_engine_metadata_t* md = nullptr;
    REQUIRE_OK(pdkv_engine_metadata_from_model(nano.get(), &c1, &l, &md, err));
    MetadataPtr owner(md);
    pdkv_engine_metadata_info_t i = metadata_info(md);
    CHECK(i.prefix_caching == 0);
    CHECK(i.pp_size == 1);
    CHECK(i.pp_rank == 0);
    CHECK(i.layer_begin == 0);
    CHECK(i.layer_end == 0);  // open: through the last layer
    // Set: honoured (and checked).
    l.field_mask = PDKV_LAYOUT_FIELD_PREFIX_CACHING | PDKV_LAYOUT_FIELD_PIPELINE | PDKV_LAYOUT_FIELD_LAYER_END;
    l.prefix_caching = 1;
    l.pp_size = 2;
    l.pp_rank = 0;
    l.layer_begin = 0;
    l.layer_end = 26;
    REQUIRE_OK(pdkv_engine_metadata_from_model(nano.get(), &c1, &l, &md, err));
    owner.reset(md);
    i = metadata_info(md);
    CHECK(i.prefix_caching == 1);
    CHECK(i.pp_size == 2);
    CHECK(i.layer_end == 26);
    l.pp_size = 0;
    const CallResult r = capture([&](pdkv_error_t** e) {
      pdkv_engine_metadata_t* x = nullptr;
      const pdkv_status_t st = pdkv_engine_metadata_from_model(nano.get(), &c1, &l, &x, e);
      pdkv_engine_metadata_free(x);
      return st;
    });
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("pp_size = 0 with PDKV_LAYOUT_FIELD_PIPELINE set"));
  }
  SECTION("pdkv_group_trim_input_t: first block, kernel blocks per id, tokens per block") {
    // D's list starts at table index 2 although it holds 0 tokens: tokens 0..31 have no slot.
    const V local{3, 4}, remote{8, 9};
    pdkv_group_trim_input_t in = attention_trim(local, remote, 32, 0);
    in.local_first_block = 2;
    in.local_kernel_blocks_per_id = 0;  // would be refused if read
    in.remote_kernel_blocks_per_id = 99;
    uint64_t tokens = 0;
    REQUIRE(trim_status(in, &tokens).status == PDKV_OK);  // derived first block 0, kernel ids
    CHECK(tokens == 32);
    in.field_mask |= PDKV_TRIM_FIELD_LOCAL_FIRST_BLOCK;
    CHECK(trim_status(in).status == PDKV_ERR_COVERAGE);  // the set index is used
    in.field_mask |= PDKV_TRIM_FIELD_KERNEL_BLOCKS_PER_ID;
    const CallResult kbpi = trim_status(in);
    CHECK(kbpi.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(kbpi.message, Contains("local_kernel_blocks_per_id = 0 with PDKV_TRIM_FIELD_KERNEL_BLOCKS_PER_ID"));
    // Tokens per block: unset where pdkv_group_trim_new needs them is refused naming the bit.
    in = attention_trim(local, remote, 32, 0);
    in.field_mask = 0;
    const CallResult tpb = trim_status(in);
    CHECK(tpb.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(tpb.message, Contains("PDKV_TRIM_FIELD_TOKENS_PER_BLOCK"));
  }
  SECTION("pdkv_engine_config_t: block size and dtypes") {
    pdkv_engine_config_t c = engine(1);
    c.user_block_size = 4096;
    c.kv_cache_dtype_bytes = 3;  // not a dtype size: would be refused if read
    const uint64_t derived = info_of(make_geometry(nano.get(), c).get()).block_size;
    CHECK(derived != 4096);
    c.field_mask = PDKV_CONFIG_FIELD_BLOCK_SIZE;
    CHECK(info_of(make_geometry(nano.get(), c).get()).block_size == 4096);
    c.field_mask |= PDKV_CONFIG_FIELD_KV_CACHE_DTYPE;
    const CallResult r = capture([&](pdkv_error_t** e) {
      pdkv_geometry_t* g = nullptr;
      const pdkv_status_t st = pdkv_geometry_new(nano.get(), &c, &g, e);
      pdkv_geometry_free(g);
      return st;
    });
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("kv_cache_dtype_bytes = 3"));
  }
  SECTION("pdkv_aligned_split_input_t: the budget limits") {
    // Block 512 wider than a 400-token chunk: vLLM main keeps the chunk as the budget sized it.
    pdkv_aligned_split_input_t a{};
    a.struct_size = sizeof a;
    a.num_prompt_tokens = a.num_tokens = 1300;
    a.block_size = 512;
    a.num_new_tokens = 400;
    a.long_prefill_token_threshold = 400;
    a.max_num_scheduled_tokens = 7;  // would cap the chunk if read
    uint64_t out = 0;
    REQUIRE_OK(pdkv_mamba_aligned_split(&a, &out, err));
    const uint64_t unset = out;
    a.field_mask = PDKV_SPLIT_FIELD_LONG_PREFILL_TOKEN_THRESHOLD;
    REQUIRE_OK(pdkv_mamba_aligned_split(&a, &out, err));
    CHECK(out == 400);
    // Neither limit read: the block fits a chunk but this step does not reach it, so the request
    // waits (a read max_num_scheduled_tokens of 7 would have kept the 400 tokens).
    CHECK(unset == 0);
    a.field_mask |= PDKV_SPLIT_FIELD_MAX_NUM_SCHEDULED_TOKENS;
    a.max_num_scheduled_tokens = 0;
    const CallResult r = capture([&](pdkv_error_t** e) { return pdkv_mamba_aligned_split(&a, &out, e); });
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("max_num_scheduled_tokens = 0 with PDKV_SPLIT_FIELD_MAX_NUM_SCHEDULED_TOKENS"));
  }
  SECTION("pdkv_model_desc_t: chunk size and default SSM dtype, both ways") {
    pdkv_model_desc_t d = nemotron3_nano_desc();
    d.field_mask = 0;
    d.mamba_chunk_size = 7;
    d.default_ssm_dtype_bytes = 3;  // not a dtype size: would be refused if read
    const ModelPtr m = make_model(d);
    pdkv_model_desc_t back{};
    back.struct_size = sizeof back;
    back.field_mask = ~0ULL;  // output: overwritten
    REQUIRE_OK(pdkv_model_describe(m.get(), &back, err));
    CHECK(back.field_mask == 0);
    CHECK(back.mamba_chunk_size == 0);
    CHECK(back.default_ssm_dtype_bytes == 0);
    // Set: honoured, and described with their bits.
    const pdkv_model_desc_t full = nemotron3_nano_desc();
    REQUIRE(full.field_mask == (PDKV_MODEL_FIELD_MAMBA_CHUNK_SIZE | PDKV_MODEL_FIELD_DEFAULT_SSM_DTYPE));
    REQUIRE_OK(pdkv_model_describe(nano.get(), &back, err));
    CHECK(back.field_mask == full.field_mask);
    CHECK(back.mamba_chunk_size == 128);
    CHECK(back.default_ssm_dtype_bytes == 4);
    d.field_mask = PDKV_MODEL_FIELD_DEFAULT_SSM_DTYPE;
    const CallResult r = capture([&](pdkv_error_t** e) {
      pdkv_model_t* x = nullptr;
      const pdkv_status_t st = pdkv_model_new(&d, &x, e);
      pdkv_model_free(x);
      return st;
    });
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("default_ssm_dtype_bytes"));
  }
}
