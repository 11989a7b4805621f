// Little-endian field encoding for the control channel's messages. The writer refuses local values
// over a field's limit (InvalidArgument); the reader treats its input as hostile: every read is
// bounds-checked, every length prefix is checked against the caller's limit before anything is
// allocated, and each failure is Error(Protocol) naming the message, the field, the value and the
// limit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace pdkv::exec {

class WireWriter {
 public:
  void u8(uint8_t v);
  void u16(uint16_t v);
  void u32(uint32_t v);
  void u64(uint64_t v);
  // Fixed-size bytes, no length prefix (nonces, MACs).
  void raw(std::span<const uint8_t> bytes);
  // u32 length prefix + bytes. Throws InvalidArgument naming `field` when size > max.
  void bytes(std::span<const uint8_t> bytes, size_t max, std::string_view field);
  void string(std::string_view s, size_t max, std::string_view field);

  const std::vector<uint8_t>& data() const noexcept { return out_; }
  std::vector<uint8_t> take() noexcept { return std::move(out_); }

 private:
  std::vector<uint8_t> out_;
};

class WireReader {
 public:
  // `what` names the message being decoded ("Hello"); it leads every error message.
  WireReader(std::span<const uint8_t> in, std::string_view what);

  uint8_t u8(std::string_view field);
  uint16_t u16(std::string_view field);
  uint32_t u32(std::string_view field);
  uint64_t u64(std::string_view field);
  // Fixed-size bytes, exactly out.size() of them.
  void raw(std::span<uint8_t> out, std::string_view field);
  // u32 length prefix, refused when it exceeds max or what remains, before allocating.
  std::vector<uint8_t> bytes(std::string_view field, size_t max);
  std::string string(std::string_view field, size_t max);
  // A u32 element count for a vector, refused when it exceeds max, or when even
  // count * min_element_bytes would not fit in what remains (so no reserve() a peer can inflate).
  uint32_t count(std::string_view field, size_t max, size_t min_element_bytes);

  size_t remaining() const noexcept { return in_.size() - pos_; }
  size_t position() const noexcept { return pos_; }
  // Refuses trailing bytes (Protocol, naming how many).
  void expect_end() const;

  // Throws Error(Protocol, "<what>: <message>").
  [[noreturn]] void fail(std::string_view message) const;

 private:
  void need(size_t n, std::string_view field) const;

  std::span<const uint8_t> in_;
  size_t pos_ = 0;
  std::string what_;
};

}  // namespace pdkv::exec
