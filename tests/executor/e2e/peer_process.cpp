#include "peer_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "support/process.hpp"

namespace e2e {

using pdkv::test_support::spawn;

namespace {

// A child that died leaves its stdin pipe closed: writing to it must fail, not kill the test.
const bool kSigpipeIgnored = [] {
  ::signal(SIGPIPE, SIG_IGN);
  return true;
}();

}  // namespace

PeerProcess::PeerProcess(std::vector<std::string> argv) {
  (void)kSigpipeIgnored;
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
  if (pipe2(out, O_CLOEXEC) != 0) {
    close(in[0]);
    close(in[1]);
    throw std::runtime_error("pipe2 failed");
  }
  try {
    pid_ = spawn(argv, in[0], out[1], -1);
  } catch (...) {
    close(in[0]), close(in[1]), close(out[0]), close(out[1]);
    throw;
  }
  close(in[0]);
  close(out[1]);
  in_fd_ = in[1];
  out_fd_ = out[0];
  reader_ = std::thread([this] { reader_main(); });
}

PeerProcess::~PeerProcess() {
  if (!exited()) {
    ::kill(pid_, SIGKILL);
    wait_exit(10000ms);
  }
  if (in_fd_ >= 0) close(in_fd_);
  reader_.join();
  close(out_fd_);
}

std::unique_ptr<PeerProcess> PeerProcess::start_peer(const std::vector<std::string>& args, Ms within,
                                                     const std::vector<std::string>& wrapper) {
  std::vector<std::string> argv = wrapper;
  argv.push_back(test_peer_path());
  argv.insert(argv.end(), args.begin(), args.end());
  auto p = std::make_unique<PeerProcess>(argv);
  if (!p->take_prefix("READY", within)) {
    throw std::runtime_error("pdkv_test_peer did not get READY within " + std::to_string(within.count()) +
                             " ms; output:\n" + p->transcript());
  }
  std::lock_guard<std::mutex> g(p->mu_);
  for (size_t i = 0; i < p->lines_.size(); ++i) {
    unsigned rank = 0, port = 0;
    if (std::sscanf(p->lines_[i].c_str(), "PORT %u %u", &rank, &port) == 2) {
      p->ports_[rank] = static_cast<uint16_t>(port);
      p->taken_[i] = true;
    }
  }
  return p;
}

uint16_t PeerProcess::port(uint32_t rank) const {
  auto it = ports_.find(rank);
  if (it == ports_.end()) throw std::runtime_error("the peer printed no port for rank " + std::to_string(rank));
  return it->second;
}

void PeerProcess::reader_main() {
  std::string partial;
  char buf[4096];
  for (;;) {
    const ssize_t n = read(out_fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    partial.append(buf, static_cast<size_t>(n));
    size_t nl;
    while ((nl = partial.find('\n')) != std::string::npos) {
      std::lock_guard<std::mutex> g(mu_);
      lines_.push_back(partial.substr(0, nl));
      taken_.push_back(false);
      partial.erase(0, nl + 1);
      cv_.notify_all();
    }
  }
  std::lock_guard<std::mutex> g(mu_);
  if (!partial.empty()) {
    lines_.push_back(partial);
    taken_.push_back(false);
  }
  eof_ = true;
  cv_.notify_all();
}

bool PeerProcess::send(const std::string& line) {
  const std::string l = line + "\n";
  size_t off = 0;
  while (off < l.size()) {
    const ssize_t n = write(in_fd_, l.data() + off, l.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

std::optional<std::string> PeerProcess::take(const std::function<bool(const std::string&)>& pred, Ms timeout) {
  std::unique_lock<std::mutex> g(mu_);
  const auto until = std::chrono::steady_clock::now() + timeout;
  size_t scanned = 0;
  for (;;) {
    for (size_t i = 0; i < lines_.size(); ++i) {
      if (!taken_[i] && pred(lines_[i])) {
        taken_[i] = true;
        return lines_[i];
      }
    }
    scanned = lines_.size();
    if (eof_) return std::nullopt;
    if (!cv_.wait_until(g, until, [&] { return eof_ || lines_.size() != scanned; })) return std::nullopt;
  }
}

std::optional<std::string> PeerProcess::take_prefix(const std::string& prefix, Ms timeout) {
  return take([&](const std::string& l) { return l.rfind(prefix, 0) == 0; }, timeout);
}

std::optional<std::string> PeerProcess::command(const std::string& cmd, Ms timeout) {
  const std::string verb = cmd.substr(0, cmd.find(' '));
  if (!send(cmd)) return std::nullopt;
  return take([&](const std::string& l) { return l == "OK " + verb || l.rfind("ERR " + verb + " ", 0) == 0; },
              timeout);
}

std::string PeerProcess::transcript() const {
  std::lock_guard<std::mutex> g(mu_);
  std::ostringstream os;
  for (const auto& l : lines_) os << "  | " << l << "\n";
  return os.str();
}

void PeerProcess::signal(int sig) {
  if (!exited()) ::kill(pid_, sig);
}

void PeerProcess::stop() {
  std::lock_guard<std::mutex> g(mu_);
  if (reaped_) throw std::runtime_error("stop: the peer process has exited");
  ::kill(pid_, SIGSTOP);
  int st = 0;
  for (;;) {
    const pid_t r = waitpid(pid_, &st, WUNTRACED);
    if (r < 0 && errno == EINTR) continue;
    if (r != pid_) throw std::runtime_error("stop: waitpid failed");
    if (WIFSTOPPED(st)) return;
    reaped_ = true;  // it exited instead
    status_ = st;
    throw std::runtime_error("stop: the peer process exited");
  }
}

std::optional<int> PeerProcess::wait_exit(Ms timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    {
      std::lock_guard<std::mutex> g(mu_);
      if (reaped_) return status_;
      int st = 0;
      const pid_t r = waitpid(pid_, &st, WNOHANG);
      if (r == pid_) {
        reaped_ = true;
        status_ = st;
        return st;
      }
    }
    if (std::chrono::steady_clock::now() >= until) return std::nullopt;
    std::this_thread::sleep_for(2ms);
  }
}

bool PeerProcess::exited() const {
  std::lock_guard<std::mutex> g(mu_);
  return reaped_;
}

std::optional<NoteLine> parse_note(const std::string& line) {
  std::istringstream in(line);
  std::string tag;
  NoteLine n;
  if (!(in >> tag >> n.rank >> n.kind >> n.status >> n.request >> n.engine >> n.remote_rank >> n.count >>
        n.expected >> n.bytes) ||
      tag != "NOTE") {
    return std::nullopt;
  }
  return n;
}

std::function<bool(const std::string&)> note_is(const std::string& kind, const std::string& request, int64_t rank) {
  return [=](const std::string& l) {
    const auto n = parse_note(l);
    return n && n->kind == kind && (request.empty() || n->request == request) &&
           (rank < 0 || n->rank == static_cast<uint32_t>(rank));
  };
}

std::string test_peer_path() { return PDKV_TEST_PEER; }

}  // namespace e2e
