#include "demo_requests.hpp"

#include <algorithm>

#include "pdkv/core/scheduler.hpp"

namespace pdkv::cli::demo {

using core::GroupKind;

namespace {

uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

const char* kind_text(GroupKind k) { return k == GroupKind::Mamba ? "mamba" : "attention"; }

}  // namespace

const char* hit_kind_name(HitKind k) {
  switch (k) {
    case HitKind::None:
      return "none";
    case HitKind::Partial:
      return "partial";
    case HitKind::Full:
      return "full";
  }
  return "none";
}

BlockPool::BlockPool(uint64_t count) {
  for (uint64_t b = 1; b < count; ++b) free_.push_back(b);
}

std::vector<uint64_t> BlockPool::take(uint64_t n) {
  std::vector<uint64_t> out(free_.begin(), free_.begin() + static_cast<std::ptrdiff_t>(n));
  free_.erase(free_.begin(), free_.begin() + static_cast<std::ptrdiff_t>(n));
  return out;
}

void BlockPool::give(const std::vector<uint64_t>& blocks) { free_.insert(free_.end(), blocks.begin(), blocks.end()); }

RequestStream::RequestStream(const Options& o, const Layout& l) : o_(o), l_(l), state_(o.seed) {}

uint64_t RequestStream::draw() {  // splitmix64
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

Request RequestStream::next() {
  Request r;
  r.index = index_++;
  r.id = "req-" + std::to_string(r.index);
  r.tokens = o_.min_tokens + draw() % (o_.max_tokens - o_.min_tokens + 1);
  r.computed = core::d_num_new_matched_tokens(r.tokens, 0, l_.model.is_hybrid());
  const uint64_t bd = l_.decode.geo.block_size;
  const uint64_t u = draw() % 100;
  if (u < o_.full_hit_rate) {
    r.kind = HitKind::Full;
    r.hit = r.computed;
  } else if (u < o_.full_hit_rate + o_.partial_hit_rate) {
    // D's cache hits whole blocks (its Mamba states are cached at block boundaries in align
    // mode), and leaves at least one token for P; a prompt within one block cannot hit partly.
    const uint64_t whole = (r.computed - 1) / bd;
    if (whole > 0) {
      r.kind = HitKind::Partial;
      r.hit = bd * (1 + draw() % whole);
    }
  }
  return r;
}

uint64_t RequestStream::d_blocks_needed(const Request& r) const {
  size_t mamba = 0;
  for (const auto& g : l_.groups) mamba += g.kind == GroupKind::Mamba;
  const uint64_t bd = l_.decode.geo.block_size;
  return ceil_div(r.tokens, bd) - r.hit / bd + mamba;
}

uint64_t RequestStream::p_blocks_needed(const Request& r) const {
  size_t mamba = 0;
  for (const auto& g : l_.groups) mamba += g.kind == GroupKind::Mamba;
  return ceil_div(r.computed, l_.prefill.geo.block_size) + mamba;
}

void RequestStream::build(Request& r, BlockPool& d, BlockPool& p) const {
  const uint64_t bd = l_.decode.geo.block_size, bp = l_.prefill.geo.block_size;
  // D allocates blocks for the whole prompt past its hit; P holds what it computed.
  const uint64_t d_positions = ceil_div(r.tokens, bd) - r.hit / bd;
  const uint64_t p_positions = ceil_div(r.computed, bp);
  r.d_blocks = d.take(d_blocks_needed(r));
  r.p_blocks = p.take(p_blocks_needed(r));
  size_t di = 0, pi = 0;
  for (const auto& g : l_.groups) {
    GroupLists gl;
    gl.kind = g.kind;
    gl.regions = g.regions;
    if (g.kind == GroupKind::Attention) {
      const uint64_t dppl = l_.decode.geo.physical_per_logical, pppl = l_.prefill.geo.physical_per_logical;
      for (uint64_t i = 0; i < d_positions; ++i) {
        for (uint64_t k = 0; k < dppl; ++k) gl.d.push_back(r.d_blocks[di] * dppl + k);
        ++di;
      }
      for (uint64_t i = 0; i < p_positions; ++i) {
        for (uint64_t k = 0; k < pppl; ++k) gl.p.push_back(r.p_blocks[pi] * pppl + k);
        ++pi;
      }
    } else {
      // One running state per request. In align mode the list has a slot per block position
      // with the null block in every position but the last, as vLLM's scheduler hands it over.
      gl.mode = l_.cache_mode;
      const bool align = l_.cache_mode == core::MambaCacheMode::Align;
      if (align) {
        gl.d.assign(d_positions - 1, core::kNullBlock);
        gl.p.assign(p_positions - 1, core::kNullBlock);
        r.placeholders = r.placeholders || d_positions > 1 || p_positions > 1;
      }
      gl.d.push_back(r.d_blocks[di++]);
      gl.p.push_back(r.p_blocks[pi++]);
    }
    r.groups.push_back(std::move(gl));
  }
}

nlohmann::json request_message(const Request& r) {
  nlohmann::json groups = nlohmann::json::array();
  for (const auto& g : r.groups) {
    groups.push_back({{"kind", kind_text(g.kind)},
                      {"mode", static_cast<int>(g.mode)},
                      {"d", g.d},
                      {"p", g.p},
                      {"regions", g.regions}});
  }
  return {{"type", "request"}, {"id", r.id}, {"computed", r.computed}, {"hit", r.hit}, {"groups", groups}};
}

RankRequest parse_request(const nlohmann::json& msg, const Layout& l) {
  RankRequest out;
  out.id = msg.at("id").get<std::string>();
  const uint64_t computed = msg.at("computed").get<uint64_t>();
  const uint64_t hit = msg.at("hit").get<uint64_t>();
  const uint64_t dppl = l.decode.geo.physical_per_logical;
  for (const auto& g : msg.at("groups")) {
    core::PlanGroup pg;
    pg.trim.kind = g.at("kind").get<std::string>() == "mamba" ? GroupKind::Mamba : GroupKind::Attention;
    pg.trim.cache_mode = static_cast<core::MambaCacheMode>(g.at("mode").get<int>());
    pg.trim.local_blocks = g.at("d").get<std::vector<uint64_t>>();
    pg.trim.remote_blocks = g.at("p").get<std::vector<uint64_t>>();
    pg.trim.remote_computed_tokens = computed;
    pg.trim.local_hit_tokens = hit;
    pg.regions = g.at("regions").get<std::vector<uint32_t>>();
    for (uint64_t b : pg.trim.local_blocks) {
      if (b == core::kNullBlock) continue;
      if (pg.trim.kind == GroupKind::Mamba) {
        for (uint64_t k = 0; k < dppl; ++k) out.d_kernel_blocks.push_back(b * dppl + k);
      } else {
        out.d_kernel_blocks.push_back(b);
      }
    }
    out.groups.push_back(std::move(pg));
  }
  std::sort(out.d_kernel_blocks.begin(), out.d_kernel_blocks.end());
  out.d_kernel_blocks.erase(std::unique(out.d_kernel_blocks.begin(), out.d_kernel_blocks.end()),
                            out.d_kernel_blocks.end());
  return out;
}

}  // namespace pdkv::cli::demo
