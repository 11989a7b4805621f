// AgentOptions::min_peer_minor (pdkv_agent_options_t.min_peer_protocol_minor, 2.7): an agent that
// requires a control protocol minor refuses an older peer at connect, whichever side connects,
// and both sides learn why (INCOMPATIBLE naming both versions and the setting); a peer at the
// required minor or newer is admitted. What it is for: with every peer at 3.5, every transfer
// asks the other side about its lease and no Hello rewritten down on the path passes.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "agent_fake_peer.hpp"
#include "agent_tiny_rank.hpp"

using namespace pdkv;
using namespace pdkv::exec;
using pdkv::exec::testing::TinyRank;
using core::Status;
using namespace std::chrono_literals;

namespace {

// A rank that requires `min` of its peers (TinyRank's agent, rebuilt with the setting).
struct Strict : TinyRank {
  Strict(const std::string& engine, uint16_t min) : TinyRank(engine, 4, ProgressMode::Thread, false, 10000ms) {
    AgentOptions o;
    o.metadata = md;
    o.transport = TransportMode::Tcp;
    o.min_peer_minor = min;
    regs.clear();
    agent = std::make_unique<Agent>(o);
  }
};

void expect_refused(const std::function<void()>& connect, const std::string& part) {
  try {
    connect();
    ADD_FAILURE() << "an older peer was admitted";
  } catch (const core::Error& e) {
    EXPECT_EQ(e.status(), Status::Incompatible) << e.what();
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(AgentMinProtocol, AnOlderPeerIsRefusedEitherWayAndANewEnoughOneAdmitted) {
  const std::string why = "runs control protocol 3.4, older than the 3.5 this agent ('strict' rank 0) requires";
  {
    Strict strict("strict", kControlProtoMinor);
    TinyRank old("old", 4, ProgressMode::Thread, false, 10000ms, 4);
    // The older side connects: the strict side refuses it and tells it why.
    expect_refused([&] { old.agent->connect(strict.agent->info().listen, 3000ms); }, why);
    // The strict side connects: it refuses the older one itself.
    expect_refused([&] { strict.agent->connect(old.agent->info().listen, 3000ms); }, why);
    EXPECT_EQ(strict.agent->info().num_peers, 0u);
    EXPECT_EQ(old.agent->info().num_peers, 0u);
  }
  {
    Strict strict("strict", kControlProtoMinor);
    TinyRank current("current", 4, ProgressMode::Thread, false, 10000ms);
    EXPECT_NO_THROW(current.agent->connect(strict.agent->info().listen, 3000ms));
    Strict lenient("lenient", 4);
    TinyRank old("old", 4, ProgressMode::Thread, false, 10000ms, 4);
    EXPECT_NO_THROW(old.agent->connect(lenient.agent->info().listen, 3000ms));
  }
}
