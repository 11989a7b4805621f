// AgentCore: the agent's state and threads (see agent.hpp for the locking and lifetime model).
// Split by job over agent_core.cpp (lifecycle, registration, progress loop, notifications),
// agent_peers.cpp (handshakes, control loop, heartbeats, peer loss) and agent_transfer.cpp
// (posting, completions, deadlines). Internal to executor/.
#pragma once

#include <sys/epoll.h>
#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "agent/agent.hpp"
#include "agent/lease_table.hpp"
#include "agent/range_check.hpp"
#include "cma/cma.hpp"
#include "cma/shared_memory.hpp"
#include "control/channel.hpp"
#include "control/handshake.hpp"
#include "tcpdp/data_frame.hpp"
#include "tcpdp/data_seal.hpp"
#include "pdkv/core/kv_permute.hpp"

namespace pdkv::exec {

using Clock = std::chrono::steady_clock;

// A transfer that failed with PEER_LOST while a cross-memory-attach batch of it is still being
// copied (the peer was lost by the control thread meanwhile) is reported failed after this grace
// at the latest; the batch itself returns within its bound, and the transfer's memory stays busy
// until it has (zombies_). A tcp peer's loss returns its batches at once.
inline constexpr auto kCancelGrace = std::chrono::milliseconds(200);

// Cross-memory attach (shm peers): one batch is at most cma_batch_bytes() bytes in at most
// kCmaBatchSegments pieces (a larger piece is split across batches), copied without the core's
// mutex. Each progress round takes one batch per lane of every transfer, so transfers and peers
// share progress, and deadlines, cancels and frees act between batches (a batch takes about a
// millisecond at memory bandwidth).
inline constexpr uint64_t kCmaBatchBytes = 4u << 20;  // with one copy thread
inline constexpr size_t kCmaBatchSegments = 512;
inline constexpr uint64_t kCmaSplitBytes = 1u << 20;  // smaller batches are copied by one thread
// With several copy threads a batch gives each thread 8 MiB. Why: every batch wakes the helper
// threads and waits for the slowest, plus two probe reads; at 4 MiB per batch (2 MiB, ~0.3 ms per
// thread) that hand-off cost a quarter of the throughput on an idle 2-vCPU VM (executor_bench,
// 2 threads: 8.3-10.2 GB/s at 4 MiB batches, 10.0-12.6 GB/s at 16 MiB; docs/benchmarks.md).
inline constexpr uint64_t kCmaBatchBytesPerThread = 8u << 20;
inline constexpr uint64_t cma_batch_bytes(unsigned copy_threads) {
  return copy_threads > 1 ? copy_threads * kCmaBatchBytesPerThread : kCmaBatchBytes;
}

// The tcp data connection (tcp peers, agent_tcp.cpp): a lane keeps at most this many batches of
// at most tcpdp::kMaxBatchBytes / tcpdp::kMaxPieces started and unanswered; a side that serves
// READs stops reading requests while this many answers wait to be sent; one progress round moves
// at most kTcpRoundBytes per peer and direction, so peers share progress and deadlines, cancels and
// frees act between rounds. Nothing blocks: the socket is nonblocking and driven by progress.
inline constexpr uint32_t kTcpWindow = 4;
inline constexpr size_t kTcpMaxQueuedFrames = 16;
inline constexpr uint64_t kTcpRoundBytes = 16u << 20;

// AgentOptions::max_outstanding bounds the operations (plan pieces, or the part of a piece a
// batch carries) in flight per peer, across every transfer with that peer: over tcp the pieces of
// its unanswered batches, each batch taking at most a quarter of them (so the window refills while
// the first answers arrive); over shm the pieces of the batches being copied (one per transfer at
// a time). Transfers on one peer share that room round-robin (PeerConn::rr_last), so a large
// transfer does not hold back one posted after it.
inline uint64_t tcp_pieces_per_batch(uint32_t max_outstanding) {
  const uint64_t quarter = (static_cast<uint64_t>(max_outstanding) + kTcpWindow - 1) / kTcpWindow;
  return std::clamp<uint64_t>(quarter, 1, tcpdp::kMaxPieces);
}
inline size_t cma_segments_per_batch(uint32_t max_outstanding) {
  return std::clamp<size_t>(max_outstanding, 1, kCmaBatchSegments);
}
// Records the peer's operations in flight in its high-water mark (PeerRecord).
inline void note_ops_in_flight(PeerRecord& peer, uint64_t n) {
  uint64_t seen = peer.max_ops_in_flight.load(std::memory_order_relaxed);
  while (n > seen && !peer.max_ops_in_flight.compare_exchange_weak(seen, n, std::memory_order_relaxed)) {
  }
}

// now + timeout, saturating at the clock's last instant: a caller's "practically never" (up to
// milliseconds::max()) must not wrap around into the past (signed overflow).
inline Clock::time_point deadline_after(Clock::time_point now, std::chrono::milliseconds timeout) {
  if (timeout.count() <= 0) return now;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::time_point::max() - now);
  return timeout >= left ? Clock::time_point::max() : now + timeout;
}

class TransferJob;

// A batch this side started on a tcp data connection (a READ's request, a WRITE's bytes), until
// the peer answers it (ReadData, WriteAck) or the connection drops.
struct TcpBatch {
  std::shared_ptr<TransferJob> job;
  uint32_t lane = 0;
  bool write = false;
  std::vector<uint32_t> ops;           // per piece: the operation's index in job->ops
  std::vector<tcpdp::Piece> pieces;    // the peer's (region, offset, length)
  std::vector<iovec> local;            // this side's memory, per piece
  bool holds = false;                  // counted in job->inflight and the peer's inflight
};

// One frame queued for sending: its header and descriptors, then bytes straight from registered
// memory. On a sealed connection the head is sealed when the frame starts (so records are numbered
// in wire order and a frame never sent uses no number) and the body is sealed one segment at a
// time into TcpData::tx; `total` then counts the sealed bytes.
struct TcpOut {
  std::vector<uint8_t> head;
  std::vector<iovec> body;
  uint64_t total = 0;
  uint64_t sent = 0;
  bool sealed = false;        // head sealed, total counts the wire bytes
  uint64_t body_bytes = 0;    // sealed: the clear payload bytes
  uint64_t body_sealed = 0;   // sealed: payload bytes sealed into tx so far
  size_t body_index = 0;      // sealed: where body_sealed is in `body`
  size_t body_offset = 0;
  uint64_t write_batch = 0;                           // a Write frame: its batch (0: none)
  std::vector<std::shared_ptr<Registration>> busy;    // a ReadData: regions busy until sent
  uint64_t answer_batch = 0;                          // a ReadData: the batch it answers
  // The body's device bytes: stage_devices[i] set where body[i] lies in device memory, copied to
  // `staged` (host memory) by the progress call that starts sending the frame, without the lock
  // (device_staging.hpp); empty once staged or when the body is all host memory.
  std::vector<const Registration*> stage_devices;
  device::StagingBuffer staged;
};

// Payload bytes of a received frame bound for device memory: where they wait in host memory and
// where they go (device_staging.hpp).
struct DeviceLanding {
  std::shared_ptr<device::Backend> staging;
  int device = 0;
  device::Copy copy;
};

// A tcp peer's data connection (nonblocking), its send queue, its unanswered batches and the
// frame being received.
struct TcpData {
  int fd = -1;
  tcpdp::FrameReader reader;  // opens sealed records when `sealer` is set
  // Sealed connections (both agents hold a key and seal): this side's sending cipher, and the
  // current payload segment sealed for sending (at most tcpdp::kSegmentBytes + a tag).
  std::optional<tcpdp::RecordCipher> sealer;
  std::vector<uint8_t> tx;
  size_t tx_sent = 0;
  std::deque<TcpOut> out;
  std::map<uint64_t, TcpBatch> batches;
  uint64_t next_batch = 1;
  // The payload being received: where it lands (registered memory or `sink`).
  std::vector<iovec> rx;
  size_t rx_index = 0;
  uint64_t rx_batch = 0;                                  // ReadData: the batch it answers
  bool rx_write = false;                                  // a Write: ack it when complete
  uint32_t rx_ack_status = 0;
  std::vector<std::shared_ptr<Registration>> rx_busy;     // a Write's target regions
  // Payload bytes bound for device memory: received into rx_staged, copied to the device when the
  // frame is complete (and every sealed tag verified): device_staging.hpp.
  device::StagingBuffer rx_staged;
  std::vector<device::StagingBuffer> staging_spare;  // outgoing frames' staging buffers, for reuse
  std::vector<DeviceLanding> rx_device;
  std::vector<uint8_t> sink;                              // bytes nobody may keep
  // The epoll events watched on fd: EPOLLOUT while frames wait to be sent; EPOLLIN unless
  // reading is paused (answers queued up to kTcpMaxQueuedFrames), so progress sleeps meanwhile.
  uint32_t watched = EPOLLIN;
  // A progress call claimed this connection and runs its system calls without the core's mutex
  // (tcp_progress): nobody else starts batches on it, and a drop meanwhile is left to that call
  // (`drop`: the status and reason given, the socket already shut down so the call returns).
  bool io = false;
  std::optional<std::pair<core::Status, std::string>> drop;
  // Liveness (AgentCore::tcp_stalled_locked): while work is pending on the connection (batches
  // this side started and the peer has not answered, frames waiting to be sent, or a frame being
  // received), the peer must move bytes: `moved_at` is the last time a system call here moved one
  // (either direction), or the kernel's count of bytes the peer acknowledged (`wire_acked`,
  // sampled at `sampled_at`) was seen to grow, or the connection went from idle to pending.
  // Pending and nothing moved for the heartbeat timeout: the peer is lost.
  Clock::time_point moved_at{};
  Clock::time_point sampled_at{};
  uint64_t wire_acked = 0;
  bool wire_stale = true;  // a call here moved bytes after the sample
  void note_moved() {
    moved_at = Clock::now();
    wire_stale = true;
  }
  // Work pending. Under the core's mutex; the frame reader is touched without it by a progress
  // call that claimed the connection (io), so it counts only when nobody has.
  bool pending() const { return !batches.empty() || !out.empty() || (!io && !reader.idle()); }
  TcpData() = default;
  TcpData(const TcpData&) = delete;
  TcpData& operator=(const TcpData&) = delete;
  ~TcpData();
};

// A connected peer's live resources. Owned by the core; destroyed once nothing is in flight on it.
struct PeerConn {
  uint64_t id = 0;  // epoll key of its control channel
  std::shared_ptr<PeerRecord> record;
  std::optional<ControlChannel> channel;
  uint16_t proto_minor = 0;  // the control protocol minor of the peer's Hello (what it can decode)
  // The data path: pdkv's tcp data connection (tcp peers, `tcp`) or cross-memory attach to the
  // peer's process (shm peers, `cma`), never both.
  std::unique_ptr<cma::PeerProcess> cma;
  std::unique_ptr<TcpData> tcp;  // tcp peers: pdkv's own data connection
  uint64_t cma_probe_address = 0;  // the peer's probe, re-read to tell "gone" from "unmapped"
  cma::ProbeValue cma_probe{};
  std::vector<RegisteredRange> remote_ranges;   // per region index
  // Shm peers: per region index, the peer's registered range mapped here (null: copied with
  // cross-memory attach). A batch copying through a mapping holds it, so losing the peer (which
  // clears this) unmaps only once no batch can touch it.
  std::vector<std::shared_ptr<const cma::PeerMapping>> maps;
  Clock::time_point last_heard{};
  Clock::time_point next_ping{};
  uint64_t ping_seq = 0;
  uint64_t inflight = 0;  // tcp batches holding a transfer / cma batches being copied
  // Operations in flight with this peer across its transfers, at most the agent's
  // max_outstanding: pieces of unanswered tcp batches, pieces of cma batches being copied.
  uint64_t tcp_pieces = 0;
  uint64_t cma_segments = 0;
  // Round-robin between the transfers on this peer: the sequence number (TransferJob::seq) of the
  // transfer that last started a batch here, and its value when the current round began; transfers
  // posted after it go first.
  uint64_t rr_last = 0;
  uint64_t rr_mark = 0;
  // The epoll events watched on the control channel: EPOLLOUT while frames wait to be sent.
  uint32_t watched = EPOLLIN;
  bool lost = false;
};

class TransferJob {
 public:
  struct Op {
    TransferJob* job = nullptr;
    uint32_t lane = 0;
    uint64_t read_index = 0;
    void* local = nullptr;
    uint64_t remote = 0;
    uint32_t remote_region = 0;
    uint64_t length = 0;
    uint64_t cma_done = 0;  // bytes already copied (a piece larger than a cma batch spans several)
    uint64_t tcp_started = 0;  // tcp: bytes handed to batches
    uint64_t tcp_landed = 0;   // tcp: bytes that arrived (READ) or were acknowledged (WRITE)
    // The local range lies in CUDA device memory of this registration (the job holds it busy):
    // its bytes are staged through host memory (tcp only).
    const Registration* local_device = nullptr;
    enum class State : uint8_t { Pending, InFlight, Done, Failed } state = State::Pending;
  };
  struct Lane {
    TransferJob* job = nullptr;
    std::shared_ptr<PeerConn> peer;
    uint32_t p_rank = 0;      // the plan's P rank these reads belong to (for failed reads)
    uint64_t remaining = 0;   // ops not yet done
    uint64_t bytes = 0;
    bool data_complete = false;
    bool complete = false;    // data complete (READ) / data complete and flushed (WRITE)
    // A peer rank at control protocol 3.5 or later: the LeaseQuery sent at post is unanswered
    // (a READ's lane is not complete before its answer, a WRITE's starts no batch), and whether
    // the answer said the lease had ended (a READ's bytes may be another request's: its reads
    // count as failed; a WRITE wrote nothing).
    bool lease_pending = false;
    bool lease_ended = false;
    // A WRITE's lane starts no batch while this is set: until D answered its LeaseQuery.
    bool hold = false;
    uint64_t lease_query = 0;
    bool notified = false;
    // Cross-memory attach lanes: the lane's operations (indices into ops, in order), the next one
    // to copy, and whether a batch of them is being copied now (one at a time per lane).
    bool cma = false;
    std::vector<uint32_t> cma_ops;
    size_t cma_next = 0;
    bool cma_busy = false;
    // tcp data connection lanes: the operations (in order), the next one to start, and how many
    // batches are started and unanswered (at most kTcpWindow; their pieces count in the peer's
    // tcp_pieces, at most max_outstanding across the peer's transfers).
    bool tcp = false;
    std::vector<uint32_t> tcp_ops;
    size_t tcp_next = 0;
    uint32_t tcp_outstanding = 0;
    // A batch of this lane was answered, refused or dropped: it leaves the window.
    void tcp_retire(const TcpBatch& b) {
      tcp_outstanding--;
      peer->tcp_pieces -= b.pieces.size();
    }
  };

  TransferJob() = default;
  TransferJob(const TransferJob&) = delete;
  TransferJob& operator=(const TransferJob&) = delete;
  ~TransferJob();

  AgentCore* core = nullptr;
  uint64_t seq = 0;             // posting order on this agent (round-robin between transfers)
  TransferOp op = TransferOp::Read;
  std::string request_id;
  bool notify = true;
  bool confirm_lease = true;  // READ: wait for each P rank's LeaseAnswer (PostParams)
  Clock::time_point deadline{};
  std::chrono::milliseconds timeout{};
  std::vector<Op> ops;          // interleaved across lanes; never resized after posting starts
  std::vector<Lane> lanes;      // one per peer that receives operations
  std::vector<std::shared_ptr<PeerConn>> notify_only;  // READ: notify ranks without reads
  std::vector<bool> notify_only_done;
  std::vector<std::shared_ptr<Registration>> local_regs;  // busy while the job may touch them
  // READ of a plan whose D blocks arrive in P's KV layout: the blocks (addresses inside local_regs,
  // each permute.block_bytes() long) permuted into this rank's layout once every read is done.
  core::BlockPermute permute;
  std::vector<uint8_t*> permute_blocks;
  uint64_t inflight = 0;        // tcp batches holding the job / cma batches being copied
  uint64_t done_ops = 0;
  uint64_t done_bytes = 0;
  core::Status fail_status = core::Status::Ok;
  std::string fail_message;
  Clock::time_point stopped_at{};  // when fail_status was set
  bool finalized = false;       // the visible state is final
  bool released = false;        // registrations released (nothing in flight any more)

  // The caller-visible state.
  mutable std::mutex m;
  std::condition_variable cv;
  TransferStatus visible;
  // Guarded by m: an eventfd made readable when the state becomes final, created by the first
  // caller-progress wait (TransferHandle::wait sleeps in ppoll on it and the agent's work epoll).
  int done_fd = -1;

  bool stopping() const { return fail_status != core::Status::Ok; }
};

class AgentCore {
 public:
  explicit AgentCore(AgentOptions options);
  ~AgentCore();
  AgentCore(const AgentCore&) = delete;
  AgentCore& operator=(const AgentCore&) = delete;

  void start();
  void shutdown();

  AgentInfo info() const;
  unsigned progress();
  int event_fd() const { return user_epoll_; }
  // Caller mode: readable exactly while a progress call has work (the event fd without the
  // notifications); -1 in thread mode.
  int work_epoll() const { return work_epoll_; }
  bool caller_progress() const { return opt_.progress == ProgressMode::Caller; }

  // Cuda: `device` is the CUDA ordinal; the range is checked with the device backend first.
  std::shared_ptr<Registration> register_memory(uint32_t region, uint64_t address, uint64_t length,
                                                MemoryType type, int device = 0);
  void deregister(const std::shared_ptr<Registration>& reg);
  void release(const std::shared_ptr<Registration>& reg);

  std::shared_ptr<PeerRecord> connect(const HostPort& address,
                                      std::optional<std::chrono::milliseconds> timeout);
  std::shared_ptr<PeerRecord> find_peer(const std::string& engine_id, uint32_t tp_rank) const;
  std::shared_ptr<PeerRecord> find_peer(const std::string& engine_id, uint32_t pp_rank, uint32_t tp_rank) const;
  void disconnect(const std::shared_ptr<PeerRecord>& record);

  std::shared_ptr<TransferJob> post(const PostParams& params);
  void cancel(const std::shared_ptr<TransferJob>& job);

  void lease(const std::string& request_id, uint32_t expected, std::chrono::milliseconds ttl);
  void keep_leases(const std::string& peer_engine_id, const std::vector<std::string>& request_ids);
  std::vector<Notification> poll_notifications();

 private:
  // --- agent_core.cpp
  void progress_thread_main();
  bool progress_round();
  // Under `g`; the tcp data connections' system calls run with `g` released (tcp_progress).
  unsigned progress_locked(std::unique_lock<std::mutex>& g);
  void push_note_locked(Notification n);
  bool note_room_for_peer_locked(const std::string& request_id) const;
  void wake_progress();
  // Caller mode: the event fd stays readable while a progress call has work that no socket event
  // announces: cma batches waiting to be copied, tcp batches of a new transfer waiting to start.
  void signal_work();
  void settle_work_fd_locked();
  // The control thread sleeps until the earliest of its timers (next_timer_locked); a timer
  // earlier than that sleep wakes it (control_wake_).
  Clock::time_point next_timer_locked(Clock::time_point now) const;
  void wake_control_at_locked(Clock::time_point t);
  void watch_channel_locked(PeerConn& peer);
  void release_registrations_locked(TransferJob& job);
  // A registration ends: nothing may use it any more (deregistered, or freed and now idle).
  void end_registration_locked(const std::shared_ptr<Registration>& reg);
  // One user of reg is done with it; a registration freed while busy ends when the last is.
  void unbusy_locked(const std::shared_ptr<Registration>& reg);

  // --- agent_peers.cpp
  void control_thread_main();
  void control_round();
  void accept_inbound();
  bool make_room_for_inbound_locked(const std::string& source);
  void start_inbound_thread(const std::shared_ptr<struct InboundSlot>& slot, std::shared_ptr<Socket> sock);
  void run_inbound_handshake(std::shared_ptr<struct InboundSlot> slot);
  HandshakeParams handshake_params_locked() const;
  // Shm admission: this agent's registered regions that lie in pdkv shared allocations (takes
  // mu_), and the peer's offered ones mapped here (per region index; null where not mapped,
  // *note says why).
  std::vector<MappableRegion> mappable_regions() const;
  // Why cross-memory attach cannot serve a same-host peer ("" when nothing stands in its way): a
  // CUDA region registered here or advertised by the peer (`theirs`). Takes mu_.
  std::string device_region_note(const std::vector<RegisteredRange>& theirs, const std::string& their_engine,
                                 uint32_t their_rank) const;
  static std::vector<std::shared_ptr<const cma::PeerMapping>> map_peer_regions(
      const cma::PeerProcess& process, const std::vector<RegisteredRange>& ranges,
      const std::vector<MappableRegion>& offered, uint32_t* mapped, std::string* note);
  struct CheckedPeer {
    core::EngineMetadata metadata;
    std::vector<RegisteredRange> ranges;
  };
  CheckedPeer check_peer(const Hello& hello, const PeerInfo& info, bool we_connected) const;
  // `channel` is moved into the published peer; on failure it is left to the caller to close.
  // `slot` (inbound only) forgets its descriptor under mu_ as the peer is published.
  std::shared_ptr<PeerRecord> admit(ControlChannel& channel, const HandshakeResult& result,
                                    CheckedPeer checked, bool inbound, Clock::time_point deadline,
                                    struct InboundSlot* slot = nullptr);
  // channel.recv(deadline) in short waits that give up once the agent is shutting down
  // (admission's Transport and Ready frames on the connecting caller's thread).
  Frame recv_admission(ControlChannel& channel, Clock::time_point deadline);
  void handle_frames_locked(const std::shared_ptr<PeerConn>& peer);
  void handle_keep_leases_locked(const std::shared_ptr<PeerConn>& peer, const KeepLeases& m);
  // A READ in flight keeps the leases it relies on open (control protocol 3.4 peers; agent_peers.cpp):
  // queues KeepLeases for `ids` to `peer` (not flushed), or nothing when the peer cannot take them.
  void queue_keeps_locked(PeerConn& peer, const std::vector<std::string>& ids);
  // P side: answers a reader's LeaseQuery (keeping the lease when open). D side: a LeaseAnswer
  // completes the lane that asked, or fails its READ when the lease had ended.
  void handle_lease_query_locked(const std::shared_ptr<PeerConn>& peer, const LeaseQuery& m);
  void handle_lease_answer_locked(const std::shared_ptr<PeerConn>& peer, const LeaseAnswer& m);
  // Sends the transfer's LeaseQuery to each lane's peer rank that moves something and answers
  // them (3.5 and later; a WRITE's lane holds its data until answered), the KeepLeases of pdkv
  // 2.7 to the other ranks it moves bytes with or notifies.
  void ask_leases_locked(const std::shared_ptr<TransferJob>& job);
  // For each peer, the request ids of the transfers not stopped that still move bytes with it
  // or have still to notify it.
  std::unordered_map<const PeerConn*, std::vector<std::string>> moving_ids_locked() const;
  void handle_notify_locked(const std::shared_ptr<PeerConn>& peer, const Notify& n);
  void timers_locked(Clock::time_point now);
  void lose_peer_locked(std::shared_ptr<PeerConn> peer, core::Status status,
                        const std::string& why, bool tell_peer);
  void reap_dead_peers_locked();
  void send_notify_locked(const std::shared_ptr<PeerConn>& peer, NotifyKind kind,
                          const std::string& request, uint64_t bytes, core::Status status);
  void flush_channel_locked(const std::shared_ptr<PeerConn>& peer);

  // --- agent_tcp.cpp (the tcp data connection)
  // Admission: the accepting side's listener for the peer's data connection, and the token the
  // peer must present on it.
  struct TcpOffer {
    std::optional<Listener> listener;
    std::array<uint8_t, tcpdp::kTokenBytes> token{};
  };
  std::unique_ptr<TcpOffer> tcp_offer(const ControlChannel& channel);
  std::unique_ptr<TcpData> tcp_accept(TcpOffer& offer, Clock::time_point deadline);
  std::unique_ptr<TcpData> tcp_connect(const ControlChannel& channel, uint16_t port,
                                       const std::array<uint8_t, tcpdp::kTokenBytes>& token,
                                       Clock::time_point deadline);
  void tcp_attach_locked(PeerConn& peer);
  // Starts batches, then claims the data connections no other progress call uses and sends and
  // receives on them (at most kTcpRoundBytes per peer and direction), each system call with `g`
  // released. Returns the frames received completely.
  unsigned tcp_progress(std::unique_lock<std::mutex>& g);
  // Starts batches on every tcp peer, round-robin between the transfers waiting for each peer.
  void tcp_start_batches_locked();
  // Starts lane `l`'s next batch if its window and its peer's room allow (false otherwise).
  bool tcp_start_batch_locked(const std::shared_ptr<TransferJob>& job, uint32_t l);
  // Returns "" or why the connection failed (then *status says how).
  std::string tcp_send(std::unique_lock<std::mutex>& g, PeerConn& peer);
  // Device memory (device_staging.hpp), by the progress call owning the connection's I/O, the copy
  // itself without the lock. stage_frame: copies an unsent frame's device bytes to host memory;
  // false when the copy failed (a Write's transfer failed, to be dropped by tcp_send; a READ
  // answer turned into a refusal). tcp_land_frame: copies a complete frame's staged bytes to the
  // device unless nobody wants them any more, returning the copy's failure (none: landed or
  // skipped), which tcp_frame_done_locked reports.
  bool stage_frame(std::unique_lock<std::mutex>& g, PeerConn& peer, TcpOut& o);
  std::optional<core::Error> tcp_land_frame(std::unique_lock<std::mutex>& g, PeerConn& peer);
  // Makes `o` (a ReadData answer not yet sent) a refusal for the reason given, counted as a failed
  // operation with the peer.
  void refuse_read_answer(PeerConn& peer, TcpOut& o, tcpdp::Refusal why);
  std::string tcp_recv(std::unique_lock<std::mutex>& g, PeerConn& peer, core::Status* status, unsigned* frames);
  // Runs one system call `f` with `g` released; *err is its errno.
  template <class F>
  static ssize_t without_lock(std::unique_lock<std::mutex>& g, int* err, F&& f) {
    g.unlock();
    const ssize_t r = f();
    *err = errno;
    g.lock();
    return r;
  }
  void tcp_frame_ready_locked(PeerConn& peer);
  void tcp_frame_done_locked(PeerConn& peer, const std::optional<core::Error>& landing_failed);
  void tcp_batch_landed_locked(PeerConn& peer, TcpBatch& batch);
  void tcp_drop_locked(PeerConn& peer, core::Status status, const std::string& why);
  // Data-connection liveness, run by the control thread's timers (timers_locked): the peers whose
  // data connection had work pending and moved no byte for the heartbeat timeout (checked against
  // the kernel's counters and this side's own backlog first). When the next check of `peer` is
  // due (next_timer_locked); Clock::time_point::max() while nothing is pending.
  std::vector<std::pair<std::shared_ptr<PeerConn>, std::string>> tcp_stalled_locked(Clock::time_point now);
  Clock::time_point tcp_check_due_locked(const PeerConn& peer) const;
  // The connection is about to have work pending: if it had none, the wait for the peer starts now.
  void tcp_pending_begins_locked(PeerConn& peer);
  // The registered range [offset, offset + length) of this agent's region, or an empty string
  // and `out` set: every range a peer names is checked here before a byte moves.
  std::string tcp_check_local(const tcpdp::Piece& piece, iovec* out, std::shared_ptr<Registration>* reg) const;

  // --- agent_transfer.cpp
  void op_succeeded_locked(TransferJob::Op& op);
  void op_failed_locked(TransferJob::Op& op, core::Status status, const std::string& message);
  // Cross-memory attach: claims one batch per lane of every transfer (under `g`), copies them
  // with `g` released, and completes them under `g` again. Returns the operations completed.
  unsigned run_cma_batches(std::unique_lock<std::mutex>& g);
  struct CmaBatch;
  void cma_batch_done_locked(CmaBatch& batch, const cma::CopyResult& result, bool peer_exited);
  void lane_data_complete_locked(TransferJob& job, TransferJob::Lane& lane);
  void fail_job_locked(TransferJob& job, core::Status status, const std::string& message);
  void check_final_locked(TransferJob& job);
  void finalize_locked(TransferJob& job);
  void check_deadlines_locked(Clock::time_point now);

  friend struct InboundSlot;

  AgentOptions opt_;
  std::string host_id_;
  std::string listen_text_;

  mutable std::mutex mu_;
  bool stopped_ = false;  // guarded by mu_
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> progress_rounds_{0};  // progress rounds and calls (AgentInfo)
  std::atomic<uint64_t> control_rounds_{0};   // control_round() calls (AgentInfo)
  uint64_t next_job_seq_ = 0;                 // guarded by mu_: TransferJob::seq
  // Guarded by mu_: when the control thread wakes next (its earliest timer when it went to sleep).
  Clock::time_point control_wake_at_ = Clock::time_point::min();

  std::unique_ptr<cma::Probe> cma_probe_;  // this process's identity for same-host peers
  std::unique_ptr<cma::Copier> cma_copier_;  // copies batches (several threads where cores allow)
  uint64_t cma_batch_bytes_ = kCmaBatchBytes;  // cma_batch_bytes(the copier's threads)
  // cma batches being copied and progress calls in tcp system calls, both without mu_; guarded by
  // mu_; shutdown waits for 0 (unlocked_idle_) so no byte moves after the agent is freed.
  uint64_t unlocked_io_ = 0;
  std::condition_variable unlocked_idle_;
  // UCX registers the agent's memory (ucp_mem_map) and packs the region keys a peer takes each
  // region's range from; nothing else of UCX is used (no worker, endpoint or GET/PUT).
  std::unique_ptr<UcxContext> context_;
  std::optional<Listener> listener_;

  std::vector<std::shared_ptr<Registration>> regs_;  // per region index
  // Keyed by (engine, pipeline stage, TP rank): one agent may hold several stages of a peer
  // engine (a D stage reading from every P stage that holds its layers).
  using PeerKey = std::tuple<std::string, uint32_t, uint32_t>;
  static PeerKey key_of(const PeerRecord& r) { return {r.engine_id, r.pp_rank, r.tp_rank}; }
  std::map<PeerKey, std::shared_ptr<PeerConn>> peers_;
  std::unordered_map<uint64_t, std::shared_ptr<PeerConn>> by_id_;
  std::vector<std::shared_ptr<PeerConn>> dead_peers_;
  uint64_t next_peer_id_ = 16;  // below: reserved epoll keys
  std::vector<std::shared_ptr<TransferJob>> active_;
  std::vector<std::shared_ptr<TransferJob>> zombies_;  // final, a cma batch of them still being copied
  LeaseTable leases_;
  // READs waiting for a LeaseAnswer, by query number (the lane holds the same number); an entry
  // goes with its answer or when the READ is final.
  std::unordered_map<uint64_t, std::weak_ptr<TransferJob>> lease_queries_;
  uint64_t next_lease_query_ = 0;
  // Notifications waiting for poll_notifications. A peer's Notify is refused (the peer dropped
  // with Protocol) while kMaxPeerNotes or kMaxPeerNoteBytes are waiting, so an authenticated peer
  // cannot pile up memory or push out what is queued; kMaxNotes bounds the agent's own.
  static constexpr size_t kMaxPeerNotes = 65536;
  static constexpr size_t kMaxPeerNoteBytes = 32u << 20;
  static constexpr size_t kMaxNotes = 1u << 20;
  std::deque<Notification> notes_;
  size_t notes_bytes_ = 0;

  int control_epoll_ = -1;
  int control_wake_ = -1;   // eventfd: wakes the control loop
  int progress_epoll_ = -1;
  int progress_wake_ = -1;  // eventfd: wakes the progress thread
  int notify_fd_ = -1;      // eventfd: readable while notifications are pending
  int user_epoll_ = -1;     // what pdkv_agent_event_fd returns
  // Caller mode: work_fd_ and the tcp data connections, nested in user_epoll_ (so a caller-mode
  // wait sleeps on the work without waking for notifications nobody polled).
  int work_epoll_ = -1;
  int work_fd_ = -1;        // eventfd: readable while progress has work no socket announces (caller mode)
  bool work_fd_signaled_ = false;  // guarded by mu_: work_fd_ may be readable (drain it once idle)
  // The control thread stops watching the listener for a while after accept() failed (no
  // descriptor left: the connection stays queued and the listener readable). Control thread only.
  std::optional<Clock::time_point> accept_paused_until_;

  std::thread control_thread_;
  std::thread progress_thread_;

  std::mutex inbound_mu_;
  std::list<std::shared_ptr<struct InboundSlot>> inbound_;
  uint64_t inbound_accepted_ = 0;  // connections accepted so far (InboundSlot::order)
};

// One inbound handshake running on its own thread. fd lets shutdown interrupt a blocked read.
struct InboundSlot {
  std::mutex m;
  int fd = -1;
  std::atomic<bool> done{false};
  std::thread thread;
  std::string source;                        // the peer's IP address, without the port
  uint64_t order = 0;                        // acceptance order (older = smaller)
  std::atomic<bool> authenticated{false};    // the peer's proof and PeerInfo were checked
  bool evicted = false;                      // interrupted to make room (accept_inbound)
};

// Admission's transport choice (agent_peers.cpp), the same on both sides: tcp when either side's
// transport is tcp or the peer runs on another host, shm (cross-memory attach) when both sides
// read each other's probe back; otherwise tcp, unless a side's transport is shm, which refuses
// the peer (`refusal` says why: the failing verdict's reason, which side it is from).
struct TransportChoice {
  TransportMode mode = TransportMode::Tcp;
  std::string refusal;  // non-empty: the peer cannot be served
};
TransportChoice choose_transport(TransportMode mine, TransportMode theirs, bool same_host,
                                 const TransportOffer& my_offer, const TransportOffer& their_offer);

// A request id as posted, leased or received in a Notify: 1..kMaxRequestIdBytes bytes and no NUL
// (the C API hands ids out as C strings, which a NUL would cut short). Error(`status`) naming the
// length or the offset of the NUL; `what` begins the message ("request_id", "a Notify's request id").
void check_request_id(std::string_view id, core::Status status, std::string_view what);

}  // namespace pdkv::exec
