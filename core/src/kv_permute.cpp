// In-place transpose of a KV block between HND and NHD (kv_permute.hpp).
#include "pdkv/core/kv_permute.hpp"

#include <cstring>
#include <string>
#include <vector>

#include "pdkv/core/checked_math.hpp"
#include "pdkv/core/error.hpp"

namespace pdkv::core {

void permute_kv_block(std::span<uint8_t> block, const BlockPermute& p) {
  if (p.heads == 0 || p.tokens == 0 || p.head_bytes == 0) {
    fail(Status::InvalidArgument, "KV block permutation shape " + std::to_string(p.heads) + " heads x " +
                                      std::to_string(p.tokens) + " tokens x " + std::to_string(p.head_bytes) +
                                      " bytes has a zero dimension");
  }
  const uint64_t bytes = mul_checked(mul_checked(p.heads, p.tokens, "KV block"), p.head_bytes, "KV block");
  if (block.size() != bytes) {
    fail(Status::InvalidArgument, "KV block of " + std::to_string(block.size()) + " bytes is not " +
                                      std::to_string(p.heads) + " heads x " + std::to_string(p.tokens) +
                                      " tokens x " + std::to_string(p.head_bytes) + " bytes = " +
                                      std::to_string(bytes));
  }
  if (!p.active() || p.heads == 1 || p.tokens == 1) return;  // the same bytes in either layout
  // Through a copy of the block: a block is at most a few MiB, and the copy keeps the index math
  // one line per layout.
  thread_local std::vector<uint8_t> src;
  src.assign(block.begin(), block.end());
  const uint64_t hb = p.head_bytes;
  for (uint64_t h = 0; h < p.heads; ++h) {
    for (uint64_t t = 0; t < p.tokens; ++t) {
      const uint64_t hnd = (h * p.tokens + t) * hb, nhd = (t * p.heads + h) * hb;
      const uint64_t from = p.from == KvLayout::HND ? hnd : nhd, to = p.to == KvLayout::HND ? hnd : nhd;
      std::memcpy(block.data() + to, src.data() + from, hb);
    }
  }
}

}  // namespace pdkv::core
