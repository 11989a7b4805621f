// A hostile peer for the agent's tests: it speaks pdkv's control protocol from the building
// blocks (handshake, channel, a cma probe, a tcp data socket) instead of running an agent, so a test can
// stop after any step or send frames no agent would. Header-only, shared by agent_*_test.cpp.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "agent/agent.hpp"
#include "cma/cma.hpp"
#include "control/handshake.hpp"
#include "tcpdp/data_seal.hpp"
#include "pdkv/core/geometry.hpp"
#include "pdkv/core/metadata_from_geometry.hpp"
#include "ucx/context.hpp"

namespace pdkv::exec::testing {

using namespace std::chrono_literals;

// Metadata of one rank (of `tp_size`) of a small GQA engine (8 KiB blocks at TP 1) whose
// `regions` regions of `blocks` blocks start at `base`, back to back (for the fake peer nothing is
// mapped there: it never registers memory, and the agent only needs numbers that validate).
inline core::EngineMetadata tiny_metadata(const std::string& engine, uint32_t rank, uint64_t base,
                                           uint64_t blocks = 32, uint32_t regions = 3, uint32_t tp_size = 1) {
  core::ModelDesc m;
  m.name = "tiny-gqa";
  m.attention.num_kv_heads = 8;
  m.attention.head_size = 64;
  m.attention.head_size_v = 64;
  m.dtype_bytes = 1;
  core::EngineConfig cfg;
  cfg.tp_size = tp_size;
  cfg.user_block_size = 16;
  const auto geo = core::derive_geometry(m, cfg);
  return core::metadata_from_geometry(m, cfg, geo, {engine, rank, blocks, regions, base});
}

// Waits until D's agent `d` has told of `n` WriteDone notifications for `request_id` (other
// notifications are dropped). A test reads D's memory after a WRITE only then, as an engine does:
// P's transfer completing says D acknowledged the bytes, but that news crossed a socket, and the
// test thread reading D's memory is ordered after D's landing of them only through D's agent
// (its lock, taken by poll_notifications; ThreadSanitizer sees no ordering through sockets).
inline bool wait_write_done(Agent& d, const std::string& request_id, size_t n,
                            std::chrono::milliseconds within = 5000ms) {
  size_t seen = 0;
  const auto until = std::chrono::steady_clock::now() + within;
  while (true) {
    for (const auto& x : d.poll_notifications()) {
      seen += x.kind == NotificationKind::WriteDone && x.request_id == request_id;
    }
    if (seen >= n) return true;
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(2ms);
  }
}

// An agent for engine "pre" rank 0 (TP 1) with no memory registered.
inline std::unique_ptr<Agent> tiny_agent(TransportMode mode, std::chrono::milliseconds default_timeout = 5000ms,
                                         ProgressMode progress = ProgressMode::Thread) {
  AgentOptions o;
  o.metadata = tiny_metadata("pre", 0, 1ull << 40);
  o.transport = mode;
  o.progress = progress;
  o.default_timeout = default_timeout;
  o.heartbeat_interval = 100ms;
  o.heartbeat_timeout = 10000ms;  // fake peers never answer Pings; a flood may take seconds to build
  return std::make_unique<Agent>(o);
}

// The fake peer: engine "dec" rank 0 with the transport `mode` (like an agent, it has no UCX
// worker: its PeerInfo's worker address is empty).
class FakePeer {
 public:
  explicit FakePeer(TransportMode mode) : md_(tiny_metadata("dec", 0, 1ull << 41)), mode_(mode) {}
  FakePeer(TransportMode mode, core::EngineMetadata md) : md_(std::move(md)), mode_(mode) {}
  // A peer holding `key`; `seal`: what its Transport frame says of sealing the data connection.
  FakePeer(TransportMode mode, const PresharedKey& key, bool seal = true) : FakePeer(mode) {
    key_.emplace(key);
    seal_ = seal;
  }
  // Another identity (a fake P for an agent that posts READs, say), at `base`.
  FakePeer(TransportMode mode, const core::EngineMetadata& md, std::optional<PresharedKey> key, bool seal)
      : md_(md), mode_(mode), key_(std::move(key)), seal_(seal && key_.has_value()) {}
  FakePeer(const FakePeer&) = delete;
  FakePeer& operator=(const FakePeer&) = delete;

  // Connects and runs the client side of the handshake (keys proven, PeerInfo both ways). The
  // agent then waits for agree_transport().
  // `keys` go out in this side's PeerInfo as they are (a test may forge them).
  void handshake(const HostPort& agent, Deadline deadline = deadline_in(3s), std::vector<RegionKey> keys = {}) {
    channel_.emplace(ControlChannel::connect(agent, deadline));
    HandshakeParams p;
    p.hello.engine_id = md_.engine_id;
    p.hello.tp_rank = md_.tp_rank;
    p.hello.host_id = host_identity();
    if (proto_minor_) p.hello.proto_minor = *proto_minor_;
    p.info.metadata = core::encode(md_);
    p.info.transport_hint = static_cast<uint8_t>(mode_);
    p.info.regions = std::move(keys);
    p.info.cma_pid = forged_pid_ ? *forged_pid_ : probe_.pid();
    p.info.cma_probe_address = forged_probe_ ? forged_probe_->first : probe_.address();
    p.info.cma_probe = forged_probe_ ? forged_probe_->second : probe_.value();
    p.key = key_;
    result_ = handshake_client(*channel_, p, deadline);
  }

  // After handshake(): admission's Transport exchange, this side's verdict from a real probe of
  // the agent (same process) unless this side is tcp. Returns the agent's offer.
  TransportOffer agree_transport(Deadline deadline = deadline_in(3s)) {
    TransportOffer offer;
    if (mode_ != TransportMode::Tcp) {
      const std::string why = cma::check_probe(result_.peer_info.cma_pid, result_.peer_info.cma_probe_address,
                                               result_.peer_info.cma_probe);
      offer.cma = why.empty() ? CmaVerdict::Works : CmaVerdict::Failed;
      offer.reason = why;
    }
    offer.data_seal = seal_ ? 1 : 0;
    channel_->send(offer, deadline);
    const Frame f = channel_->recv(deadline);
    if (f.type != FrameType::Transport) throw core::Error(core::Status::Protocol, "expected Transport");
    agent_offer_ = TransportOffer::decode(f.payload);
    return agent_offer_;
  }

  // After agree_transport() chose tcp: opens the data connection to the port the agent offered
  // and presents `token` (the agent's own unless a test forges one). Returns the socket.
  Socket& open_data(Deadline deadline = deadline_in(3s), std::optional<std::array<uint8_t, 32>> token = std::nullopt) {
    HostPort hp = parse_host_port(channel_->peer());
    hp.port = agent_offer_.data_port;
    data_.emplace(Socket::connect(hp, deadline));
    const auto t = token ? *token : agent_offer_.data_token;
    data_->send_all(t, deadline);
    if (seal_ && result_.data_keys) {
      sealer_.emplace(result_.data_keys->send, tcpdp::RecordCipher::Mode::Seal);
      reader_ = tcpdp::FrameReader(result_.data_keys->recv);
    }
    return *data_;
  }

  // Sealed data connection (a key and sealing): this side's sending cipher (null when clear), and
  // the reader of what the agent sends (opens sealed records when sealed).
  tcpdp::RecordCipher* sealer() { return sealer_ ? &*sealer_ : nullptr; }
  tcpdp::FrameReader& reader() { return reader_; }
  const HandshakeResult& handshake_result() const { return result_; }

  // A key for region `r` covering exactly its advertised range, with the given packed bytes.
  RegionKey key_for(uint32_t r, std::vector<uint8_t> packed) const {
    const core::Region& reg = md_.regions[r].region;
    return RegionKey{r, reg.base, reg.block_len * reg.num_blocks, 0, std::move(packed)};
  }

  // handshake(), the Transport exchange, then the Ready exchange: the agent publishes this peer.
  void admit(const HostPort& agent, Deadline deadline = deadline_in(3s), std::vector<RegionKey> keys = {}) {
    handshake(agent, deadline, std::move(keys));
    agree_transport(deadline);
    if (agent_offer_.data_port != 0) open_data(deadline);
    channel_->send(Ready{}, deadline);
    const Frame f = channel_->recv(deadline);
    if (f.type != FrameType::Ready) throw core::Error(core::Status::Protocol, "expected Ready");
  }

  // Advertise this pid instead of this process's own (a peer lying, or in another pid namespace).
  void forge_pid(uint32_t pid) { forged_pid_ = pid; }
  // Advertise this probe (address and bytes) instead of this side's own: with forge_pid, a peer
  // presenting another process's identity (one whose memory it knows).
  void forge_probe(uint64_t address, const cma::ProbeValue& value) { forged_probe_.emplace(address, value); }
  // Say this control protocol minor in the Hello (an older peer).
  void say_minor(uint16_t minor) { proto_minor_ = minor; }

  ControlChannel& channel() { return *channel_; }
  const TransportOffer& agent_offer() const { return agent_offer_; }
  Socket* data() { return data_ ? &*data_ : nullptr; }
  const core::EngineMetadata& metadata() const { return md_; }
  // What the agent sent in the handshake (after handshake()).
  const PeerInfo& agent_info() const { return result_.peer_info; }

 private:
  core::EngineMetadata md_;
  TransportMode mode_;
  cma::Probe probe_;
  HandshakeResult result_;
  std::optional<uint32_t> forged_pid_;
  std::optional<std::pair<uint64_t, cma::ProbeValue>> forged_probe_;
  std::optional<ControlChannel> channel_;
  TransportOffer agent_offer_;
  std::optional<uint16_t> proto_minor_;
  std::optional<Socket> data_;
  std::optional<PresharedKey> key_;
  bool seal_ = false;
  std::optional<tcpdp::RecordCipher> sealer_;
  tcpdp::FrameReader reader_;
};

}  // namespace pdkv::exec::testing
