// Lease keep-alives (Agent::keep_leases, control protocol 3.4): a reader (D) keeps the leases P
// holds for requests it will read later open, as vLLM's "HB:req1,req2" notifications do, so P
// neither frees their blocks early nor must lease them for long. What is checked: a kept lease
// outlives its ttl for as long as the reader keeps it and expires once it stops; a lease nobody
// keeps expires on time beside it; ids are whole strings (a comma is part of an id, where vLLM's
// comma-joined heartbeat would split it); what the call refuses (no such engine, a bad id, a peer
// too old to decode the frame); and a peer's malformed KeepLeases drops that peer.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "agent/agent.hpp"
#include "agent_fake_peer.hpp"

using namespace pdkv;
using namespace pdkv::exec;
using core::Status;
using namespace std::chrono_literals;
using pdkv::exec::testing::FakePeer;
using pdkv::exec::testing::tiny_agent;
using pdkv::exec::testing::tiny_metadata;
using Clock = std::chrono::steady_clock;

namespace {

std::unique_ptr<Agent> rank_of(const std::string& engine, uint64_t base) {
  AgentOptions o;
  o.metadata = tiny_metadata(engine, 0, base);
  o.transport = TransportMode::Tcp;
  o.heartbeat_interval = 100ms;
  o.heartbeat_timeout = 5000ms;
  return std::make_unique<Agent>(o);
}

// The LEASE_EXPIRED notifications among `notes`, by request id.
std::vector<std::string> expired(const std::vector<Notification>& notes) {
  std::vector<std::string> out;
  for (const auto& n : notes) {
    if (n.kind == NotificationKind::LeaseExpired) out.push_back(n.request_id);
  }
  return out;
}

template <typename F>
void expect_error(F&& f, Status status, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected " << core::status_name(status) << " saying '" << part << "'";
  } catch (const core::Error& e) {
    EXPECT_EQ(e.status(), status) << e.what();
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(AgentLeaseKeep, AKeptLeaseOutlivesItsTtlAndExpiresOnceTheReaderStops) {
  auto p = rank_of("pre", 1ull << 40);
  auto d = rank_of("dec", 1ull << 41);
  d->connect(p->info().listen, 3000ms);
  const std::string kept = "req-7,shard=1";  // one id holding commas
  p->lease(kept, 1, 1000ms);
  p->lease("not-kept", 1, 1000ms);
  p->lease("req-7", 1, 1000ms);  // what a comma-split "req-7,shard=1" would name
  const auto start = Clock::now();
  std::vector<std::string> seen;
  // 2.5 ttl's worth of keep-alives every 100 ms (also for ids P does not lease).
  while (Clock::now() - start < 2500ms) {
    d->keep_leases("pre", {kept, "never-leased"});
    std::this_thread::sleep_for(100ms);
    for (auto& id : expired(p->poll_notifications())) seen.push_back(id);
  }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), kept), 0) << "a kept lease expired";
  EXPECT_EQ(std::count(seen.begin(), seen.end(), "not-kept"), 1) << "a lease nobody kept did not expire";
  EXPECT_EQ(std::count(seen.begin(), seen.end(), "req-7"), 1) << "a comma split the kept id";
  // The reader stops: the lease ends within its ttl (and the control thread's next round).
  const auto stopped = Clock::now();
  bool ended = false;
  while (!ended && Clock::now() - stopped < 5000ms) {
    for (auto& id : expired(p->poll_notifications())) ended |= id == kept;
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(ended) << "the lease outlived the keep-alives";
  EXPECT_GE(Clock::now() - stopped, 500ms) << "the last keep-alive was not honoured";
  // Counted on both sides: each call names two ids.
  const auto on_p = p->find_peer("dec", 0);
  const auto on_d = d->find_peer("pre", 0);
  ASSERT_TRUE(on_p && on_d);
  EXPECT_GE(on_d->lease_keeps_sent.load(), 20u);
  EXPECT_EQ(on_p->lease_keeps_received.load(), on_d->lease_keeps_sent.load());
}

TEST(AgentLeaseKeep, RefusesWhatItCannotSendNamingWhy) {
  auto d = rank_of("dec", 1ull << 41);
  expect_error([&] { d->keep_leases("pre", {"r"}); }, Status::NotFound, "no connected rank of engine 'pre'");
  auto p = rank_of("pre", 1ull << 40);
  d->connect(p->info().listen, 3000ms);
  expect_error([&] { d->keep_leases("pre", {"r", ""}); }, Status::InvalidArgument, "request_ids[1]");
  expect_error([&] { d->keep_leases("pre", {std::string(2000, 'x')}); }, Status::InvalidArgument, "1..1024 bytes");
  EXPECT_NO_THROW(d->keep_leases("pre", {}));  // nothing to send
  EXPECT_EQ(d->find_peer("pre", 0)->lease_keeps_sent.load(), 0u);

  // A peer whose Hello says 3.3 cannot decode the frame: refused naming it, nothing sent.
  auto agent = tiny_agent(TransportMode::Tcp);
  FakePeer old(TransportMode::Tcp);
  old.say_minor(3);
  old.admit(agent->info().listen);
  const auto until = Clock::now() + 3000ms;
  while (!agent->find_peer("dec", 0) && Clock::now() < until) std::this_thread::sleep_for(2ms);
  expect_error([&] { agent->keep_leases("dec", {"r"}); }, Status::Incompatible, "runs control protocol 3.3");
  EXPECT_EQ(agent->find_peer("dec", 0)->lease_keeps_sent.load(), 0u);
}

// A KeepLeases frame no agent sends (an empty id) is a protocol error: the peer is dropped.
TEST(AgentLeaseKeep, AMalformedKeepLeasesDropsThePeer) {
  auto agent = tiny_agent(TransportMode::Tcp);
  FakePeer peer(TransportMode::Tcp);
  peer.admit(agent->info().listen);
  const auto until = Clock::now() + 3000ms;
  while (!agent->find_peer("dec", 0) && Clock::now() < until) std::this_thread::sleep_for(2ms);
  ASSERT_TRUE(agent->find_peer("dec", 0));
  KeepLeases bad;
  bad.request_ids = {"fine", ""};
  peer.channel().send(bad, deadline_in(3s));
  bool lost = false;
  while (!lost && Clock::now() < until + 3000ms) {
    for (const auto& n : agent->poll_notifications()) {
      if (n.kind == NotificationKind::PeerLost) {
        lost = true;
        EXPECT_EQ(n.status, Status::Protocol);
      }
    }
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_TRUE(lost) << "the peer was kept";
}
