// Piece lists for transfer benchmarks: what D reads from one P rank, as (local offset, remote
// offset, length) triples over two flat working sets (D's buffer and P's buffer). The same list
// feeds every column of bench/executor_bench (raw UCX, ucx_perftest's size, memcpy, and later the
// executor), so each column moves exactly the same bytes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "pdkv/core/transfer_plan.hpp"

namespace pdkv::bench {

struct Piece {
  uint64_t local_offset = 0;   // into D's working set
  uint64_t remote_offset = 0;  // into P's working set
  uint64_t length = 0;
};

struct PieceList {
  std::string name;
  std::vector<Piece> pieces;
  uint64_t local_bytes = 0;   // D's working set
  uint64_t remote_bytes = 0;  // P's working set
  uint64_t bytes = 0;         // sum of lengths

  uint64_t min_piece() const {
    uint64_t m = UINT64_MAX;
    for (const Piece& p : pieces) m = std::min(m, p.length);
    return pieces.empty() ? 0 : m;
  }
  uint64_t max_piece() const {
    uint64_t m = 0;
    for (const Piece& p : pieces) m = std::max(m, p.length);
    return m;
  }
};

// working_set / piece pieces of `piece` bytes covering both working sets once: D writes them in
// order, P's offsets are a seeded permutation (blocks of a request are rarely adjacent on P), so
// no column can run from one cache-hot buffer.
inline PieceList spread_pieces(uint64_t piece, uint64_t working_set, uint64_t seed = 42) {
  if (piece == 0 || working_set < piece) throw std::invalid_argument("piece must be in (0, working_set]");
  const uint64_t n = working_set / piece;
  std::vector<uint64_t> order(n);
  for (uint64_t i = 0; i < n; ++i) order[i] = i;
  uint64_t s = seed;
  for (uint64_t i = n; i > 1; --i) {  // Fisher-Yates with splitmix64
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    std::swap(order[i - 1], order[z % i]);
  }
  PieceList pl;
  pl.name = std::to_string(piece >> 10) + " KiB pieces over " + std::to_string(working_set >> 20) + " MiB";
  for (uint64_t i = 0; i < n; ++i) pl.pieces.push_back({i * piece, order[i] * piece, piece});
  pl.local_bytes = pl.remote_bytes = n * piece;
  pl.bytes = n * piece;
  return pl;
}

// The reads of one P rank of a compiled plan, with each side's regions compacted back to back
// (region r occupies [min offset read, max end read) of itself): same piece sizes, same order,
// same relative placement within a region, without allocating the untouched rest of the pool.
inline PieceList plan_pieces(const core::RankReads& rank, std::string name) {
  struct Span {
    uint64_t lo = UINT64_MAX, hi = 0, base = 0;
  };
  std::map<uint32_t, Span> local, remote;
  for (const core::PlanRead& r : rank.reads) {
    Span& l = local[r.local_region];
    l.lo = std::min(l.lo, r.local_offset);
    l.hi = std::max(l.hi, r.local_offset + r.length);
    Span& m = remote[r.remote_region];
    m.lo = std::min(m.lo, r.remote_offset);
    m.hi = std::max(m.hi, r.remote_offset + r.length);
  }
  PieceList pl;
  pl.name = std::move(name);
  auto lay_out = [](std::map<uint32_t, Span>& spans) {
    uint64_t at = 0;
    for (auto& [region, s] : spans) {
      s.base = at;
      at += (s.hi - s.lo + 63) / 64 * 64;
    }
    return at;
  };
  pl.local_bytes = lay_out(local);
  pl.remote_bytes = lay_out(remote);
  for (const core::PlanRead& r : rank.reads) {
    const Span& l = local[r.local_region];
    const Span& m = remote[r.remote_region];
    pl.pieces.push_back({l.base + r.local_offset - l.lo, m.base + r.remote_offset - m.lo, r.length});
    pl.bytes += r.length;
  }
  return pl;
}

// The byte P's working set holds at `offset`: cheap to fill and to check, different in every
// byte of an aligned 8-byte word and in every word.
inline uint64_t pattern_word(uint64_t word_index) { return (word_index + 1) * 0x9E3779B97F4A7C15ull; }
inline uint8_t pattern_byte(uint64_t offset) {
  return static_cast<uint8_t>(pattern_word(offset >> 3) >> ((offset & 7) * 8));
}
inline void fill_pattern(uint8_t* buf, uint64_t bytes) {
  auto* w = reinterpret_cast<uint64_t*>(buf);
  for (uint64_t i = 0; i < bytes / 8; ++i) w[i] = pattern_word(i);
  for (uint64_t o = bytes / 8 * 8; o < bytes; ++o) buf[o] = pattern_byte(o);
}

// Index of the first piece whose bytes in `local` differ from P's pattern; -1 when all match.
inline int64_t first_wrong_piece(const PieceList& pl, const uint8_t* local) {
  for (size_t k = 0; k < pl.pieces.size(); ++k) {
    const Piece& p = pl.pieces[k];
    for (uint64_t i = 0; i < p.length; ++i)
      if (local[p.local_offset + i] != pattern_byte(p.remote_offset + i)) return static_cast<int64_t>(k);
  }
  return -1;
}

}  // namespace pdkv::bench
