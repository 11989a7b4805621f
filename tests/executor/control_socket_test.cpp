// TCP sockets of the control channel over loopback: address parsing, listener port reporting,
// connect failures, deadlines, and the mapping of failures to pdkv statuses.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "control/socket.hpp"
#include "pdkv/core/error.hpp"

using namespace pdkv::exec;
using namespace std::chrono_literals;
using pdkv::core::CauseDomain;
using pdkv::core::Error;
using pdkv::core::Status;

namespace {

template <class F>
Error catch_error(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error thrown";
  return Error(Status::Ok, "");
}

bool contains(const Error& e, const std::string& s) { return std::string(e.what()).find(s) != std::string::npos; }

const HostPort kLoopback{"127.0.0.1", 0};

// A connected (client, server-side) pair over loopback.
std::pair<Socket, Socket> connected_pair(Listener& l) {
  Socket c = Socket::connect(HostPort{"127.0.0.1", l.port()}, deadline_in(10s));
  Socket s = l.accept(deadline_in(10s));
  return {std::move(c), std::move(s)};
}

}  // namespace

TEST(ControlSocket, ParsesHostPort) {
  EXPECT_EQ(parse_host_port("127.0.0.1:80"), (HostPort{"127.0.0.1", 80}));
  EXPECT_EQ(parse_host_port("[::1]:8080"), (HostPort{"::1", 8080}));
  EXPECT_EQ(parse_host_port("node-3.cluster:0"), (HostPort{"node-3.cluster", 0}));
  EXPECT_EQ(parse_host_port("h:65535").port, 65535);
  EXPECT_EQ(parse_host_port("[fe80::1%eth0]:1").host, "fe80::1%eth0");
  EXPECT_EQ((HostPort{"::1", 5}).to_string(), "[::1]:5");
  EXPECT_EQ((HostPort{"10.0.0.1", 5}).to_string(), "10.0.0.1:5");
}

TEST(ControlSocket, RefusesBadAddressesNamingTheText) {
  for (const char* bad : {"", "noport", "host:", ":80", "::1:80", "[::1]80", "[::1", "[::1]:", "h:65536",
                          "h:-1", "h:8a", "h:123456", "[]:80", "a]:80"}) {
    const Error e = catch_error([&] { parse_host_port(bad); });
    EXPECT_EQ(e.status(), Status::InvalidArgument) << bad;
    EXPECT_TRUE(contains(e, std::string("\"") + bad + "\"")) << e.what();
  }
  // A name no resolver accepts (empty label): refused without a network lookup.
  const Error e = catch_error([] { resolve(HostPort{"a..b", 80}); });
  EXPECT_EQ(e.status(), Status::InvalidArgument);
  EXPECT_TRUE(contains(e, "a..b")) << e.what();
  EXPECT_THROW(Listener(HostPort{"a..b", 0}), Error);
  EXPECT_THROW(Socket::connect(HostPort{"a..b", 1}, deadline_in(5s)), Error);
}

TEST(ControlSocket, PortZeroPicksAFreePortAndReportsIt) {
  Listener a(kLoopback);
  Listener b(kLoopback);
  EXPECT_NE(a.port(), 0);
  EXPECT_NE(b.port(), 0);
  EXPECT_NE(a.port(), b.port());
  EXPECT_EQ(a.address().host, "127.0.0.1");
  auto pair = connected_pair(a);
  Socket& c = pair.first;  // (named references: clang 14 cannot capture a structured binding)
  Socket& s = pair.second;
  EXPECT_TRUE(c.valid());
  EXPECT_TRUE(s.valid());
  EXPECT_EQ(c.peer(), "127.0.0.1:" + std::to_string(a.port()));
  EXPECT_EQ(s.peer().rfind("127.0.0.1:", 0), 0u) << s.peer();
  // A taken port cannot be bound twice.
  const Error e = catch_error([&] { Listener again(HostPort{"127.0.0.1", a.port()}); });
  EXPECT_EQ(e.status(), Status::Io);
  EXPECT_EQ(e.cause_domain(), CauseDomain::Errno);
  EXPECT_TRUE(contains(e, std::to_string(a.port()))) << e.what();
}

TEST(ControlSocket, Ipv6Loopback) {
  std::optional<Listener> l;
  try {
    l.emplace(HostPort{"::1", 0});
  } catch (const Error& e) {
    GTEST_SKIP() << "no IPv6 loopback here: " << e.what();
  }
  Socket c = Socket::connect(parse_host_port("[::1]:" + std::to_string(l->port())), deadline_in(10s));
  Socket s = l->accept(deadline_in(10s));
  const uint8_t byte = 42;
  c.send_all({&byte, 1}, deadline_in(10s));
  uint8_t got = 0;
  EXPECT_EQ(s.recv_some({&got, 1}, deadline_in(10s)), 1u);
  EXPECT_EQ(got, 42);
  EXPECT_EQ(s.peer().front(), '[');
}

TEST(ControlSocket, AcceptNeverBlocksAndTimesOut) {
  Listener l(kLoopback);
  EXPECT_FALSE(l.accept().has_value());
  const auto t0 = Clock::now();
  const Error e = catch_error([&] { l.accept(deadline_in(100ms)); });
  EXPECT_EQ(e.status(), Status::TimedOut);
  EXPECT_TRUE(contains(e, std::to_string(l.port()))) << e.what();
  EXPECT_GE(Clock::now() - t0, 100ms);
}

TEST(ControlSocket, ConnectRefusedIsPeerLostNamingTheAddress) {
  uint16_t port = 0;
  {
    Listener l(kLoopback);
    port = l.port();
  }  // closed: nothing listens there now
  const Error e = catch_error([&] { Socket::connect(HostPort{"127.0.0.1", port}, deadline_in(10s)); });
  EXPECT_EQ(e.status(), Status::PeerLost) << e.what();
  EXPECT_TRUE(contains(e, "127.0.0.1:" + std::to_string(port))) << e.what();
  EXPECT_TRUE(contains(e, "refused")) << e.what();
}

TEST(ControlSocket, SilentPeerTimesOutWithinTheDeadline) {
  Listener l(kLoopback);
  auto pair = connected_pair(l);  // s accepts and never answers
  Socket& c = pair.first;  // (named references: clang 14 cannot capture a structured binding)
  Socket& s = pair.second;
  uint8_t buf[16];
  const auto t0 = Clock::now();
  const Error e = catch_error([&] { c.recv_some(buf, deadline_in(200ms), "a Challenge"); });
  const auto took = Clock::now() - t0;
  EXPECT_EQ(e.status(), Status::TimedOut);
  EXPECT_TRUE(contains(e, "a Challenge")) << e.what();
  EXPECT_TRUE(contains(e, "127.0.0.1:" + std::to_string(l.port()))) << e.what();
  EXPECT_GE(took, 200ms);
  EXPECT_LT(took, 200ms + 1500ms);  // slack for a loaded machine
  EXPECT_FALSE(c.try_recv(buf).has_value());
}

TEST(ControlSocket, EofIsPeerLost) {
  Listener l(kLoopback);
  auto pair = connected_pair(l);
  Socket& c = pair.first;  // (named references: clang 14 cannot capture a structured binding)
  Socket& s = pair.second;
  s.close();
  uint8_t buf[16];
  const Error e = catch_error([&] { c.recv_some(buf, deadline_in(10s)); });
  EXPECT_EQ(e.status(), Status::PeerLost);
  EXPECT_TRUE(contains(e, "closed")) << e.what();
  EXPECT_TRUE(contains(e, c.peer())) << e.what();
}

TEST(ControlSocket, SendingToAClosedPeerIsPeerLostWithoutSigpipe) {
  Listener l(kLoopback);
  auto pair = connected_pair(l);
  Socket& c = pair.first;  // (named references: clang 14 cannot capture a structured binding)
  Socket& s = pair.second;
  s.close();
  const std::vector<uint8_t> chunk(64 << 10, 1);
  // The first sends may still land in the kernel; the reset arrives soon after. No SIGPIPE:
  // the test process would die otherwise.
  const Error e = catch_error([&] {
    for (int i = 0; i < 1000; ++i) {
      c.send_all(chunk, deadline_in(10s));
      std::this_thread::sleep_for(1ms);
    }
  });
  EXPECT_EQ(e.status(), Status::PeerLost) << e.what();
  EXPECT_EQ(e.cause_domain(), CauseDomain::Errno);
  EXPECT_TRUE(contains(e, c.peer())) << e.what();
}

TEST(ControlSocket, SendToAPeerThatNeverReadsTimesOut) {
  Listener l(kLoopback);
  auto pair = connected_pair(l);
  Socket& c = pair.first;  // (named references: clang 14 cannot capture a structured binding)
  Socket& s = pair.second;
  const std::vector<uint8_t> big(64u << 20, 7);  // far more than loopback socket buffers hold
  const auto t0 = Clock::now();
  const Error e = catch_error([&] { c.send_all(big, deadline_in(300ms), "sending PeerInfo"); });
  EXPECT_EQ(e.status(), Status::TimedOut);
  EXPECT_TRUE(contains(e, "sending PeerInfo")) << e.what();
  EXPECT_TRUE(contains(e, "bytes unsent")) << e.what();
  EXPECT_LT(Clock::now() - t0, 300ms + 1500ms);
  // send_some never blocks: it reports 0 once the kernel buffers are full (they may still grow
  // a little after the timeout, hence the loop).
  size_t sent = 1;
  for (int i = 0; i < 1000 && sent != 0; ++i) sent = c.send_some(std::span(big).first(1 << 16));
  EXPECT_EQ(sent, 0u);
}

TEST(ControlSocket, BytesArriveInOrder) {
  Listener l(kLoopback);
  auto pair = connected_pair(l);
  Socket& c = pair.first;  // (named references: clang 14 cannot capture a structured binding)
  Socket& s = pair.second;
  std::vector<uint8_t> data(1 << 20);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 31);
  std::thread writer([&] { c.send_all(data, deadline_in(20s)); });
  std::vector<uint8_t> got;
  std::vector<uint8_t> buf(70000);
  while (got.size() < data.size()) {
    const size_t n = s.recv_some(buf, deadline_in(20s));
    got.insert(got.end(), buf.begin(), buf.begin() + static_cast<ptrdiff_t>(n));
  }
  writer.join();
  EXPECT_EQ(got, data);
}

TEST(ControlSocket, MovedSocketsOwnTheirDescriptorOnce) {
  Listener l(kLoopback);
  auto pair = connected_pair(l);
  Socket& c = pair.first;  // (named references: clang 14 cannot capture a structured binding)
  Socket& s = pair.second;
  const int fd = c.fd();
  Socket moved = std::move(c);
  EXPECT_FALSE(c.valid());  // NOLINT(bugprone-use-after-move): the moved-from state is the point
  EXPECT_EQ(moved.fd(), fd);
  Socket other;
  other = std::move(moved);
  EXPECT_EQ(other.fd(), fd);
  const uint8_t b = 9;
  other.send_all({&b, 1}, deadline_in(10s));
  uint8_t r = 0;
  EXPECT_EQ(s.recv_some({&r, 1}, deadline_in(10s)), 1u);
  EXPECT_EQ(r, 9);
  Listener l2 = std::move(l);
  EXPECT_EQ(l.fd(), -1);  // NOLINT(bugprone-use-after-move)
  EXPECT_GE(l2.fd(), 0);
}

// ---- name lookups bounded by the caller's deadline ------------------------------------------

namespace {

std::atomic<int> g_lookups{0};
std::atomic<bool> g_release{false};
std::atomic<bool> g_lookup_returned{false};

std::vector<SocketAddress> counting_lookup(const HostPort& a) {
  ++g_lookups;
  return resolve(HostPort{"127.0.0.1", a.port});
}

// A DNS server that never answers: holds the lookup until the test releases it.
std::vector<SocketAddress> stuck_lookup(const HostPort& a) {
  ++g_lookups;
  while (!g_release.load()) std::this_thread::sleep_for(1ms);
  g_lookup_returned = true;
  return resolve(HostPort{"127.0.0.1", a.port});
}

std::vector<SocketAddress> failing_lookup(const HostPort& a) {
  ++g_lookups;
  throw Error(Status::InvalidArgument, "no such host \"" + a.host + "\"");
}

}  // namespace

TEST(ControlSocket, ANumericHostIsNeverLookedUp) {
  g_lookups = 0;
  EXPECT_EQ(resolve_by(HostPort{"127.0.0.1", 7}, deadline_in(1s), counting_lookup).at(0).to_string(), "127.0.0.1:7");
  EXPECT_EQ(resolve_by(HostPort{"::1", 7}, deadline_in(1s), counting_lookup).at(0).to_string(), "[::1]:7");
  EXPECT_EQ(g_lookups.load(), 0);
  EXPECT_EQ(resolve_by(HostPort{"peer.example", 7}, deadline_in(5s), counting_lookup).at(0).to_string(),
            "127.0.0.1:7");
  EXPECT_EQ(g_lookups.load(), 1);
}

TEST(ControlSocket, ALookupThatNeverAnswersEndsAtTheDeadline) {
  g_lookups = 0;
  g_release = false;
  g_lookup_returned = false;
  // Releases the lookup after 3 s even if the call under test waits for it (a resolve that
  // ignored its deadline then fails the timing check below instead of hanging the suite).
  std::thread watchdog([] {
    for (int i = 0; i < 3000 && !g_release.load(); ++i) std::this_thread::sleep_for(1ms);
    g_release = true;
  });
  const auto start = Clock::now();
  const Error e = catch_error([] { resolve_by(HostPort{"dns-is-down.example", 9}, deadline_in(150ms), stuck_lookup); });
  const auto took = Clock::now() - start;
  EXPECT_EQ(e.status(), Status::TimedOut);
  EXPECT_TRUE(contains(e, "dns-is-down.example")) << e.what();
  EXPECT_GE(took, 150ms);
  EXPECT_LT(took, 2s);
  EXPECT_EQ(g_lookups.load(), 1);
  // The abandoned lookup finishes on its own later and touches nothing of the caller's.
  g_release = true;
  watchdog.join();
  for (int i = 0; i < 2000 && !g_lookup_returned.load(); ++i) std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(g_lookup_returned.load());
  std::this_thread::sleep_for(20ms);  // let the helper thread publish and free its state
}

TEST(ControlSocket, ALookupErrorReachesTheCallerUnchanged) {
  const Error e = catch_error([] { resolve_by(HostPort{"nosuch.example", 9}, deadline_in(5s), failing_lookup); });
  EXPECT_EQ(e.status(), Status::InvalidArgument);
  EXPECT_TRUE(contains(e, "nosuch.example")) << e.what();
}
