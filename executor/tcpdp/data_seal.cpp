#include "tcpdp/data_seal.hpp"

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>

#include <algorithm>
#include <climits>
#include <string>

#include "control/openssl_error.hpp"
#include "pdkv/core/error.hpp"

namespace pdkv::exec::tcpdp {

using core::Error;
using core::Status;

namespace {

constexpr size_t kNonceBytes = 12;

struct CipherCtxFree {
  void operator()(EVP_CIPHER_CTX* c) const noexcept { EVP_CIPHER_CTX_free(c); }
};

const char* kind_name(RecordKind k) {
  switch (k) {
    case RecordKind::Header: return "header";
    case RecordKind::Pieces: return "descriptor";
    case RecordKind::Payload: return "payload";
  }
  return "unknown";
}

}  // namespace

struct RecordCipher::Impl {
  RecordKey key{};
  std::unique_ptr<EVP_CIPHER_CTX, CipherCtxFree> ctx;
  ~Impl() { OPENSSL_cleanse(key.data(), key.size()); }
};

RecordCipher::RecordCipher(const RecordKey& key, Mode mode) : impl_(std::make_unique<Impl>()), mode_(mode) {
  impl_->key = key;
  impl_->ctx.reset(EVP_CIPHER_CTX_new());
  if (!impl_->ctx) fail_with_openssl_error("allocating an AES-256-GCM context for the data connection");
  // The key schedule once; each record then only sets its nonce.
  const int ok = mode_ == Mode::Seal
                     ? EVP_EncryptInit_ex(impl_->ctx.get(), EVP_aes_256_gcm(), nullptr, impl_->key.data(), nullptr)
                     : EVP_DecryptInit_ex(impl_->ctx.get(), EVP_aes_256_gcm(), nullptr, impl_->key.data(), nullptr);
  if (ok != 1) fail_with_openssl_error("setting the data connection's AES-256-GCM key");
}

RecordCipher::RecordCipher(RecordCipher&&) noexcept = default;
RecordCipher& RecordCipher::operator=(RecordCipher&&) noexcept = default;
RecordCipher::~RecordCipher() = default;

void RecordCipher::begin(RecordKind kind) {
  if (open_record_) core::fail(Status::Internal, "data connection: a record began before the last one ended");
  if (counter_ == UINT64_MAX) throw Error(Status::Protocol, "data connection: 2^64 records under one key");
  std::array<uint8_t, kNonceBytes> iv{};  // 4 zero bytes, then the record number little endian
  for (int i = 0; i < 8; ++i) iv[4 + i] = static_cast<uint8_t>(counter_ >> (8 * i));
  const uint8_t aad[2] = {static_cast<uint8_t>(kind), kVersion};
  EVP_CIPHER_CTX* c = impl_->ctx.get();
  int len = 0;
  const bool ok = mode_ == Mode::Seal
                      ? EVP_EncryptInit_ex(c, nullptr, nullptr, nullptr, iv.data()) == 1 &&
                            EVP_EncryptUpdate(c, nullptr, &len, aad, sizeof aad) == 1
                      : EVP_DecryptInit_ex(c, nullptr, nullptr, nullptr, iv.data()) == 1 &&
                            EVP_DecryptUpdate(c, nullptr, &len, aad, sizeof aad) == 1;
  if (!ok) fail_with_openssl_error("starting data connection record " + std::to_string(counter_));
  kind_ = kind;
  open_record_ = true;
}

void RecordCipher::update(const uint8_t* in, uint8_t* out, size_t n) {
  if (!open_record_) core::fail(Status::Internal, "data connection: record bytes outside a record");
  EVP_CIPHER_CTX* c = impl_->ctx.get();
  while (n > 0) {
    const int step = static_cast<int>(std::min<size_t>(n, 1u << 30));
    int len = 0;
    const int ok = mode_ == Mode::Seal ? EVP_EncryptUpdate(c, out, &len, in, step) : EVP_DecryptUpdate(c, out, &len, in, step);
    // GCM is a stream mode: OpenSSL writes every byte it is given at once.
    if (ok != 1 || len != step) fail_with_openssl_error("AES-256-GCM on data connection record " + std::to_string(counter_));
    in += step;
    out += step;
    n -= static_cast<size_t>(step);
  }
}

void RecordCipher::finish(std::span<uint8_t, kTagBytes> tag) {
  if (!open_record_) core::fail(Status::Internal, "data connection: a record ended that never began");
  EVP_CIPHER_CTX* c = impl_->ctx.get();
  const uint64_t n = counter_;
  open_record_ = false;
  ++counter_;  // whatever happens below, this number is used up
  int len = 0;
  uint8_t scratch[16];
  if (mode_ == Mode::Seal) {
    if (EVP_EncryptFinal_ex(c, scratch, &len) != 1 ||
        EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, static_cast<int>(kTagBytes), tag.data()) != 1) {
      fail_with_openssl_error("sealing data connection record " + std::to_string(n));
    }
    return;
  }
  if (EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, static_cast<int>(kTagBytes), tag.data()) != 1) {
    fail_with_openssl_error("opening data connection record " + std::to_string(n));
  }
  if (EVP_DecryptFinal_ex(c, scratch, &len) != 1) {
    ERR_clear_error();
    throw Error(Status::Protocol, std::string("data frame: sealed ") + kind_name(kind_) + " record " + std::to_string(n) +
                                      " failed authentication: it was altered, replayed, reordered or not sealed by "
                                      "the peer that proved the pre-shared key");
  }
}

std::vector<uint8_t> RecordCipher::seal(RecordKind kind, std::span<const uint8_t> plaintext) {
  if (mode_ != Mode::Seal) core::fail(Status::Internal, "data connection: seal() on an opening cipher");
  std::vector<uint8_t> out(plaintext.size() + kTagBytes);
  begin(kind);
  update(plaintext.data(), out.data(), plaintext.size());
  finish(std::span<uint8_t, kTagBytes>(out.data() + plaintext.size(), kTagBytes));
  return out;
}

void RecordCipher::open(RecordKind kind, std::span<uint8_t> record) {
  if (mode_ != Mode::Open) core::fail(Status::Internal, "data connection: open() on a sealing cipher");
  if (record.size() < kTagBytes) {
    throw Error(Status::Protocol, "data frame: a sealed record of " + std::to_string(record.size()) +
                                      " bytes is shorter than its tag");
  }
  const size_t body = record.size() - kTagBytes;
  begin(kind);
  update(record.data(), record.data(), body);
  try {
    finish(std::span<uint8_t, kTagBytes>(record.data() + body, kTagBytes));
  } catch (...) {
    OPENSSL_cleanse(record.data(), body);  // no unauthenticated plaintext left behind
    throw;
  }
}

std::vector<uint8_t> seal_head(RecordCipher& c, std::span<const uint8_t> head) {
  if (head.size() < kHeaderBytes || (head.size() - kHeaderBytes) % kPieceBytes != 0) {
    core::fail(Status::Internal, "seal_head: " + std::to_string(head.size()) + " bytes are not a frame head");
  }
  std::vector<uint8_t> out = c.seal(RecordKind::Header, head.first(kHeaderBytes));
  if (head.size() > kHeaderBytes) {
    const auto pieces = c.seal(RecordKind::Pieces, head.subspan(kHeaderBytes));
    out.insert(out.end(), pieces.begin(), pieces.end());
  }
  return out;
}

std::vector<uint8_t> encode_sealed(RecordCipher& c, const Header& h, std::span<const Piece> pieces,
                                   std::span<const uint8_t> payload) {
  std::vector<uint8_t> out = seal_head(c, encode(h, pieces));
  for (size_t at = 0; at < payload.size(); at += kSegmentBytes) {
    const auto seg = c.seal(RecordKind::Payload, payload.subspan(at, std::min<size_t>(kSegmentBytes, payload.size() - at)));
    out.insert(out.end(), seg.begin(), seg.end());
  }
  return out;
}

}  // namespace pdkv::exec::tcpdp
