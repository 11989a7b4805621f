// A minimal planner for the attention part of a request in *factored* form, for bench/plan_floor:
// instead of one read per (span, region, P rank), it emits the request's token extents once
// (D position, P position, length: where both sides' ids are consecutive), and the reads are
// those extents under each (region, P rank) template of the context, a product an executor
// would walk when it posts them. What it costs to produce and check such a plan on a request's
// ids estimates what pdkv's attention part could take if its plan had that form; it is not the
// library's planner (no Mamba, no SWA window, no kernel-block expansion, no permutation).
//
// The check is a second derivation, independent of the emitter: it maps every listed id back to
// its position in its side's list (refusing an id listed twice, which also makes D's writes
// disjoint) and then proves, extent by extent, that D's and P's token positions agree, that every
// block inside an extent is the next one of its side's list, and that the extents cover exactly
// the tokens to load.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace pdkv::bench {

struct TokenExtent {
  uint64_t d_block = 0, d_token = 0;  // D's first block id and the token in it the extent starts at
  uint64_t p_block = 0, p_token = 0;  // likewise on P
  uint64_t tokens = 0;
};

class FactoredFloor {
 public:
  FactoredFloor(uint64_t d_pool, uint64_t p_pool) : d_slot_(d_pool), p_slot_(p_pool) {}

  // D's ids hold tokens [hit_tokens, end) from their first id on; P's ids hold [0, end).
  // Returns false where the request is refused (an id out of its pool, too few ids); extents
  // are reused between calls. Only blocks of one size on both sides with the hit on a block
  // boundary (bench/plan_request.hpp's requests) are modelled: a loop over id pairs.
  bool compile(std::span<const uint64_t> d_ids, std::span<const uint64_t> p_ids, uint64_t d_block,
               uint64_t p_block, uint64_t hit_tokens, uint64_t end, std::vector<TokenExtent>& extents) {
    extents.clear();
    if (end <= hit_tokens) return true;
    const uint64_t d_pool = d_slot_.size(), p_pool = p_slot_.size();
    if (d_block == p_block && hit_tokens % d_block == 0) {  // the benchmark's requests
      const uint64_t n = (end - hit_tokens + d_block - 1) / d_block, p0 = hit_tokens / d_block;
      if (d_ids.size() < n || p_ids.size() < p0 + n) return false;
      const uint64_t* d = d_ids.data();
      const uint64_t* p = p_ids.data() + p0;
      uint64_t bad = 0;
      size_t first = 0;
      for (size_t i = 1; i <= n; ++i) {
        if (i < n && d[i] == d[i - 1] + 1 && p[i] == p[i - 1] + 1) continue;
        extents.push_back({d[first], 0, p[first], 0, (i - first) * d_block});
        // A run's last id is its largest (an id that wraps past 2^64 - 1 is left to check(),
        // which looks every id up in its pool).
        bad |= (d[i - 1] >= d_pool) | (p[i - 1] >= p_pool);
        first = i;
      }
      extents.back().tokens -= n * d_block - (end - hit_tokens);
      return bad == 0;
    }
    return false;  // not modelled: the benchmark's requests have one block size on both sides
  }

  // The independent check of compile's extents.
  bool check(std::span<const uint64_t> d_ids, std::span<const uint64_t> p_ids, uint64_t d_block,
             uint64_t p_block, uint64_t hit_tokens, uint64_t end, std::span<const TokenExtent> extents) {
    ++gen_;
    if (!index(d_ids, d_slot_) || !index(p_ids, p_slot_)) return false;
    uint64_t next = hit_tokens;
    const uint64_t d_pool = d_slot_.size(), p_pool = p_slot_.size();
    for (const TokenExtent& e : extents) {
      if (e.tokens == 0 || e.d_token >= d_block || e.p_token >= p_block) return false;
      if (e.d_block >= d_pool || e.p_block >= p_pool) return false;
      const Slot ds = d_slot_[e.d_block], ps = p_slot_[e.p_block];
      if (ds.gen != gen_ || ps.gen != gen_) return false;  // a block not listed
      const uint64_t td = hit_tokens + ds.index * d_block + e.d_token;
      if (td != next || td != ps.index * p_block + e.p_token) return false;
      next = td + e.tokens;
      // Every block the extent enters after its first must be its side's next listed id.
      // (No division for the usual extent, which stays inside one block on each side.)
      const uint64_t d_more = e.d_token + e.tokens <= d_block ? 0 : (e.d_token + e.tokens - 1) / d_block;
      const uint64_t p_more = e.p_token + e.tokens <= p_block ? 0 : (e.p_token + e.tokens - 1) / p_block;
      if (d_more >= d_pool - e.d_block || p_more >= p_pool - e.p_block) return false;
      for (uint64_t k = 1; k <= d_more; ++k) {
        const Slot& s = d_slot_[e.d_block + k];
        if (s.gen != gen_ || s.index != ds.index + k) return false;
      }
      for (uint64_t k = 1; k <= p_more; ++k) {
        const Slot& s = p_slot_[e.p_block + k];
        if (s.gen != gen_ || s.index != ps.index + k) return false;
      }
    }
    return next == end;
  }

 private:
  struct Slot {
    uint64_t gen = 0;
    uint64_t index = 0;
  };

  // Each listed id's position in its list; an id listed twice (D writing a block twice) or out
  // of its pool is refused.
  bool index(std::span<const uint64_t> ids, std::vector<Slot>& slots) {
    const uint64_t pool = slots.size(), gen = gen_;
    Slot* s = slots.data();
    for (size_t i = 0; i < ids.size(); ++i) {
      const uint64_t id = ids[i];
      if (id >= pool || s[id].gen == gen) return false;
      s[id] = {gen, i};
    }
    return true;
  }

  std::vector<Slot> d_slot_, p_slot_;
  uint64_t gen_ = 0;
};

}  // namespace pdkv::bench
