// Sealing of a tcp data connection (data_frame.hpp) when both agents hold a pre-shared key and
// neither turned sealing off (AgentOptions::seal_data).
//
// Why: the control channel is authenticated and sealed (control/session_crypto.hpp) and admits
// the data connection with a one-time token, but without more the data connection's frames would
// then travel in clear and unauthenticated: anyone on the path could read the KV cache (the
// users' prompts) or inject bytes into D's memory. So every frame travels as AES-256-GCM records
// (OpenSSL libcrypto), each ciphertext followed by its 16-byte tag:
//
//   header record       the 32-byte header                       32 + 16 bytes
//   descriptor record   the count * 24 descriptor bytes (count>0) count * 24 + 16 bytes
//   payload records     the payload cut into segments of kSegmentBytes (the last one shorter),
//                       each sealed on its own                    segment + 16 bytes each
//
//  * keys: per direction, per control connection (derive_data_keys: HKDF-SHA256 over the key,
//    both handshake nonces and the transcript, with labels distinct from the control channel's);
//  * nonces: a per-direction record counter (12 bytes: 4 zero bytes, the counter little endian),
//    never reused under one key and implicit on the receiving side, so a record replayed,
//    dropped, reordered or taken from another connection or direction fails its tag;
//  * associated data: the record kind and the frame version, so a payload record cannot pass for
//    a header;
//  * the receiver opens the header and descriptor records before it acts on them (nothing is
//    decided on unauthenticated bytes); a payload segment is received where the payload belongs
//    (registered memory already checked against the authenticated descriptors, or a sink) and
//    decrypted there in place, and its tag is checked when it ends: a tag that does not verify
//    is Protocol and the caller drops the connection, so the batch is never reported as
//    transferred (its bytes in the asked range are then undefined, like any failed transfer's).
//    Segments bound what one record covers, so the sender buffers at most one segment per
//    connection and a tampered segment is found within kSegmentBytes.
// Internal to executor/.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "tcpdp/data_frame.hpp"

namespace pdkv::exec::tcpdp {

inline constexpr size_t kRecordKeyBytes = 32;
inline constexpr size_t kTagBytes = 16;
inline constexpr uint64_t kSegmentBytes = 256u << 10;

using RecordKey = std::array<uint8_t, kRecordKeyBytes>;

enum class RecordKind : uint8_t { Header = 1, Pieces = 2, Payload = 3 };

// Bytes on the wire of a sealed payload of `payload` bytes (its segments and their tags).
constexpr uint64_t sealed_payload_bytes(uint64_t payload) {
  return payload + (payload + kSegmentBytes - 1) / kSegmentBytes * kTagBytes;
}

// One direction's AES-256-GCM state: the key and the next record number. A record is sealed or
// opened in steps (begin, update any number of times, finish), so its bytes may lie in several
// places (iovecs) and be processed where they are (in == out allowed). Move-only; the key is
// wiped when destroyed. OpenSSL failure: Error(Internal, cause OpenSsl).
class RecordCipher {
 public:
  enum class Mode : uint8_t { Seal, Open };
  RecordCipher(const RecordKey& key, Mode mode);
  RecordCipher(RecordCipher&&) noexcept;
  RecordCipher& operator=(RecordCipher&&) noexcept;
  RecordCipher(const RecordCipher&) = delete;
  RecordCipher& operator=(const RecordCipher&) = delete;
  ~RecordCipher();

  // Starts record number next_record() of this kind (2^64 records: Protocol).
  void begin(RecordKind kind);
  // Encrypts (Seal) or decrypts (Open) the record's next n bytes from `in` to `out`.
  void update(const uint8_t* in, uint8_t* out, size_t n);
  // Seal: ends the record, writes its tag. Open: ends the record and checks `tag`; a mismatch is
  // Error(Protocol) naming the record number and kind (the record was altered, replayed,
  // reordered or not sealed by the peer) and the caller must drop the connection.
  void finish(std::span<uint8_t, kTagBytes> tag);

  // One whole record: plaintext -> ciphertext || tag (Seal only).
  std::vector<uint8_t> seal(RecordKind kind, std::span<const uint8_t> plaintext);
  // One whole record in place: `record` holds ciphertext || tag and keeps the plaintext in its
  // first size() - kTagBytes bytes (Open only). Shorter than a tag: Protocol.
  void open(RecordKind kind, std::span<uint8_t> record);

  uint64_t next_record() const noexcept { return counter_; }
  bool in_record() const noexcept { return open_record_; }
  Mode mode() const noexcept { return mode_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  Mode mode_ = Mode::Seal;
  uint64_t counter_ = 0;
  bool open_record_ = false;
  RecordKind kind_ = RecordKind::Header;
};

// The sealed header record and, with pieces, the sealed descriptor record of a frame whose clear
// header and descriptors are `head` (encode()'s bytes).
std::vector<uint8_t> seal_head(RecordCipher& c, std::span<const uint8_t> head);

// A whole sealed frame in memory (tests and the fuzz target; the agent seals the payload segment
// by segment from registered memory): seal_head, then the payload in sealed segments.
std::vector<uint8_t> encode_sealed(RecordCipher& c, const Header& h, std::span<const Piece> pieces,
                                   std::span<const uint8_t> payload);

}  // namespace pdkv::exec::tcpdp
