// The UCX data path between two workers of one process: GET and PUT move exactly the bytes asked
// (every byte checked, the bytes around the range unchanged), many operations in flight, flush,
// rkeys and registrations refused with the right status, close.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <memory>
#include <vector>

#include "pdkv/core/error.hpp"
#include "ucx/context.hpp"
#include "ucx/endpoint.hpp"
#include "ucx/memory.hpp"
#include "ucx/worker.hpp"

namespace pdkv::exec {
namespace {

using Clock = std::chrono::steady_clock;

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

// Two workers of one context: "d" pulls from / pushes to "p".
struct Pair {
  explicit Pair(TransportMode mode, ErrorMode err = ErrorMode::None)
      : ctx(mode), p(ctx), d(ctx) {
    const std::vector<uint8_t> addr = p.address();
    ep = UcxEndpoint::create(d, addr, err);
  }
  void progress() {
    p.progress();
    d.progress();
  }
  // Progresses both workers until c->done reaches target (true) or 10 s pass (false).
  bool wait(const Counter& c, int target) {
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (c.done < target) {
      progress();
      if (Clock::now() > deadline) return false;
    }
    return true;
  }
  void account(const PostResult& r, Counter& c, int& expected) {
    ASSERT_NE(r.state, PostState::Failed) << ucs_status_string(r.status);
    if (r.state == PostState::InFlight) ++expected;
  }
  UcxContext ctx;
  UcxWorker p;
  UcxWorker d;
  std::unique_ptr<UcxEndpoint> ep;
};

uint8_t pattern(size_t i, uint8_t seed) { return static_cast<uint8_t>((i * 131u + seed * 7u + (i >> 8)) & 0xff); }

void fill(std::vector<uint8_t>& v, uint8_t seed) {
  for (size_t i = 0; i < v.size(); ++i) v[i] = pattern(i, seed);
}

class UcxModes : public ::testing::TestWithParam<TransportMode> {};

// GET [src_off, src_off+len) of p's buffer into [dst_off, ...) of d's: exactly those bytes change.
TEST_P(UcxModes, GetMovesExactlyTheRange) {
  Pair pair(GetParam());
  std::vector<uint8_t> src(256 * 1024), dst(256 * 1024);
  fill(src, 1);
  fill(dst, 2);
  const std::vector<uint8_t> dst_before = dst;
  UcxRegistration reg(pair.ctx, src.data(), src.size());
  UcxRemoteKey rkey = pair.ep->unpack_rkey(reg.packed_rkey());
  struct Piece { size_t src_off, dst_off, len; };
  const Piece pieces[] = {{0, 0, 1}, {17, 4099, 4093}, {65536, 100000, 65536}, {200000, 3, 56143}};
  Counter c;
  int expected = 0;
  for (const Piece& pc : pieces) {
    pair.account(pair.ep->post_get(dst.data() + pc.dst_off, pc.len,
                                   reinterpret_cast<uint64_t>(src.data() + pc.src_off), rkey,
                                   count_cb, &c),
                 c, expected);
  }
  ASSERT_TRUE(pair.wait(c, expected));
  EXPECT_EQ(c.errors, 0) << ucs_status_string(c.last);
  std::vector<uint8_t> want = dst_before;
  for (const Piece& pc : pieces) std::memcpy(want.data() + pc.dst_off, src.data() + pc.src_off, pc.len);
  for (size_t i = 0; i < dst.size(); ++i) ASSERT_EQ(dst[i], want[i]) << "byte " << i;
}

// PUT then flush: after the flush completes every put byte is at p, nothing else changed.
TEST_P(UcxModes, PutThenFlushMovesExactlyTheRange) {
  Pair pair(GetParam());
  std::vector<uint8_t> src(128 * 1024), dst(128 * 1024);
  fill(src, 3);
  fill(dst, 4);
  const std::vector<uint8_t> dst_before = dst;
  UcxRegistration reg(pair.ctx, dst.data(), dst.size());
  UcxRemoteKey rkey = pair.ep->unpack_rkey(reg.packed_rkey());
  Counter c;
  int expected = 0;
  pair.account(pair.ep->post_put(src.data() + 5, 70001, reinterpret_cast<uint64_t>(dst.data() + 1000),
                                 rkey, count_cb, &c),
               c, expected);
  pair.account(pair.ep->post_put(src.data(), 3, reinterpret_cast<uint64_t>(dst.data() + dst.size() - 3),
                                 rkey, count_cb, &c),
               c, expected);
  Counter flushed;
  int flush_expected = 0;
  pair.account(pair.ep->post_flush(count_cb, &flushed), flushed, flush_expected);
  ASSERT_TRUE(pair.wait(flushed, flush_expected));
  EXPECT_EQ(flushed.errors, 0);
  ASSERT_TRUE(pair.wait(c, expected));  // a flush completes after the puts before it
  EXPECT_EQ(c.errors, 0);
  std::vector<uint8_t> want = dst_before;
  std::memcpy(want.data() + 1000, src.data() + 5, 70001);
  std::memcpy(want.data() + want.size() - 3, src.data(), 3);
  for (size_t i = 0; i < dst.size(); ++i) ASSERT_EQ(dst[i], want[i]) << "byte " << i;
}

// 2000 GETs of 1 KiB..8 KiB with at most 64 in flight: every one completes, every byte arrives.
TEST_P(UcxModes, ManyGetsThroughAWindow) {
  Pair pair(GetParam());
  constexpr size_t kPieces = 2000;
  std::vector<uint8_t> src(kPieces * 8192), dst(kPieces * 8192, 0xEE);
  fill(src, 5);
  UcxRegistration reg(pair.ctx, src.data(), src.size());
  UcxRemoteKey rkey = pair.ep->unpack_rkey(reg.packed_rkey());
  Counter c;
  int posted_in_flight = 0;
  size_t next = 0;
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (next < kPieces || c.done < posted_in_flight) {
    while (next < kPieces && posted_in_flight - c.done < 64) {
      const size_t len = 1024 + (next * 37) % 7169;  // pieces never overlap: 8 KiB slots
      const PostResult r = pair.ep->post_get(dst.data() + next * 8192, len,
                                             reinterpret_cast<uint64_t>(src.data() + next * 8192), rkey,
                                             count_cb, &c);
      ASSERT_NE(r.state, PostState::Failed) << ucs_status_string(r.status);
      if (r.state == PostState::InFlight) ++posted_in_flight;
      ++next;
    }
    pair.progress();
    ASSERT_LT(Clock::now(), deadline) << c.done << " of " << posted_in_flight << " completed";
  }
  EXPECT_EQ(c.errors, 0);
  for (size_t k = 0; k < kPieces; ++k) {
    const size_t len = 1024 + (k * 37) % 7169;
    for (size_t i = 0; i < 8192; ++i) {
      const size_t at = k * 8192 + i;
      ASSERT_EQ(dst[at], i < len ? src[at] : 0xEE) << "piece " << k << " byte " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, UcxModes,
                         ::testing::Values(TransportMode::Shm, TransportMode::Tcp, TransportMode::Auto),
                         [](const auto& info) { return std::string(transport_mode_name(info.param)); });

// Tcp with peer error handling (the agent's tcp configuration) moves bytes too.
TEST(UcxPeerMode, TcpGetWithPeerErrorHandling) {
  Pair pair(TransportMode::Tcp, ErrorMode::Peer);
  std::vector<uint8_t> src(100000), dst(100000, 0);
  fill(src, 9);
  UcxRegistration reg(pair.ctx, src.data(), src.size());
  UcxRemoteKey rkey = pair.ep->unpack_rkey(reg.packed_rkey());
  Counter c;
  int expected = 0;
  pair.account(pair.ep->post_get(dst.data(), src.size(), reinterpret_cast<uint64_t>(src.data()), rkey,
                                 count_cb, &c),
               c, expected);
  ASSERT_TRUE(pair.wait(c, expected));
  EXPECT_EQ(c.errors, 0);
  EXPECT_EQ(dst, src);
  EXPECT_FALSE(pair.ep->failed());
}

TEST(UcxRegistrationTest, RefusesCudaNullAndEmpty) {
  UcxContext ctx(TransportMode::Shm);
  std::vector<uint8_t> buf(64);
  try {
    UcxRegistration reg(ctx, buf.data(), buf.size(), MemoryType::Cuda);
    FAIL() << "cuda registration accepted";
  } catch (const core::Error& e) {
    EXPECT_EQ(e.status(), core::Status::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("CUDA-enabled UCX"), std::string::npos) << e.what();
  }
  EXPECT_THROW(UcxRegistration(ctx, nullptr, 64), core::Error);
  EXPECT_THROW(UcxRegistration(ctx, buf.data(), 0), core::Error);
  UcxRegistration ok(ctx, buf.data(), buf.size());
  EXPECT_EQ(ok.memory_type(), MemoryType::Host);
  EXPECT_EQ(ok.length(), 64u);
  EXPECT_FALSE(ok.packed_rkey().empty());
  UcxRegistration moved = std::move(ok);
  EXPECT_FALSE(moved.packed_rkey().empty());
  EXPECT_THROW(ok.packed_rkey(), core::Error);  // NOLINT(bugprone-use-after-move): the refusal is the point
}

TEST(UcxEndpointTest, EmptyAddressAndEmptyRkeyRefused) {
  UcxContext ctx(TransportMode::Shm);
  UcxWorker w(ctx);
  try {
    UcxEndpoint::create(w, {}, ErrorMode::None);
    FAIL() << "empty address accepted";
  } catch (const core::Error& e) {
    EXPECT_EQ(e.status(), core::Status::InvalidArgument);
  }
  UcxWorker p(ctx);
  auto ep = UcxEndpoint::create(w, p.address(), ErrorMode::None);
  EXPECT_THROW(ep->unpack_rkey({}), core::Error);
}

TEST(UcxEndpointTest, PostsAfterCloseFailAndCloseCompletes) {
  Pair pair(TransportMode::Shm);
  std::vector<uint8_t> src(4096, 1), dst(4096, 0);
  UcxRegistration reg(pair.ctx, src.data(), src.size());
  UcxRemoteKey rkey = pair.ep->unpack_rkey(reg.packed_rkey());
  pair.ep->close(false);
  const PostResult r = pair.ep->post_get(dst.data(), 64, reinterpret_cast<uint64_t>(src.data()), rkey,
                                         count_cb, nullptr);
  EXPECT_EQ(r.state, PostState::Failed);
  EXPECT_EQ(r.status, UCS_ERR_NOT_CONNECTED);
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (!pair.ep->closed() && Clock::now() < deadline) pair.progress();
  EXPECT_TRUE(pair.ep->closed());
  EXPECT_EQ(pair.ep->close_status(), UCS_OK);
}

TEST(UcxWorkerTest, EventFdAndArm) {
  UcxContext ctx(TransportMode::Tcp);
  UcxWorker w(ctx);
  EXPECT_GE(w.event_fd(), 0);
  // Progress until idle, then arming succeeds.
  bool armed = false;
  for (int i = 0; i < 1000 && !armed; ++i) {
    while (w.progress() != 0) {
    }
    armed = w.arm();
  }
  EXPECT_TRUE(armed);
  EXPECT_FALSE(w.address().empty());
}

// What UCX says an endpoint's lanes are (ucp_ep_print_info).
std::string lanes(const UcxEndpoint& ep) {
  char* text = nullptr;
  size_t size = 0;
  FILE* f = open_memstream(&text, &size);
  ucp_ep_print_info(ep.handle(), f);
  std::fclose(f);
  std::string out(text, size);
  std::free(text);
  return out;
}

// The mode decides the transports, whatever UCX_TLS the user exported.
TEST(UcxContextTest, ModePinsTransportsOverTheEnvironment) {
  const char* saved = std::getenv("UCX_TLS");
  const std::string restore = saved ? saved : "";
  ::setenv("UCX_TLS", "tcp", 1);
  {
    Pair shm(TransportMode::Shm);
    const std::string info = lanes(*shm.ep);
    EXPECT_EQ(info.find("tcp"), std::string::npos) << info;
    EXPECT_TRUE(info.find("sysv") != std::string::npos || info.find("posix") != std::string::npos ||
                info.find("cma") != std::string::npos)
        << info;
  }
  ::setenv("UCX_TLS", "posix,sysv", 1);
  {
    Pair tcp(TransportMode::Tcp, ErrorMode::Peer);
    const std::string info = lanes(*tcp.ep);
    EXPECT_NE(info.find("tcp/"), std::string::npos) << info;
    EXPECT_EQ(info.find("posix"), std::string::npos) << info;
    EXPECT_EQ(info.find("sysv"), std::string::npos) << info;
  }
  if (saved) ::setenv("UCX_TLS", restore.c_str(), 1);
  else ::unsetenv("UCX_TLS");
}

TEST(UcxContextTest, ModeNamesAndTransportLists) {
  EXPECT_STREQ(transport_list(TransportMode::Shm), "posix,sysv,cma,self");
  EXPECT_STREQ(transport_list(TransportMode::Tcp), "tcp,self");
  EXPECT_STREQ(transport_mode_name(TransportMode::Auto), "auto");
  UcxContext ctx(TransportMode::Auto);
  EXPECT_EQ(ctx.mode(), TransportMode::Auto);
}

}  // namespace
}  // namespace pdkv::exec
