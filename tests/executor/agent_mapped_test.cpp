// The mapped same-host data path: a shm peer whose registered region lies in a pdkv shared
// allocation (cma/shared_memory.hpp) is mapped at admission and its bytes are copied with memcpy.
// READ and WRITE land every byte through the mapping (the peer's bytes_mapped counts them), a
// region in ordinary memory falls back to cross-memory attach (and says so), ranges outside the
// registration are refused before anything moves, a peer agent that goes away mid-transfer and a
// peer process killed mid-transfer end with PEER_LOST and nothing crashes, a WRITE from this
// process lands in another process's shared region, the mappable regions go only to peers that
// say protocol 3.1, and the shared allocation registry finds ranges only inside live
// allocations.
#include <gtest/gtest.h>

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
#include "cma/shared_memory.hpp"
#include "control/messages.hpp"
#include "pdkv/core/transfer_plan.hpp"

using namespace pdkv;
using namespace pdkv::exec;
using namespace pdkv::exec::testing;
using core::Status;
using namespace std::chrono_literals;

namespace {

// Kills and reaps a forked child when the test ends, also when a failed assertion returns early.
struct ChildReaper {
  pid_t pid;
  ~ChildReaper() {
    if (pid > 0 && ::kill(pid, SIGKILL) == 0) ::waitpid(pid, nullptr, 0);
  }
};

HostPort loopback(uint16_t port) {
  HostPort at;
  at.host = "127.0.0.1";
  at.port = port;
  return at;
}

constexpr uint64_t kBlocks = 2048;  // 8 KiB blocks: 16 MiB per region

uint8_t pattern(uint64_t i, uint8_t salt) { return static_cast<uint8_t>((i * 131 + salt) % 251); }

// One rank whose single region lives in a pdkv shared allocation (`shared`) or in anonymous
// private memory.
struct Side {
  std::string engine;
  uint8_t salt;
  core::EngineMetadata md;
  std::unique_ptr<cma::SharedMemory> shm;
  uint8_t* mem = nullptr;
  uint64_t bytes = 0;
  std::unique_ptr<Agent> agent;
  std::shared_ptr<Registration> reg;

  Side(const std::string& e, uint8_t s, bool shared, ProgressMode progress, uint32_t copy_threads = 1)
      : engine(e), salt(s) {
    const auto probe = tiny_metadata(e, 0, 1ull << 40, kBlocks, 1);
    bytes = probe.regions[0].region.block_len * probe.regions[0].region.num_blocks;
    if (shared) {
      shm = cma::SharedMemory::allocate(bytes + 8192);
      mem = static_cast<uint8_t*>(shm->data()) + 4096;  // not at the file's start: offsets count
    } else {
      mem = static_cast<uint8_t*>(::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
      if (mem == MAP_FAILED) std::abort();
    }
    for (uint64_t i = 0; i < bytes; ++i) mem[i] = pattern(i, salt);
    md = tiny_metadata(e, 0, reinterpret_cast<uint64_t>(mem), kBlocks, 1);
    AgentOptions o;
    o.metadata = md;
    o.transport = TransportMode::Shm;
    o.progress = progress;
    o.default_timeout = 5000ms;
    o.heartbeat_interval = 100ms;
    o.heartbeat_timeout = 3000ms;
    o.cma_copy_threads = copy_threads;
    o.max_outstanding = 4096;
    agent = std::make_unique<Agent>(o);
    reg = agent->register_memory(0, md.regions[0].region.base, bytes, MemoryType::Host);
  }
  ~Side() {
    agent.reset();
    if (!shm) ::munmap(mem, bytes);
  }
};

core::TransferPlan plan_of(const std::string& d, const std::string& p,
                           const std::vector<std::array<uint64_t, 3>>& pieces) {
  core::TransferPlan plan;
  plan.d_engine_id = d;
  plan.p_engine_id = p;
  core::RankReads rr;
  rr.p_rank = 0;
  for (const auto& x : pieces) rr.reads.push_back({0, x[0], 0, x[1], x[2]});
  plan.ranks.push_back(rr);
  plan.notify_ranks = {0};
  return plan;
}

TransferHandle post(Side& from, const core::TransferPlan& plan, TransferOp op, const std::string& peer,
                    const std::string& id) {
  PostParams pp;
  pp.op = op;
  pp.plan = &plan;
  pp.peer_engine_id = peer;
  pp.request_id = id;
  pp.timeout = 5000ms;
  return from.agent->post(pp);
}

// 64 KiB pieces spread over the region, P offset != D offset.
std::vector<std::array<uint64_t, 3>> pieces(uint64_t n) {
  std::vector<std::array<uint64_t, 3>> v;
  for (uint64_t k = 0; k < n; ++k) v.push_back({k * (128u << 10), (n - 1 - k) * (128u << 10) + 4096, 64u << 10});
  return v;
}

core::TransferPlan plan_of(const Side& d, const Side& p, const std::vector<std::array<uint64_t, 3>>& pieces) {
  return plan_of(d.engine, p.engine, pieces);
}

size_t mismatches(const Side& dst, uint8_t src_salt, const std::vector<std::array<uint64_t, 3>>& ps) {
  size_t bad = 0;
  for (const auto& x : ps)
    for (uint64_t j = 0; j < x[2]; ++j) bad += dst.mem[x[0] + j] != pattern(x[1] + j, src_salt);
  return bad;
}
size_t mismatches(const Side& dst, const Side& src, const std::vector<std::array<uint64_t, 3>>& ps) {
  return mismatches(dst, src.salt, ps);
}

TEST(SharedMemoryRegistry, FindsRangesOnlyInsideLiveAllocations) {
  const size_t before = cma::shared_allocations();
  auto m = cma::SharedMemory::allocate(10000);
  EXPECT_EQ(cma::shared_allocations(), before + 1);
  const auto base = reinterpret_cast<uint64_t>(m->data());
  auto at = cma::find_shared(base + 100, 9900);
  ASSERT_TRUE(at.has_value());
  EXPECT_EQ(at->fd, m->fd());
  EXPECT_EQ(at->offset, 100u);
  EXPECT_GE(at->file_size, 10000u);
  EXPECT_FALSE(cma::find_shared(base + 100, 9901).has_value()) << "one byte past the allocation";
  EXPECT_FALSE(cma::find_shared(base - 1, 2).has_value());
  EXPECT_FALSE(cma::find_shared(base, 0).has_value());
  m.reset();
  EXPECT_EQ(cma::shared_allocations(), before);
  EXPECT_FALSE(cma::find_shared(base + 100, 10).has_value()) << "a freed allocation is never advertised";
  EXPECT_THROW(cma::SharedMemory::allocate(0), core::Error);
}

TEST(TransportOfferTail, MappableRegionsRoundTripAndAnOldFrameReadsAsNone) {
  TransportOffer t;
  t.cma = CmaVerdict::Works;
  const auto old_frame = t.encode();  // 3.0's layout: no tail
  EXPECT_TRUE(TransportOffer::decode(old_frame).mappable.empty());
  t.mappable.push_back({3, 0x1000, 0x2000, 7, 4096, 1u << 20, 5, 6});
  const auto bytes = t.encode();
  EXPECT_EQ(TransportOffer::decode(bytes).mappable, t.mappable);
  auto cut = bytes;
  cut.pop_back();
  EXPECT_THROW(TransportOffer::decode(cut), core::Error) << "a truncated tail is malformed";
}

// An agent offers its mappable regions only to a peer that says protocol 3.1 or later: a 3.0 peer
// gets the Transport frame it can decode (no tail), a 3.1 peer the region, its file offset and
// the file's identity.
TEST(AgentMappedProtocol, TheMappableTailGoesOnlyToPeersThatSayMinorOne) {
  Side p("pre", 3, true, ProgressMode::Thread);
  for (const uint16_t minor : {0, 1}) {
    FakePeer peer(TransportMode::Shm, tiny_metadata("dec", 0, 1ull << 41, kBlocks, 1));
    peer.say_minor(minor);
    peer.handshake(p.agent->info().listen);
    const TransportOffer offer = peer.agree_transport();
    EXPECT_EQ(offer.cma, CmaVerdict::Works);
    if (minor == 0) {
      EXPECT_TRUE(offer.mappable.empty());
    } else {
      ASSERT_EQ(offer.mappable.size(), 1u);
      const MappableRegion& x = offer.mappable[0];
      EXPECT_EQ(x.region, 0u);
      EXPECT_EQ(x.base, reinterpret_cast<uint64_t>(p.mem));
      EXPECT_EQ(x.length, p.bytes);
      EXPECT_EQ(x.offset, 4096u);
      EXPECT_EQ(x.fd, static_cast<uint32_t>(p.shm->fd()));
    }
  }
}

class AgentMapped : public ::testing::Test {
 protected:
  void connect(bool p_shared, bool d_shared, uint32_t threads = 1) {
    p = std::make_unique<Side>("pre", 3, p_shared, ProgressMode::Thread, threads);
    d = std::make_unique<Side>("dec", 77, d_shared, ProgressMode::Thread, threads);
    auto rec = d->agent->connect(p->agent->info().listen, 3000ms);
    ASSERT_EQ(rec->transport, TransportMode::Shm);
  }
  std::unique_ptr<Side> p, d;
};

TEST_F(AgentMapped, AReadFromASharedRegionGoesThroughTheMapping) {
  connect(true, false);
  auto peer = d->agent->find_peer("pre", 0);
  EXPECT_EQ(peer->mapped_regions, 1u) << peer->mapping_note;
  const auto ps = pieces(100);
  auto t = post(*d, plan_of(*d, *p, ps), TransferOp::Read, "pre", "r");
  ASSERT_TRUE(t.wait(5000ms));
  ASSERT_EQ(t.status().status, Status::Ok) << t.status().message;
  EXPECT_EQ(mismatches(*d, *p, ps), 0u);
  EXPECT_EQ(peer->bytes_mapped.load(), 100u * (64u << 10)) << "every byte went through the mapping";
  EXPECT_EQ(peer->bytes_read.load(), 100u * (64u << 10));
}

TEST_F(AgentMapped, AReadWithTwoCopyThreadsAndPiecesLargerThanABatch) {
  connect(true, false, 2);
  const std::vector<std::array<uint64_t, 3>> ps = {{0, 4096, 15u << 20}};  // spans batches
  auto t = post(*d, plan_of(*d, *p, ps), TransferOp::Read, "pre", "big");
  ASSERT_TRUE(t.wait(5000ms));
  ASSERT_EQ(t.status().status, Status::Ok) << t.status().message;
  EXPECT_EQ(mismatches(*d, *p, ps), 0u);
  EXPECT_EQ(d->agent->find_peer("pre", 0)->bytes_mapped.load(), 15u << 20);
}

TEST_F(AgentMapped, AWriteIntoASharedRegionGoesThroughTheMapping) {
  connect(false, true);
  auto peer = p->agent->find_peer("dec", 0);
  EXPECT_EQ(peer->mapped_regions, 1u) << peer->mapping_note;
  EXPECT_EQ(d->agent->find_peer("pre", 0)->mapped_regions, 0u) << "P's memory is not shared";
  const auto ps = pieces(100);
  auto t = post(*p, plan_of(*d, *p, ps), TransferOp::Write, "dec", "w");
  ASSERT_TRUE(t.wait(5000ms));
  ASSERT_EQ(t.status().status, Status::Ok) << t.status().message;
  EXPECT_EQ(mismatches(*d, *p, ps), 0u);
  EXPECT_EQ(peer->bytes_mapped.load(), 100u * (64u << 10));
  // Untouched bytes of D stay.
  EXPECT_EQ(d->mem[(64u << 10) + 1], pattern((64u << 10) + 1, d->salt));
}

TEST_F(AgentMapped, ARegionInOrdinaryMemoryFallsBackToCrossMemoryAttachAndSaysSo) {
  connect(false, false);
  auto peer = d->agent->find_peer("pre", 0);
  EXPECT_EQ(peer->mapped_regions, 0u);
  EXPECT_NE(peer->mapping_note.find("no region in a pdkv shared allocation"), std::string::npos) << peer->mapping_note;
  const auto ps = pieces(50);
  auto t = post(*d, plan_of(*d, *p, ps), TransferOp::Read, "pre", "r");
  ASSERT_TRUE(t.wait(5000ms));
  ASSERT_EQ(t.status().status, Status::Ok) << t.status().message;
  EXPECT_EQ(mismatches(*d, *p, ps), 0u);
  EXPECT_EQ(peer->bytes_mapped.load(), 0u);
  EXPECT_EQ(peer->bytes_read.load(), 50u * (64u << 10));
}

TEST_F(AgentMapped, RangesOutsideTheRegistrationAreRefusedBeforeAnythingMoves) {
  connect(true, false);
  const std::vector<std::array<uint64_t, 3>> ps = {{0, p->bytes - 4096, 8192}};  // 4 KiB past the end
  try {
    post(*d, plan_of(*d, *p, ps), TransferOp::Read, "pre", "oob");
    FAIL() << "a read past the peer's registration was posted";
  } catch (const core::Error& e) {
    EXPECT_EQ(e.status(), Status::OutOfBounds) << e.what();
  }
  EXPECT_EQ(d->mem[0], pattern(0, d->salt));
  EXPECT_EQ(d->agent->find_peer("pre", 0)->bytes_mapped.load(), 0u);
}

// The peer's agent goes away (it revokes its probe) while its memory lives on: the mapping
// still maps the pages, but the batch after that does not count and the transfer is PEER_LOST.
TEST(AgentMappedLoss, APeerAgentFreedMidTransferIsLostAndNothingMoreIsCopied) {
  Side p("pre", 3, true, ProgressMode::Thread);
  Side d("dec", 77, false, ProgressMode::Caller);
  auto rec = d.agent->connect(p.agent->info().listen, 3000ms);
  ASSERT_EQ(rec->transport, TransportMode::Shm);
  const std::vector<std::array<uint64_t, 3>> ps = {{0, 0, 12u << 20}};  // three batches
  auto t = post(d, plan_of(d, p, ps), TransferOp::Read, "pre", "lost");
  d.agent->progress();
  EXPECT_EQ(rec->bytes_mapped.load(), kCmaBatchBytes) << "the first batch went through the mapping";
  p.agent.reset();
  for (int i = 0; i < 10 && t.status().state == TransferState::InFlight; ++i) d.agent->progress();
  ASSERT_TRUE(t.wait(5000ms));
  EXPECT_EQ(t.status().status, Status::PeerLost) << t.status().message;
  EXPECT_EQ(rec->bytes_mapped.load(), kCmaBatchBytes) << "a batch counted after the peer was gone";
  size_t bad = 0;
  for (uint64_t i = 2 * kCmaBatchBytes; i < (12u << 20); ++i) bad += d.mem[i] != pattern(i, d.salt);
  EXPECT_EQ(bad, 0u) << "bytes were copied after the peer's agent was gone";
}

// A P process with its region in a pdkv shared allocation: D (this process) reads it through
// the mapping, then the child is killed in the middle of a READ: PEER_LOST, no crash (the memfd's
// pages outlive the process while mapped, and the file is sealed against shrinking, so the
// mapping can never fault with SIGBUS).
TEST(AgentMappedTwoProcesses, ReadsThroughTheMappingAndAKilledPeerIsLost) {
  int port_pipe[2];
  ASSERT_EQ(::pipe(port_pipe), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(port_pipe[0]);
    {
      Side p("pre", 3, true, ProgressMode::Thread);
      const uint16_t port = p.agent->info().listen.port;
      if (::write(port_pipe[1], &port, sizeof port) != sizeof port) ::_exit(2);
      for (;;) ::pause();  // until killed
    }
  }
  ::close(port_pipe[1]);
  ChildReaper reaper{child};
  uint16_t port = 0;
  ASSERT_EQ(::read(port_pipe[0], &port, sizeof port), static_cast<ssize_t>(sizeof port));
  ::close(port_pipe[0]);
  {
    Side d("dec", 77, false, ProgressMode::Caller);
    auto rec = d.agent->connect(loopback(port), 3000ms);
    ASSERT_EQ(rec->transport, TransportMode::Shm);
    EXPECT_EQ(rec->mapped_regions, 1u) << rec->mapping_note;
    const auto ps = pieces(64);
    auto t = post(d, plan_of("dec", "pre", ps), TransferOp::Read, "pre", "r");
    ASSERT_TRUE(t.wait(5000ms));
    ASSERT_EQ(t.status().status, Status::Ok) << t.status().message;
    EXPECT_EQ(mismatches(d, 3, ps), 0u);
    EXPECT_EQ(rec->bytes_mapped.load(), 64u * (64u << 10));
    const std::vector<std::array<uint64_t, 3>> big = {{0, 0, 12u << 20}};
    auto t2 = post(d, plan_of("dec", "pre", big), TransferOp::Read, "pre", "killed");
    d.agent->progress();
    ASSERT_EQ(::kill(child, SIGKILL), 0);
    int st = 0;
    ASSERT_EQ(::waitpid(child, &st, 0), child);
    reaper.pid = 0;
    for (int i = 0; i < 10 && t2.status().state == TransferState::InFlight; ++i) d.agent->progress();
    ASSERT_TRUE(t2.wait(5000ms));
    EXPECT_EQ(t2.status().status, Status::PeerLost) << t2.status().message;
    EXPECT_LE(rec->bytes_mapped.load(), 64u * (64u << 10) + kCmaBatchBytes);
  }
}

}  // namespace

namespace {

// A D process with its region in a pdkv shared allocation: P (this process) writes into it
// through the mapping; the child checks the bytes itself and reports in its exit status.
TEST(AgentMappedTwoProcesses, WritesThroughTheMappingLandInThePeersMemory) {
  int port_pipe[2], go_pipe[2];
  ASSERT_EQ(::pipe(port_pipe), 0);
  ASSERT_EQ(::pipe(go_pipe), 0);
  const auto ps = pieces(64);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(port_pipe[0]);
    ::close(go_pipe[1]);
    int rc = 3;
    {
      Side d("dec", 77, true, ProgressMode::Thread);
      const uint16_t port = d.agent->info().listen.port;
      if (::write(port_pipe[1], &port, sizeof port) != sizeof port) ::_exit(2);
      char c = 0;
      if (::read(go_pipe[0], &c, 1) == 1) rc = mismatches(d, 3, ps) == 0 ? 0 : 1;
    }
    ::_exit(rc);
  }
  ::close(port_pipe[1]);
  ::close(go_pipe[0]);
  ChildReaper reaper{child};
  uint16_t port = 0;
  ASSERT_EQ(::read(port_pipe[0], &port, sizeof port), static_cast<ssize_t>(sizeof port));
  ::close(port_pipe[0]);
  Side p("pre", 3, false, ProgressMode::Thread);
  auto rec = p.agent->connect(loopback(port), 3000ms);
  ASSERT_EQ(rec->transport, TransportMode::Shm);
  EXPECT_EQ(rec->mapped_regions, 1u) << rec->mapping_note;
  auto t = post(p, plan_of("dec", "pre", ps), TransferOp::Write, "dec", "w");
  ASSERT_TRUE(t.wait(5000ms));
  ASSERT_EQ(t.status().status, Status::Ok) << t.status().message;
  EXPECT_EQ(rec->bytes_mapped.load(), 64u * (64u << 10));
  const char go = 1;
  ASSERT_EQ(::write(go_pipe[1], &go, 1), 1);
  ::close(go_pipe[1]);
  int st = 0;
  ASSERT_EQ(::waitpid(child, &st, 0), child);
  reaper.pid = 0;
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0) << "the child found wrong bytes (1) or was not told to check (3)";
}

}  // namespace
