// The UCX data path against a peer in another process (fork; worker address and rkey travel over a
// pipe): GETs across processes in both modes, a peer killed with SIGKILL during tcp GETs (every
// operation completes with an error, bounded wait, no hang, no abort), force-close completing every
// outstanding callback, and what UCX does with the rkey of a region its owner deregistered.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ucx/context.hpp"
#include "ucx/endpoint.hpp"
#include "ucx/memory.hpp"
#include "ucx/worker.hpp"

namespace pdkv::exec {
namespace {

using Clock = std::chrono::steady_clock;

uint8_t pattern(size_t i) { return static_cast<uint8_t>((i * 131u + (i >> 9)) & 0xff); }

bool write_all(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool read_all(int fd, void* data, size_t n) {
  auto* p = static_cast<uint8_t*>(data);
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool send_blob(int fd, const std::vector<uint8_t>& v) {
  const uint64_t n = v.size();
  return write_all(fd, &n, sizeof n) && write_all(fd, v.data(), v.size());
}

std::vector<uint8_t> recv_blob(int fd) {
  uint64_t n = 0;
  if (!read_all(fd, &n, sizeof n) || n > (1u << 20)) return {};
  std::vector<uint8_t> v(n);
  if (!read_all(fd, v.data(), n)) return {};
  return v;
}

enum class PeerBehaviour { Progress, Idle, DeregisterThenProgress };

// The P side in a child process: registers `bytes` of patterned memory, sends its worker address,
// the buffer's address and the packed rkey, then progresses (or stays idle) until the parent
// closes its end of the control pipe.
class PeerProcess {
 public:
  PeerProcess(TransportMode mode, size_t bytes, PeerBehaviour behaviour) {
    int to_parent[2], to_child[2];
    if (::pipe(to_parent) != 0 || ::pipe(to_child) != 0) throw std::runtime_error("pipe");
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork");
    if (pid_ == 0) {
      ::close(to_parent[0]);
      ::close(to_child[1]);
      ::_exit(run_child(mode, bytes, behaviour, to_parent[1], to_child[0]));
    }
    ::close(to_parent[1]);
    ::close(to_child[0]);
    from_child_ = to_parent[0];
    to_child_ = to_child[1];
    address = recv_blob(from_child_);
    const std::vector<uint8_t> base_bytes = recv_blob(from_child_);
    rkey = recv_blob(from_child_);
    if (base_bytes.size() == sizeof base) std::memcpy(&base, base_bytes.data(), sizeof base);
  }
  ~PeerProcess() {
    if (to_child_ >= 0) ::close(to_child_);
    if (from_child_ >= 0) ::close(from_child_);
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  void kill_now() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  bool ok() const { return !address.empty() && !rkey.empty() && base != 0; }

  std::vector<uint8_t> address;
  std::vector<uint8_t> rkey;
  uint64_t base = 0;

 private:
  static int run_child(TransportMode mode, size_t bytes, PeerBehaviour behaviour, int out, int in) {
    try {
      UcxContext ctx(mode);
      UcxWorker worker(ctx);
      std::vector<uint8_t> buf(bytes);
      for (size_t i = 0; i < bytes; ++i) buf[i] = pattern(i);
      auto reg = std::make_unique<UcxRegistration>(ctx, buf.data(), buf.size());
      const auto base = reinterpret_cast<uint64_t>(buf.data());
      std::vector<uint8_t> base_bytes(sizeof base);
      std::memcpy(base_bytes.data(), &base, sizeof base);
      const std::vector<uint8_t> rkey = reg->packed_rkey();
      if (behaviour == PeerBehaviour::DeregisterThenProgress) reg.reset();
      if (!send_blob(out, worker.address()) || !send_blob(out, base_bytes) || !send_blob(out, rkey)) return 2;
      pollfd pfd{in, POLLIN, 0};
      for (;;) {
        if (behaviour != PeerBehaviour::Idle) worker.progress();
        if (::poll(&pfd, 1, behaviour == PeerBehaviour::Idle ? 100 : 0) > 0) return 0;  // parent closed
      }
    } catch (...) {
      return 3;
    }
  }

  pid_t pid_ = -1;
  int from_child_ = -1;
  int to_child_ = -1;
};

struct Counter {
  int done = 0;
  int errors = 0;
  ucs_status_t last = UCS_OK;
};

void count_cb(void* user, ucs_status_t status) {
  auto* c = static_cast<Counter*>(user);
  ++c->done;
  if (status != UCS_OK) {
    ++c->errors;
    c->last = status;
  }
}

class PeerModes : public ::testing::TestWithParam<TransportMode> {};

// 32 MiB pulled from another process in 64 KiB GETs, 32 in flight: every byte is the peer's.
TEST_P(PeerModes, GetsAcrossProcesses) {
  constexpr size_t kBytes = 32u << 20, kPiece = 64u << 10;
  PeerProcess peer(GetParam(), kBytes, PeerBehaviour::Progress);
  ASSERT_TRUE(peer.ok());
  UcxContext ctx(GetParam());
  UcxWorker worker(ctx);
  auto ep = UcxEndpoint::create(worker, peer.address,
                                GetParam() == TransportMode::Tcp ? ErrorMode::Peer : ErrorMode::None);
  UcxRemoteKey rkey = ep->unpack_rkey(peer.rkey);
  std::vector<uint8_t> dst(kBytes, 0);
  Counter c;
  int in_flight_posted = 0;
  size_t next = 0;
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (next < kBytes / kPiece || c.done < in_flight_posted) {
    while (next < kBytes / kPiece && in_flight_posted - c.done < 32) {
      const PostResult r = ep->post_get(dst.data() + next * kPiece, kPiece, peer.base + next * kPiece, rkey,
                                        count_cb, &c);
      ASSERT_NE(r.state, PostState::Failed) << ucs_status_string(r.status);
      in_flight_posted += r.state == PostState::InFlight;
      ++next;
    }
    worker.progress();
    ASSERT_LT(Clock::now(), deadline);
  }
  EXPECT_EQ(c.errors, 0) << ucs_status_string(c.last);
  for (size_t i = 0; i < kBytes; ++i) ASSERT_EQ(dst[i], pattern(i)) << "byte " << i;
  EXPECT_TRUE(ep->progress_until_closed(Clock::now() + std::chrono::seconds(10)));
}

INSTANTIATE_TEST_SUITE_P(Transports, PeerModes, ::testing::Values(TransportMode::Shm, TransportMode::Tcp),
                         [](const auto& info) { return std::string(transport_mode_name(info.param)); });

// Tcp with peer error handling: the peer dies (SIGKILL) while GETs are in flight. Every InFlight
// GET's callback runs (with an error for the ones the peer never served), the endpoint reports
// the failure, new posts fail, and a forced close completes, all within a bounded wait.
void sigkill_round() {
  constexpr size_t kBytes = 64u << 20, kPiece = 64u << 10;
  PeerProcess peer(TransportMode::Tcp, kBytes, PeerBehaviour::Progress);
  ASSERT_TRUE(peer.ok());
  UcxContext ctx(TransportMode::Tcp);
  UcxWorker worker(ctx);
  auto ep = UcxEndpoint::create(worker, peer.address, ErrorMode::Peer);
  UcxRemoteKey rkey = ep->unpack_rkey(peer.rkey);
  std::vector<uint8_t> dst(kBytes, 0);
  Counter c;
  int in_flight_posted = 0;
  size_t next = 0;
  bool killed = false;
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (!ep->failed() || c.done < in_flight_posted) {
    while (!killed && next < kBytes / kPiece && in_flight_posted - c.done < 64) {
      const PostResult r = ep->post_get(dst.data() + next * kPiece, kPiece, peer.base + next * kPiece, rkey,
                                        count_cb, &c);
      ASSERT_NE(r.state, PostState::Failed) << ucs_status_string(r.status);
      in_flight_posted += r.state == PostState::InFlight;
      ++next;
    }
    if (!killed && c.done >= 16) {
      peer.kill_now();  // 16 pieces served, up to 64 still in flight
      killed = true;
    }
    worker.progress();
    ASSERT_LT(Clock::now(), deadline) << "failed=" << ep->failed() << " done " << c.done << " of "
                                      << in_flight_posted;
    ASSERT_TRUE(killed || next < kBytes / kPiece) << "the peer served everything before the kill";
  }
  EXPECT_TRUE(killed);
  EXPECT_TRUE(ep->failed());
  EXPECT_NE(ep->failure_status(), UCS_OK);
  EXPECT_GT(c.errors, 0);
  EXPECT_EQ(c.done, in_flight_posted);
  const PostResult after = ep->post_get(dst.data(), 64, peer.base, rkey, count_cb, &c);
  EXPECT_EQ(after.state, PostState::Failed);
  EXPECT_TRUE(ep->progress_until_closed(Clock::now() + std::chrono::seconds(10)));
}

TEST(PeerFailure, SigkillDuringTcpGetsCompletesEveryOperation) {
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(round);
    sigkill_round();
    if (HasFatalFailure()) return;
  }
}

// A tcp GET needs the target to progress; an idle peer leaves every GET in flight. A forced close
// must complete each of them (with an error) so the caller may free the buffers.
TEST(ForceClose, CompletesEveryOutstandingCallback) {
  constexpr size_t kBytes = 8u << 20, kPiece = 64u << 10;
  PeerProcess peer(TransportMode::Tcp, kBytes, PeerBehaviour::Idle);
  ASSERT_TRUE(peer.ok());
  UcxContext ctx(TransportMode::Tcp);
  UcxWorker worker(ctx);
  auto ep = UcxEndpoint::create(worker, peer.address, ErrorMode::Peer);
  UcxRemoteKey rkey = ep->unpack_rkey(peer.rkey);
  std::vector<uint8_t> dst(kBytes, 0);
  Counter c;
  int in_flight_posted = 0;
  for (size_t k = 0; k < kBytes / kPiece; ++k) {
    const PostResult r = ep->post_get(dst.data() + k * kPiece, kPiece, peer.base + k * kPiece, rkey, count_cb, &c);
    ASSERT_NE(r.state, PostState::Failed) << ucs_status_string(r.status);
    in_flight_posted += r.state == PostState::InFlight;
  }
  for (int i = 0; i < 100; ++i) worker.progress();
  ASSERT_GT(in_flight_posted - c.done, 0) << "nothing outstanding: the test proves nothing";
  ep->close(true);
  EXPECT_TRUE(ep->progress_until_closed(Clock::now() + std::chrono::seconds(10)));
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (c.done < in_flight_posted && Clock::now() < deadline) worker.progress();
  EXPECT_EQ(c.done, in_flight_posted);
  EXPECT_GT(c.errors, 0);
  EXPECT_EQ(c.last, UCS_ERR_CANCELED) << ucs_status_string(c.last);  // as endpoint.hpp documents
  RecordProperty("force_close_status", ucs_status_string(c.last));
  std::printf("force close completed outstanding GETs with: %s\n", ucs_status_string(c.last));
}

// UCX does not enforce registrations for these transports: the rkey of a region its owner has
// deregistered still reaches the memory (observed on 1.13.1; cma and tcp read plain addresses).
// The agent must therefore bounds-check every remote range against the peer's advertised and
// still-live registrations itself (issue 8 item 4); this test records the behaviour it relies on
// NOT getting from UCX.
TEST(DeregisteredRegion, UcxDoesNotRefuseItsRkey) {
  for (TransportMode mode : {TransportMode::Shm, TransportMode::Tcp}) {
    PeerProcess peer(mode, 1u << 20, PeerBehaviour::DeregisterThenProgress);
    ASSERT_TRUE(peer.ok());
    UcxContext ctx(mode);
    UcxWorker worker(ctx);
    auto ep = UcxEndpoint::create(worker, peer.address, ErrorMode::None);
    UcxRemoteKey rkey;
    try {
      rkey = ep->unpack_rkey(peer.rkey);
    } catch (const std::exception& e) {
      ADD_FAILURE() << transport_mode_name(mode) << ": UCX now refuses a deregistered region's rkey ("
                    << e.what() << "); update endpoint.hpp and this test";
      continue;
    }
    std::vector<uint8_t> dst(4096, 0);
    Counter c;
    const PostResult r = ep->post_get(dst.data(), dst.size(), peer.base, rkey, count_cb, &c);
    if (r.state == PostState::InFlight) {
      const auto deadline = Clock::now() + std::chrono::seconds(10);
      while (c.done == 0 && Clock::now() < deadline) worker.progress();
      ASSERT_EQ(c.done, 1);
    }
    const bool ok = r.state == PostState::Done || (r.state == PostState::InFlight && c.errors == 0);
    EXPECT_TRUE(ok) << transport_mode_name(mode)
                    << ": UCX now refuses a GET through a deregistered region's rkey; update "
                       "endpoint.hpp and this test";
  }
}

}  // namespace
}  // namespace pdkv::exec
