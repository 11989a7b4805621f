// An authenticated peer that lies or floods on its control channel after admission. What it
// may cost the agent is bounded: notifications waiting for the caller are capped (a peer whose
// Notify finds the queue full is dropped with PROTOCOL, nothing already queued is lost), and
// notifications whose text the C API would cut short (an embedded NUL) are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include "agent_fake_peer.hpp"

using namespace pdkv;
using namespace pdkv::exec;
using namespace pdkv::exec::testing;
using namespace std::chrono_literals;
using core::Status;

namespace {

Notify notify_of(const FakePeer& peer, std::string request) {
  Notify n;
  n.request_id = std::move(request);
  n.engine_id = peer.metadata().engine_id;
  n.tp_rank = peer.metadata().tp_rank;
  n.kind = NotifyKind::ReadDone;
  n.bytes = 1;
  return n;
}

// Polls until a PeerLost notification for engine "dec" arrives (or `within` passes); returns
// every notification taken, in order.
std::vector<Notification> poll_until_lost(Agent& agent, std::chrono::milliseconds within = 10s) {
  std::vector<Notification> all;
  const auto until = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < until) {
    auto got = agent.poll_notifications();
    const bool lost = std::any_of(got.begin(), got.end(), [](const Notification& n) {
      return n.kind == NotificationKind::PeerLost;
    });
    all.insert(all.end(), std::make_move_iterator(got.begin()), std::make_move_iterator(got.end()));
    if (lost) break;
    std::this_thread::sleep_for(5ms);
  }
  return all;
}

// Waits (without polling, which would drain the queue) until the agent has read `sent` Notify
// frames from the peer or dropped it.
void wait_read_or_lost(Agent& agent, const std::shared_ptr<PeerRecord>& rec, size_t sent) {
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < until && rec->connected.load() &&
         rec->notifications_received.load() < sent) {
    std::this_thread::sleep_for(2ms);
  }
  (void)agent;
}

size_t count_kind(const std::vector<Notification>& v, NotificationKind k) {
  return static_cast<size_t>(std::count_if(v.begin(), v.end(), [&](const Notification& n) { return n.kind == k; }));
}

// The caller does not poll while the peer sends notifications with 1 KiB request ids: the queue
// stops at its byte budget (before: ~1.1 GiB could pile up, 2^20 of them, and the oldest were
// then dropped silently, local lease notifications included).
TEST(AgentHostilePeer, ANotifyFloodIsCutOffAtTheQueueBudgetAndNothingQueuedIsLost) {
  auto agent = tiny_agent(TransportMode::Shm);
  agent->lease("local-lease", 1, 50ms);  // expires while the flood runs: must survive it
  FakePeer peer(TransportMode::Shm);
  peer.admit(agent->info().listen);
  const auto rec = agent->find_peer("dec", 0);
  const size_t sent_max = 32000;  // 32000 x ~1.1 KiB: over the 32 MiB budget
  size_t sent = 0;
  try {
    for (; sent < sent_max; ++sent) {
      std::string id(1015, 'r');
      id += std::to_string(sent);
      peer.channel().queue(notify_of(peer, id));
    }
    while (!peer.channel().flush_some()) std::this_thread::sleep_for(100us);
  } catch (const core::Error&) {
    // The agent dropped the peer mid-flood: the connection closed under the sender.
  }
  wait_read_or_lost(*agent, rec, sent);
  const auto notes = poll_until_lost(*agent);
  const size_t read_done = count_kind(notes, NotificationKind::ReadDone);
  EXPECT_LT(read_done, 31000u) << "the queue held " << read_done << " notifications of 1 KiB";
  EXPECT_GT(read_done, 1000u);
  ASSERT_EQ(count_kind(notes, NotificationKind::PeerLost), 1u) << "the flooding peer was not dropped";
  for (const auto& n : notes) {
    if (n.kind == NotificationKind::PeerLost) EXPECT_EQ(n.status, Status::Protocol);
  }
  EXPECT_EQ(count_kind(notes, NotificationKind::LeaseExpired), 1u) << "a local notification was dropped";
  // Every notification queued before the cut is there, oldest first.
  size_t next = 0;
  for (const auto& n : notes) {
    if (n.kind != NotificationKind::ReadDone) continue;
    EXPECT_EQ(n.request_id, std::string(1015, 'r') + std::to_string(next));
    if (n.request_id != std::string(1015, 'r') + std::to_string(next)) break;
    ++next;
  }
}

// The same with short ids: the count cap (65536) applies.
TEST(AgentHostilePeer, ANotifyFloodIsCutOffAtTheQueueCount) {
  auto agent = tiny_agent(TransportMode::Shm);
  FakePeer peer(TransportMode::Shm);
  peer.admit(agent->info().listen);
  const auto rec = agent->find_peer("dec", 0);
  size_t sent = 0;
  try {
    for (; sent < 70000; ++sent) peer.channel().queue(notify_of(peer, "r" + std::to_string(sent)));
    while (!peer.channel().flush_some()) std::this_thread::sleep_for(100us);
  } catch (const core::Error&) {
  }
  wait_read_or_lost(*agent, rec, sent);
  const auto notes = poll_until_lost(*agent);
  // PeerConnected and 65535 READ_DONE fill the queue; then the peer is dropped.
  ASSERT_EQ(count_kind(notes, NotificationKind::PeerLost), 1u);
  EXPECT_EQ(notes.back().kind, NotificationKind::PeerLost);
  EXPECT_EQ(notes.back().status, Status::Protocol);
  EXPECT_EQ(count_kind(notes, NotificationKind::ReadDone), 65535u);
  EXPECT_EQ(notes.size(), 65537u);
}

// A request id with a NUL byte would reach a C caller cut short at the NUL ("ab" for "ab\0cd"),
// where it could be taken for another request: the Notify is refused and the peer dropped.
TEST(AgentHostilePeer, ANotifyWhoseRequestIdHasANulIsRefused) {
  auto agent = tiny_agent(TransportMode::Shm);
  FakePeer peer(TransportMode::Shm);
  peer.admit(agent->info().listen);
  peer.channel().send(notify_of(peer, std::string("ab\0cd", 5)), deadline_in(3s));
  const auto notes = poll_until_lost(*agent, 1500ms);
  EXPECT_EQ(count_kind(notes, NotificationKind::ReadDone), 0u);
  ASSERT_EQ(count_kind(notes, NotificationKind::PeerLost), 1u);
  EXPECT_EQ(notes.back().status, Status::Protocol);
}

// A Notify that reaches the agent in the same segment as the peer's Ready (here one write of
// both frames) is decoded by admission's read of the Ready and waits in the channel's decoder.
// It must be handled once the peer is published, not when the peer next sends something: a peer
// that sends nothing more (no Pong: the fake peer never answers Pings) would otherwise have its
// notification held back until the heartbeat timeout drops it.
TEST(AgentHostilePeer, ANotifyThatArrivesWithTheReadyIsHandledAtOnce) {
  auto agent = tiny_agent(TransportMode::Tcp);
  FakePeer peer(TransportMode::Tcp);
  peer.handshake(agent->info().listen);
  peer.agree_transport();
  peer.open_data();
  std::vector<uint8_t> bytes = encode_frame(FrameType::Ready, Ready{}.encode());
  const std::vector<uint8_t> notify = encode_frame(FrameType::Notify, notify_of(peer, "with-ready").encode());
  bytes.insert(bytes.end(), notify.begin(), notify.end());
  peer.channel().socket().send_all(bytes, deadline_in(3s));
  const Frame f = peer.channel().recv(deadline_in(3s));
  ASSERT_EQ(f.type, FrameType::Ready);
  std::vector<Notification> notes;
  const auto until = std::chrono::steady_clock::now() + 2s;
  while (std::chrono::steady_clock::now() < until && count_kind(notes, NotificationKind::ReadDone) == 0) {
    auto got = agent->poll_notifications();
    notes.insert(notes.end(), got.begin(), got.end());
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_EQ(count_kind(notes, NotificationKind::ReadDone), 1u) << "the Notify sent with the Ready was not handled";
  const auto it = std::find_if(notes.begin(), notes.end(), [](const Notification& n) { return n.kind == NotificationKind::ReadDone; });
  EXPECT_EQ(it->request_id, "with-ready");
  EXPECT_EQ(count_kind(notes, NotificationKind::PeerLost), 0u);
}

// A packed key shorter than its own layout says: UCX's unpacker takes no length and would read
// past the key's bytes (heap memory of this process). The handshake refuses it, naming the region.
class AgentHostileKeys : public ::testing::TestWithParam<std::vector<uint8_t>> {};

TEST_P(AgentHostileKeys, AKeyThatContradictsItsOwnLayoutIsRefused) {
  auto agent = tiny_agent(TransportMode::Tcp);
  FakePeer peer(TransportMode::Tcp);
  try {
    peer.handshake(agent->info().listen, deadline_in(3s), {peer.key_for(0, GetParam())});
    FAIL() << "the agent accepted a malformed key";
  } catch (const core::Error& e) {
    EXPECT_EQ(e.status(), Status::Protocol) << e.what();
    EXPECT_NE(std::string(e.what()).find("region 0"), std::string::npos) << e.what();
  }
  EXPECT_EQ(agent->info().num_peers, 0u);
}

// A map of 8 bytes, a memory type byte, then one size byte and that many bytes per map bit.
INSTANTIATE_TEST_SUITE_P(
    Layouts, AgentHostileKeys,
    ::testing::Values(std::vector<uint8_t>{0x01},                                // no full map
                      std::vector<uint8_t>{0x03, 0, 0, 0, 0, 0, 0, 0},           // no memory type
                      std::vector<uint8_t>{0x03, 0, 0, 0, 0, 0, 0, 0, 0, 0},     // 2 bits, 1 size byte
                      std::vector<uint8_t>{0x01, 0, 0, 0, 0, 0, 0, 0, 0, 200, 1},  // says 200, has 1
                      std::vector<uint8_t>(9, 0xFF)));                           // 64 bits, no sizes

// This agent never sends such an id either: post and lease refuse it, naming the offset.
TEST(AgentHostilePeer, PostAndLeaseRefuseARequestIdWithANul) {
  auto agent = tiny_agent(TransportMode::Shm);
  try {
    agent->lease(std::string("ab\0cd", 5), 1, 1000ms);
    FAIL() << "leased an id with a NUL";
  } catch (const core::Error& e) {
    EXPECT_EQ(e.status(), Status::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("offset 2"), std::string::npos) << e.what();
  }
  core::TransferPlan plan;
  PostParams pp;
  pp.plan = &plan;
  pp.peer_engine_id = "dec";
  pp.request_id = std::string("x\0", 2);
  try {
    agent->post(pp);
    FAIL() << "posted an id with a NUL";
  } catch (const core::Error& e) {
    EXPECT_EQ(e.status(), Status::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("offset 1"), std::string::npos) << e.what();
  }
}

}  // namespace
