// The mapped same-host data path: a shm peer whose registered region lies in a pdkv shared
// allocation (cma/shared_memory.hpp) is mapped at admission and its bytes are copied with memcpy.
// READ and WRITE land every byte through the mapping (the peer's bytes_mapped counts them), a
// region in ordinary memory falls back to cross-memory attach (and says so), ranges outside the
// registration are refused before anything moves, a peer agent that goes away mid-transfer and a
// peer process killed mid-transfer end with PEER_LOST and nothing crashes, a WRITE from this
// process lands in another process's shared region, the mappable regions go only to peers that
// say protocol 3.1, the shared allocation registry finds ranges only inside live
// allocations, and a process whose pidfd_getfd is refused (seccomp) falls back to cross-memory
// attach, says why, and still moves the right bytes.
#include <gtest/gtest.h>

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <iterator>
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

// A forked process holding a P agent ("pre", rank 3) whose region lies in a pdkv shared
// allocation, serving until it is killed (and dying with the process that forked it): its pid
// and the port it listens on, or pid -1 and `why`.
struct SharedOwner {
  pid_t pid = -1;
  uint16_t port = 0;
  std::string why;
};

SharedOwner fork_shared_owner() {
  SharedOwner o;
  int port_pipe[2];
  if (::pipe(port_pipe) != 0) {
    o.why = "pipe: " + cma::errno_text(errno);
    return o;
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    o.why = "fork: " + cma::errno_text(errno);
    return o;
  }
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::close(port_pipe[0]);
    Side p("pre", 3, true, ProgressMode::Thread);
    const uint16_t port = p.agent->info().listen.port;
    if (::write(port_pipe[1], &port, sizeof port) != sizeof port) ::_exit(2);
    for (;;) ::pause();  // until killed
  }
  ::close(port_pipe[1]);
  o.pid = pid;
  if (::read(port_pipe[0], &o.port, sizeof o.port) != sizeof o.port) o.why = "the owner process sent no port";
  ::close(port_pipe[0]);
  return o;
}

// A P process with its region in a pdkv shared allocation: D (this process) reads it through
// the mapping, then the child is killed in the middle of a READ: PEER_LOST, no crash (the memfd's
// pages outlive the process while mapped, and the file is sealed against shrinking, so the
// mapping can never fault with SIGBUS).
TEST(AgentMappedTwoProcesses, ReadsThroughTheMappingAndAKilledPeerIsLost) {
  const SharedOwner owner = fork_shared_owner();
  ChildReaper reaper{owner.pid};
  ASSERT_TRUE(owner.why.empty()) << owner.why;
  const pid_t child = owner.pid;
  const uint16_t port = owner.port;
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

namespace {

// pidfd_getfd refused in the process that maps. The refusal is real: a seccomp-bpf filter that
// answers SYS_pidfd_getfd (and nothing else) with EPERM, as a container's seccomp profile or an
// LSM would. Seccomp filters cannot be removed and are inherited, so the test runs in processes
// of its own: a mapper child M forks the owner O (its region in a pdkv shared allocation; M is
// O's parent, so ptrace access holds even with Yama's ptrace_scope 1), then M (optionally)
// installs the filter, starts a D agent in ordinary memory, connects to O and READs from it. M
// writes what it found down a pipe, one "FAIL ..." line per failed check, or "SKIP ..." when
// seccomp is not available.

#if defined(__x86_64__)
constexpr uint32_t kAuditArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
constexpr uint32_t kAuditArch = AUDIT_ARCH_AARCH64;
#else
constexpr uint32_t kAuditArch = 0;  // no filter written for this architecture: the test skips
#endif

// Installs the filter in this process (every thread started later inherits it). "" when
// installed and seen to refuse pidfd_getfd, "SKIP why" where seccomp filters are not available,
// "FAIL why" when an installed filter does not refuse.
std::string refuse_pidfd_getfd() {
#ifndef SYS_pidfd_getfd
  return "SKIP this build's headers have no SYS_pidfd_getfd";
#else
  if (kAuditArch == 0) return "SKIP no seccomp filter written for this architecture";
  sock_filter insns[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kAuditArch, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_pidfd_getfd, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog prog{static_cast<unsigned short>(std::size(insns)), insns};
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return "SKIP PR_SET_NO_NEW_PRIVS: " + cma::errno_text(errno);
  if (::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
    return "SKIP seccomp filters unavailable (PR_SET_SECCOMP: " + cma::errno_text(errno) + ")";
  }
  // The filter answers before the kernel looks at the arguments: a bad pidfd gets EPERM, not EBADF.
  errno = 0;
  if (::syscall(SYS_pidfd_getfd, -1, 0, 0) != -1 || errno != EPERM) {
    return "FAIL the installed filter did not refuse pidfd_getfd (" + cma::errno_text(errno) + ")";
  }
  return "";
#endif
}

// Runs in M. Returns the report.
std::string map_owner_and_read(bool refuse, const std::vector<std::array<uint64_t, 3>>& ps) {
  const SharedOwner owner = fork_shared_owner();
  ChildReaper reaper{owner.pid};
  if (!owner.why.empty()) return "FAIL " + owner.why + "\n";
  const uint16_t port = owner.port;
  if (refuse) {
    if (const std::string why = refuse_pidfd_getfd(); !why.empty()) return why + "\n";
  }
  std::string out;
  auto check = [&out](bool ok, const std::string& what) {
    if (!ok) out += "FAIL " + what + "\n";
  };
  try {
    Side d("dec", 77, false, ProgressMode::Thread);
    auto rec = d.agent->connect(loopback(port), 3000ms);
    check(rec->transport == TransportMode::Shm, "the peer is not a shm peer");
    const std::string note = " (note: '" + rec->mapping_note + "')";
    if (refuse) {
      check(rec->mapped_regions == 0, "mapped_regions " + std::to_string(rec->mapped_regions) + ", not 0" + note);
      check(rec->mapping_note.find("pidfd_getfd") != std::string::npos, "the note does not name pidfd_getfd" + note);
      check(rec->mapping_note.find("EPERM") != std::string::npos, "the note does not name EPERM" + note);
    } else {
      check(rec->mapped_regions == 1, "mapped_regions " + std::to_string(rec->mapped_regions) + ", not 1" + note);
    }
    auto t = post(d, plan_of("dec", "pre", ps), TransferOp::Read, "pre", refuse ? "refused" : "mapped");
    check(t.wait(5000ms), "the READ did not end in 5 s");
    check(t.status().status == Status::Ok, "the READ failed: " + t.status().message);
    const size_t bad = mismatches(d, 3, ps);
    check(bad == 0, std::to_string(bad) + " wrong bytes in the pieces read");
    size_t touched = 0;  // D's bytes outside the pieces keep their own pattern
    for (uint64_t i = 64u << 10; i < (128u << 10); ++i) touched += d.mem[i] != pattern(i, d.salt);
    check(touched == 0, std::to_string(touched) + " bytes outside the pieces changed");
    const uint64_t total = ps.size() * (64u << 10);
    check(rec->bytes_read.load() == total, "bytes_read " + std::to_string(rec->bytes_read.load()));
    check(rec->bytes_mapped.load() == (refuse ? 0 : total), "bytes_mapped " + std::to_string(rec->bytes_mapped.load()));
  } catch (const std::exception& e) {
    out += "FAIL " + std::string(e.what()) + "\n";
  }
  return out;
}

// Forks M and collects its report (M is killed after 60 s).
std::string in_mapper_process(bool refuse, const std::vector<std::array<uint64_t, 3>>& ps) {
  int report[2];
  if (::pipe(report) != 0) return "FAIL pipe\n";
  const pid_t m = ::fork();
  if (m < 0) return "FAIL fork\n";
  if (m == 0) {
    ::close(report[0]);
    const std::string out = map_owner_and_read(refuse, ps);
    size_t at = 0;
    while (at < out.size()) {
      const ssize_t w = ::write(report[1], out.data() + at, out.size() - at);
      if (w <= 0) break;
      at += static_cast<size_t>(w);
    }
    ::_exit(0);  // no destructors or atexit handlers of the test process in the child
  }
  ::close(report[1]);
  ChildReaper reaper{m};
  std::string out;
  const auto until = std::chrono::steady_clock::now() + 60s;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    pollfd pfd{report[0], POLLIN, 0};
    if (left.count() <= 0 || ::poll(&pfd, 1, static_cast<int>(left.count())) == 0) {
      out += "FAIL the mapper process did not finish in 60 s\n";
      break;
    }
    char buf[512];
    const ssize_t r = ::read(report[0], buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    out.append(buf, static_cast<size_t>(r));
  }
  ::close(report[0]);
  if (out.find("FAIL the mapper") == std::string::npos) {
    int st = 0;
    if (::waitpid(m, &st, 0) == m) {
      reaper.pid = 0;
      if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        out += "FAIL the mapper process ended with status " + std::to_string(st) + "\n";
      }
    }
  }
  return out;
}

TEST(AgentMappedRefused, PidfdGetfdRefusedFallsBackToCrossMemoryAttachWithTheRightBytes) {
  const auto ps = pieces(64);
  // The same processes without the filter map the region: what changes below is only the refusal.
  const std::string mapped = in_mapper_process(false, ps);
  ASSERT_EQ(mapped, "") << "without the filter";
  const std::string refused = in_mapper_process(true, ps);
  if (refused.rfind("SKIP ", 0) == 0) GTEST_SKIP() << refused.substr(5);
  EXPECT_EQ(refused, "") << "with pidfd_getfd refused";
}

}  // namespace
