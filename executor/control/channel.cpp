#include "control/channel.hpp"

#include <unistd.h>

#include <array>
#include <climits>
#include <fstream>
#include <string>
#include <utility>

namespace pdkv::exec {

using core::Error;
using core::Status;

namespace {
constexpr size_t kReadChunkBytes = 64u << 10;
}  // namespace

ControlChannel::ControlChannel(Socket socket) : socket_(std::move(socket)) {}

ControlChannel ControlChannel::connect(const HostPort& address, Deadline deadline) {
  return ControlChannel(Socket::connect(address, deadline));
}

void ControlChannel::protect(const SessionKeys& keys) {
  sealer_.emplace(keys.send);
  opener_.emplace(keys.recv);
}

void ControlChannel::open_in_place(Frame& frame) {
  if (opener_) frame.payload = opener_->open(static_cast<uint16_t>(frame.type), frame.version_minor, frame.payload);
}

void ControlChannel::queue(FrameType type, std::span<const uint8_t> payload) {
  std::vector<uint8_t> frame =
      sealer_ ? encode_frame(type, sealer_->seal(static_cast<uint16_t>(type), kFrameVersionMinor, payload))
              : encode_frame(type, payload);
  out_bytes_ += frame.size();
  out_.push_back(std::move(frame));
}

bool ControlChannel::flush_some() {
  while (!out_.empty()) {
    const std::vector<uint8_t>& front = out_.front();
    const size_t n = socket_.send_some(std::span(front).subspan(out_front_sent_));
    if (n == 0) return false;
    out_front_sent_ += n;
    out_bytes_ -= n;
    if (out_front_sent_ == front.size()) {
      out_.pop_front();
      out_front_sent_ = 0;
    }
  }
  return true;
}

void ControlChannel::send(FrameType type, std::span<const uint8_t> payload, Deadline deadline) {
  queue(type, payload);
  const std::string what = std::string("sending ") + frame_type_name(type);
  while (!out_.empty()) {
    const std::vector<uint8_t>& front = out_.front();
    socket_.send_all(std::span(front).subspan(out_front_sent_), deadline, what);
    out_bytes_ -= front.size() - out_front_sent_;
    out_.pop_front();
    out_front_sent_ = 0;
  }
}

core::Error ControlChannel::peer_error(const Frame& frame) const {
  ErrorMessage m;
  try {
    m = ErrorMessage::decode(frame.payload);
  } catch (const Error& e) {
    return Error(Status::Protocol, "peer " + peer() + " sent a malformed Error frame: " + e.what());
  }
  if (m.status == Status::Ok) {
    return Error(Status::Protocol, "peer " + peer() + " sent an Error frame with status PDKV_OK: " + m.message);
  }
  return Error(m.status, "peer " + peer() + ": " + m.message);
}

Frame ControlChannel::recv(Deadline deadline) {
  std::array<uint8_t, 4096> buf;  // handshake frames are small; the decoder assembles big ones
  while (true) {
    if (std::optional<Frame> f = decoder_.next()) {
      open_in_place(*f);
      if (f->type == FrameType::Error) throw peer_error(*f);
      return std::move(*f);
    }
    size_t n = 0;
    try {
      n = socket_.recv_some(buf, deadline, "a control frame");
    } catch (const Error& e) {
      if (e.status() == Status::PeerLost && !decoder_.at_frame_boundary()) {
        throw Error(Status::PeerLost, std::string(e.what()) + " in the middle of a frame (" +
                                          std::to_string(decoder_.partial_bytes()) + " bytes of it received)");
      }
      throw;
    }
    decoder_.feed(buf.data(), n);
  }
}

bool ControlChannel::take_decoded(std::vector<Frame>& frames) {
  while (std::optional<Frame> f = decoder_.next()) {
    try {
      open_in_place(*f);
    } catch (const Error& e) {
      // Hand out the frames that opened; the connection is broken from here on.
      if (frames.empty()) throw;
      pending_error_ = e;
      return false;
    }
    frames.push_back(std::move(*f));
  }
  return true;
}

std::vector<Frame> ControlChannel::read_available() {
  std::vector<Frame> frames;
  if (pending_error_) {
    Error e = std::move(*pending_error_);
    pending_error_.reset();
    throw e;
  }
  // Frames decoded before this call (a blocking recv() read them with the frame it returned)
  // come first: no new byte may ever arrive to hand them out.
  if (!take_decoded(frames)) return frames;
  if (read_buf_.empty()) read_buf_.resize(kReadChunkBytes);
  size_t budget = kReadBudgetBytes;
  while (budget > 0) {
    std::optional<size_t> n;
    try {
      n = socket_.try_recv(std::span(read_buf_).first(std::min(budget, read_buf_.size())));
    } catch (const Error& e) {
      // Hand out what arrived before the close (a Bye, a last Notify); report the loss next call.
      if (frames.empty()) throw;
      pending_error_ = e;
      return frames;
    }
    if (!n) break;
    decoder_.feed(read_buf_.data(), *n);
    budget -= *n;
    if (!take_decoded(frames)) return frames;
  }
  return frames;
}

std::string host_identity() {
  std::string boot_id;
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::getline(in, boot_id);
  char host[HOST_NAME_MAX + 1] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return boot_id + "/" + host;
}

}  // namespace pdkv::exec
