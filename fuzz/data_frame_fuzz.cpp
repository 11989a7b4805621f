// Fuzzes the tcp data connection's receive path (executor/tcpdp/) with hostile bytes: the
// incremental FrameReader, fed in chunkings chosen by the first input byte, payloads consumed as
// they are announced (the agent receives them into checked memory or a sink).
// Oracles: the only error is pdkv::core::Error with Protocol; no single allocation during an input
// exceeds the descriptor buffer's bound (kMaxPieces descriptors, plus slack); a ready frame never
// announces more than kMaxBatchBytes of payload, lists at most kMaxPieces pieces, each 1 to
// kMaxBatchBytes bytes, and re-encodes to exactly the header and descriptor bytes it was read
// from. ASan/UBSan catch the rest.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "allocation_cap.hpp"
#include "pdkv/core/error.hpp"
#include "tcpdp/data_frame.hpp"

using namespace pdkv::exec::tcpdp;
using pdkv::core::Error;
using pdkv::core::Status;
using pdkv::fuzzing::Armed;
using pdkv::fuzzing::bug;
using pdkv::fuzzing::install;

namespace {

constexpr size_t kAllocationCap = kMaxPieces * kPieceBytes + (16u << 10);

void run(const uint8_t* data, size_t size) {
  if (size < 1) return;
  const size_t chunk = 1 + data[0] % 64;
  const uint8_t* p = data + 1;
  size_t left = size - 1;
  FrameReader r;
  std::vector<uint8_t> raw;  // the current frame's header and descriptor bytes, as read
  while (left > 0) {
    if (!r.ready()) {
      auto w = r.want();
      const size_t n = std::min({w.size(), chunk, left});
      std::memcpy(w.data(), p, n);
      raw.insert(raw.end(), p, p + n);
      p += n;
      left -= n;
      try {
        r.received(n);
      } catch (const Error& e) {
        if (e.status() != Status::Protocol) bug("the reader threw a non-Protocol status", e.what());
        return;
      }
      if (r.ready()) {
        if (r.payload_left() > kMaxBatchBytes) bug("a payload above a batch");
        if (r.pieces().size() > kMaxPieces) bug("more pieces than a batch");
        for (const Piece& x : r.pieces()) {
          if (x.length == 0 || x.length > kMaxBatchBytes) bug("a piece of a bad length");
        }
        const auto again = encode(r.header(), r.pieces());
        if (again != raw) bug("decode/encode is not canonical");
      }
    } else if (!r.complete()) {
      const uint64_t n = std::min<uint64_t>({r.payload_left(), chunk, left});
      r.payload_received(n);
      p += n;
      left -= n;
    }
    if (r.complete()) {
      r.next();
      raw.clear();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  install("data_frame_fuzz", kAllocationCap);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Armed armed;
  try {
    run(data, size);
  } catch (const std::exception& e) {
    bug("an exception escaped", e.what());
  }
  return 0;
}
