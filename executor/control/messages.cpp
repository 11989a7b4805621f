#include "control/messages.hpp"

#include <string>

#include "control/wire.hpp"

namespace pdkv::exec {

using core::Status;

uint32_t status_to_wire(core::Status s) noexcept { return static_cast<uint32_t>(s); }

core::Status status_from_wire(uint32_t v) {
  const bool known = v <= static_cast<uint32_t>(Status::Internal) ||
                     (v >= static_cast<uint32_t>(Status::TimedOut) &&
                      v <= static_cast<uint32_t>(Status::Shutdown));
  if (!known) {
    throw core::Error(Status::Protocol, "status " + std::to_string(v) + " is not a pdkv status");
  }
  return static_cast<core::Status>(v);
}

namespace {

// A status field: refused (Protocol, naming message and field) when not a pdkv status.
core::Status read_status(WireReader& r, std::string_view field) {
  const uint32_t v = r.u32(field);
  try {
    return status_from_wire(v);
  } catch (const core::Error& e) {
    r.fail(std::string(field) + ": " + e.what());
  }
}

bool read_bool(WireReader& r, std::string_view field) {
  const uint8_t v = r.u8(field);
  if (v > 1) r.fail(std::string(field) + " is " + std::to_string(v) + ", expected 0 or 1");
  return v == 1;
}

}  // namespace

std::vector<uint8_t> Hello::encode() const {
  WireWriter w;
  w.u16(proto_major);
  w.u16(proto_minor);
  w.string(engine_id, kMaxEngineIdBytes, "Hello.engine_id");
  w.u32(tp_rank);
  w.raw(nonce);
  w.u8(has_key ? 1 : 0);
  w.string(host_id, kMaxHostIdBytes, "Hello.host_id");
  w.u8(purpose);
  return w.take();
}

Hello Hello::decode(std::span<const uint8_t> payload) {
  WireReader r(payload, "Hello");
  Hello m;
  m.proto_major = r.u16("proto_major");
  m.proto_minor = r.u16("proto_minor");
  m.engine_id = r.string("engine_id", kMaxEngineIdBytes);
  m.tp_rank = r.u32("tp_rank");
  r.raw(m.nonce, "nonce");
  m.has_key = read_bool(r, "has_key");
  m.host_id = r.string("host_id", kMaxHostIdBytes);
  m.purpose = r.u8("purpose");
  r.expect_end();
  return m;
}

std::vector<uint8_t> Challenge::encode() const {
  WireWriter w;
  w.raw(server_nonce);
  w.raw(server_mac);
  return w.take();
}

Challenge Challenge::decode(std::span<const uint8_t> payload) {
  WireReader r(payload, "Challenge");
  Challenge m;
  r.raw(m.server_nonce, "server_nonce");
  r.raw(m.server_mac, "server_mac");
  r.expect_end();
  return m;
}

std::vector<uint8_t> Proof::encode() const {
  WireWriter w;
  w.raw(client_mac);
  return w.take();
}

Proof Proof::decode(std::span<const uint8_t> payload) {
  WireReader r(payload, "Proof");
  Proof m;
  r.raw(m.client_mac, "client_mac");
  r.expect_end();
  return m;
}

namespace {
// u32 region + u64 base + u64 length + u32 memory_type + u32 rkey length.
constexpr size_t kMinRegionKeyBytes = 4 + 8 + 8 + 4 + 4;
}  // namespace

std::vector<uint8_t> PeerInfo::encode() const {
  WireWriter w;
  w.bytes(metadata, kMaxMetadataBytes, "PeerInfo.metadata");
  w.bytes(worker_address, kMaxWorkerAddressBytes, "PeerInfo.worker_address");
  if (regions.size() > kMaxRegions) {
    throw core::Error(Status::InvalidArgument, "PeerInfo.regions has " + std::to_string(regions.size()) +
                                                   " entries, more than the limit of " +
                                                   std::to_string(kMaxRegions));
  }
  w.u32(static_cast<uint32_t>(regions.size()));
  for (const RegionKey& k : regions) {
    w.u32(k.region);
    w.u64(k.base);
    w.u64(k.length);
    w.u32(k.memory_type);
    w.bytes(k.rkey, kMaxRkeyBytes, "PeerInfo.regions[].rkey");
  }
  w.u8(transport_hint);
  w.u32(cma_pid);
  w.u64(cma_probe_address);
  w.raw(cma_probe);
  return w.take();
}

PeerInfo PeerInfo::decode(std::span<const uint8_t> payload) {
  WireReader r(payload, "PeerInfo");
  PeerInfo m;
  m.metadata = r.bytes("metadata", kMaxMetadataBytes);
  m.worker_address = r.bytes("worker_address", kMaxWorkerAddressBytes);
  const uint32_t n = r.count("regions", kMaxRegions, kMinRegionKeyBytes);
  m.regions.reserve(n);  // bounded by what remains (count() checked it)
  for (uint32_t i = 0; i < n; ++i) {
    RegionKey k;
    const std::string at = "regions[" + std::to_string(i) + "].";
    k.region = r.u32(at + "region");
    k.base = r.u64(at + "base");
    k.length = r.u64(at + "length");
    k.memory_type = r.u32(at + "memory_type");
    k.rkey = r.bytes(at + "rkey", kMaxRkeyBytes);
    m.regions.push_back(std::move(k));
  }
  m.transport_hint = r.u8("transport_hint");
  m.cma_pid = r.u32("cma_pid");
  m.cma_probe_address = r.u64("cma_probe_address");
  r.raw(m.cma_probe, "cma_probe");
  r.expect_end();
  return m;
}

std::vector<uint8_t> Ready::encode() const { return {}; }

Ready Ready::decode(std::span<const uint8_t> payload) {
  WireReader(payload, "Ready").expect_end();
  return {};
}

std::vector<uint8_t> TransportOffer::encode() const {
  WireWriter w;
  w.u8(static_cast<uint8_t>(cma));
  w.string(reason, kMaxMessageTextBytes, "Transport.reason");
  w.u16(data_port);
  for (uint8_t b : data_token) w.u8(b);
  if (!mappable.empty()) {
    if (mappable.size() > kMaxRegions) {
      throw core::Error(Status::InvalidArgument, "Transport.mappable has " + std::to_string(mappable.size()) +
                                                     " entries, more than the limit of " + std::to_string(kMaxRegions));
    }
    w.u32(static_cast<uint32_t>(mappable.size()));
    for (const MappableRegion& x : mappable) {
      w.u32(x.region);
      w.u64(x.base);
      w.u64(x.length);
      w.u32(x.fd);
      w.u64(x.offset);
      w.u64(x.file_size);
      w.u64(x.dev);
      w.u64(x.ino);
    }
  }
  if (data_seal) w.u8(*data_seal);  // 3.2's optional last byte
  return w.take();
}

TransportOffer TransportOffer::decode(std::span<const uint8_t> payload) {
  WireReader r(payload, "Transport");
  TransportOffer m;
  const uint8_t v = r.u8("cma");
  if (v > static_cast<uint8_t>(CmaVerdict::Failed)) {
    r.fail("cma " + std::to_string(v) + " is not a verdict (0 not tried, 1 works, 2 failed)");
  }
  m.cma = static_cast<CmaVerdict>(v);
  m.reason = r.string("reason", kMaxMessageTextBytes);
  m.data_port = r.u16("data_port");
  for (auto& b : m.data_token) b = r.u8("data_token");
  if (r.remaining() >= 4) {  // 3.1's optional tail (fewer bytes: trailing, refused below)
    const uint32_t n = r.count("mappable", kMaxRegions, 4 + 8 + 8 + 4 + 8 + 8 + 8 + 8);
    // The tail is sent only with entries: a count of 0 would be a second encoding of "none"
    // (the frame fuzzer's canonical check found it).
    if (n == 0) r.fail("mappable has 0 entries (a Transport without mappable regions omits the count)");
    m.mappable.reserve(n);
    for (uint32_t i = 0; i < n; ++i) {
      const std::string at = "mappable[" + std::to_string(i) + "].";
      MappableRegion x;
      x.region = r.u32(at + "region");
      x.base = r.u64(at + "base");
      x.length = r.u64(at + "length");
      x.fd = r.u32(at + "fd");
      x.offset = r.u64(at + "offset");
      x.file_size = r.u64(at + "file_size");
      x.dev = r.u64(at + "dev");
      x.ino = r.u64(at + "ino");
      m.mappable.push_back(x);
    }
  }
  if (r.remaining() == 1) {  // 3.2's optional last byte (the mappable tail needs at least 4)
    const uint8_t v = r.u8("data_seal");
    if (v > 1) r.fail("data_seal " + std::to_string(v) + " is not 0 (clear) or 1 (sealed)");
    m.data_seal = v;
  }
  r.expect_end();
  return m;
}

std::vector<uint8_t> Reject::encode() const {
  WireWriter w;
  w.u32(status_to_wire(status));
  w.string(message, kMaxMessageTextBytes, "Reject.message");
  return w.take();
}

Reject Reject::decode(std::span<const uint8_t> payload) {
  WireReader r(payload, "Reject");
  Reject m;
  m.status = read_status(r, "status");
  m.message = r.string("message", kMaxMessageTextBytes);
  r.expect_end();
  return m;
}

std::vector<uint8_t> Notify::encode() const {
  WireWriter w;
  w.string(request_id, kMaxRequestIdBytes, "Notify.request_id");
  w.string(engine_id, kMaxEngineIdBytes, "Notify.engine_id");
  w.u32(tp_rank);
  w.u8(static_cast<uint8_t>(kind));
  w.u64(bytes);
  w.u32(status_to_wire(status));
  return w.take();
}

Notify Notify::decode(std::span<const uint8_t> payload) {
  WireReader r(payload, "Notify");
  Notify m;
  m.request_id = r.string("request_id", kMaxRequestIdBytes);
  m.engine_id = r.string("engine_id", kMaxEngineIdBytes);
  m.tp_rank = r.u32("tp_rank");
  const uint8_t kind = r.u8("kind");
  if (kind > static_cast<uint8_t>(NotifyKind::WriteDone)) {
    r.fail("kind " + std::to_string(kind) + " is not a notification kind (0 READ_DONE, 1 WRITE_DONE)");
  }
  m.kind = static_cast<NotifyKind>(kind);
  m.bytes = r.u64("bytes");
  m.status = read_status(r, "status");
  r.expect_end();
  return m;
}

std::vector<uint8_t> KeepLeases::encode() const {
  if (request_ids.size() > kMaxKeepLeaseIds) {
    throw core::Error(Status::InvalidArgument, "KeepLeases names " + std::to_string(request_ids.size()) +
                                             " requests, more than the limit of " + std::to_string(kMaxKeepLeaseIds));
  }
  WireWriter w;
  w.u32(static_cast<uint32_t>(request_ids.size()));
  for (const auto& id : request_ids) w.string(id, kMaxRequestIdBytes, "KeepLeases.request_id");
  return w.take();
}

KeepLeases KeepLeases::decode(std::span<const uint8_t> payload) {
  WireReader r(payload, "KeepLeases");
  KeepLeases m;
  const uint32_t n = r.u32("count");
  if (n > kMaxKeepLeaseIds) {
    r.fail("count " + std::to_string(n) + " is more than the limit of " + std::to_string(kMaxKeepLeaseIds));
  }
  for (uint32_t i = 0; i < n; ++i) m.request_ids.push_back(r.string("request_id", kMaxRequestIdBytes));
  r.expect_end();
  return m;
}

std::vector<uint8_t> LeaseQuery::encode() const {
  if (request_id.empty()) throw core::Error(Status::InvalidArgument, "LeaseQuery.request_id is empty");
  WireWriter w;
  w.u64(query);
  w.string(request_id, kMaxRequestIdBytes, "LeaseQuery.request_id");
  return w.take();
}

LeaseQuery LeaseQuery::decode(std::span<const uint8_t> payload) {
  WireReader r(payload, "LeaseQuery");
  LeaseQuery m;
  m.query = r.u64("query");
  m.request_id = r.string("request_id", kMaxRequestIdBytes);
  if (m.request_id.empty()) r.fail("request_id is empty");
  r.expect_end();
  return m;
}

const char* lease_state_name(LeaseState s) noexcept {
  switch (s) {
    case LeaseState::NotLeased: return "not leased";
    case LeaseState::Open: return "open";
    case LeaseState::Expired: return "expired";
    case LeaseState::Completed: return "completed";
  }
  return "unknown";
}

std::vector<uint8_t> LeaseAnswer::encode() const {
  WireWriter w;
  w.u64(query);
  w.u8(static_cast<uint8_t>(state));
  return w.take();
}

LeaseAnswer LeaseAnswer::decode(std::span<const uint8_t> payload) {
  WireReader r(payload, "LeaseAnswer");
  LeaseAnswer m;
  m.query = r.u64("query");
  const uint8_t state = r.u8("state");
  if (state > static_cast<uint8_t>(LeaseState::Completed)) {
    r.fail("state " + std::to_string(state) + " is not a lease state (0 not leased, 1 open, 2 expired, 3 completed)");
  }
  m.state = static_cast<LeaseState>(state);
  r.expect_end();
  return m;
}

std::vector<uint8_t> Ping::encode() const {
  WireWriter w;
  w.u64(seq);
  w.u64(time_ns);
  return w.take();
}

Ping Ping::decode(std::span<const uint8_t> payload) {
  WireReader r(payload, "Ping");
  Ping m;
  m.seq = r.u64("seq");
  m.time_ns = r.u64("time_ns");
  r.expect_end();
  return m;
}

std::vector<uint8_t> Pong::encode() const {
  WireWriter w;
  w.u64(seq);
  w.u64(time_ns);
  return w.take();
}

Pong Pong::decode(std::span<const uint8_t> payload) {
  WireReader r(payload, "Pong");
  Pong m;
  m.seq = r.u64("seq");
  m.time_ns = r.u64("time_ns");
  r.expect_end();
  return m;
}

std::vector<uint8_t> ErrorMessage::encode() const {
  WireWriter w;
  w.u32(status_to_wire(status));
  w.string(message, kMaxMessageTextBytes, "Error.message");
  return w.take();
}

ErrorMessage ErrorMessage::decode(std::span<const uint8_t> payload) {
  WireReader r(payload, "Error");
  ErrorMessage m;
  m.status = read_status(r, "status");
  m.message = r.string("message", kMaxMessageTextBytes);
  r.expect_end();
  return m;
}

std::vector<uint8_t> Bye::encode() const { return {}; }

Bye Bye::decode(std::span<const uint8_t> payload) {
  WireReader(payload, "Bye").expect_end();
  return {};
}

std::string clip_message_text(std::string_view text) {
  if (text.size() <= kMaxMessageTextBytes) return std::string(text);
  size_t cut = kMaxMessageTextBytes;
  // Step back over UTF-8 continuation bytes (10xxxxxx) so no character is split.
  while (cut > 0 && (static_cast<uint8_t>(text[cut]) & 0xC0) == 0x80) --cut;
  return std::string(text.substr(0, cut));
}

}  // namespace pdkv::exec
