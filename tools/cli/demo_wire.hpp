// The demo's pipes between the coordinator and its rank processes: one JSON object per line.
// Messages are small (block ids, counters), so a line is the whole framing.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace pdkv::cli::demo {

// Writes `msg` and a newline to fd, whole (retrying short writes and EINTR). False when the
// reader is gone (EPIPE: the caller ignores SIGPIPE) or on another write error.
bool send(int fd, const nlohmann::json& msg);

// Reads lines from one fd.
class LineReader {
 public:
  explicit LineReader(int fd) : fd_(fd) {}
  // Blocks for the next message; nullopt at end of file or on a read error. A line that is not
  // JSON throws std::runtime_error naming it.
  std::optional<nlohmann::json> next();
  // One read(2) into the buffer (call when poll says the fd is readable). False at end of file
  // or on an error; messages completed by it are then taken with take().
  bool pump();
  std::optional<nlohmann::json> take();
  int fd() const { return fd_; }

 private:
  int fd_;
  std::string buf_;
};

std::string to_hex(std::span<const uint8_t> bytes);
// Throws std::runtime_error on odd length or a non-hex digit.
std::vector<uint8_t> from_hex(const std::string& text);

}  // namespace pdkv::cli::demo
