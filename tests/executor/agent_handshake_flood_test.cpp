// Connections that never speak must not lock an agent's listener: at most 64 handshakes run at
// once, and when they are all taken a newcomer from a source address holding fewer of them takes
// the place of the oldest unauthenticated handshake of the source holding the most. Before, the
// 65th connection was closed at once whoever sent it, so 64 idle sockets from one host shut every
// other host out until the agent's default deadline (here 20 s) passed.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "agent_fake_peer.hpp"

using namespace pdkv;
using namespace pdkv::exec;
using namespace pdkv::exec::testing;
using namespace std::chrono_literals;

namespace {

// A TCP connection from `source` (any 127/8 address is this host) to 127.0.0.1:port that sends
// nothing. -1 when the machine does not allow binding that source.
int idle_connection(const std::string& source, uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in from{};
  from.sin_family = AF_INET;
  ::inet_pton(AF_INET, source.c_str(), &from.sin_addr);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(port);
  ::inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// True when the agent closed this connection within `within` (EOF or reset).
bool closed_by_agent(int fd, std::chrono::milliseconds within) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(within.count())) <= 0) return false;
  char c;
  return ::recv(fd, &c, 1, MSG_DONTWAIT) <= 0;
}

struct Fds {
  std::vector<int> fds;
  ~Fds() {
    for (int fd : fds) ::close(fd);
  }
};

// The agent accepts on its control thread: give it time to take every queued connection.
void let_the_agent_accept() { std::this_thread::sleep_for(300ms); }

size_t count_closed(const std::vector<int>& fds) {
  size_t n = 0;
  for (int fd : fds) n += closed_by_agent(fd, 0ms) ? 1 : 0;
  return n;
}

TEST(AgentHandshakeFlood, SixtyFourIdleConnectionsFromOneHostDoNotLockOutAnother) {
  auto agent = tiny_agent(TransportMode::Tcp, 20000ms);
  const uint16_t port = agent->info().listen.port;
  Fds flood;
  for (int i = 0; i < 64; ++i) {
    const int fd = idle_connection("127.0.0.2", port);
    if (fd < 0) GTEST_SKIP() << "this machine does not allow binding 127.0.0.2 as a source address";
    flood.fds.push_back(fd);
  }
  let_the_agent_accept();
  EXPECT_EQ(count_closed(flood.fds), 0u);
  // The flooding host gets no 65th handshake: it would only compete with itself.
  const int extra = idle_connection("127.0.0.2", port);
  ASSERT_GE(extra, 0);
  flood.fds.push_back(extra);
  EXPECT_TRUE(closed_by_agent(extra, 3000ms));
  // Another host is admitted at once, in place of the flood's oldest handshake.
  FakePeer peer(TransportMode::Tcp);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_NO_THROW(peer.admit(agent->info().listen, deadline_in(5s)));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  EXPECT_TRUE(closed_by_agent(flood.fds.front(), 1000ms));  // the oldest was interrupted
  EXPECT_EQ(count_closed(std::vector<int>(flood.fds.begin() + 1, flood.fds.end() - 1)), 0u);
  EXPECT_TRUE(agent->find_peer("dec", 0) != nullptr);
}

TEST(AgentHandshakeFlood, IdleConnectionsFromSixtyFourHostsDoNotLockOutASixtyFifth) {
  auto agent = tiny_agent(TransportMode::Tcp, 20000ms);
  const uint16_t port = agent->info().listen.port;
  Fds flood;
  for (int i = 1; i <= 64; ++i) {
    const int fd = idle_connection("127.0.1." + std::to_string(i), port);
    if (fd < 0) GTEST_SKIP() << "this machine does not allow binding 127.0.1.x as source addresses";
    flood.fds.push_back(fd);
  }
  let_the_agent_accept();
  FakePeer peer(TransportMode::Tcp);
  EXPECT_NO_THROW(peer.admit(agent->info().listen, deadline_in(5s)));
  EXPECT_TRUE(closed_by_agent(flood.fds.front(), 1000ms));
  EXPECT_EQ(count_closed(std::vector<int>(flood.fds.begin() + 1, flood.fds.end())), 0u);
}

}  // namespace
