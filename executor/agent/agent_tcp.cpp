// The tcp data connection: how a tcp peer pair moves bytes (instead of UCX RMA, whose tcp GET and
// PUT on UCX 1.13.1 are emulated by a reply from the target's worker that aborts the target's
// process when the requester vanished). One nonblocking connection per peer pair, opened during
// admission: the side that accepted the control connection listens on an ephemeral port of the
// same local address and sends the port and a one-time random token over the (authenticated,
// sealed when keyed) control channel; the connecting side connects and presents the token, which
// is compared in constant time before anything else is read. Frames: tcpdp/data_frame.hpp.
//
// READ: D starts batches (ReadRequest) of P ranges; P checks every range against its own live
// registrations and answers with ReadData written straight from registered memory (or a refusal);
// D checks the echoed pieces against the batch it asked for and receives into its registered
// memory, never past a piece. WRITE: P sends Write (descriptors, then bytes from registered
// memory); D checks every target range against its own registrations before receiving (a refused
// batch is received into a sink) and acknowledges with WriteAck; P counts a piece only once it is
// acknowledged. A dead peer is a socket error or EOF: the peer is lost (PEER_LOST), garbled frames
// lose it with PROTOCOL, and nothing ever aborts. Everything runs from progress (the progress
// thread or pdkv_agent_progress), bounded per round, under the core's mutex except the system
// calls on a data connection, which the progress call that claimed it makes without the mutex.
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>

#include "agent/agent_core.hpp"
#include "agent/device_staging.hpp"
#include "cma/cma.hpp"

namespace pdkv::exec {

using core::Status;

TcpData::~TcpData() {
  if (fd >= 0) ::close(fd);
}

namespace {

std::string sock_host(int fd, bool peer) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  const int rc = peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len)
                      : ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  if (rc != 0) core::fail(Status::Io, std::string(peer ? "getpeername" : "getsockname") + " of the control connection: " + cma::errno_text(errno));
  SocketAddress a;
  a.storage = ss;
  a.length = len;
  HostPort hp = parse_host_port(a.to_string());
  return hp.host;
}

// Takes the descriptor out of a Socket (a duplicate; the Socket closes its own).
int take_fd(Socket& s) {
  const int fd = ::fcntl(s.fd(), F_DUPFD_CLOEXEC, 0);
  if (fd < 0) core::fail(Status::Io, "duplicating the data connection: " + cma::errno_text(errno));
  s.close();
  const int flags = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

// The sink every discarded payload is received into, cut into iovecs.
void sink_iov(TcpData& d, uint64_t bytes) {
  constexpr size_t kSink = 1u << 20;
  // Sealed payload segments start at multiples of kSegmentBytes of the payload, so none spans two
  // of these iovecs (which alias one buffer): a segment is decrypted where it was received.
  static_assert(kSink % tcpdp::kSegmentBytes == 0);
  if (d.sink.size() < kSink) d.sink.resize(kSink);
  d.rx.clear();
  while (bytes > 0) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(bytes, kSink));
    d.rx.push_back({d.sink.data(), n});
    bytes -= n;
  }
  d.rx_index = 0;
}

// The CUDA registration each piece of batch b comes from or lands in locally (null: host
// memory), in *out; false, building nothing, when every piece is host memory.
bool batch_devices(const TransferJob& job, const TcpBatch& b, std::vector<const Registration*>* out) {
  bool any = false;
  for (uint32_t i : b.ops) any |= job.ops[i].local_device != nullptr;
  if (!any) return false;
  out->resize(b.ops.size());
  for (size_t i = 0; i < b.ops.size(); ++i) (*out)[i] = job.ops[b.ops[i]].local_device;
  return true;
}

// The same for a peer's pieces, all checked against `regs` already (tcp_check_local).
std::vector<const Registration*> piece_devices(const std::vector<tcpdp::Piece>& pieces,
                                               const std::vector<std::shared_ptr<Registration>>& regs) {
  std::vector<const Registration*> out;
  out.reserve(pieces.size());
  for (const auto& p : pieces) out.push_back(regs[p.region]->type == MemoryType::Cuda ? regs[p.region].get() : nullptr);
  return out;
}

std::string peer_label(const PeerConn& p) {
  return "peer '" + p.record->engine_id + "' rank " + std::to_string(p.record->tp_rank) + " (" + p.record->address + ")";
}

}  // namespace

std::unique_ptr<AgentCore::TcpOffer> AgentCore::tcp_offer(const ControlChannel& channel) {
  auto o = std::make_unique<TcpOffer>();
  o->listener.emplace(HostPort{sock_host(channel.fd(), false), 0}, 4);
  size_t got = 0;
  while (got < o->token.size()) {
    const ssize_t n = ::getrandom(o->token.data() + got, o->token.size() - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) core::fail(Status::Io, "getrandom for the data connection's token: " + cma::errno_text(errno));
    got += static_cast<size_t>(n);
  }
  return o;
}

std::unique_ptr<TcpData> AgentCore::tcp_accept(TcpOffer& offer, Clock::time_point deadline) {
  // Connections that do not present the token (within a second) are closed; the peer's own must
  // arrive by the deadline. The token is read before anything else and compared in constant time.
  // Waits in short slices so shutdown() does not wait for a peer that never connects.
  const auto slice = std::chrono::milliseconds(50);
  for (;;) {
    if (stopping_.load()) core::fail(Status::Shutdown, "the agent was shut down");
    const auto now = Clock::now();
    if (now >= deadline) core::fail(Status::TimedOut, "the peer did not open its data connection in time");
    std::optional<Socket> s = offer.listener->accept();
    if (!s) {
      pollfd p{offer.listener->fd(), POLLIN, 0};
      const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(std::min(deadline - now, Clock::duration(slice)));
      ::poll(&p, 1, static_cast<int>(std::max<int64_t>(1, wait.count())));
      continue;
    }
    std::array<uint8_t, tcpdp::kTokenBytes> got{};
    size_t have = 0;
    const auto token_deadline = std::min(deadline, Clock::now() + std::chrono::seconds(1));
    bool presented = true;
    while (have < got.size()) {
      if (stopping_.load()) core::fail(Status::Shutdown, "the agent was shut down");
      if (Clock::now() >= token_deadline) {
        presented = false;
        break;
      }
      try {
        have += s->recv_some(std::span<uint8_t>(got).subspan(have), std::min(token_deadline, Clock::now() + slice),
                             "the data connection's token");
      } catch (const core::Error& e) {
        if (e.status() != Status::TimedOut) {
          presented = false;  // that connection went away
          break;
        }
      }
    }
    if (!presented) continue;  // wait for the next connection
    if (CRYPTO_memcmp(got.data(), offer.token.data(), got.size()) != 0) continue;
    auto d = std::make_unique<TcpData>();
    d->fd = take_fd(*s);
    offer.listener.reset();
    return d;
  }
}

std::unique_ptr<TcpData> AgentCore::tcp_connect(const ControlChannel& channel, uint16_t port,
                                                const std::array<uint8_t, tcpdp::kTokenBytes>& token,
                                                Clock::time_point deadline) {
  if (port == 0) core::fail(Status::Protocol, "the peer chose tcp but offered no data connection port");
  Socket s = Socket::connect(HostPort{sock_host(channel.fd(), true), port}, deadline);
  s.send_all(token, deadline, "the data connection's token");
  auto d = std::make_unique<TcpData>();
  d->fd = take_fd(s);
  return d;
}

void AgentCore::tcp_attach_locked(PeerConn& peer) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 4;
  ::epoll_ctl(progress_epoll_, EPOLL_CTL_ADD, peer.tcp->fd, &ev);
  if (opt_.progress == ProgressMode::Caller) ::epoll_ctl(work_epoll_, EPOLL_CTL_ADD, peer.tcp->fd, &ev);
}

std::string AgentCore::tcp_check_local(const tcpdp::Piece& piece, iovec* out,
                                       std::shared_ptr<Registration>* reg) const {
  // A registration whose handle was freed serves nothing new (Registration::usable): it would stay
  // busy for as long as a peer kept asking, and its memory may be unmapped once it is idle.
  if (piece.region >= regs_.size() || !regs_[piece.region] || !regs_[piece.region]->usable()) {
    return "region " + std::to_string(piece.region) + " is not registered";
  }
  const auto& r = regs_[piece.region];
  if (piece.offset > r->length || piece.length > r->length - piece.offset) {
    return "bytes " + std::to_string(piece.offset) + "+" + std::to_string(piece.length) + " of region " +
           std::to_string(piece.region) + " lie outside its " + std::to_string(r->length) + " registered bytes";
  }
  out->iov_base = reinterpret_cast<void*>(static_cast<uintptr_t>(r->base + piece.offset));
  out->iov_len = static_cast<size_t>(piece.length);
  *reg = r;
  return "";
}

// Every tcp lane of every transfer gets batches in turns: each pass gives each lane at most one,
// until no lane can start one (window full, peer's room taken, nothing left). On each peer the
// transfers posted after the one that last started a batch there go first, so when the peer's
// room frees one batch at a time it goes round the transfers instead of to the oldest.
void AgentCore::tcp_start_batches_locked() {
  for (auto& [key, p] : peers_) p->rr_mark = p->rr_last;
  for (bool started = true; started;) {
    started = false;
    for (int pass = 0; pass < 2; ++pass) {
      for (size_t i = 0; i < active_.size(); ++i) {
        const std::shared_ptr<TransferJob> job = active_[i];
        for (uint32_t l = 0; l < job->lanes.size(); ++l) {
          if (job->finalized || job->stopping()) break;
          const TransferJob::Lane& lane = job->lanes[l];
          if (!lane.tcp || (job->seq > lane.peer->rr_mark) != (pass == 0)) continue;
          started |= tcp_start_batch_locked(job, l);
        }
      }
    }
  }
}

bool AgentCore::tcp_start_batch_locked(const std::shared_ptr<TransferJob>& job_ptr, uint32_t l) {
  TransferJob& job = *job_ptr;
  TransferJob::Lane& lane = job.lanes[l];
  if (lane.hold || lane.tcp_next >= lane.tcp_ops.size() || lane.tcp_outstanding >= kTcpWindow) return false;
  PeerConn& peer = *lane.peer;
  if (peer.lost || !peer.tcp) {
    fail_job_locked(job, Status::PeerLost, peer_label(peer) + " was lost");
    return false;
  }
  if (peer.tcp->io) return false;  // another progress call is using it: its next round
  // The window: at most kTcpWindow batches per lane and max_outstanding pieces per peer (across
  // its transfers) unanswered; a batch takes a quarter of max_outstanding pieces (at least one),
  // so the window refills in steps while the first answers arrive.
  if (peer.tcp_pieces >= opt_.max_outstanding) return false;
  const bool write = job.op == TransferOp::Write;
  const uint64_t room = std::min<uint64_t>(tcp_pieces_per_batch(opt_.max_outstanding),
                                           opt_.max_outstanding - peer.tcp_pieces);
  TcpBatch b;
  b.job = job_ptr;
  b.lane = l;
  b.write = write;
  uint64_t bytes = 0;
  for (size_t k = lane.tcp_next; k < lane.tcp_ops.size() && b.pieces.size() < room && bytes < tcpdp::kMaxBatchBytes;
       ++k) {
    TransferJob::Op& op = job.ops[lane.tcp_ops[k]];
    const uint64_t take = std::min(op.length - op.tcp_started, tcpdp::kMaxBatchBytes - bytes);
    const RegisteredRange& rr = peer.remote_ranges[op.remote_region];
    b.pieces.push_back({op.remote_region, op.remote - rr.base + op.tcp_started, take});
    b.local.push_back({static_cast<uint8_t*>(op.local) + op.tcp_started, static_cast<size_t>(take)});
    b.ops.push_back(lane.tcp_ops[k]);
    op.tcp_started += take;
    op.state = TransferJob::Op::State::InFlight;
    bytes += take;
    if (op.tcp_started == op.length) lane.tcp_next = k + 1;
    else break;  // the rest of this piece goes in the next batch
  }
  TcpOut o;
  if (write) {
    o.body = b.local;
    // Device bytes are copied to host memory when the frame starts to be sent (tcp_send), without
    // the lock; the job (held by the batch) keeps its registrations alive until then.
    batch_devices(job, b, &o.stage_devices);
  }
  const uint64_t id = peer.tcp->next_batch++;
  tcpdp::Header h;
  h.type = write ? tcpdp::FrameType::Write : tcpdp::FrameType::ReadRequest;
  h.batch = id;
  o.head = tcpdp::encode(h, b.pieces);
  o.total = o.head.size();
  if (write) {
    o.total += bytes;
    o.write_batch = id;
    b.holds = true;
    job.inflight++;
    peer.inflight++;
  }
  tcp_pending_begins_locked(peer);
  lane.tcp_outstanding++;
  peer.tcp_pieces += b.pieces.size();
  peer.rr_last = job.seq;
  note_ops_in_flight(*peer.record, peer.tcp_pieces);
  peer.tcp->out.push_back(std::move(o));
  peer.tcp->batches.emplace(id, std::move(b));
  return true;
}


namespace {

// The frame at the front of a sealed connection's queue is about to start: its head becomes the
// sealed header (and descriptor) records, numbered now, in wire order.
void seal_frame_head(TcpData& d, TcpOut& o) {
  o.body_bytes = o.total - o.head.size();
  o.head = tcpdp::seal_head(*d.sealer, o.head);
  o.total = o.head.size() + tcpdp::sealed_payload_bytes(o.body_bytes);
  o.sealed = true;
  d.tx.clear();
  d.tx_sent = 0;
}

// Seals the frame's next payload segment from its body (registered memory) into d.tx. Runs
// without the core's mutex: the claimer owns the connection, and the memory stays busy (a ReadData's
// regions) or held (a Write's batch) until the frame is sent.
void seal_next_segment(TcpData& d, TcpOut& o) {
  const size_t n = static_cast<size_t>(std::min<uint64_t>(tcpdp::kSegmentBytes, o.body_bytes - o.body_sealed));
  d.tx.resize(n + tcpdp::kTagBytes);
  d.tx_sent = 0;
  tcpdp::RecordCipher& c = *d.sealer;
  c.begin(tcpdp::RecordKind::Payload);
  size_t done = 0;
  while (done < n) {
    const iovec& v = o.body[o.body_index];
    const size_t t = std::min(n - done, v.iov_len - o.body_offset);
    c.update(static_cast<const uint8_t*>(v.iov_base) + o.body_offset, d.tx.data() + done, t);
    done += t;
    o.body_offset += t;
    if (o.body_offset == v.iov_len) {
      ++o.body_index;
      o.body_offset = 0;
    }
  }
  c.finish(std::span<uint8_t, tcpdp::kTagBytes>(d.tx.data() + n, tcpdp::kTagBytes));
  o.body_sealed += n;
}

}  // namespace

bool AgentCore::stage_frame(std::unique_lock<std::mutex>& g, PeerConn& peer, TcpOut& o) {
  TcpData& d = *peer.tcp;
  std::optional<core::Error> failed;
  int err = 0;
  // This call owns the connection's I/O (d.io): nobody else touches the frame, the connection's
  // staging buffers or (busy regions, a batch holding its job) the memory the body points into.
  without_lock(g, &err, [&]() -> ssize_t {
    try {
      stage_outgoing(d, o, o.stage_devices);
    } catch (const core::Error& e) {
      failed = e;
    }
    return 0;
  });
  o.stage_devices.clear();
  if (!failed) return true;
  if (o.write_batch != 0) {
    // A WRITE whose device bytes could not be read: its transfer fails; the frame, not started,
    // is then dropped by tcp_send as any stopped transfer's is.
    auto it = d.batches.find(o.write_batch);
    if (it == d.batches.end()) {  // not expected (only this call retires an unsent Write's batch)
      recycle_staging(d, o);
      d.out.pop_front();
      return false;
    }
    TransferJob& job = *it->second.job;
    fail_job_locked(job, failed->status(),
                    "copying the bytes of read " + std::to_string(job.ops[it->second.ops.front()].read_index) +
                        " out of CUDA device memory: " + failed->what());
    return false;
  }
  // A READ answer: refused instead (the peer fails its read naming the reason).
  for (auto& r : o.busy) unbusy_locked(r);
  o.busy.clear();
  recycle_staging(d, o);
  refuse_read_answer(peer, o, tcpdp::Refusal::Device);
  return false;
}

void AgentCore::refuse_read_answer(PeerConn& peer, TcpOut& o, tcpdp::Refusal why) {
  tcpdp::Header a;
  a.type = tcpdp::FrameType::ReadData;
  a.batch = o.answer_batch;
  a.status = static_cast<uint32_t>(why);
  o.head = tcpdp::encode(a, {});
  o.body.clear();
  o.total = o.head.size();
  peer.record->operations_failed++;
}

std::string AgentCore::tcp_send(std::unique_lock<std::mutex>& g, PeerConn& peer) {
  TcpData& d = *peer.tcp;
  uint64_t budget = kTcpRoundBytes;
  while (!d.out.empty() && budget > 0 && !d.drop) {
    TcpOut& o = d.out.front();
    if (o.sent == 0 && !o.sealed && o.write_batch != 0) {
      // A Write not started for a transfer that stopped: it is not sent (nothing of it lands).
      auto it = d.batches.find(o.write_batch);
      if (it != d.batches.end() && (it->second.job->stopping() || it->second.job->finalized)) {
        TcpBatch& b = it->second;
        TransferJob& job = *b.job;
        for (uint32_t i : b.ops) {
          if (job.ops[i].state == TransferJob::Op::State::InFlight) job.ops[i].state = TransferJob::Op::State::Pending;
        }
        job.lanes[b.lane].tcp_retire(b);
        if (b.holds) {
          job.inflight--;
          peer.inflight--;
        }
        auto keep = b.job;
        d.batches.erase(it);
        recycle_staging(d, d.out.front());
        d.out.pop_front();
        check_final_locked(*keep);
        continue;
      }
    }
    if (o.sent == 0 && !o.sealed && !o.stage_devices.empty()) {
      if (!stage_frame(g, peer, o)) continue;  // failed: the frame was dropped or became a refusal
    }
    iovec iov[cma::kMaxIov];
    int n = 0;
    size_t head_part = 0;  // bytes of iov[0] that are the head (sealed: the rest comes from tx)
    int err = 0;
    ssize_t k = 0;
    if (d.sealer) {
      // Sealed: the head records, then one sealed payload segment at a time from d.tx.
      std::string failed;
      k = without_lock(g, &err, [&]() -> ssize_t {
        try {
          if (!o.sealed) seal_frame_head(d, o);
          if (d.tx_sent == d.tx.size() && o.body_sealed < o.body_bytes) seal_next_segment(d, o);
        } catch (const std::exception& e) {
          failed = e.what();
          return -2;
        }
        if (o.sent < o.head.size()) {
          head_part = o.head.size() - o.sent;
          iov[n++] = {o.head.data() + o.sent, head_part};
        }
        if (d.tx_sent < d.tx.size()) iov[n++] = {d.tx.data() + d.tx_sent, d.tx.size() - d.tx_sent};
        msghdr m{};
        m.msg_iov = iov;
        m.msg_iovlen = static_cast<size_t>(n);
        return ::sendmsg(d.fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
      });
      if (k == -2) return "sealing a data frame: " + failed;
    } else {
      uint64_t skip = o.sent;
      if (skip < o.head.size()) {
        iov[n++] = {o.head.data() + skip, o.head.size() - skip};
        skip = 0;
      } else {
        skip -= o.head.size();
      }
      for (const iovec& b : o.body) {
        if (n == static_cast<int>(cma::kMaxIov)) break;
        if (skip >= b.iov_len) {
          skip -= b.iov_len;
          continue;
        }
        iov[n++] = {static_cast<uint8_t*>(b.iov_base) + skip, b.iov_len - skip};
        skip = 0;
      }
      msghdr m{};
      m.msg_iov = iov;
      m.msg_iovlen = static_cast<size_t>(n);
      k = without_lock(g, &err, [&] { return ::sendmsg(d.fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT); });
    }
    if (k < 0) {
      if (err == EINTR) continue;
      if (err == EAGAIN || err == EWOULDBLOCK) break;
      return "sending on the data connection: " + cma::errno_text(err);
    }
    o.sent += static_cast<uint64_t>(k);
    if (k > 0) d.note_moved();
    if (d.sealer) d.tx_sent += static_cast<size_t>(k) - std::min<size_t>(static_cast<size_t>(k), head_part);
    budget -= std::min<uint64_t>(budget, static_cast<uint64_t>(k));
    if (o.sent == o.total) {
      for (auto& r : o.busy) {
        unbusy_locked(r);
      }
      recycle_staging(d, o);
      d.out.pop_front();
      d.tx.clear();
      d.tx_sent = 0;
    }
  }
  return "";
}

std::string AgentCore::tcp_recv(std::unique_lock<std::mutex>& g, PeerConn& peer, Status* status, unsigned* frames) {
  TcpData& d = *peer.tcp;
  uint64_t budget = kTcpRoundBytes;
  *status = Status::PeerLost;
  while (budget > 0 && !peer.lost && !d.drop) {
    const std::span<uint8_t> want = d.reader.want();
    if (!want.empty()) {
      // Answers waiting to be sent: read no further request until they drain (a peer cannot
      // queue unbounded work here; its own sends just stall).
      if (d.reader.idle() && d.out.size() >= kTcpMaxQueuedFrames) break;
      int err = 0;
      const ssize_t k = without_lock(g, &err, [&] { return ::recv(d.fd, want.data(), want.size(), MSG_DONTWAIT); });
      if (k == 0) return "the data connection was closed by the peer";
      if (k < 0) {
        if (err == EINTR) continue;
        if (err == EAGAIN || err == EWOULDBLOCK) break;
        return "receiving on the data connection: " + cma::errno_text(err);
      }
      d.note_moved();
      budget -= std::min<uint64_t>(budget, static_cast<uint64_t>(k));
      try {
        const bool was_ready = d.reader.ready();
        // Sealed: opens the header / descriptor record, or checks a payload segment's tag.
        d.reader.received(static_cast<size_t>(k));
        if (!was_ready && d.reader.ready()) tcp_frame_ready_locked(peer);
      } catch (const core::Error& e) {
        *status = e.status();
        return e.what();
      }
    } else if (!d.reader.complete()) {
      // Payload bytes land where tcp_frame_ready_locked put them (checked registered memory or the
      // sink), at most the current sealed segment at a time (its tag follows it); sealed, they are
      // decrypted there in place, and count only once every tag of the frame verified.
      iovec iov[cma::kMaxIov];
      int n = 0;
      uint64_t room = d.reader.payload_chunk();
      for (size_t i = d.rx_index; i < d.rx.size() && n < static_cast<int>(cma::kMaxIov) && room > 0; ++i) {
        const size_t t = static_cast<size_t>(std::min<uint64_t>(room, d.rx[i].iov_len));
        iov[n++] = {d.rx[i].iov_base, t};
        room -= t;
      }
      int err = 0;
      std::string failed;
      const ssize_t k = without_lock(g, &err, [&]() -> ssize_t {
        const ssize_t got = ::readv(d.fd, iov, n);
        if (got <= 0) return got;
        const int saved = errno;
        try {
          uint64_t left = static_cast<uint64_t>(got);
          while (left > 0) {
            iovec& v = d.rx[d.rx_index];
            const size_t t = static_cast<size_t>(std::min<uint64_t>(left, v.iov_len));
            d.reader.payload_received(std::span<uint8_t>(static_cast<uint8_t*>(v.iov_base), t));
            v.iov_base = static_cast<uint8_t*>(v.iov_base) + t;
            v.iov_len -= t;
            left -= t;
            if (v.iov_len == 0) ++d.rx_index;
          }
        } catch (const std::exception& e) {
          failed = e.what();
        }
        errno = saved;
        return got;
      });
      if (!failed.empty()) {
        *status = Status::Internal;
        return failed;
      }
      if (k == 0) return "the data connection was closed by the peer";
      if (k < 0) {
        if (err == EINTR) continue;
        if (err == EAGAIN || err == EWOULDBLOCK) break;
        return "receiving on the data connection: " + cma::errno_text(err);
      }
      d.note_moved();
      budget -= std::min<uint64_t>(budget, static_cast<uint64_t>(k));
    }
    if (d.reader.complete()) {
      const std::optional<core::Error> landing_failed =
          d.rx_device.empty() ? std::nullopt : tcp_land_frame(g, peer);
      try {
        tcp_frame_done_locked(peer, landing_failed);
      } catch (const core::Error& e) {
        *status = e.status();
        return e.what();
      }
      d.reader.next();
      ++*frames;
    }
  }
  return "";
}

void AgentCore::tcp_frame_ready_locked(PeerConn& peer) {
  TcpData& d = *peer.tcp;
  const tcpdp::Header& h = d.reader.header();
  const auto& pieces = d.reader.pieces();
  const std::string who = peer_label(peer);
  switch (h.type) {
    case tcpdp::FrameType::ReadRequest: {
      // Serving a READ: every range the peer names is checked against this agent's live
      // registrations; one outside them refuses the whole batch (nothing of it is sent).
      TcpOut o;
      tcpdp::Header a;
      a.type = tcpdp::FrameType::ReadData;
      a.batch = h.batch;
      std::vector<std::shared_ptr<Registration>> regs;
      bool any_device = false;
      uint64_t bytes = 0;
      tcpdp::Refusal refusal = tcpdp::Refusal::None;
      for (const auto& p : pieces) {
        iovec v{};
        std::shared_ptr<Registration> reg;
        if (!tcp_check_local(p, &v, &reg).empty()) {
          refusal = tcpdp::Refusal::Range;
          break;
        }
        o.body.push_back(v);
        bytes += p.length;
        any_device |= reg->type == MemoryType::Cuda;
        if (std::find(regs.begin(), regs.end(), reg) == regs.end()) regs.push_back(reg);
      }
      o.answer_batch = h.batch;
      if (refusal != tcpdp::Refusal::None) {
        refuse_read_answer(peer, o, refusal);
      } else {
        o.head = tcpdp::encode(a, pieces);
        o.total = o.head.size() + bytes;
        for (auto& r : regs) r->busy++;
        o.busy = std::move(regs);
        // Copied to host memory when the answer starts to be sent (tcp_send), without the lock;
        // the regions stay busy (alive) until then. A failed copy turns it into a refusal.
        if (any_device) o.stage_devices = piece_devices(pieces, regs_);
      }
      d.out.push_back(std::move(o));
      return;
    }
    case tcpdp::FrameType::ReadData: {
      auto it = d.batches.find(h.batch);
      if (it == d.batches.end() || it->second.write) {
        core::fail(Status::Protocol, who + " answered batch " + std::to_string(h.batch) + ", which this side did not request");
      }
      TcpBatch& b = it->second;
      TransferJob& job = *b.job;
      if (h.status != 0) {
        auto keep = b.job;
        const uint32_t first = b.ops.front();
        for (uint32_t i : b.ops) job.ops[i].state = TransferJob::Op::State::Pending;
        job.lanes[b.lane].tcp_retire(b);
        d.batches.erase(it);
        if (!job.finalized) {
          op_failed_locked(job.ops[first], Status::Transport,
                           who + " refused to serve read " + std::to_string(job.ops[first].read_index) + ": " +
                               tcpdp::refusal_reason(h.status, "a range lies outside its registered memory (was a region deregistered?)"));
        }
        check_final_locked(*keep);
        return;
      }
      if (pieces != b.pieces) {
        core::fail(Status::Protocol, who + " answered batch " + std::to_string(h.batch) + " with other pieces than were requested");
      }
      d.rx_batch = h.batch;
      d.rx_write = false;
      if (job.finalized || job.stopping()) {
        sink_iov(d, d.reader.payload_left());  // nobody wants these bytes any more
      } else {
        d.rx = b.local;
        d.rx_index = 0;
        std::vector<const Registration*> devices;
        if (batch_devices(job, b, &devices)) stage_incoming(d, d.rx, devices);
        b.holds = true;
        job.inflight++;
        peer.inflight++;
      }
      return;
    }
    case tcpdp::FrameType::Write: {
      // Receiving a WRITE: every target range is checked against this agent's registrations
      // before a byte is received; a batch with one outside them goes to the sink and is refused.
      d.rx_write = true;
      d.rx_batch = h.batch;
      d.rx_ack_status = 0;
      d.rx_busy.clear();
      std::vector<iovec> to;
      bool any_device = false;
      for (const auto& p : pieces) {
        iovec v{};
        std::shared_ptr<Registration> reg;
        if (!tcp_check_local(p, &v, &reg).empty()) {
          d.rx_ack_status = static_cast<uint32_t>(tcpdp::Refusal::Range);
          break;
        }
        to.push_back(v);
        any_device |= reg->type == MemoryType::Cuda;
        if (std::find(d.rx_busy.begin(), d.rx_busy.end(), reg) == d.rx_busy.end()) d.rx_busy.push_back(reg);
      }
      if (d.rx_ack_status != 0) {
        d.rx_busy.clear();
        sink_iov(d, d.reader.payload_left());
      } else {
        for (auto& r : d.rx_busy) r->busy++;
        if (any_device) stage_incoming(d, to, piece_devices(pieces, regs_));  // the regions stay busy until the copy
        d.rx = std::move(to);
        d.rx_index = 0;
      }
      return;
    }
    case tcpdp::FrameType::WriteAck: {
      auto it = d.batches.find(h.batch);
      if (it == d.batches.end() || !it->second.write) {
        core::fail(Status::Protocol, who + " acknowledged batch " + std::to_string(h.batch) + ", which this side did not write");
      }
      for (const auto& o : d.out) {
        if (o.write_batch == h.batch) {
          core::fail(Status::Protocol, who + " acknowledged batch " + std::to_string(h.batch) + " before it was sent");
        }
      }
      TcpBatch& b = it->second;
      auto keep = b.job;
      TransferJob& job = *keep;
      if (b.holds) {
        job.inflight--;
        peer.inflight--;
        b.holds = false;
      }
      job.lanes[b.lane].tcp_retire(b);
      if (h.status == 0) {
        tcp_batch_landed_locked(peer, b);
      } else if (!job.finalized) {
        op_failed_locked(job.ops[b.ops.front()], Status::Transport,
                         who + " refused the bytes of read " + std::to_string(job.ops[b.ops.front()].read_index) + ": " +
                             tcpdp::refusal_reason(h.status, "a target range lies outside its registered memory (was a region deregistered?)"));
      }
      d.batches.erase(it);
      check_final_locked(job);
      return;
    }
  }
}

void AgentCore::tcp_batch_landed_locked(PeerConn&, TcpBatch& b) {
  TransferJob& job = *b.job;
  if (job.finalized) return;
  for (size_t i = 0; i < b.ops.size(); ++i) {
    TransferJob::Op& op = job.ops[b.ops[i]];
    op.tcp_landed += b.pieces[i].length;
    if (op.tcp_landed == op.length) op_succeeded_locked(op);
  }
}

std::optional<core::Error> AgentCore::tcp_land_frame(std::unique_lock<std::mutex>& g, PeerConn& peer) {
  TcpData& d = *peer.tcp;
  std::vector<DeviceLanding> landing;
  landing.swap(d.rx_device);
  const tcpdp::Header& h = d.reader.header();
  if (h.type == tcpdp::FrameType::ReadData) {
    // A read nobody wants any more (cancelled, failed) is not copied to the device.
    auto it = d.batches.find(d.rx_batch);
    if (it == d.batches.end() || !it->second.holds || it->second.job->stopping()) return std::nullopt;
  } else if (h.type != tcpdp::FrameType::Write || d.rx_ack_status != 0) {
    return std::nullopt;
  }
  // This call owns the connection's I/O (d.io): the staging buffer is the connection's, and the
  // target regions stay alive meanwhile (a Write's are busy, a read's job is held by its batch,
  // which only this call retires). Like readv into host memory, the copy runs without the lock.
  std::optional<core::Error> failed;
  int err = 0;
  without_lock(g, &err, [&]() -> ssize_t {
    try {
      land_incoming(landing);
    } catch (const core::Error& e) {
      failed = e;
    }
    return 0;
  });
  return failed;
}

void AgentCore::tcp_frame_done_locked(PeerConn& peer, const std::optional<core::Error>& landing_failed) {
  TcpData& d = *peer.tcp;
  const tcpdp::Header& h = d.reader.header();
  d.rx.clear();
  d.rx_index = 0;
  if (h.type == tcpdp::FrameType::ReadData && h.status == 0) {
    auto it = d.batches.find(d.rx_batch);
    if (it == d.batches.end()) return;
    TcpBatch& b = it->second;
    auto keep = b.job;
    TransferJob& job = *keep;
    job.lanes[b.lane].tcp_retire(b);
    if (b.holds) {
      job.inflight--;
      peer.inflight--;
      b.holds = false;
      if (!job.stopping()) {
        if (landing_failed) {  // the staged device bytes did not reach the device (tcp_land_frame)
          op_failed_locked(job.ops[b.ops.front()], landing_failed->status(),
                           "copying the bytes of read " + std::to_string(job.ops[b.ops.front()].read_index) +
                               " into CUDA device memory: " + landing_failed->what());
        } else {
          tcp_batch_landed_locked(peer, b);
        }
      }
    }
    d.batches.erase(it);
    check_final_locked(job);
  } else if (h.type == tcpdp::FrameType::Write) {
    // tcp_land_frame copied the staged device bytes before this acknowledgement: an acknowledged
    // byte is in device memory.
    if (d.rx_ack_status == 0 && landing_failed) d.rx_ack_status = static_cast<uint32_t>(tcpdp::Refusal::Device);
    for (auto& r : d.rx_busy) {
      unbusy_locked(r);
    }
    d.rx_busy.clear();
    TcpOut o;
    tcpdp::Header a;
    a.type = tcpdp::FrameType::WriteAck;
    a.batch = d.rx_batch;
    a.status = d.rx_ack_status;
    o.head = tcpdp::encode(a, {});
    o.total = o.head.size();
    d.out.push_back(std::move(o));
  }
}

void AgentCore::tcp_drop_locked(PeerConn& peer, Status status, const std::string& why) {
  if (!peer.tcp) return;
  TcpData& d = *peer.tcp;
  if (d.io) {
    // A progress call is in a system call on this connection without the lock: shut the socket
    // down (that call returns at once) and let that progress call drop it when it is back.
    if (!d.drop) d.drop.emplace(status, why);
    if (d.fd >= 0) ::shutdown(d.fd, SHUT_RDWR);
    return;
  }
  if (d.fd >= 0) {
    ::epoll_ctl(progress_epoll_, EPOLL_CTL_DEL, d.fd, nullptr);
    if (opt_.progress == ProgressMode::Caller) ::epoll_ctl(work_epoll_, EPOLL_CTL_DEL, d.fd, nullptr);
    ::shutdown(d.fd, SHUT_RDWR);
  }
  auto unbusy = [&](std::vector<std::shared_ptr<Registration>>& regs) {
    for (auto& r : regs) {
      unbusy_locked(r);
    }
    regs.clear();
  };
  for (auto& o : d.out) unbusy(o.busy);
  d.out.clear();
  unbusy(d.rx_busy);
  d.rx.clear();
  d.rx_device.clear();  // staged device bytes of a frame that will never complete
  std::vector<std::shared_ptr<TransferJob>> touched;
  for (auto& [id, b] : d.batches) {
    TransferJob& job = *b.job;
    if (b.holds) {
      job.inflight--;
      peer.inflight--;
    }
    job.lanes[b.lane].tcp_retire(b);
    if (!job.finalized) {
      TransferJob::Op& op = job.ops[b.ops.front()];
      op_failed_locked(op, status, peer_label(peer) + ": " + why);
    }
    touched.push_back(b.job);
  }
  d.batches.clear();
  for (auto& j : touched) check_final_locked(*j);
  peer.tcp.reset();
}

namespace {

// The kernel's tcp_info up to its count of the bytes the peer acknowledged (Linux 4.1; glibc's
// struct ends before it, at the layout's tcpi_total_retrans).
struct TcpInfoAcked {
  tcp_info base;
  uint64_t pacing_rate;
  uint64_t max_pacing_rate;
  uint64_t bytes_acked;
};
static_assert(sizeof(tcp_info) == 104 && offsetof(TcpInfoAcked, bytes_acked) == 120,
              "tcp_info's layout differs from the kernel's");

// Bytes of what this side sent that the peer acknowledged, as the kernel counts them: the count
// grows while a slow peer drains the socket, before a send here finds room again. False where the
// kernel does not say.
bool wire_acked(int fd, uint64_t* acked) {
  TcpInfoAcked info{};
  socklen_t len = sizeof info;
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return false;
  if (len < offsetof(TcpInfoAcked, bytes_acked) + sizeof info.bytes_acked) return false;
  *acked = info.bytes_acked;
  return true;
}

}  // namespace

void AgentCore::tcp_pending_begins_locked(PeerConn& peer) {
  TcpData& d = *peer.tcp;
  if (d.pending()) return;
  d.note_moved();
  wake_control_at_locked(tcp_check_due_locked(peer));
}

// Checked every quarter of the timeout once nothing has moved for that long, so a peer that
// stopped is lost between 1 and 1.25 timeouts after its last byte.
Clock::time_point AgentCore::tcp_check_due_locked(const PeerConn& peer) const {
  if (peer.lost || !peer.tcp || peer.tcp->fd < 0 || !peer.tcp->pending()) return Clock::time_point::max();
  const auto quarter = std::max<Clock::duration>(opt_.heartbeat_timeout / 4, std::chrono::milliseconds(1));
  return std::max(peer.tcp->moved_at, peer.tcp->sampled_at) + quarter;
}

std::vector<std::pair<std::shared_ptr<PeerConn>, std::string>> AgentCore::tcp_stalled_locked(Clock::time_point now) {
  std::vector<std::pair<std::shared_ptr<PeerConn>, std::string>> stalled;
  for (auto& [key, p] : peers_) {
    if (now < tcp_check_due_locked(*p)) continue;
    TcpData& d = *p->tcp;
    d.sampled_at = now;
    // A progress call is on the connection now: it moves what can move.
    if (d.io) continue;
    // The peer acknowledged bytes although no call here moved any since (it drains a full socket
    // slowly): it is alive. (Bytes it sends are read here as they come, or count below while this
    // side does not read; while this side holds back reads, its sending does not count.)
    uint64_t acked = 0;
    if (wire_acked(d.fd, &acked)) {
      // A sample taken before a call here last moved bytes is only a new baseline: the kernel
      // counted those bytes, not the peer's since.
      const bool counts = acked != d.wire_acked && !d.wire_stale;
      d.wire_acked = acked;
      d.wire_stale = false;
      if (counts) {
        d.moved_at = now;
        continue;
      }
    }
    // This side's own backlog (a caller-progress agent whose caller has not called): bytes
    // waiting to be read here, or room to send what is queued, are not the peer's silence.
    pollfd pf{d.fd, POLLIN | POLLOUT, 0};
    if (::poll(&pf, 1, 0) == 1) {
      const bool readable = (pf.revents & POLLIN) != 0 && (d.watched & EPOLLIN) != 0;
      const bool writable = (pf.revents & POLLOUT) != 0 && !d.out.empty();
      if ((pf.revents & (POLLERR | POLLHUP)) == 0 && (readable || writable)) {
        d.moved_at = now;
        continue;
      }
    }
    if (now - d.moved_at < opt_.heartbeat_timeout) continue;
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - d.moved_at).count();
    uint64_t queued = 0;
    for (const auto& o : d.out) queued += o.total - o.sent;
    stalled.emplace_back(p, "its data connection made no progress for " + std::to_string(ms) +
                                " ms (heartbeat timeout " + std::to_string(opt_.heartbeat_timeout.count()) +
                                " ms) with " + std::to_string(d.batches.size()) + " batches unanswered and " +
                                std::to_string(queued) + " bytes waiting to be sent");
  }
  return stalled;
}

unsigned AgentCore::tcp_progress(std::unique_lock<std::mutex>& g) {
  unsigned frames = 0;
  tcp_start_batches_locked();
  if (stopping_.load()) return 0;
  // Claim every data connection no other progress call is using: their system calls then run
  // without the lock (other calls on the agent are not held up by kernel copies), and shutdown
  // waits for them (unlocked_io_) so no byte moves after the agent is freed.
  std::vector<std::shared_ptr<PeerConn>> mine;
  for (auto& [key, p] : peers_) {
    if (!p->tcp || p->lost || p->tcp->io) continue;
    p->tcp->io = true;
    mine.push_back(p);
  }
  if (mine.empty()) return 0;
  ++unlocked_io_;
  struct Claim {  // gives the claims back if an exception leaves this function (under the lock)
    AgentCore& core;
    std::vector<std::shared_ptr<PeerConn>>& mine;
    bool done = false;
    ~Claim() {
      if (done) return;
      for (auto& p : mine) {
        if (p->tcp) p->tcp->io = false;
      }
      if (--core.unlocked_io_ == 0) core.unlocked_idle_.notify_all();
    }
  } claim{*this, mine};
  std::vector<std::tuple<std::shared_ptr<PeerConn>, Status, std::string>> failed;
  for (auto& p : mine) {
    Status st = Status::PeerLost;
    std::string why = tcp_send(g, *p);
    if (why.empty()) why = tcp_recv(g, *p, &st, &frames);
    if (why.empty()) why = tcp_send(g, *p);  // answers queued by what arrived
    TcpData& d = *p->tcp;  // a drop meanwhile waited for this call (d.drop)
    d.io = false;
    if (d.drop) {
      // The peer was lost (or its transfer missed its deadline) while this call was in a system
      // call: finish the drop now, with the reason given then.
      const auto [status, text] = *d.drop;
      tcp_drop_locked(*p, status, text);
      continue;
    }
    if (!why.empty()) {
      failed.emplace_back(p, st, why);
      continue;
    }
    const bool paused = d.reader.idle() && d.out.size() >= kTcpMaxQueuedFrames;
    const uint32_t want = (paused ? 0u : static_cast<uint32_t>(EPOLLIN)) | (d.out.empty() ? 0u : static_cast<uint32_t>(EPOLLOUT));
    // Work left pending (answers queued, batches unanswered): the control thread checks the peer
    // moves bytes (tcp_stalled_locked), waking for it if its sleep would end later.
    const auto due = tcp_check_due_locked(*p);
    if (due != Clock::time_point::max()) wake_control_at_locked(due);
    if (want != d.watched) {
      d.watched = want;
      epoll_event ev{};
      ev.events = want;
      ev.data.u64 = 4;
      ::epoll_ctl(progress_epoll_, EPOLL_CTL_MOD, d.fd, &ev);
      if (opt_.progress == ProgressMode::Caller) ::epoll_ctl(work_epoll_, EPOLL_CTL_MOD, d.fd, &ev);
    }
  }
  claim.done = true;
  if (--unlocked_io_ == 0) unlocked_idle_.notify_all();
  for (auto& [p, st, why] : failed) {
    const std::string text = st == Status::Protocol ? "garbled data connection: " + why : why;
    tcp_drop_locked(*p, st, text);
    lose_peer_locked(p, st, text, true);
  }
  return frames;
}

}  // namespace pdkv::exec
