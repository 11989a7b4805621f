// One control connection: a Socket, a FrameDecoder and a queue of outgoing frames. Two ways to use
// it, not to be mixed on the same frames in flight:
//  * blocking (the handshake): send() and recv() with a deadline;
//  * nonblocking (an epoll loop, level-triggered): fd(), read_available(), queue() + flush_some(),
//    wants_write() to decide whether to wait for EPOLLOUT.
// Not thread-safe: one thread owns a channel at a time. After any error (a send that timed out
// may have left half a frame on the wire; a Protocol error leaves the decoder failed) the
// channel is unusable: close it.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "control/frame.hpp"
#include "control/messages.hpp"
#include "control/session_crypto.hpp"
#include "control/socket.hpp"
#include "pdkv/core/error.hpp"

namespace pdkv::exec {

class ControlChannel {
 public:
  explicit ControlChannel(Socket socket);
  static ControlChannel connect(const HostPort& address, Deadline deadline);

  int fd() const noexcept { return socket_.fd(); }
  // The peer's address ("ip:port"), used in every error message.
  const std::string& peer() const noexcept { return socket_.peer(); }
  Socket& socket() noexcept { return socket_; }

  // Flushes anything queued, then writes this frame, blocking until sent or the deadline.
  void send(FrameType type, std::span<const uint8_t> payload, Deadline deadline);
  template <class Message>
  void send(const Message& m, Deadline deadline) {
    send(Message::kType, m.encode(), deadline);
  }

  // The next frame, blocking until the deadline (TimedOut naming the peer). An Error frame from
  // the peer is thrown as Error(its status, "peer <addr>: <its message>"); EOF is PeerLost.
  Frame recv(Deadline deadline);

  // Every complete frame the socket has now, never blocking (Error frames included, as frames:
  // see peer_error()), after those a recv() already decoded (see has_decoded_frames()). Reads at most kReadBudgetBytes per call so one flooding peer cannot starve
  // the loop; with level-triggered epoll the rest is read on the next wakeup. EOF: PeerLost.
  std::vector<Frame> read_available();
  static constexpr size_t kReadBudgetBytes = 1u << 20;

  // Frames that arrived with one recv() returned and wait in the decoder: read_available() hands
  // them out, but no socket event announces them (switching from recv() to an epoll loop, check).
  bool has_decoded_frames() const noexcept { return decoder_.pending_frames() != 0; }

  void queue(FrameType type, std::span<const uint8_t> payload);
  template <class Message>
  void queue(const Message& m) {
    queue(Message::kType, m.encode());
  }
  // Writes what the socket takes without blocking; true when the queue is now empty.
  bool flush_some();
  bool wants_write() const noexcept { return !out_.empty(); }
  size_t queued_bytes() const noexcept { return out_bytes_; }

  // The exception a received Error frame stands for: Error(its status, "peer <addr>: <message>").
  // A malformed Error payload gives Protocol.
  core::Error peer_error(const Frame& frame) const;

  void close() noexcept { socket_.close(); }

  // From now on every frame's payload is sealed on the way out and opened on the way in
  // (session_crypto.hpp); a frame that fails to open is Protocol and breaks the channel. Called
  // by the handshake at the point where both sides switch: the client right after sending its
  // Proof, the server right after checking it.
  void protect(const SessionKeys& keys);
  bool is_protected() const noexcept { return sealer_.has_value(); }

  // Frames received from now on may announce at most `max` payload bytes (FrameDecoder).
  void set_max_payload(uint32_t max) noexcept { decoder_.set_max_payload(max); }

 private:
  Socket socket_;
  FrameDecoder decoder_;
  std::deque<std::vector<uint8_t>> out_;  // encoded frames; front may be partly sent
  size_t out_front_sent_ = 0;
  size_t out_bytes_ = 0;
  std::vector<uint8_t> read_buf_;
  std::optional<core::Error> pending_error_;  // a loss seen after frames read_available returned
  std::optional<FrameSealer> sealer_;  // outgoing frames, once protect() was called
  std::optional<FrameSealer> opener_;  // incoming frames, likewise

  void open_in_place(Frame& frame);
  // Moves the frames waiting in the decoder into `frames`, opened; false when one failed to open
  // after others did (the error is kept in pending_error_ for the next call; throws when none did).
  bool take_decoded(std::vector<Frame>& frames);
};

// This machine's identity for "is the peer on the same host": the kernel boot id
// (/proc/sys/kernel/random/boot_id) and the hostname, "<boot_id>/<hostname>". Two processes on
// one host (and one kernel) get the same string; containers with their own UTS namespace differ.
std::string host_identity();

}  // namespace pdkv::exec
