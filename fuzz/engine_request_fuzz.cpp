// Fuzzes the engine-level request (core/engine_request.hpp): the bytes pick a hybrid model, P and
// D TP sizes and D's rank, the kernel backend, the Mamba cache mode, speculative tokens, prefix
// caching, and one request as the schedulers would hold it (prompt length, D's hit, per group
// D's block table and P's exported ids: random lengths, ids random, null, repeated or past the
// pool). Oracles:
//  * engine_request_views (the allocation-free derivation pdkv_engine_plan_request_into runs)
//    and engine_request_groups (owned copies) agree: the same error, or the same groups;
//  * every view lies inside what it views: its ids a part of the caller's own array for that
//    group and side, its regions the engine group's own list (a view past them would be read
//    by the planner while the caller owns that memory);
//  * compiling the views and compiling the owned groups give the same plan or the same error.
// Anything else thrown is a bug; ASan/UBSan catch the rest.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "fuzz_bytes.hpp"
#include "pdkv/core/backends.hpp"
#include "pdkv/core/engine_request.hpp"
#include "pdkv/core/error.hpp"
#include "pdkv/core/geometry.hpp"
#include "pdkv/core/kv_cache_groups.hpp"
#include "pdkv/core/metadata_from_geometry.hpp"
#include "pdkv/core/presets.hpp"
#include "pdkv/core/transfer_plan.hpp"

using namespace pdkv::core;
using pdkv::fuzzing::Bytes;

namespace {

[[noreturn]] void bug(const char* what) {
  std::fprintf(stderr, "engine_request_fuzz: %s\n", what);
  std::abort();
}

constexpr uint64_t kPool = 12;  // logical blocks per region: small, so ids past it are common

// One deployment, built once per configuration (the derivations are what is fuzzed, not setup).
struct Setup {
  std::vector<KvCacheGroup> groups;
  EngineMetadata d;
  std::vector<EngineMetadata> p;
  PlanContext ctx;
  PlanContextVerdict verdict;
  uint64_t d_spec = 0, p_spec = 0;
};

using Key = std::tuple<int, int, int, int, int, int, int, int>;

const Setup* setup_for(const Key& key) {
  static std::map<Key, std::unique_ptr<Setup>> cache;
  if (auto it = cache.find(key); it != cache.end()) return it->second.get();
  const auto [model_i, p_tp_i, d_tp_i, d_rank, flashinfer, mode_i, spec, caching] = key;
  static const char* const kModels[] = {"nemotron-3-nano-30b", "qwen3.5-27b", "falcon-h1-0.5b"};
  static const uint32_t kTp[] = {1, 2, 4};
  std::unique_ptr<Setup> s;
  try {
    const ModelDesc m = preset_model(kModels[model_i]);
    EngineConfig dc, pc;
    dc.tp_size = kTp[d_tp_i];
    pc.tp_size = kTp[p_tp_i];
    dc.cache_mode = pc.cache_mode = static_cast<MambaCacheMode>(mode_i);
    dc.num_speculative_tokens = pc.num_speculative_tokens = static_cast<uint32_t>(spec);
    if (flashinfer != 0) {
      apply_backend(dc, Backend::FlashInfer);
      apply_backend(pc, Backend::FlashInfer);
    }
    const EngineGeometry dg = derive_geometry(m, dc), pg = derive_geometry(m, pc);
    s = std::make_unique<Setup>();
    s->groups = kv_cache_groups(m);
    const uint32_t nreg = kv_cache_regions(s->groups);
    s->d = metadata_from_geometry(m, dc, dg, {"d", static_cast<uint32_t>(d_rank) % dc.tp_size, kPool, nreg, 1ull << 40});
    s->d.prefix_caching = caching != 0;
    for (uint32_t r = 0; r < pc.tp_size; ++r) {
      s->p.push_back(metadata_from_geometry(m, pc, pg, {"p", r, kPool, nreg, (2ull + r) << 44}));
      s->p.back().prefix_caching = caching != 0;
    }
    s->ctx = make_plan_context(s->d, s->p, dg.mamba, pg.mamba);
    s->verdict = judge_plan_context(s->ctx);
    s->d_spec = s->p_spec = spec;
  } catch (const Error&) {
    s.reset();  // a configuration pdkv refuses: nothing to fuzz with it
  }
  return (cache[key] = std::move(s)).get();
}

template <class T>
bool inside(std::span<const T> part, std::span<const T> whole) {
  if (part.empty()) return true;
  return part.data() >= whole.data() && part.data() + part.size() <= whole.data() + whole.size();
}

template <class T>
bool same(std::span<const T> a, std::span<const T> b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

bool same_view(const PlanGroupView& a, const PlanGroupView& b) {
  return a.kind == b.kind && a.cache_mode == b.cache_mode && same(a.local_blocks, b.local_blocks) &&
         same(a.remote_blocks, b.remote_blocks) && a.local_tokens_per_block == b.local_tokens_per_block &&
         a.remote_tokens_per_block == b.remote_tokens_per_block &&
         a.remote_computed_tokens == b.remote_computed_tokens && a.local_hit_tokens == b.local_hit_tokens &&
         a.sliding_window == b.sliding_window && a.local_first_block == b.local_first_block &&
         a.remote_first_block == b.remote_first_block &&
         a.local_kernel_blocks_per_id == b.local_kernel_blocks_per_id &&
         a.remote_kernel_blocks_per_id == b.remote_kernel_blocks_per_id && same(a.regions, b.regions) &&
         same(a.layers, b.layers);
}

// Status and message of f(), Ok and "" when it returns.
template <class F>
std::pair<Status, std::string> outcome(F&& f) {
  try {
    f();
    return {Status::Ok, ""};
  } catch (const Error& e) {
    return {e.status(), e.what()};
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Bytes b{data, size};
  const Key key{static_cast<int>(b.next(3)), static_cast<int>(b.next(3)), static_cast<int>(b.next(3)),
                static_cast<int>(b.next(4)), static_cast<int>(b.next(2)), static_cast<int>(b.next(3)),
                static_cast<int>(b.next(3)), static_cast<int>(b.next(2))};
  const Setup* s = setup_for(key);
  if (s == nullptr) return 0;
  const uint64_t bs = s->d.logical_block_size == 0 ? 1 : s->d.logical_block_size;

  // The request: a prompt of up to ~6 blocks, a hit of whole blocks mostly (sometimes not).
  const uint64_t prompt = b.wide(6 * bs + 2);
  uint64_t hit = b.next(4) * bs;
  if (b.next(8) == 0) hit += b.next(200);
  std::vector<std::vector<uint64_t>> local(s->groups.size()), remote(s->groups.size());
  for (size_t g = 0; g < s->groups.size(); ++g) {
    for (auto* list : {&local[g], &remote[g]}) {
      const uint64_t len = b.next(10);
      for (uint64_t i = 0; i < len; ++i) {
        const uint64_t pick = b.next(16);
        list->push_back(pick == 0 ? 0 : pick == 1 ? kPool + b.next(3) : pick % kPool);
      }
    }
  }
  std::vector<EngineRequestGroup> rgroups(s->groups.size() + (b.next(16) == 0 ? 1 : 0));
  for (size_t g = 0; g < rgroups.size() && g < s->groups.size(); ++g) rgroups[g] = {local[g], remote[g]};
  EngineRequest req;
  req.groups = rgroups;
  req.num_prompt_tokens = prompt;
  req.num_local_computed_tokens = hit;
  const EngineSide d{&s->d, s->d_spec}, p{&s->p.front(), s->p_spec};

  std::vector<PlanGroupView> views;
  std::vector<PlanGroup> owned;
  const auto v = outcome([&] { engine_request_views(s->groups, d, p, req, views); });
  const auto o = outcome([&] { owned = engine_request_groups(s->groups, d, p, req); });
  if (v != o) bug("engine_request_views and engine_request_groups disagree on the error");
  if (v.first != Status::Ok) return 0;
  if (views.size() != owned.size() || views.size() != s->groups.size()) bug("group counts differ");
  for (size_t g = 0; g < views.size(); ++g) {
    if (!inside(views[g].local_blocks, req.groups[g].local_block_ids)) bug("a view's local ids are not the caller's");
    if (!inside(views[g].remote_blocks, req.groups[g].remote_block_ids)) bug("a view's remote ids are not the caller's");
    if (!inside(views[g].regions, std::span<const uint32_t>(s->groups[g].regions))) bug("a view's regions are not the engine's");
    if (!same_view(views[g], view_of(owned[g]))) bug("a view differs from its owned group");
  }

  TransferPlan from_views, from_owned;
  std::vector<PlanGroupView> owned_views;
  for (const PlanGroup& g : owned) owned_views.push_back(view_of(g));
  const auto cv = outcome([&] { compile_transfer_plan_into(s->ctx, views, from_views, s->verdict); });
  const auto co = outcome([&] { compile_transfer_plan_into(s->ctx, owned_views, from_owned, s->verdict); });
  if (cv != co) bug("compiling views and owned groups disagree on the error");
  if (cv.first == Status::Ok && plan_to_json(from_views) != plan_to_json(from_owned)) bug("the plans differ");
  return 0;
}
