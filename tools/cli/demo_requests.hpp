// The demo's stream of requests: prompt lengths, D's prefix-cache hits and the block lists the
// two engines' schedulers would hand their connectors, drawn from a seeded generator so a run
// can be repeated. Blocks come from one pool per engine (the TP ranks of an engine share its
// block table), freed first in first out, so later requests get scattered ids as a busy engine's
// do.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "demo_layout.hpp"
#include "demo_options.hpp"
#include "pdkv/core/transfer_plan.hpp"

namespace pdkv::cli::demo {

enum class HitKind { None, Partial, Full };
const char* hit_kind_name(HitKind k);

// One group's lists as the connectors see them: D's blocks still to fill, P's blocks of the
// request. Attention lists hold kernel block ids, Mamba lists logical ids with 0 placeholders.
struct GroupLists {
  core::GroupKind kind = core::GroupKind::Attention;
  core::MambaCacheMode mode = core::MambaCacheMode::None;
  std::vector<uint64_t> d, p;
  std::vector<uint32_t> regions;
};

struct Request {
  uint32_t index = 0;
  std::string id;
  uint64_t tokens = 0;    // prompt tokens
  uint64_t computed = 0;  // tokens P computes and D loads (all but the last for hybrids)
  uint64_t hit = 0;       // tokens D already holds
  HitKind kind = HitKind::None;
  bool placeholders = false;  // a Mamba list carries null placeholders (align mode)
  std::vector<GroupLists> groups;
  std::vector<uint64_t> d_blocks, p_blocks;  // logical blocks taken from each pool
};

class BlockPool {
 public:
  // Logical blocks 1 .. count-1 (0 is the null block).
  explicit BlockPool(uint64_t count);
  uint64_t available() const { return free_.size(); }
  std::vector<uint64_t> take(uint64_t n);  // n <= available()
  void give(const std::vector<uint64_t>& blocks);

 private:
  std::deque<uint64_t> free_;
};

class RequestStream {
 public:
  RequestStream(const Options& o, const Layout& l);
  // Draws the next request's shape (tokens and hit); blocks are taken by build().
  Request next();
  uint64_t d_blocks_needed(const Request& r) const;
  uint64_t p_blocks_needed(const Request& r) const;
  // Fills r's lists from the pools (enough blocks must be available).
  void build(Request& r, BlockPool& d, BlockPool& p) const;

 private:
  uint64_t draw();
  const Options& o_;
  const Layout& l_;
  uint64_t state_;
  uint32_t index_ = 0;
};

// The request message both engines' ranks receive.
nlohmann::json request_message(const Request& r);

// What a rank makes of a request message.
struct RankRequest {
  std::string id;
  std::vector<core::PlanGroup> groups;
  // D's kernel blocks of the request (attention ids, and every kernel block of each Mamba slot),
  // sorted, distinct: what D's verification covers.
  std::vector<uint64_t> d_kernel_blocks;
};
RankRequest parse_request(const nlohmann::json& msg, const Layout& l);

}  // namespace pdkv::cli::demo
