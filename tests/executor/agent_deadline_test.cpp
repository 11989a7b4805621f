// Relative deadlines near the top of their range mean "practically never", not a time in the
// past: now + timeout saturates instead of wrapping the clock (signed overflow, which made a huge
// connect timeout fail at once and a huge lease expire on the next control tick).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <thread>

#include "agent_fake_peer.hpp"

using namespace pdkv;
using namespace pdkv::exec;
using namespace pdkv::exec::testing;
using namespace std::chrono_literals;

namespace {

// The largest relative time the C API accepts (its ms() check): INT64_MAX nanoseconds in ms.
const std::chrono::milliseconds kHuge{std::numeric_limits<int64_t>::max() / 1000000};

TEST(AgentHugeDeadlines, ALeaseWithTheLargestTtlDoesNotExpire) {
  auto agent = tiny_agent(TransportMode::Shm);
  agent->lease("forever", 2, kHuge);
  agent->lease("forever-max", 2, std::chrono::milliseconds::max());
  std::this_thread::sleep_for(250ms);  // five control ticks
  for (const auto& n : agent->poll_notifications()) {
    EXPECT_NE(n.kind, NotificationKind::LeaseExpired) << "lease '" << n.request_id << "' expired";
  }
}

TEST(AgentHugeDeadlines, AConnectWithTheLargestTimeoutConnects) {
  auto p = tiny_agent(TransportMode::Shm);
  AgentOptions o;
  o.metadata = tiny_metadata("dec", 0, 1ull << 41);
  o.transport = TransportMode::Shm;
  Agent d(o);
  auto rec = d.connect(p->info().listen, kHuge);
  EXPECT_EQ(rec->engine_id, "pre");
  auto rec2 = d.connect(p->info().listen, std::chrono::milliseconds::max());
  EXPECT_EQ(rec2->engine_id, "pre");
}

TEST(AgentHugeDeadlines, AnAgentWhoseDefaultTimeoutIsHugeAdmitsInboundPeers) {
  auto p = tiny_agent(TransportMode::Shm, kHuge);
  AgentOptions o;
  o.metadata = tiny_metadata("dec", 0, 1ull << 41);
  o.transport = TransportMode::Shm;
  Agent d(o);
  EXPECT_EQ(d.connect(p->info().listen, 3000ms)->engine_id, "pre");
  EXPECT_EQ(p->find_peer("dec", 0)->engine_id, "dec");
}

}  // namespace
