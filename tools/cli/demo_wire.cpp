#include "demo_wire.hpp"

#include <cerrno>
#include <stdexcept>

#include <unistd.h>

namespace pdkv::cli::demo {

bool send(int fd, const nlohmann::json& msg) {
  const std::string line = msg.dump() + "\n";
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd, line.data() + done, line.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

bool LineReader::pump() {
  char chunk[65536];
  while (true) {
    const ssize_t n = ::read(fd_, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    buf_.append(chunk, static_cast<size_t>(n));
    return true;
  }
}

std::optional<nlohmann::json> LineReader::take() {
  const size_t nl = buf_.find('\n');
  if (nl == std::string::npos) return std::nullopt;
  std::string line = buf_.substr(0, nl);
  buf_.erase(0, nl + 1);
  try {
    return nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error("a demo pipe carried a line that is not JSON (" + std::string(e.what()) +
                             "): " + line.substr(0, 200));
  }
}

std::optional<nlohmann::json> LineReader::next() {
  while (true) {
    if (auto m = take()) return m;
    if (!pump()) return std::nullopt;
  }
}

std::string to_hex(std::span<const uint8_t> bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    out.push_back(digits[b >> 4]);
    out.push_back(digits[b & 15]);
  }
  return out;
}

std::vector<uint8_t> from_hex(const std::string& text) {
  if (text.size() % 2 != 0) throw std::runtime_error("hex text of odd length " + std::to_string(text.size()));
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    throw std::runtime_error(std::string("not a hex digit: '") + c + "'");
  };
  std::vector<uint8_t> out(text.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<uint8_t>(nibble(text[2 * i]) << 4 | nibble(text[2 * i + 1]));
  }
  return out;
}

}  // namespace pdkv::cli::demo
