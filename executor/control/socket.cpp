#include "control/socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "pdkv/core/error.hpp"

namespace pdkv::exec {

using core::CauseDomain;
using core::Error;
using core::Status;

namespace {

std::string errno_text(int err) { return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")"; }

bool is_peer_lost(int err) {
  return err == ECONNREFUSED || err == ECONNRESET || err == EPIPE || err == ECONNABORTED;
}

// Turns an errno from an operation on `peer` into the pdkv error the header promises.
[[noreturn]] void throw_errno(int err, const std::string& doing, const std::string& peer) {
  const std::string msg = doing + " " + peer + ": " + errno_text(err);
  if (is_peer_lost(err)) throw Error(Status::PeerLost, msg, CauseDomain::Errno, err);
  throw Error(Status::Io, msg, CauseDomain::Errno, err);
}

[[noreturn]] void throw_timed_out(std::string_view what, const std::string& peer) {
  throw Error(Status::TimedOut, "timed out " + std::string(what) + " " + peer);
}

// poll() for `events` until the deadline; false when the deadline passed first.
bool wait_for(int fd, short events, Deadline deadline) {
  while (true) {
    const auto now = Clock::now();
    if (now >= deadline) return false;
    // Round up so a wait never ends a hair before the deadline and spins.
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count();
    const int timeout_ms = left > INT32_MAX ? INT32_MAX : static_cast<int>(left);
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, timeout_ms);
    if (rc > 0) return true;  // ready, or POLLERR/POLLHUP: the next call reports which
    if (rc < 0 && errno != EINTR) {
      const int err = errno;
      throw Error(Status::Io, "poll: " + errno_text(err), CauseDomain::Errno, err);
    }
  }
}

void set_nodelay(int fd) {
  const int one = 1;
  // Control frames are small and latency-bound; Nagle would delay each handshake step.
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

std::string numeric_name(const sockaddr* sa, socklen_t len) {
  char host[NI_MAXHOST];
  char serv[NI_MAXSERV];
  if (::getnameinfo(sa, len, host, sizeof host, serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "<unknown address>";
  }
  // Appended piece by piece: GCC 12 at -O3 warns (-Wrestrict, a false positive of its
  // basic_string inlining) on `"[" + std::string(host)`.
  const bool v6 = std::strchr(host, ':') != nullptr;
  std::string out;
  if (v6) out += '[';
  out += host;
  if (v6) out += ']';
  out += ':';
  out += serv;
  return out;
}

}  // namespace

std::string HostPort::to_string() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

HostPort parse_host_port(std::string_view text) {
  const auto bad = [&](const std::string& why) -> Error {
    return Error(Status::InvalidArgument,
                 "address \"" + std::string(text) + "\" " + why + " (expected host:port or [ipv6]:port)");
  };
  std::string_view host;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) throw bad("has no closing ']'");
    host = text.substr(1, close - 1);
    if (close + 1 >= text.size() || text[close + 1] != ':') throw bad("has no ':port' after ']'");
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) throw bad("has no port");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) throw bad("is an IPv6 address without brackets");
    if (host.find_first_of("[]") != std::string_view::npos) throw bad("has a stray bracket");
  }
  if (host.empty()) throw bad("has an empty host");
  if (port.empty()) throw bad("has an empty port");
  if (port.size() > 5) throw bad("has port \"" + std::string(port) + "\" outside 0..65535");
  uint32_t value = 0;
  for (char c : port) {
    if (c < '0' || c > '9') throw bad("has port \"" + std::string(port) + "\" that is not a decimal number");
    value = value * 10 + static_cast<uint32_t>(c - '0');
  }
  if (value > 65535) throw bad("has port " + std::to_string(value) + " outside 0..65535");
  return HostPort{std::string(host), static_cast<uint16_t>(value)};
}

std::string SocketAddress::to_string() const {
  return numeric_name(reinterpret_cast<const sockaddr*>(&storage), length);
}

std::vector<SocketAddress> resolve(const HostPort& address) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(address.port);
  const int rc = ::getaddrinfo(address.host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0) {
    const std::string msg = "cannot resolve host \"" + address.host + "\" of " + address.to_string() +
                            ": " + ::gai_strerror(rc);
    if (rc == EAI_SYSTEM) throw Error(Status::Io, msg, CauseDomain::Errno, errno);
    throw Error(Status::InvalidArgument, msg);
  }
  std::vector<SocketAddress> out;
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    if (ai->ai_addrlen > sizeof(sockaddr_storage)) continue;
    SocketAddress a;
    std::memcpy(&a.storage, ai->ai_addr, ai->ai_addrlen);
    a.length = ai->ai_addrlen;
    out.push_back(a);
  }
  ::freeaddrinfo(res);
  if (out.empty()) {
    throw Error(Status::InvalidArgument, "host \"" + address.host + "\" has no TCP address");
  }
  return out;
}

namespace {

// Converts a numeric host (IPv4 / IPv6 literal) without touching the network; nullopt for a name.
std::optional<std::vector<SocketAddress>> resolve_numeric(const HostPort& address) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | AI_NUMERICHOST;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(address.port);
  if (::getaddrinfo(address.host.c_str(), port.c_str(), &hints, &res) != 0) return std::nullopt;
  ::freeaddrinfo(res);
  return resolve(address);  // numeric: getaddrinfo answers without a lookup
}

// What the lookup thread and the waiting caller share; whichever lets go last frees it.
struct LookupState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::vector<SocketAddress> result;
  std::exception_ptr error;
};

}  // namespace

std::vector<SocketAddress> resolve_by(const HostPort& address, Deadline deadline, HostLookup lookup) {
  if (auto numeric = resolve_numeric(address)) return std::move(*numeric);
  // getaddrinfo has no timeout of its own that pdkv controls (a dead DNS server holds it for the
  // resolver's retries), so the caller waits for it only until its deadline.
  auto state = std::make_shared<LookupState>();
  try {
    std::thread([state, address, lookup] {
      std::vector<SocketAddress> result;
      std::exception_ptr error;
      try {
        result = lookup(address);
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(state->mu);
      state->result = std::move(result);
      state->error = error;
      state->done = true;
      state->cv.notify_all();
    }).detach();
  } catch (const std::system_error& e) {
    throw Error(Status::Io, "cannot start the lookup of host \"" + address.host + "\": " + e.what(),
                CauseDomain::Errno, e.code().value());
  }
  std::unique_lock<std::mutex> lock(state->mu);
  if (!state->cv.wait_until(lock, deadline, [&] { return state->done; })) {
    throw Error(Status::TimedOut, "looking up host \"" + address.host + "\" of " + address.to_string() +
                                      " did not finish before the deadline");
  }
  if (state->error) std::rethrow_exception(state->error);
  return std::move(state->result);
}

// ---------------------------------------------------------------------------------------------
// Socket

Socket::Socket(int fd, std::string peer) noexcept : fd_(fd), peer_(std::move(peer)) {}

Socket::Socket(Socket&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), peer_(std::move(other.peer_)) {}

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = std::exchange(other.fd_, -1);
    peer_ = std::move(other.peer_);
  }
  return *this;
}

Socket::~Socket() { close(); }

void Socket::close() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Socket::shutdown_write() noexcept {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_WR);
}

Socket Socket::connect(const HostPort& address, Deadline deadline) {
  const std::string name = address.to_string();
  const std::vector<SocketAddress> targets = resolve_by(address, deadline);
  int last_err = 0;
  for (const SocketAddress& target : targets) {
    const int fd = ::socket(target.storage.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      last_err = errno;
      continue;
    }
    Socket s(fd, name);
    int err = 0;
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&target.storage), target.length) != 0) {
      err = errno;
      if (err == EINPROGRESS || err == EINTR) {
        if (!wait_for(fd, POLLOUT, deadline)) throw_timed_out("connecting to", name);
        socklen_t len = sizeof err;
        if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      }
    }
    if (err == 0) {
      set_nodelay(fd);
      return s;
    }
    last_err = err;
  }
  if (last_err == ECONNREFUSED) {
    throw Error(Status::PeerLost, "connecting to " + name + ": connection refused (is the peer listening?)",
                CauseDomain::Errno, last_err);
  }
  throw_errno(last_err, "connecting to", name);
}

void Socket::send_all(std::span<const uint8_t> bytes, Deadline deadline, std::string_view what) {
  while (!bytes.empty()) {
    const size_t n = send_some(bytes);
    bytes = bytes.subspan(n);
    if (n == 0 && !wait_for(fd_, POLLOUT, deadline)) {
      throw_timed_out(std::string(what) + " (" + std::to_string(bytes.size()) + " bytes unsent) to", peer_);
    }
  }
}

size_t Socket::send_some(std::span<const uint8_t> bytes) {
  if (fd_ < 0) throw Error(Status::PeerLost, "sending to " + peer_ + ": the connection is closed");
  while (true) {
    const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    throw_errno(errno, "sending to", peer_);
  }
}

size_t Socket::recv_some(std::span<uint8_t> buffer, Deadline deadline, std::string_view what) {
  while (true) {
    if (const std::optional<size_t> n = try_recv(buffer)) return *n;
    if (!wait_for(fd_, POLLIN, deadline)) throw_timed_out("waiting for " + std::string(what) + " from", peer_);
  }
}

std::optional<size_t> Socket::try_recv(std::span<uint8_t> buffer) {
  if (fd_ < 0) throw Error(Status::PeerLost, "receiving from " + peer_ + ": the connection is closed");
  while (true) {
    const ssize_t n = ::recv(fd_, buffer.data(), buffer.size(), 0);
    if (n > 0) return static_cast<size_t>(n);
    if (n == 0) {
      if (buffer.empty()) return 0;
      throw Error(Status::PeerLost, "peer " + peer_ + " closed the connection");
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return std::nullopt;
    throw_errno(errno, "receiving from", peer_);
  }
}

// ---------------------------------------------------------------------------------------------
// Listener

Listener::Listener(const HostPort& address, int backlog) {
  const std::vector<SocketAddress> targets = resolve(address);
  int last_err = 0;
  for (const SocketAddress& target : targets) {
    const int fd = ::socket(target.storage.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      last_err = errno;
      continue;
    }
    // A restarted agent must rebind its port while old connections sit in TIME_WAIT.
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, reinterpret_cast<const sockaddr*>(&target.storage), target.length) != 0 ||
        ::listen(fd, backlog) != 0) {
      last_err = errno;
      ::close(fd);
      continue;
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof bound;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) != 0) {
      last_err = errno;
      ::close(fd);
      continue;
    }
    const uint16_t port = bound.ss_family == AF_INET6
                              ? ntohs(reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port)
                              : ntohs(reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
    fd_ = fd;
    address_ = HostPort{address.host, port};
    return;
  }
  throw Error(Status::Io, "cannot listen on " + address.to_string() + ": " + errno_text(last_err),
              CauseDomain::Errno, last_err);
}

Listener::Listener(Listener&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), address_(std::move(other.address_)) {}

Listener& Listener::operator=(Listener&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = std::exchange(other.fd_, -1);
    address_ = std::move(other.address_);
  }
  return *this;
}

Listener::~Listener() { close(); }

void Listener::close() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::optional<Socket> Listener::accept() {
  if (fd_ < 0) throw Error(Status::Shutdown, "listener on " + address_.to_string() + " is closed");
  while (true) {
    sockaddr_storage from{};
    socklen_t len = sizeof from;
    const int fd = ::accept4(fd_, reinterpret_cast<sockaddr*>(&from), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      set_nodelay(fd);
      return Socket(fd, numeric_name(reinterpret_cast<const sockaddr*>(&from), len));
    }
    const int err = errno;
    if (err == EINTR || err == ECONNABORTED) continue;  // a client gave up while queued: next one
    if (err == EAGAIN || err == EWOULDBLOCK) return std::nullopt;
    throw Error(Status::Io, "accepting on " + address_.to_string() + ": " + errno_text(err),
                CauseDomain::Errno, err);
  }
}

Socket Listener::accept(Deadline deadline) {
  while (true) {
    if (std::optional<Socket> s = accept()) return std::move(*s);
    if (!wait_for(fd_, POLLIN, deadline)) throw_timed_out("waiting for a connection on", address_.to_string());
  }
}

}  // namespace pdkv::exec
