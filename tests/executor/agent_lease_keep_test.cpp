// Lease keep-alives (Agent::keep_leases, control protocol 3.4): a reader (D) keeps the leases P
// holds for requests it will read later open, as vLLM's "HB:req1,req2" notifications do, so P
// neither frees their blocks early nor must lease them for long. What is checked: a kept lease
// outlives its ttl for as long as the reader keeps it and expires once it stops; a lease nobody
// keeps expires on time beside it; ids are whole strings (a comma is part of an id, where vLLM's
// comma-joined heartbeat would split it); what the call refuses (no such engine, a bad id, a peer
// too old to decode the frame); a peer's malformed KeepLeases drops that peer; and a READ in
// flight keeps the lease of its request open by itself, until it has its data or stops.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "agent/agent.hpp"
#include "agent_fake_peer.hpp"
#include "agent_tiny_rank.hpp"
#include "control/wire.hpp"

using namespace pdkv;
using namespace pdkv::exec;
using core::Status;
using namespace std::chrono_literals;
using pdkv::exec::testing::FakePeer;
using pdkv::exec::testing::TinyRank;
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

// Whether `agent` reports LEASE_EXPIRED for `id` within `within` (other notifications are dropped).
bool expires_within(Agent& agent, const std::string& id, std::chrono::milliseconds within) {
  const auto until = Clock::now() + within;
  while (Clock::now() < until) {
    for (auto& e : expired(agent.poll_notifications())) {
      if (e == id) return true;
    }
    std::this_thread::sleep_for(5ms);
  }
  return false;
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

// A READ that takes longer than P's lease (P serves nothing for three ttl's: caller progress,
// nobody calling) must not have its blocks freed under it: D's agent asks P to keep the request's
// lease when it posts and with each heartbeat while the READ waits for P's data, and P's lease of
// it does not expire, while a lease nobody reads beside it does. Once the READ has its data the
// asking stops (D's notification then completes the lease); a READ that is cancelled stops
// asking at once, and its lease expires on time though its batches are still unanswered.
// Before, the READ's lease expired after its ttl and P would have freed blocks D still read.
TEST(AgentLeaseKeep, AReadInFlightKeepsItsLeaseUntilItHasItsDataOrStops) {
  TinyRank d("dec", 16, ProgressMode::Thread, false, 10000ms);
  TinyRank p("pre", 16, ProgressMode::Caller, true, 10000ms);
  d.agent->connect(p.agent->info().listen, 3000ms);
  const auto plan = pdkv::exec::testing::whole_plan(d, p, 16);
  constexpr auto kTtl = 300ms;
  p.agent->lease("read", 1, kTtl);
  p.agent->lease("idle", 1, kTtl);
  auto t = d.agent->post(pdkv::exec::testing::read_of(plan, "read", 20000ms));
  std::vector<std::string> seen;
  const auto start = Clock::now();
  while (Clock::now() - start < 3 * kTtl + 100ms) {
    std::this_thread::sleep_for(20ms);
    for (auto& id : expired(p.agent->poll_notifications())) seen.push_back(id);
  }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), "read"), 0) << "P's lease expired under a READ in flight";
  EXPECT_EQ(std::count(seen.begin(), seen.end(), "idle"), 1) << "a lease nobody reads did not expire";
  EXPECT_FALSE(t.wait(0ms)) << "the READ ended though P served nothing";

  // P serves: the READ completes, D notifies, P's lease completes (no expiry), the asking stops.
  std::atomic<bool> run{true};
  std::thread driver([&] {
    while (run) {
      p.agent->progress();
      std::this_thread::sleep_for(1ms);
    }
  });
  ASSERT_TRUE(t.wait(5000ms));
  ASSERT_EQ(t.status().status, Status::Ok) << t.status().message;
  EXPECT_TRUE(pdkv::exec::testing::read_right(d, p));
  bool complete = false;
  const auto until = Clock::now() + 3000ms;
  while (!complete && Clock::now() < until) {
    for (const auto& n : p.agent->poll_notifications()) {
      EXPECT_NE(n.kind, NotificationKind::LeaseExpired) << n.request_id;
      complete |= n.kind == NotificationKind::RequestComplete && n.request_id == "read";
    }
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_TRUE(complete);
  const auto on_d = d.agent->find_peer("pre", 0);
  const auto on_p = p.agent->find_peer("dec", 0);
  ASSERT_TRUE(on_d && on_p);
  const uint64_t sent = on_d->lease_keeps_sent.load();
  EXPECT_GE(sent, 10u) << "one when posted, then about one per 50 ms heartbeat for 0.9 s";
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(on_d->lease_keeps_sent.load(), sent) << "D still asks P to keep a lease it has read";
  EXPECT_EQ(on_p->lease_keeps_received.load(), sent);
  run = false;
  driver.join();

  // A READ that P does not serve, cancelled: its lease expires within its ttl of the cancel.
  p.agent->lease("cancelled", 1, kTtl);
  auto c = d.agent->post(pdkv::exec::testing::read_of(plan, "cancelled", 20000ms));
  std::this_thread::sleep_for(2 * kTtl);
  EXPECT_TRUE(expired(p.agent->poll_notifications()).empty()) << "the lease expired under a READ in flight";
  c.cancel();
  const auto cancelled = Clock::now();
  bool ended = false;
  while (!ended && Clock::now() - cancelled < 3000ms) {
    for (auto& id : expired(p.agent->poll_notifications())) ended |= id == "cancelled";
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(ended) << "a cancelled READ kept its lease open";
  EXPECT_LT(Clock::now() - cancelled, kTtl + 400ms);
  // Let P answer what the cancelled READ left in flight, so both agents close cleanly.
  run = true;
  std::thread drain([&] {
    while (run) {
      p.agent->progress();
      std::this_thread::sleep_for(1ms);
    }
  });
  EXPECT_TRUE(c.wait(5000ms));
  run = false;
  drain.join();
}

// A READ of blocks whose lease on P had already ended fails instead of taking them as the
// request's (pdkv 2.7): P gave them back (LEASE_EXPIRED, REQUEST_COMPLETE) and may have filled
// them with another request's bytes. D asks P when it posts (LeaseQuery) and counts a P rank's
// bytes only once P says the lease is open or was never leased; an ended lease fails the READ
// naming P, the request and what to do, and every read from that P rank is listed as failed.
// Before, both READs below completed with whatever the blocks held.
TEST(AgentLeaseKeep, AReadOfBlocksWhoseLeaseEndedFailsNamingIt) {
  TinyRank d("dec", 16, ProgressMode::Thread, false, 10000ms);
  TinyRank p("pre", 16, ProgressMode::Thread, true, 10000ms);
  d.agent->connect(p.agent->info().listen, 3000ms);
  const auto plan = pdkv::exec::testing::whole_plan(d, p, 16);
  auto read = [&](const std::string& id) {
    std::fill(d.mem.begin(), d.mem.end(), 0xEE);
    auto t = d.agent->post(pdkv::exec::testing::read_of(plan, id, 5000ms));
    EXPECT_TRUE(t.wait(5000ms));
    return t.status();
  };
  // Never leased (P does not lease this request): read as before.
  auto s = read("never-leased");
  EXPECT_EQ(s.status, Status::Ok) << s.message;
  EXPECT_TRUE(pdkv::exec::testing::read_right(d, p));

  // Expired before the READ was posted.
  p.agent->lease("late", 1, 30ms);
  ASSERT_TRUE(expires_within(*p.agent, "late", 3000ms));
  const auto until = Clock::now() + 3000ms;
  s = read("late");
  EXPECT_EQ(s.status, Status::TimedOut) << s.message;
  EXPECT_NE(s.message.find("P rank 0 of engine 'pre' says its lease of request 'late' expired before this READ asked"),
            std::string::npos)
      << s.message;
  EXPECT_EQ(s.failed.size(), plan.ranks[0].reads.size()) << "the bytes from an ended lease were counted";

  // Open: read; D's notification completes it; a second READ of it then fails.
  p.agent->lease("once", 1, 10000ms);
  s = read("once");
  EXPECT_EQ(s.status, Status::Ok) << s.message;
  bool complete = false;
  while (!complete && Clock::now() < until + 3000ms) {
    for (const auto& n : p.agent->poll_notifications()) complete |= n.kind == NotificationKind::RequestComplete;
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_TRUE(complete);
  s = read("once");
  EXPECT_EQ(s.status, Status::Incompatible) << s.message;
  EXPECT_NE(s.message.find("lease of request 'once' completed before this READ asked"), std::string::npos) << s.message;
  EXPECT_EQ(s.failed.size(), plan.ranks[0].reads.size());

  // Leased again after it ended: open again, read.
  p.agent->lease("late", 1, 10000ms);
  s = read("late");
  EXPECT_EQ(s.status, Status::Ok) << s.message;
  EXPECT_TRUE(pdkv::exec::testing::read_right(d, p));
}

// Query numbers are D's own and go to one P rank each: another peer answering one (guessing the
// sequence) is a protocol error that drops that peer, and the READ it tried to complete still
// waits for its own P rank. A malformed LeaseQuery (an empty id) drops its sender too (its READs
// fail with PEER_LOST naming why).
TEST(AgentLeaseKeep, AnAnswerFromAnotherPeerOrAMalformedQueryDropsThePeer) {
  TinyRank d("dec", 16, ProgressMode::Thread, false, 10000ms);
  // P: a fake at 3.5 that never reads its control channel, so D's query stays unanswered.
  FakePeer p(TransportMode::Tcp, tiny_metadata("pre", 0, 1ull << 41, 16), std::nullopt, false);
  const std::vector<uint8_t> rkey = d.regs[0]->ucx->packed_rkey();
  p.admit(d.agent->info().listen, deadline_in(3s), {p.key_for(0, rkey), p.key_for(1, rkey), p.key_for(2, rkey)});
  const auto until = Clock::now() + 3000ms;
  while (!d.agent->find_peer("pre", 0) && Clock::now() < until) std::this_thread::sleep_for(2ms);
  ASSERT_TRUE(d.agent->find_peer("pre", 0));
  core::PlanContext ctx = core::make_plan_context(d.md, {p.metadata()});
  core::PlanGroup g;
  g.trim.kind = core::GroupKind::Attention;
  g.trim.local_blocks = {1, 2};
  g.trim.remote_blocks = {1, 2};
  g.trim.remote_computed_tokens = 32;
  const auto plan = core::compile_transfer_plan(ctx, {g});
  auto t = d.agent->post(pdkv::exec::testing::read_of(plan, "r", 10000ms));

  // Another peer answers the first query number.
  FakePeer other(TransportMode::Tcp, tiny_metadata("other", 0, 1ull << 42, 16), std::nullopt, false);
  other.admit(d.agent->info().listen, deadline_in(3s), {other.key_for(0, rkey), other.key_for(1, rkey), other.key_for(2, rkey)});
  while (!d.agent->find_peer("other", 0) && Clock::now() < until) std::this_thread::sleep_for(2ms);
  ASSERT_TRUE(d.agent->find_peer("other", 0));
  other.channel().send(LeaseAnswer{1, LeaseState::Open}, deadline_in(3s));
  bool dropped = false;
  while (!dropped && Clock::now() < until + 2000ms) {
    for (const auto& n : d.agent->poll_notifications()) {
      if (n.kind == NotificationKind::PeerLost && n.engine_id == "other") {
        dropped = true;
        EXPECT_EQ(n.status, Status::Protocol);
      }
    }
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_TRUE(dropped) << "a peer completed another peer's lease query";
  EXPECT_FALSE(t.wait(200ms)) << "the READ finished without its own P rank's answer";

  // A malformed query from P (an empty id) drops P; the READ fails with it.
  WireWriter w;
  w.u64(5);
  w.string("", SIZE_MAX, "request_id");
  p.channel().send(FrameType::LeaseQuery, w.data(), deadline_in(3s));
  ASSERT_TRUE(t.wait(3000ms));
  EXPECT_EQ(t.status().status, Status::PeerLost) << t.status().message;
  EXPECT_NE(t.status().message.find("request_id is empty"), std::string::npos) << t.status().message;
}

// A P rank of an older pdkv (its Hello says 3.4) is not asked about its lease (it cannot decode
// a LeaseQuery): D's READ completes when its data lands, as before 2.7, even of a lease that
// ended (what the query would catch), and the in-flight keep-alives, which 3.4 takes, still go.
TEST(AgentLeaseKeep, AnOlderPRankIsNotAskedAndItsReadCompletesAsBefore) {
  TinyRank d("dec", 16, ProgressMode::Thread, false, 10000ms);
  TinyRank p("pre", 16, ProgressMode::Thread, true, 10000ms, 4);
  d.agent->connect(p.agent->info().listen, 3000ms);
  ASSERT_EQ(d.agent->find_peer("pre", 0)->lease_keeps_sent.load(), 0u);
  const auto plan = pdkv::exec::testing::whole_plan(d, p, 16);
  p.agent->lease("late", 1, 30ms);
  ASSERT_TRUE(expires_within(*p.agent, "late", 3000ms));
  auto t = d.agent->post(pdkv::exec::testing::read_of(plan, "late", 5000ms));
  ASSERT_TRUE(t.wait(5000ms));
  EXPECT_EQ(t.status().status, Status::Ok) << t.status().message;
  EXPECT_TRUE(pdkv::exec::testing::read_right(d, p));
  EXPECT_GE(d.agent->find_peer("pre", 0)->lease_keeps_sent.load(), 1u) << "no keep-alive went to a 3.4 rank";
}

// The WRITE side (push): P writes into D's blocks, which D leases until P's WRITE_DONE. A WRITE
// posted after D's lease ended must write nothing: D gave the blocks back and may have handed
// them to another request, whose bytes the WRITE would overwrite. P asks D first and holds the
// data until D answers: an ended lease fails the WRITE (TIMED_OUT / INCOMPATIBLE naming D's rank
// and the request, every read listed) with D's memory untouched; an open one is written and kept
// open while the data moves. Before, the late WRITE overwrote D's blocks.
TEST(AgentLeaseKeep, AWriteIntoBlocksWhoseLeaseEndedWritesNothing) {
  TinyRank d("dec", 16, ProgressMode::Thread, false, 10000ms);
  TinyRank p("pre", 16, ProgressMode::Thread, true, 10000ms);
  d.agent->connect(p.agent->info().listen, 3000ms);
  const auto plan = pdkv::exec::testing::whole_plan(d, p, 16);
  // D's memory refilled before each WRITE, then D's agent mutex taken (find_peer) so that
  // ThreadSanitizer sees the fill ordered before D's threads receive the WRITE's bytes: they come
  // through a socket from P, an ordering it cannot see (it reported the fill racing D's readv).
  const auto refill = [&] {
    std::fill(d.mem.begin(), d.mem.end(), 0xEE);
    (void)d.agent->find_peer("pre", 0);
  };
  auto write = [&](const std::string& id) {
    refill();
    PostParams pp = pdkv::exec::testing::read_of(plan, id, 5000ms);
    pp.op = TransferOp::Write;
    pp.peer_engine_id = "dec";
    auto t = p.agent->post(pp);
    EXPECT_TRUE(t.wait(5000ms));
    return t.status();
  };
  const auto untouched = [&] { return std::all_of(d.mem.begin(), d.mem.end(), [](uint8_t b) { return b == 0xEE; }); };

  d.agent->lease("late", 1, 30ms);
  ASSERT_TRUE(expires_within(*d.agent, "late", 3000ms));
  auto s = write("late");
  EXPECT_EQ(s.status, Status::TimedOut) << s.message;
  EXPECT_NE(s.message.find("D rank 0 of engine 'dec' says its lease of request 'late' expired before this WRITE asked"),
            std::string::npos)
      << s.message;
  EXPECT_NE(s.message.find("nothing was written"), std::string::npos) << s.message;
  EXPECT_TRUE(untouched()) << "a WRITE into blocks whose lease ended wrote into them";
  EXPECT_EQ(s.failed.size(), plan.ranks[0].reads.size());

  d.agent->lease("once", 1, 10000ms);
  s = write("once");
  EXPECT_EQ(s.status, Status::Ok) << s.message;
  bool complete = false;
  const auto until = Clock::now() + 3000ms;
  while (!complete && Clock::now() < until) {
    for (const auto& n : d.agent->poll_notifications()) complete |= n.kind == NotificationKind::RequestComplete;
    std::this_thread::sleep_for(5ms);
  }
  // D's memory once D told of the WRITE (pdkv::exec::testing::wait_write_done says why).
  EXPECT_TRUE(pdkv::exec::testing::read_right(d, p));
  ASSERT_TRUE(complete);
  s = write("once");
  EXPECT_EQ(s.status, Status::Incompatible) << s.message;
  EXPECT_TRUE(untouched()) << "a second WRITE of a completed request wrote into D's blocks";

  // Not leased on D: written as before; so is an ended lease with the confirmation skipped.
  s = write("never-leased");
  EXPECT_EQ(s.status, Status::Ok) << s.message;
  ASSERT_TRUE(pdkv::exec::testing::wait_write_done(*d.agent, "never-leased", 1));
  EXPECT_TRUE(pdkv::exec::testing::read_right(d, p));
  refill();
  PostParams pp = pdkv::exec::testing::read_of(plan, "late", 5000ms);
  pp.op = TransferOp::Write;
  pp.peer_engine_id = "dec";
  pp.confirm_lease = false;
  auto t = p.agent->post(pp);
  ASSERT_TRUE(t.wait(5000ms));
  EXPECT_EQ(t.status().status, Status::Ok) << t.status().message;
  ASSERT_TRUE(pdkv::exec::testing::wait_write_done(*d.agent, "late", 1));
  EXPECT_TRUE(pdkv::exec::testing::read_right(d, p));
}

// A WRITE that D does not take in (caller progress, nobody calling) for three ttl's keeps D's
// lease of its request open meanwhile, as a READ keeps P's.
TEST(AgentLeaseKeep, AWriteInFlightKeepsTheReadersLeaseOpen) {
  TinyRank d("dec", 16, ProgressMode::Caller, false, 10000ms);
  TinyRank p("pre", 16, ProgressMode::Thread, true, 10000ms);
  d.agent->connect(p.agent->info().listen, 3000ms);
  const auto plan = pdkv::exec::testing::whole_plan(d, p, 16);
  constexpr auto kTtl = 300ms;
  d.agent->lease("w", 1, kTtl);
  d.agent->lease("idle", 1, kTtl);
  PostParams pp = pdkv::exec::testing::read_of(plan, "w", 20000ms);
  pp.op = TransferOp::Write;
  pp.peer_engine_id = "dec";
  auto t = p.agent->post(pp);
  std::vector<std::string> seen;
  const auto start = Clock::now();
  while (Clock::now() - start < 3 * kTtl + 100ms) {
    std::this_thread::sleep_for(20ms);
    for (auto& id : expired(d.agent->poll_notifications())) seen.push_back(id);
  }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), "w"), 0) << "D's lease expired under a WRITE in flight";
  EXPECT_EQ(std::count(seen.begin(), seen.end(), "idle"), 1);
  std::atomic<bool> run{true};
  std::thread driver([&] {
    while (run) {
      d.agent->progress();
      std::this_thread::sleep_for(1ms);
    }
  });
  ASSERT_TRUE(t.wait(5000ms));
  EXPECT_EQ(t.status().status, Status::Ok) << t.status().message;
  run = false;
  driver.join();
  EXPECT_TRUE(pdkv::exec::testing::read_right(d, p));
}
