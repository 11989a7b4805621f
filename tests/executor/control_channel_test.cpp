// ControlChannel over loopback: blocking send/recv, the nonblocking event-loop helpers, peer
// Error frames, garbled bytes, EOF and host identity.
#include <gtest/gtest.h>

#include <poll.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "control/channel.hpp"
#include "pdkv/core/error.hpp"

using namespace pdkv::exec;
using namespace std::chrono_literals;
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

struct Pair {
  Listener listener{HostPort{"127.0.0.1", 0}};
  ControlChannel client{Socket::connect(HostPort{"127.0.0.1", listener.port()}, deadline_in(10s))};
  ControlChannel server{listener.accept(deadline_in(10s))};
};

// Waits (bounded) until fd is readable, for the nonblocking tests.
void wait_readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 10000), 1);
}

// Reads frames with read_available until `n` arrived (bounded by a generous deadline).
std::vector<Frame> read_n(ControlChannel& ch, size_t n) {
  std::vector<Frame> got;
  const auto end = deadline_in(10s);
  while (got.size() < n && Clock::now() < end) {
    pollfd p{ch.fd(), POLLIN, 0};
    ::poll(&p, 1, 100);
    for (Frame& f : ch.read_available()) got.push_back(std::move(f));
  }
  return got;
}

}  // namespace

TEST(ControlChannel, BlockingSendAndRecvTypedMessages) {
  Pair p;
  p.client.send(Ping{1, 2}, deadline_in(10s));
  p.client.send(Notify{"r1", "decode", 1, NotifyKind::ReadDone, 4096, Status::Ok}, deadline_in(10s));
  const Frame a = p.server.recv(deadline_in(10s));
  ASSERT_EQ(a.type, FrameType::Ping);
  EXPECT_EQ(Ping::decode(a.payload).seq, 1u);
  const Frame b = p.server.recv(deadline_in(10s));
  ASSERT_EQ(b.type, FrameType::Notify);
  EXPECT_EQ(Notify::decode(b.payload).request_id, "r1");
}

TEST(ControlChannel, ErrorFrameFromThePeerBecomesItsStatusAndMessage) {
  Pair p;
  p.server.send(ErrorMessage{Status::Auth, "the keys differ"}, deadline_in(10s));
  const Error e = catch_error([&] { p.client.recv(deadline_in(10s)); });
  EXPECT_EQ(e.status(), Status::Auth);
  EXPECT_TRUE(contains(e, "peer " + p.client.peer() + ": the keys differ")) << e.what();
}

TEST(ControlChannel, RecvTimesOutNamingThePeer) {
  Pair p;
  const auto t0 = Clock::now();
  const Error e = catch_error([&] { p.client.recv(deadline_in(150ms)); });
  EXPECT_EQ(e.status(), Status::TimedOut);
  EXPECT_TRUE(contains(e, p.client.peer())) << e.what();
  EXPECT_LT(Clock::now() - t0, 150ms + 1500ms);
}

TEST(ControlChannel, GarbledBytesAreProtocol) {
  Pair p;
  const std::string junk = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  p.server.socket().send_all({reinterpret_cast<const uint8_t*>(junk.data()), junk.size()}, deadline_in(10s));
  const Error e = catch_error([&] { p.client.recv(deadline_in(10s)); });
  EXPECT_EQ(e.status(), Status::Protocol);
  EXPECT_TRUE(contains(e, "bad magic")) << e.what();
}

TEST(ControlChannel, EofMidFrameIsPeerLostSayingSo) {
  Pair p;
  const auto f = encode_frame(FrameType::PeerInfo, std::vector<uint8_t>(100, 1));
  p.server.socket().send_all(std::span(f).first(30), deadline_in(10s));
  p.server.close();
  const Error e = catch_error([&] { p.client.recv(deadline_in(10s)); });
  EXPECT_EQ(e.status(), Status::PeerLost);
  EXPECT_TRUE(contains(e, "middle of a frame")) << e.what();
}

TEST(ControlChannel, ReadAvailableNeverBlocks) {
  Pair p;
  const auto t0 = Clock::now();
  EXPECT_TRUE(p.client.read_available().empty());
  EXPECT_LT(Clock::now() - t0, 1s);
  for (uint64_t i = 0; i < 3; ++i) p.server.queue(Ping{i, 0});
  EXPECT_TRUE(p.server.wants_write());
  EXPECT_TRUE(p.server.flush_some());
  EXPECT_FALSE(p.server.wants_write());
  const std::vector<Frame> got = read_n(p.client, 3);
  ASSERT_EQ(got.size(), 3u);
  for (uint64_t i = 0; i < 3; ++i) EXPECT_EQ(Ping::decode(got[i].payload).seq, i);
}

TEST(ControlChannel, FramesBeforeACloseAreDeliveredThenPeerLost) {
  Pair p;
  p.server.send(Notify{"last", "p", 0, NotifyKind::WriteDone, 1, Status::Ok}, deadline_in(10s));
  p.server.send(Bye{}, deadline_in(10s));
  p.server.close();
  wait_readable(p.client.fd());
  std::this_thread::sleep_for(50ms);  // let the FIN land behind the frames
  std::vector<Frame> got;
  Error lost(Status::Ok, "");
  const auto end = deadline_in(10s);
  while (Clock::now() < end) {
    try {
      for (Frame& f : p.client.read_available()) got.push_back(std::move(f));
    } catch (const Error& e) {
      lost = e;
      break;
    }
  }
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].type, FrameType::Notify);
  EXPECT_EQ(got[1].type, FrameType::Bye);
  EXPECT_EQ(lost.status(), Status::PeerLost);
}

// Two frames in one segment: recv() returns the first and the second waits decoded. Switching to
// the event loop, read_available() hands it out without any new byte (none may ever come), and
// has_decoded_frames() says it is there (no epoll event will).
TEST(ControlChannel, FramesDecodedByRecvAreHandedOutByReadAvailable) {
  Pair p;
  std::vector<uint8_t> two = encode_frame(FrameType::Ready, Ready{}.encode());
  const std::vector<uint8_t> ping = encode_frame(FrameType::Ping, Ping{7, 9}.encode());
  two.insert(two.end(), ping.begin(), ping.end());
  p.client.socket().send_all(two, deadline_in(10s));
  EXPECT_EQ(p.server.recv(deadline_in(10s)).type, FrameType::Ready);
  EXPECT_TRUE(p.server.has_decoded_frames());
  const std::vector<Frame> rest = p.server.read_available();
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0].type, FrameType::Ping);
  EXPECT_EQ(Ping::decode(rest[0].payload).seq, 7u);
  EXPECT_FALSE(p.server.has_decoded_frames());
}

// Sealed frames decoded by recv(): read_available() hands out those that open, then reports the
// one that fails to open (the connection is broken from there), as it does for frames it reads.
TEST(ControlChannel, DecodedFramesThatOpenAreHandedOutBeforeOneThatDoesNot) {
  Pair p;
  SealKey to_client{};
  SealKey to_server{};
  to_client[0] = 1;
  to_server[0] = 2;
  p.server.protect(SessionKeys{to_client, to_server});
  FrameSealer client_send(to_server);
  std::vector<uint8_t> bytes;
  for (uint64_t i = 0; i < 3; ++i) {
    std::vector<uint8_t> sealed =
        client_send.seal(static_cast<uint16_t>(FrameType::Ping), kFrameVersionMinor, Ping{i, 0}.encode());
    if (i == 2) sealed[0] ^= 1;  // altered on the way
    const std::vector<uint8_t> frame = encode_frame(FrameType::Ping, sealed);
    bytes.insert(bytes.end(), frame.begin(), frame.end());
  }
  p.client.socket().send_all(bytes, deadline_in(10s));
  EXPECT_EQ(Ping::decode(p.server.recv(deadline_in(10s)).payload).seq, 0u);
  const std::vector<Frame> rest = p.server.read_available();
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(Ping::decode(rest[0].payload).seq, 1u);
  const Error e = catch_error([&] { p.server.read_available(); });
  EXPECT_EQ(e.status(), Status::Protocol) << e.what();
  EXPECT_TRUE(contains(e, "failed authentication")) << e.what();
}

TEST(ControlChannel, ReadAvailableReturnsErrorFramesAsFrames) {
  Pair p;
  p.server.send(ErrorMessage{Status::Shutdown, "agent closing"}, deadline_in(10s));
  const std::vector<Frame> got = read_n(p.client, 1);
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got[0].type, FrameType::Error);
  const Error e = p.client.peer_error(got[0]);
  EXPECT_EQ(e.status(), Status::Shutdown);
  EXPECT_TRUE(contains(e, "agent closing")) << e.what();
  Frame bad{FrameType::Error, 0, {1, 2}};
  EXPECT_EQ(p.client.peer_error(bad).status(), Status::Protocol);
}

TEST(ControlChannel, FlushSomeStopsWhenTheSocketIsFullAndResumes) {
  Pair p;
  const std::vector<uint8_t> payload(1 << 20, 3);
  size_t queued = 0;
  // Queue until the kernel refuses more (the peer is not reading).
  for (int i = 0; i < 256; ++i) {
    p.client.queue(FrameType::PeerInfo, payload);
    ++queued;
    if (!p.client.flush_some()) break;
  }
  ASSERT_TRUE(p.client.wants_write()) << "64+ MiB fit in loopback buffers?";
  EXPECT_GT(p.client.queued_bytes(), 0u);
  // The peer drains; the writer flushes as room appears.
  size_t received = 0;
  const auto end = deadline_in(20s);
  while (received < queued && Clock::now() < end) {
    p.client.flush_some();
    pollfd pf{p.server.fd(), POLLIN, 0};
    ::poll(&pf, 1, 10);
    for (const Frame& f : p.server.read_available()) {
      EXPECT_EQ(f.payload.size(), payload.size());
      ++received;
    }
  }
  EXPECT_EQ(received, queued);
  EXPECT_FALSE(p.client.wants_write());
  EXPECT_EQ(p.client.queued_bytes(), 0u);
}

TEST(ControlChannel, HostIdentityIsStableAndNamesTheHost) {
  const std::string a = host_identity();
  EXPECT_EQ(a, host_identity());
  EXPECT_NE(a.find('/'), std::string::npos);
  EXPECT_GT(a.size(), 1u);
  EXPECT_LE(a.size(), kMaxHostIdBytes);
}
