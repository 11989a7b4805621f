// Many lifetimes in one process: connect/disconnect cycles and agents created and freed from
// several threads at once leave no descriptor and no thread behind, and every free is prompt.
#include <gtest/gtest.h>

#include <dirent.h>

#include <chrono>
#include <thread>
#include <vector>

#include "agent_fake_peer.hpp"

using namespace pdkv;
using namespace pdkv::exec;
using namespace pdkv::exec::testing;
using namespace std::chrono_literals;

namespace {

size_t count_entries(const char* dir) {
  size_t n = 0;
  if (DIR* d = ::opendir(dir)) {
    while (const dirent* e = ::readdir(d)) {
      if (e->d_name[0] != '.') ++n;
    }
    ::closedir(d);
  }
  return n;
}

size_t open_fds() { return count_entries("/proc/self/fd"); }
size_t threads() { return count_entries("/proc/self/task"); }

std::unique_ptr<Agent> d_agent(TransportMode mode) {
  AgentOptions o;
  o.metadata = tiny_metadata("dec", 0, 1ull << 41);
  o.transport = mode;
  o.default_timeout = 3000ms;
  return std::make_unique<Agent>(o);
}

// Waits until `f` holds or 3 s pass (the agent reaps lost peers and handshake threads lazily).
template <class F>
bool eventually(F&& f) {
  const auto until = std::chrono::steady_clock::now() + 3s;
  while (std::chrono::steady_clock::now() < until) {
    if (f()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return f();
}

TEST(AgentLifecycle, ConnectDisconnectCyclesLeakNoDescriptorOrThread) {
  auto p = tiny_agent(TransportMode::Tcp);
  auto d = d_agent(TransportMode::Tcp);
  auto cycle = [&] {
    auto rec = d->connect(p->info().listen, 3000ms);
    ASSERT_TRUE(eventually([&] { return p->info().num_peers == 1; }));
    disconnect_peer(d->core(), rec);
    ASSERT_TRUE(eventually([&] { return p->info().num_peers == 0 && d->info().num_peers == 0; }));
  };
  cycle();  // UCX sets up what it keeps per worker on first use
  std::this_thread::sleep_for(100ms);
  const size_t fds0 = open_fds(), threads0 = threads();
  for (int i = 0; i < 30; ++i) cycle();
  EXPECT_TRUE(eventually([&] { return open_fds() <= fds0; })) << open_fds() << " descriptors open, " << fds0 << " before";
  EXPECT_TRUE(eventually([&] { return threads() <= threads0; })) << threads() << " threads, " << threads0 << " before";
}

TEST(AgentLifecycle, AgentsCreatedConnectedAndFreedFromManyThreadsLeakNothing) {
  auto p = tiny_agent(TransportMode::Shm);
  { auto warm = d_agent(TransportMode::Shm); warm->connect(p->info().listen, 3000ms); }
  ASSERT_TRUE(eventually([&] { return p->info().num_peers == 0; }));
  std::this_thread::sleep_for(100ms);
  const size_t fds0 = open_fds(), threads0 = threads();
  std::vector<std::thread> workers;
  std::atomic<int> failures{0};
  for (int w = 0; w < 4; ++w) {
    workers.emplace_back([&, w] {
      for (int i = 0; i < 5; ++i) {
        try {
          // Every D has the same identity: each connect replaces the previous connection on P
          // (the restarted-peer path), racing with the previous D's Bye.
          AgentOptions o;
          o.metadata = tiny_metadata("dec", 0, (1ull << 41) + (static_cast<uint64_t>(w) << 32));
          o.transport = TransportMode::Shm;
          auto d = std::make_unique<Agent>(o);
          d->connect(p->info().listen, 3000ms);
          const auto t0 = std::chrono::steady_clock::now();
          d.reset();
          if (std::chrono::steady_clock::now() - t0 > 2s) failures++;
        } catch (const std::exception&) {
          failures++;
        }
      }
    });
  }
  for (auto& t : workers) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_TRUE(eventually([&] { return p->info().num_peers == 0; }));
  EXPECT_TRUE(eventually([&] { return open_fds() <= fds0; })) << open_fds() << " descriptors open, " << fds0 << " before";
  EXPECT_TRUE(eventually([&] { return threads() <= threads0; })) << threads() << " threads, " << threads0 << " before";
}

}  // namespace
