// C API tests of pdkv/engine.h: the engine's derived groups, metadata and registration
// descriptors; a request's plan equals the plan of the low-level calls with the groups built by
// hand (kernel ids, the N-1 rule and the Mamba slots of each cache mode worked out here, in the
// test, without pdkv's helpers) over several models, TP pairs, hits and cache modes; and every
// refusal names the offending value and what to pass instead.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "capi_helpers.hpp"

using Catch::Matchers::Contains;
using V = std::vector<uint64_t>;

namespace {

struct EngineDeleter { void operator()(pdkv_engine_t* p) const { pdkv_engine_free(p); } };
struct MetadataDeleter { void operator()(pdkv_engine_metadata_t* p) const { pdkv_engine_metadata_free(p); } };
struct ContextDeleter { void operator()(pdkv_plan_context_t* p) const { pdkv_plan_context_free(p); } };
struct PlanDeleter { void operator()(pdkv_transfer_plan_t* p) const { pdkv_transfer_plan_free(p); } };
struct ListDeleter { void operator()(pdkv_descriptor_list_t* p) const { pdkv_descriptor_list_free(p); } };
using EnginePtr = std::unique_ptr<pdkv_engine_t, EngineDeleter>;
using MetadataPtr = std::unique_ptr<pdkv_engine_metadata_t, MetadataDeleter>;
using ContextPtr = std::unique_ptr<pdkv_plan_context_t, ContextDeleter>;
using PlanPtr = std::unique_ptr<pdkv_transfer_plan_t, PlanDeleter>;
using ListPtr = std::unique_ptr<pdkv_descriptor_list_t, ListDeleter>;

ModelPtr preset(const char* name) {
  pdkv_model_t* m = nullptr;
  REQUIRE_OK(pdkv_model_from_preset(name, &m, err));
  return ModelPtr(m);
}

// A pure attention GQA model (8 KV heads of 128, 4 layers), described field by field.
ModelPtr attention_model() {
  pdkv_model_desc_t d{};
  d.struct_size = sizeof d;
  d.name = "gqa-test-4l";
  d.num_kv_heads = 8;
  d.head_size = 128;
  d.head_size_v = 128;
  d.dtype_bytes = 2;
  d.layer_pattern = "****";
  return make_model(d);
}

pdkv_engine_config_t config(uint32_t tp, int32_t mode, uint32_t spec = 0, int32_t backend = PDKV_BACKEND_FLASH_ATTN) {
  pdkv_engine_config_t c = engine(tp, backend);
  c.mamba_cache_mode = mode;
  c.num_speculative_tokens = spec;
  return c;
}

EnginePtr make_engine(const pdkv_model_t* m, const pdkv_engine_config_t& c, const char* id, uint32_t rank,
                      uint64_t blocks = 64, int32_t prefix_caching = -1) {  // -1: bit unset
  pdkv_engine_options_t o;
  REQUIRE_OK(pdkv_engine_options_init(&o, err));
  o.model = m;
  o.config = &c;
  o.engine_id = id;
  o.tp_rank = rank;
  o.num_logical_blocks = blocks;
  if (prefix_caching >= 0) {
    o.field_mask |= PDKV_ENGINE_FIELD_PREFIX_CACHING;
    o.prefix_caching = static_cast<uint8_t>(prefix_caching);
  }
  pdkv_engine_t* e = nullptr;
  REQUIRE_OK(pdkv_engine_new(&o, &e, err));
  return EnginePtr(e);
}

pdkv_engine_info_t info_of(const pdkv_engine_t* e) {
  pdkv_engine_info_t i{};
  i.struct_size = sizeof i;
  REQUIRE_OK(pdkv_engine_get_info(e, &i, err));
  return i;
}

MetadataPtr metadata_of(const pdkv_engine_t* e) {
  pdkv_engine_metadata_t* m = nullptr;
  REQUIRE_OK(pdkv_engine_get_metadata(e, &m, err));
  return MetadataPtr(m);
}

pdkv_engine_group_t group_of(const pdkv_engine_t* e, size_t i) {
  pdkv_engine_group_t g{};
  g.struct_size = sizeof g;
  REQUIRE_OK(pdkv_engine_group(e, i, &g, err));
  return g;
}

std::string json_of(const pdkv_transfer_plan_t* p) {
  size_t len = 0;
  REQUIRE(pdkv_transfer_plan_to_json(p, nullptr, 0, &len, nullptr) == PDKV_ERR_BUFFER_TOO_SMALL);
  std::string s(len + 1, '\0');
  REQUIRE_OK(pdkv_transfer_plan_to_json(p, s.data(), s.size(), &len, err));
  s.resize(len);
  return s;
}

uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// One deployment: a D rank and every rank of one P engine, each described once.
struct Pair {
  ModelPtr model;
  pdkv_engine_config_t d_config{}, p_config{};
  EnginePtr d;
  std::vector<EnginePtr> p;
  std::vector<MetadataPtr> p_md;
  ContextPtr ctx;

  bool hybrid() const {
    pdkv_engine_metadata_info_t i{};
    i.struct_size = sizeof i;
    REQUIRE(pdkv_engine_metadata_get_info(p_md[0].get(), &i, nullptr) == PDKV_OK);
    return i.mamba_type != PDKV_MAMBA_NONE;
  }

  Pair(ModelPtr m, const pdkv_engine_config_t& dc, const pdkv_engine_config_t& pc, uint32_t d_tp_rank,
       uint64_t blocks = 64, int32_t prefix_caching = -1)
      : model(std::move(m)), d_config(dc), p_config(pc) {
    d = make_engine(model.get(), d_config, "decode", d_tp_rank, blocks, prefix_caching);
    std::vector<const pdkv_engine_metadata_t*> remote;
    for (uint32_t r = 0; r < p_config.tp_size; ++r) {
      p.push_back(make_engine(model.get(), p_config, "prefill", r, blocks, prefix_caching));
      p_md.push_back(metadata_of(p.back().get()));
      remote.push_back(p_md.back().get());
    }
    pdkv_engine_peer_t peer{};
    peer.struct_size = sizeof peer;
    peer.remote = remote.data();
    peer.num_remote = remote.size();
    peer.remote_config = &p_config;
    pdkv_plan_context_t* c = nullptr;
    REQUIRE_OK(pdkv_engine_plan_context_new(d.get(), &peer, &c, err));
    ctx.reset(c);
  }
};

// One request as the schedulers hold it: per group D's block table and P's exported ids.
struct Request {
  std::vector<V> local, remote;
  uint64_t prompt = 0, hit = 0;
};

// Block tables a scheduler would hold for an N-token prompt with D's hit of `hit` tokens:
// attention tables of logical ids (one per block), Mamba tables per cache mode (align: the hit
// positions' cached states, null placeholders, the running state last; all: one state per
// position; none: the running state), speculative scratch slots at the end of D's Mamba lists;
// P's Mamba lists as P exports them (clipped). Ids come from one pool per engine, backwards,
// so that consecutive ids are rare.
Request make_request(const Pair& pr, uint64_t prompt, uint64_t hit) {
  const pdkv_engine_info_t di = info_of(pr.d.get());
  const pdkv_engine_info_t pi = info_of(pr.p[0].get());
  const uint64_t computed = pr.hybrid() && prompt > 1 ? prompt - 1 : prompt;
  Request r;
  r.prompt = prompt;
  r.hit = hit;
  uint64_t d_next = di.num_logical_blocks - 1, p_next = pi.num_logical_blocks - 1;
  const uint64_t d_pos = ceil_div(prompt, di.logical_block_size), p_pos = ceil_div(computed, pi.logical_block_size);
  for (size_t g = 0; g < di.num_groups; ++g) {
    V l, rm;
    if (group_of(pr.d.get(), g).kind != PDKV_GROUP_MAMBA) {
      for (uint64_t i = 0; i < d_pos; ++i) l.push_back(d_next--);
      for (uint64_t i = 0; i < p_pos; ++i) rm.push_back(p_next--);
    } else if (di.cache_mode == PDKV_MAMBA_CACHE_ALL) {
      for (uint64_t i = 0; i < d_pos; ++i) l.push_back(d_next--);
      for (uint64_t i = 0; i < di.num_speculative_tokens; ++i) l.push_back(d_next--);
      for (uint64_t i = 0; i < p_pos; ++i) rm.push_back(p_next--);
    } else if (di.cache_mode == PDKV_MAMBA_CACHE_ALIGN) {
      const uint64_t hit_pos = hit / di.logical_block_size;
      for (uint64_t i = 0; i < d_pos; ++i) l.push_back(i < hit_pos || i + 1 == d_pos ? d_next-- : 0);
      for (uint64_t i = 0; i < di.num_speculative_tokens; ++i) l.push_back(d_next--);
      rm.push_back(p_next--);
    } else {
      l.push_back(d_next--);
      for (uint64_t i = 0; i < di.num_speculative_tokens; ++i) l.push_back(d_next--);
      rm.push_back(p_next--);
    }
    r.local.push_back(l);
    r.remote.push_back(rm);
  }
  return r;
}

// Plans r with pdkv_engine_plan_request (into == NULL: a new plan in *out) or with
// pdkv_engine_plan_request_into (into the given plan, out unused).
pdkv_status_t plan_request(const Pair& pr, const Request& r, pdkv_transfer_plan_t** out, pdkv_error_t** err,
                           pdkv_transfer_plan_t* into = nullptr) {
  std::vector<pdkv_engine_request_group_t> gs;
  for (size_t g = 0; g < r.local.size(); ++g) {
    gs.push_back({r.local[g].data(), r.local[g].size(), r.remote[g].data(), r.remote[g].size()});
  }
  pdkv_engine_request_t q{};
  q.struct_size = sizeof q;
  q.groups = gs.data();
  q.num_groups = gs.size();
  q.num_prompt_tokens = r.prompt;
  q.num_local_computed_tokens = r.hit;
  if (into != nullptr) return pdkv_engine_plan_request_into(pr.d.get(), pr.ctx.get(), &q, into, err);
  return pdkv_engine_plan_request(pr.d.get(), pr.ctx.get(), &q, out, err);
}

// One plan handle every test's requests are also planned into, request after request whatever
// the engine or context (a plan is tied to neither): whatever it held before must not show.
pdkv_transfer_plan_t* reused_plan() {
  static const PlanPtr plan = [] {
    pdkv_transfer_plan_t* p = nullptr;
    REQUIRE_OK(pdkv_transfer_plan_new(&p, err));
    return PlanPtr(p);
  }();
  return plan.get();
}

bool is_empty_plan(const pdkv_transfer_plan_t* p) {
  pdkv_transfer_plan_info_t i{};
  i.struct_size = sizeof i;
  REQUIRE_OK(pdkv_transfer_plan_get_info(p, &i, err));
  return i.num_read_ranks == 0 && i.bytes == 0 && i.num_groups == 0;
}

// The request's plan as JSON, after checking that pdkv_engine_plan_request_into plans the same
// (into the reused plan).
std::string engine_plan(const Pair& pr, const Request& r, bool* empty = nullptr) {
  pdkv_transfer_plan_t* p = nullptr;
  const CallResult res = capture([&](pdkv_error_t** err) { return plan_request(pr, r, &p, err); });
  INFO(res.message);
  REQUIRE(res.status == PDKV_OK);
  PlanPtr owned(p);
  if (empty != nullptr) {
    pdkv_transfer_plan_info_t i{};
    i.struct_size = sizeof i;
    REQUIRE_OK(pdkv_transfer_plan_get_info(p, &i, err));
    *empty = i.empty == 1;
  }
  std::string json = json_of(p);
  const CallResult into =
      capture([&](pdkv_error_t** err) { return plan_request(pr, r, nullptr, err, reused_plan()); });
  INFO(into.message);
  REQUIRE(into.status == PDKV_OK);
  CHECK(json_of(reused_plan()) == json);
  return json;
}

std::vector<uint64_t> expand(const V& logical, uint64_t ppl) {
  V out;
  for (uint64_t b : logical) {
    for (uint64_t k = 0; k < ppl; ++k) out.push_back(b * ppl + k);
  }
  return out;
}

// The same request through the low-level calls, every rule applied here by hand.
std::string hand_plan(const Pair& pr, const Request& r) {
  const pdkv_engine_info_t di = info_of(pr.d.get());
  const pdkv_engine_info_t pi = info_of(pr.p[0].get());
  auto metadata = [&](const pdkv_engine_config_t& c, const char* id, uint32_t rank, uint64_t blocks) {
    pdkv_engine_layout_t l;
    REQUIRE_OK(pdkv_engine_layout_init(&l, err));
    l.engine_id = id;
    l.tp_rank = rank;
    l.num_logical_blocks = blocks;
    l.num_regions = di.num_regions;
    l.field_mask |= PDKV_LAYOUT_FIELD_PREFIX_CACHING;
    l.prefix_caching = di.prefix_caching;
    pdkv_engine_metadata_t* m = nullptr;
    REQUIRE_OK(pdkv_engine_metadata_from_model(pr.model.get(), &c, &l, &m, err));
    return MetadataPtr(m);
  };
  MetadataPtr d_md = metadata(pr.d_config, "decode", di.tp_rank, di.num_logical_blocks);
  std::vector<MetadataPtr> p_md;
  std::vector<const pdkv_engine_metadata_t*> remote;
  for (uint32_t rank = 0; rank < pi.tp_size; ++rank) {
    p_md.push_back(metadata(pr.p_config, "prefill", rank, pi.num_logical_blocks));
    remote.push_back(p_md.back().get());
  }
  GeometryPtr dg = make_geometry(pr.model.get(), pr.d_config);
  GeometryPtr pg = make_geometry(pr.model.get(), pr.p_config);
  pdkv_plan_context_params_t params{};
  params.struct_size = sizeof params;
  params.local = d_md.get();
  params.remote = remote.data();
  params.num_remote = remote.size();
  params.local_geometry = dg.get();
  params.remote_geometry = pg.get();
  pdkv_plan_context_t* c = nullptr;
  REQUIRE_OK(pdkv_plan_context_new(&params, &c, err));
  ContextPtr ctx(c);

  const uint64_t computed = pr.hybrid() && r.prompt > 1 ? r.prompt - 1 : r.prompt;  // the N-1 rule
  const uint64_t first = r.hit / di.logical_block_size;
  const size_t n = r.local.size();
  std::vector<V> local(n), remote_ids(n);
  std::vector<std::vector<uint32_t>> regions(n);
  std::vector<pdkv_group_trim_input_t> trims(n);
  std::vector<pdkv_plan_group_t> groups(n);
  for (size_t g = 0; g < n; ++g) {
    const pdkv_engine_group_t eg = group_of(pr.d.get(), g);
    for (uint32_t i = 0; i < eg.num_layers; ++i) regions[g].push_back(i);
    pdkv_group_trim_input_t& t = trims[g];
    t = pdkv_group_trim_input_t{};
    t.struct_size = sizeof t;
    t.kind = eg.kind;
    t.remote_computed_tokens = computed;
    t.local_hit_tokens = r.hit;
    const V& table = r.local[g];
    if (eg.kind != PDKV_GROUP_MAMBA) {
      local[g] = expand(V(table.begin() + static_cast<std::ptrdiff_t>(first), table.end()),
                        di.physical_blocks_per_logical);
      remote_ids[g] = expand(r.remote[g], pi.physical_blocks_per_logical);
      t.local_first_block = first * di.physical_blocks_per_logical;
      t.field_mask |= PDKV_TRIM_FIELD_LOCAL_FIRST_BLOCK;
    } else {
      t.cache_mode = di.cache_mode;
      V positions(table.begin() + static_cast<std::ptrdiff_t>(first),
                  table.end() - static_cast<std::ptrdiff_t>(di.num_speculative_tokens));
      if (di.cache_mode == PDKV_MAMBA_CACHE_ALL) {
        local[g] = positions;
        t.local_first_block = first;
        t.field_mask |= PDKV_TRIM_FIELD_LOCAL_FIRST_BLOCK;
      } else if (!positions.empty()) {
        local[g] = {positions.back()};
      }
      remote_ids[g] = r.remote[g];
    }
    t.local_blocks = local[g].data();
    t.num_local_blocks = local[g].size();
    t.remote_blocks = remote_ids[g].data();
    t.num_remote_blocks = remote_ids[g].size();
    groups[g] = pdkv_plan_group_t{};
    groups[g].struct_size = sizeof(pdkv_plan_group_t);
    groups[g].trim = &trims[g];
    groups[g].regions = regions[g].data();
    groups[g].num_regions = regions[g].size();
  }
  pdkv_transfer_plan_t* p = nullptr;
  REQUIRE_OK(pdkv_transfer_plan_compile(ctx.get(), groups.data(), groups.size(), &p, err));
  PlanPtr owned(p);
  return json_of(p);
}

}  // namespace

TEST_CASE("engine: KV-cache groups as the hybrid manager forms them", "[engine]") {
  SECTION("Nemotron-3-Nano: 23 Mamba layers in 4 groups of 6, 6 attention layers in one") {
    ModelPtr m = make_model(nemotron3_nano_desc());
    const pdkv_engine_config_t c = config(2, PDKV_MAMBA_CACHE_ALIGN);
    EnginePtr e = make_engine(m.get(), c, "decode", 0);
    const std::string pattern = nemotron3_nano_desc().layer_pattern;
    std::vector<uint32_t> mamba, attention;
    for (uint32_t i = 0; i < pattern.size(); ++i) {
      if (pattern[i] == 'M') mamba.push_back(i);
      if (pattern[i] == '*') attention.push_back(i);
    }
    REQUIRE(mamba.size() == 23);
    REQUIRE(attention.size() == 6);
    const pdkv_engine_info_t i = info_of(e.get());
    REQUIRE(i.num_groups == 5);
    CHECK(i.num_regions == 6);
    // Layer 0 is Mamba, so the Mamba groups come first; group g holds Mamba layers g, g+4, ...
    for (size_t g = 0; g < 4; ++g) {
      const pdkv_engine_group_t eg = group_of(e.get(), g);
      CHECK(eg.kind == PDKV_GROUP_MAMBA);
      std::vector<uint32_t> want;
      for (size_t k = g; k < mamba.size(); k += 4) want.push_back(mamba[k]);
      CHECK(std::vector<uint32_t>(eg.layers, eg.layers + eg.num_layers) == want);
      REQUIRE(eg.num_regions == eg.num_layers);
      for (uint32_t r = 0; r < eg.num_regions; ++r) CHECK(eg.regions[r] == r);
    }
    const pdkv_engine_group_t ag = group_of(e.get(), 4);
    CHECK(ag.kind == PDKV_GROUP_ATTENTION);
    CHECK(std::vector<uint32_t>(ag.layers, ag.layers + ag.num_layers) == attention);
    CHECK(i.cache_mode == PDKV_MAMBA_CACHE_ALIGN);
    CHECK(i.prefix_caching == 1);
    CHECK(i.num_logical_blocks == 64);
  }
  SECTION("Falcon-H1: parallel layers, one group per kind, attention first") {
    ModelPtr m = preset("falcon-h1-0.5b");
    const pdkv_engine_config_t c = config(1, PDKV_MAMBA_CACHE_NONE);
    EnginePtr e = make_engine(m.get(), c, "decode", 0);
    const pdkv_engine_info_t i = info_of(e.get());
    REQUIRE(i.num_groups == 2);
    const pdkv_engine_group_t a = group_of(e.get(), 0), b = group_of(e.get(), 1);
    CHECK(a.kind == PDKV_GROUP_ATTENTION);
    CHECK(b.kind == PDKV_GROUP_MAMBA);
    CHECK(a.num_layers == b.num_layers);
    CHECK(i.num_regions == a.num_layers);
    CHECK(i.prefix_caching == 0);
  }
  SECTION("a pure attention model: one group of every layer") {
    ModelPtr m = attention_model();
    const pdkv_engine_config_t c = config(2, PDKV_MAMBA_CACHE_NONE);
    EnginePtr e = make_engine(m.get(), c, "decode", 1);
    const pdkv_engine_info_t i = info_of(e.get());
    REQUIRE(i.num_groups == 1);
    CHECK(i.num_regions == 4);
    CHECK(i.tp_rank == 1);
    pdkv_engine_group_t g = group_of(e.get(), 0);
    CHECK(std::vector<uint32_t>(g.layers, g.layers + g.num_layers) == std::vector<uint32_t>{0, 1, 2, 3});
    const CallResult r = capture([&](pdkv_error_t** err) { return pdkv_engine_group(e.get(), 1, &g, err); });
    CHECK(r.status == PDKV_ERR_OUT_OF_BOUNDS);
    CHECK_THAT(r.message, Contains("1") && Contains("count 1"));
  }
}

TEST_CASE("engine: metadata and registration descriptors match the low-level calls", "[engine]") {
  ModelPtr m = make_model(nemotron3_nano_desc());
  const pdkv_engine_config_t c = config(4, PDKV_MAMBA_CACHE_ALIGN);
  const uint64_t bases[6] = {1ull << 40, 2ull << 40, 3ull << 40, 4ull << 40, 5ull << 40, 6ull << 40};
  pdkv_engine_options_t o;
  REQUIRE_OK(pdkv_engine_options_init(&o, err));
  o.model = m.get();
  o.config = &c;
  o.engine_id = "prefill";
  o.tp_rank = 3;
  o.num_logical_blocks = 8;
  o.region_bases = bases;
  o.num_region_bases = 6;
  pdkv_engine_t* raw = nullptr;
  REQUIRE_OK(pdkv_engine_new(&o, &raw, err));
  EnginePtr e(raw);
  MetadataPtr md = metadata_of(e.get());

  pdkv_engine_layout_t l;
  REQUIRE_OK(pdkv_engine_layout_init(&l, err));
  l.engine_id = "prefill";
  l.tp_rank = 3;
  l.num_logical_blocks = 8;
  l.num_regions = 6;
  l.region_bases = bases;
  pdkv_engine_metadata_t* hand = nullptr;
  REQUIRE_OK(pdkv_engine_metadata_from_model(m.get(), &c, &l, &hand, err));
  MetadataPtr hand_md(hand);
  uint8_t equal = 0;
  REQUIRE_OK(pdkv_engine_metadata_equal(md.get(), hand_md.get(), &equal, err));
  CHECK(equal == 1);

  // Attention descriptors of every region, then the Mamba ones (pdkv_mamba_local_descriptors).
  const pdkv_metadata_region_t* regions = nullptr;
  size_t nreg = 0;
  REQUIRE_OK(pdkv_engine_metadata_regions(md.get(), &regions, &nreg, err));
  std::vector<pdkv_region_t> rs;
  for (size_t i = 0; i < nreg; ++i) rs.push_back({regions[i].base, regions[i].block_len, regions[i].num_blocks});
  pdkv_descriptor_list_t *att = nullptr, *mam = nullptr, *all = nullptr;
  REQUIRE_OK(pdkv_attention_local_descriptors(rs.data(), rs.size(), 1, &att, err));
  GeometryPtr g = make_geometry(m.get(), c);
  const pdkv_engine_info_t info = info_of(e.get());
  REQUIRE_OK(pdkv_mamba_local_descriptors(rs.data(), rs.size(), info.physical_blocks_per_logical, g.get(), &mam, err));
  REQUIRE_OK(pdkv_engine_registration_descriptors(e.get(), &all, err));
  ListPtr a1(att), a2(mam), a3(all);
  const pdkv_descriptor_t *x = nullptr, *y = nullptr, *z = nullptr;
  size_t nx = 0, ny = 0, nz = 0;
  REQUIRE_OK(pdkv_descriptor_list_items(att, &x, &nx, err));
  REQUIRE_OK(pdkv_descriptor_list_items(mam, &y, &ny, err));
  REQUIRE_OK(pdkv_descriptor_list_items(all, &z, &nz, err));
  REQUIRE(nx == 6 * 8 * info.physical_blocks_per_logical);
  REQUIRE(ny > 0);
  REQUIRE(nz == nx + ny);
  for (size_t i = 0; i < nz; ++i) {
    const pdkv_descriptor_t want = i < nx ? x[i] : y[i - nx];
    INFO(i);
    CHECK(z[i].addr == want.addr);
    CHECK(z[i].len == want.len);
  }
  CHECK(z[0].addr == bases[0]);
  CHECK(z[nx].addr == bases[0]);  // the first Mamba descriptor: region 0's first page
}

TEST_CASE("engine: a request's plan equals the low-level plan built by hand", "[engine]") {
  struct Deployment {
    const char* model;  // a preset, or "" for the pure attention model
    uint32_t p_tp_size, d_tp_size, d_tp_rank;
    int32_t mode;
    uint32_t spec;
    int32_t backend;
  };
  const Deployment deployments[] = {
      {"nemotron-3-nano-30b", 4, 2, 0, PDKV_MAMBA_CACHE_ALIGN, 0, PDKV_BACKEND_FLASH_ATTN},
      {"nemotron-3-nano-30b", 4, 2, 1, PDKV_MAMBA_CACHE_ALL, 0, PDKV_BACKEND_FLASH_ATTN},
      {"nemotron-3-nano-30b", 2, 4, 3, PDKV_MAMBA_CACHE_NONE, 0, PDKV_BACKEND_FLASH_ATTN},
      {"nemotron-3-nano-30b", 2, 2, 1, PDKV_MAMBA_CACHE_ALIGN, 2, PDKV_BACKEND_FLASHINFER},
      {"qwen3.5-27b", 2, 1, 0, PDKV_MAMBA_CACHE_ALIGN, 0, PDKV_BACKEND_FLASH_ATTN},
      {"qwen3.5-27b", 1, 2, 1, PDKV_MAMBA_CACHE_ALL, 1, PDKV_BACKEND_FLASHINFER},
      {"jamba-v0.1", 2, 2, 0, PDKV_MAMBA_CACHE_ALIGN, 0, PDKV_BACKEND_FLASH_ATTN},
      {"falcon-h1-0.5b", 1, 1, 0, PDKV_MAMBA_CACHE_ALIGN, 0, PDKV_BACKEND_FLASH_ATTN},
      {"", 1, 2, 1, PDKV_MAMBA_CACHE_NONE, 0, PDKV_BACKEND_FLASHINFER},
      {"", 2, 1, 0, PDKV_MAMBA_CACHE_NONE, 0, PDKV_BACKEND_FLASH_ATTN},
  };
  size_t compared = 0, nonempty = 0;
  for (const Deployment& dep : deployments) {
    const bool attention_only = std::string(dep.model).empty();
    for (int prefix_caching : {0, 1}) {
      if (dep.mode == PDKV_MAMBA_CACHE_NONE && prefix_caching == 1 && !attention_only) continue;
      if (dep.mode != PDKV_MAMBA_CACHE_NONE && prefix_caching == 0) continue;
      Pair pr(attention_only ? attention_model() : preset(dep.model), config(dep.d_tp_size, dep.mode, dep.spec, dep.backend),
              config(dep.p_tp_size, dep.mode, dep.spec, dep.backend), dep.d_tp_rank, 256, prefix_caching);
      const pdkv_engine_info_t di = info_of(pr.d.get());
      const uint64_t bs = di.logical_block_size;
      // Prompts: within one block, several blocks plus a few tokens, exactly whole blocks + 1.
      for (uint64_t prompt : {bs / 2 + 3, 3 * bs + 17, 2 * bs + 1}) {
        std::vector<uint64_t> hits = {0};
        if (prefix_caching == 1) {
          for (uint64_t h = bs; h <= prompt; h += bs) hits.push_back(h);  // partial and full hits
        }
        for (uint64_t hit : hits) {
          INFO((attention_only ? "gqa-test-4l" : dep.model) << " P" << dep.p_tp_size << " -> D" << dep.d_tp_size << " rank "
                                                              << dep.d_tp_rank << " mode " << dep.mode << " spec "
                                                              << dep.spec << " prompt " << prompt << " hit " << hit);
          const Request r = make_request(pr, prompt, hit);
          bool empty = true;
          const std::string engine_json = engine_plan(pr, r, &empty);
          CHECK(engine_json == hand_plan(pr, r));
          ++compared;
          if (!empty) ++nonempty;
        }
      }
    }
  }
  CHECK(compared >= 40);
  CHECK(nonempty >= 30);
}

namespace {

// The request's status and message, after checking that pdkv_engine_plan_request_into returns
// the same, and that a refused request leaves the reused plan empty whatever it held.
CallResult try_request(const Pair& pr, const Request& r) {
  pdkv_transfer_plan_t* p = nullptr;
  const CallResult res = capture([&](pdkv_error_t** err) { return plan_request(pr, r, &p, err); });
  pdkv_transfer_plan_free(p);
  const CallResult into =
      capture([&](pdkv_error_t** err) { return plan_request(pr, r, nullptr, err, reused_plan()); });
  CHECK(into.status == res.status);
  CHECK(into.message == res.message);
  if (res.status != PDKV_OK) CHECK(is_empty_plan(reused_plan()));
  return res;
}

}  // namespace

TEST_CASE("engine: pdkv_engine_new refusals name the value", "[engine]") {
  ModelPtr m = make_model(nemotron3_nano_desc());
  const pdkv_engine_config_t c = config(2, PDKV_MAMBA_CACHE_ALIGN);
  pdkv_engine_options_t o;
  REQUIRE_OK(pdkv_engine_options_init(&o, err));
  CHECK(o.struct_size == sizeof o);
  CHECK(o.model == nullptr);
  CHECK(o.field_mask == 0);  // prefix caching derived
  o.model = m.get();
  o.config = &c;
  pdkv_engine_t* e = nullptr;
  auto fails = [&](pdkv_status_t st, std::vector<std::string> words) {
    const CallResult r = capture([&](pdkv_error_t** err) { return pdkv_engine_new(&o, &e, err); });
    INFO(r.message);
    CHECK(r.status == st);
    for (const auto& w : words) CHECK_THAT(r.message, Contains(w));
    CHECK(e == nullptr);
  };
  CHECK(pdkv_engine_new(nullptr, &e, nullptr) == PDKV_ERR_NULL_POINTER);
  CHECK(pdkv_engine_new(&o, nullptr, nullptr) == PDKV_ERR_NULL_POINTER);
  CHECK(pdkv_engine_options_init(nullptr, nullptr) == PDKV_ERR_NULL_POINTER);
  SECTION("struct_size") {
    o.struct_size = 8;
    fails(PDKV_ERR_STRUCT_SIZE, {"pdkv_engine_options_t"});
  }
  SECTION("no model or config") {
    o.model = nullptr;
    fails(PDKV_ERR_NULL_POINTER, {"pdkv_engine_options_t.model"});
    o.model = m.get();
    o.config = nullptr;
    fails(PDKV_ERR_NULL_POINTER, {"pdkv_engine_options_t.config"});
  }
  SECTION("region bases of another count") {
    const uint64_t bases[2] = {1ull << 40, 2ull << 40};
    o.region_bases = bases;
    o.num_region_bases = 2;
    fails(PDKV_ERR_INVALID_ARGUMENT, {"num_region_bases = 2", "6 regions", "region_bases NULL"});
    o.region_bases = nullptr;
    fails(PDKV_ERR_NULL_POINTER, {"region_bases"});
  }
  SECTION("rank past TP") {
    o.tp_rank = 2;
    fails(PDKV_ERR_INVALID_ARGUMENT, {"2"});
  }
  SECTION("models whose groups pdkv does not form") {
    pdkv_model_desc_t d = nemotron3_nano_desc();
    d.layer_pattern = "";
    ModelPtr unknown = make_model(d);
    o.model = unknown.get();
    fails(PDKV_ERR_INVALID_ARGUMENT, {"no layer pattern", "low-level calls", "pdkv_transfer_plan_compile"});
    d = nemotron3_nano_desc();
    d.sliding_window = 4096;
    ModelPtr swa = make_model(d);
    o.model = swa.get();
    fails(PDKV_ERR_INVALID_ARGUMENT, {"sliding-window", "4096", "low-level calls"});
  }
}

TEST_CASE("engine: pdkv_engine_plan_context_new refusals name the value", "[engine]") {
  ModelPtr m = make_model(nemotron3_nano_desc());
  const pdkv_engine_config_t dc = config(2, PDKV_MAMBA_CACHE_ALIGN), pc = config(4, PDKV_MAMBA_CACHE_ALIGN);
  EnginePtr d = make_engine(m.get(), dc, "decode", 0);
  EnginePtr p = make_engine(m.get(), pc, "prefill", 1);
  MetadataPtr pmd = metadata_of(p.get());
  const pdkv_engine_metadata_t* remote[1] = {pmd.get()};
  pdkv_engine_peer_t peer{};
  peer.struct_size = sizeof peer;
  peer.remote = remote;
  peer.num_remote = 1;
  peer.remote_config = &pc;
  pdkv_plan_context_t* ctx = nullptr;
  auto fails = [&](const pdkv_engine_t* e, pdkv_status_t st, std::vector<std::string> words) {
    const CallResult r = capture([&](pdkv_error_t** err) { return pdkv_engine_plan_context_new(e, &peer, &ctx, err); });
    INFO(r.message);
    CHECK(r.status == st);
    for (const auto& w : words) CHECK_THAT(r.message, Contains(w));
    CHECK(ctx == nullptr);
  };
  SECTION("null pointers and struct size") {
    CHECK(pdkv_engine_plan_context_new(nullptr, &peer, &ctx, nullptr) == PDKV_ERR_NULL_POINTER);
    CHECK(pdkv_engine_plan_context_new(d.get(), nullptr, &ctx, nullptr) == PDKV_ERR_NULL_POINTER);
    peer.remote_config = nullptr;
    fails(d.get(), PDKV_ERR_NULL_POINTER, {"remote_config"});
    peer.remote_config = &pc;
    remote[0] = nullptr;
    fails(d.get(), PDKV_ERR_NULL_POINTER, {"remote[0]"});
    peer.struct_size = 4;
    fails(d.get(), PDKV_ERR_STRUCT_SIZE, {"pdkv_engine_peer_t"});
  }
  SECTION("no P rank") {
    peer.num_remote = 0;
    fails(d.get(), PDKV_ERR_INVALID_ARGUMENT, {"num_remote is 0", "every rank"});
  }
  SECTION("P settings of another TP size") {
    const pdkv_engine_config_t other = config(2, PDKV_MAMBA_CACHE_ALIGN);
    peer.remote_config = &other;
    fails(d.get(), PDKV_ERR_INVALID_ARGUMENT, {"tp_size 4", "tp_size 2"});
  }
  SECTION("a P engine serving another model") {
    ModelPtr jamba = preset("jamba-v0.1");
    const pdkv_engine_config_t jc = config(2, PDKV_MAMBA_CACHE_ALIGN);
    EnginePtr other = make_engine(jamba.get(), jc, "decode", 0);
    fails(other.get(), PDKV_ERR_INVALID_ARGUMENT, {"remote[0]", "fingerprint", "same model"});
  }
  SECTION("the context works with the engine") {
    REQUIRE_OK(pdkv_engine_plan_context_new(d.get(), &peer, &ctx, err));
    pdkv_plan_context_free(ctx);
  }
}

TEST_CASE("engine: requests that do not fit the engine say what to pass instead", "[engine]") {
  // Nemotron-3-Nano P TP4 -> D TP2 rank 0, align mode, FlashInfer: D's logical block of 2096
  // tokens is 131 kernel blocks of 16.
  Pair pr(make_model(nemotron3_nano_desc()), config(2, PDKV_MAMBA_CACHE_ALIGN, 0, PDKV_BACKEND_FLASHINFER),
          config(4, PDKV_MAMBA_CACHE_ALIGN, 0, PDKV_BACKEND_FLASHINFER), 0, 64);
  const pdkv_engine_info_t di = info_of(pr.d.get());
  REQUIRE(di.physical_blocks_per_logical > 1);
  const uint64_t bs = di.logical_block_size;
  Request r = make_request(pr, 2 * bs + 1, bs);
  REQUIRE(try_request(pr, r).status == PDKV_OK);
  auto fails = [&](const Request& q, pdkv_status_t st, std::vector<std::string> words) {
    const CallResult res = try_request(pr, q);
    INFO(res.message);
    CHECK(res.status == st);
    for (const auto& w : words) CHECK_THAT(res.message, Contains(w));
  };
  const size_t att = 4;  // the attention group (after the four Mamba groups)
  REQUIRE(group_of(pr.d.get(), att).kind == PDKV_GROUP_ATTENTION);

  SECTION("kernel ids where logical ids belong: an id past the logical blocks") {
    Request q = r;
    q.local[att][1] = q.local[att][1] * di.physical_blocks_per_logical + 5;
    fails(q, PDKV_ERR_INVALID_ARGUMENT,
          {"groups[4].local_block_ids[1] (attention group) = " + std::to_string(q.local[att][1]), "64 logical blocks", "kernel id",
           "logical block " + std::to_string(q.local[att][1] / di.physical_blocks_per_logical)});
  }
  SECTION("kernel ids where logical ids belong: more ids than the prompt fills") {
    Request q = r;
    q.local[att].clear();
    for (uint64_t i = 0; i < 3 * di.physical_blocks_per_logical; ++i) q.local[att].push_back(1 + i % 60);
    fails(q, PDKV_ERR_INVALID_ARGUMENT, {"groups[4].local_block_ids", "holds " + std::to_string(q.local[att].size()) + " ids",
                                         "not kernel ids"});
  }
  SECTION("a P id past P's blocks") {
    Request q = r;
    q.remote[att][0] = 1000;
    fails(q, PDKV_ERR_INVALID_ARGUMENT, {"groups[4].remote_block_ids[0] (attention group) = 1000", "P's 64 logical blocks"});
  }
  SECTION("a group count other than the engine's") {
    Request q = r;
    q.local.pop_back();
    q.remote.pop_back();
    fails(q, PDKV_ERR_INVALID_ARGUMENT, {"4 groups", "5 KV-cache groups", "pdkv_engine_group"});
  }
  SECTION("a hit that is not whole blocks, or past the prompt") {
    Request q = r;
    q.hit = bs + 7;
    fails(q, PDKV_ERR_INVALID_ARGUMENT, {"num_local_computed_tokens = " + std::to_string(bs + 7), "whole blocks",
                                         std::to_string(bs) + " here"});
    q.hit = 3 * bs;
    fails(q, PDKV_ERR_INVALID_ARGUMENT, {"exceeds num_prompt_tokens = " + std::to_string(2 * bs + 1)});
  }
  SECTION("no prompt") {
    Request q = r;
    q.prompt = 0;
    q.hit = 0;
    fails(q, PDKV_ERR_INVALID_ARGUMENT, {"num_prompt_tokens is 0"});
  }
  SECTION("a Mamba list from P holding more than the running state") {
    Request q = r;
    q.remote[0] = {0, 7, 9};
    fails(q, PDKV_ERR_INVALID_ARGUMENT, {"groups[0].remote_block_ids", "2 real blocks", "align", "exchange-clipped"});
  }
  SECTION("a block table too short for the hit") {
    Request q = make_request(pr, 3 * bs + 1, bs);
    q.hit = 2 * bs;
    q.local[att] = {5};
    fails(q, PDKV_ERR_INVALID_ARGUMENT, {"groups[4].local_block_ids", "holds 1 ids", "whole block table"});
  }
  SECTION("a block table too short for the tokens D needs") {
    // P computed 2 * bs tokens (N-1); D holds the first block and needs the second, which the
    // table lacks. (Its third block holds only the last prompt token, which D recomputes.)
    Request q = r;
    q.local[att].resize(1);
    fails(q, PDKV_ERR_COVERAGE, {"group 4"});
  }
  SECTION("null arrays") {
    std::vector<pdkv_engine_request_group_t> gs(5, pdkv_engine_request_group_t{nullptr, 2, nullptr, 0});
    pdkv_engine_request_t q{};
    q.struct_size = sizeof q;
    q.groups = gs.data();
    q.num_groups = gs.size();
    q.num_prompt_tokens = 10;
    pdkv_transfer_plan_t* p = nullptr;
    const CallResult res =
        capture([&](pdkv_error_t** err) { return pdkv_engine_plan_request(pr.d.get(), pr.ctx.get(), &q, &p, err); });
    CHECK(res.status == PDKV_ERR_NULL_POINTER);
    CHECK_THAT(res.message, Contains("groups[0].local_block_ids"));
    q.groups = nullptr;
    CHECK(pdkv_engine_plan_request(pr.d.get(), pr.ctx.get(), &q, &p, nullptr) == PDKV_ERR_NULL_POINTER);
    q.struct_size = 3;
    CHECK(pdkv_engine_plan_request(pr.d.get(), pr.ctx.get(), &q, &p, nullptr) == PDKV_ERR_STRUCT_SIZE);
    CHECK(pdkv_engine_plan_request(pr.d.get(), nullptr, &q, &p, nullptr) == PDKV_ERR_NULL_POINTER);
    CHECK(p == nullptr);
    // The same refusals into a plan, and a NULL plan named.
    q.struct_size = sizeof q;
    q.groups = gs.data();
    const CallResult into = capture(
        [&](pdkv_error_t** err) { return pdkv_engine_plan_request_into(pr.d.get(), pr.ctx.get(), &q, reused_plan(), err); });
    CHECK(into.status == PDKV_ERR_NULL_POINTER);
    CHECK_THAT(into.message, Contains("groups[0].local_block_ids"));
    gs[1].num_local_block_ids = 0;
    gs[1].num_remote_block_ids = 3;
    gs[0] = gs[1];
    const CallResult remote = capture(
        [&](pdkv_error_t** err) { return pdkv_engine_plan_request_into(pr.d.get(), pr.ctx.get(), &q, reused_plan(), err); });
    CHECK(remote.status == PDKV_ERR_NULL_POINTER);
    CHECK_THAT(remote.message, Contains("groups[0].remote_block_ids"));
    const CallResult no_plan = capture(
        [&](pdkv_error_t** err) { return pdkv_engine_plan_request_into(pr.d.get(), pr.ctx.get(), &q, nullptr, err); });
    CHECK(no_plan.status == PDKV_ERR_NULL_POINTER);
    CHECK_THAT(no_plan.message, Contains("plan"));
    CHECK(pdkv_engine_plan_request_into(nullptr, pr.ctx.get(), &q, reused_plan(), nullptr) == PDKV_ERR_NULL_POINTER);
    CHECK(pdkv_engine_plan_request_into(pr.d.get(), pr.ctx.get(), nullptr, reused_plan(), nullptr) == PDKV_ERR_NULL_POINTER);
    CHECK(is_empty_plan(reused_plan()));
  }
  SECTION("a context built for another D rank") {
    Pair other(make_model(nemotron3_nano_desc()), config(2, PDKV_MAMBA_CACHE_ALIGN, 0, PDKV_BACKEND_FLASHINFER),
               config(4, PDKV_MAMBA_CACHE_ALIGN, 0, PDKV_BACKEND_FLASHINFER), 1, 64);
    std::vector<pdkv_engine_request_group_t> gs;
    for (size_t g = 0; g < r.local.size(); ++g) {
      gs.push_back({r.local[g].data(), r.local[g].size(), r.remote[g].data(), r.remote[g].size()});
    }
    pdkv_engine_request_t q{};
    q.struct_size = sizeof q;
    q.groups = gs.data();
    q.num_groups = gs.size();
    q.num_prompt_tokens = r.prompt;
    pdkv_transfer_plan_t* p = nullptr;
    const CallResult res =
        capture([&](pdkv_error_t** err) { return pdkv_engine_plan_request(pr.d.get(), other.ctx.get(), &q, &p, err); });
    CHECK(res.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(res.message, Contains("rank 1") && Contains("rank 0") && Contains("pdkv_engine_plan_context_new"));
    // The context remembers the engine it last matched (its metadata is compared once): after
    // its own engine planned, another engine is still refused, and an engine described alike
    // (another handle, equal metadata) is accepted.
    const auto plan_with = [&](const pdkv_engine_t* e) {
      pdkv_transfer_plan_t* out = nullptr;
      const CallResult c = capture([&](pdkv_error_t** err) { return pdkv_engine_plan_request(e, other.ctx.get(), &q, &out, err); });
      pdkv_transfer_plan_free(out);
      return c;
    };
    REQUIRE(plan_with(other.d.get()).status == PDKV_OK);
    REQUIRE(plan_with(other.d.get()).status == PDKV_OK);
    const CallResult again = plan_with(pr.d.get());
    CHECK(again.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK(again.message == res.message);
    Pair alike(make_model(nemotron3_nano_desc()), config(2, PDKV_MAMBA_CACHE_ALIGN, 0, PDKV_BACKEND_FLASHINFER),
               config(4, PDKV_MAMBA_CACHE_ALIGN, 0, PDKV_BACKEND_FLASHINFER), 1, 64);
    CHECK(plan_with(alike.d.get()).status == PDKV_OK);
    CHECK(plan_with(pr.d.get()).status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK(plan_with(other.d.get()).status == PDKV_OK);
  }
}

TEST_CASE("engine: a hit needs prefix caching and a cached Mamba state", "[engine]") {
  SECTION("prefix caching off") {
    Pair pr(attention_model(), config(2, PDKV_MAMBA_CACHE_NONE), config(2, PDKV_MAMBA_CACHE_NONE), 0, 64, -1);
    const uint64_t bs = info_of(pr.d.get()).logical_block_size;
    Request r = make_request(pr, 3 * bs, 0);
    REQUIRE(try_request(pr, r).status == PDKV_OK);
    r.hit = bs;
    const CallResult res = try_request(pr, r);
    CHECK(res.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(res.message, Contains("num_local_computed_tokens = " + std::to_string(bs)) &&
                                Contains("prefix caching is off") && Contains("pass 0"));
  }
  SECTION("Mamba cache mode none with prefix caching forced on") {
    Pair pr(make_model(nemotron3_nano_desc()), config(2, PDKV_MAMBA_CACHE_NONE), config(2, PDKV_MAMBA_CACHE_NONE), 0,
            64, 1);
    const uint64_t bs = info_of(pr.d.get()).logical_block_size;
    Request r = make_request(pr, 3 * bs, bs);
    const CallResult res = try_request(pr, r);
    CHECK(res.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(res.message, Contains("cache mode none") && Contains("align or all"));
  }
}

TEST_CASE("engine: free accepts NULL and queries check their arguments", "[engine]") {
  pdkv_engine_free(nullptr);
  pdkv_engine_info_t i{};
  i.struct_size = sizeof i;
  CHECK(pdkv_engine_get_info(nullptr, &i, nullptr) == PDKV_ERR_NULL_POINTER);
  ModelPtr m = attention_model();
  const pdkv_engine_config_t c = config(1, PDKV_MAMBA_CACHE_NONE);
  EnginePtr e = make_engine(m.get(), c, "decode", 0);
  CHECK(pdkv_engine_get_info(e.get(), nullptr, nullptr) == PDKV_ERR_NULL_POINTER);
  i.struct_size = 1;
  CHECK(pdkv_engine_get_info(e.get(), &i, nullptr) == PDKV_ERR_STRUCT_SIZE);
  pdkv_engine_group_t g{};
  g.struct_size = 2;
  CHECK(pdkv_engine_group(e.get(), 0, &g, nullptr) == PDKV_ERR_STRUCT_SIZE);
  CHECK(pdkv_engine_get_metadata(e.get(), nullptr, nullptr) == PDKV_ERR_NULL_POINTER);
  CHECK(pdkv_engine_registration_descriptors(nullptr, nullptr, nullptr) == PDKV_ERR_NULL_POINTER);
  // A pure attention engine registers attention descriptors only.
  pdkv_descriptor_list_t* l = nullptr;
  REQUIRE_OK(pdkv_engine_registration_descriptors(e.get(), &l, err));
  ListPtr owned(l);
  const pdkv_descriptor_t* items = nullptr;
  size_t n = 0;
  REQUIRE_OK(pdkv_descriptor_list_items(l, &items, &n, err));
  const pdkv_engine_info_t info = info_of(e.get());
  CHECK(n == info.num_regions * info.num_logical_blocks * info.physical_blocks_per_logical);
}
