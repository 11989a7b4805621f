#include "pdkv/core/kv_cache_groups.hpp"

#include <algorithm>
#include <string>

#include "pdkv/core/error.hpp"

namespace pdkv::core {

namespace {

std::string model_name(const ModelDesc& m) { return m.name.empty() ? std::string("the model") : "model '" + m.name + "'"; }

[[noreturn]] void unsupported(const ModelDesc& m, const std::string& why) {
  fail(Status::InvalidArgument, model_name(m) + " " + why +
                                    ": pdkv cannot form its KV-cache groups; describe the groups yourself and "
                                    "use the low-level calls (pdkv_engine_metadata_from_model, "
                                    "pdkv_plan_context_new, pdkv_transfer_plan_compile)");
}

}  // namespace

std::vector<KvCacheGroup> kv_cache_groups(const ModelDesc& m) {
  if (m.layer_pattern.empty()) unsupported(m, "has no layer pattern (the kind of each layer is unknown)");
  if (m.attention.sliding_window != 0) {
    unsupported(m, "uses sliding-window attention (window " + std::to_string(m.attention.sliding_window) +
                       " tokens), whose groups depend on per-layer windows");
  }
  if (m.mixes_mla()) unsupported(m, "has MLA-typed layers beside GQA ones (layer kind 'L')");
  std::vector<GroupKind> order;
  std::vector<uint32_t> attention, mamba;
  auto seen = [&](GroupKind k) {
    if (std::find(order.begin(), order.end(), k) == order.end()) order.push_back(k);
  };
  for (uint32_t i = 0; i < m.layer_pattern.size(); ++i) {
    const char c = m.layer_pattern[i];
    if (c == kLayerAttention || c == kLayerParallel) {
      attention.push_back(i);
      seen(GroupKind::Attention);
    }
    if (c == kLayerMamba || c == kLayerParallel) {
      mamba.push_back(i);
      seen(GroupKind::Mamba);
    }
  }
  if (attention.empty()) unsupported(m, "has no attention layer in its layer pattern '" + m.layer_pattern + "'");
  if (m.is_hybrid() == mamba.empty()) {
    unsupported(m, "has a layer pattern '" + m.layer_pattern + "' that disagrees with its Mamba type " +
                       (m.is_hybrid() ? "(no 'M' or 'P' layer)" : "(Mamba layers in a pure attention model)"));
  }
  size_t smallest = attention.size(), largest = attention.size();
  if (!mamba.empty()) {
    smallest = std::min(smallest, mamba.size());
    largest = std::max(largest, mamba.size());
  }
  // Few enough layers beyond the smallest kind: one group per kind, padded, beats many groups.
  const size_t size = largest * 4 < smallest * 5 ? largest : smallest;
  std::vector<KvCacheGroup> out;
  for (GroupKind k : order) {
    const auto& layers = k == GroupKind::Attention ? attention : mamba;
    const size_t n = (layers.size() + size - 1) / size;
    for (size_t g = 0; g < n; ++g) {
      KvCacheGroup grp;
      grp.kind = k;
      for (size_t i = g; i < layers.size(); i += n) grp.layers.push_back(layers[i]);
      for (uint32_t r = 0; r < grp.layers.size(); ++r) grp.regions.push_back(r);
      out.push_back(std::move(grp));
    }
  }
  return out;
}

uint32_t kv_cache_regions(const std::vector<KvCacheGroup>& groups) {
  size_t n = 0;
  for (const auto& g : groups) n = std::max(n, g.layers.size());
  return static_cast<uint32_t>(n);
}

}  // namespace pdkv::core
