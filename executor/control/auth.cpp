#include "control/auth.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <algorithm>
#include <array>
#include <climits>
#include <string>

#include "control/wire.hpp"
#include "control/openssl_error.hpp"
#include "pdkv/core/error.hpp"

namespace pdkv::exec {

using core::Error;
using core::Status;

namespace {

// Domain separation: a server MAC can never pass as a client MAC and vice versa, even over the
// same transcript (the reflection attack: echoing the server's own proof back to it).
constexpr std::string_view kServerLabel = "pdkv-control-v1 server proves the pre-shared key";
constexpr std::string_view kClientLabel = "pdkv-control-v1 client proves the pre-shared key";

Mac labelled_mac(const PresharedKey& key, std::string_view label, const AuthTranscript& t) {
  std::vector<uint8_t> input(label.begin(), label.end());
  input.push_back(0);  // the labels are fixed strings; the NUL ends them unambiguously
  const std::vector<uint8_t> body = t.encode();
  input.insert(input.end(), body.begin(), body.end());
  return hmac_sha256(key.bytes(), input);
}

}  // namespace

PresharedKey::PresharedKey(std::span<const uint8_t> bytes) : bytes_(bytes.begin(), bytes.end()) {
  if (bytes_.size() < kMinKeyBytes) {
    const size_t n = bytes_.size();
    OPENSSL_cleanse(bytes_.data(), bytes_.size());
    throw Error(Status::InvalidArgument, "the pre-shared key is " + std::to_string(n) +
                                             " bytes; it must be at least " +
                                             std::to_string(kMinKeyBytes) +
                                             " (use 32 random bytes, e.g. `openssl rand -hex 32`)");
  }
}

PresharedKey PresharedKey::from_string(std::string_view text) {
  return PresharedKey(std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

PresharedKey::~PresharedKey() {
  if (!bytes_.empty()) OPENSSL_cleanse(bytes_.data(), bytes_.size());
}

Mac hmac_sha256(std::span<const uint8_t> key, std::span<const uint8_t> data) {
  if (key.size() > static_cast<size_t>(INT_MAX)) {
    throw Error(Status::InvalidArgument, "HMAC key of " + std::to_string(key.size()) + " bytes is too long");
  }
  Mac out{};
  unsigned int len = 0;
  // HMAC() with an empty data span still needs a valid pointer.
  static const uint8_t kEmpty = 0;
  const uint8_t* d = data.empty() ? &kEmpty : data.data();
  const uint8_t* k = key.empty() ? &kEmpty : key.data();
  if (HMAC(EVP_sha256(), k, static_cast<int>(key.size()), d, data.size(), out.data(), &len) == nullptr) {
    fail_with_openssl_error("HMAC-SHA256");
  }
  if (len != out.size()) {
    throw Error(Status::Internal, "HMAC-SHA256 returned " + std::to_string(len) + " bytes, expected 32");
  }
  return out;
}

Nonce random_nonce() {
  Nonce n{};
  if (RAND_bytes(n.data(), static_cast<int>(n.size())) != 1) fail_with_openssl_error("RAND_bytes (nonce)");
  return n;
}

namespace {
constexpr std::array<uint8_t, 8> kNonceMark = {'p', 'd', 'k', 'v', '>', '3', '.', '4'};
constexpr size_t kMarkAt = kNonceBytes - kNonceMark.size();
}  // namespace

void mark_nonce(Nonce& nonce) noexcept { std::copy(kNonceMark.begin(), kNonceMark.end(), nonce.begin() + kMarkAt); }

bool nonce_is_marked(const Nonce& nonce) noexcept {
  return std::equal(kNonceMark.begin(), kNonceMark.end(), nonce.begin() + kMarkAt);
}

bool macs_equal(const Mac& a, const Mac& b) noexcept {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::vector<uint8_t> AuthTranscript::encode() const {
  WireWriter w;
  w.raw(client_nonce);
  w.raw(server_nonce);
  w.string(client_engine_id, kMaxEngineIdBytes, "client engine_id");
  w.u32(client_tp_rank);
  w.string(server_engine_id, kMaxEngineIdBytes, "server engine_id");
  w.u32(server_tp_rank);
  if (!client_hello.empty() || !server_hello.empty()) {
    // A Hello is at most 2+2+4+256+4+32+1+4+512+1 bytes; the bound only guards the encoding.
    constexpr size_t kMaxHelloBytes = 4096;
    w.u8(1);  // the transcript's form: 1 = with both Hellos (the 3.2 form ends above)
    w.bytes(client_hello, kMaxHelloBytes, "client Hello");
    w.bytes(server_hello, kMaxHelloBytes, "server Hello");
  }
  return w.take();
}

Mac server_mac(const PresharedKey& key, const AuthTranscript& transcript) {
  return labelled_mac(key, kServerLabel, transcript);
}

Mac client_mac(const PresharedKey& key, const AuthTranscript& transcript) {
  return labelled_mac(key, kClientLabel, transcript);
}

}  // namespace pdkv::exec
