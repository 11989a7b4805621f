// pdkv's tcp data connection: the binary frames that carry KV bytes between two agents whose
// peer pair uses transport tcp (one data connection per pair, opened during admission after the
// control channel authenticated the peer; see agent_tcp.cpp). Every frame is a fixed 32-byte
// header, then `count` 24-byte piece descriptors, then (ReadData with status 0, Write) exactly the
// sum of the pieces' lengths in bytes, piece after piece:
//
//   offset size  field
//   0      4     magic "PDKD" (0x50 0x44 0x4b 0x44)
//   4      1     version (kVersion)
//   5      1     type (FrameType)
//   6      2     reserved, 0
//   8      8     batch id (chosen by the side that starts the batch; echoed in the answer)
//   16     4     count (pieces that follow, <= kMaxPieces)
//   20     4     status (0 ok; else a Refusal, only in ReadData and WriteAck)
//   24     8     reserved, 0
//   piece: region u32, reserved u32 (0), offset u64, length u64 (1..kMaxBatchBytes); little endian.
//
// ReadRequest (D -> P) lists the P ranges D wants; ReadData (P -> D) echoes them and carries
// their bytes, or carries a refusal and no pieces; Write (P -> D) lists D ranges and carries their
// bytes; WriteAck (D -> P) says whether they landed. A batch's pieces add up to at most
// kMaxBatchBytes. Everything here is a pure codec (no sockets): FrameReader is the incremental
// parser the agent and the fuzz target (fuzz/data_frame_fuzz.cpp) drive. Malformed input is
// core::Error(Protocol) naming the field and the value. With a pre-shared key (unless sealing was
// turned off on both agents) the same frames travel as AES-256-GCM records: data_seal.hpp.
// Internal to executor/.
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace pdkv::exec::tcpdp {

inline constexpr uint32_t kMagic = 0x444b4450;  // "PDKD" read as little endian
inline constexpr uint8_t kVersion = 1;
inline constexpr size_t kHeaderBytes = 32;
inline constexpr size_t kPieceBytes = 24;
inline constexpr uint32_t kMaxPieces = 512;
inline constexpr uint64_t kMaxBatchBytes = 4u << 20;
inline constexpr size_t kTokenBytes = 32;  // the one-time token a data connection presents first

enum class FrameType : uint8_t { ReadRequest = 1, ReadData = 2, Write = 3, WriteAck = 4 };

// Why the receiving side refused a batch (ReadData / WriteAck status).
enum class Refusal : uint32_t {
  None = 0,
  Range = 1,   // a piece lies outside the refusing side's live registrations
  Device = 2,  // copying the bytes out of / into the refusing side's CUDA device memory failed
};

// Why a batch was refused, for the failed read's message: `range_text` for Range (each side says
// it in its own words), a fixed text for Device and for a code this build does not know.
std::string refusal_reason(uint32_t status, const std::string& range_text);

struct Piece {
  uint32_t region = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  bool operator==(const Piece&) const = default;
};

struct Header {
  FrameType type = FrameType::ReadRequest;
  uint64_t batch = 0;
  uint32_t count = 0;
  uint32_t status = 0;
};

const char* frame_type_name(FrameType t) noexcept;

// A whole frame's header and descriptors (the payload bytes, if any, are not included: the sender
// writes them straight from registered memory after these).
std::vector<uint8_t> encode(const Header& h, std::span<const Piece> pieces);

// Checks the header alone (magic, version, type, reserved fields, count, status for the type).
Header decode_header(std::span<const uint8_t, kHeaderBytes> bytes);
// Checks one descriptor (reserved field, length 1..kMaxBatchBytes).
Piece decode_piece(std::span<const uint8_t, kPieceBytes> bytes, uint32_t index);

// Bytes that follow a frame's descriptors.
uint64_t payload_bytes(const Header& h, std::span<const Piece> pieces);

class RecordCipher;  // data_seal.hpp
using RecordKeyBytes = std::array<uint8_t, 32>;

// Incremental parser of one direction of a data connection, clear or sealed (data_seal.hpp). The
// caller receives into want() (header, descriptor or tag bytes) and reports how many arrived with
// received(); once ready() the frame's header and pieces are known (and, sealed, authenticated)
// and payload_left() bytes follow: the caller receives at most payload_chunk() of them at a time
// where it chooses and hands each contiguous run to payload_received(), which decrypts it in place
// when sealed (a sealed segment's tag is then wanted through want(), and checked by received()).
// After the payload, complete() (every tag verified), and next() starts the next frame. Throws
// core::Error(Protocol) on a malformed header or descriptor, a payload larger than
// kMaxBatchBytes, or (sealed) a record that fails authentication; it never allocates more than
// kMaxPieces descriptors.
class FrameReader {
 public:
  FrameReader();                                  // clear frames
  explicit FrameReader(const RecordKeyBytes& key);  // sealed frames, opened with `key`
  FrameReader(FrameReader&&) noexcept;
  FrameReader& operator=(FrameReader&&) noexcept;
  ~FrameReader();
  std::span<uint8_t> want();                 // empty while payload bytes are wanted, or complete
  void received(size_t n);
  bool ready() const noexcept { return stage_ != Stage::Header && stage_ != Stage::Pieces; }
  const Header& header() const noexcept { return header_; }
  const std::vector<Piece>& pieces() const noexcept { return pieces_; }
  uint64_t payload_left() const noexcept { return payload_left_; }
  // Payload bytes the caller may receive now: the rest of the current sealed segment (clear: the
  // rest of the payload); 0 while a tag is wanted or outside the payload.
  uint64_t payload_chunk() const noexcept { return stage_ == Stage::Payload ? (sealed() ? segment_left_ : payload_left_) : 0; }
  // The next payload_chunk() bytes arrived in `bytes` (decrypted there in place when sealed).
  void payload_received(std::span<uint8_t> bytes);
  bool complete() const noexcept { return stage_ == Stage::Done; }
  void next();
  bool idle() const noexcept { return stage_ == Stage::Header && have_ == 0; }  // between frames
  bool sealed() const noexcept { return cipher_ != nullptr; }

 private:
  enum class Stage : uint8_t { Header, Pieces, Payload, Tag, Done };
  void header_done();
  void pieces_done();
  void segment_start();
  Stage stage_ = Stage::Header;
  std::array<uint8_t, kHeaderBytes + 16> hbuf_{};  // sealed: the header record's ciphertext and tag
  std::array<uint8_t, 16> tag_{};
  std::vector<uint8_t> pbuf_;
  size_t have_ = 0;
  Header header_;
  std::vector<Piece> pieces_;
  uint64_t payload_left_ = 0;
  uint64_t segment_left_ = 0;
  std::unique_ptr<RecordCipher> cipher_;
};

}  // namespace pdkv::exec::tcpdp
