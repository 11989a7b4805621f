// The agent under resource exhaustion: a connection it cannot give a handshake thread is refused
// (the process does not abort), and a listener it cannot accept from (no descriptor left) does
// not make the control thread spin. Each case runs in a forked child whose limits it lowers.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <signal.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "agent_fake_peer.hpp"

using namespace pdkv;
using namespace pdkv::exec;
using namespace pdkv::exec::testing;
using namespace std::chrono_literals;

namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;  // PDKV_SANITIZE builds ASan and UBSan together
#else
constexpr bool kSanitized = false;
#endif

constexpr int kSkip = 77;

// Runs `body` in a forked child; its return value is the child's exit code. The parent reports a
// signal (an abort) or a nonzero code as a failure, kSkip as a skipped precondition.
template <class F>
void in_child(F&& body) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int rc = 1;
    try {
      rc = body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
    }
    std::fflush(nullptr);
    ::_exit(rc);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_FALSE(WIFSIGNALED(status)) << "the child died of signal " << WTERMSIG(status);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == kSkip) GTEST_SKIP() << "precondition not met in this environment";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// A raw TCP connection to the agent (no handshake): enough to make it accept.
int raw_connect(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

uint64_t vm_size_bytes() {
  std::ifstream in("/proc/self/statm");
  uint64_t pages = 0;
  in >> pages;
  return pages * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

double cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// No address space left for a thread stack: the inbound handshake thread cannot start. The
// connection is refused and the agent keeps serving (before: std::system_error escaped the
// control thread and std::terminate aborted the process).
TEST(AgentResources, AHandshakeThreadThatCannotStartRefusesTheConnection) {
  if (kSanitized) GTEST_SKIP() << "address-space limits and sanitizer shadow memory do not mix";
  in_child([]() -> int {
    auto agent = tiny_agent(TransportMode::Shm);
    const uint16_t port = agent->info().listen.port;
    rlimit lim{};
    lim.rlim_cur = lim.rlim_max = vm_size_bytes() + (2u << 20);  // no room for an 8 MiB stack
    if (::setrlimit(RLIMIT_AS, &lim) != 0) return kSkip;
    // Precondition: this process cannot start a thread now.
    try {
      std::thread probe([] {});
      probe.join();
      return kSkip;
    } catch (const std::system_error&) {
    }
    const int c = raw_connect(port);
    if (c < 0) return kSkip;
    std::this_thread::sleep_for(200ms);  // the control thread accepted and tried
    // Still alive and serving: the refused connection was closed.
    char b;
    const ssize_t n = ::recv(c, &b, 1, 0);
    ::close(c);
    if (n != 0) {
      std::fprintf(stderr, "the refused connection was not closed (recv %zd)\n", n);
      return 2;
    }
    return agent->info().num_peers == 0 ? 0 : 3;
  });
}

// Every descriptor number is taken: accept() fails with EMFILE and the connection stays queued,
// so the listener stays readable. The control thread must back off instead of spinning on it.
TEST(AgentResources, DescriptorExhaustionDoesNotSpinTheControlThread) {
  // UBSan's vptr check needs a descriptor of its own to probe memory and misreports without one.
  if (kSanitized) GTEST_SKIP() << "sanitizer runtimes need descriptors this test takes away";
  in_child([]() -> int {
    auto agent = tiny_agent(TransportMode::Shm);
    const uint16_t port = agent->info().listen.port;
    const int c = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c < 0) return kSkip;
    // Fill every free number below c, then allow no number above it.
    const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    for (int fd = 0; fd < c; ++fd) {
      if (::fcntl(fd, F_GETFD) < 0) ::dup2(null_fd, fd);
    }
    rlimit lim{};
    if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return kSkip;
    lim.rlim_cur = static_cast<rlim_t>(std::max(c, null_fd) + 1);
    if (::setrlimit(RLIMIT_NOFILE, &lim) != 0) return kSkip;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return kSkip;
    std::this_thread::sleep_for(100ms);
    const double cpu0 = cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(1s);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double used = cpu_seconds() - cpu0;
    std::fprintf(stderr, "agent CPU over %.2f s with an unacceptable connection: %.3f s\n", wall, used);
    // Idle, the agent wakes every 50-100 ms; a spinning thread uses most of a core.
    return used < 0.15 ? 0 : 2;
  });
}

// The application forks (a worker pool, say) while a peer is connected: the child holds copies
// of the agent's sockets. When the agent then drops the peer, closing its own descriptor does
// not take the socket out of the control loop's epoll set (the child's copy keeps it open), so
// bytes the peer still sends must not wake the loop for a connection it no longer knows.
TEST(AgentResources, ADroppedPeersSocketHeldByAForkedChildDoesNotSpinTheControlThread) {
  auto agent = tiny_agent(TransportMode::Shm);
  FakePeer peer(TransportMode::Shm);
  peer.admit(agent->info().listen);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::sleep(10);  // holds the inherited descriptors; killed below
    ::_exit(0);
  }
  disconnect_peer(agent->core(), agent->find_peer("dec", 0));
  // The peer keeps talking into the socket the agent dropped.
  for (int i = 0; i < 4; ++i) peer.channel().queue(Ping{});
  try {
    peer.channel().flush_some();
  } catch (const core::Error&) {
  }
  std::this_thread::sleep_for(100ms);
  const double cpu0 = cpu_seconds();
  std::this_thread::sleep_for(500ms);
  const double used = cpu_seconds() - cpu0;
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_LT(used, 0.1) << "the process used " << used << " s of CPU in 0.5 s with nothing to do";
}

}  // namespace
