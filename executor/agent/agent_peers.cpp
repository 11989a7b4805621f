// Peers: handshakes (outbound on the caller's thread, inbound on a thread each), admission (the
// data path: cross-memory attach or the tcp data connection), the control loop (frames,
// heartbeats, lease expiry) and peer loss.
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <string>
#include <thread>
#include <unordered_map>

#include "agent/agent_core.hpp"
#include "pdkv/core/handshake.hpp"

namespace pdkv::exec {

using core::Status;

namespace {

constexpr size_t kMaxInboundHandshakes = 64;
// Threads of evicted handshakes still winding down are allowed on top of the 64, up to this many
// in all; beyond that new connections are refused until they are reaped.
constexpr size_t kMaxInboundThreads = 2 * kMaxInboundHandshakes;

// "1.2.3.4:5" -> "1.2.3.4", "[::1]:5" -> "[::1]": handshakes are shared out per source address.
std::string source_of(const std::string& peer) {
  const size_t colon = peer.rfind(':');
  return colon == std::string::npos ? peer : peer.substr(0, colon);
}
// Connections taken per listener wakeup: a flood of them must not starve heartbeats and frames
// (the listener is level-triggered, so the rest come on the next round).
constexpr int kMaxAcceptsPerWakeup = 64;
// How long the listener is left alone after accept() failed (EMFILE, ENFILE, ENOBUFS).
constexpr auto kAcceptBackoff = std::chrono::milliseconds(100);

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count());
}

std::string peer_name(const std::string& engine, uint32_t rank, const std::string& address) {
  return "peer '" + engine + "' rank " + std::to_string(rank) + " at " + address;
}

}  // namespace

std::vector<MappableRegion> AgentCore::mappable_regions() const {
  std::vector<MappableRegion> out;
  std::lock_guard<std::mutex> g(mu_);
  for (const auto& reg : regs_) {
    if (!reg || !reg->usable() || reg->type != MemoryType::Host) continue;
    const auto at = cma::find_shared(reg->base, reg->length);
    if (!at) continue;
    MappableRegion x;
    x.region = reg->region;
    x.base = reg->base;
    x.length = reg->length;
    x.fd = static_cast<uint32_t>(at->fd);
    x.offset = at->offset;
    x.file_size = at->file_size;
    x.dev = at->dev;
    x.ino = at->ino;
    out.push_back(x);
  }
  return out;
}

std::string AgentCore::device_region_note(const std::vector<RegisteredRange>& theirs, const std::string& their_engine,
                                          uint32_t their_rank) const {
  auto note = [](const std::string& engine, uint32_t rank, size_t region) {
    return "region " + std::to_string(region) + " of engine '" + engine + "' rank " + std::to_string(rank) +
           " is CUDA device memory, which cross-memory attach cannot reach (it copies host memory only)";
  };
  {
    std::lock_guard<std::mutex> g(mu_);
    for (const auto& reg : regs_) {
      if (reg && reg->usable() && reg->type == MemoryType::Cuda) {
        return note(opt_.metadata.engine_id, opt_.metadata.tp_rank, reg->region);
      }
    }
  }
  for (size_t i = 0; i < theirs.size(); ++i) {
    if (theirs[i].present && theirs[i].device) return note(their_engine, their_rank, i);
  }
  return "";
}

std::vector<std::shared_ptr<const cma::PeerMapping>> AgentCore::map_peer_regions(
    const cma::PeerProcess& process, const std::vector<RegisteredRange>& ranges,
    const std::vector<MappableRegion>& offered, uint32_t* mapped, std::string* note) {
  std::vector<std::shared_ptr<const cma::PeerMapping>> maps(ranges.size());
  *mapped = 0;
  if (offered.empty()) *note = "the peer advertised no region in a pdkv shared allocation";
  for (const MappableRegion& x : offered) {
    // Only exactly the range the peer registered and advertised (and this side range-checks
    // every read against): a mapping never reaches beyond it.
    if (x.region >= ranges.size() || !ranges[x.region].present || ranges[x.region].base != x.base ||
        ranges[x.region].length != x.length || ranges[x.region].device || maps[x.region]) {
      *note = "region " + std::to_string(x.region) + ": advertised as mappable with a range it did not register";
      continue;
    }
    std::string why;
    auto m = cma::PeerMapping::open(process.pidfd(), x.fd, x.offset, x.length, x.file_size, x.dev, x.ino, &why);
    if (!m) {
      *note = "region " + std::to_string(x.region) + ": " + why;
      continue;
    }
    maps[x.region] = std::move(m);
    ++*mapped;
  }
  return maps;
}

HandshakeParams AgentCore::handshake_params_locked() const {
  HandshakeParams p;
  p.hello.engine_id = opt_.metadata.engine_id;
  p.hello.tp_rank = opt_.metadata.tp_rank;
  p.hello.host_id = host_id_;
  p.hello.proto_minor = opt_.control_minor;  // the handshake says at most this build's
  p.info.metadata = core::encode(opt_.metadata);
  // The PeerInfo frame keeps its worker address field, sent empty: no agent creates a UCX
  // endpoint any more (peers move bytes with cross-memory attach or the tcp data connection).
  p.info.transport_hint = static_cast<uint8_t>(opt_.transport);
  p.info.cma_pid = cma_probe_->pid();
  p.info.cma_probe_address = cma_probe_->address();
  p.info.cma_probe = cma_probe_->value();
  for (const auto& reg : regs_) {
    if (!reg || !reg->usable()) continue;
    RegionKey k;
    k.region = reg->region;
    k.base = reg->base;
    k.length = reg->length;
    k.memory_type = static_cast<uint32_t>(reg->type);
    if (reg->ucx) k.rkey = reg->ucx->packed_rkey();  // device memory has no UCX key: sent empty
    p.info.regions.push_back(std::move(k));
  }
  p.key = opt_.key;
  return p;
}

// Everything a peer claims is checked before it is believed: its metadata decodes (checksum,
// bounds), names the identity its Hello named, and every key it sends is for a region it
// advertises, covering exactly that region's bytes, at most once. Then the pair must pass the
// core's handshake validation; the side that connects is the reader (D) in that check, so
// both sides judge the same (D, P) pair.
AgentCore::CheckedPeer AgentCore::check_peer(const Hello& hello, const PeerInfo& info,
                                             bool we_connected) const {
  CheckedPeer out;
  try {
    out.metadata = core::decode(info.metadata);
  } catch (const core::Error& e) {
    core::fail(Status::Protocol, std::string("peer metadata does not decode: ") + e.what());
  }
  const auto& md = out.metadata;
  if (hello.proto_minor < opt_.min_peer_minor) {
    core::fail(Status::Incompatible,
               "peer '" + hello.engine_id + "' rank " + std::to_string(hello.tp_rank) + " runs control protocol " +
                   std::to_string(hello.proto_major) + "." + std::to_string(hello.proto_minor) + ", older than the " +
                   std::to_string(kControlProtoMajor) + "." + std::to_string(opt_.min_peer_minor) +
                   " this agent ('" + opt_.metadata.engine_id + "' rank " + std::to_string(opt_.metadata.tp_rank) +
                   ") requires (min_peer_protocol_minor): run a newer pdkv there, or lower the setting");
  }
  if (md.engine_id != hello.engine_id || md.tp_rank != hello.tp_rank) {
    core::fail(Status::Protocol, "peer's Hello names engine '" + hello.engine_id + "' rank " +
                                     std::to_string(hello.tp_rank) + " but its metadata names '" +
                                     md.engine_id + "' rank " + std::to_string(md.tp_rank));
  }
  if (info.transport_hint > static_cast<uint8_t>(TransportMode::Auto)) {
    core::fail(Status::Protocol, "peer's transport hint " + std::to_string(info.transport_hint) +
                                     " is not a transport (0 shm, 1 tcp, 2 auto)");
  }
  if (md.engine_id == opt_.metadata.engine_id && md.tp_rank == opt_.metadata.tp_rank) {
    core::fail(Status::InvalidArgument, "peer has this agent's own identity: engine '" +
                                            md.engine_id + "' rank " + std::to_string(md.tp_rank));
  }
  out.ranges.resize(md.regions.size());
  for (const auto& k : info.regions) {
    if (k.region >= md.regions.size()) {
      core::fail(Status::Protocol, "peer sent a key for region " + std::to_string(k.region) +
                                       " but advertises " + std::to_string(md.regions.size()) +
                                       " regions");
    }
    const core::Region& r = md.regions[k.region].region;
    const uint64_t len = r.block_len * r.num_blocks;
    if (k.base != r.base || k.length != len) {
      core::fail(Status::Protocol, "peer's key for region " + std::to_string(k.region) + " covers [" +
                                       std::to_string(k.base) + ", +" + std::to_string(k.length) +
                                       ") but the region is [" + std::to_string(r.base) + ", +" +
                                       std::to_string(len) + ")");
    }
    // Host regions carry UCX's packed key (its layout is checked, its bytes unused); CUDA regions
    // carry none: their bytes move over the tcp data connection only, staged by their owner.
    // (A peer older than device memory refuses a CUDA region here as an unknown type.)
    const bool device = k.memory_type == static_cast<uint32_t>(MemoryType::Cuda);
    if (k.memory_type != static_cast<uint32_t>(MemoryType::Host) && !device) {
      core::fail(Status::Protocol, "peer's region " + std::to_string(k.region) +
                                       " has memory type " + std::to_string(k.memory_type) +
                                       ", which is neither host (0) nor cuda (1)");
    }
    if (device && !k.rkey.empty()) {
      core::fail(Status::Protocol, "peer's CUDA region " + std::to_string(k.region) + " came with a " +
                                       std::to_string(k.rkey.size()) + "-byte key; device memory has none");
    }
    if (!device && k.rkey.empty()) {
      core::fail(Status::Protocol, "peer's key for region " + std::to_string(k.region) + " is empty");
    }
    if (!device) {
      if (const std::string why = packed_rkey_layout_error(k.rkey); !why.empty()) {
        core::fail(Status::Protocol, "peer's key for region " + std::to_string(k.region) + " is malformed: " + why);
      }
    }
    if (out.ranges[k.region].present) {
      core::fail(Status::Protocol, "peer sent two keys for region " + std::to_string(k.region));
    }
    out.ranges[k.region] = RegisteredRange{k.base, k.length, true, device};
  }
  // Which engine reads is not known here (either may dial, a pair may READ or WRITE): the pair is
  // admitted when it can be served with either as D; a direction it cannot serve is refused when the
  // D rank compiles a plan (compile_transfer_plan validates every P rank against D), so none exists. (The dialer was taken for D before, so a P
  // dialing a D it could serve was refused, and the pair vLLM refuses was admitted.)
  const auto items = we_connected ? core::validate_pair_either_role(opt_.metadata, md)
                                  : core::validate_pair_either_role(md, opt_.metadata);
  if (!items.empty()) {
    std::string msg = "engines '" + opt_.metadata.engine_id + "' and '" + md.engine_id +
                      "' cannot be paired: ";
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) msg += "; ";
      msg += core::to_string(items[i]);
    }
    core::fail(Status::Incompatible, msg);
  }
  return out;
}

std::shared_ptr<PeerRecord> AgentCore::connect(const HostPort& address,
                                               std::optional<std::chrono::milliseconds> timeout) {
  const auto deadline = deadline_after(Clock::now(), timeout.value_or(opt_.default_timeout));
  HandshakeParams params;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (stopped_) core::fail(Status::Shutdown, "the agent was shut down");
    params = handshake_params_locked();
  }
  std::optional<CheckedPeer> checked;
  params.validate = [&](const Hello& h, const PeerInfo& info) { checked = check_peer(h, info, true); };
  ControlChannel channel = ControlChannel::connect(address, deadline);
  HandshakeResult result = handshake_client(channel, params, deadline);
  return admit(channel, result, std::move(*checked), false, deadline);
}

// Waits for the next control frame in slices of 50 ms, so an outbound admission (on the caller's
// thread: shutdown cannot interrupt its socket) gives up soon after the agent starts shutting
// down. The channel's decoder keeps a partly received frame across the slices.
Frame AgentCore::recv_admission(ControlChannel& channel, Clock::time_point deadline) {
  for (;;) {
    const Clock::time_point slice = std::min(deadline, Clock::now() + std::chrono::milliseconds(50));
    try {
      return channel.recv(slice);
    } catch (const core::Error& e) {
      if (e.status() != Status::TimedOut || slice >= deadline) throw;
    }
    if (stopping_.load()) core::fail(Status::Shutdown, "the agent was shut down");
  }
}

TransportChoice choose_transport(TransportMode mine, TransportMode theirs, bool same_host,
                                 const TransportOffer& my_offer, const TransportOffer& their_offer) {
  TransportChoice c;
  const bool needs_shm = mine == TransportMode::Shm || theirs == TransportMode::Shm;
  auto side = [&](bool is_mine) { return is_mine ? std::string("this side") : std::string("the peer"); };
  if (mine == TransportMode::Tcp || theirs == TransportMode::Tcp) {
    if (needs_shm) {
      c.refusal = side(mine == TransportMode::Shm) + " requires transport shm but " +
                  side(mine == TransportMode::Tcp) + " uses tcp; configure the same transport (or auto) on both";
    }
    return c;
  }
  if (!same_host) {
    if (needs_shm) {
      c.refusal = side(mine == TransportMode::Shm) +
                  " requires transport shm (cross-memory attach), which needs both on one host, but the peer "
                  "runs on another host; use tcp or auto";
    }
    return c;
  }
  if (my_offer.cma == CmaVerdict::Works && their_offer.cma == CmaVerdict::Works) {
    c.mode = TransportMode::Shm;
    return c;
  }
  if (needs_shm) {
    std::string why;
    if (my_offer.cma != CmaVerdict::Works) {
      why = "this side cannot attach to the peer's memory: " +
            (my_offer.reason.empty() ? std::string("it did not try") : my_offer.reason);
    }
    if (their_offer.cma != CmaVerdict::Works) {
      if (!why.empty()) why += "; ";
      why += "the peer cannot attach to this side's memory: " +
             (their_offer.reason.empty() ? std::string("it did not try") : their_offer.reason);
    }
    c.refusal = side(mine == TransportMode::Shm) + " requires transport shm (cross-memory attach, "
                "process_vm_readv/writev) but " + why + "; use tcp or auto";
  }
  return c;  // auto on both sides: tcp
}

// Admission in four steps. (0) Without the lock: agree on the data path. A same-host peer whose
// transports allow shm is probed (its advertised pid and probe read back with process_vm_readv);
// the two verdicts travel in Transport frames (client first) and both sides choose the same way
// (choose_transport); a side that cannot serve the choice tells the peer why and refuses.
// A tcp peer's data connection is opened and its token checked here too (agent_tcp.cpp).
// (1) Under the lock: a cma peer gets its pidfd; a tcp peer its data connection. (2) Without the
// lock: exchange a Ready frame, so neither side uses the peer before both have set it up.
// (3) Under the lock: publish the peer.
std::shared_ptr<PeerRecord> AgentCore::admit(ControlChannel& channel, const HandshakeResult& result,
                                             CheckedPeer checked, bool inbound, Clock::time_point deadline,
                                             InboundSlot* slot) {
  // (0)
  const std::string who = peer_name(checked.metadata.engine_id, checked.metadata.tp_rank, channel.peer());
  const bool same_host = result.peer_hello.host_id == host_id_;
  const auto their_mode = static_cast<TransportMode>(result.peer_info.transport_hint);  // checked
  TransportOffer mine;
  // Sealed data connection (tcpdp/data_seal.hpp): with a key unless turned off; both sides must
  // agree. A peer older than 3.2 could not decode the setting: it is not sent to it.
  const uint8_t my_seal = opt_.key && opt_.seal_data ? 1 : 0;
  if (result.peer_hello.proto_minor >= 2) mine.data_seal = my_seal;
  if (same_host && opt_.transport != TransportMode::Tcp && their_mode != TransportMode::Tcp) {
    // Device memory on either side rules cross-memory attach out (it reaches host pages only):
    // auto then chooses tcp, shm is refused saying which region. Both sides see both regions'
    // types (each sent its own), so they choose alike.
    std::string why = device_region_note(checked.ranges, checked.metadata.engine_id, checked.metadata.tp_rank);
    if (why.empty()) why = cma::check_probe(result.peer_info.cma_pid, result.peer_info.cma_probe_address,
                                       result.peer_info.cma_probe);
    // The probe only shows that the pid holds bytes the peer knows, which may be another process's
    // (a copy forked from the peer, or bytes the peer read from some agent's registered memory,
    // this agent's included): before this agent copies into and out of that process at the
    // addresses the peer advertises, the pid must hold the other end of this connection.
    if (why.empty()) why = cma::check_connection_owner(result.peer_info.cma_pid, channel.fd());
    mine.cma = why.empty() ? CmaVerdict::Works : CmaVerdict::Failed;
    mine.reason = clip_message_text(why);
    if (why.empty() && result.peer_hello.proto_minor >= 1) mine.mappable = mappable_regions();
  }
  TransportChoice choice;
  std::vector<MappableRegion> theirs_mappable;
  std::unique_ptr<TcpData> data;  // tcp: the data connection (agent_tcp.cpp)
  {
    if (!inbound) channel.send(mine, deadline);
    const Frame f = recv_admission(channel, deadline);
    if (f.type != FrameType::Transport) {
      core::fail(Status::Protocol, who + ": expected Transport after the handshake, got " + frame_type_name(f.type));
    }
    TransportOffer theirs = TransportOffer::decode(f.payload);
    theirs_mappable = std::move(theirs.mappable);
    // A peer older than control protocol 3.2 sends no seal setting: it cannot seal.
    const uint8_t their_seal = theirs.data_seal.value_or(0);
    if (their_seal != my_seal) {
      if (!opt_.key) {
        core::fail(Status::Protocol, who + ": asks for a sealed data connection, but neither side holds a pre-shared key");
      }
      auto setting = [](uint8_t seal) { return seal ? std::string("seals its tcp data connection (seal_data on)")
                                                    : std::string("sends its tcp data connection in clear (seal_data off)"); };
      const std::string text = "engine '" + opt_.metadata.engine_id + "' rank " + std::to_string(opt_.metadata.tp_rank) +
                               " " + setting(my_seal) + " but engine '" + checked.metadata.engine_id + "' rank " +
                               std::to_string(checked.metadata.tp_rank) + " " + setting(their_seal) +
                               (result.peer_hello.proto_minor < 2 ? " (it runs control protocol 3." + std::to_string(result.peer_hello.proto_minor) + ", older than sealing)" : std::string()) +
                               "; set seal_data the same on both agents";
      try {
        ErrorMessage e;
        e.status = Status::Auth;
        e.message = clip_message_text("refused by engine '" + opt_.metadata.engine_id + "' rank " +
                                      std::to_string(opt_.metadata.tp_rank) + ": " + text);
        channel.queue(e);
        channel.flush_some();
      } catch (const core::Error&) {
      }
      core::fail(Status::Auth, who + ": " + text);
    }
    choice = choose_transport(opt_.transport, their_mode, same_host, mine, theirs);
    if (!choice.refusal.empty()) {
      try {
        ErrorMessage e;
        e.status = Status::Transport;
        e.message = clip_message_text("engine '" + opt_.metadata.engine_id + "' rank " +
                                      std::to_string(opt_.metadata.tp_rank) + " refused the connection: " +
                                      choice.refusal);
        channel.queue(e);
        channel.flush_some();
      } catch (const core::Error&) {
      }
      core::fail(Status::Transport, who + ": " + choice.refusal);
    }
    std::unique_ptr<TcpOffer> offer;
    if (inbound) {
      if (choice.mode == TransportMode::Tcp) {
        offer = tcp_offer(channel);
        mine.data_port = offer->listener->port();
        mine.data_token = offer->token;
      }
      channel.send(mine, deadline);
    }
    if (choice.mode == TransportMode::Tcp) {
      try {
        data = inbound ? tcp_accept(*offer, deadline) : tcp_connect(channel, theirs.data_port, theirs.data_token, deadline);
      } catch (const core::Error& e) {
        core::fail(e.status(), who + ": opening the data connection: " + e.what());
      }
      if (my_seal) {
        // This connection's data keys (derived by the handshake from the key and its transcript).
        if (!result.data_keys) core::fail(Status::Internal, who + ": a sealed data connection without data keys");
        data->sealer.emplace(result.data_keys->send, tcpdp::RecordCipher::Mode::Seal);
        data->reader = tcpdp::FrameReader(result.data_keys->recv);
      }
    }
  }

  // Shm: map the peer's regions that lie in its pdkv shared allocations (PeerMapping), before
  // the lock; a region that cannot be mapped is copied with cross-memory attach (mapping_note).
  std::unique_ptr<cma::PeerProcess> process;
  std::vector<std::shared_ptr<const cma::PeerMapping>> maps;
  uint32_t mapped = 0;
  std::string mapping_note;
  if (choice.mode == TransportMode::Shm) {
    process = std::make_unique<cma::PeerProcess>(result.peer_info.cma_pid);
    maps = map_peer_regions(*process, checked.ranges, theirs_mappable, &mapped, &mapping_note);
  }
  auto conn = std::make_shared<PeerConn>();
  auto rec = std::make_shared<PeerRecord>();
  {
    std::lock_guard<std::mutex> g(mu_);
    if (stopped_) core::fail(Status::Shutdown, "the agent was shut down");
    rec->engine_id = checked.metadata.engine_id;
    rec->tp_rank = checked.metadata.tp_rank;
    rec->pp_rank = checked.metadata.pp_rank;
    rec->address = channel.peer();
    rec->inbound = inbound;
    rec->transport = choice.mode;
    rec->metadata = std::move(checked.metadata);
    conn->record = rec;
    conn->proto_minor = result.peer_hello.proto_minor;
    conn->remote_ranges = std::move(checked.ranges);
    if (choice.mode == TransportMode::Shm) {
      conn->cma = std::move(process);
      conn->maps = std::move(maps);
      rec->mapped_regions = mapped;
      rec->mapping_note = std::move(mapping_note);
      conn->cma_probe_address = result.peer_info.cma_probe_address;
      conn->cma_probe = result.peer_info.cma_probe;
    } else {
      conn->tcp = std::move(data);
    }
  }
  auto discard = [&](Status st, const std::string& why) {
    std::lock_guard<std::mutex> g(mu_);
    conn->lost = true;
    rec->connected = false;
    rec->lost_status = static_cast<int32_t>(st);
    dead_peers_.push_back(conn);
    core::fail(st, peer_name(rec->engine_id, rec->tp_rank, rec->address) + ": " + why);
  };
  // (2) stopping_, not only stopped_: shutdown() joins inbound handshakes before it sets
  // stopped_, so a peer that stopped answering must not hold it until this admission's deadline.
  if (stopping_.load()) discard(Status::Shutdown, "the agent was shut down");
  // The server publishes before its last Ready, so when connect() returns on the client the
  // server already knows the peer (a WRITE posted by it right away finds it). An inbound slot
  // still holds the descriptor here, so shutdown() interrupts this wait.
  try {
    if (!inbound) channel.send(Ready{}, deadline);
    const Frame f = recv_admission(channel, deadline);
    if (f.type != FrameType::Ready) {
      core::fail(Status::Protocol, std::string("expected Ready after the transport setup, got ") + frame_type_name(f.type));
    }
    Ready::decode(f.payload);
  } catch (const core::Error& e) {
    discard(e.status(), e.what());
  }
  // (3) Publish.
  if (stopping_.load()) discard(Status::Shutdown, "the agent was shut down");
  std::lock_guard<std::mutex> g(mu_);
  if (stopped_) core::fail(Status::Shutdown, "the agent was shut down");
  if (slot != nullptr) {
    // From here the descriptor belongs to the peer, which anyone may close; shutdown() must not
    // shut down a number the kernel may reuse.
    std::lock_guard<std::mutex> sg(slot->m);
    slot->fd = -1;
  }
  conn->channel.emplace(std::move(channel));
  conn->id = next_peer_id_++;
  const auto now = Clock::now();
  conn->last_heard = now;
  conn->next_ping = now + opt_.heartbeat_interval;
  wake_control_at_locked(conn->next_ping);  // its first heartbeat may come before the control thread's sleep ends
  const auto key = key_of(*rec);
  if (auto it = peers_.find(key); it != peers_.end()) {
    // The same engine, stage and rank again: a restarted peer. The old connection is gone.
    lose_peer_locked(it->second, Status::PeerLost,
                     "replaced by a new connection from the same engine stage and rank", true);
  }
  peers_[key] = conn;
  by_id_[conn->id] = conn;
  if (conn->tcp) tcp_attach_locked(*conn);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = conn->id;
  conn->watched = EPOLLIN;
  ::epoll_ctl(control_epoll_, EPOLL_CTL_ADD, conn->channel->fd(), &ev);
  Notification n;
  n.kind = NotificationKind::PeerConnected;
  n.engine_id = rec->engine_id;
  n.tp_rank = rec->tp_rank;
  n.pp_rank = rec->pp_rank;
  push_note_locked(std::move(n));
  if (inbound) {
    conn->channel->queue(Ready{});
    flush_channel_locked(conn);
  }
  // Frames the peer sent right after its Ready (a Notify, a Bye) may have come in with it and
  // wait decoded in the channel, where no epoll event will announce them: handle them now.
  if (conn->channel->has_decoded_frames()) handle_frames_locked(conn);
  return rec;
}

std::shared_ptr<PeerRecord> AgentCore::find_peer(const std::string& engine_id, uint32_t tp_rank) const {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<std::shared_ptr<PeerRecord>> found;
  std::string stages;
  for (const auto& [key, conn] : peers_) {
    if (std::get<0>(key) != engine_id || std::get<2>(key) != tp_rank) continue;
    stages += (stages.empty() ? "" : ", ") + std::to_string(std::get<1>(key));
    found.push_back(conn->record);
  }
  if (found.empty()) core::fail(Status::NotFound, "no connected peer '" + engine_id + "' rank " + std::to_string(tp_rank));
  if (found.size() > 1) {
    core::fail(Status::InvalidArgument, "peer '" + engine_id + "' rank " + std::to_string(tp_rank) +
                                            " is connected as pipeline stages " + stages + "; name the stage");
  }
  return found.front();
}

std::shared_ptr<PeerRecord> AgentCore::find_peer(const std::string& engine_id, uint32_t pp_rank,
                                                 uint32_t tp_rank) const {
  std::lock_guard<std::mutex> g(mu_);
  auto it = peers_.find({engine_id, pp_rank, tp_rank});
  if (it == peers_.end()) {
    core::fail(Status::NotFound, "no connected peer '" + engine_id + "' stage " + std::to_string(pp_rank) + " rank " +
                                     std::to_string(tp_rank));
  }
  return it->second->record;
}

void AgentCore::disconnect(const std::shared_ptr<PeerRecord>& record) {
  std::lock_guard<std::mutex> g(mu_);
  if (stopped_) return;
  auto it = peers_.find(key_of(*record));
  if (it == peers_.end() || it->second->record != record) return;
  lose_peer_locked(it->second, Status::PeerLost, "disconnected by this side", true);
}

// ---- inbound ----

void AgentCore::accept_inbound() {
  for (int taken = 0; taken < kMaxAcceptsPerWakeup; ++taken) {
    std::optional<Socket> sock;
    try {
      sock = listener_->accept();
    } catch (const core::Error&) {
      // e.g. EMFILE: the connection stays queued and the listener readable, so waiting on it
      // again at once would spin. Leave it alone for a while (control_thread_main resumes it).
      ::epoll_ctl(control_epoll_, EPOLL_CTL_DEL, listener_->fd(), nullptr);
      accept_paused_until_ = Clock::now() + kAcceptBackoff;
      return;
    }
    if (!sock) return;
    std::lock_guard<std::mutex> g(inbound_mu_);
    // Reap finished handshakes, and refuse floods beyond a fixed number of threads.
    for (auto it = inbound_.begin(); it != inbound_.end();) {
      if ((*it)->done.load()) {
        (*it)->thread.join();
        it = inbound_.erase(it);
      } else {
        ++it;
      }
    }
    const std::string source = source_of(sock->peer());
    if (!make_room_for_inbound_locked(source)) continue;  // the socket closes here
    auto slot = std::make_shared<InboundSlot>();
    slot->fd = sock->fd();
    slot->source = source;
    slot->order = ++inbound_accepted_;
    auto shared_sock = std::make_shared<Socket>(std::move(*sock));
    try {
      start_inbound_thread(slot, shared_sock);
    } catch (const std::exception&) {
      // No thread to be had (EAGAIN: thread or memory limits): refuse this connection (the socket
      // closes here) rather than let the exception end the control thread and the process.
      continue;
    }
    inbound_.push_back(slot);
  }
}

// At most kMaxInboundHandshakes handshakes run at once. When they are all taken, the new
// connection may take the place of the oldest unauthenticated handshake of the source address
// holding the most of them, if that source holds more than the newcomer's does: a flood of idle
// or slow connections from some hosts can then no longer lock every other host out until the
// flood's deadlines pass (it only competes with itself), while an authenticated handshake is
// never interrupted. A host flooding alone is refused as before. Called under inbound_mu_.
bool AgentCore::make_room_for_inbound_locked(const std::string& source) {
  if (inbound_.size() >= kMaxInboundThreads) return false;
  std::unordered_map<std::string, size_t> running;  // live (not evicted) handshakes per source
  size_t live = 0;
  for (const auto& slot : inbound_) {
    if (slot->evicted || slot->done.load()) continue;
    ++live;
    ++running[slot->source];
  }
  if (live < kMaxInboundHandshakes) return true;
  const size_t mine = running[source];
  InboundSlot* victim = nullptr;
  size_t victim_count = 0;
  for (const auto& slot : inbound_) {
    if (slot->evicted || slot->done.load() || slot->authenticated.load()) continue;
    const size_t n = running[slot->source];
    if (n <= mine) continue;  // the newcomer's source already holds as many: no fairer to swap
    if (!victim || n > victim_count || (n == victim_count && slot->order < victim->order)) {
      victim = slot.get();
      victim_count = n;
    }
  }
  if (!victim) return false;
  std::lock_guard<std::mutex> g(victim->m);
  victim->evicted = true;
  if (victim->fd >= 0) ::shutdown(victim->fd, SHUT_RDWR);  // its thread fails its next wait and ends
  return true;
}

void AgentCore::start_inbound_thread(const std::shared_ptr<InboundSlot>& slot,
                                     std::shared_ptr<Socket> shared_sock) {
  slot->thread = std::thread([this, slot, shared_sock]() mutable {
    // The channel outlives the try block so the slot forgets the descriptor before it closes
    // (shutdown() may call ::shutdown on slot->fd meanwhile).
    std::optional<ControlChannel> channel;
    try {
      const auto deadline = deadline_after(Clock::now(), opt_.default_timeout);
      HandshakeParams params;
      {
        std::lock_guard<std::mutex> g2(mu_);
        if (stopped_) throw core::Error(Status::Shutdown, "shut down");
        params = handshake_params_locked();
      }
      std::optional<CheckedPeer> checked;
      params.validate = [&](const Hello& h, const PeerInfo& info) {
        checked = check_peer(h, info, false);
        slot->authenticated = true;  // proven (or no key configured) and consistent: never evicted
      };
      channel.emplace(std::move(*shared_sock));
      HandshakeResult result = handshake_server(*channel, params, deadline);
      // The slot keeps the descriptor through admission (shutdown() interrupts its waits);
      // admit() clears it as the channel moves into the published peer.
      admit(*channel, result, std::move(*checked), true, deadline, slot.get());
    } catch (const std::exception&) {
      // The handshake already told the peer what went wrong where it could; nothing was
      // admitted. The socket closes with the channel, after the slot forgot it.
    }
    {
      std::lock_guard<std::mutex> g3(slot->m);
      slot->fd = -1;
    }
    channel.reset();
    shared_sock.reset();
    slot->done = true;
  });
}

// ---- control loop ----

void AgentCore::control_thread_main() {
  while (!stopping_.load()) {
    try {
      control_round();
    } catch (const std::exception&) {
      // Out of memory or another resource mid-round: an exception leaving this thread would
      // terminate the process. The round's state changes are each complete under mu_; try again.
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

// One round of the control thread: sleep in epoll until a control channel is readable (or writable
// with frames queued), a connection arrives, control_wake_ is raised, or the earliest timer is due
// (next_timer_locked); then handle what woke it and run the timers. No periodic tick: an idle
// agent wakes for its heartbeats (sending its pings, the peers' pongs and pings) and its timers.
void AgentCore::control_round() {
  control_rounds_.fetch_add(1, std::memory_order_relaxed);
  epoll_event evs[64];
  if (accept_paused_until_ && Clock::now() >= *accept_paused_until_) {
    accept_paused_until_.reset();
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = 1;
    ::epoll_ctl(control_epoll_, EPOLL_CTL_ADD, listener_->fd(), &ev);
  }
  int timeout_ms = -1;
  {
    std::lock_guard<std::mutex> g(mu_);
    const auto now = Clock::now();
    const auto next = next_timer_locked(now);
    // A thread that creates an earlier timer from here on raises control_wake_
    // (wake_control_at_locked), so this sleep never outlasts it.
    control_wake_at_ = next;
    if (next != Clock::time_point::max()) {
      // Rounded up: waking before the timer is due would only spin until it is.
      const auto ms = next <= now ? 0 : std::chrono::ceil<std::chrono::milliseconds>(next - now).count();
      timeout_ms = static_cast<int>(std::min<int64_t>(ms, INT_MAX));
    }
  }
  const int k = ::epoll_wait(control_epoll_, evs, 64, timeout_ms);
  if (stopping_.load()) return;
  for (int i = 0; i < k; ++i) {
    const uint64_t key = evs[i].data.u64;
    if (key == 1) {
      accept_inbound();
    } else if (key == 2) {
      uint64_t v;
      [[maybe_unused]] ssize_t r = ::read(control_wake_, &v, sizeof v);
    } else {
      std::lock_guard<std::mutex> g(mu_);
      auto it = by_id_.find(key);
      if (it == by_id_.end()) continue;
      const std::shared_ptr<PeerConn> peer = it->second;  // a loss erases the map's copy
      if ((evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) != 0) {
        handle_frames_locked(peer);
      } else {
        flush_channel_locked(peer);  // writable again: send what waits
      }
    }
  }
  std::lock_guard<std::mutex> g(mu_);
  if (stopped_) return;
  timers_locked(Clock::now());
}

// Every timer timers_locked() runs: each peer's next ping and its heartbeat timeout, the earliest
// lease expiry, each transfer's deadline and the grace of one whose peer was lost under a cma
// batch; a stopped transfer with nothing in flight is finalized at once. Plus the end of an
// accept() pause (control thread only). Clock::time_point::max() when there is none.
Clock::time_point AgentCore::next_timer_locked(Clock::time_point now) const {
  Clock::time_point next = Clock::time_point::max();
  for (const auto& [key, p] : peers_) {
    next = std::min(next, p->next_ping);
    // Lost once silent for longer than the timeout: check just after it.
    next = std::min(next, p->last_heard + opt_.heartbeat_timeout + std::chrono::milliseconds(1));
    next = std::min(next, tcp_check_due_locked(*p));  // its data connection's liveness, while pending
  }
  if (const auto lease = leases_.next_deadline()) next = std::min(next, *lease);
  for (const auto& j : active_) {
    if (j->finalized) continue;
    next = std::min(next, j->deadline);
    if (j->stopping()) {
      if (j->inflight == 0) next = now;  // final as soon as timers_locked looks at it
      if (j->fail_status == Status::PeerLost && j->inflight != 0) next = std::min(next, j->stopped_at + kCancelGrace);
    }
  }
  if (accept_paused_until_) next = std::min(next, *accept_paused_until_);
  return next;
}

void AgentCore::wake_control_at_locked(Clock::time_point t) {
  if (t >= control_wake_at_) return;  // the control thread is awake by then anyway
  control_wake_at_ = t;
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t r = ::write(control_wake_, &one, sizeof one);
}

// The control channel's epoll events follow its send queue: EPOLLOUT only while frames wait.
void AgentCore::watch_channel_locked(PeerConn& peer) {
  if (peer.lost || !peer.channel || peer.channel->fd() < 0) return;
  const uint32_t want = EPOLLIN | (peer.channel->wants_write() ? static_cast<uint32_t>(EPOLLOUT) : 0u);
  if (want == peer.watched) return;
  peer.watched = want;
  epoll_event ev{};
  ev.events = want;
  ev.data.u64 = peer.id;
  ::epoll_ctl(control_epoll_, EPOLL_CTL_MOD, peer.channel->fd(), &ev);
}

void AgentCore::handle_frames_locked(const std::shared_ptr<PeerConn>& peer) {
  if (peer->lost || !peer->channel) return;
  std::vector<Frame> frames;
  try {
    frames = peer->channel->read_available();
  } catch (const core::Error& e) {
    lose_peer_locked(peer, e.status() == Status::Protocol ? Status::Protocol : Status::PeerLost, e.what(),
                     e.status() == Status::Protocol);
    return;
  }
  peer->last_heard = Clock::now();
  for (const Frame& f : frames) {
    if (peer->lost) return;
    try {
      switch (f.type) {
        case FrameType::Ping: {
          const Ping p = Ping::decode(f.payload);
          Pong pong;
          pong.seq = p.seq;
          pong.time_ns = p.time_ns;
          peer->channel->queue(pong);
          break;
        }
        case FrameType::Pong: {
          const Pong p = Pong::decode(f.payload);
          const uint64_t now = now_ns();
          if (p.time_ns <= now) peer->record->heartbeat_rtt_us = (now - p.time_ns) / 1000;
          break;
        }
        case FrameType::Notify:
          handle_notify_locked(peer, Notify::decode(f.payload));
          break;
        case FrameType::KeepLeases:
          handle_keep_leases_locked(peer, KeepLeases::decode(f.payload));
          break;
        case FrameType::LeaseQuery:
          handle_lease_query_locked(peer, LeaseQuery::decode(f.payload));
          break;
        case FrameType::LeaseAnswer:
          handle_lease_answer_locked(peer, LeaseAnswer::decode(f.payload));
          break;
        case FrameType::Bye:
          lose_peer_locked(peer, Status::PeerLost, "the peer closed the connection", false);
          return;
        case FrameType::Error: {
          const core::Error e = peer->channel->peer_error(f);
          lose_peer_locked(peer, Status::PeerLost, std::string("the peer reported an error: ") + e.what(), false);
          return;
        }
        default:
          core::fail(Status::Protocol, std::string("unexpected ") + frame_type_name(f.type) +
                                           " frame after the handshake");
      }
    } catch (const core::Error& e) {
      lose_peer_locked(peer, Status::Protocol, e.what(), true);
      return;
    }
  }
  flush_channel_locked(peer);
}

void AgentCore::handle_notify_locked(const std::shared_ptr<PeerConn>& peer, const Notify& m) {
  peer->record->notifications_received++;
  if (m.engine_id != peer->record->engine_id || m.tp_rank != peer->record->tp_rank) {
    core::fail(Status::Protocol, "a Notify names engine '" + m.engine_id + "' rank " +
                                     std::to_string(m.tp_rank) + " on the connection of '" +
                                     peer->record->engine_id + "' rank " +
                                     std::to_string(peer->record->tp_rank));
  }
  check_request_id(m.request_id, Status::Protocol, "a Notify's request id");
  if (!note_room_for_peer_locked(m.request_id)) {
    core::fail(Status::Protocol, "a Notify arrived while " + std::to_string(notes_.size()) +
                                     " notifications (" + std::to_string(notes_bytes_) +
                                     " bytes) wait to be polled, the most a peer may fill (" +
                                     std::to_string(kMaxPeerNotes) + ", " +
                                     std::to_string(kMaxPeerNoteBytes) +
                                     " bytes): the peer floods or the caller stopped polling");
  }
  Notification n;
  n.kind = m.kind == NotifyKind::ReadDone ? NotificationKind::ReadDone : NotificationKind::WriteDone;
  n.status = m.status;
  n.request_id = m.request_id;
  n.engine_id = peer->record->engine_id;
  n.tp_rank = peer->record->tp_rank;
  n.pp_rank = peer->record->pp_rank;
  n.bytes = m.bytes;
  std::optional<Notification> complete;
  n.expected = leases_.expected(m.request_id);
  if (m.status == Status::Ok) {
    bool duplicate = false;
    n.count = leases_.on_success(m.request_id, n.engine_id, n.pp_rank, n.tp_rank, complete, duplicate);
  }
  push_note_locked(std::move(n));
  if (complete) push_note_locked(std::move(*complete));
}

// Only the deadlines of leases this agent holds move, each by its own ttl at most, so a peer can
// keep open what this side leased (as long as it keeps asking), never open or lengthen a lease
// beyond what this side chose.
void AgentCore::handle_keep_leases_locked(const std::shared_ptr<PeerConn>& peer, const KeepLeases& m) {
  const Clock::time_point now = Clock::now();
  for (const auto& id : m.request_ids) {
    check_request_id(id, Status::Protocol, "a KeepLeases request id");
    leases_.keep(id, now);
  }
  peer->record->lease_keeps_received += m.request_ids.size();
}

void AgentCore::handle_lease_query_locked(const std::shared_ptr<PeerConn>& peer, const LeaseQuery& m) {
  check_request_id(m.request_id, Status::Protocol, "a LeaseQuery request id");
  LeaseAnswer a;
  a.query = m.query;
  a.state = leases_.query(m.request_id, Clock::now());
  peer->record->lease_keeps_received++;
  peer->channel->queue(a);  // flushed with the frames it came with
}

void AgentCore::handle_lease_answer_locked(const std::shared_ptr<PeerConn>& peer, const LeaseAnswer& m) {
  const auto it = lease_queries_.find(m.query);
  if (it == lease_queries_.end()) return;  // the transfer is final already (failed, timed out, cancelled)
  const std::shared_ptr<TransferJob> job = it->second.lock();
  TransferJob::Lane* lane = nullptr;
  if (job) {
    for (auto& l : job->lanes) {
      if (l.lease_pending && l.lease_query == m.query) lane = &l;
    }
  }
  if (lane == nullptr) {
    lease_queries_.erase(it);
    return;
  }
  if (lane->peer != peer) {
    // Query numbers are this agent's, each sent to one peer: another peer cannot know them
    // unless it guesses; its answer must not complete someone else's READ.
    core::fail(Status::Protocol, "a LeaseAnswer for query " + std::to_string(m.query) + ", which was sent to another peer");
  }
  lease_queries_.erase(it);
  lane->lease_pending = false;
  lane->hold = false;
  const auto& rec = *peer->record;
  const bool read = job->op == TransferOp::Read;
  const std::string who = std::string(read ? "P" : "D") + " rank " + std::to_string(rec.tp_rank) + " of engine '" +
                          rec.engine_id + "'";
  // READ: the bytes already read from blocks P gave back may be another request's. WRITE:
  // nothing was written (the lane held its data for this answer), which is the point: D gave the
  // blocks back and may have handed them to another request, whose bytes the WRITE would overwrite.
  const std::string harm = read ? "it gave the blocks back, and the bytes read from them may be another request's"
                                : "it gave the blocks back, so nothing was written into them (they may hold another "
                                  "request's bytes now)";
  if (m.state == LeaseState::Expired) {
    lane->lease_ended = true;
    fail_job_locked(*job, Status::TimedOut,
                    who + " says its lease of request '" + job->request_id + "' expired before this " +
                        (read ? "READ" : "WRITE") + " asked (its ttl ran out): " + harm + "; keep the lease open until the " +
                        (read ? "READ" : "WRITE") + " is posted (pdkv_agent_keep_leases) or lease it longer");
  } else if (m.state == LeaseState::Completed) {
    lane->lease_ended = true;
    fail_job_locked(*job, Status::Incompatible,
                    who + " says its lease of request '" + job->request_id + "' completed before this " +
                        (read ? "READ" : "WRITE") + " asked (every " + (read ? "reader" : "writer") +
                        " it expected notified): " + harm + "; this request was " + (read ? "read" : "written") +
                        ", or the lease expects fewer " + (read ? "readers" : "writers") + " than moved it");
  } else if (read && lane->data_complete) {
    lane_data_complete_locked(*job, *lane);
  } else if (!read) {
    wake_progress();  // the WRITE's batches may start now
  }
  check_final_locked(*job);
  // A CALLER-mode event loop watching only the agent's event fd learns of it in its next
  // progress call (the transfer may be final now, which no socket of its own announces).
  signal_work();
}

void AgentCore::ask_leases_locked(const std::shared_ptr<TransferJob>& job) {
  // Its first keep-alive goes now (then one with each heartbeat: moving_ids_locked): a transfer
  // posted late in the other side's lease starts with the whole ttl ahead of it. A WRITE holds its
  // data until the answer (its bytes must not land in blocks D gave back); a READ reads meanwhile
  // and counts the bytes once answered.
  const std::vector<std::string> id{job->request_id};
  for (auto& lane : job->lanes) {
    PeerConn& p = *lane.peer;
    if (job->confirm_lease && lane.remaining > 0 && !p.lost && p.channel && p.proto_minor >= kLeaseQueryMinor) {
      LeaseQuery q;
      q.query = ++next_lease_query_;
      q.request_id = job->request_id;
      p.channel->queue(q);
      p.record->lease_keeps_sent++;
      lane.lease_pending = true;
      lane.hold = job->op == TransferOp::Write;
      lane.lease_query = q.query;
      lease_queries_.emplace(q.query, job);
    } else {
      queue_keeps_locked(p, id);
    }
  }
  for (auto& p : job->notify_only) queue_keeps_locked(*p, id);
  for (auto& lane : job->lanes) flush_channel_locked(lane.peer);
  for (auto& p : job->notify_only) flush_channel_locked(p);
}

void AgentCore::keep_leases(const std::string& peer_engine_id, const std::vector<std::string>& request_ids) {
  for (size_t i = 0; i < request_ids.size(); ++i) {
    check_request_id(request_ids[i], Status::InvalidArgument, "request_ids[" + std::to_string(i) + "]");
  }
  std::lock_guard<std::mutex> g(mu_);
  if (stopped_) core::fail(Status::Shutdown, "the agent was shut down");
  std::vector<std::shared_ptr<PeerConn>> ranks;
  for (auto& [key, p] : peers_) {
    if (p->lost || !p->channel || p->record->engine_id != peer_engine_id) continue;
    if (p->proto_minor < kKeepLeasesMinor) {
      core::fail(Status::Incompatible,
                 peer_name(p->record->engine_id, p->record->tp_rank, p->record->address) + " runs control protocol " +
                     std::to_string(kControlProtoMajor) + "." + std::to_string(p->proto_minor) +
                     ", which cannot take lease keep-alives (" + std::to_string(kControlProtoMajor) + "." +
                     std::to_string(kKeepLeasesMinor) + " and later); nothing was sent");
    }
    ranks.push_back(p);
  }
  if (ranks.empty()) core::fail(Status::NotFound, "no connected rank of engine '" + peer_engine_id + "'");
  if (request_ids.empty()) return;
  for (auto& p : ranks) {
    queue_keeps_locked(*p, request_ids);
    flush_channel_locked(p);
  }
}

void AgentCore::queue_keeps_locked(PeerConn& peer, const std::vector<std::string>& ids) {
  if (peer.lost || !peer.channel || peer.proto_minor < kKeepLeasesMinor || ids.empty()) return;
  for (size_t at = 0; at < ids.size(); at += kMaxKeepLeaseIds) {
    KeepLeases m;
    const size_t end = std::min(ids.size(), at + kMaxKeepLeaseIds);
    m.request_ids.assign(ids.begin() + static_cast<std::ptrdiff_t>(at), ids.begin() + static_cast<std::ptrdiff_t>(end));
    peer.channel->queue(m);
  }
  peer.record->lease_keeps_sent += ids.size();
}

// A transfer moving bytes out of or into the other side's blocks must not outlive that side's
// lease of them: it would free the blocks (LEASE_EXPIRED) and give them to another request while
// a READ still copies them (D would take another request's bytes as this one's) or a WRITE still
// fills them (P would overwrite another request's bytes on D). So while a transfer is in flight,
// every rank it moves bytes with or will notify is asked with each heartbeat (and once when it is
// posted) to keep the request's lease open, as pdkv_agent_keep_leases does; the asking stops when
// the transfer's bytes with that rank are done, it is stopped (failed, cancelled, timed out) or
// ends, so a stuck transfer holds the other side's blocks at most until its own deadline.
std::unordered_map<const PeerConn*, std::vector<std::string>> AgentCore::moving_ids_locked() const {
  std::unordered_map<const PeerConn*, std::vector<std::string>> out;
  for (const auto& job : active_) {
    if (job->finalized || job->stopping()) continue;
    auto add = [&](const PeerConn* p) {
      auto& ids = out[p];
      if (ids.empty() || ids.back() != job->request_id) ids.push_back(job->request_id);
    };
    for (const auto& lane : job->lanes) {
      if (!lane.complete) add(lane.peer.get());
    }
    for (size_t i = 0; i < job->notify_only.size(); ++i) {
      if (!job->notify_only_done[i]) add(job->notify_only[i].get());
    }
  }
  return out;
}

void AgentCore::flush_channel_locked(const std::shared_ptr<PeerConn>& peer) {
  if (peer->lost || !peer->channel) return;
  try {
    peer->channel->flush_some();
    // A peer that stops reading must not make us buffer without bound.
    constexpr size_t kMaxQueued = 16u << 20;
    if (peer->channel->queued_bytes() > kMaxQueued) {
      core::fail(Status::PeerLost, "the peer stopped reading its control channel (" +
                                       std::to_string(peer->channel->queued_bytes()) + " bytes queued)");
    }
  } catch (const core::Error& e) {
    lose_peer_locked(peer, Status::PeerLost, e.what(), false);
    return;
  }
  watch_channel_locked(*peer);
}

void AgentCore::timers_locked(Clock::time_point now) {
  std::vector<std::shared_ptr<PeerConn>> silent;
  std::optional<std::unordered_map<const PeerConn*, std::vector<std::string>>> moving;  // when a ping is due
  for (auto& [key, p] : peers_) {
    if (now - p->last_heard > opt_.heartbeat_timeout) {
      silent.push_back(p);
      continue;
    }
    if (now >= p->next_ping) {
      Ping ping;
      ping.seq = ++p->ping_seq;
      ping.time_ns = now_ns();
      p->channel->queue(ping);
      p->next_ping = now + opt_.heartbeat_interval;
      if (!moving) moving = moving_ids_locked();
      if (const auto it = moving->find(p.get()); it != moving->end()) queue_keeps_locked(*p, it->second);
    }
  }
  for (auto& p : silent) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - p->last_heard).count();
    lose_peer_locked(p, Status::PeerLost,
                     "no heartbeat for " + std::to_string(ms) + " ms (timeout " +
                         std::to_string(opt_.heartbeat_timeout.count()) + " ms)",
                     true);
  }
  // A data connection with work pending that moved nothing for the heartbeat timeout: the peer
  // stopped reading it or answering (its control channel may still be alive).
  for (auto& [p, why] : tcp_stalled_locked(now)) lose_peer_locked(p, Status::PeerLost, why, true);
  std::vector<std::shared_ptr<PeerConn>> all;
  for (auto& [key, p] : peers_) all.push_back(p);
  for (auto& p : all) flush_channel_locked(p);
  for (auto& n : leases_.expire(now)) push_note_locked(std::move(n));
  // Deadlines are enforced here too, so a caller-progress agent whose caller stopped calling
  // still fails its transfers on time.
  check_deadlines_locked(now);
  for (auto& job : active_) check_final_locked(*job);
  std::erase_if(active_, [](const std::shared_ptr<TransferJob>& j) { return j->finalized && j->released; });
  reap_dead_peers_locked();
}

// `peer` is taken by value: callers often pass a reference into peers_ / by_id_, which this
// function erases.
void AgentCore::lose_peer_locked(std::shared_ptr<PeerConn> peer, Status status,
                                 const std::string& why, bool tell_peer) {
  if (peer->lost) return;
  peer->lost = true;
  auto& rec = *peer->record;
  rec.connected = false;
  rec.lost_status = static_cast<int32_t>(status);
  const std::string name = peer_name(rec.engine_id, rec.tp_rank, rec.address);
  if (peer->channel) {
    if (tell_peer) {
      try {
        if (status == Status::Shutdown || why == "disconnected by this side") {
          peer->channel->queue(Bye{});
        } else {
          ErrorMessage e;
          e.status = status;
          e.message = clip_message_text(why);
          peer->channel->queue(e);
        }
        peer->channel->flush_some();
      } catch (const core::Error&) {
      }
    }
    // Out of the control loop first: closing this descriptor does not remove the socket from the
    // epoll set while a forked child of the application still holds a copy of it, and its events
    // would then wake the loop for a peer it no longer knows, for ever (level-triggered).
    if (peer->channel->fd() >= 0) ::epoll_ctl(control_epoll_, EPOLL_CTL_DEL, peer->channel->fd(), nullptr);
    peer->channel->close();
  }
  // Its mappings go once the batches copying through them (which hold them) return.
  peer->maps.clear();
  auto key = key_of(rec);
  if (auto it = peers_.find(key); it != peers_.end() && it->second == peer) peers_.erase(it);
  by_id_.erase(peer->id);
  // Fails every batch on its data connection and closes it (nothing stays in flight).
  tcp_drop_locked(*peer, status == Status::Shutdown ? Status::Shutdown : Status::PeerLost, name + " lost: " + why);
  for (auto& job : active_) {
    if (job->finalized) continue;
    bool uses = false;
    for (auto& lane : job->lanes) uses |= lane.peer == peer;
    for (auto& p : job->notify_only) uses |= p == peer;
    if (uses) fail_job_locked(*job, status == Status::Shutdown ? Status::Shutdown : Status::PeerLost,
                              name + " lost: " + why);
  }
  Notification n;
  n.kind = NotificationKind::PeerLost;
  n.status = status;
  n.engine_id = rec.engine_id;
  n.tp_rank = rec.tp_rank;
  n.pp_rank = rec.pp_rank;
  push_note_locked(std::move(n));
  dead_peers_.push_back(peer);
  // The transfers failed above are finalized by the control thread's next round (once nothing of
  // them is in flight): wake it now rather than at its next timer.
  wake_control_at_locked(Clock::now());
}

void AgentCore::reap_dead_peers_locked() {
  std::erase_if(dead_peers_, [](const std::shared_ptr<PeerConn>& p) {
    return p->inflight == 0;
  });
}

void AgentCore::send_notify_locked(const std::shared_ptr<PeerConn>& peer, NotifyKind kind,
                                   const std::string& request, uint64_t bytes, Status status) {
  if (peer->lost || !peer->channel) return;
  Notify n;
  n.request_id = request;
  n.engine_id = opt_.metadata.engine_id;
  n.tp_rank = opt_.metadata.tp_rank;
  n.kind = kind;
  n.bytes = bytes;
  n.status = status;
  peer->channel->queue(n);
  peer->record->notifications_sent++;
  flush_channel_locked(peer);
}

}  // namespace pdkv::exec
