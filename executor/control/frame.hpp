// Frames of pdkv's TCP control channel. Every message travels in one frame:
//   header (16 B, little-endian): magic u32 "PDKF" | u8 version_major | u8 version_minor |
//                                 u16 type | u32 payload_len | u32 crc32c(payload)
//   payload (payload_len bytes, at most kMaxFramePayload)
// A frame with another major version, an unknown type, an oversized length or a bad checksum is
// refused with Error(Protocol) naming the value. Any minor version is accepted and carried in
// Frame, so a decoder can tell a newer peer's message from a malformed one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace pdkv::exec {

// 'P','D','K','F' as bytes on the wire.
inline constexpr uint32_t kFrameMagic = 0x464B4450u;
inline constexpr uint8_t kFrameVersionMajor = 1;
inline constexpr uint8_t kFrameVersionMinor = 0;
inline constexpr size_t kFrameHeaderBytes = 16;
// The largest payload a peer may announce: 4 MiB, far above a PeerInfo with many regions.
inline constexpr uint32_t kMaxFramePayload = 4u << 20;
// The largest payload before the peer proved the pre-shared key (handshake.hpp): Hello,
// Challenge, Proof, or a Reject / Error of at most 64 KiB of text.
inline constexpr uint32_t kMaxPreAuthPayload = (64u << 10) + 1024;

enum class FrameType : uint16_t {
  Hello = 1,
  Challenge = 2,
  Proof = 3,
  PeerInfo = 4,
  Ready = 5,
  Reject = 6,
  Notify = 7,
  Ping = 8,
  Pong = 9,
  Error = 10,
  Bye = 11,
  Transport = 12,  // protocol 3: admission's transport agreement (messages.hpp)
  KeepLeases = 13,  // protocol 3.4: a reader asks to keep leases open (messages.hpp)
  LeaseQuery = 14,   // protocol 3.5: a reader asks whether a lease is open, keeping it (messages.hpp)
  LeaseAnswer = 15,  // protocol 3.5: the answer to a LeaseQuery
};

// The highest frame type this build knows (they run from Hello = 1 up to it).
inline constexpr uint16_t kLastFrameType = static_cast<uint16_t>(FrameType::LeaseAnswer);
bool is_known_frame_type(uint16_t type) noexcept;
// "Hello", "PeerInfo", ...; "unknown" for a value outside the enum.
const char* frame_type_name(FrameType type) noexcept;

struct Frame {
  FrameType type{};
  uint8_t version_minor = kFrameVersionMinor;
  std::vector<uint8_t> payload;
};

// Header + payload. Throws InvalidArgument when payload exceeds kMaxFramePayload.
std::vector<uint8_t> encode_frame(FrameType type, std::span<const uint8_t> payload);

// Incremental decoder for a byte stream. feed() accepts any chunking; each header is checked as
// soon as its 16 bytes are in, before any byte of its payload is buffered, and the payload buffer
// is allocated at the announced (checked) length, never more. Completed frames wait in a queue
// until next() takes them, so memory is bounded by one partial frame plus the completed frames the
// caller has not drained: drain with next() after each feed().
// After a Protocol error the decoder stays failed: next() still hands out the frames completed
// before the bad one, then it and every later feed() rethrow the error.
class FrameDecoder {
 public:
  void feed(const uint8_t* data, size_t len);
  void feed(std::span<const uint8_t> bytes) { feed(bytes.data(), bytes.size()); }
  std::optional<Frame> next();

  // The largest payload a header may announce from now on (default kMaxFramePayload, at most
  // that); a larger one is Protocol naming both numbers, before any byte of it is buffered.
  void set_max_payload(uint32_t max) noexcept { max_payload_ = max < kMaxFramePayload ? max : kMaxFramePayload; }

  // Completed frames waiting for next().
  size_t pending_frames() const noexcept { return ready_.size(); }
  // Bytes of the frame being assembled (header + payload so far).
  size_t partial_bytes() const noexcept;
  // True between frames: nothing of a next frame has arrived (a clean EOF point).
  bool at_frame_boundary() const noexcept;

 private:
  void check_header();
  void fail(std::string message);

  uint8_t header_[kFrameHeaderBytes]{};
  size_t header_have_ = 0;
  bool in_payload_ = false;
  Frame current_;
  uint32_t payload_len_ = 0;
  uint32_t payload_crc_ = 0;
  size_t payload_have_ = 0;
  std::deque<Frame> ready_;
  std::string failed_;
  uint32_t max_payload_ = kMaxFramePayload;
};

}  // namespace pdkv::exec
