// The agent: one engine rank's executor. It owns a control listener, its peers (a control
// channel each, and a data path: the peer's process for cross-memory attach on one host, or
// pdkv's tcp data connection), its memory registrations (UCX's ucp_mem_map, whose packed keys the
// handshake still advertises; no byte moves through UCX) and the transfers in flight, and runs
// two threads: the control loop (accepts, heartbeats, notifications, deadlines) and, in thread
// mode, the progress loop (tcp data connections, cma batches, deadlines). Inbound handshakes run
// on short-lived threads of their own so a silent peer never stalls the others.
//
// Locking: one mutex (AgentCore::mu_) guards every piece of agent state. Blocking network I/O
// (handshakes) never holds mu_; cma batches are copied and tcp data connections' system calls
// made without it (by a progress call that claimed them). Each transfer's visible state
// has its own mutex + condition variable (taken after mu_, never before), so waiters never
// contend with the data path.
//
// Lifetimes: the C API's handles hold shared_ptrs to the records below (Registration, PeerRecord,
// TransferJob) and a weak_ptr to the core, so any handle may outlive the agent: after shutdown
// the core has released every registration and the records only report their final state.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "control/auth.hpp"
#include "control/socket.hpp"
#include "pdkv/core/engine_metadata.hpp"
#include "pdkv/core/error.hpp"
#include "pdkv/core/transfer_plan.hpp"
#include "ucx/context.hpp"
#include "ucx/memory.hpp"
#include "device/device_memory.hpp"

namespace pdkv::exec {

class AgentCore;

enum class ProgressMode : uint8_t { Thread = 0, Caller = 1 };

struct AgentOptions {
  core::EngineMetadata metadata;
  HostPort listen{"127.0.0.1", 0};
  // Auto, Shm or Tcp (ucx/context.hpp); the C enum's order differs and is mapped in capi/.
  TransportMode transport = TransportMode::Auto;
  ProgressMode progress = ProgressMode::Thread;
  std::chrono::milliseconds default_timeout{30000};
  std::optional<PresharedKey> key;
  // With a key: seal every frame of tcp data connections (headers and KV bytes) with AES-256-GCM
  // (tcpdp/data_seal.hpp). false carries them in clear for trusted fabrics (the control channel
  // stays sealed). Both sides must agree: admission refuses a peer with the other setting (Auth).
  // Without a key there is nothing to seal with and this is not read.
  bool seal_data = true;
  std::chrono::milliseconds heartbeat_interval{500};
  std::chrono::milliseconds heartbeat_timeout{5000};
  // The most operations (plan pieces; a piece larger than a batch counts once per batch it
  // spans) in flight per peer, across every transfer with that peer (which share it
  // round-robin): over tcp in its unanswered batches, over shm in the batches being copied. >= 1.
  uint32_t max_outstanding = 64;
  // Threads that copy one cma batch (shm peers): 0 picks 2 where the machine has at least 4
  // hardware threads, else 1; at most 16 are used. A batch of at least 1 MiB is cut into this
  // many parts (cma::Copier).
  uint32_t cma_copy_threads = 0;
  // The control protocol minor this agent says in its Hello (at most this build's): tests and
  // benchmarks play an agent of an older pdkv with it, whose peers then offer it only what that
  // minor takes. The C API always says this build's.
  uint16_t control_minor = kControlProtoMinor;
  // The oldest control protocol minor a peer may say: an older one is refused at connect
  // (Incompatible, both sides told). 0: any.
  uint16_t min_peer_minor = 0;
};

enum class NotificationKind : uint8_t {
  ReadDone = 0,
  WriteDone = 1,
  RequestComplete = 2,
  LeaseExpired = 3,
  PeerConnected = 4,
  PeerLost = 5,
};

struct Notification {
  NotificationKind kind = NotificationKind::ReadDone;
  core::Status status = core::Status::Ok;
  std::string request_id;
  std::string engine_id;
  uint32_t tp_rank = 0;
  uint32_t pp_rank = 0;  // the remote rank's pipeline stage
  uint32_t count = 0;
  uint32_t expected = 0;
  uint64_t bytes = 0;
};

// One region's registration. It ends (end()) at deregistration or the agent's shutdown (never
// after the UCX context is gone). busy counts transfers and tcp frames that may still touch the
// memory.
struct Registration {
  uint32_t region = 0;
  uint64_t base = 0;
  uint64_t length = 0;
  MemoryType type = MemoryType::Host;
  // Cuda: the device's ordinal and the backend that stages its bytes through host memory
  // (device/device_memory.hpp); the bytes move only over the tcp data connection.
  int device = 0;
  std::shared_ptr<device::Backend> staging;
  std::optional<UcxRegistration> ucx;  // Host: UCX's registration, whose key the handshake sends
  bool live = false;                   // registered and not ended (guarded by the core's mutex)
  uint64_t busy = 0;                   // guarded by the core's mutex
  bool release_when_idle = false;      // the handle was freed while busy
  void end() noexcept {
    ucx.reset();
    live = false;
  }
  // Registered and not let go of: the only state in which a new transfer or a peer's new request
  // may use it. A registration whose handle was freed while busy only finishes what it holds: the
  // engine, its handle gone, may unmap the memory once those end (guarded by the core's mutex).
  bool usable() const noexcept { return live && !release_when_idle; }
};

// What the C API reports of a peer; counters are atomics so reading them takes no agent lock.
struct PeerRecord {
  std::string engine_id;
  uint32_t tp_rank = 0;
  uint32_t pp_rank = 0;  // the peer's pipeline stage (0 without pipeline parallelism)
  std::string address;
  bool inbound = false;
  TransportMode transport = TransportMode::Tcp;  // Shm or Tcp as chosen for this peer
  core::EngineMetadata metadata;
  std::atomic<bool> connected{true};
  std::atomic<int32_t> lost_status{0};
  std::atomic<uint64_t> bytes_read{0}, bytes_written{0}, transfers_done{0}, transfers_failed{0},
      operations_failed{0}, notifications_sent{0}, notifications_received{0}, heartbeat_rtt_us{0},
      lease_keeps_sent{0}, lease_keeps_received{0};  // request ids in KeepLeases frames
  // The most operations in flight on this peer at once, across its transfers (the agent's
  // max_outstanding bounds it); internal, for tests.
  std::atomic<uint64_t> max_ops_in_flight{0};
  // Shm peers: the peer's registered regions this side mapped at admission (they lie in the
  // peer's pdkv shared allocations; their bytes move with memcpy), the bytes moved through those
  // mappings, and, when a region it advertised as mappable could not be mapped (or none was
  // advertised), why: those move with cross-memory attach. Set before the peer is published.
  uint32_t mapped_regions = 0;
  std::string mapping_note;
  std::atomic<uint64_t> bytes_mapped{0};
};

enum class TransferOp : uint8_t { Read = 0, Write = 1 };
enum class TransferState : uint8_t { InFlight = 0, Done = 1, Failed = 2 };

struct FailedRead {
  uint32_t p_rank = 0;
  uint64_t read_index = 0;
  core::Status status = core::Status::Ok;
};

// The caller-visible state of a transfer, readable without the agent (its own mutex).
struct TransferStatus {
  TransferState state = TransferState::InFlight;
  core::Status status = core::Status::Ok;
  std::string message;
  uint64_t bytes_total = 0, bytes_done = 0, ops_total = 0, ops_done = 0;
  std::vector<FailedRead> failed;  // filled when the transfer fails
  std::chrono::steady_clock::time_point posted{}, finished{};
};

class TransferJob;  // agent_transfer.hpp

// A transfer handle's view: status + wait, and cancel through the core while it lives.
class TransferHandle {
 public:
  TransferHandle(std::shared_ptr<TransferJob> job, std::weak_ptr<AgentCore> core);
  TransferStatus status() const;
  // True when final within `timeout`. In caller-progress mode the wait drives progress itself,
  // sleeping until the agent's work epoll says a progress call has work or the transfer is final.
  bool wait(std::chrono::milliseconds timeout) const;
  void cancel();
  // An eventfd that is readable from the moment the transfer is final (already readable when it
  // is); created on first call, owned by the job (closed when the last handle is gone). Callers
  // poll it, never read it (the caller-mode wait polls the same descriptor). Error(Transport,
  // cause errno) when no descriptor can be had.
  int done_fd() const;

 private:
  std::shared_ptr<TransferJob> job_;
  std::weak_ptr<AgentCore> core_;
};

struct PostParams {
  TransferOp op = TransferOp::Read;
  const core::TransferPlan* plan = nullptr;
  std::string peer_engine_id;
  std::string request_id;
  std::optional<std::chrono::milliseconds> timeout;
  bool notify = true;
  // Ask each peer rank (control protocol 3.5 or later) whether its lease of request_id is open
  // (or was never leased) first: a READ counts its bytes, a WRITE sends them, only once it
  // answered (pdkv_agent_post). false: as before 2.7 (a caller that keeps the other side's blocks
  // by other means saves the control round trip).
  bool confirm_lease = true;
};

struct AgentInfo {
  std::string engine_id;
  uint32_t tp_rank = 0, tp_size = 1;
  HostPort listen;
  TransportMode transport = TransportMode::Auto;
  ProgressMode progress = ProgressMode::Thread;
  size_t num_peers = 0, transfers_in_flight = 0;
  unsigned copy_threads = 1;     // threads copying each cma batch
  // Internal, for tests: rounds of the progress thread plus progress calls (pdkv_agent_progress,
  // and those a caller-mode wait makes) so far, and rounds of the control thread so far.
  uint64_t progress_rounds = 0;
  uint64_t control_rounds = 0;
};

// The public face used by capi/: thin, every call forwards to the core. Destroying it shuts the
// agent down (handles obtained from it stay valid).
class Agent {
 public:
  explicit Agent(AgentOptions options);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  AgentInfo info() const;
  unsigned progress();
  int event_fd() const;

  // Host memory, or CUDA device memory of device `device` (staged over the tcp data connection).
  std::shared_ptr<Registration> register_memory(uint32_t region, uint64_t address, uint64_t length,
                                                MemoryType type, int device = 0);
  std::shared_ptr<PeerRecord> connect(const HostPort& address,
                                      std::optional<std::chrono::milliseconds> timeout);
  // The connected peer of that TP rank; NotFound when none, InvalidArgument naming the stages
  // when several pipeline stages of the engine are connected at that rank (name the stage).
  std::shared_ptr<PeerRecord> find_peer(const std::string& engine_id, uint32_t tp_rank) const;
  std::shared_ptr<PeerRecord> find_peer(const std::string& engine_id, uint32_t pp_rank, uint32_t tp_rank) const;
  TransferHandle post(const PostParams& params);
  void lease(const std::string& request_id, uint32_t expected, std::chrono::milliseconds ttl);
  // Asks every connected rank of engine `peer_engine_id` (all its pipeline stages) to keep its
  // leases of `request_ids` open: each such rank moves the deadline of each of those requests it
  // leases to at least now + that lease's own ttl; ids it does not lease are ignored there. What a
  // reader (D) sends while a request waits to be read, as vLLM's "HB:" notifications do. Queued on
  // the control channels (returns without waiting for the peers). Errors: InvalidArgument (a bad
  // id), NotFound (no connected rank of that engine), Incompatible (a connected rank runs a control
  // protocol before 3.4, naming it; nothing is sent then), Shutdown.
  void keep_leases(const std::string& peer_engine_id, const std::vector<std::string>& request_ids);
  std::vector<Notification> poll_notifications();

  std::weak_ptr<AgentCore> core() const { return core_; }

 private:
  std::shared_ptr<AgentCore> core_;
};

// Deregisters now (Busy while operations may touch it) / releases when idle. Safe after shutdown.
void deregister_memory(const std::weak_ptr<AgentCore>& core, const std::shared_ptr<Registration>& reg);
void release_memory(const std::weak_ptr<AgentCore>& core, const std::shared_ptr<Registration>& reg);
// Closes the peer's connection (Bye); no-op when lost or after shutdown.
void disconnect_peer(const std::weak_ptr<AgentCore>& core, const std::shared_ptr<PeerRecord>& peer);

}  // namespace pdkv::exec
