// Fuzzes the control channel's receive path with hostile bytes (they come from the network): the
// incremental FrameDecoder, fed in random chunkings, and every message decoder.
// Input: one mode byte, one seed byte, then the body.
//   mode bit 0 clear: the body is a byte stream; it is fed to a FrameDecoder in chunks whose
//     sizes come from the seed, and every frame that comes out goes to its message decoder.
//   mode bit 0 set: the body is a payload, sealed into a valid frame of type
//     (seed % kLastFrameType) + 1, so
//     mutations reach the message decoder through the frame path instead of dying at the CRC.
// In both modes the body also goes to every message decoder directly, and through the sealed
// path a keyed connection uses after the proofs (session_crypto.hpp): presented as a sealed
// payload it must fail to open with Protocol (forging the 16-byte tag is out of reach), and
// sealed under a session key it must open to itself.
// Oracles: the only error is pdkv::core::Error with Protocol (anything else, std::bad_alloc
// included, is a bug); no single allocation during an input exceeds the frame limit (plus
// slack), so a peer can never make pdkv allocate beyond it; the decoder never holds a partial
// frame above header + kMaxFramePayload; a sealed frame comes out intact; every message that
// decodes re-encodes to exactly its input (the encoding is canonical). ASan/UBSan catch the rest.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "control/frame.hpp"
#include "control/messages.hpp"
#include "control/session_crypto.hpp"
#include "allocation_cap.hpp"
#include "pdkv/core/error.hpp"

using namespace pdkv::exec;
using pdkv::core::Error;
using pdkv::core::Status;
using pdkv::fuzzing::Armed;
using pdkv::fuzzing::bug;
using pdkv::fuzzing::install;

namespace {

constexpr size_t kAllocationCap = kMaxFramePayload + (64u << 10);

template <class M>
void decode_message(std::span<const uint8_t> bytes) {
  M m;
  try {
    m = M::decode(bytes);
  } catch (const Error& e) {
    if (e.status() != Status::Protocol) bug("message decode threw a non-Protocol status", e.what());
    return;
  } catch (const std::exception& e) {
    bug("message decode threw a non-pdkv exception", e.what());
  }
  std::vector<uint8_t> again;
  try {
    again = m.encode();
  } catch (const std::exception& e) {
    bug("encode refused a decoded message", e.what());
  }
  if (again.size() != bytes.size() || !std::equal(again.begin(), again.end(), bytes.begin())) {
    bug("decode/encode is not canonical for", frame_type_name(M::kType));
  }
}

void decode_as(FrameType type, std::span<const uint8_t> payload) {
  switch (type) {
    case FrameType::Hello: return decode_message<Hello>(payload);
    case FrameType::Challenge: return decode_message<Challenge>(payload);
    case FrameType::Proof: return decode_message<Proof>(payload);
    case FrameType::PeerInfo: return decode_message<PeerInfo>(payload);
    case FrameType::Ready: return decode_message<Ready>(payload);
    case FrameType::Reject: return decode_message<Reject>(payload);
    case FrameType::Notify: return decode_message<Notify>(payload);
    case FrameType::Ping: return decode_message<Ping>(payload);
    case FrameType::Pong: return decode_message<Pong>(payload);
    case FrameType::Error: return decode_message<ErrorMessage>(payload);
    case FrameType::Bye: return decode_message<Bye>(payload);
    case FrameType::Transport: return decode_message<TransportOffer>(payload);
    case FrameType::KeepLeases: return decode_message<KeepLeases>(payload);
    case FrameType::LeaseQuery: return decode_message<LeaseQuery>(payload);
    case FrameType::LeaseAnswer: return decode_message<LeaseAnswer>(payload);
  }
  bug("decoder produced a frame of unknown type");
}

void check_bounds(const FrameDecoder& d) {
  if (d.partial_bytes() > kFrameHeaderBytes + kMaxFramePayload) bug("decoder holds an oversized partial frame");
}

// Feeds `stream` in chunks of 1..64 bytes (or larger runs) drawn from `seed`; returns the frames.
std::vector<Frame> feed_chunked(std::span<const uint8_t> stream, uint8_t seed) {
  FrameDecoder d;
  std::vector<Frame> frames;
  uint32_t state = 0x9E3779B9u ^ seed;
  size_t at = 0;
  try {
    while (at < stream.size()) {
      state ^= state << 13;
      state ^= state >> 17;
      state ^= state << 5;
      const size_t want = (state & 0x100) ? (state & 0xFFF) + 1 : (state & 0x3F) + 1;
      const size_t n = std::min(want, stream.size() - at);
      d.feed(stream.data() + at, n);
      at += n;
      check_bounds(d);
      while (std::optional<Frame> f = d.next()) frames.push_back(std::move(*f));
    }
  } catch (const Error& e) {
    if (e.status() != Status::Protocol) bug("FrameDecoder threw a non-Protocol status", e.what());
    // A failed decoder stays failed.
    bool refused = false;
    try {
      d.feed(stream.data(), 0);
    } catch (const Error&) {
      refused = true;
    }
    if (!refused) bug("FrameDecoder accepted bytes after a Protocol error");
  } catch (const std::exception& e) {
    bug("FrameDecoder threw a non-pdkv exception", e.what());
  }
  return frames;
}

const SealKey kFuzzKey = [] {
  SealKey k{};
  for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<uint8_t>(i * 7 + 1);
  return k;
}();

void sealed_path(uint16_t type, std::span<const uint8_t> body) {
  try {
    FrameSealer opener(kFuzzKey);
    (void)opener.open(type, kFrameVersionMinor, body);
    bug("hostile bytes opened as a sealed frame");
  } catch (const Error& e) {
    if (e.status() != Status::Protocol) bug("opening threw a non-Protocol status", e.what());
  } catch (const std::exception& e) {
    bug("opening threw a non-pdkv exception", e.what());
  }
  try {
    FrameSealer out(kFuzzKey);
    FrameSealer in(kFuzzKey);
    const std::vector<uint8_t> sealed = out.seal(type, kFrameVersionMinor, body);
    if (sealed.size() != body.size() + kSealTagBytes) bug("a sealed payload has the wrong size");
    if (in.open(type, kFrameVersionMinor, sealed) != std::vector<uint8_t>(body.begin(), body.end())) {
      bug("a sealed payload did not open to itself");
    }
  } catch (const std::exception& e) {
    bug("sealing or opening a sealed payload failed", e.what());
  }
}

void run(const uint8_t* data, size_t size) {
  if (size < 2) return;
  const uint8_t mode = data[0];
  const uint8_t seed = data[1];
  const std::span<const uint8_t> body(data + 2, size - 2);

  if ((mode & 1) == 0) {
    for (const Frame& f : feed_chunked(body, seed)) {
      if (f.payload.size() > kMaxFramePayload) bug("frame payload above the limit");
      decode_as(f.type, f.payload);
    }
  } else {
    const auto type = static_cast<FrameType>(seed % kLastFrameType + 1);
    std::vector<uint8_t> sealed;
    try {
      sealed = encode_frame(type, body);
    } catch (const std::exception& e) {
      bug("encode_frame refused a payload under the limit", e.what());
    }
    const std::vector<Frame> frames = feed_chunked(sealed, static_cast<uint8_t>(mode >> 1));
    if (frames.size() != 1 || frames[0].type != type || frames[0].payload.size() != body.size() ||
        !std::equal(body.begin(), body.end(), frames[0].payload.begin())) {
      bug("a sealed frame did not come out intact");
    }
    decode_as(type, frames[0].payload);
  }

  for (uint16_t t = 1; t <= kLastFrameType; ++t) decode_as(static_cast<FrameType>(t), body);
  sealed_path(static_cast<uint16_t>(seed % kLastFrameType + 1), body);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  install("frame_fuzz", kAllocationCap);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Armed armed;
  run(data, size);
  return 0;
}
