// The KV-cache groups an engine forms from a model's layers, as vLLM's hybrid KV-cache manager
// forms them: which layers share a group, which region (registered tensor) each layer of a group
// uses, the groups' kinds and their order. The engine-level C API (pdkv/engine.h) derives a
// request's per-group block lists from them.
#pragma once

#include <cstdint>
#include <vector>

#include "pdkv/core/block_ids.hpp"
#include "pdkv/core/model.hpp"

namespace pdkv::core {

// One group: layers of one kind; its i-th layer uses region i. Under the hybrid manager every
// region is shared by the layers at the same position of every group, so a model registers as
// many regions as its largest group has layers.
struct KvCacheGroup {
  GroupKind kind = GroupKind::Attention;
  std::vector<uint32_t> layers;   // model layer indexes, ascending
  std::vector<uint32_t> regions;  // 0 .. layers.size()-1
  friend bool operator==(const KvCacheGroup&, const KvCacheGroup&) = default;
};

// The uniform-page grouping (re-derived from the hybrid manager's rule): with a = attention
// layers ('*' and 'P') and m = Mamba layers ('M' and 'P', a parallel layer counting as both,
// attention first), the group size is the largest per-kind count when it is below 1.25 times
// the smallest (one padded group per kind beats many), else the smallest; each kind's layers are
// dealt round-robin into ceil(count / size) groups (group i of a kind takes its layers i, i + n,
// i + 2n, ...). Kinds come in the order their first layer appears. A pure attention model is one
// group of every attention layer. Errors (InvalidArgument, each naming the model and saying to
// use the low-level calls with the engine's own grouping): an unknown layer pattern,
// sliding-window attention, MLA-typed layers in a GQA model, no attention layer, a pattern
// disagreeing with the Mamba type.
std::vector<KvCacheGroup> kv_cache_groups(const ModelDesc& m);

// Regions an engine of the model registers: the size of its largest group.
uint32_t kv_cache_regions(const std::vector<KvCacheGroup>& groups);

}  // namespace pdkv::core
