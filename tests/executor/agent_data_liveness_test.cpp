// Liveness of the tcp data connection (agent_tcp.cpp, tcp_stalled_locked): a peer whose data
// connection has work pending and moves no byte for the heartbeat timeout is lost (PEER_LOST
// naming it and the stall), although its control channel still answers heartbeats; its window
// share and the regions it kept BUSY are released and a fresh connection is served. A slow peer
// that keeps moving bytes, even more slowly than a send here finds room, is never lost.
//
// A real peer is frozen by giving it caller progress and never calling: its control thread still
// answers heartbeats, its data connection neither reads nor answers. A fake peer
// (agent_fake_peer.hpp) keeps its control channel alive with Pings and reads its data connection
// as slowly as the test likes, or not at all.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "agent_fake_peer.hpp"
#include "agent_tiny_rank.hpp"
#include "tcpdp/data_frame.hpp"

using namespace pdkv;
using namespace pdkv::exec;
using namespace pdkv::exec::testing;
using core::Status;
using namespace std::chrono_literals;

namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr auto kTimeout = 500ms;  // every agent's heartbeat timeout here

// One rank: agent_tiny_rank.hpp's, lost after kTimeout of silence.
struct Rank : TinyRank {
  Rank(const std::string& engine, uint64_t blocks, ProgressMode progress, bool pattern)
      : TinyRank(engine, blocks, progress, pattern, kTimeout) {}
};

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// True once deregistering `reg` succeeds (tried every few ms until `within`).
bool deregisters_within(Agent& a, const std::shared_ptr<Registration>& reg, std::chrono::milliseconds within) {
  const auto until = SteadyClock::now() + within;
  for (;;) {
    try {
      deregister_memory(a.core(), reg);
      return true;
    } catch (const core::Error& e) {
      if (e.status() != Status::Busy) throw;
    }
    if (SteadyClock::now() >= until) return false;
    std::this_thread::sleep_for(5ms);
  }
}

// A P agent (heartbeat timeout `timeout`) whose region 0 of `blocks` 8 KiB blocks is registered
// over memory holding a pattern.
struct BigServer {
  std::vector<uint8_t> mem;
  std::unique_ptr<Agent> agent;
  std::shared_ptr<Registration> reg;
  uint64_t length = 0;
  BigServer(uint64_t blocks, std::chrono::milliseconds timeout) {
    const auto probe = tiny_metadata("pre", 0, 1ull << 40, blocks);
    const auto& r0probe = probe.regions[0].region;
    mem.resize(r0probe.block_len * r0probe.num_blocks * probe.regions.size());
    for (size_t i = 0; i < mem.size(); ++i) mem[i] = static_cast<uint8_t>((i * 131 + 7) % 251);
    AgentOptions o;
    o.metadata = tiny_metadata("pre", 0, reinterpret_cast<uint64_t>(mem.data()), blocks);
    o.transport = TransportMode::Tcp;
    o.default_timeout = 5000ms;
    o.heartbeat_interval = 50ms;
    o.heartbeat_timeout = timeout;
    const auto& r0 = o.metadata.regions[0].region;
    length = r0.block_len * r0.num_blocks;
    agent = std::make_unique<Agent>(o);
    reg = agent->register_memory(0, r0.base, length, MemoryType::Host);
  }
};

// Keeps a fake peer's control channel alive (a Ping every 20 ms) while it lives, whatever the test
// does with the data connection.
class Pinger {
 public:
  explicit Pinger(FakePeer& peer)
      : thread_([this, &peer] {
          uint64_t seq = 0;
          while (run_) {
            Ping pg;
            pg.seq = ++seq;
            try {
              peer.channel().send(pg, deadline_in(1s));
            } catch (const core::Error&) {
              return;  // the agent dropped the peer
            }
            std::this_thread::sleep_for(20ms);
          }
        }) {}
  ~Pinger() {
    run_ = false;
    thread_.join();
  }

 private:
  std::atomic<bool> run_{true};
  std::thread thread_;
};

// Asks the agent on `data` for region 0's bytes [0, frames * bytes) in `frames` ReadRequests.
void ask(Socket& data, uint64_t frames, uint64_t bytes) {
  for (uint64_t b = 0; b < frames; ++b) {
    tcpdp::Header h;
    h.type = tcpdp::FrameType::ReadRequest;
    h.batch = b + 1;
    const std::vector<tcpdp::Piece> pieces{tcpdp::Piece{0, b * bytes, bytes}};
    data.send_all(tcpdp::encode(h, pieces), deadline_in(3s));
  }
}

}  // namespace

// P stops answering READ batches (its data connection is frozen; its control thread answers every
// heartbeat): D's transfer, whose own deadline is far, fails PEER_LOST about a heartbeat timeout
// after its batches went out, naming P and the stall; D then reconnects and a fresh connection
// serves the same READ, every byte right. Before, the transfer waited for its deadline and the
// peer stayed "connected" with its window share taken.
TEST(AgentDataLiveness, APeerThatStopsAnsweringReadsIsLostAndAFreshConnectionServes) {
  Rank d("dec", 64, ProgressMode::Thread, false);
  Rank p("pre", 64, ProgressMode::Caller, true);
  d.agent->connect(p.agent->info().listen, 3000ms);
  const auto plan = whole_plan(d, p, 64);
  const auto t0 = SteadyClock::now();
  auto t = d.agent->post(read_of(plan, "frozen", 20000ms));
  ASSERT_TRUE(t.wait(kTimeout + 2000ms)) << "the transfer still waits for a peer whose data connection is frozen";
  const auto elapsed = SteadyClock::now() - t0;
  const auto s = t.status();
  EXPECT_EQ(s.status, Status::PeerLost) << s.message;
  EXPECT_TRUE(contains(s.message, "'pre'")) << s.message;
  EXPECT_TRUE(contains(s.message, "data connection made no progress for")) << s.message;
  EXPECT_GE(elapsed, kTimeout);
  EXPECT_LT(elapsed, kTimeout + 1000ms);
  // P hears why (the Error D sent) and forgets D too; a fresh connection serves the READ.
  const auto until = SteadyClock::now() + 3000ms;
  while (p.agent->info().num_peers != 0 && SteadyClock::now() < until) std::this_thread::sleep_for(5ms);
  ASSERT_EQ(p.agent->info().num_peers, 0u);
  d.agent->connect(p.agent->info().listen, 3000ms);
  std::atomic<bool> run{true};
  std::thread driver([&] {
    while (run) {
      p.agent->progress();
      std::this_thread::sleep_for(1ms);
    }
  });
  auto t2 = d.agent->post(read_of(plan, "fresh", 5000ms));
  const bool final_now = t2.wait(5000ms);
  run = false;
  driver.join();
  ASSERT_TRUE(final_now);
  ASSERT_EQ(t2.status().status, Status::Ok) << t2.status().message;
  EXPECT_TRUE(read_right(d, p));
}

// D stops reading its data connection while P serves its READ: a fake D asks P for 16 MiB and
// never reads (its control channel stays alive, a Ping every 20 ms). P's queued answers keep P's
// region BUSY until P loses D, about a heartbeat timeout later, telling it why; then it
// deregisters. Before, it stayed BUSY for as long as D liked.
TEST(AgentDataLiveness, APeerThatStopsReadingReleasesTheServedRegions) {
  BigServer p(2048, kTimeout);  // 16 MiB in region 0
  FakePeer d(TransportMode::Tcp);
  d.admit(p.agent->info().listen);
  Pinger pinger(d);
  ask(*d.data(), 4, 4u << 20);
  std::this_thread::sleep_for(100ms);
  const auto t0 = SteadyClock::now();
  try {
    deregister_memory(p.agent->core(), p.reg);
    FAIL() << "P's region was not busy: the test proves nothing";
  } catch (const core::Error& e) {
    ASSERT_EQ(e.status(), Status::Busy) << e.what();
  }
  EXPECT_TRUE(deregisters_within(*p.agent, p.reg, kTimeout + 2000ms))
      << "P's served region stays BUSY while D does not read";
  EXPECT_LT(SteadyClock::now() - t0, kTimeout + 1000ms);
  EXPECT_EQ(p.agent->info().num_peers, 0u);
  bool lost = false;
  for (const auto& n : p.agent->poll_notifications()) lost |= n.kind == NotificationKind::PeerLost;
  EXPECT_TRUE(lost);
}

// The same for a WRITE: P writes to D, whose caller stops calling after one progress call: P's
// transfer fails PEER_LOST about a heartbeat timeout later (naming the stall) instead of at its
// deadline, and P's memory it was sending from deregisters.
TEST(AgentDataLiveness, AWriteToAPeerThatStopsReadingFailsAndReleasesItsMemory) {
  Rank d("dec", 2048, ProgressMode::Caller, false);
  Rank p("pre", 2048, ProgressMode::Thread, true);
  d.agent->connect(p.agent->info().listen, 3000ms);
  const auto plan = whole_plan(d, p, 2048);
  PostParams pp = read_of(plan, "unread-write", 20000ms);
  pp.op = TransferOp::Write;
  pp.peer_engine_id = "dec";
  const auto t0 = SteadyClock::now();
  auto t = p.agent->post(pp);
  ASSERT_TRUE(t.wait(kTimeout + 2000ms)) << "the WRITE still waits for a peer that does not read";
  EXPECT_LT(SteadyClock::now() - t0, kTimeout + 1000ms);
  EXPECT_EQ(t.status().status, Status::PeerLost) << t.status().message;
  EXPECT_TRUE(contains(t.status().message, "data connection made no progress for")) << t.status().message;
  EXPECT_TRUE(deregisters_within(*p.agent, p.regs[0], 1000ms));
}

// A peer that stops in the middle of a frame it sends: a fake P writes half of a 1 MiB Write into
// this agent's region 0 and sends nothing more (its control channel stays alive). The region,
// busy while the Write is received, deregisters once the agent lost the peer, about a heartbeat
// timeout later. Before, it stayed BUSY until the peer went away.
TEST(AgentDataLiveness, APeerThatStopsMidFrameReleasesTheRegionItWasWriting) {
  BigServer d(256, kTimeout);  // the agent written to: 2 MiB in region 0
  FakePeer p(TransportMode::Tcp);
  p.admit(d.agent->info().listen);
  Pinger pinger(p);
  constexpr uint64_t kBytes = 1u << 20;
  tcpdp::Header h;
  h.type = tcpdp::FrameType::Write;
  h.batch = 1;
  const std::vector<tcpdp::Piece> pieces{tcpdp::Piece{0, 0, kBytes}};
  p.data()->send_all(tcpdp::encode(h, pieces), deadline_in(3s));
  const std::vector<uint8_t> half(kBytes / 2, 0x5A);
  p.data()->send_all(half, deadline_in(3s));
  std::this_thread::sleep_for(100ms);
  const auto t0 = SteadyClock::now();
  try {
    deregister_memory(d.agent->core(), d.reg);
    FAIL() << "the region being written was not busy: the test proves nothing";
  } catch (const core::Error& e) {
    ASSERT_EQ(e.status(), Status::Busy) << e.what();
  }
  EXPECT_TRUE(deregisters_within(*d.agent, d.reg, kTimeout + 2000ms))
      << "the region stays BUSY while the peer sends nothing more of its Write";
  EXPECT_LT(SteadyClock::now() - t0, kTimeout + 1000ms);
  EXPECT_EQ(d.agent->info().num_peers, 0u);
}

// A slow peer that keeps moving bytes is not lost: a fake D asks P (heartbeat timeout 300 ms) for
// 8 MiB and reads the answer in 128 KiB slices 50 ms apart (over 3 s in all), so P's data
// connection stays backed up for seconds, each of P's sends waiting for room (on loopback here
// 100-200 ms at a time; the kernel's count of the bytes D acknowledged moves meanwhile). Its control
// channel stays alive (a Ping every 20 ms from a thread). Every byte arrives right and P keeps D.
TEST(AgentDataLiveness, ASlowReaderThatKeepsMovingIsNotLost) {
  BigServer p(1024, 300ms);  // 8 MiB in region 0
  FakePeer d(TransportMode::Tcp);
  d.admit(p.agent->info().listen);
  Pinger pinger(d);
  Socket& data = *d.data();
  constexpr uint64_t kAsk = 2u << 20;
  constexpr uint64_t kFrames = 4;
  ASSERT_GE(p.length, kFrames * kAsk);
  ask(data, kFrames, kAsk);
  const auto t0 = SteadyClock::now();
  std::vector<uint8_t> got;
  for (uint64_t frame = 0; frame < kFrames; ++frame) {
    tcpdp::FrameReader r;
    while (!r.ready()) r.received(data.recv_some(r.want(), deadline_in(3s)));
    ASSERT_EQ(r.header().type, tcpdp::FrameType::ReadData);
    ASSERT_EQ(r.header().status, 0u);
    uint64_t left = r.payload_left();
    ASSERT_EQ(left, kAsk);
    while (left > 0) {
      std::vector<uint8_t> slice(std::min<uint64_t>(left, 128u << 10));
      size_t have = 0;
      while (have < slice.size()) {
        have += data.recv_some(std::span<uint8_t>(slice).subspan(have), deadline_in(3s));
      }
      got.insert(got.end(), slice.begin(), slice.end());
      left -= slice.size();
      std::this_thread::sleep_for(50ms);
    }
  }
  const auto elapsed = SteadyClock::now() - t0;
  EXPECT_GT(elapsed, 3000ms) << "the reader was not slow: the test proves nothing";
  ASSERT_EQ(got.size(), kFrames * kAsk);
  EXPECT_EQ(std::memcmp(got.data(), p.mem.data(), got.size()), 0);
  EXPECT_EQ(p.agent->info().num_peers, 1u) << "P lost a peer that kept reading";
  for (const auto& n : p.agent->poll_notifications()) EXPECT_NE(n.kind, NotificationKind::PeerLost);
}

// The same with real agents: D's caller makes one progress call every 150 ms (less than the
// timeout; each call moves at most 16 MiB, so 48 MiB take several), the whole READ taking longer
// than the timeout: it completes, every byte right, and neither side loses the other.
TEST(AgentDataLiveness, ACallerThatProgressesSlowlyIsNotLost) {
  Rank d("dec", 2048, ProgressMode::Caller, false);
  Rank p("pre", 2048, ProgressMode::Thread, true);
  d.agent->connect(p.agent->info().listen, 3000ms);
  const auto plan = whole_plan(d, p, 2048);
  const auto t0 = SteadyClock::now();
  auto t = d.agent->post(read_of(plan, "slow", 20000ms));
  while (t.status().state == TransferState::InFlight && SteadyClock::now() - t0 < 15s) {
    d.agent->progress();
    std::this_thread::sleep_for(150ms);
  }
  const auto elapsed = SteadyClock::now() - t0;
  ASSERT_EQ(t.status().status, Status::Ok) << t.status().message;
  EXPECT_GT(elapsed, kTimeout) << "the READ was not slow: the test proves nothing";
  EXPECT_TRUE(read_right(d, p));
  EXPECT_EQ(p.agent->info().num_peers, 1u);
  EXPECT_EQ(d.agent->info().num_peers, 1u);
}
