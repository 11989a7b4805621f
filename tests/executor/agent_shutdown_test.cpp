// Shutting an agent down never waits for the network: a peer that completed the handshake and then
// went silent (mid-admission: the data connection or the Ready exchange) is abandoned at once, not
// after the agent's default timeout.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "agent_fake_peer.hpp"

using namespace pdkv;
using namespace pdkv::exec;
using namespace pdkv::exec::testing;
using namespace std::chrono_literals;

namespace {

class AgentShutdown : public ::testing::TestWithParam<TransportMode> {};

// The fake peer never opens its data connection (tcp) or sends Ready (shm): the agent's inbound
// handshake thread is left in admission with a 20 s deadline. Freeing the agent must not wait it
// out.
TEST_P(AgentShutdown, FreeDoesNotWaitForAPeerStuckInAdmission) {
  auto agent = tiny_agent(GetParam(), 20s);
  FakePeer peer(GetParam());
  peer.handshake(agent->info().listen);
  peer.agree_transport();
  std::this_thread::sleep_for(100ms);  // the agent is now in admission
  EXPECT_EQ(agent->info().num_peers, 0u);
  const auto t0 = std::chrono::steady_clock::now();
  agent.reset();
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(took, 3s) << "freeing the agent waited "
                      << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                      << " ms for a silent peer";
}

INSTANTIATE_TEST_SUITE_P(Transports, AgentShutdown, ::testing::Values(TransportMode::Shm, TransportMode::Tcp),
                         [](const auto& info) { return info.param == TransportMode::Shm ? "shm" : "tcp"; });

}  // namespace
