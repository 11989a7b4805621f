// Bounds checks of a plan's reads against registered memory, run before any byte moves. A read
// names (region, offset, length) on each side; each side's region must be registered (locally:
// by this agent; remotely: advertised with a key by the authenticated peer) and the range must
// lie inside it. Offsets come from plans that a caller or a peer's metadata shaped, so every sum
// is overflow-checked.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace pdkv::exec {

// One side's view of a region: registered [base, base + length), or absent.
struct RegisteredRange {
  uint64_t base = 0;
  uint64_t length = 0;
  bool present = false;
  bool device = false;  // CUDA device memory: reachable over the tcp data connection only
};

// Where a read sits in its plan, for messages.
struct ReadRef {
  uint32_t p_rank = 0;
  uint64_t index = 0;
};

// The absolute address of [offset, offset + length) of `region` on one side, or
// Error(OutOfBounds) naming the read, the side ("local"/"remote"), the region, the range and
// the registered size (or that the region is not registered / does not exist).
uint64_t checked_address(ReadRef read, std::string_view side, uint32_t region,
                         std::span<const RegisteredRange> regions, uint64_t offset,
                         uint64_t length);

}  // namespace pdkv::exec
