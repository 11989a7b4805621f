// Fuzzes the tcp data connection's receive path (executor/tcpdp/) with hostile bytes: the
// incremental FrameReader, fed in chunkings chosen by the first input byte (its low 6 bits),
// payloads consumed as they are announced (the agent receives them into checked memory or a
// sink). The first byte's top 2 bits pick the mode: 0 and 1 a clear reader; 2 a sealed reader
// (data_seal.hpp) fed the raw bytes, as an on-path attacker without the key would; 3 a clear
// reader whose every complete frame is then sealed (encode_sealed) and read back by a sealed
// reader, once as sealed and once with one byte flipped (position chosen by the frame).
// Oracles: the only error is pdkv::core::Error with Protocol; no single allocation made by a
// reader during an input exceeds the descriptor buffer's bound (kMaxPieces descriptors, plus
// slack); a ready frame never announces more than kMaxBatchBytes of payload, lists at most
// kMaxPieces pieces, each 1 to kMaxBatchBytes bytes, and (clear) re-encodes to exactly the header
// and descriptor bytes it was read from; a sealed frame reads back as the same header, pieces and
// payload, and with any byte flipped it is Protocol before it is complete. ASan/UBSan catch the
// rest.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "allocation_cap.hpp"
#include "pdkv/core/error.hpp"
#include "tcpdp/data_frame.hpp"
#include "tcpdp/data_seal.hpp"

using namespace pdkv::exec::tcpdp;
using pdkv::core::Error;
using pdkv::core::Status;
using pdkv::fuzzing::Armed;
using pdkv::fuzzing::bug;
using pdkv::fuzzing::g_cap;
using pdkv::fuzzing::install;

namespace {

constexpr size_t kAllocationCap = kMaxPieces * kPieceBytes + (16u << 10);

const RecordKey kKey = [] {
  RecordKey k{};
  for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<uint8_t>(0xA5 ^ i);
  return k;
}();

// Reads `wire` (one sealed frame) with a fresh sealed reader; the frame's header, pieces and
// payload (decrypted in place in `wire`) must be `h`, `pieces`, `payload`. With `flip` the read
// must fail with Protocol before the frame completes.
void read_sealed(std::vector<uint8_t>& wire, const Header& h, const std::vector<Piece>& pieces,
                 const std::vector<uint8_t>& payload, bool flip) {
  FrameReader r(kKey);
  size_t at = 0;
  size_t got = 0;
  try {
    while (!r.complete()) {
      if (at == wire.size()) bug("a sealed frame ended early");
      if (auto w = r.want(); !w.empty()) {
        const size_t n = std::min(w.size(), wire.size() - at);
        std::memcpy(w.data(), wire.data() + at, n);
        at += n;
        r.received(n);
      } else {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(r.payload_chunk(), wire.size() - at));
        r.payload_received(std::span<uint8_t>(wire.data() + at, n));
        if (!flip && std::memcmp(wire.data() + at, payload.data() + got, n) != 0) bug("sealed payload read back differs");
        at += n;
        got += n;
      }
    }
  } catch (const Error& e) {
    if (e.status() != Status::Protocol) bug("the sealed reader threw a non-Protocol status", e.what());
    if (!flip) bug("a sealed frame did not read back", e.what());
    return;
  }
  if (flip) bug("a sealed frame with a flipped byte completed");
  if (r.header().type != h.type || r.header().batch != h.batch || r.header().status != h.status) {
    bug("sealed header read back differs");
  }
  if (r.pieces() != pieces || got != payload.size() || at != wire.size()) bug("sealed frame read back differs");
}

void reseal(const Header& h, const std::vector<Piece>& pieces, const std::vector<uint8_t>& payload) {
  g_cap.armed = false;  // the oracle's own buffers (a whole sealed frame) are not judged
  RecordCipher c(kKey, RecordCipher::Mode::Seal);
  std::vector<uint8_t> wire = encode_sealed(c, h, pieces, payload);
  if (wire.size() != kHeaderBytes + kTagBytes + (pieces.empty() ? 0 : pieces.size() * kPieceBytes + kTagBytes) +
                         sealed_payload_bytes(payload.size())) {
    bug("a sealed frame of an unexpected size");
  }
  std::vector<uint8_t> flipped = wire;
  const size_t at = (h.batch ^ payload.size()) % flipped.size();
  flipped[at] ^= static_cast<uint8_t>(1u << (h.batch % 8));
  g_cap.armed = true;
  read_sealed(wire, h, pieces, payload, false);
  read_sealed(flipped, h, pieces, payload, true);
}

void run(const uint8_t* data, size_t size) {
  if (size < 1) return;
  const size_t chunk = 1 + (data[0] & 63);
  const unsigned mode = data[0] >> 6;
  const uint8_t* p = data + 1;
  size_t left = size - 1;
  FrameReader r = mode == 2 ? FrameReader(kKey) : FrameReader();
  std::vector<uint8_t> raw;  // the current frame's header and descriptor bytes, as read (clear)
  std::vector<uint8_t> buf;  // payload bytes handed to the reader (decrypted there when sealed)
  std::vector<uint8_t> payload;  // mode 3: the current frame's payload
  while (left > 0) {
    if (auto w = r.want(); !w.empty()) {
      const bool was_ready = r.ready();
      const size_t n = std::min({w.size(), chunk, left});
      std::memcpy(w.data(), p, n);
      if (!was_ready) raw.insert(raw.end(), p, p + n);
      p += n;
      left -= n;
      try {
        r.received(n);
      } catch (const Error& e) {
        if (e.status() != Status::Protocol) bug("the reader threw a non-Protocol status", e.what());
        return;
      }
      if (!was_ready && r.ready()) {
        if (r.payload_left() > kMaxBatchBytes) bug("a payload above a batch");
        if (r.pieces().size() > kMaxPieces) bug("more pieces than a batch");
        for (const Piece& x : r.pieces()) {
          if (x.length == 0 || x.length > kMaxBatchBytes) bug("a piece of a bad length");
        }
        if (!r.sealed()) {
          const auto again = encode(r.header(), r.pieces());
          if (again != raw) bug("decode/encode is not canonical");
        }
      }
    } else if (!r.complete()) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>({r.payload_chunk(), chunk, left}));
      if (n == 0) bug("a payload wanted but no chunk offered");
      buf.assign(p, p + n);
      try {
        r.payload_received(buf);
      } catch (const Error& e) {
        bug("payload_received threw", e.what());
      }
      if (mode == 3) {
        g_cap.armed = false;  // the oracle's copy of the payload is not judged
        payload.insert(payload.end(), p, p + n);
        g_cap.armed = true;
      }
      p += n;
      left -= n;
    }
    if (r.complete()) {
      if (mode == 3) reseal(r.header(), r.pieces(), payload);
      r.next();
      raw.clear();
      payload.clear();
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
