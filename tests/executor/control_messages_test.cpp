// Typed control messages: round trips, strict decoding of every malformed variant.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "control/messages.hpp"
#include "control/wire.hpp"
#include "pdkv/core/error.hpp"

using namespace pdkv::exec;
using pdkv::core::Error;
using pdkv::core::Status;

namespace {

template <class F>
void expect_protocol(F&& f, std::vector<std::string> needles) {
  try {
    f();
    FAIL() << "no error thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::Protocol) << e.what();
    for (const std::string& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << "missing \"" << n << "\" in: " << e.what();
  }
}

Hello sample_hello() {
  Hello h;
  h.engine_id = "prefill-engine-7";
  h.tp_rank = 3;
  for (size_t i = 0; i < h.nonce.size(); ++i) h.nonce[i] = static_cast<uint8_t>(i + 1);
  h.has_key = true;
  h.host_id = "boot/host";
  return h;
}

PeerInfo sample_info() {
  PeerInfo p;
  p.metadata = {1, 2, 3, 4, 5};
  p.worker_address = std::vector<uint8_t>(100, 0xAA);
  for (uint32_t i = 0; i < 3; ++i) {
    p.regions.push_back(RegionKey{i, 0x7f0000000000ull + i * 4096, 4096, 0, std::vector<uint8_t>(i + 10, 0x11)});
  }
  p.transport_hint = 2;
  p.cma_pid = 4242;
  p.cma_probe_address = 0x7ffd12345678ull;
  for (size_t i = 0; i < p.cma_probe.size(); ++i) p.cma_probe[i] = static_cast<uint8_t>(0xC0 + i);
  return p;
}

Notify sample_notify() {
  Notify n;
  n.request_id = "req-abc";
  n.engine_id = "decode-1";
  n.tp_rank = 1;
  n.kind = NotifyKind::WriteDone;
  n.bytes = 123456789;
  n.status = Status::PeerLost;
  return n;
}

// Every message's encoded bytes and a decoder for them.
struct Case {
  std::string name;
  std::vector<uint8_t> bytes;
  std::function<void(std::span<const uint8_t>)> decode;
};

std::vector<Case> all_cases() {
  Challenge c;
  c.server_nonce.fill(7);
  c.server_mac.fill(9);
  Proof p;
  p.client_mac.fill(3);
  return {
      {"Hello", sample_hello().encode(), [](auto b) { Hello::decode(b); }},
      {"Challenge", c.encode(), [](auto b) { Challenge::decode(b); }},
      {"Proof", p.encode(), [](auto b) { Proof::decode(b); }},
      {"PeerInfo", sample_info().encode(), [](auto b) { PeerInfo::decode(b); }},
      {"Ready", Ready{}.encode(), [](auto b) { Ready::decode(b); }},
      {"Reject", Reject{Status::Incompatible, "block size differs"}.encode(), [](auto b) { Reject::decode(b); }},
      {"Notify", sample_notify().encode(), [](auto b) { Notify::decode(b); }},
      {"Ping", Ping{5, 6}.encode(), [](auto b) { Ping::decode(b); }},
      {"Pong", Pong{5, 6}.encode(), [](auto b) { Pong::decode(b); }},
      {"Error", ErrorMessage{Status::Auth, "bad key"}.encode(), [](auto b) { ErrorMessage::decode(b); }},
      {"Bye", Bye{}.encode(), [](auto b) { Bye::decode(b); }},
      {"Transport", TransportOffer{CmaVerdict::Failed, "EPERM"}.encode(), [](auto b) { TransportOffer::decode(b); }},
      {"KeepLeases", KeepLeases{{"req-1", "req,2"}}.encode(), [](auto b) { KeepLeases::decode(b); }},
      {"LeaseQuery", LeaseQuery{9, "req,3"}.encode(), [](auto b) { LeaseQuery::decode(b); }},
      {"LeaseAnswer", LeaseAnswer{9, LeaseState::Completed}.encode(), [](auto b) { LeaseAnswer::decode(b); }},
  };
}

}  // namespace

TEST(ControlMessages, RoundTrip) {
  const Hello h = Hello::decode(sample_hello().encode());
  EXPECT_EQ(h.engine_id, "prefill-engine-7");
  EXPECT_EQ(h.tp_rank, 3u);
  EXPECT_EQ(h.nonce, sample_hello().nonce);
  EXPECT_TRUE(h.has_key);
  EXPECT_EQ(h.host_id, "boot/host");
  EXPECT_EQ(h.proto_major, kControlProtoMajor);
  EXPECT_EQ(h.purpose, 0);

  const PeerInfo pi = PeerInfo::decode(sample_info().encode());
  EXPECT_EQ(pi.metadata, sample_info().metadata);
  EXPECT_EQ(pi.worker_address, sample_info().worker_address);
  EXPECT_EQ(pi.regions, sample_info().regions);
  EXPECT_EQ(pi.transport_hint, 2);
  EXPECT_EQ(pi.cma_pid, 4242u);
  EXPECT_EQ(pi.cma_probe_address, 0x7ffd12345678ull);
  EXPECT_EQ(pi.cma_probe, sample_info().cma_probe);

  const TransportOffer to = TransportOffer::decode(TransportOffer{CmaVerdict::Works, ""}.encode());
  EXPECT_EQ(to.cma, CmaVerdict::Works);
  EXPECT_EQ(to.reason, "");

  const Notify n = Notify::decode(sample_notify().encode());
  EXPECT_EQ(n.request_id, "req-abc");
  EXPECT_EQ(n.engine_id, "decode-1");
  EXPECT_EQ(n.tp_rank, 1u);
  EXPECT_EQ(n.kind, NotifyKind::WriteDone);
  EXPECT_EQ(n.bytes, 123456789u);
  EXPECT_EQ(n.status, Status::PeerLost);

  const Reject r = Reject::decode(Reject{Status::Coverage, "x"}.encode());
  EXPECT_EQ(r.status, Status::Coverage);
  EXPECT_EQ(r.message, "x");
  const ErrorMessage e = ErrorMessage::decode(ErrorMessage{Status::Shutdown, "bye"}.encode());
  EXPECT_EQ(e.status, Status::Shutdown);
  EXPECT_EQ(e.message, "bye");
  const Ping pg = Ping::decode(Ping{11, 22}.encode());
  EXPECT_EQ(pg.seq, 11u);
  EXPECT_EQ(pg.time_ns, 22u);
  const Pong po = Pong::decode(Pong{33, 44}.encode());
  EXPECT_EQ(po.seq, 33u);
  EXPECT_EQ(po.time_ns, 44u);
  Challenge c;
  c.server_nonce.fill(1);
  c.server_mac.fill(2);
  const Challenge c2 = Challenge::decode(c.encode());
  EXPECT_EQ(c2.server_nonce, c.server_nonce);
  EXPECT_EQ(c2.server_mac, c.server_mac);
  EXPECT_TRUE(Ready{}.encode().empty());
  EXPECT_TRUE(Bye{}.encode().empty());
  // KeepLeases: ids are length-prefixed, so a comma or any other byte stays inside its id.
  const std::vector<std::string> ids = {"a,b", "c", std::string(kMaxRequestIdBytes, 'x'), "\xff\x01"};
  EXPECT_EQ(KeepLeases::decode(KeepLeases{ids}.encode()).request_ids, ids);
  EXPECT_TRUE(KeepLeases::decode(KeepLeases{}.encode()).request_ids.empty());
  // LeaseQuery / LeaseAnswer (3.5): the asker's query number travels back with the state.
  const LeaseQuery lq = LeaseQuery::decode(LeaseQuery{UINT64_MAX, "a,b"}.encode());
  EXPECT_EQ(lq.query, UINT64_MAX);
  EXPECT_EQ(lq.request_id, "a,b");
  for (LeaseState st : {LeaseState::NotLeased, LeaseState::Open, LeaseState::Expired, LeaseState::Completed}) {
    const LeaseAnswer la = LeaseAnswer::decode(LeaseAnswer{42, st}.encode());
    EXPECT_EQ(la.query, 42u);
    EXPECT_EQ(la.state, st);
  }
}

TEST(ControlMessages, TruncationAtEveryOffsetIsRefused) {
  for (const Case& c : all_cases()) {
    for (size_t cut = 0; cut < c.bytes.size(); ++cut) {
      const std::vector<uint8_t> part(c.bytes.begin(), c.bytes.begin() + static_cast<ptrdiff_t>(cut));
      expect_protocol([&] { c.decode(part); }, {c.name + ":"});
    }
    EXPECT_NO_THROW(c.decode(c.bytes)) << c.name;
  }
}

TEST(ControlMessages, TrailingBytesAreRefused) {
  for (const Case& c : all_cases()) {
    // Two bytes: one more would be Transport's optional last byte (data_seal 0, protocol 3.2).
    std::vector<uint8_t> more = c.bytes;
    more.push_back(0);
    more.push_back(0);
    expect_protocol([&] { c.decode(more); }, {c.name + ":", "2 trailing bytes"});
  }
}

TEST(ControlMessages, OverLimitStringsAndCountsAreRefusedNamingTheField) {
  // engine_id of 257 bytes, written past the encoder's check.
  WireWriter w;
  w.u16(1);
  w.u16(0);
  w.string(std::string(kMaxEngineIdBytes + 1, 'e'), SIZE_MAX, "x");
  expect_protocol([&] { Hello::decode(w.data()); }, {"Hello", "engine_id", "257", "256"});

  WireWriter p;
  p.bytes(std::vector<uint8_t>{}, 1, "m");
  p.bytes(std::vector<uint8_t>{}, 1, "w");
  p.u32(kMaxRegions + 1);
  expect_protocol([&] { PeerInfo::decode(p.data()); }, {"PeerInfo", "regions", "65537", "65536"});

  WireWriter q;
  q.bytes(std::vector<uint8_t>{}, 1, "m");
  q.bytes(std::vector<uint8_t>{}, 1, "w");
  q.u32(1000);  // promises 1000 regions, carries none: refused before reserving
  expect_protocol([&] { PeerInfo::decode(q.data()); }, {"regions", "1000", "truncated"});

  WireWriter r;
  r.string(std::string(kMaxRequestIdBytes + 1, 'r'), SIZE_MAX, "x");
  expect_protocol([&] { Notify::decode(r.data()); }, {"Notify", "request_id", "1025"});

  WireWriter k;
  k.u32(static_cast<uint32_t>(kMaxKeepLeaseIds + 1));
  expect_protocol([&] { KeepLeases::decode(k.data()); }, {"KeepLeases", "count", "2049", "2048"});
  WireWriter k2;
  k2.u32(1);
  k2.string(std::string(kMaxRequestIdBytes + 1, 'r'), SIZE_MAX, "x");
  expect_protocol([&] { KeepLeases::decode(k2.data()); }, {"KeepLeases", "request_id", "1025"});
  KeepLeases too_many;
  too_many.request_ids.assign(kMaxKeepLeaseIds + 1, "r");
  EXPECT_THROW(too_many.encode(), Error);
  WireWriter lq;
  lq.u64(1);
  lq.string("", SIZE_MAX, "x");
  expect_protocol([&] { LeaseQuery::decode(lq.data()); }, {"LeaseQuery", "request_id is empty"});
  EXPECT_THROW((LeaseQuery{1, ""}.encode()), Error);
  WireWriter la;
  la.u64(1);
  la.u8(4);
  expect_protocol([&] { LeaseAnswer::decode(la.data()); }, {"LeaseAnswer", "state 4", "not a lease state"});

  // The encoder refuses the same values locally.
  Hello big = sample_hello();
  big.engine_id.assign(kMaxEngineIdBytes + 1, 'e');
  EXPECT_THROW(big.encode(), Error);
  PeerInfo many;
  many.regions.resize(kMaxRegions + 1);
  try {
    many.encode();
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::InvalidArgument);
  }
}

TEST(ControlMessages, OutOfRangeEnumsAreRefused) {
  std::vector<uint8_t> h = sample_hello().encode();
  // has_key sits right after proto(4) + engine_id(4+16) + tp_rank(4) + nonce(32).
  const size_t has_key_at = 4 + 4 + 16 + 4 + 32;
  h[has_key_at] = 2;
  expect_protocol([&] { Hello::decode(h); }, {"has_key", "2"});

  std::vector<uint8_t> n = sample_notify().encode();
  const size_t kind_at = 4 + 7 + 4 + 8 + 4;
  ASSERT_EQ(n[kind_at], 1);
  n[kind_at] = 5;
  expect_protocol([&] { Notify::decode(n); }, {"kind", "5"});

  std::vector<uint8_t> r = Reject{Status::Incompatible, "m"}.encode();
  r[0] = 150;  // between the core and transport ranges
  expect_protocol([&] { Reject::decode(r); }, {"Reject", "status", "150"});
  std::vector<uint8_t> e = ErrorMessage{Status::Auth, "m"}.encode();
  e[0] = 208;
  expect_protocol([&] { ErrorMessage::decode(e); }, {"status", "208"});
}

TEST(ControlMessages, StatusWireMapping) {
  EXPECT_EQ(status_from_wire(203), Status::Auth);
  EXPECT_EQ(status_from_wire(0), Status::Ok);
  EXPECT_EQ(status_from_wire(17), Status::Internal);
  EXPECT_THROW(status_from_wire(18), Error);
  EXPECT_THROW(status_from_wire(199), Error);
  EXPECT_EQ(status_to_wire(Status::Shutdown), 207u);
}

TEST(ControlMessages, ClipMessageTextKeepsUtf8Whole) {
  std::string s(kMaxMessageTextBytes - 1, 'a');
  s += "\xC3\xA9tail";  // a 2-byte character straddling the limit
  const std::string c = clip_message_text(s);
  EXPECT_EQ(c.size(), kMaxMessageTextBytes - 1);
  EXPECT_EQ(clip_message_text("short"), "short");
  EXPECT_NO_THROW(Reject(Reject{Status::Incompatible, clip_message_text(std::string(1 << 20, 'x'))}).encode());
}

TEST(ControlMessages, TransportOfferCarriesTheSealSettingAndRefusesOtherValues) {
  TransportOffer sealed{CmaVerdict::NotTried, "tcp"};
  sealed.data_seal = 1;
  EXPECT_EQ(TransportOffer::decode(sealed.encode()).data_seal, std::optional<uint8_t>(1));
  sealed.data_seal = 0;
  EXPECT_EQ(TransportOffer::decode(sealed.encode()).data_seal, std::optional<uint8_t>(0));
  // Not sent (a peer older than 3.2): absent, which admission reads as clear.
  EXPECT_FALSE(TransportOffer::decode(TransportOffer{}.encode()).data_seal.has_value());
  sealed.data_seal = 1;
  std::vector<uint8_t> b = sealed.encode();
  b.back() = 2;  // the last byte
  expect_protocol([&] { TransportOffer::decode(b); }, {"Transport", "data_seal 2"});
  // After the mappable regions too.
  sealed.mappable.push_back(MappableRegion{});
  const TransportOffer both = TransportOffer::decode(sealed.encode());
  EXPECT_EQ(both.mappable.size(), 1u);
  EXPECT_EQ(both.data_seal, std::optional<uint8_t>(1));
}

// An empty mappable tail (count 0) would be a second encoding of "no mappable regions" (the
// encoder omits the tail then): refused, so every Transport has one encoding (frame_fuzz's
// canonical check found it, with and without the seal byte after it).
TEST(ControlMessages, TransportOfferRefusesAnEmptyMappableTail) {
  TransportOffer t{CmaVerdict::Works, ""};
  for (const std::optional<uint8_t> seal : {std::optional<uint8_t>{}, std::optional<uint8_t>(1)}) {
    t.data_seal = seal;
    std::vector<uint8_t> b = t.encode();
    const size_t at = b.size() - (seal ? 1 : 0);
    b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), {0, 0, 0, 0});  // count 0
    expect_protocol([&] { TransportOffer::decode(b); }, {"Transport", "mappable has 0 entries"});
  }
}

TEST(ControlMessages, TransportOfferRefusesAnUnknownVerdict) {
  std::vector<uint8_t> b = TransportOffer{CmaVerdict::NotTried, "another host"}.encode();
  b[0] = 3;
  expect_protocol([&] { TransportOffer::decode(b); }, {"Transport", "cma 3", "not a verdict"});
}
