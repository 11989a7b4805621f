#include "demo_coordinator.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "demo_rank.hpp"
#include "demo_requests.hpp"
#include "demo_wire.hpp"
#include "pdkv/core/error.hpp"

extern char** environ;

namespace pdkv::cli::demo {

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A pipe whose ends sit above the descriptors the child's dup2s write (0..4), close-on-exec.
void make_pipe(int fds[2]) {
  int raw[2];
  if (::pipe2(raw, O_CLOEXEC) != 0) core::fail(core::Status::Io, std::string("pipe2: ") + std::strerror(errno));
  for (int i = 0; i < 2; ++i) {
    fds[i] = ::fcntl(raw[i], F_DUPFD_CLOEXEC, 10);
    ::close(raw[i]);
    if (fds[i] < 0) core::fail(core::Status::Io, std::string("fcntl: ") + std::strerror(errno));
  }
}

// A log line without what changes between repeats of it: UCX's "[time] [host:pid:tid]" prefix
// and hexadecimal addresses.
std::string log_kind(const std::string& line) {
  std::string out;
  size_t i = 0;
  while (i < line.size() && (line[i] == '[' || line[i] == ' ')) {
    if (line[i] == ' ') {
      ++i;
      continue;
    }
    const size_t close = line.find(']', i);
    if (close == std::string::npos) break;
    i = close + 1;
  }
  for (; i < line.size(); ++i) {
    if (line[i] == '0' && i + 1 < line.size() && line[i + 1] == 'x') {
      out += "0x?";
      i += 2;
      while (i < line.size() && std::isxdigit(static_cast<unsigned char>(line[i]))) ++i;
      --i;
      continue;
    }
    out += line[i];
  }
  return out;
}

struct Proc {
  bool prefill = false;
  uint32_t rank = 0;
  std::string name;  // "P rank 2"
  pid_t pid = -1;
  int to = -1;
  std::unique_ptr<LineReader> from, log;
  bool alive = false;    // its message pipe is open and it was not killed
  bool killed = false;   // by --kill-prefill-after
  bool ready = false, connected = false, final = false;
  json ready_msg;
  std::vector<uint32_t> targets;  // D: the P ranks it handshakes with
  std::string log_partial;
  std::map<std::string, uint64_t> seen;  // lines by kind (log_kind), and how many of each

  ~Proc() {
    if (to >= 0) ::close(to);
    if (from) ::close(from->fd());
    if (log) ::close(log->fd());
  }
};

// One D rank's report on one request.
struct DReport {
  bool ok = false;
  json msg;
};

struct Live {
  Request rq;
  Clock::time_point dispatched;
  std::vector<std::optional<DReport>> d;
  std::vector<bool> p_freed;
  std::vector<bool> release_sent, released;
  std::vector<bool> abort_sent;  // per P rank
};

class Coordinator {
 public:
  Coordinator(const Options& o, const Layout& l) : o_(o), l_(l), stream_(o, l) {
    tty_ = !o.json && ::isatty(STDOUT_FILENO) == 1;
  }
  ~Coordinator() { teardown(); }

  Result run();

 private:
  void spawn(bool prefill, uint32_t rank);
  void send_to(Proc& p, const json& msg) {
    if (p.alive && !send(p.to, msg)) p.alive = false;
  }
  // Polls every rank's pipes for up to timeout_ms and handles what arrived.
  void pump(int timeout_ms);
  void on_message(Proc& p, const json& msg);
  void on_log(Proc& p);
  void on_eof(Proc& p);
  void print_rank_line(Proc& p, const std::string& text);
  template <typename Pred>
  void wait_for(Pred done, double seconds, const std::string& what);
  void dispatch();
  void maybe_close(Live& live);
  void close(Live& live);
  void kill_prefill();
  void finish_ranks();
  void teardown();
  // Output: a plain log line (above the live line on a terminal).
  void event(const std::string& line);
  void status_line(bool force);
  void problem(const std::string& where, const std::string& message) {
    r_.problems.emplace_back(ErrorKind::Failed, where, message);
    event("FAILED: " + where + ": " + message);
  }

  const Options& o_;
  const Layout& l_;
  RequestStream stream_;
  std::unique_ptr<BlockPool> d_pool_, p_pool_;
  std::vector<std::unique_ptr<Proc>> procs_;  // P ranks, then D ranks
  std::map<std::string, Live> live_;
  std::optional<Request> next_;
  uint32_t dispatched_ = 0, closed_ = 0;
  bool stop_ = false;  // a problem ended the run early
  bool killed_ = false;
  Clock::time_point kill_time_{};
  Clock::time_point start_{}, last_event_{}, last_status_{};
  bool tty_ = false;
  bool status_shown_ = false;
  Result r_;

  Proc& prank(uint32_t r) { return *procs_[r]; }
  Proc& drank(uint32_t r) { return *procs_[l_.prefill.tp + r]; }
  bool affected(uint32_t d) const {
    if (!killed_) return false;
    const auto& t = procs_[l_.prefill.tp + d]->targets;
    return std::find(t.begin(), t.end(), o_.kill_rank()) != t.end();
  }
};

void Coordinator::spawn(bool prefill, uint32_t rank) {
  auto p = std::make_unique<Proc>();
  p->prefill = prefill;
  p->rank = rank;
  p->name = std::string(prefill ? "P" : "D") + " rank " + std::to_string(rank);
  int to[2], from[2], log[2];
  make_pipe(to);
  make_pipe(from);
  make_pipe(log);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, log[1], 1);
  posix_spawn_file_actions_adddup2(&fa, log[1], 2);
  posix_spawn_file_actions_adddup2(&fa, to[0], kRankInFd);
  posix_spawn_file_actions_adddup2(&fa, from[1], kRankOutFd);
  const std::string role = prefill ? "prefill" : "decode", r = std::to_string(rank);
  char* argv[] = {const_cast<char*>("pdkv"), const_cast<char*>(kRankCommand), const_cast<char*>(role.c_str()),
                  const_cast<char*>(r.c_str()), nullptr};
  const int rc = ::posix_spawn(&p->pid, "/proc/self/exe", &fa, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(to[0]);
  ::close(from[1]);
  ::close(log[1]);
  p->to = to[1];
  p->from = std::make_unique<LineReader>(from[0]);
  p->log = std::make_unique<LineReader>(log[0]);
  if (rc != 0) {
    throw CliError(ErrorKind::Internal, p->name, std::string("cannot start the rank process: ") + std::strerror(rc));
  }
  p->alive = true;
  procs_.push_back(std::move(p));
}

void Coordinator::event(const std::string& line) {
  if (o_.json) return;
  if (tty_ && status_shown_) std::fputs("\r\033[K", stdout);
  std::fputs((line + "\n").c_str(), stdout);
  status_shown_ = false;
  if (tty_) status_line(true);
  std::fflush(stdout);
}

void Coordinator::status_line(bool force) {
  if (!tty_ || start_ == Clock::time_point{}) return;
  if (!force && Clock::now() - last_status_ < std::chrono::milliseconds(100)) return;
  last_status_ = Clock::now();
  const double s = std::max(1e-9, seconds_since(start_));
  char buf[256];
  std::snprintf(buf, sizeof buf, "\r\033[K[%u/%u requests done, %u failed, %zu in flight] %s moved  %.2f GB/s  %.1f s",
                closed_, o_.requests, r_.failed, live_.size(), gb(r_.bytes).c_str(), static_cast<double>(r_.bytes) / s / 1e9, s);
  std::fputs(buf, stdout);
  std::fflush(stdout);
  status_shown_ = true;
}

void Coordinator::pump(int timeout_ms) {
  std::vector<pollfd> fds;
  std::vector<std::pair<Proc*, bool>> who;  // (rank, is the log pipe)
  for (auto& p : procs_) {
    if (p->from && p->alive) {
      fds.push_back({p->from->fd(), POLLIN, 0});
      who.emplace_back(p.get(), false);
    }
    if (p->log && p->log->fd() >= 0) {
      fds.push_back({p->log->fd(), POLLIN, 0});
      who.emplace_back(p.get(), true);
    }
  }
  if (fds.empty()) return;
  const int n = ::poll(fds.data(), fds.size(), timeout_ms);
  if (n <= 0) return;
  for (size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents == 0) continue;
    Proc& p = *who[i].first;
    if (who[i].second) {
      on_log(p);
      continue;
    }
    if (!p.from->pump()) {
      on_eof(p);
      continue;
    }
    while (auto m = p.from->take()) on_message(p, *m);
  }
}

void Coordinator::on_log(Proc& p) {
  char buf[4096];
  const ssize_t n = ::read(p.log->fd(), buf, sizeof buf);
  if (n <= 0) {
    ::close(p.log->fd());
    p.log.reset();
    return;
  }
  p.log_partial.append(buf, static_cast<size_t>(n));
  size_t nl;
  while ((nl = p.log_partial.find('\n')) != std::string::npos) {
    const std::string text = p.log_partial.substr(0, nl);
    p.log_partial.erase(0, nl + 1);
    // UCX repeats a warning per object (e.g. every request a dead peer never returned): the
    // first of each kind is shown, the rest counted and summed up at the end.
    if (++p.seen[log_kind(text)] > 1) continue;
    print_rank_line(p, text);
  }
}

void Coordinator::print_rank_line(Proc& p, const std::string& text) {
  // Bounded: a chatty UCX must not grow the JSON document without limit.
  if (r_.rank_messages.size() < 200) r_.rank_messages.push_back(p.name + ": " + text);
  if (o_.json) return;
  if (tty_ && status_shown_) {
    std::fputs("\r\033[K", stdout);
    status_shown_ = false;
  }
  std::fflush(stdout);
  std::fprintf(stderr, "[%s] %s\n", p.name.c_str(), text.c_str());
}

void Coordinator::on_eof(Proc& p) {
  const bool expected = p.killed || p.final;
  p.alive = false;
  if (!expected) {
    int status = 0;
    std::string how = "exited";
    if (::waitpid(p.pid, &status, 0) == p.pid) {
      p.pid = -1;
      how = WIFSIGNALED(status) ? "was killed by signal " + std::to_string(WTERMSIG(status))
                                : "exited with status " + std::to_string(WEXITSTATUS(status));
    }
    problem(p.name, "the rank process " + how + " unexpectedly");
    stop_ = true;
  }
}

void Coordinator::on_message(Proc& p, const json& msg) {
  last_event_ = Clock::now();
  const std::string type = msg.at("type").get<std::string>();
  if (type == "error") {
    const std::string kind = msg.at("kind").get<std::string>();
    const std::optional<std::string> status =
        msg.at("status").is_null() ? std::nullopt : std::optional<std::string>(msg.at("status").get<std::string>());
    const std::string message = p.name + ": " + msg.at("message").get<std::string>();
    if (start_ == Clock::time_point{}) {
      // Set-up: the rank's own verdict (a configuration error for a model it cannot lay out).
      const ErrorKind k = kind == "configuration" ? ErrorKind::Configuration
                          : kind == "usage"       ? ErrorKind::Usage
                                                  : ErrorKind::Internal;
      throw CliError(k, msg.at("where").get<std::string>(), message, status);
    }
    problem(p.name, msg.at("message").get<std::string>());
    stop_ = true;
    return;
  }
  if (type == "ready") {
    p.ready = true;
    p.ready_msg = msg;
    return;
  }
  if (type == "connected") {
    p.connected = true;
    p.targets = msg.at("targets").get<std::vector<uint32_t>>();
    return;
  }
  if (type == "final") {
    p.final = true;
    r_.scanned_bytes += msg.at("scanned_bytes").get<uint64_t>();
    const uint64_t bad = msg.at("mismatched_regions").get<uint64_t>();
    r_.scan_mismatches += bad;
    if (bad != 0) problem(p.name, "its memory changed outside the transfers: " + msg.at("mismatch").get<std::string>());
    return;
  }
  const std::string id = msg.at("id").get<std::string>();
  auto it = live_.find(id);
  if (it == live_.end()) return;  // a late word on a request already closed
  Live& live = it->second;
  if (type == "done" && !p.prefill) {
    live.d[p.rank] = DReport{msg.at("ok").get<bool>(), msg};
    if (!live.d[p.rank]->ok && !o_.write) {
      // The request failed on this D rank, which may never notify the P ranks it handshakes
      // with (a post refused before anything moved): they may free the request's blocks now
      // instead of when their lease expires. Under WRITE nothing is aborted: a P rank's push
      // is over only when it is flushed (DONE), and a cancelled one may still land bytes in
      // D's memory afterwards (demo notes D2), so the surviving P ranks push to the end.
      for (uint32_t r : p.targets) {
        if (!live.p_freed[r] && !live.abort_sent[r]) {
          live.abort_sent[r] = true;
          send_to(prank(r), {{"type", "abort"}, {"id", id}});
        }
      }
    }
  } else if (type == "freed" && p.prefill) {
    live.p_freed[p.rank] = true;
  } else if (type == "released" && !p.prefill) {
    live.released[p.rank] = true;
  }
  maybe_close(live);
}

void Coordinator::maybe_close(Live& live) {
  for (uint32_t d = 0; d < l_.decode.tp; ++d) {
    if (!live.d[d] && drank(d).alive) return;
  }
  for (uint32_t r = 0; r < l_.prefill.tp; ++r) {
    if (!live.p_freed[r] && prank(r).alive) return;
  }
  // Every writer is done: D ranks that failed get their blocks back to their own bytes.
  bool waiting = false;
  for (uint32_t d = 0; d < l_.decode.tp; ++d) {
    if (!live.d[d] || live.d[d]->ok || !drank(d).alive) continue;
    if (!live.release_sent[d]) {
      live.release_sent[d] = true;
      send_to(drank(d), {{"type", "release"}, {"id", live.rq.id}});
    }
    if (!live.released[d] && drank(d).alive) waiting = true;
  }
  if (!waiting) close(live);
}

void Coordinator::close(Live& live) {
  const Request& rq = live.rq;
  bool ok = true;
  double ms = 0;
  uint64_t bytes = 0;
  std::string failures;
  for (uint32_t d = 0; d < l_.decode.tp; ++d) {
    const std::string who = "request " + rq.id + " on D rank " + std::to_string(d);
    if (!live.d[d]) {
      ok = false;
      failures += " D rank " + std::to_string(d) + ": no report (the rank died);";
      continue;
    }
    const json& m = live.d[d]->msg;
    if (m.contains("checked_bytes")) r_.verified_bytes += m.at("checked_bytes").get<uint64_t>();
    if (m.contains("mismatches")) r_.mismatches += m.at("mismatches").get<uint64_t>();
    if (live.d[d]->ok) {
      failures += " D rank " + std::to_string(d) + ": verified;";
      ++r_.transfers_ok;
      bytes += m.at("bytes").get<uint64_t>();
      r_.attention_bytes += m.at("attention_bytes").get<uint64_t>();
      r_.mamba_bytes += m.at("mamba_bytes").get<uint64_t>();
      r_.descriptors_before += m.at("pieces_before").get<uint64_t>();
      r_.descriptors_after += m.at("pieces_after").get<uint64_t>();
      ms = std::max(ms, static_cast<double>(m.at("transfer_us").get<uint64_t>()) / 1000.0);
      if (killed_ && !affected(d)) ++r_.kill->unaffected_transfers_after_kill;
      continue;
    }
    ok = false;
    ++r_.transfers_failed;
    const std::string stage = m.at("stage").get<std::string>();
    const std::string status = m.at("status").get<std::string>();
    const uint64_t fail_ms = m.at("fail_us").get<uint64_t>() / 1000;
    failures += " D rank " + std::to_string(d) + ": " + status + " after " + std::to_string(fail_ms) + " ms (" + stage +
                ");";
    if (stage == "verify" || stage == "compile") {
      problem(who, m.at("message").get<std::string>());
    } else if (!affected(d)) {
      problem(who, "failed although no rank it depends on was killed: " + status + ": " +
                       m.at("message").get<std::string>());
    } else if (fail_ms > o_.deadline_ms + 1000) {
      problem(who, "failed after " + std::to_string(fail_ms) + " ms, past its " + std::to_string(o_.deadline_ms) +
                       " ms deadline: " + status);
    } else {
      ++r_.kill->failed_transfers;
      ++r_.kill->failure_statuses[status];
      r_.kill->max_failure_ms = std::max(r_.kill->max_failure_ms, fail_ms);
    }
  }
  r_.bytes += bytes;
  switch (rq.kind) {
    case HitKind::None:
      ++r_.no_hit;
      break;
    case HitKind::Partial:
      ++r_.partial_hit;
      break;
    case HitKind::Full:
      ++r_.full_hit;
      break;
  }
  if (rq.placeholders) ++r_.with_placeholders;
  char line[512];
  if (ok) {
    ++r_.completed;
    r_.request_ms.push_back(ms);
    std::snprintf(line, sizeof line, "request %u/%u  %6llu tokens  %-7s hit %6llu  %9s  %8.2f ms  verified", rq.index + 1,
                  o_.requests, static_cast<unsigned long long>(rq.tokens), hit_kind_name(rq.kind),
                  static_cast<unsigned long long>(rq.hit), gb(bytes).c_str(), ms);
  } else {
    ++r_.failed;
    std::snprintf(line, sizeof line, "request %u/%u  %6llu tokens  %-7s hit %6llu  FAILED:%s", rq.index + 1, o_.requests,
                  static_cast<unsigned long long>(rq.tokens), hit_kind_name(rq.kind),
                  static_cast<unsigned long long>(rq.hit), failures.c_str());
  }
  if (!tty_ || !ok) event(line);
  d_pool_->give(rq.d_blocks);
  p_pool_->give(rq.p_blocks);
  ++closed_;
  live_.erase(rq.id);
}

template <typename Pred>
void Coordinator::wait_for(Pred done, double seconds, const std::string& what) {
  const auto t0 = Clock::now();
  while (!done()) {
    for (auto& p : procs_) {
      if (!p->alive && !p->killed && !p->final) {
        throw CliError(ErrorKind::Internal, p->name, "the rank process ended while " + what);
      }
    }
    if (seconds_since(t0) > seconds) {
      throw CliError(ErrorKind::Internal, "demo", "the ranks did not finish " + what + " within " +
                                                      std::to_string(static_cast<int>(seconds)) + " s");
    }
    pump(100);
  }
}

void Coordinator::dispatch() {
  while (!stop_ && dispatched_ < o_.requests && live_.size() < o_.concurrency) {
    if (!next_) next_ = stream_.next();
    if (stream_.d_blocks_needed(*next_) > d_pool_->available() || stream_.p_blocks_needed(*next_) > p_pool_->available()) {
      return;  // blocks come back as requests end
    }
    Request rq = std::move(*next_);
    next_.reset();
    stream_.build(rq, *d_pool_, *p_pool_);
    const json msg = request_message(rq);
    Live live;
    live.rq = std::move(rq);
    live.dispatched = Clock::now();
    live.d.resize(l_.decode.tp);
    live.p_freed.assign(l_.prefill.tp, false);
    live.abort_sent.assign(l_.prefill.tp, false);
    live.release_sent.assign(l_.decode.tp, false);
    live.released.assign(l_.decode.tp, false);
    const std::string id = live.rq.id;
    live_.emplace(id, std::move(live));
    // P first: its ranks lease (READ) or start pushing (WRITE) while D compiles.
    for (uint32_t r = 0; r < l_.prefill.tp; ++r) send_to(prank(r), msg);
    for (uint32_t d = 0; d < l_.decode.tp; ++d) send_to(drank(d), msg);
    ++dispatched_;
  }
}

void Coordinator::kill_prefill() {
  Proc& p = prank(o_.kill_rank());
  ::kill(p.pid, SIGKILL);
  p.killed = true;
  p.alive = false;
  killed_ = true;
  kill_time_ = Clock::now();
  KillResult k;
  k.prefill_rank = o_.kill_rank();
  k.after_requests = closed_;
  for (uint32_t d = 0; d < l_.decode.tp; ++d) {
    if (affected(d)) k.affected_decode_ranks.push_back(d);
  }
  r_.kill = k;
  std::string ds;
  for (uint32_t d : k.affected_decode_ranks) ds += (ds.empty() ? "" : ", ") + std::to_string(d);
  event("killed P rank " + std::to_string(k.prefill_rank) + " (SIGKILL) after " + std::to_string(closed_) +
        " requests; D rank(s) " + ds + " depend on it, their requests now fail; the others go on");
  // The requests still waiting for it: nothing more comes from it.
  std::vector<std::string> ids;
  for (auto& [id, live] : live_) ids.push_back(id);
  for (const auto& id : ids) {
    auto it = live_.find(id);
    if (it != live_.end()) maybe_close(it->second);
  }
}

void Coordinator::finish_ranks() {
  // D first: no transfer of theirs may still be reading from a P rank that goes away.
  for (bool prefill : {false, true}) {
    for (auto& p : procs_) {
      if (p->prefill == prefill && p->alive) send_to(*p, {{"type", "finish"}});
    }
    const auto t0 = Clock::now();
    while (seconds_since(t0) < 60) {
      bool all = true;
      for (auto& p : procs_) all = all && (p->prefill != prefill || !p->alive || p->final);
      if (all) break;
      pump(100);
    }
    for (auto& p : procs_) {
      if (p->prefill == prefill && p->alive && !p->final) problem(p->name, "did not finish within 60 s");
    }
  }
}

void Coordinator::teardown() {
  // Ranks that sent their final report exit on their own (given 10 s); any other is stopped.
  const auto t0 = Clock::now();
  for (auto& p : procs_) {
    if (p->pid <= 0) continue;
    int status = 0;
    bool stopped = false;
    while (::waitpid(p->pid, &status, WNOHANG) == 0) {
      if (!p->final || seconds_since(t0) > 10) {
        ::kill(p->pid, SIGKILL);
        ::waitpid(p->pid, &status, 0);
        stopped = true;
        break;
      }
      pollfd f{p->log ? p->log->fd() : -1, POLLIN, 0};
      if (::poll(&f, 1, 20) > 0 && p->log) on_log(*p);  // what it still prints on its way out
    }
    // After its final report a rank only shuts its agent down: a crash there, or a sanitizer's
    // report at exit, is a failure of the run too.
    if (p->final && (stopped || !WIFEXITED(status) || WEXITSTATUS(status) != 0)) {
      problem(p->name, stopped ? "did not exit within 10 s of its final report"
                       : WIFSIGNALED(status) ? "was killed by signal " + std::to_string(WTERMSIG(status)) +
                                                   " after its final report"
                                             : "exited with status " + std::to_string(WEXITSTATUS(status)) +
                                                   " after its final report");
    }
    p->pid = -1;
  }
  for (auto& p : procs_) {
    while (p->log) {  // the last lines of every rank, up to its end of file
      pollfd f{p->log->fd(), POLLIN, 0};
      if (::poll(&f, 1, 0) <= 0) break;
      on_log(*p);
    }
    for (auto& [kind, n] : p->seen) {
      if (n > 1) print_rank_line(*p, "(" + std::to_string(n - 1) + " more lines like: " + kind + ")");
      n = 1;
    }
  }
}

Result Coordinator::run() {
  r_.requests = o_.requests;
  r_.memory_bytes = demo_memory_bytes(o_, l_);
  d_pool_ = std::make_unique<BlockPool>(l_.decode.logical_blocks);
  p_pool_ = std::make_unique<BlockPool>(l_.prefill.logical_blocks);
  const auto setup0 = Clock::now();
  std::random_device rd;
  std::vector<uint8_t> key(32);
  for (auto& b : key) b = static_cast<uint8_t>(rd());
  for (uint32_t r = 0; r < l_.prefill.tp; ++r) spawn(true, r);
  for (uint32_t r = 0; r < l_.decode.tp; ++r) spawn(false, r);
  for (auto& p : procs_) {
    send_to(*p, {{"type", "init"},
                 {"role", p->prefill ? "prefill" : "decode"},
                 {"rank", p->rank},
                 {"model", o_.model},
                 {"prefill_tp", o_.prefill_tp},
                 {"decode_tp", o_.decode_tp},
                 {"cache_mode", static_cast<int>(o_.cache_mode)},
                 {"max_tokens", o_.max_tokens},
                 {"concurrency", o_.concurrency},
                 {"transport", transport_name(o_.transport)},
                 {"op", o_.write ? "write" : "read"},
                 {"deadline_ms", o_.deadline_ms},
                 {"key", to_hex(key)},
                 {"parent_pid", static_cast<int64_t>(::getpid())}});
  }
  wait_for([&] { return std::all_of(procs_.begin(), procs_.end(), [](const auto& p) { return p->ready; }); }, 120,
           "filling their memory");
  json peers{{"type", "peers"}, {"prefill", json::array()}, {"decode", json::array()}};
  for (auto& p : procs_) {
    peers[p->prefill ? "prefill" : "decode"].push_back(
        {{"address", p->ready_msg.at("address")}, {"metadata", p->ready_msg.at("metadata")}});
  }
  for (auto& p : procs_) send_to(*p, peers);
  wait_for([&] { return std::all_of(procs_.begin(), procs_.end(), [](const auto& p) { return p->connected; }); }, 60,
           "connecting");
  r_.setup_seconds = seconds_since(setup0);
  event("ranks ready in " + std::to_string(r_.setup_seconds).substr(0, 4) + " s: " + std::to_string(l_.prefill.tp) +
        " P and " + std::to_string(l_.decode.tp) + " D processes connected; running " + std::to_string(o_.requests) +
        " requests");

  start_ = last_event_ = Clock::now();
  const auto stall = std::chrono::milliseconds(3 * o_.deadline_ms) + std::chrono::seconds(10);
  while (!stop_ && closed_ < o_.requests) {
    if (o_.kill_prefill_after && !killed_ && closed_ >= *o_.kill_prefill_after) kill_prefill();
    dispatch();
    pump(tty_ ? 100 : 200);
    status_line(false);
    if (Clock::now() - last_event_ > stall) {
      problem("demo", "no rank reported anything for " +
                          std::to_string(std::chrono::duration_cast<std::chrono::seconds>(stall).count()) +
                          " s with " + std::to_string(live_.size()) + " requests in flight");
      stop_ = true;
    }
  }
  r_.seconds = seconds_since(start_);
  if (tty_ && status_shown_) {
    status_line(true);
    std::fputs("\n", stdout);
    status_shown_ = false;
  }
  if (stop_) r_.failed += o_.requests - closed_;  // never ran, or never ended
  finish_ranks();
  teardown();
  std::sort(r_.request_ms.begin(), r_.request_ms.end());
  return std::move(r_);
}

}  // namespace

uint64_t demo_memory_bytes(const Options& o, const Layout& l) {
  return uint64_t{o.prefill_tp} * l.prefill.bytes_per_rank + uint64_t{o.decode_tp} * l.decode.bytes_per_rank;
}

uint64_t available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  uint64_t kib = 0;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

Result run_coordinator(const Options& o, const Layout& l) {
  ::signal(SIGPIPE, SIG_IGN);  // a rank that died is noticed on its pipe, not by a signal
  Coordinator c(o, l);
  return c.run();
}

}  // namespace pdkv::cli::demo
