#include "control/session_crypto.hpp"

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>

#include <climits>
#include <string>
#include <string_view>

#include "control/openssl_error.hpp"
#include "pdkv/core/error.hpp"

namespace pdkv::exec {

using core::Error;
using core::Status;

namespace {

// Distinct labels per direction: the client's sending key is the server's receiving key and
// nothing else, so a frame can never be reflected back to its sender.
constexpr std::string_view kClientToServer = "pdkv-control-v2 client-to-server frame key";
constexpr std::string_view kServerToClient = "pdkv-control-v2 server-to-client frame key";
// The data connection's keys: other labels, so no key (and no nonce under a key) is shared with
// the control channel.
constexpr std::string_view kDataClientToServer = "pdkv-data-v1 client-to-server record key";
constexpr std::string_view kDataServerToClient = "pdkv-data-v1 server-to-client record key";
constexpr size_t kGcmNonceBytes = 12;

struct PkeyCtxFree {
  void operator()(EVP_PKEY_CTX* c) const noexcept { EVP_PKEY_CTX_free(c); }
};
struct CipherCtxFree {
  void operator()(EVP_CIPHER_CTX* c) const noexcept { EVP_CIPHER_CTX_free(c); }
};

std::array<uint8_t, 32> sha256(std::span<const uint8_t> data) {
  std::array<uint8_t, 32> out{};
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), out.data(), &len, EVP_sha256(), nullptr) != 1 || len != out.size()) {
    fail_with_openssl_error("SHA-256 of the authentication transcript");
  }
  return out;
}

// HKDF-SHA256(ikm = key, salt = both nonces, info = label || 0 || SHA-256(transcript)). The
// transcript is hashed so the info stays short whatever the engine ids' lengths.
SealKey hkdf(const PresharedKey& key, const AuthTranscript& t, std::string_view label) {
  std::vector<uint8_t> salt(t.client_nonce.begin(), t.client_nonce.end());
  salt.insert(salt.end(), t.server_nonce.begin(), t.server_nonce.end());
  std::vector<uint8_t> info(label.begin(), label.end());
  info.push_back(0);
  const auto digest = sha256(t.encode());
  info.insert(info.end(), digest.begin(), digest.end());

  std::unique_ptr<EVP_PKEY_CTX, PkeyCtxFree> ctx(EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nullptr));
  if (!ctx || EVP_PKEY_derive_init(ctx.get()) <= 0 || EVP_PKEY_CTX_set_hkdf_md(ctx.get(), EVP_sha256()) <= 0 ||
      EVP_PKEY_CTX_set1_hkdf_salt(ctx.get(), salt.data(), static_cast<int>(salt.size())) <= 0 ||
      EVP_PKEY_CTX_set1_hkdf_key(ctx.get(), key.bytes().data(), static_cast<int>(key.bytes().size())) <= 0 ||
      EVP_PKEY_CTX_add1_hkdf_info(ctx.get(), info.data(), static_cast<int>(info.size())) <= 0) {
    fail_with_openssl_error("setting up HKDF-SHA256 for the control channel keys");
  }
  SealKey out{};
  size_t len = out.size();
  if (EVP_PKEY_derive(ctx.get(), out.data(), &len) <= 0 || len != out.size()) {
    fail_with_openssl_error("HKDF-SHA256 of the control channel keys");
  }
  return out;
}

std::array<uint8_t, kGcmNonceBytes> nonce_for(uint64_t counter) {
  std::array<uint8_t, kGcmNonceBytes> n{};  // 4 zero bytes, then the counter little-endian
  for (int i = 0; i < 8; ++i) n[4 + i] = static_cast<uint8_t>(counter >> (8 * i));
  return n;
}

std::array<uint8_t, 3> aad_for(uint16_t type, uint8_t version_minor) {
  return {static_cast<uint8_t>(type), static_cast<uint8_t>(type >> 8), version_minor};
}

}  // namespace

SessionKeys derive_session_keys(const PresharedKey& key, const AuthTranscript& transcript, bool local_is_client) {
  const SealKey c2s = hkdf(key, transcript, kClientToServer);
  const SealKey s2c = hkdf(key, transcript, kServerToClient);
  return local_is_client ? SessionKeys{c2s, s2c} : SessionKeys{s2c, c2s};
}

SessionKeys derive_data_keys(const PresharedKey& key, const AuthTranscript& transcript, bool local_is_client) {
  const SealKey c2s = hkdf(key, transcript, kDataClientToServer);
  const SealKey s2c = hkdf(key, transcript, kDataServerToClient);
  return local_is_client ? SessionKeys{c2s, s2c} : SessionKeys{s2c, c2s};
}

struct FrameSealer::Impl {
  SealKey key{};
  std::unique_ptr<EVP_CIPHER_CTX, CipherCtxFree> ctx;
  ~Impl() { OPENSSL_cleanse(key.data(), key.size()); }
};

FrameSealer::FrameSealer(const SealKey& key) : impl_(std::make_unique<Impl>()) {
  impl_->key = key;
  impl_->ctx.reset(EVP_CIPHER_CTX_new());
  if (!impl_->ctx) fail_with_openssl_error("allocating an AES-256-GCM context");
}

FrameSealer::FrameSealer(FrameSealer&&) noexcept = default;
FrameSealer& FrameSealer::operator=(FrameSealer&&) noexcept = default;
FrameSealer::~FrameSealer() = default;

std::vector<uint8_t> FrameSealer::seal(uint16_t type, uint8_t version_minor, std::span<const uint8_t> plaintext) {
  if (counter_ == UINT64_MAX) throw Error(Status::Protocol, "control channel: 2^64 frames sent under one key");
  if (plaintext.size() > static_cast<size_t>(INT_MAX) - kSealTagBytes) {
    throw Error(Status::InvalidArgument, "control frame payload of " + std::to_string(plaintext.size()) +
                                             " bytes is too large to seal");
  }
  EVP_CIPHER_CTX* c = impl_->ctx.get();
  const auto iv = nonce_for(counter_);
  const auto aad = aad_for(type, version_minor);
  std::vector<uint8_t> out(plaintext.size() + kSealTagBytes);
  int len = 0;
  if (EVP_EncryptInit_ex(c, EVP_aes_256_gcm(), nullptr, impl_->key.data(), iv.data()) != 1 ||
      EVP_EncryptUpdate(c, nullptr, &len, aad.data(), static_cast<int>(aad.size())) != 1 ||
      EVP_EncryptUpdate(c, out.data(), &len, plaintext.data(), static_cast<int>(plaintext.size())) != 1 ||
      static_cast<size_t>(len) != plaintext.size() || EVP_EncryptFinal_ex(c, out.data() + len, &len) != 1 ||
      EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, static_cast<int>(kSealTagBytes), out.data() + plaintext.size()) !=
          1) {
    fail_with_openssl_error("AES-256-GCM sealing of control frame " + std::to_string(counter_));
  }
  ++counter_;
  return out;
}

std::vector<uint8_t> FrameSealer::open(uint16_t type, uint8_t version_minor, std::span<const uint8_t> sealed) {
  const uint64_t n = counter_;
  if (sealed.size() < kSealTagBytes) {
    throw Error(Status::Protocol, "control frame: sealed frame " + std::to_string(n) + " carries " + std::to_string(sealed.size()) +
                                      " payload bytes, fewer than the " + std::to_string(kSealTagBytes) +
                                      "-byte authentication tag of a sealed frame");
  }
  const size_t body = sealed.size() - kSealTagBytes;
  EVP_CIPHER_CTX* c = impl_->ctx.get();
  const auto iv = nonce_for(n);
  const auto aad = aad_for(type, version_minor);
  std::vector<uint8_t> out(body);
  uint8_t tag[kSealTagBytes];
  std::copy(sealed.begin() + static_cast<std::ptrdiff_t>(body), sealed.end(), tag);
  int len = 0;
  if (EVP_DecryptInit_ex(c, EVP_aes_256_gcm(), nullptr, impl_->key.data(), iv.data()) != 1 ||
      EVP_DecryptUpdate(c, nullptr, &len, aad.data(), static_cast<int>(aad.size())) != 1 ||
      EVP_DecryptUpdate(c, out.data(), &len, sealed.data(), static_cast<int>(body)) != 1 ||
      EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, static_cast<int>(kSealTagBytes), tag) != 1) {
    fail_with_openssl_error("AES-256-GCM opening of control frame " + std::to_string(n));
  }
  int fin = 0;
  if (EVP_DecryptFinal_ex(c, out.data() + len, &fin) != 1) {
    ERR_clear_error();
    OPENSSL_cleanse(out.data(), out.size());
    throw Error(Status::Protocol, "control frame: sealed frame " + std::to_string(n) +
                                      " failed authentication: it was altered, replayed, reordered or not sealed "
                                      "by the peer that proved the pre-shared key");
  }
  ++counter_;
  return out;
}

}  // namespace pdkv::exec
