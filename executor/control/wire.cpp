#include "control/wire.hpp"

#include <string>

#include "pdkv/core/error.hpp"

namespace pdkv::exec {

using core::Error;
using core::Status;

namespace {

template <class T>
void put_le(std::vector<uint8_t>& out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

}  // namespace

void WireWriter::u8(uint8_t v) { out_.push_back(v); }
void WireWriter::u16(uint16_t v) { put_le(out_, v); }
void WireWriter::u32(uint32_t v) { put_le(out_, v); }
void WireWriter::u64(uint64_t v) { put_le(out_, v); }

void WireWriter::raw(std::span<const uint8_t> bytes) {
  out_.insert(out_.end(), bytes.begin(), bytes.end());
}

void WireWriter::bytes(std::span<const uint8_t> bytes, size_t max, std::string_view field) {
  // The u32 prefix bounds every limit; a limit above it would be a bug in the caller.
  if (bytes.size() > max || bytes.size() > UINT32_MAX) {
    throw Error(Status::InvalidArgument, std::string(field) + " is " + std::to_string(bytes.size()) +
                                             " bytes, more than the limit of " + std::to_string(max));
  }
  u32(static_cast<uint32_t>(bytes.size()));
  raw(bytes);
}

void WireWriter::string(std::string_view s, size_t max, std::string_view field) {
  bytes(std::span(reinterpret_cast<const uint8_t*>(s.data()), s.size()), max, field);
}

WireReader::WireReader(std::span<const uint8_t> in, std::string_view what) : in_(in), what_(what) {}

void WireReader::fail(std::string_view message) const {
  throw Error(Status::Protocol, what_ + ": " + std::string(message));
}

void WireReader::need(size_t n, std::string_view field) const {
  if (n > remaining()) {
    fail(std::string(field) + " needs " + std::to_string(n) + " bytes at offset " +
         std::to_string(pos_) + " but only " + std::to_string(remaining()) + " remain (truncated)");
  }
}

uint8_t WireReader::u8(std::string_view field) {
  need(1, field);
  return in_[pos_++];
}

uint16_t WireReader::u16(std::string_view field) {
  need(2, field);
  uint16_t v = static_cast<uint16_t>(in_[pos_] | (in_[pos_ + 1] << 8));
  pos_ += 2;
  return v;
}

uint32_t WireReader::u32(std::string_view field) {
  need(4, field);
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i) v |= static_cast<uint32_t>(in_[pos_ + i]) << (8 * i);
  pos_ += 4;
  return v;
}

uint64_t WireReader::u64(std::string_view field) {
  need(8, field);
  uint64_t v = 0;
  for (size_t i = 0; i < 8; ++i) v |= static_cast<uint64_t>(in_[pos_ + i]) << (8 * i);
  pos_ += 8;
  return v;
}

void WireReader::raw(std::span<uint8_t> out, std::string_view field) {
  need(out.size(), field);
  for (size_t i = 0; i < out.size(); ++i) out[i] = in_[pos_ + i];
  pos_ += out.size();
}

std::vector<uint8_t> WireReader::bytes(std::string_view field, size_t max) {
  const uint32_t n = u32(field);
  if (n > max) {
    fail(std::string(field) + " length " + std::to_string(n) + " exceeds the limit of " +
         std::to_string(max) + " bytes");
  }
  need(n, field);
  std::vector<uint8_t> out(in_.begin() + static_cast<ptrdiff_t>(pos_),
                           in_.begin() + static_cast<ptrdiff_t>(pos_ + n));
  pos_ += n;
  return out;
}

std::string WireReader::string(std::string_view field, size_t max) {
  const uint32_t n = u32(field);
  if (n > max) {
    fail(std::string(field) + " length " + std::to_string(n) + " exceeds the limit of " +
         std::to_string(max) + " bytes");
  }
  need(n, field);
  std::string out(reinterpret_cast<const char*>(in_.data() + pos_), n);
  pos_ += n;
  return out;
}

uint32_t WireReader::count(std::string_view field, size_t max, size_t min_element_bytes) {
  const uint32_t n = u32(field);
  if (n > max) {
    fail(std::string(field) + " count " + std::to_string(n) + " exceeds the limit of " +
         std::to_string(max));
  }
  // n <= max <= 2^32 and min_element_bytes is a small constant: no overflow in 64 bits.
  const uint64_t least = static_cast<uint64_t>(n) * min_element_bytes;
  if (least > remaining()) {
    fail(std::string(field) + " count " + std::to_string(n) + " needs at least " +
         std::to_string(least) + " bytes but only " + std::to_string(remaining()) +
         " remain (truncated)");
  }
  return n;
}

void WireReader::expect_end() const {
  if (remaining() != 0) {
    fail(std::to_string(remaining()) + " trailing bytes after the last field (at offset " +
         std::to_string(pos_) + " of " + std::to_string(in_.size()) + ")");
  }
}

}  // namespace pdkv::exec
