// The agent's cross-memory-attach data path (shm peers), in one process: a P and a D agent whose
// plans are built by hand so the pieces can be large. Batching (a piece above the batch budget
// spans several batches; one progress call copies at most one batch per lane), a cancel between
// batches (final, nothing BUSY, no byte after it), a peer range that unmaps (EFAULT: TRANSPORT
// naming the read, not PEER_LOST while the peer lives), and the probe: a peer whose pid is not
// the process it claims is refused by transport shm with the reason and served over tcp by auto.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "agent/agent.hpp"
#include "agent/agent_core.hpp"
#include "agent_fake_peer.hpp"
#include "pdkv/core/geometry.hpp"
#include "pdkv/core/metadata_from_geometry.hpp"
#include "pdkv/core/transfer_plan.hpp"

using namespace pdkv;
using namespace pdkv::exec;
using namespace pdkv::exec::testing;
using core::Status;
using namespace std::chrono_literals;

namespace {

constexpr uint64_t kBlocks = 2048;  // 8 KiB blocks: 16 MiB per region

// One rank whose single region lives in an mmap'ed area (so a test can unmap part of it).
struct Side {
  std::string engine;
  core::EngineMetadata md;
  uint8_t* mem = nullptr;
  uint64_t bytes = 0;
  std::unique_ptr<Agent> agent;
  std::shared_ptr<Registration> reg;

  Side(const std::string& e, uint8_t salt, TransportMode mode, ProgressMode progress, uint32_t copy_threads = 1)
      : engine(e) {
    const auto probe = tiny_metadata(e, 0, 1ull << 40, kBlocks, 1);
    bytes = probe.regions[0].region.block_len * probe.regions[0].region.num_blocks;
    mem = static_cast<uint8_t*>(::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (mem == MAP_FAILED) std::abort();
    for (uint64_t i = 0; i < bytes; ++i) mem[i] = static_cast<uint8_t>((i * 131 + salt) % 251);
    md = tiny_metadata(e, 0, reinterpret_cast<uint64_t>(mem), kBlocks, 1);
    AgentOptions o;
    o.metadata = md;
    o.transport = mode;
    o.progress = progress;
    o.default_timeout = 5000ms;
    o.heartbeat_interval = 100ms;
    o.heartbeat_timeout = 3000ms;
    o.cma_copy_threads = copy_threads;
    o.max_outstanding = 4096;  // batches end at their own caps (4 MiB, kCmaBatchSegments), not the window
    agent = std::make_unique<Agent>(o);
    const auto& r = md.regions[0].region;
    reg = agent->register_memory(0, r.base, r.block_len * r.num_blocks, MemoryType::Host);
  }
  ~Side() {
    agent.reset();
    ::munmap(mem, bytes);
  }
  uint8_t expected(uint64_t i, uint8_t salt) const { return static_cast<uint8_t>((i * 131 + salt) % 251); }
};

// A READ plan of D from P with the given (local offset, remote offset, length) pieces.
core::TransferPlan plan_of(const Side& d, const Side& p, const std::vector<std::array<uint64_t, 3>>& pieces) {
  core::TransferPlan plan;
  plan.d_engine_id = d.engine;
  plan.p_engine_id = p.engine;
  core::RankReads rr;
  rr.p_rank = 0;
  for (const auto& x : pieces) rr.reads.push_back({0, x[0], 0, x[1], x[2]});
  plan.ranks.push_back(rr);
  plan.notify_ranks = {0};
  return plan;
}

constexpr uint8_t kP = 3, kD = 77;

class AgentCma : public ::testing::Test {
 protected:
  void SetUp() override {
    p = std::make_unique<Side>("pre", kP, TransportMode::Shm, ProgressMode::Thread);
    d = std::make_unique<Side>("dec", kD, TransportMode::Shm, ProgressMode::Caller);
    auto rec = d->agent->connect(p->agent->info().listen, 3000ms);
    ASSERT_EQ(rec->transport, TransportMode::Shm);
  }
  TransferHandle post(const core::TransferPlan& plan, const std::string& id, std::chrono::milliseconds t = 5000ms) {
    PostParams pp;
    pp.plan = &plan;
    pp.peer_engine_id = "pre";
    pp.request_id = id;
    pp.timeout = t;
    return d->agent->post(pp);
  }
  std::unique_ptr<Side> p, d;
};

// 12 MiB in one piece (three batches of 4 MiB) beside 600 pieces of 512 bytes (two batches of at
// most 512 pieces): each progress call copies one batch of each transfer, then every byte checks.
TEST_F(AgentCma, LargePiecesSpanBatchesAndTransfersShareEachProgressCall) {
  const uint64_t big = 12u << 20;
  const auto plan_big = plan_of(*d, *p, {{0, 1u << 20, big}});
  std::vector<std::array<uint64_t, 3>> small;
  for (uint64_t k = 0; k < 600; ++k) small.push_back({(14u << 20) + k * 512, k * 1024, 512});
  const auto plan_small = plan_of(*d, *p, small);
  auto a = post(plan_big, "big");
  auto b = post(plan_small, "small");
  EXPECT_EQ(a.status().bytes_done, 0u) << "nothing moves before progress is driven";
  // P's answers to the READs' lease queries (pdkv 2.7) arrive on the control thread meanwhile, so
  // that a READ is done when its last batch lands, not when the answer comes after it.
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(a.status().bytes_done, 0u) << "nothing moves before progress is driven";
  // The big piece lands batch by batch: exactly the first 4 MiB after one call, 8 after two.
  auto landed = [&](uint64_t upto) {
    return d->mem[upto - 1] == p->expected((1u << 20) + upto - 1, kP) &&
           d->mem[upto] == d->expected(upto, kD) && d->mem[big - 1] == d->expected(big - 1, kD);
  };
  d->agent->progress();
  EXPECT_TRUE(landed(kCmaBatchBytes));
  EXPECT_EQ(a.status().ops_done, 0u);
  EXPECT_EQ(b.status().ops_done, kCmaBatchSegments);
  d->agent->progress();
  EXPECT_TRUE(landed(2 * kCmaBatchBytes));
  EXPECT_EQ(b.status().state, TransferState::Done);
  ASSERT_TRUE(a.wait(5000ms));
  ASSERT_EQ(a.status().status, Status::Ok) << a.status().message;
  EXPECT_EQ(a.status().ops_done, 1u);
  size_t bad = 0;
  for (uint64_t i = 0; i < big; ++i) bad += d->mem[i] != p->expected((1u << 20) + i, kP);
  for (uint64_t k = 0; k < 600; ++k)
    for (uint64_t j = 0; j < 512; ++j) bad += d->mem[(14u << 20) + k * 512 + j] != p->expected(k * 1024 + j, kP);
  for (uint64_t i = big; i < (14u << 20); ++i) bad += d->mem[i] != d->expected(i, kD);  // untouched
  EXPECT_EQ(bad, 0u);
  auto peer = d->agent->find_peer("pre", 0);
  EXPECT_EQ(peer->bytes_read.load(), big + 600 * 512);
}

// Two copy threads per batch (what a machine with 4+ hardware threads gets): the same bytes, in
// thread mode, for a READ of large and small pieces at once.
TEST(AgentCmaThreads, TwoCopyThreadsMoveEveryByte) {
  Side p("pre", kP, TransportMode::Shm, ProgressMode::Thread);
  Side d("dec", kD, TransportMode::Shm, ProgressMode::Thread, 2);
  d.agent->connect(p.agent->info().listen, 3000ms);
  std::vector<std::array<uint64_t, 3>> pieces{{0, 1u << 20, 9u << 20}};
  for (uint64_t k = 0; k < 700; ++k) pieces.push_back({(10u << 20) + k * 4096, k * 8192, 3000});
  const auto plan = plan_of(d, p, pieces);
  PostParams pp;
  pp.plan = &plan;
  pp.peer_engine_id = "pre";
  pp.request_id = "two-threads";
  auto t = d.agent->post(pp);
  ASSERT_TRUE(t.wait(5000ms));
  ASSERT_EQ(t.status().status, Status::Ok) << t.status().message;
  size_t bad = 0;
  for (uint64_t i = 0; i < (9u << 20); ++i) bad += d.mem[i] != p.expected((1u << 20) + i, kP);
  for (uint64_t k = 0; k < 700; ++k) {
    for (uint64_t j = 0; j < 4096; ++j) {
      const uint8_t want = j < 3000 ? p.expected(k * 8192 + j, kP) : d.expected((10u << 20) + k * 4096 + j, kD);
      bad += d.mem[(10u << 20) + k * 4096 + j] != want;
    }
  }
  EXPECT_EQ(bad, 0u);
}

// With two copy threads a batch is cma_batch_bytes(2) = 16 MiB (each thread 8 MiB, so the
// helper's wake-up is paid once per 8 MiB): a 12 MiB piece lands in ONE progress call, where one
// copy thread lands only its first kCmaBatchBytes (the fixture's test above).
TEST(AgentCmaThreads, TwoCopyThreadsCopyLargerBatches) {
  static_assert(cma_batch_bytes(1) == kCmaBatchBytes && cma_batch_bytes(2) == (16u << 20));
  Side p("pre", kP, TransportMode::Shm, ProgressMode::Thread);
  Side d("dec", kD, TransportMode::Shm, ProgressMode::Caller, 2);
  d.agent->connect(p.agent->info().listen, 3000ms);
  const uint64_t big = 12u << 20;
  const auto plan = plan_of(d, p, {{0, 1u << 20, big}});
  PostParams pp;
  pp.plan = &plan;
  pp.peer_engine_id = "pre";
  pp.request_id = "one-batch";
  auto t = d.agent->post(pp);
  std::this_thread::sleep_for(200ms);  // P's lease answer (pdkv 2.7) arrives before the copy
  d.agent->progress();
  const auto s = t.status();
  EXPECT_EQ(s.state, TransferState::Done) << "12 MiB is one batch with two copy threads";
  EXPECT_EQ(s.status, Status::Ok) << s.message;
  size_t bad = 0;
  for (uint64_t i = 0; i < big; ++i) bad += d.mem[i] != p.expected((1u << 20) + i, kP);
  for (uint64_t i = big; i < d.bytes; ++i) bad += d.mem[i] != d.expected(i, kD);
  EXPECT_EQ(bad, 0u);
}

// A cancel between batches is final at once: the first batch landed, nothing after it, the read
// is reported failed, and the region is free to deregister.
TEST_F(AgentCma, ACancelBetweenBatchesStopsTheCopyAndLeavesNothingBusy) {
  const uint64_t big = 12u << 20;
  const auto plan = plan_of(*d, *p, {{0, 0, big}});
  auto t = post(plan, "cancelled");
  d->agent->progress();
  EXPECT_EQ(d->mem[kCmaBatchBytes - 1], p->expected(kCmaBatchBytes - 1, kP));
  t.cancel();
  const auto s = t.status();
  EXPECT_EQ(s.state, TransferState::Failed);
  EXPECT_EQ(s.status, Status::Cancelled);
  ASSERT_EQ(s.failed.size(), 1u);
  EXPECT_EQ(s.failed[0].read_index, 0u);
  for (int i = 0; i < 3; ++i) d->agent->progress();
  size_t bad = 0;
  for (uint64_t i = 0; i < kCmaBatchBytes; ++i) bad += d->mem[i] != p->expected(i, kP);
  for (uint64_t i = kCmaBatchBytes; i < big; ++i) bad += d->mem[i] != d->expected(i, kD);
  EXPECT_EQ(bad, 0u);
  EXPECT_NO_THROW(deregister_memory(d->agent->core(), d->reg));
}

// P's region loses its second half while P lives: the READ stops with EFAULT after the bytes
// before the hole and fails with TRANSPORT (the peer is alive: its probe still reads back),
// naming the read, the peer and the cause; the peer stays connected.
TEST_F(AgentCma, APeerRangeThatUnmapsFailsTheReadWithTransportAndNamesIt) {
  const uint64_t half = p->bytes / 2;
  const auto plan = plan_of(*d, *p, {{0, 0, 4096}, {4096, half - 4096, 8192}, {16384, half + 8192, 4096}});
  ASSERT_EQ(::munmap(p->mem + half, p->bytes - half), 0);
  auto t = post(plan, "hole");
  // P confirms its lease of the request (pdkv 2.7) before the wait drives the copies: read 0 then
  // counts as landed (a READ failing before the answer lists every read of that P rank).
  std::this_thread::sleep_for(200ms);
  ASSERT_TRUE(t.wait(5000ms));
  const auto s = t.status();
  EXPECT_EQ(s.status, Status::Transport) << s.message;
  EXPECT_NE(s.message.find("EFAULT"), std::string::npos) << s.message;
  EXPECT_NE(s.message.find("read 1"), std::string::npos) << s.message;
  EXPECT_NE(s.message.find("'pre'"), std::string::npos) << s.message;
  EXPECT_NE(s.message.find("after 4096 bytes"), std::string::npos) << s.message;
  ASSERT_EQ(s.failed.size(), 2u);  // read 1 (cut by the hole) and read 2 (not copied)
  EXPECT_EQ(s.failed[0].read_index, 1u);
  EXPECT_EQ(s.failed[1].read_index, 2u);
  for (uint64_t i = 0; i < 4096; ++i) ASSERT_EQ(d->mem[i], p->expected(i, kP));
  EXPECT_TRUE(d->agent->find_peer("pre", 0)->connected.load());
  EXPECT_NO_THROW(deregister_memory(d->agent->core(), d->reg));
  // Give P its pages back before it deregisters them.
  ASSERT_NE(::mmap(p->mem + half, p->bytes - half, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0),
            MAP_FAILED);
}

// A P agent freed while its process (and memory) lives on: it revokes its probe first, so D's
// next batch finds it gone whether or not D heard its Bye yet; nothing is copied, never Ok.
TEST_F(AgentCma, APeerAgentFreedWhileItsProcessLivesIsLostNotReadFrom) {
  const auto plan = plan_of(*d, *p, {{0, 0, 1u << 20}});
  for (int i = 0; i < 3; ++i) d->agent->progress();
  auto t = post(plan, "after-free");
  p->agent.reset();
  ASSERT_TRUE(t.wait(5000ms));
  const auto s = t.status();
  EXPECT_EQ(s.status, Status::PeerLost) << s.message;
  size_t bad = 0;
  for (uint64_t i = 0; i < (1u << 20); ++i) bad += d->mem[i] != d->expected(i, kD);
  EXPECT_EQ(bad, 0u) << "bytes were copied from a peer whose agent was gone";
}

// A peer that advertises a pid which is not its own (here: init's): transport shm refuses it,
// naming the peer and why; auto serves it over tcp.
TEST(AgentCmaProbe, APeerWhosePidIsNotItsOwnIsRefusedByShmAndServedOverTcpByAuto) {
  {
    auto agent = tiny_agent(TransportMode::Shm);
    FakePeer peer(TransportMode::Shm);
    peer.forge_pid(1);
    peer.handshake(agent->info().listen);
    try {
      peer.agree_transport();
      FAIL() << "the agent accepted a peer whose probe does not read back";
    } catch (const core::Error& e) {
      const std::string m = e.what();
      EXPECT_EQ(e.status(), Status::Transport) << m;
      EXPECT_NE(m.find("refused the connection"), std::string::npos) << m;
      EXPECT_NE(m.find("requires transport shm"), std::string::npos) << m;
      EXPECT_NE(m.find("pid 1"), std::string::npos) << m;
    }
    std::this_thread::sleep_for(50ms);
    EXPECT_EQ(agent->info().num_peers, 0u);
  }
  {
    auto agent = tiny_agent(TransportMode::Auto);
    FakePeer peer(TransportMode::Auto);
    peer.forge_pid(1);
    peer.admit(agent->info().listen);
    auto rec = agent->find_peer("dec", 0);
    EXPECT_EQ(rec->transport, TransportMode::Tcp);
  }
}

// A peer that presents another process's identity: the pid of a process whose memory it knows
// (here a child forked from this process, which holds a copy of a probe at the same address) and
// that probe. The probe reads back, yet that process is not the peer. Believed, it would make this
// agent's cross-memory-attach copies read and write that process's memory at whatever addresses
// the peer advertises as its regions: a WRITE would land this agent's bytes anywhere in it (and a
// remote peer could name the agent's own pid with bytes of its registered memory read over tcp,
// making it write into itself). The agent checks that the pid holds the other end of this very
// control connection: it does not, so shm refuses the peer naming why, and auto serves it over tcp.
TEST(AgentCmaProbe, APeerPresentingAnotherProcesssIdentityIsNotAttachedTo) {
  const cma::Probe borrowed;  // before fork: the child holds the same bytes at the same address
  int gate[2];
  ASSERT_EQ(::pipe2(gate, O_CLOEXEC), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(gate[1]);
    char c;
    while (::read(gate[0], &c, 1) > 0) {
    }  // until the parent closes its end (or dies)
    ::_exit(0);
  }
  ::close(gate[0]);
  struct Reap {
    pid_t pid;
    int fd;
    ~Reap() {
      ::close(fd);
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  } reap{child, gate[1]};
  // The child really holds the probe: the probe alone proves nothing about who the peer is.
  ASSERT_EQ(cma::check_probe(static_cast<uint32_t>(child), borrowed.address(), borrowed.value()), "");
  const std::string pid_text = "pid " + std::to_string(child);
  {
    auto agent = tiny_agent(TransportMode::Shm);
    FakePeer peer(TransportMode::Shm);
    peer.forge_pid(static_cast<uint32_t>(child));
    peer.forge_probe(borrowed.address(), borrowed.value());
    peer.handshake(agent->info().listen);
    try {
      peer.agree_transport();
      FAIL() << "the agent would attach to a process that is not the peer";
    } catch (const core::Error& e) {
      const std::string m = e.what();
      EXPECT_EQ(e.status(), Status::Transport) << m;
      EXPECT_NE(m.find(pid_text), std::string::npos) << m;
      EXPECT_NE(m.find("does not hold the other end of this control connection"), std::string::npos) << m;
    }
    std::this_thread::sleep_for(50ms);
    EXPECT_EQ(agent->info().num_peers, 0u);
  }
  {
    auto agent = tiny_agent(TransportMode::Auto);
    FakePeer peer(TransportMode::Auto);
    peer.forge_pid(static_cast<uint32_t>(child));
    peer.forge_probe(borrowed.address(), borrowed.value());
    peer.admit(agent->info().listen);
    EXPECT_EQ(peer.agent_offer().cma, CmaVerdict::Failed) << peer.agent_offer().reason;
    EXPECT_NE(peer.agent_offer().reason.find(pid_text + " does not hold the other end of this control connection"),
              std::string::npos)
        << peer.agent_offer().reason;
    EXPECT_NE(peer.agent_offer().reason.find("another process does"), std::string::npos) << peer.agent_offer().reason;
    EXPECT_EQ(agent->find_peer("dec", 0)->transport, TransportMode::Tcp);
  }
  // The same peer presenting its own identity (this process holds its end) is attached to.
  {
    auto agent = tiny_agent(TransportMode::Shm);
    FakePeer peer(TransportMode::Shm);
    peer.admit(agent->info().listen);
    EXPECT_EQ(peer.agent_offer().cma, CmaVerdict::Works) << peer.agent_offer().reason;
    EXPECT_EQ(agent->find_peer("dec", 0)->transport, TransportMode::Shm);
  }
}

// The connection-owner check reads the socket tables in both forms: a same-host peer over IPv6
// loopback (tcp6), and one over IPv4 reaching an agent listening on every IPv6 and IPv4 address
// ("::", whose socket sees the peer as ::ffff:127.0.0.1 while the peer's lists 127.0.0.1 in
// tcp), is attached to.
TEST(AgentCmaProbe, TheConnectionOwnerIsFoundOverIpv6AndDualStackSockets) {
  for (const auto& [listen, reach] : {std::pair<std::string, std::string>{"::1", "::1"}, {"::", "127.0.0.1"}}) {
    SCOPED_TRACE(listen + " reached at " + reach);
    AgentOptions o;
    o.metadata = tiny_metadata("pre", 0, 1ull << 40);
    o.listen = HostPort{listen, 0};
    o.transport = TransportMode::Shm;
    o.default_timeout = 5000ms;
    o.heartbeat_interval = 100ms;
    o.heartbeat_timeout = 10000ms;
    Agent agent(o);
    FakePeer peer(TransportMode::Shm);
    try {
      peer.admit(HostPort{reach, agent.info().listen.port});
    } catch (const core::Error& e) {
      ADD_FAILURE() << e.what();
      continue;
    }
    EXPECT_EQ(peer.agent_offer().cma, CmaVerdict::Works) << peer.agent_offer().reason;
    EXPECT_EQ(agent.find_peer("dec", 0)->transport, TransportMode::Shm);
  }
}

// Both sides' choice, as admission makes it on each.
TEST(AgentCmaProbe, TheTransportChoiceIsTheSameOnBothSides) {
  using M = TransportMode;
  const TransportOffer works{CmaVerdict::Works, ""};
  const TransportOffer failed{CmaVerdict::Failed, "EPERM here"};
  const TransportOffer none{};
  EXPECT_EQ(choose_transport(M::Auto, M::Auto, true, works, works).mode, M::Shm);
  EXPECT_EQ(choose_transport(M::Shm, M::Auto, true, works, works).mode, M::Shm);
  auto c = choose_transport(M::Auto, M::Auto, true, works, failed);
  EXPECT_EQ(c.mode, M::Tcp);
  EXPECT_TRUE(c.refusal.empty());
  c = choose_transport(M::Shm, M::Auto, true, works, failed);
  EXPECT_NE(c.refusal.find("the peer cannot attach to this side's memory: EPERM here"), std::string::npos) << c.refusal;
  c = choose_transport(M::Auto, M::Shm, true, failed, works);
  EXPECT_NE(c.refusal.find("the peer requires transport shm"), std::string::npos) << c.refusal;
  EXPECT_NE(c.refusal.find("this side cannot attach to the peer's memory: EPERM here"), std::string::npos) << c.refusal;
  c = choose_transport(M::Shm, M::Auto, false, none, none);
  EXPECT_NE(c.refusal.find("another host"), std::string::npos) << c.refusal;
  EXPECT_EQ(choose_transport(M::Auto, M::Auto, false, none, none).mode, M::Tcp);
  c = choose_transport(M::Shm, M::Tcp, true, none, none);
  EXPECT_NE(c.refusal.find("uses tcp"), std::string::npos) << c.refusal;
  EXPECT_EQ(choose_transport(M::Tcp, M::Auto, true, none, none).mode, M::Tcp);
}

}  // namespace
