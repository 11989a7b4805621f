// The cross-memory-attach layer against a real second process: a forked child holds memory at the
// addresses the parent knows (fork copies the address space), changes its copy, and the parent
// reads and writes it with process_vm_readv/writev. Batching past IOV_MAX, short copies when a
// range unmaps (EFAULT after the bytes before it), a vanished process (ESRCH), the probe that
// proves a pid is the peer's, and the pidfd that reports the peer's exit.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "cma/cma.hpp"

using namespace pdkv::exec;

namespace {

constexpr size_t kPage = 4096;

// A child process that runs `prepare` on its copy of the memory, reports readiness on a pipe
// and then sleeps until killed (or until `stay_ms` passed).
class Child {
 public:
  template <class F>
  explicit Child(F&& prepare) {
    int fds[2];
    if (::pipe(fds) != 0) std::abort();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(fds[0]);
      prepare();
      const char c = 'r';
      if (::write(fds[1], &c, 1) != 1) ::_exit(3);
      for (int i = 0; i < 600; ++i) ::usleep(100000);  // at most a minute
      ::_exit(0);
    }
    ::close(fds[1]);
    char c = 0;
    if (::read(fds[0], &c, 1) != 1) std::abort();
    ::close(fds[0]);
  }
  ~Child() { kill(); }
  pid_t pid() const { return pid_; }
  void kill() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      reaped_ = pid_;
      pid_ = -1;
    }
  }
  pid_t reaped() const { return reaped_; }

 private:
  pid_t pid_ = -1;
  pid_t reaped_ = -1;
};

uint8_t pattern(size_t i, uint8_t salt) { return static_cast<uint8_t>((i * 131 + salt) % 251); }

}  // namespace

// 3000 pieces of 100 bytes (three system calls' worth of iovecs) in both directions; every byte
// checked, including the gaps between pieces that must stay untouched.
TEST(Cma, CopiesManyPiecesInBatchesBothWays) {
  std::vector<uint8_t> remote(3000 * 128);
  for (size_t i = 0; i < remote.size(); ++i) remote[i] = 0;
  Child child([&] {
    for (size_t i = 0; i < remote.size(); ++i) remote[i] = pattern(i, 9);
  });
  std::vector<uint8_t> local(3000 * 100, 0xEE);
  std::vector<cma::Segment> segs;
  for (size_t k = 0; k < 3000; ++k) {
    segs.push_back({local.data() + k * 100, reinterpret_cast<uint64_t>(remote.data()) + k * 128, 100});
  }
  auto r = cma::copy(child.pid(), cma::Direction::Read, segs);
  ASSERT_EQ(r.error, 0) << cma::errno_text(r.error);
  EXPECT_EQ(r.bytes, 3000u * 100);
  size_t bad = 0;
  for (size_t k = 0; k < 3000; ++k)
    for (size_t j = 0; j < 100; ++j) bad += local[k * 100 + j] != pattern(k * 128 + j, 9);
  EXPECT_EQ(bad, 0u);

  // Write them back shifted by one piece; then read the whole child buffer to check.
  std::vector<cma::Segment> back;
  for (size_t k = 0; k + 1 < 3000; ++k) {
    back.push_back({local.data() + k * 100, reinterpret_cast<uint64_t>(remote.data()) + (k + 1) * 128, 100});
  }
  r = cma::copy(child.pid(), cma::Direction::Write, back);
  ASSERT_EQ(r.error, 0) << cma::errno_text(r.error);
  std::vector<uint8_t> whole(remote.size());
  const cma::Segment all{whole.data(), reinterpret_cast<uint64_t>(remote.data()), remote.size()};
  r = cma::copy(child.pid(), cma::Direction::Read, {&all, 1});
  ASSERT_EQ(r.error, 0);
  bad = 0;
  for (size_t k = 0; k < 3000; ++k) {
    for (size_t j = 0; j < 128; ++j) {
      const uint8_t want = (k >= 1 && j < 100) ? pattern((k - 1) * 128 + j, 9) : pattern(k * 128 + j, 9);
      bad += whole[k * 128 + j] != want;
    }
  }
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(remote[0], 0) << "the parent's own copy must not change";
}

// A range that stops being mapped in the peer: the copy moves the bytes before the hole, then
// stops with EFAULT, and says how far it got.
TEST(Cma, AnUnmappedPeerRangeStopsTheCopyWithEfaultAfterTheBytesBeforeIt) {
  auto* area = static_cast<uint8_t*>(::mmap(nullptr, 3 * kPage, PROT_READ | PROT_WRITE,
                                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(area, MAP_FAILED);
  Child child([&] {
    std::memset(area, 0x5A, 2 * kPage);
    ::munmap(area + 2 * kPage, kPage);
  });
  std::vector<uint8_t> local(3 * kPage, 0);
  const uint64_t base = reinterpret_cast<uint64_t>(area);
  const cma::Segment segs[] = {
      {local.data(), base, kPage},                         // mapped
      {local.data() + kPage, base + kPage, 2 * kPage},     // the first half mapped, then the hole
  };
  const auto r = cma::copy(child.pid(), cma::Direction::Read, segs);
  EXPECT_EQ(r.error, EFAULT) << cma::errno_text(r.error);
  EXPECT_EQ(r.bytes, 2 * kPage);
  EXPECT_EQ(local[0], 0x5A);
  EXPECT_EQ(local[2 * kPage - 1], 0x5A);
  EXPECT_EQ(local[2 * kPage], 0);
  // Writing into the hole fails the same way.
  const cma::Segment into{local.data(), base + 2 * kPage, 16};
  EXPECT_EQ(cma::copy(child.pid(), cma::Direction::Write, {&into, 1}).error, EFAULT);
  ::munmap(area, 3 * kPage);
}

// The Copier cuts a large call into parts copied by helper threads; the bytes and the in-order
// result are those of copy(), including where a hole stops it.
TEST(Cma, ACopierOnSeveralThreadsMovesTheSameBytesAndStopsAtTheSameHole) {
  std::vector<uint8_t> remote(3000 * 128);
  Child child([&] {
    for (size_t i = 0; i < remote.size(); ++i) remote[i] = pattern(i, 21);
  });
  cma::Copier copier(3);
  ASSERT_EQ(copier.threads(), 3u);
  std::vector<uint8_t> local(3000 * 100, 0xEE);
  std::vector<cma::Segment> segs;
  for (size_t k = 0; k < 3000; ++k) {
    segs.push_back({local.data() + k * 100, reinterpret_cast<uint64_t>(remote.data()) + k * 128, 100});
  }
  for (int rep = 0; rep < 3; ++rep) {
    std::fill(local.begin(), local.end(), 0xEE);
    const auto r = copier.copy(child.pid(), cma::Direction::Read, segs, 1);
    ASSERT_EQ(r.error, 0) << cma::errno_text(r.error);
    EXPECT_EQ(r.bytes, 3000u * 100);
    size_t bad = 0;
    for (size_t k = 0; k < 3000; ++k)
      for (size_t j = 0; j < 100; ++j) bad += local[k * 100 + j] != pattern(k * 128 + j, 21);
    EXPECT_EQ(bad, 0u);
  }
  // Below the split size it copies alone, with the same result.
  EXPECT_EQ(copier.copy(child.pid(), cma::Direction::Read, segs, 1u << 30).bytes, 3000u * 100);

  auto* area = static_cast<uint8_t*>(::mmap(nullptr, 8 * kPage, PROT_READ | PROT_WRITE,
                                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(area, MAP_FAILED);
  Child holed([&] { ::munmap(area + 5 * kPage, kPage); });  // page 5 of 8 is a hole
  std::vector<uint8_t> into(8 * kPage);
  const cma::Segment whole{into.data(), reinterpret_cast<uint64_t>(area), 8 * kPage};
  for (unsigned threads : {2u, 3u, 4u}) {
    cma::Copier c(threads);
    const auto r = c.copy(holed.pid(), cma::Direction::Read, {&whole, 1}, 1);
    EXPECT_EQ(r.error, EFAULT) << threads;
    EXPECT_EQ(r.bytes, 5 * kPage) << threads;
  }
  ::munmap(area, 8 * kPage);
}

TEST(Cma, AVanishedProcessIsEsrch) {
  std::vector<uint8_t> buf(64, 1);
  Child child([] {});
  child.kill();
  const cma::Segment s{buf.data(), reinterpret_cast<uint64_t>(buf.data()), buf.size()};
  const auto r = cma::copy(child.reaped(), cma::Direction::Read, {&s, 1});
  EXPECT_EQ(r.error, ESRCH);
  EXPECT_EQ(r.bytes, 0u);
  EXPECT_NE(cma::errno_text(ESRCH).find("ESRCH"), std::string::npos);
}

TEST(Cma, EmptySegmentsCopyNothingAndSucceed) {
  std::vector<uint8_t> buf(8, 1);
  const cma::Segment s[] = {{buf.data(), reinterpret_cast<uint64_t>(buf.data()), 0}};
  const auto r = cma::copy(::getpid(), cma::Direction::Read, s);
  EXPECT_EQ(r.error, 0);
  EXPECT_EQ(r.bytes, 0u);
}

// The probe: the right pid and value pass; every way of naming the wrong process fails with a
// reason a user can act on.
TEST(Cma, ProbeAcceptsOnlyThePeerItNames) {
  cma::Probe probe;
  Child child([] {});  // holds the same probe bytes at the same address (fork copied them)
  EXPECT_EQ(cma::check_probe(static_cast<uint32_t>(child.pid()), probe.address(), probe.value()), "");
  EXPECT_EQ(cma::check_probe(probe.pid(), probe.address(), probe.value()), "");

  cma::ProbeValue other = probe.value();
  other[7] ^= 0x40;
  const std::string mismatch = cma::check_probe(static_cast<uint32_t>(child.pid()), probe.address(), other);
  EXPECT_NE(mismatch.find("another process"), std::string::npos) << mismatch;

  const std::string unmapped = cma::check_probe(static_cast<uint32_t>(child.pid()), 8, probe.value());
  EXPECT_NE(unmapped.find("EFAULT"), std::string::npos) << unmapped;

  const std::string none = cma::check_probe(0, probe.address(), probe.value());
  EXPECT_NE(none.find("no usable process id"), std::string::npos) << none;

  child.kill();
  const std::string gone = cma::check_probe(static_cast<uint32_t>(child.reaped()), probe.address(), probe.value());
  EXPECT_NE(gone.find("ESRCH"), std::string::npos) << gone;
  EXPECT_NE(gone.find("pid namespace"), std::string::npos) << gone;
}

// A revoked probe (an agent shutting down) no longer reads back, and nobody can pass one off.
TEST(Cma, ARevokedProbeFailsTheCheck) {
  cma::Probe probe;
  const cma::ProbeValue before = probe.value();
  ASSERT_EQ(cma::check_probe(probe.pid(), probe.address(), before), "");
  probe.revoke();
  const std::string after = cma::check_probe(probe.pid(), probe.address(), before);
  EXPECT_NE(after.find("another process"), std::string::npos) << after;
  const std::string zero = cma::check_probe(probe.pid(), probe.address(), probe.value());
  EXPECT_NE(zero.find("revoked"), std::string::npos) << zero;
}

TEST(Cma, PeerProcessReportsTheExitOfItsProcess) {
  Child child([] {});
  cma::PeerProcess watched(static_cast<uint32_t>(child.pid()));
  EXPECT_FALSE(watched.exited());
  ::kill(child.pid(), SIGKILL);
  for (int i = 0; i < 200 && !watched.exited(); ++i) ::usleep(5000);
  EXPECT_TRUE(watched.exited());  // before and after the child is reaped
  child.kill();
  EXPECT_TRUE(watched.exited());
}
