// The agent's side of the tcp data connection against a hostile peer (agent_fake_peer.hpp): a data
// connection with the wrong token is closed and never admitted; every range a peer asks to read is
// checked against this agent's live registrations (a range outside them is refused and nothing
// outside is sent); garbled frames lose the peer with PROTOCOL and the agent admits the next one.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstring>

#include "agent_fake_peer.hpp"
#include "tcpdp/data_frame.hpp"
#include "ucx/memory.hpp"

using namespace pdkv;
using namespace pdkv::exec;
using namespace pdkv::exec::testing;
using namespace std::chrono_literals;

namespace {

// A P agent whose region 0 is registered over real memory (the other regions are not).
struct ServingAgent {
  std::vector<uint8_t> memory;
  std::unique_ptr<Agent> agent;
  std::shared_ptr<Registration> reg;
  uint64_t length = 0;
  ServingAgent() {
    const auto probe = tiny_metadata("pre", 0, 0);
    uint64_t span = 0;
    for (const auto& r : probe.regions) span = std::max(span, r.region.base + r.region.block_len * r.region.num_blocks);
    memory.assign(span + 4096, 0);
    // Bytes around region 0 that must never be sent (the guard after it is in region 1 or slack).
    for (size_t i = 0; i < memory.size(); ++i) memory[i] = static_cast<uint8_t>(i * 7 + 3);
    AgentOptions o;
    o.metadata = tiny_metadata("pre", 0, reinterpret_cast<uintptr_t>(memory.data()));
    o.transport = TransportMode::Tcp;
    o.default_timeout = 5000ms;
    o.heartbeat_interval = 100ms;
    o.heartbeat_timeout = 10000ms;
    const auto& r0 = o.metadata.regions[0].region;
    length = r0.block_len * r0.num_blocks;
    agent = std::make_unique<Agent>(o);
    reg = agent->register_memory(0, r0.base, length, MemoryType::Host);
  }
};

void send_frame(Socket& s, const tcpdp::Header& h, const std::vector<tcpdp::Piece>& pieces) {
  s.send_all(tcpdp::encode(h, pieces), deadline_in(3s));
}

// Reads one frame's header, pieces and payload from the data connection.
struct Received {
  tcpdp::Header header;
  std::vector<tcpdp::Piece> pieces;
  std::vector<uint8_t> payload;
};
Received recv_frame(Socket& s) {
  tcpdp::FrameReader r;
  while (!r.ready()) r.received(s.recv_some(r.want(), deadline_in(3s)));
  Received out{r.header(), r.pieces(), {}};
  out.payload.resize(r.payload_left());
  size_t have = 0;
  while (have < out.payload.size()) {
    have += s.recv_some(std::span<uint8_t>(out.payload).subspan(have), deadline_in(3s));
  }
  return out;
}

void wait_readable_for(int fd, std::chrono::milliseconds within) {
  pollfd p{fd, POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, static_cast<int>(within.count())), 1);
}

bool closed_within(int fd, std::chrono::milliseconds within) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(within.count())) <= 0) return false;
  char c;
  return ::recv(fd, &c, 1, MSG_DONTWAIT) <= 0;
}

}  // namespace

TEST(AgentTcpData, ADataConnectionWithTheWrongTokenIsClosedAndTheRightOneAdmits) {
  ServingAgent p;
  FakePeer peer(TransportMode::Tcp);
  peer.handshake(p.agent->info().listen);
  const TransportOffer offer = peer.agree_transport();
  ASSERT_NE(offer.data_port, 0);
  std::array<uint8_t, 32> forged = offer.data_token;
  forged[31] ^= 1;
  Socket& bad = peer.open_data(deadline_in(3s), forged);
  EXPECT_TRUE(closed_within(bad.fd(), 2000ms)) << "the agent kept a data connection with a forged token";
  EXPECT_EQ(p.agent->info().num_peers, 0u);
  // The real token still admits the peer within the admission deadline.
  peer.open_data();
  peer.channel().send(Ready{}, deadline_in(3s));
  const Frame f = peer.channel().recv(deadline_in(3s));
  EXPECT_EQ(f.type, FrameType::Ready);
  EXPECT_EQ(p.agent->info().num_peers, 1u);
}

// The agent uses UCX only to register memory: its handshake carries the key of each registered
// region (a peer takes the region's range from it) and an empty worker address (no UCX worker).
TEST(AgentTcpData, TheHandshakeCarriesRegionKeysButNoUcxWorkerAddress) {
  ServingAgent p;
  FakePeer peer(TransportMode::Tcp);
  peer.handshake(p.agent->info().listen);
  const PeerInfo& info = peer.agent_info();
  EXPECT_TRUE(info.worker_address.empty()) << info.worker_address.size() << " bytes of worker address";
  ASSERT_EQ(info.regions.size(), 1u);
  EXPECT_EQ(info.regions[0].region, 0u);
  EXPECT_EQ(info.regions[0].base, p.reg->base);
  EXPECT_EQ(info.regions[0].length, p.length);
  EXPECT_FALSE(info.regions[0].rkey.empty());
  EXPECT_EQ(packed_rkey_layout_error(info.regions[0].rkey), "");
}

TEST(AgentTcpData, ReadRangesOutsideTheRegistrationsAreRefusedAndNothingOutsideIsSent) {
  ServingAgent p;
  FakePeer peer(TransportMode::Tcp);
  peer.admit(p.agent->info().listen);
  Socket& d = *peer.data();
  const uint64_t L = p.length;
  struct Case {
    const char* what;
    std::vector<tcpdp::Piece> pieces;
  };
  const std::vector<Case> refused{
      {"past the end", {{0, L - 8, 16}}},
      {"offset past the end", {{0, L + 1, 1}}},
      {"offset overflowing", {{0, ~uint64_t{0} - 3, 8}}},
      {"an unregistered region", {{1, 0, 8}}},
      {"a region that does not exist", {{77, 0, 8}}},
      {"one bad piece among good ones", {{0, 0, 8}, {0, L, 1}, {0, 8, 8}}},
  };
  uint64_t batch = 1;
  for (const Case& c : refused) {
    SCOPED_TRACE(c.what);
    send_frame(d, {tcpdp::FrameType::ReadRequest, batch, 0, 0}, c.pieces);
    const Received r = recv_frame(d);
    EXPECT_EQ(r.header.type, tcpdp::FrameType::ReadData);
    EXPECT_EQ(r.header.batch, batch);
    EXPECT_EQ(r.header.status, static_cast<uint32_t>(tcpdp::Refusal::Range));
    EXPECT_TRUE(r.pieces.empty());
    EXPECT_TRUE(r.payload.empty());
    ++batch;
  }
  // A range inside is served byte for byte; the peer is still connected after all the refusals.
  send_frame(d, {tcpdp::FrameType::ReadRequest, batch, 0, 0}, {{0, L - 16, 16}, {0, 0, 8}});
  const Received ok = recv_frame(d);
  ASSERT_EQ(ok.header.status, 0u);
  ASSERT_EQ(ok.payload.size(), 24u);
  const uint8_t* base = reinterpret_cast<const uint8_t*>(static_cast<uintptr_t>(p.reg->base));
  EXPECT_EQ(0, std::memcmp(ok.payload.data(), base + L - 16, 16));
  EXPECT_EQ(0, std::memcmp(ok.payload.data() + 16, base, 8));
  EXPECT_EQ(p.agent->info().num_peers, 1u);
}

TEST(AgentTcpData, AGarbledDataFrameLosesThePeerWithProtocolAndTheNextPeerIsServed) {
  ServingAgent p;
  {
    FakePeer peer(TransportMode::Tcp);
    peer.admit(p.agent->info().listen);
    auto bytes = tcpdp::encode({tcpdp::FrameType::ReadRequest, 1, 0, 0}, std::vector<tcpdp::Piece>{{0, 0, 8}});
    bytes[4] = 99;  // version
    peer.data()->send_all(bytes, deadline_in(3s));
    EXPECT_TRUE(closed_within(peer.data()->fd(), 3000ms));
    bool lost = false;
    for (int i = 0; i < 100 && !lost; ++i) {
      for (const auto& n : p.agent->poll_notifications()) {
        if (n.kind == NotificationKind::PeerLost) {
          lost = true;
          EXPECT_EQ(n.status, core::Status::Protocol);
          EXPECT_EQ(n.engine_id, "dec");
        }
      }
      if (!lost) std::this_thread::sleep_for(20ms);
    }
    EXPECT_TRUE(lost);
  }
  // A data answer to a batch nobody asked for is garbled too.
  {
    FakePeer peer(TransportMode::Tcp);
    peer.admit(p.agent->info().listen);
    send_frame(*peer.data(), {tcpdp::FrameType::WriteAck, 42, 0, 0}, {});
    EXPECT_TRUE(closed_within(peer.data()->fd(), 3000ms));
  }
  FakePeer fresh(TransportMode::Tcp);
  fresh.admit(p.agent->info().listen);
  send_frame(*fresh.data(), {tcpdp::FrameType::ReadRequest, 1, 0, 0}, {{0, 0, 8}});
  EXPECT_EQ(recv_frame(*fresh.data()).header.status, 0u);
}

// A registration whose handle the engine freed (pdkv_memory_free) while a peer's batch still used
// it is released once that batch is sent, and meanwhile serves nothing new. Before, the agent went
// on answering a peer's new requests from it (each keeping it busy again, for as long as the
// peer kept asking) although the engine, its handle freed, may unmap the memory
// (pdkv_shared_memory_free asks only that every registration inside be deregistered or freed).
TEST(AgentTcpData, ARegistrationWhoseHandleWasFreedServesNothingNew) {
  constexpr uint64_t kBlocks = 4096;  // 8 KiB blocks: 32 MiB regions
  constexpr uint64_t kAnswer = tcpdp::kMaxBatchBytes;
  std::vector<uint8_t> memory(kBlocks * 8192 + 4096, 0x5a);
  AgentOptions o;
  o.metadata = tiny_metadata("pre", 0, reinterpret_cast<uintptr_t>(memory.data()), kBlocks);  // region 0 registered
  o.transport = TransportMode::Tcp;
  o.default_timeout = 5000ms;
  o.heartbeat_interval = 100ms;
  o.heartbeat_timeout = 10000ms;
  const auto& r0 = o.metadata.regions[0].region;
  const uint64_t length = r0.block_len * r0.num_blocks;
  auto agent = std::make_unique<Agent>(o);
  auto reg = agent->register_memory(0, r0.base, length, MemoryType::Host);
  FakePeer peer(TransportMode::Tcp);
  peer.admit(agent->info().listen);
  Socket& d = *peer.data();
  // 8 answers of 4 MiB, far more than the two sockets hold while the peer reads nothing: the
  // agent's send queue keeps the region busy.
  for (uint64_t b = 1; b <= 8; ++b) send_frame(d, {tcpdp::FrameType::ReadRequest, b, 0, 0}, {{0, (b - 1) * kAnswer, kAnswer}});
  wait_readable_for(d.fd(), 3000ms);
  std::this_thread::sleep_for(50ms);
  release_memory(agent->core(), reg);  // the engine frees its handle: released when idle
  send_frame(d, {tcpdp::FrameType::ReadRequest, 9, 0, 0}, {{0, 0, 8}});
  for (uint64_t b = 1; b <= 8; ++b) {
    const Received r = recv_frame(d);
    EXPECT_EQ(r.header.batch, b);
    EXPECT_EQ(r.header.status, 0u);
    EXPECT_EQ(r.payload.size(), kAnswer);
  }
  const Received late = recv_frame(d);
  EXPECT_EQ(late.header.batch, 9u);
  EXPECT_EQ(late.header.status, static_cast<uint32_t>(tcpdp::Refusal::Range)) << "a freed registration was served";
  EXPECT_TRUE(late.payload.empty());
  // With its last batch sent the registration is gone: the region can be registered again.
  std::shared_ptr<Registration> again;
  for (int i = 0; i < 200 && !again; ++i) {
    try {
      again = agent->register_memory(0, r0.base, length, MemoryType::Host);
    } catch (const core::Error& e) {
      ASSERT_EQ(e.status(), core::Status::Busy) << e.what();
      std::this_thread::sleep_for(10ms);
    }
  }
  EXPECT_TRUE(again) << "the freed registration was never released";
}

