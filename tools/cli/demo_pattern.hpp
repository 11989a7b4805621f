// The bytes every demo rank's memory holds: a pattern derived from (engine, rank, region, offset),
// so a D rank can tell, for any byte it holds, what it must be — P's byte at the offset a read
// names, or its own untouched byte — without a copy of anyone's memory. A byte moved to the wrong
// offset, from the wrong rank or region, or written where no read points differs from what it
// is checked against (the pattern never repeats within a region, nor across ranks and regions,
// except by a 2^-8 chance per byte that a 64-bit word check does not share).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace pdkv::cli::demo {

// The pattern's stream for one region of one rank: `side` 0 for P, 1 for D.
struct Stream {
  uint64_t seed = 0;
  static Stream of(uint32_t side, uint32_t rank, uint32_t region);
};

// Writes the stream's bytes [offset, offset + len) to dst.
void fill(uint8_t* dst, Stream s, uint64_t offset, uint64_t len);

// The first i < len where src[i] differs from the stream's byte at offset + i, or nullopt.
std::optional<uint64_t> first_mismatch(const uint8_t* src, Stream s, uint64_t offset, uint64_t len);

}  // namespace pdkv::cli::demo
