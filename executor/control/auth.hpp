// Pre-shared-key authentication of a control connection: HMAC-SHA256 (OpenSSL libcrypto) over a
// transcript that binds both sides' nonces and identities. The server proves the key first
// (server_mac in Challenge), then the client (client_mac in Proof); the two MACs use distinct
// domain-separation labels, and the transcript orders the identities by role, so a MAC can be
// neither replayed on another connection (fresh nonces) nor reflected back to its sender.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "control/messages.hpp"

namespace pdkv::exec {

inline constexpr size_t kMinKeyBytes = 16;

// Key material; wiped (OPENSSL_cleanse) when destroyed. Shorter than kMinKeyBytes:
// InvalidArgument naming the length.
class PresharedKey {
 public:
  explicit PresharedKey(std::span<const uint8_t> bytes);
  static PresharedKey from_string(std::string_view text);
  PresharedKey(const PresharedKey&) = default;
  PresharedKey& operator=(const PresharedKey&) = default;
  PresharedKey(PresharedKey&&) noexcept = default;
  PresharedKey& operator=(PresharedKey&&) noexcept = default;
  ~PresharedKey();

  std::span<const uint8_t> bytes() const noexcept { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

// HMAC-SHA256(key, data). OpenSSL failure: Error(Internal, cause OpenSsl).
Mac hmac_sha256(std::span<const uint8_t> key, std::span<const uint8_t> data);

// 32 bytes from RAND_bytes. Failure: Error(Internal, cause OpenSsl with ERR_get_error()).
Nonce random_nonce();

// The downgrade mark (control protocol 3.5): a side whose Hello says 3.5 or later ends its nonce
// with a fixed 8-byte mark; the other 24 bytes stay random. Every transcript form covers both
// nonces, so a path cannot take the mark off without failing the proofs, and a Hello saying a
// minor older than 3.5 whose nonce is marked was rewritten on the path. A 3.4 or older peer's
// nonce is 32 random bytes: it ends with the mark with probability 2^-64.
void mark_nonce(Nonce& nonce) noexcept;
bool nonce_is_marked(const Nonce& nonce) noexcept;

// Constant-time comparison (CRYPTO_memcmp).
bool macs_equal(const Mac& a, const Mac& b) noexcept;

// What both MACs authenticate: the nonces and the (engine_id, tp_rank) of each side, by role,
// and, from control protocol 3.3 on (both Hellos saying 3.3 or later), both Hellos' payloads
// whole, exactly as sent: every field of a Hello (host_id, which decides whether cross-memory
// attach is tried; the minor version, which decides what admission offers; has_key; purpose) is
// then bound to the key, not only the identity. With a 3.2 or older peer both sides use the
// shorter transcript; a path that rewrites both Hellos' minors to 3.2 to force it is caught by the
// nonce mark below when either side is 3.5 or later (between 3.3 and 3.4 peers it is not, and
// both then still prove the key, the nonces and the identities, what 3.2 proved).
struct AuthTranscript {
  Nonce client_nonce{};
  Nonce server_nonce{};
  std::string client_engine_id;
  uint32_t client_tp_rank = 0;
  std::string server_engine_id;
  uint32_t server_tp_rank = 0;
  // Both empty: the 3.2 transcript. Otherwise both Hello payloads (Hello::encode(), as each
  // side sent it), appended after the fields above with their lengths.
  std::vector<uint8_t> client_hello;
  std::vector<uint8_t> server_hello;

  // Unambiguous encoding (length-prefixed strings), the HMAC input after the label.
  std::vector<uint8_t> encode() const;
};

Mac server_mac(const PresharedKey& key, const AuthTranscript& transcript);
Mac client_mac(const PresharedKey& key, const AuthTranscript& transcript);

}  // namespace pdkv::exec
