// Protection of a control connection after both sides proved the pre-shared key (auth.hpp).
//
// Why: the HMAC proofs only show who is at the other end when the connection starts. Without
// more, every frame after them (the PeerInfo with the UCX worker address and the packed region
// keys, Ready, Notify, Bye) would travel in clear and unauthenticated: anyone on the path could
// read the keys that open this process's registered memory to remote access, or swap them for
// their own once the proofs had passed. So, with a key, every later frame's payload is sealed
// with AES-256-GCM (OpenSSL libcrypto):
//  * per-direction 32-byte keys from HKDF-SHA256 (the pre-shared key as input key material, both
//    nonces as salt, a label naming the direction plus the full authentication transcript as
//    info), so the keys are fresh per connection and the two directions never share a key;
//  * a 96-bit nonce from a per-direction frame counter (never reused under one key; the
//    receiver's counter is implicit, so a replayed, dropped or reordered frame fails to open);
//  * the frame type and minor version as associated data, so a sealed Notify cannot be passed
//    off as a Bye;
//  * the payload on the wire is ciphertext followed by the 16-byte tag.
// Without a key nothing is sealed: such a control channel is for trusted networks only.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "control/auth.hpp"

namespace pdkv::exec {

inline constexpr size_t kSealKeyBytes = 32;
inline constexpr size_t kSealTagBytes = 16;

using SealKey = std::array<uint8_t, kSealKeyBytes>;

// The two directional keys of one connection, as seen from one side.
struct SessionKeys {
  SealKey send{};
  SealKey recv{};
};

// Derives both directions' keys; `local_is_client` picks which one this side sends with.
// OpenSSL failure: Error(Internal, cause OpenSsl).
SessionKeys derive_session_keys(const PresharedKey& key, const AuthTranscript& transcript, bool local_is_client);

// The keys of the same connection's tcp data connection (tcpdp/data_seal.hpp): the same HKDF
// inputs under other labels ("pdkv-data-v1 ..."), so they are fresh per control connection (both
// nonces), bound to its transcript, never equal to the control channel's keys (whose frame
// counters start at 0 too) and distinct per direction. `local_is_client`: this side opened the
// control connection (it connects the data connection too).
SessionKeys derive_data_keys(const PresharedKey& key, const AuthTranscript& transcript, bool local_is_client);

// One direction's AEAD state: the key and the next frame number. Move-only; the key is wiped
// when destroyed.
class FrameSealer {
 public:
  explicit FrameSealer(const SealKey& key);
  FrameSealer(FrameSealer&&) noexcept;
  FrameSealer& operator=(FrameSealer&&) noexcept;
  FrameSealer(const FrameSealer&) = delete;
  FrameSealer& operator=(const FrameSealer&) = delete;
  ~FrameSealer();

  // Ciphertext || tag for frame number next_counter(), then advances the counter.
  std::vector<uint8_t> seal(uint16_t type, uint8_t version_minor, std::span<const uint8_t> plaintext);
  // The plaintext of frame number next_counter(), then advances the counter. A payload shorter
  // than the tag, or one that fails authentication (altered, replayed, reordered, injected, or
  // sealed under another key): Error(Protocol) naming the frame number. The caller must treat
  // the connection as broken afterwards.
  std::vector<uint8_t> open(uint16_t type, uint8_t version_minor, std::span<const uint8_t> sealed);

  uint64_t next_counter() const noexcept { return counter_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  uint64_t counter_ = 0;
};

}  // namespace pdkv::exec
