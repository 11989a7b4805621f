// Typed messages of the control channel, one per FrameType. encode() writes the payload of a frame
// (wire.hpp encoding); decode() is strict: a truncated field, a length or count over its limit, an
// out-of-range enum value or a trailing byte is Error(Protocol) naming the message and the field.
// Limits are named constants so a peer can never make a decoder allocate beyond them.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "control/frame.hpp"
#include "pdkv/core/error.hpp"

namespace pdkv::exec {

// 2: with a pre-shared key, every frame after the proofs is sealed (session_crypto.hpp), which a
// version 1 peer cannot read.
// 3: PeerInfo carries the sender's cross-memory-attach identity (pid, probe address and value) and
// admission begins with a Transport exchange (same-host peers move bytes with process_vm_readv /
// writev instead of UCX shared memory); a version 2 peer can decode neither.
inline constexpr uint16_t kControlProtoMajor = 3;
// 3.1: a Transport frame may end with the sender's mappable regions (MappableRegion); a sender
// appends them only for a peer whose Hello says 3.1 or later, and a 3.1 decoder reads a frame
// without them as "none", so 3.0 and 3.1 peers still admit each other (over cross-memory attach).
// 3.2: a Transport frame may end (after the mappable regions, if any) with the sender's
// data_seal (tcpdp/data_seal.hpp), sent only to a peer whose Hello says 3.2 or later; a frame
// without it reads as "clear" (a 3.1 peer cannot seal), so 3.1 and 3.2 peers still admit each other
// without a key, and with one a 3.2 peer that seals refuses a 3.1 peer with Auth.
// 3.3: when both Hellos say 3.3 or later, both MACs and every key derived from the handshake cover
// the two Hellos whole, as sent (auth.hpp), so a host_id, minor version, has_key or purpose changed
// on the path fails the proof; with a 3.2 or older peer the transcript stays that version's (nonces,
// engine ids and ranks only), so such peers still admit each other.
// 3.4: a KeepLeases frame (a reader asking the peer to keep its leases of named requests open) may
// follow the handshake; a 3.3 peer refuses an unknown frame type, so it is sent only to a peer
// whose Hello says 3.4 or later (the agent refuses the call naming the peer's version otherwise).
// 3.5: a side whose Hello says 3.5 or later marks its nonce (auth.hpp, mark_nonce): the last 8
// bytes are a fixed mark, the first 24 random. A Hello that says an older minor yet carries a
// marked nonce was rewritten on the path (a downgrade to the shorter 3.2 transcript, or to a
// minor that does not offer what 3.5 does), and is refused; older peers see a random nonce.
// A reader may send LeaseQuery (is the lease of this request open? keep it if so) and is answered
// with LeaseAnswer; both are sent only to a peer whose Hello says 3.5 or later.
inline constexpr uint16_t kControlProtoMinor = 5;
// The first minor whose transcript covers the whole Hellos.
inline constexpr uint16_t kHelloBoundMinor = 3;
// The first minor that takes KeepLeases frames.
inline constexpr uint16_t kKeepLeasesMinor = 4;
// The first minor that marks its nonce.
inline constexpr uint16_t kNonceMarkMinor = 5;
// The first minor that answers LeaseQuery frames.
inline constexpr uint16_t kLeaseQueryMinor = 5;

inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kMacBytes = 32;
using Nonce = std::array<uint8_t, kNonceBytes>;
using Mac = std::array<uint8_t, kMacBytes>;

inline constexpr size_t kMaxEngineIdBytes = 256;
inline constexpr size_t kMaxHostIdBytes = 512;
inline constexpr size_t kMaxMetadataBytes = 1u << 20;      // encoded pdkv engine metadata
inline constexpr size_t kMaxWorkerAddressBytes = 64u << 10;
inline constexpr size_t kMaxRegions = 65536;
inline constexpr size_t kMaxRkeyBytes = 64u << 10;
inline constexpr size_t kMaxMessageTextBytes = 64u << 10;  // Reject / Error text
inline constexpr size_t kMaxRequestIdBytes = 1024;

// A pdkv status as it travels (u32). Decoding refuses values that are not a core::Status.
uint32_t status_to_wire(core::Status s) noexcept;
core::Status status_from_wire(uint32_t v);  // Protocol naming the value when unknown

enum class HelloPurpose : uint8_t { Peer = 0 };  // other values reserved for later purposes

struct Hello {
  static constexpr FrameType kType = FrameType::Hello;
  uint16_t proto_major = kControlProtoMajor;
  uint16_t proto_minor = kControlProtoMinor;
  std::string engine_id;  // <= kMaxEngineIdBytes
  uint32_t tp_rank = 0;
  Nonce nonce{};
  bool has_key = false;   // u8 0/1 on the wire
  std::string host_id;    // <= kMaxHostIdBytes; see host_identity() in channel.hpp
  uint8_t purpose = static_cast<uint8_t>(HelloPurpose::Peer);  // decoded as is; the handshake checks it

  std::vector<uint8_t> encode() const;
  static Hello decode(std::span<const uint8_t> payload);
};

struct Challenge {
  static constexpr FrameType kType = FrameType::Challenge;
  Nonce server_nonce{};
  Mac server_mac{};  // all zero when the server has no key

  std::vector<uint8_t> encode() const;
  static Challenge decode(std::span<const uint8_t> payload);
};

struct Proof {
  static constexpr FrameType kType = FrameType::Proof;
  Mac client_mac{};  // all zero when the client has no key

  std::vector<uint8_t> encode() const;
  static Proof decode(std::span<const uint8_t> payload);
};

struct RegionKey {
  uint32_t region = 0;       // index of the region in the engine metadata
  uint64_t base = 0;         // remote virtual address of the registered range
  uint64_t length = 0;
  uint32_t memory_type = 0;  // the agent's memory-type enum (host = 0)
  std::vector<uint8_t> rkey;  // packed transport key, <= kMaxRkeyBytes

  bool operator==(const RegionKey&) const = default;
};

inline constexpr size_t kCmaProbeBytes = 32;
using CmaProbeValue = std::array<uint8_t, kCmaProbeBytes>;

struct PeerInfo {
  static constexpr FrameType kType = FrameType::PeerInfo;
  std::vector<uint8_t> metadata;        // pdkv::core::encode(EngineMetadata), <= kMaxMetadataBytes
  std::vector<uint8_t> worker_address;  // <= kMaxWorkerAddressBytes
  std::vector<RegionKey> regions;       // <= kMaxRegions
  uint8_t transport_hint = 0;           // the agent's transport enum, decoded as is
  // The sender's cross-memory-attach identity (protocol 3): its pid as it sees it (0: none
  // offered) and the address of kCmaProbeBytes random bytes in its memory, which a same-host peer
  // reads back with process_vm_readv to prove the pid is this sender's before using it.
  uint32_t cma_pid = 0;
  uint64_t cma_probe_address = 0;
  CmaProbeValue cma_probe{};

  std::vector<uint8_t> encode() const;
  static PeerInfo decode(std::span<const uint8_t> payload);
};

struct Ready {
  static constexpr FrameType kType = FrameType::Ready;
  std::vector<uint8_t> encode() const;
  static Ready decode(std::span<const uint8_t> payload);
};

// Admission's first step (protocol 3), both ways, before any data path exists: whether this side
// can reach the peer with cross-memory attach (it read the peer's probe back). Both sides then
// choose the same transport from the two verdicts and the two transport hints (agent_peers.cpp).
enum class CmaVerdict : uint8_t {
  NotTried = 0,  // another host, or a side whose transport is tcp
  Works = 1,     // the probe read back equal
  Failed = 2,    // the probe failed; `reason` says why
};

// A registered region of the sender that lies in a pdkv shared allocation (a sealed memfd): a
// same-host peer may take descriptor `fd` out of the sender's process (pidfd_getfd) and map
// [offset, offset + length) of it, which holds the region's bytes [base, base + length).
struct MappableRegion {
  uint32_t region = 0;
  uint64_t base = 0;
  uint64_t length = 0;
  uint32_t fd = 0;          // the descriptor's number in the sender's process
  uint64_t offset = 0;      // of `base` in the file
  uint64_t file_size = 0;   // the file's size, device and inode, checked after pidfd_getfd
  uint64_t dev = 0;
  uint64_t ino = 0;

  bool operator==(const MappableRegion&) const = default;
};

struct TransportOffer {
  static constexpr FrameType kType = FrameType::Transport;
  CmaVerdict cma = CmaVerdict::NotTried;
  std::string reason;  // why cross-memory attach was not tried / failed; <= kMaxMessageTextBytes
  // The accepting side's tcp data connection (transport tcp): the port its peer connects to (on
  // the address the control connection reached) and the one-time token it must present first.
  // Port 0 and a zero token otherwise (the connecting side, or shm).
  uint16_t data_port = 0;
  std::array<uint8_t, 32> data_token{};
  // Protocol 3.1 (an optional tail: absent when empty): the sender's mappable regions, at most
  // kMaxRegions, sent only to a same-host peer whose probe read back.
  std::vector<MappableRegion> mappable;
  // Protocol 3.2 (an optional last byte): 1 when the sender seals its tcp data connection
  // (tcpdp/data_seal.hpp: it holds a key and did not turn sealing off), 0 when it sends it in
  // clear; empty (not sent, or from a peer older than 3.2) reads as clear. With a key, admission
  // refuses a peer whose setting differs (Auth); without one it must be clear.
  std::optional<uint8_t> data_seal;

  std::vector<uint8_t> encode() const;
  static TransportOffer decode(std::span<const uint8_t> payload);
};

// The peer's validation refused the pair (handshake) with this status and text.
struct Reject {
  static constexpr FrameType kType = FrameType::Reject;
  core::Status status = core::Status::Incompatible;
  std::string message;  // <= kMaxMessageTextBytes

  std::vector<uint8_t> encode() const;
  static Reject decode(std::span<const uint8_t> payload);
};

enum class NotifyKind : uint8_t {
  ReadDone = 0,   // D finished reading a request from this P rank
  WriteDone = 1,  // P finished writing a request into this D rank
};

struct Notify {
  static constexpr FrameType kType = FrameType::Notify;
  std::string request_id;  // <= kMaxRequestIdBytes
  std::string engine_id;   // of the sender, <= kMaxEngineIdBytes
  uint32_t tp_rank = 0;    // of the sender
  NotifyKind kind = NotifyKind::ReadDone;
  uint64_t bytes = 0;
  core::Status status = core::Status::Ok;  // Ok, or why the transfer failed

  std::vector<uint8_t> encode() const;
  static Notify decode(std::span<const uint8_t> payload);
};

struct Ping {
  static constexpr FrameType kType = FrameType::Ping;
  uint64_t seq = 0;
  uint64_t time_ns = 0;
  std::vector<uint8_t> encode() const;
  static Ping decode(std::span<const uint8_t> payload);
};

struct Pong {
  static constexpr FrameType kType = FrameType::Pong;
  uint64_t seq = 0;
  uint64_t time_ns = 0;
  std::vector<uint8_t> encode() const;
  static Pong decode(std::span<const uint8_t> payload);
};

// The sender hit an error and is closing the channel (FrameType::Error).
struct ErrorMessage {
  static constexpr FrameType kType = FrameType::Error;
  core::Status status = core::Status::Internal;
  std::string message;  // <= kMaxMessageTextBytes

  std::vector<uint8_t> encode() const;
  static ErrorMessage decode(std::span<const uint8_t> payload);
};

// A reader (D) asks the peer to keep its leases of these requests open (pdkv_agent_keep_leases):
// each id the peer leases gets a deadline of at least now + that lease's ttl. Ids are
// length-prefixed, so any bytes (a comma included) name one request.
inline constexpr size_t kMaxKeepLeaseIds = 2048;  // per frame: at most ~2 MiB of ids
struct KeepLeases {
  static constexpr FrameType kType = FrameType::KeepLeases;
  std::vector<std::string> request_ids;  // <= kMaxKeepLeaseIds, each <= kMaxRequestIdBytes

  std::vector<uint8_t> encode() const;
  static KeepLeases decode(std::span<const uint8_t> payload);
};

// A reader (D) about to read a request's blocks asks the rank holding them whether its lease of
// the request is still open (and to keep it, as KeepLeases does): blocks whose lease ended were
// freed by P and may hold another request's bytes. `query` is the asker's, echoed in the answer.
struct LeaseQuery {
  static constexpr FrameType kType = FrameType::LeaseQuery;
  uint64_t query = 0;
  std::string request_id;  // 1..kMaxRequestIdBytes

  std::vector<uint8_t> encode() const;
  static LeaseQuery decode(std::span<const uint8_t> payload);
};

// What the asked rank knows of its lease of the request (u8 on the wire).
enum class LeaseState : uint8_t {
  NotLeased = 0,  // never leased here, or ended so long ago it is forgotten
  Open = 1,       // leased and open (now kept)
  Expired = 2,    // its ttl ran out: the blocks were given back (LEASE_EXPIRED)
  Completed = 3,  // every expected reader notified: the blocks were given back (REQUEST_COMPLETE)
};
const char* lease_state_name(LeaseState s) noexcept;

struct LeaseAnswer {
  static constexpr FrameType kType = FrameType::LeaseAnswer;
  uint64_t query = 0;
  LeaseState state = LeaseState::NotLeased;

  std::vector<uint8_t> encode() const;
  static LeaseAnswer decode(std::span<const uint8_t> payload);
};

struct Bye {
  static constexpr FrameType kType = FrameType::Bye;
  std::vector<uint8_t> encode() const;
  static Bye decode(std::span<const uint8_t> payload);
};

// Text for a message travelling to a peer, cut to kMaxMessageTextBytes (on a UTF-8 boundary) so
// encoding never fails on a long local error.
std::string clip_message_text(std::string_view text);

}  // namespace pdkv::exec
