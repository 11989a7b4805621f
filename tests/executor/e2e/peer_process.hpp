// A child process (pdkv_test_peer, possibly behind `ip netns exec`) driven through pipes: lines
// written to its stdin, its stdout lines collected by a reader thread and waited for by
// predicate. Its stderr is the test's (sanitizer reports of the peer show up in the test log).
// The destructor kills a child still running (SIGKILL) and reaps it.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace e2e {

using namespace std::chrono_literals;
using Ms = std::chrono::milliseconds;

class PeerProcess {
 public:
  // Spawns argv[0] with argv (searched in PATH when it has no '/').
  explicit PeerProcess(std::vector<std::string> argv);
  ~PeerProcess();
  PeerProcess(const PeerProcess&) = delete;
  PeerProcess& operator=(const PeerProcess&) = delete;

  // Spawns pdkv_test_peer with `args`, waits for its READY (throws with the transcript when it
  // exits or does not get there within `within`) and records the ports it printed.
  static std::unique_ptr<PeerProcess> start_peer(const std::vector<std::string>& args, Ms within = 20000ms,
                                                 const std::vector<std::string>& wrapper = {});

  pid_t pid() const { return pid_; }
  uint16_t port(uint32_t rank) const;
  const std::map<uint32_t, uint16_t>& ports() const { return ports_; }

  // Writes one line to the child's stdin; false when the pipe is closed.
  bool send(const std::string& line);
  // The first line not yet taken that satisfies pred, taken; nullopt after `timeout` or EOF.
  std::optional<std::string> take(const std::function<bool(const std::string&)>& pred, Ms timeout);
  // take() of the first line starting with `prefix`.
  std::optional<std::string> take_prefix(const std::string& prefix, Ms timeout);
  // Sends `command`, then takes lines up to the reply "OK <verb>" or "ERR <verb> ..."; returns
  // the reply (nullopt on timeout). Lines between stay for later takes.
  std::optional<std::string> command(const std::string& command, Ms timeout);
  // Every line so far (for failure messages).
  std::string transcript() const;

  void signal(int sig);
  // SIGSTOP, returning once the child is really stopped (kill() only queues the signal: a busy
  // child may run on for a moment); SIGCONT.
  void stop();
  void resume() { signal(SIGCONT); }
  // Waits for the exit; returns the wait status, or nullopt after `timeout`.
  std::optional<int> wait_exit(Ms timeout);
  bool exited() const;

 private:
  void reader_main();

  pid_t pid_ = -1;
  int in_fd_ = -1;
  int out_fd_ = -1;
  std::thread reader_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> lines_;
  std::vector<bool> taken_;
  bool eof_ = false;
  bool reaped_ = false;
  int status_ = 0;
  std::map<uint32_t, uint16_t> ports_;
};

// A notification line of the peer: "NOTE <rank> <kind> <status> <request> <engine> <remote rank>
// <count> <expected> <bytes>".
struct NoteLine {
  uint32_t rank = 0;
  std::string kind, status, request, engine;
  uint32_t remote_rank = 0, count = 0, expected = 0;
  uint64_t bytes = 0;
};
std::optional<NoteLine> parse_note(const std::string& line);
// Predicate for take(): a NOTE of `kind` (and of `request` and `rank` unless empty / negative).
std::function<bool(const std::string&)> note_is(const std::string& kind, const std::string& request = "",
                                                int64_t rank = -1);

// Path of the pdkv_test_peer binary built beside the tests.
std::string test_peer_path();

}  // namespace e2e
