// The control handshake over loopback, two threads (or a raw peer playing one side): success with
// and without a key, every refusal reported on both sides naming the peer, garbled and silent
// peers, and the rule that region keys never leave before the peer proved the key.
#include <gtest/gtest.h>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "control/handshake.hpp"
#include "pdkv/core/error.hpp"

using namespace pdkv::exec;
using namespace std::chrono_literals;
using pdkv::core::Error;
using pdkv::core::Status;

namespace {

bool contains(const Error& e, const std::string& s) { return std::string(e.what()).find(s) != std::string::npos; }

HandshakeParams params(const std::string& engine, uint32_t rank, std::optional<std::string> key = {}) {
  HandshakeParams p;
  p.hello.engine_id = engine;
  p.hello.tp_rank = rank;
  p.hello.host_id = host_identity();
  p.info.metadata = std::vector<uint8_t>(64, static_cast<uint8_t>(rank + 1));
  p.info.worker_address = std::vector<uint8_t>(200, 0xAB);
  p.info.regions.push_back(RegionKey{0, 0x10000, 1 << 20, 0, std::vector<uint8_t>(40, 0xEE)});
  p.info.transport_hint = 1;
  if (key) p.key = PresharedKey::from_string(*key);
  return p;
}

struct Outcome {
  std::optional<HandshakeResult> result;
  std::optional<Error> error;
};

template <class F>
Outcome run(F&& f) {
  Outcome o;
  try {
    o.result = f();
  } catch (const Error& e) {
    o.error = e;
  }
  return o;
}

// Runs the server side on a thread and the client here; both outcomes.
struct Both {
  Outcome client;
  Outcome server;
  std::string client_addr;  // as the server sees it
  uint16_t server_port = 0;
};

Both handshake_pair(const HandshakeParams& client, const HandshakeParams& server,
                    std::chrono::milliseconds timeout = 10s) {
  Listener l(HostPort{"127.0.0.1", 0});
  Both b;
  b.server_port = l.port();
  std::thread t([&] {
    b.server = run([&] {
      ControlChannel ch(l.accept(deadline_in(timeout)));
      b.client_addr = ch.peer();
      return handshake_server(ch, server, deadline_in(timeout));
    });
  });
  b.client = run([&] {
    ControlChannel ch = ControlChannel::connect(HostPort{"127.0.0.1", l.port()}, deadline_in(timeout));
    return handshake_client(ch, client, deadline_in(timeout));
  });
  t.join();
  return b;
}

void expect_ok(const Both& b, const HandshakeParams& c, const HandshakeParams& s) {
  ASSERT_FALSE(b.client.error) << b.client.error->what();
  ASSERT_FALSE(b.server.error) << b.server.error->what();
  EXPECT_EQ(b.client.result->peer_hello.engine_id, s.hello.engine_id);
  EXPECT_EQ(b.client.result->peer_hello.tp_rank, s.hello.tp_rank);
  EXPECT_EQ(b.client.result->peer_hello.has_key, s.key.has_value());
  EXPECT_EQ(b.client.result->peer_info.metadata, s.info.metadata);
  EXPECT_EQ(b.client.result->peer_info.regions, s.info.regions);
  EXPECT_EQ(b.server.result->peer_hello.engine_id, c.hello.engine_id);
  EXPECT_EQ(b.server.result->peer_hello.host_id, c.hello.host_id);
  EXPECT_EQ(b.server.result->peer_info.worker_address, c.info.worker_address);
  EXPECT_EQ(b.server.result->peer_info.transport_hint, 1);
  EXPECT_NE(b.server.result->peer_hello.nonce, Nonce{});
  EXPECT_NE(b.server.result->peer_hello.nonce, b.client.result->peer_hello.nonce);
}

// A raw client: connects and hands the channel to `script`.
template <class F>
Outcome server_against(F&& script, const HandshakeParams& server, std::chrono::milliseconds timeout = 10s) {
  Listener l(HostPort{"127.0.0.1", 0});
  Outcome o;
  std::thread t([&] {
    o = run([&] {
      ControlChannel ch(l.accept(deadline_in(10s)));
      return handshake_server(ch, server, deadline_in(timeout));
    });
  });
  ControlChannel raw = ControlChannel::connect(HostPort{"127.0.0.1", l.port()}, deadline_in(10s));
  script(raw);
  t.join();
  return o;
}

Hello raw_hello(bool has_key, uint16_t major = kControlProtoMajor) {
  Hello h;
  h.proto_major = major;
  h.engine_id = "raw";
  h.tp_rank = 5;
  h.nonce = random_nonce();
  h.has_key = has_key;
  return h;
}

// A man in the middle: relays the bytes between a client and a server and may rewrite the first
// frame each way (the Hellos), re-framed with a valid checksum, as someone on the path can.
class HelloRewritingRelay {
 public:
  using Rewrite = std::function<void(Hello&)>;
  HelloRewritingRelay(uint16_t server_port, Rewrite to_server, Rewrite to_client)
      : server_port_(server_port), to_server_(std::move(to_server)), to_client_(std::move(to_client)) {
    thread_ = std::thread([this] { run(); });
  }
  ~HelloRewritingRelay() { thread_.join(); }
  uint16_t port() const { return listener_.port(); }

 private:
  struct Direction {
    int from = -1;
    int to = -1;
    const Rewrite* rewrite = nullptr;
    bool hello_done = false;
    std::vector<uint8_t> pending;
  };

  static void write_all(int fd, const uint8_t* p, size_t n) {
    while (n > 0) {
      const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
      if (w <= 0) return;  // the other end is gone; the handshake reports it
      p += w;
      n -= static_cast<size_t>(w);
    }
  }

  // Forwards what `d.from` has; false once it closed.
  static bool pump(Direction& d) {
    uint8_t buf[65536];
    const ssize_t r = ::recv(d.from, buf, sizeof buf, 0);
    if (r <= 0) return false;
    if (d.hello_done) {
      write_all(d.to, buf, static_cast<size_t>(r));
      return true;
    }
    d.pending.insert(d.pending.end(), buf, buf + r);
    if (d.pending.size() < kFrameHeaderBytes) return true;
    uint32_t len = 0;
    std::memcpy(&len, d.pending.data() + 8, 4);  // payload_len (frame.hpp), little-endian host
    if (d.pending.size() < kFrameHeaderBytes + len) return true;
    const std::span<const uint8_t> payload(d.pending.data() + kFrameHeaderBytes, len);
    std::vector<uint8_t> frame(d.pending.begin(), d.pending.begin() + kFrameHeaderBytes + len);
    uint16_t type = 0;
    std::memcpy(&type, d.pending.data() + 6, 2);  // type (frame.hpp); an Error frame passes as is
    if (*d.rewrite && type == static_cast<uint16_t>(FrameType::Hello)) {
      Hello h = Hello::decode(payload);
      (*d.rewrite)(h);
      frame = encode_frame(FrameType::Hello, h.encode());
    }
    write_all(d.to, frame.data(), frame.size());
    write_all(d.to, d.pending.data() + kFrameHeaderBytes + len, d.pending.size() - kFrameHeaderBytes - len);
    d.pending.clear();
    d.hello_done = true;
    return true;
  }

  void run() {
    Socket client = listener_.accept(deadline_in(10s));
    ControlChannel server = ControlChannel::connect(HostPort{"127.0.0.1", server_port_}, deadline_in(10s));
    Direction up{client.fd(), server.fd(), &to_server_};
    Direction down{server.fd(), client.fd(), &to_client_};
    const auto end = Clock::now() + 10s;
    while (Clock::now() < end) {
      pollfd fds[2] = {{up.from, POLLIN, 0}, {down.from, POLLIN, 0}};
      if (::poll(fds, 2, 100) < 0) return;
      if ((fds[0].revents & (POLLIN | POLLHUP | POLLERR)) && !pump(up)) break;
      if ((fds[1].revents & (POLLIN | POLLHUP | POLLERR)) && !pump(down)) break;
    }
    // Either side closing ends the relay: both sockets close here, as a cut path would.
  }

  Listener listener_{HostPort{"127.0.0.1", 0}};
  uint16_t server_port_;
  Rewrite to_server_;
  Rewrite to_client_;
  std::thread thread_;
};

Both handshake_through(const HandshakeParams& client, const HandshakeParams& server,
                       HelloRewritingRelay::Rewrite to_server, HelloRewritingRelay::Rewrite to_client) {
  Listener l(HostPort{"127.0.0.1", 0});
  Both b;
  b.server_port = l.port();
  std::thread t([&] {
    b.server = run([&] {
      ControlChannel ch(l.accept(deadline_in(10s)));
      return handshake_server(ch, server, deadline_in(10s));
    });
  });
  {
    HelloRewritingRelay relay(l.port(), std::move(to_server), std::move(to_client));
    b.client = run([&] {
      ControlChannel ch = ControlChannel::connect(HostPort{"127.0.0.1", relay.port()}, deadline_in(10s));
      return handshake_client(ch, client, deadline_in(10s));
    });
  }
  t.join();
  return b;
}

const std::string kKeyA = "key-A-0123456789abcdef";
const std::string kKeyB = "key-B-0123456789abcdef";

}  // namespace

TEST(ControlHandshake, SucceedsWithoutKey) {
  const auto c = params("decode", 0);
  const auto s = params("prefill", 1);
  expect_ok(handshake_pair(c, s), c, s);
}

TEST(ControlHandshake, SucceedsWithKey) {
  const auto c = params("decode", 0, kKeyA);
  const auto s = params("prefill", 1, kKeyA);
  expect_ok(handshake_pair(c, s), c, s);
}

TEST(ControlHandshake, WrongKeyIsAuthOnBothSidesNamingThePeer) {
  for (bool swap : {false, true}) {
    const auto c = params("decode", 0, swap ? kKeyB : kKeyA);
    const auto s = params("prefill", 1, swap ? kKeyA : kKeyB);
    const Both b = handshake_pair(c, s);
    ASSERT_TRUE(b.client.error);
    ASSERT_TRUE(b.server.error);
    EXPECT_EQ(b.client.error->status(), Status::Auth) << b.client.error->what();
    EXPECT_EQ(b.server.error->status(), Status::Auth) << b.server.error->what();
    // The client names the server (address, engine, rank); the server names the client.
    EXPECT_TRUE(contains(*b.client.error, "127.0.0.1:" + std::to_string(b.server_port))) << b.client.error->what();
    EXPECT_TRUE(contains(*b.client.error, "prefill rank 1")) << b.client.error->what();
    EXPECT_TRUE(contains(*b.client.error, "failed to prove the pre-shared key")) << b.client.error->what();
    EXPECT_TRUE(contains(*b.server.error, b.client_addr)) << b.server.error->what();
    EXPECT_TRUE(contains(*b.server.error, "decode rank 0")) << b.server.error->what();
    EXPECT_TRUE(contains(*b.server.error, "keys differ")) << b.server.error->what();
  }
}

TEST(ControlHandshake, KeyOnOneSideOnlyIsAuthOnBothSides) {
  {
    const Both b = handshake_pair(params("decode", 0, kKeyA), params("prefill", 1));
    ASSERT_TRUE(b.client.error && b.server.error);
    EXPECT_EQ(b.client.error->status(), Status::Auth) << b.client.error->what();
    EXPECT_EQ(b.server.error->status(), Status::Auth) << b.server.error->what();
    EXPECT_TRUE(contains(*b.server.error, "presents a pre-shared key but this side has none")) << b.server.error->what();
    EXPECT_TRUE(contains(*b.server.error, "decode rank 0")) << b.server.error->what();
    EXPECT_TRUE(contains(*b.client.error, "prefill rank 1 has no pre-shared key")) << b.client.error->what();
  }
  {
    const Both b = handshake_pair(params("decode", 0), params("prefill", 1, kKeyA));
    ASSERT_TRUE(b.client.error && b.server.error);
    EXPECT_EQ(b.client.error->status(), Status::Auth) << b.client.error->what();
    EXPECT_EQ(b.server.error->status(), Status::Auth) << b.server.error->what();
    EXPECT_TRUE(contains(*b.server.error, "has no pre-shared key configured but this side requires one"))
        << b.server.error->what();
    EXPECT_TRUE(contains(*b.client.error, "prefill rank 1 requires a pre-shared key")) << b.client.error->what();
  }
}

TEST(ControlHandshake, ValidateRefusalReachesBothSides) {
  auto refuse = [](const Hello& h, const PeerInfo&) {
    throw Error(Status::Incompatible, "block size 16 of " + h.engine_id + " differs from 32");
  };
  {  // the server refuses the client
    auto s = params("prefill", 1, kKeyA);
    s.validate = refuse;
    const Both b = handshake_pair(params("decode", 0, kKeyA), s);
    ASSERT_TRUE(b.client.error && b.server.error);
    EXPECT_EQ(b.server.error->status(), Status::Incompatible);
    EXPECT_EQ(std::string(b.server.error->what()), "block size 16 of decode differs from 32");
    EXPECT_EQ(b.client.error->status(), Status::Incompatible) << b.client.error->what();
    EXPECT_TRUE(contains(*b.client.error, "block size 16 of decode differs from 32")) << b.client.error->what();
    EXPECT_TRUE(contains(*b.client.error, "prefill rank 1")) << b.client.error->what();
  }
  {  // the client refuses the server, with a status of its own
    auto c = params("decode", 0);
    c.validate = [](const Hello& h, const PeerInfo& info) {
      EXPECT_EQ(info.regions.size(), 1u);
      throw Error(Status::OutOfBounds, "region 0 of " + h.engine_id + " is too small");
    };
    const Both b = handshake_pair(c, params("prefill", 1));
    ASSERT_TRUE(b.client.error && b.server.error);
    EXPECT_EQ(b.client.error->status(), Status::OutOfBounds);
    EXPECT_EQ(b.server.error->status(), Status::OutOfBounds) << b.server.error->what();
    EXPECT_TRUE(contains(*b.server.error, "region 0 of prefill is too small")) << b.server.error->what();
    EXPECT_TRUE(contains(*b.server.error, "decode rank 0")) << b.server.error->what();
  }
  {  // validate sees the peer's real data and may accept
    auto c = params("decode", 0);
    bool saw = false;
    c.validate = [&](const Hello& h, const PeerInfo& info) {
      saw = h.engine_id == "prefill" && info.metadata == std::vector<uint8_t>(64, 2);
    };
    const Both b = handshake_pair(c, params("prefill", 1));
    EXPECT_FALSE(b.client.error);
    EXPECT_TRUE(saw);
  }
}

TEST(ControlHandshake, RegionKeysNeverLeaveBeforeTheProof) {
  const auto s = params("prefill", 1, kKeyA);
  std::vector<FrameType> seen;
  std::optional<Error> raw_error;
  const Outcome o = server_against(
      [&](ControlChannel& raw) {
        raw.send(raw_hello(true), deadline_in(10s));
        try {
          for (int i = 0; i < 4; ++i) {
            const Frame f = raw.recv(deadline_in(10s));
            seen.push_back(f.type);
            if (f.type == FrameType::Challenge) raw.send(Proof{}, deadline_in(10s));  // a guess
          }
        } catch (const Error& e) {
          raw_error = e;
        }
      },
      s);
  ASSERT_TRUE(o.error);
  EXPECT_EQ(o.error->status(), Status::Auth);
  EXPECT_TRUE(contains(*o.error, "(raw rank 5) failed to prove the pre-shared key")) << o.error->what();
  EXPECT_EQ(seen, (std::vector<FrameType>{FrameType::Hello, FrameType::Challenge}));
  ASSERT_TRUE(raw_error);
  EXPECT_EQ(raw_error->status(), Status::Auth) << raw_error->what();  // told, then closed
}

TEST(ControlHandshake, OtherProtocolMajorIsRefusedNamingBothVersions) {
  std::optional<Error> raw_error;
  const Outcome o = server_against(
      [&](ControlChannel& raw) {
        raw.send(raw_hello(false, kControlProtoMajor + 1), deadline_in(10s));
        try {
          raw.recv(deadline_in(10s));
        } catch (const Error& e) {
          raw_error = e;
        }
      },
      params("prefill", 1));
  ASSERT_TRUE(o.error);
  EXPECT_EQ(o.error->status(), Status::Protocol);
  EXPECT_TRUE(contains(*o.error, std::to_string(kControlProtoMajor + 1) + "." + std::to_string(kControlProtoMinor))) << o.error->what();
  EXPECT_TRUE(contains(*o.error, std::to_string(kControlProtoMajor) + "." + std::to_string(kControlProtoMinor))) << o.error->what();
  ASSERT_TRUE(raw_error);
  EXPECT_EQ(raw_error->status(), Status::Protocol);
  EXPECT_TRUE(contains(*raw_error, "cannot serve " + std::to_string(kControlProtoMajor + 1) + "." + std::to_string(kControlProtoMinor))) << raw_error->what();
}

TEST(ControlHandshake, UnexpectedFrameIsProtocolNamingIt) {
  std::optional<Error> raw_error;
  const Outcome o = server_against(
      [&](ControlChannel& raw) {
        raw.send(Ping{1, 1}, deadline_in(10s));
        try {
          raw.recv(deadline_in(10s));
        } catch (const Error& e) {
          raw_error = e;
        }
      },
      params("prefill", 1));
  ASSERT_TRUE(o.error);
  EXPECT_EQ(o.error->status(), Status::Protocol);
  EXPECT_TRUE(contains(*o.error, "sent Ping where the handshake expects Hello")) << o.error->what();
  ASSERT_TRUE(raw_error);  // the peer was told
  EXPECT_EQ(raw_error->status(), Status::Protocol);
}

TEST(ControlHandshake, GarbledBytesAreProtocol) {
  const Outcome o = server_against(
      [&](ControlChannel& raw) {
        const std::string junk(64, '\x5a');
        raw.socket().send_all({reinterpret_cast<const uint8_t*>(junk.data()), junk.size()}, deadline_in(10s));
        // Wait for the server to close so the test does not race its thread.
        try {
          raw.recv(deadline_in(10s));
        } catch (const Error&) {
        }
      },
      params("prefill", 1));
  ASSERT_TRUE(o.error);
  EXPECT_EQ(o.error->status(), Status::Protocol);
  EXPECT_TRUE(contains(*o.error, "bad magic")) << o.error->what();

  // The same from a garbled server, seen by the client.
  Listener l(HostPort{"127.0.0.1", 0});
  std::thread t([&] {
    Socket s = l.accept(deadline_in(10s));
    const std::string junk = "SSH-2.0-OpenSSH_9.2\r\n";
    s.send_all({reinterpret_cast<const uint8_t*>(junk.data()), junk.size()}, deadline_in(10s));
    uint8_t buf[256];
    try {
      while (true) s.recv_some(buf, deadline_in(10s));
    } catch (const Error&) {
    }
  });
  const Outcome c = run([&] {
    ControlChannel ch = ControlChannel::connect(HostPort{"127.0.0.1", l.port()}, deadline_in(10s));
    HandshakeResult r = handshake_client(ch, params("decode", 0), deadline_in(10s));
    return r;
  });
  t.join();
  ASSERT_TRUE(c.error);
  EXPECT_EQ(c.error->status(), Status::Protocol);
  EXPECT_TRUE(contains(*c.error, "127.0.0.1:" + std::to_string(l.port()))) << c.error->what();
}

TEST(ControlHandshake, SilentPeersTimeOutWithinTheDeadline) {
  // A server that accepts and never answers.
  Listener l(HostPort{"127.0.0.1", 0});
  ControlChannel ch = ControlChannel::connect(HostPort{"127.0.0.1", l.port()}, deadline_in(10s));
  Socket held = l.accept(deadline_in(10s));
  auto t0 = Clock::now();
  const Outcome c = run([&] { return handshake_client(ch, params("decode", 0), deadline_in(300ms)); });
  auto took = Clock::now() - t0;
  ASSERT_TRUE(c.error);
  EXPECT_EQ(c.error->status(), Status::TimedOut);
  EXPECT_TRUE(contains(*c.error, "Hello")) << c.error->what();
  EXPECT_TRUE(contains(*c.error, "127.0.0.1:" + std::to_string(l.port()))) << c.error->what();
  EXPECT_GE(took, 300ms);
  EXPECT_LT(took, 300ms + 1500ms);

  // A client that connects and never speaks.
  t0 = Clock::now();
  const Outcome s = server_against([](ControlChannel&) {}, params("prefill", 1), 300ms);
  took = Clock::now() - t0;
  ASSERT_TRUE(s.error);
  EXPECT_EQ(s.error->status(), Status::TimedOut) << s.error->what();
  EXPECT_LT(took, 300ms + 1500ms);

  // A client that stops after its Hello: the server names the step it waited for.
  const Outcome s2 = server_against(
      [](ControlChannel& raw) { raw.send(raw_hello(false), deadline_in(10s)); }, params("prefill", 1), 300ms);
  ASSERT_TRUE(s2.error);
  EXPECT_EQ(s2.error->status(), Status::TimedOut);
  EXPECT_TRUE(contains(*s2.error, "Proof")) << s2.error->what();
  EXPECT_TRUE(contains(*s2.error, "raw rank 5")) << s2.error->what();
}

TEST(ControlHandshake, PeerClosingMidHandshakeIsPeerLost) {
  const Outcome o = server_against(
      [](ControlChannel& raw) {
        raw.send(raw_hello(false), deadline_in(10s));
        raw.close();
      },
      params("prefill", 1));
  ASSERT_TRUE(o.error);
  EXPECT_EQ(o.error->status(), Status::PeerLost) << o.error->what();
}

// Before the key proof a peer is a stranger: no frame it sends may make this side buffer more
// than a handshake message can need (kMaxPreAuthPayload), or 64 strangers at once could hold
// 64 x 4 MiB. A header announcing 1 MiB is refused at once, before its payload arrives.
TEST(ControlHandshake, AStrangersFrameIsLimitedToWhatAHandshakeMessageNeeds) {
  const auto t0 = Clock::now();
  const Outcome o = server_against(
      [](ControlChannel& raw) {
        uint8_t header[kFrameHeaderBytes] = {'P', 'D', 'K', 'F', kFrameVersionMajor, 0, 1, 0, 0, 0, 0x10, 0, 0, 0, 0, 0};
        raw.socket().send_all(header, deadline_in(10s));  // Hello, 1 MiB announced, none sent
      },
      params("prefill", 1), 3000ms);
  ASSERT_TRUE(o.error);
  EXPECT_EQ(o.error->status(), Status::Protocol) << o.error->what();
  EXPECT_TRUE(contains(*o.error, "1048576")) << o.error->what();
  EXPECT_TRUE(contains(*o.error, std::to_string(kMaxPreAuthPayload))) << o.error->what();
  EXPECT_LT(Clock::now() - t0, 2000ms);
}

// After the proof the full frame limit applies again: a 1 MiB PeerInfo goes both ways.
TEST(ControlHandshake, LargePeerInfoStillPassesAfterTheProof) {
  auto c = params("decode", 0, kKeyA);
  auto s = params("prefill", 1, kKeyA);
  c.info.metadata.assign(kMaxMetadataBytes, 0x5A);
  s.info.metadata.assign(kMaxMetadataBytes, 0xA5);
  expect_ok(handshake_pair(c, s), c, s);
}

// With a key, every field of either Hello is bound to it (control protocol 3.3): a path that
// rewrites the host_id (which decides whether cross-memory attach is tried), the minor version
// (which decides what admission offers), the purpose or the identity fails the proof on both
// sides. Before 3.3 only the nonces and identities were bound and the first three passed.
TEST(ControlHandshake, AHelloRewrittenOnThePathFailsTheProof) {
  const auto c = params("decode", 0, kKeyA);
  const auto s = params("prefill", 1, kKeyA);
  // The relay itself is transparent: without a rewrite the handshake succeeds through it.
  expect_ok(handshake_through(c, s, {}, {}), c, s);
  // Rewriting to the same values is transparent too (the Hellos re-encode byte for byte).
  expect_ok(handshake_through(c, s, [](Hello&) {}, [](Hello&) {}), c, s);

  const std::vector<std::pair<std::string, HelloRewritingRelay::Rewrite>> rewrites = {
      {"host_id", [](Hello& h) { h.host_id = "some-other-host"; }},
      // Upward: a minor older than 3.5 is refused for the nonce's mark before any proof (below).
      {"minor", [](Hello& h) { h.proto_minor = kControlProtoMinor + 1; }},
      {"engine_id", [](Hello& h) { h.engine_id = "someone-else"; }},
  };
  for (const auto& [what, rewrite] : rewrites) {
    for (bool toward_server : {true, false}) {
      SCOPED_TRACE(what + (toward_server ? " of the client's Hello" : " of the server's Hello"));
      const Both b = toward_server ? handshake_through(c, s, rewrite, {}) : handshake_through(c, s, {}, rewrite);
      ASSERT_TRUE(b.client.error);
      ASSERT_TRUE(b.server.error);
      // The side that checks a proof first finds the keys "differ"; the other is told so.
      EXPECT_EQ(b.client.error->status(), Status::Auth) << b.client.error->what();
      EXPECT_EQ(b.server.error->status(), Status::Auth) << b.server.error->what();
      EXPECT_TRUE(contains(*b.client.error, "pre-shared key")) << b.client.error->what();
    }
  }
}

// A 3.2 peer (whose transcript has no Hellos) still admits this version and the other way round:
// both sides fall back to the 3.2 transcript when either Hello says 3.2, and so does a 3.4 peer
// (whose nonce carries no mark). The identities and nonces stay bound in the 3.2 transcript:
// rewriting an engine id on the path still fails.
TEST(ControlHandshake, APeerAt32UsesThe32TranscriptAndIdentitiesStayBound) {
  auto c = params("decode", 0, kKeyA);
  auto s = params("prefill", 1, kKeyA);
  for (uint16_t older : {uint16_t{2}, uint16_t{4}}) {
    SCOPED_TRACE("a peer at 3." + std::to_string(older));
    c.hello.proto_minor = older;
    {
      const Both b = handshake_pair(c, s);
      expect_ok(b, c, s);
      EXPECT_EQ(b.server.result->peer_hello.proto_minor, older);
      EXPECT_EQ(b.client.result->peer_hello.proto_minor, kControlProtoMinor);
    }
    c.hello.proto_minor = kControlProtoMinor;
    s.hello.proto_minor = older;
    expect_ok(handshake_pair(c, s), c, s);
    s.hello.proto_minor = kControlProtoMinor;
  }

  // Two 3.2 peers' path rewriting an identity fails the 3.2 proofs.
  c.hello.proto_minor = 2;
  s.hello.proto_minor = 2;
  const auto rename = [](Hello& h) { h.engine_id = "someone-else"; };
  const Both b = handshake_through(c, s, {}, rename);
  ASSERT_TRUE(b.client.error);
  ASSERT_TRUE(b.server.error);
  EXPECT_EQ(b.client.error->status(), Status::Auth) << b.client.error->what();
  EXPECT_EQ(b.server.error->status(), Status::Auth) << b.server.error->what();
}

// Control protocol 3.5: a path that rewrites the Hellos' minors down (to 3.2, whose transcript
// binds no Hello field, or to any minor before 3.5) is refused by the nonce's mark, with or
// without a key, whichever Hellos it rewrites; taking the mark off too changes the nonce, which
// every transcript binds. Before 3.5, rewriting both minors to 3.2 passed with a key.
TEST(ControlHandshake, AMinorRewrittenDownOnThePathIsRefusedAsADowngrade) {
  for (bool keyed : {true, false}) {
    const auto c = keyed ? params("decode", 0, kKeyA) : params("decode", 0);
    const auto s = keyed ? params("prefill", 1, kKeyA) : params("prefill", 1);
    for (uint16_t to : {uint16_t{2}, uint16_t{kNonceMarkMinor - 1}}) {
      const auto down = [to](Hello& h) { h.proto_minor = to; };
      const std::vector<std::pair<std::string, std::pair<HelloRewritingRelay::Rewrite, HelloRewritingRelay::Rewrite>>> ways = {
          {"both Hellos", {down, down}}, {"the client's Hello", {down, {}}}, {"the server's Hello", {{}, down}}};
      for (const auto& [what, rw] : ways) {
        SCOPED_TRACE(std::string(keyed ? "with a key: " : "without a key: ") + what + " to 3." + std::to_string(to));
        const Both b = handshake_through(c, s, rw.first, rw.second);
        ASSERT_TRUE(b.client.error);
        ASSERT_TRUE(b.server.error);
        EXPECT_EQ(b.client.error->status(), Status::Auth) << b.client.error->what();
        EXPECT_EQ(b.server.error->status(), Status::Auth) << b.server.error->what();
        for (const Error* e : {&*b.client.error, &*b.server.error}) {
          EXPECT_TRUE(contains(*e, "rewritten on the path (a downgrade)")) << e->what();
          EXPECT_TRUE(contains(*e, "control protocol 3." + std::to_string(to))) << e->what();
        }
      }
    }
  }
  // Taking the mark off along with the minor: the nonce the server MACs is not the client's.
  const auto c = params("decode", 0, kKeyA);
  const auto s = params("prefill", 1, kKeyA);
  const auto strip = [](Hello& h) {
    h.proto_minor = 2;
    h.nonce = random_nonce();
  };
  const Both b = handshake_through(c, s, strip, {});
  ASSERT_TRUE(b.client.error);
  ASSERT_TRUE(b.server.error);
  EXPECT_EQ(b.client.error->status(), Status::Auth) << b.client.error->what();
  EXPECT_EQ(b.server.error->status(), Status::Auth) << b.server.error->what();
  EXPECT_TRUE(contains(*b.client.error, "pre-shared key")) << b.client.error->what();
  EXPECT_EQ(b.server.error->status(), Status::Auth) << b.server.error->what();
}
