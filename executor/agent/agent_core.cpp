// Agent lifecycle, memory registration, the progress loop and the notification queue.
#include "agent/agent_core.hpp"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace pdkv::exec {

using core::Status;

namespace {

int make_eventfd() {
  const int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0) throw core::Error(Status::Io, std::string("eventfd: ") + std::strerror(errno), core::CauseDomain::Errno, errno);
  return fd;
}

int make_epoll() {
  const int fd = ::epoll_create1(EPOLL_CLOEXEC);
  if (fd < 0) throw core::Error(Status::Io, std::string("epoll_create1: ") + std::strerror(errno), core::CauseDomain::Errno, errno);
  return fd;
}

void epoll_add(int ep, int fd, uint64_t key) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = key;
  if (::epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
    throw core::Error(Status::Io, std::string("epoll_ctl: ") + std::strerror(errno), core::CauseDomain::Errno, errno);
  }
}

void signal_fd(int fd) {
  if (fd < 0) return;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t r = ::write(fd, &one, sizeof one);
}

void drain_fd(int fd) {
  uint64_t v;
  [[maybe_unused]] ssize_t r = ::read(fd, &v, sizeof v);
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

}  // namespace

void check_request_id(std::string_view id, Status status, std::string_view what) {
  if (id.empty() || id.size() > kMaxRequestIdBytes) {
    core::fail(status, std::string(what) + " must be 1.." + std::to_string(kMaxRequestIdBytes) + " bytes, got " +
                           std::to_string(id.size()));
  }
  if (const size_t nul = id.find('\0'); nul != std::string_view::npos) {
    core::fail(status, std::string(what) + " has a NUL byte at offset " + std::to_string(nul) +
                           " (ids travel to C callers as C strings)");
  }
}

AgentCore::AgentCore(AgentOptions options) : opt_(std::move(options)) {
  core::check_metadata(opt_.metadata, Status::InvalidArgument);
  host_id_ = host_identity();
  regs_.resize(opt_.metadata.regions.size());
  cma_probe_ = std::make_unique<cma::Probe>();
  const unsigned copy_threads = opt_.cma_copy_threads != 0 ? std::min<uint32_t>(opt_.cma_copy_threads, 16)
                                : std::thread::hardware_concurrency() >= 4 ? 2u
                                                                            : 1u;
  cma_copier_ = std::make_unique<cma::Copier>(copy_threads);
  cma_batch_bytes_ = cma_batch_bytes(copy_threads);
  // UCX only registers memory and packs region keys (no worker: no byte moves through UCX).
  // Its tcp transport list is the one that needs nothing of the host to initialise.
  context_ = std::make_unique<UcxContext>(TransportMode::Tcp);
  listener_.emplace(opt_.listen);
  listen_text_ = listener_->address().to_string();

  control_epoll_ = make_epoll();
  control_wake_ = make_eventfd();
  progress_epoll_ = make_epoll();
  progress_wake_ = make_eventfd();
  notify_fd_ = make_eventfd();
  user_epoll_ = make_epoll();
  work_fd_ = make_eventfd();
  epoll_add(control_epoll_, listener_->fd(), 1);
  epoll_add(control_epoll_, control_wake_, 2);
  epoll_add(progress_epoll_, progress_wake_, 2);
  epoll_add(user_epoll_, notify_fd_, 1);
  if (opt_.progress == ProgressMode::Caller) {
    // The work a progress call has (work_fd_, the tcp data connections) sits in an epoll of its
    // own, nested in the event fd's: a caller-mode wait sleeps on it alone.
    work_epoll_ = make_epoll();
    epoll_add(work_epoll_, work_fd_, 3);
    epoll_add(user_epoll_, work_epoll_, 5);
  }
}

AgentCore::~AgentCore() {
  shutdown();
  close_fd(control_epoll_);
  close_fd(control_wake_);
  close_fd(progress_epoll_);
  close_fd(progress_wake_);
  close_fd(notify_fd_);
  close_fd(user_epoll_);
  close_fd(work_epoll_);
  close_fd(work_fd_);
}

TransferJob::~TransferJob() {
  if (done_fd >= 0) ::close(done_fd);
}

void AgentCore::start() {
  control_thread_ = std::thread([this] { control_thread_main(); });
  if (opt_.progress == ProgressMode::Thread) {
    progress_thread_ = std::thread([this] { progress_thread_main(); });
  }
}

void AgentCore::shutdown() {
  if (stopping_.exchange(true)) {
    // A second call (the destructor after pdkv_agent_free) finds everything released.
    if (control_thread_.joinable()) control_thread_.join();
    if (progress_thread_.joinable()) progress_thread_.join();
    return;
  }
  {
    // First of all: peers copying with cross-memory attach check this probe around every batch,
    // so none starts a batch into or out of this process's memory from here on.
    std::lock_guard<std::mutex> g(mu_);
    cma_probe_->revoke();
  }
  signal_fd(control_wake_);
  signal_fd(progress_wake_);
  if (progress_thread_.joinable()) progress_thread_.join();
  if (control_thread_.joinable()) control_thread_.join();
  // Interrupt inbound handshakes blocked on their sockets, then wait for them.
  std::list<std::shared_ptr<InboundSlot>> inbound;
  {
    std::lock_guard<std::mutex> g(inbound_mu_);
    inbound.swap(inbound_);
  }
  for (auto& slot : inbound) {
    std::lock_guard<std::mutex> g(slot->m);
    if (slot->fd >= 0) ::shutdown(slot->fd, SHUT_RDWR);
  }
  for (auto& slot : inbound) {
    if (slot->thread.joinable()) slot->thread.join();
  }

  std::unique_lock<std::mutex> g(mu_);
  // A caller-progress thread may be copying a cross-memory-attach batch or be in a tcp data
  // connection's system call without the lock: wait for it (both are bounded; none starts once
  // stopping_ is set), so no byte moves into or out of the caller's memory after the agent is
  // freed.
  unlocked_idle_.wait(g, [&] { return unlocked_io_ == 0; });
  stopped_ = true;
  for (auto& job : active_) fail_job_locked(*job, Status::Shutdown, "the agent was shut down");
  std::vector<std::shared_ptr<PeerConn>> peers;
  for (auto& [key, p] : peers_) peers.push_back(p);
  for (auto& p : peers) lose_peer_locked(p, Status::Shutdown, "the agent was shut down", true);
  // Losing a peer returned its tcp batches at once (no progress call holds a connection any more);
  // cma batches being copied were waited for above (unlocked_idle_).
  for (auto& job : active_) {
    if (!job->finalized) finalize_locked(*job);
  }
  // Jobs with a cma batch still being copied stay in zombies_ (shutdown waits for those batches).
  for (auto& job : active_) zombies_.push_back(job);
  active_.clear();
  for (auto& p : dead_peers_) {
    if (p->channel) p->channel->close();
  }
  dead_peers_.clear();
  by_id_.clear();
  for (auto& r : regs_) {
    if (r) r->end();
  }
  regs_.clear();
  if (listener_) listener_->close();
  context_.reset();
}

AgentInfo AgentCore::info() const {
  std::lock_guard<std::mutex> g(mu_);
  AgentInfo i;
  i.engine_id = opt_.metadata.engine_id;
  i.tp_rank = opt_.metadata.tp_rank;
  i.tp_size = opt_.metadata.tp_size;
  i.listen = listener_ ? listener_->address() : opt_.listen;
  i.transport = opt_.transport;
  i.progress = opt_.progress;
  i.copy_threads = cma_copier_->threads();
  i.num_peers = peers_.size();
  for (const auto& j : active_) i.transfers_in_flight += j->finalized ? 0 : 1;
  i.progress_rounds = progress_rounds_.load(std::memory_order_relaxed);
  i.control_rounds = control_rounds_.load(std::memory_order_relaxed);
  return i;
}

// ---- memory ----

std::shared_ptr<Registration> AgentCore::register_memory(uint32_t region, uint64_t address,
                                                         uint64_t length, MemoryType type, int device) {
  const auto& regions = opt_.metadata.regions;
  if (region >= regions.size()) {
    core::fail(Status::InvalidArgument, "region " + std::to_string(region) +
                                            " does not exist: the metadata has " +
                                            std::to_string(regions.size()) + " regions");
  }
  const core::Region& r = regions[region].region;
  const uint64_t want_len = r.block_len * r.num_blocks;  // check_metadata bounded both
  if (address != r.base || length != want_len) {
    core::fail(Status::InvalidArgument,
               "region " + std::to_string(region) + ": registered range [" + std::to_string(address) +
                   ", +" + std::to_string(length) + ") must equal the advertised range [" +
                   std::to_string(r.base) + ", +" + std::to_string(want_len) + ")");
  }
  if (type != MemoryType::Host && type != MemoryType::Cuda) {
    core::fail(Status::InvalidArgument,
               "memory type " + std::to_string(static_cast<int>(type)) + " is not host (0) or cuda (1)");
  }
  if (type == MemoryType::Host && device != 0) {
    core::fail(Status::InvalidArgument, "device " + std::to_string(device) + " applies to CUDA memory only");
  }
  if (device < 0) core::fail(Status::InvalidArgument, "device " + std::to_string(device) + " is not a CUDA ordinal");
  auto reg = std::make_shared<Registration>();
  reg->region = region;
  reg->base = address;
  reg->length = length;
  reg->type = type;
  reg->device = device;
  if (type == MemoryType::Cuda) {
    // Asked of the driver before the lock (it may take a while): every byte must be device memory
    // of that device, so a staged copy never reaches anything else.
    if (length == 0) core::fail(Status::InvalidArgument, "region " + std::to_string(region) + " has no bytes to register");
    reg->staging = device::backend();
    try {
      reg->staging->check_range(address, length, device);
    } catch (const core::Error& e) {
      throw core::Error(e.status(), "region " + std::to_string(region) + " registered as CUDA device " +
                                        std::to_string(device) + " memory: " + e.what(),
                        e.cause_domain(), e.cause_code());
    }
  }
  std::lock_guard<std::mutex> g(mu_);
  if (stopped_) core::fail(Status::Shutdown, "the agent was shut down");
  if (regs_[region] && regs_[region]->live) {
    core::fail(Status::Busy, "region " + std::to_string(region) + " is already registered");
  }
  if (type == MemoryType::Host) {
    reg->ucx.emplace(*context_, reinterpret_cast<void*>(static_cast<uintptr_t>(address)),
                     static_cast<size_t>(length), type);
  }
  reg->live = true;
  regs_[region] = reg;
  return reg;
}

void AgentCore::deregister(const std::shared_ptr<Registration>& reg) {
  std::lock_guard<std::mutex> g(mu_);
  if (!reg->live) return;
  if (reg->busy != 0) {
    core::fail(Status::Busy, "region " + std::to_string(reg->region) + " is in use by " +
                                 std::to_string(reg->busy) +
                                 " transfer(s) whose operations may still touch it");
  }
  end_registration_locked(reg);
}

void AgentCore::release(const std::shared_ptr<Registration>& reg) {
  std::lock_guard<std::mutex> g(mu_);
  if (!reg->live) return;
  if (reg->busy != 0) {
    reg->release_when_idle = true;
    return;
  }
  end_registration_locked(reg);
}

void AgentCore::end_registration_locked(const std::shared_ptr<Registration>& reg) {
  reg->end();
  if (reg->region < regs_.size() && regs_[reg->region] == reg) regs_[reg->region].reset();
}

void AgentCore::unbusy_locked(const std::shared_ptr<Registration>& reg) {
  if (reg->busy > 0) --reg->busy;
  if (reg->busy == 0 && reg->release_when_idle && reg->live) end_registration_locked(reg);
}

void AgentCore::release_registrations_locked(TransferJob& job) {
  if (job.released) return;
  job.released = true;
  for (auto& reg : job.local_regs) {
    unbusy_locked(reg);
  }
}

// ---- progress ----

unsigned AgentCore::progress_locked(std::unique_lock<std::mutex>& g) {
  if (stopped_) return 0;
  unsigned total = 0;
  // tcp data connections: start batches, send, receive (bounded per peer and round; the system
  // calls without the lock).
  total += tcp_progress(g);
  // A cma copy found the process gone: the peer is lost (otherwise the control channel's
  // heartbeats and the data connection's socket errors tell).
  std::vector<std::shared_ptr<PeerConn>> failed;
  for (auto& [key, p] : peers_) {
    if (!p->record->connected) failed.push_back(p);
  }
  for (auto& p : failed) lose_peer_locked(p, Status::PeerLost, "its transfers found it gone", false);
  for (size_t i = 0; i < active_.size(); ++i) {
    auto job = active_[i];
    check_final_locked(*job);
  }
  check_deadlines_locked(Clock::now());
  // Drop jobs that are final and drained.
  std::erase_if(active_, [](const std::shared_ptr<TransferJob>& j) { return j->finalized && j->released; });
  std::erase_if(zombies_, [](const std::shared_ptr<TransferJob>& j) { return j->released; });
  reap_dead_peers_locked();
  return total;
}

unsigned AgentCore::progress() {
  progress_rounds_.fetch_add(1, std::memory_order_relaxed);
  std::unique_lock<std::mutex> g(mu_);
  if (stopped_) core::fail(Status::Shutdown, "the agent was shut down");
  unsigned n = progress_locked(g);
  n += run_cma_batches(g);
  if (stopped_) return n;  // shut down while a batch was copied without the lock
  settle_work_fd_locked();
  return n;
}

void AgentCore::wake_progress() { signal_fd(progress_wake_); }

void AgentCore::signal_work() {
  if (opt_.progress != ProgressMode::Caller) return;  // nobody watches it
  work_fd_signaled_ = true;
  signal_fd(work_fd_);
}

// After a progress call: readable exactly while the next call has work no socket announces (a cma
// batch to copy, or a tcp window with room for a batch, e.g. after answers emptied it). A lane
// whose batch another progress call is copying, or whose peer has no room or is claimed by another
// call, is that call's to announce: it settles this fd again when it ends.
void AgentCore::settle_work_fd_locked() {
  if (opt_.progress != ProgressMode::Caller) return;
  bool pending = false;
  for (const auto& job : active_) {
    if (job->finalized || job->stopping()) continue;
    for (const auto& lane : job->lanes) {
      const PeerConn& peer = *lane.peer;
      if (lane.hold) continue;  // a WRITE waiting for D's lease answer
      if (lane.cma && lane.cma_next < lane.cma_ops.size() && !lane.cma_busy &&
          peer.cma_segments < opt_.max_outstanding) {
        pending = true;
      }
      if (lane.tcp && lane.tcp_next < lane.tcp_ops.size() && lane.tcp_outstanding < kTcpWindow &&
          peer.tcp_pieces < opt_.max_outstanding && peer.tcp && !peer.tcp->io && !peer.lost) {
        pending = true;
      }
    }
    if (pending) break;
  }
  if (pending && !work_fd_signaled_) {
    signal_work();
  } else if (!pending && work_fd_signaled_) {
    drain_fd(work_fd_);
    work_fd_signaled_ = false;
  }
}

void AgentCore::progress_thread_main() {
  while (!stopping_.load()) {
    try {
      if (!progress_round()) break;
    } catch (const std::exception&) {
      // e.g. no memory: an exception leaving this thread would terminate the process. Try
      // again after a pause (deadlines are also enforced by the control thread).
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

// One round of the progress thread; false once the agent is stopped.
bool AgentCore::progress_round() {
  progress_rounds_.fetch_add(1, std::memory_order_relaxed);  // not through progress(): counted once
  unsigned n = 0;
  Clock::time_point next_deadline = Clock::now() + std::chrono::milliseconds(100);
  {
    std::unique_lock<std::mutex> g(mu_);
    n = progress_locked(g);
    n += run_cma_batches(g);
    if (stopped_) return false;
    for (const auto& j : active_) {
      if (j->finalized) continue;
      next_deadline = std::min(next_deadline, j->deadline);
      if (j->fail_status == Status::PeerLost && j->inflight != 0) {
        next_deadline = std::min(next_deadline, j->stopped_at + kCancelGrace);
      }
    }
  }
  // A round that completed something may have made room for more (a window, a queue): go on.
  if (n != 0) return true;
  // Nothing to do until something happens: sleep in epoll until a data connection is readable
  // (or writable with frames queued), a post, cancel or shutdown wakes this thread, or the next
  // deadline (at most 100 ms, a safety net: every change that needs this thread wakes it). cma
  // batches never wait here: a round copies one per lane, so n != 0 while any is pending.
  const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_deadline - Clock::now());
  epoll_event evs[4];
  const int k = ::epoll_wait(progress_epoll_, evs, 4, static_cast<int>(std::max<int64_t>(1, wait.count())));
  for (int i = 0; i < k; ++i) {
    if (evs[i].data.u64 == 2) drain_fd(progress_wake_);
  }
  return true;
}

// ---- notifications ----

namespace {
// What a queued notification costs, for the budget below.
size_t note_cost(const Notification& n) { return sizeof(Notification) + n.request_id.size() + n.engine_id.size(); }
}  // namespace

bool AgentCore::note_room_for_peer_locked(const std::string& request_id) const {
  return notes_.size() < kMaxPeerNotes &&
         notes_bytes_ + sizeof(Notification) + request_id.size() + kMaxEngineIdBytes <= kMaxPeerNoteBytes;
}

void AgentCore::push_note_locked(Notification n) {
  notes_bytes_ += note_cost(n);
  notes_.push_back(std::move(n));
  // Peers' notifications stop at the budget (handle_notify_locked); this agent's own (leases,
  // peers connecting and leaving) are never refused, but a caller that never polls must not let
  // them grow without limit either: past the hard cap the oldest go.
  while (notes_.size() > kMaxNotes) {
    notes_bytes_ -= note_cost(notes_.front());
    notes_.pop_front();
  }
  signal_fd(notify_fd_);
}

std::vector<Notification> AgentCore::poll_notifications() {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<Notification> out(std::make_move_iterator(notes_.begin()),
                                std::make_move_iterator(notes_.end()));
  notes_.clear();
  notes_bytes_ = 0;
  drain_fd(notify_fd_);
  return out;
}

void AgentCore::lease(const std::string& request_id, uint32_t expected,
                      std::chrono::milliseconds ttl) {
  check_request_id(request_id, Status::InvalidArgument, "request_id");
  if (expected == 0) core::fail(Status::InvalidArgument, "expected must be >= 1, got 0");
  if (ttl.count() <= 0) core::fail(Status::InvalidArgument, "ttl_ms must be > 0, got 0");
  std::lock_guard<std::mutex> g(mu_);
  if (stopped_) core::fail(Status::Shutdown, "the agent was shut down");
  const auto now = Clock::now();
  const auto deadline = deadline_after(now, ttl);
  // The ttl as the clock counts it, saturated like the deadline (a huge ttl in ms overflows the
  // clock's nanoseconds): what a reader's keep-alive extends the lease by.
  auto done = leases_.lease(request_id, expected, deadline, deadline - now);
  if (done) {
    push_note_locked(std::move(*done));
  } else {
    wake_control_at_locked(deadline);  // earlier than the control thread's sleep: it wakes now
  }
}

// ---- the public face ----

Agent::Agent(AgentOptions options) : core_(std::make_shared<AgentCore>(std::move(options))) {
  core_->start();
}

Agent::~Agent() { core_->shutdown(); }

AgentInfo Agent::info() const { return core_->info(); }
unsigned Agent::progress() { return core_->progress(); }
int Agent::event_fd() const { return core_->event_fd(); }

std::shared_ptr<Registration> Agent::register_memory(uint32_t region, uint64_t address,
                                                     uint64_t length, MemoryType type, int device) {
  return core_->register_memory(region, address, length, type, device);
}

std::shared_ptr<PeerRecord> Agent::connect(const HostPort& address,
                                           std::optional<std::chrono::milliseconds> timeout) {
  return core_->connect(address, timeout);
}

std::shared_ptr<PeerRecord> Agent::find_peer(const std::string& engine_id, uint32_t tp_rank) const {
  return core_->find_peer(engine_id, tp_rank);
}

std::shared_ptr<PeerRecord> Agent::find_peer(const std::string& engine_id, uint32_t pp_rank, uint32_t tp_rank) const {
  return core_->find_peer(engine_id, pp_rank, tp_rank);
}

TransferHandle Agent::post(const PostParams& params) {
  return TransferHandle(core_->post(params), core_);
}

void Agent::lease(const std::string& request_id, uint32_t expected, std::chrono::milliseconds ttl) {
  core_->lease(request_id, expected, ttl);
}

void Agent::keep_leases(const std::string& peer_engine_id, const std::vector<std::string>& request_ids) {
  core_->keep_leases(peer_engine_id, request_ids);
}

std::vector<Notification> Agent::poll_notifications() { return core_->poll_notifications(); }

void deregister_memory(const std::weak_ptr<AgentCore>& core, const std::shared_ptr<Registration>& reg) {
  if (auto c = core.lock()) c->deregister(reg);
}

void release_memory(const std::weak_ptr<AgentCore>& core, const std::shared_ptr<Registration>& reg) {
  if (auto c = core.lock()) c->release(reg);
}

void disconnect_peer(const std::weak_ptr<AgentCore>& core, const std::shared_ptr<PeerRecord>& peer) {
  if (auto c = core.lock()) c->disconnect(peer);
}

TransferHandle::TransferHandle(std::shared_ptr<TransferJob> job, std::weak_ptr<AgentCore> core)
    : job_(std::move(job)), core_(std::move(core)) {}

TransferStatus TransferHandle::status() const {
  std::lock_guard<std::mutex> g(job_->m);
  TransferStatus s = job_->visible;
  return s;
}

bool TransferHandle::wait(std::chrono::milliseconds timeout) const {
  const auto until = deadline_after(Clock::now(), timeout);
  auto final_now = [&] { return job_->visible.state != TransferState::InFlight; };
  std::shared_ptr<AgentCore> core = core_.lock();
  const int work = core && core->caller_progress() ? core->work_epoll() : -1;
  int done = -1;
  if (work >= 0) {
    std::lock_guard<std::mutex> g(job_->m);
    if (final_now()) return true;
    if (job_->done_fd < 0) job_->done_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);  // -1: polled below
    done = job_->done_fd;
  }
  if (work < 0) {
    // Thread mode (or the agent is gone, when every transfer is final): sleep until the state
    // changes, in slices (a wait_until at the clock's last instant is not portable).
    core.reset();
    std::unique_lock<std::mutex> g(job_->m);
    for (;;) {
      if (final_now()) return true;
      const auto now = Clock::now();
      if (now >= until) return false;
      const auto slice = std::chrono::milliseconds(200);
      job_->cv.wait_until(g, until - now < slice ? until : now + slice, final_now);
    }
  }
  // Caller mode: sleep until a progress call has work (the work epoll: a new transfer's batches, a
  // window with room, data or answers on a tcp data connection) or the transfer is final (done,
  // raised by whichever thread finalizes it: a progress call, a cancel, the control thread's
  // deadlines), and drive progress only in the first case. The core stays alive meanwhile (so do
  // its descriptors); freeing the agent finalizes every transfer, which wakes this wait.
  // A wait of 0 still makes the progress call that has work waiting.
  for (;;) {
    const auto now = Clock::now();
    auto left = until > now ? std::chrono::duration_cast<std::chrono::nanoseconds>(until - now)
                            : std::chrono::nanoseconds(0);
    timespec ts{};
    const timespec* tsp = nullptr;  // until the clock's last instant: no timeout
    if (until != Clock::time_point::max() || done < 0) {
      // Without an eventfd for the final state (descriptors ran out), look at it every 10 ms.
      if (done < 0) left = std::min<std::chrono::nanoseconds>(left, std::chrono::milliseconds(10));
      ts.tv_sec = static_cast<time_t>(left.count() / 1000000000);
      ts.tv_nsec = static_cast<long>(left.count() % 1000000000);
      tsp = &ts;
    }
    pollfd fds[2] = {{work, POLLIN, 0}, {done, POLLIN, 0}};
    const int r = ::ppoll(fds, done >= 0 ? 2 : 1, tsp, nullptr);
    if (r > 0 && fds[0].revents != 0) {
      try {
        core->progress();
      } catch (const core::Error&) {
        // Shut down meanwhile: the job's state is final or about to be (its done fd says when).
      }
    }
    std::lock_guard<std::mutex> g(job_->m);
    if (final_now()) return true;
    if (Clock::now() >= until) return false;
  }
}

int TransferHandle::done_fd() const {
  std::lock_guard<std::mutex> g(job_->m);
  if (job_->done_fd < 0) {
    const int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fd < 0) {
      const int e = errno;
      throw core::Error(Status::Transport, "eventfd for the transfer's final state: " + cma::errno_text(e),
                        core::CauseDomain::Errno, e);
    }
    job_->done_fd = fd;
    // Final already: finalize wrote nothing (it had no descriptor), so this does.
    if (job_->visible.state != TransferState::InFlight) {
      const uint64_t one = 1;
      [[maybe_unused]] const ssize_t r = ::write(fd, &one, sizeof one);
    }
  }
  return job_->done_fd;
}

void TransferHandle::cancel() {
  if (auto c = core_.lock()) c->cancel(job_);
}

}  // namespace pdkv::exec
