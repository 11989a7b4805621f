// TCP sockets for the control channel: address parsing, a listener, and a connected socket with
// deadlines. Every descriptor is nonblocking and close-on-exec; blocking helpers wait with poll()
// against a steady_clock deadline. Failures map to pdkv statuses:
//   refused / reset / broken pipe / EOF  -> PeerLost (naming the address)
//   deadline                             -> TimedOut (naming what was awaited and the address)
//   anything else                        -> Io with cause (Errno, errno)
// Sends use MSG_NOSIGNAL: a dead peer never raises SIGPIPE.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <sys/socket.h>

namespace pdkv::exec {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

// A deadline `timeout` from now.
inline Deadline deadline_in(std::chrono::nanoseconds timeout) { return Clock::now() + timeout; }

struct HostPort {
  std::string host;  // IPv4 literal, IPv6 literal (without brackets) or hostname
  uint16_t port = 0;

  // "host:port", "[v6]:port" for IPv6 literals.
  std::string to_string() const;
  bool operator==(const HostPort&) const = default;
};

// "1.2.3.4:80", "[::1]:80", "name:80"; port 0..65535 in decimal. Empty host, missing or bad port,
// unbalanced brackets: InvalidArgument naming the text. Syntax only: no name lookup.
HostPort parse_host_port(std::string_view text);

// A resolved socket address (one getaddrinfo result).
struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;
  // Numeric "ip:port" / "[ip6]:port".
  std::string to_string() const;
};

// getaddrinfo (TCP, numeric service), blocking (a numeric host never touches the network).
// Unknown host or no TCP address: InvalidArgument naming the host and gai_strerror's reason;
// a system error during the lookup: Io (cause Errno).
std::vector<SocketAddress> resolve(const HostPort& address);

// The lookup resolve_by() runs for a host name; resolve() in production, replaceable in tests.
using HostLookup = std::vector<SocketAddress> (*)(const HostPort& address);

// resolve() bounded by `deadline`, for connecting to a peer: a numeric host is converted without
// any lookup; a host name is looked up on a helper thread, and when the deadline passes first the
// call fails with TimedOut naming the host, while the helper thread finishes the lookup on its
// own (the system resolver's own timeouts end it) and frees what it used. Errors otherwise as
// resolve(); no helper thread: Io.
std::vector<SocketAddress> resolve_by(const HostPort& address, Deadline deadline,
                                      HostLookup lookup = resolve);

class Socket {
 public:
  Socket() = default;
  // Takes ownership of a connected, nonblocking descriptor; `peer` names it in messages.
  Socket(int fd, std::string peer) noexcept;
  Socket(Socket&& other) noexcept;
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket();

  // Resolves `address` and tries each result until one connects (nonblocking connect + poll).
  // Refused: PeerLost; deadline: TimedOut; each naming the address.
  static Socket connect(const HostPort& address, Deadline deadline);

  bool valid() const noexcept { return fd_ >= 0; }
  int fd() const noexcept { return fd_; }
  const std::string& peer() const noexcept { return peer_; }

  // Writes every byte or throws (TimedOut naming `what`, PeerLost, Io).
  void send_all(std::span<const uint8_t> bytes, Deadline deadline, std::string_view what = "sending");
  // Writes what the socket takes now without blocking; returns the count (0 when full).
  size_t send_some(std::span<const uint8_t> bytes);
  // Waits until at least one byte arrives, returns how many were read (>= 1).
  // EOF: PeerLost; deadline: TimedOut naming `what`.
  size_t recv_some(std::span<uint8_t> buffer, Deadline deadline, std::string_view what = "data");
  // Reads what is there without blocking; nullopt when nothing is (EAGAIN). EOF: PeerLost.
  std::optional<size_t> try_recv(std::span<uint8_t> buffer);

  void shutdown_write() noexcept;
  void close() noexcept;

 private:
  int fd_ = -1;
  std::string peer_;
};

class Listener {
 public:
  // bind + listen with SO_REUSEADDR; port 0 picks a free port (see port()).
  // Failures: Io (cause Errno) naming the address; a bad host: InvalidArgument.
  explicit Listener(const HostPort& address, int backlog = 128);
  Listener(Listener&& other) noexcept;
  Listener& operator=(Listener&& other) noexcept;
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;
  ~Listener();

  int fd() const noexcept { return fd_; }
  // The port actually bound (the free one chosen for port 0).
  uint16_t port() const noexcept { return address_.port; }
  // The bound host (as given) and the actual port.
  const HostPort& address() const noexcept { return address_; }

  // A pending connection, or nullopt when none is waiting (never blocks). Accepted sockets are
  // nonblocking, close-on-exec, TCP_NODELAY.
  std::optional<Socket> accept();
  // Waits for a connection until the deadline (TimedOut naming the listen address).
  Socket accept(Deadline deadline);

  void close() noexcept;

 private:
  int fd_ = -1;
  HostPort address_;
};

}  // namespace pdkv::exec
