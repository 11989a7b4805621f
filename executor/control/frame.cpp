#include "control/frame.hpp"

#include <algorithm>
#include <cstdio>
#include <string>

#include "pdkv/core/engine_metadata.hpp"
#include "pdkv/core/error.hpp"

namespace pdkv::exec {

using core::Error;
using core::Status;

namespace {

uint32_t load_u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

void store_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", v);
  return buf;
}

}  // namespace

bool is_known_frame_type(uint16_t type) noexcept {
  return type >= static_cast<uint16_t>(FrameType::Hello) && type <= kLastFrameType;
}

const char* frame_type_name(FrameType type) noexcept {
  switch (type) {
    case FrameType::Hello: return "Hello";
    case FrameType::Challenge: return "Challenge";
    case FrameType::Proof: return "Proof";
    case FrameType::PeerInfo: return "PeerInfo";
    case FrameType::Ready: return "Ready";
    case FrameType::Reject: return "Reject";
    case FrameType::Notify: return "Notify";
    case FrameType::Ping: return "Ping";
    case FrameType::Pong: return "Pong";
    case FrameType::Error: return "Error";
    case FrameType::Bye: return "Bye";
    case FrameType::Transport: return "Transport";
    case FrameType::KeepLeases: return "KeepLeases";
    case FrameType::LeaseQuery: return "LeaseQuery";
    case FrameType::LeaseAnswer: return "LeaseAnswer";
  }
  return "unknown";
}

std::vector<uint8_t> encode_frame(FrameType type, std::span<const uint8_t> payload) {
  if (payload.size() > kMaxFramePayload) {
    throw Error(Status::InvalidArgument,
                std::string(frame_type_name(type)) + " payload of " + std::to_string(payload.size()) +
                    " bytes exceeds the frame limit of " + std::to_string(kMaxFramePayload) + " bytes");
  }
  std::vector<uint8_t> out(kFrameHeaderBytes + payload.size());
  store_u32(out.data(), kFrameMagic);
  out[4] = kFrameVersionMajor;
  out[5] = kFrameVersionMinor;
  const auto t = static_cast<uint16_t>(type);
  out[6] = static_cast<uint8_t>(t);
  out[7] = static_cast<uint8_t>(t >> 8);
  store_u32(out.data() + 8, static_cast<uint32_t>(payload.size()));
  store_u32(out.data() + 12, core::crc32c(payload));
  std::copy(payload.begin(), payload.end(), out.begin() + kFrameHeaderBytes);
  return out;
}

void FrameDecoder::fail(std::string message) {
  failed_ = "control frame: " + std::move(message);
  throw Error(Status::Protocol, failed_);
}

void FrameDecoder::check_header() {
  const uint32_t magic = load_u32(header_);
  if (magic != kFrameMagic) {
    fail("bad magic " + hex32(magic) + " (expected " + hex32(kFrameMagic) +
         ", \"PDKF\"): the peer is not a pdkv control channel or the stream is out of sync");
  }
  const uint8_t major = header_[4];
  if (major != kFrameVersionMajor) {
    fail("frame version " + std::to_string(major) + "." + std::to_string(header_[5]) +
         " is not supported (this side speaks major version " + std::to_string(kFrameVersionMajor) +
         "); upgrade the older side");
  }
  const uint16_t type = static_cast<uint16_t>(header_[6] | (header_[7] << 8));
  if (!is_known_frame_type(type)) fail("unknown frame type " + std::to_string(type));
  const uint32_t len = load_u32(header_ + 8);
  if (len > max_payload_) {
    fail(std::string(frame_type_name(static_cast<FrameType>(type))) + " frame announces a payload of " +
         std::to_string(len) + " bytes, more than the limit of " + std::to_string(max_payload_) +
         (max_payload_ < kMaxFramePayload ? " before the peer proved the pre-shared key" : ""));
  }
  current_ = Frame{};
  current_.type = static_cast<FrameType>(type);
  current_.version_minor = header_[5];
  current_.payload.reserve(len);  // the checked length, never more
  payload_len_ = len;
  payload_crc_ = load_u32(header_ + 12);
  payload_have_ = 0;
  in_payload_ = true;
}

void FrameDecoder::feed(const uint8_t* data, size_t len) {
  if (!failed_.empty()) throw Error(Status::Protocol, failed_);
  while (true) {
    if (!in_payload_) {
      const size_t take = std::min(len, kFrameHeaderBytes - header_have_);
      std::copy(data, data + take, header_ + header_have_);
      header_have_ += take;
      data += take;
      len -= take;
      if (header_have_ < kFrameHeaderBytes) return;
      check_header();
    }
    const size_t take = std::min<size_t>(len, payload_len_ - payload_have_);
    current_.payload.insert(current_.payload.end(), data, data + take);
    payload_have_ += take;
    data += take;
    len -= take;
    if (payload_have_ < payload_len_) return;
    const uint32_t crc = core::crc32c(current_.payload);
    if (crc != payload_crc_) {
      fail(std::string(frame_type_name(current_.type)) + " frame of " + std::to_string(payload_len_) +
           " bytes has crc32c " + hex32(crc) + " but its header says " + hex32(payload_crc_) +
           " (corrupted in transit)");
    }
    ready_.push_back(std::move(current_));
    current_ = Frame{};
    in_payload_ = false;
    header_have_ = 0;
    if (len == 0) return;
  }
}

std::optional<Frame> FrameDecoder::next() {
  if (ready_.empty()) {
    if (!failed_.empty()) throw Error(Status::Protocol, failed_);
    return std::nullopt;
  }
  Frame f = std::move(ready_.front());
  ready_.pop_front();
  return f;
}

size_t FrameDecoder::partial_bytes() const noexcept {
  return in_payload_ ? kFrameHeaderBytes + payload_have_ : header_have_;
}

bool FrameDecoder::at_frame_boundary() const noexcept { return !in_payload_ && header_have_ == 0; }

}  // namespace pdkv::exec
