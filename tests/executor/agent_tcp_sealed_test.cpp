// The sealed tcp data connection (tcpdp/data_seal.hpp): with a pre-shared key, READ and WRITE move
// every byte through AES-256-GCM records; what travels on the wire holds none of the memory's bytes;
// a record altered, replayed, reordered or sent in clear by someone on the path (here a peer that
// knows the key but breaks the records, agent_fake_peer.hpp) ends the transfer with PROTOCOL
// within its deadline, is never reported as transferred and writes nothing outside the range the
// receiving side checked; agents whose seal_data differ are refused at connect with AUTH naming
// both engines and settings.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <functional>

#include "agent_fake_peer.hpp"
#include "pdkv/core/transfer_plan.hpp"
#include "tcpdp/data_frame.hpp"
#include "tcpdp/data_seal.hpp"

using namespace pdkv;
using namespace pdkv::exec;
using namespace pdkv::exec::testing;
using core::Status;
using namespace std::chrono_literals;

namespace {

PresharedKey test_key() { return PresharedKey::from_string("sealed data connection test key"); }

// An agent (tcp, keyed unless `key` is empty) over real memory: tiny_metadata's regions of
// `blocks` 16 KiB blocks (the first `regions_registered` registered). Memory holds a pattern unique to (seed, offset).
struct KeyedRank {
  core::EngineMetadata md;
  std::vector<uint8_t> mem;
  std::unique_ptr<Agent> agent;
  std::vector<std::shared_ptr<Registration>> regs;
  KeyedRank(const std::string& engine, uint64_t blocks, uint8_t seed, std::optional<PresharedKey> key, bool seal = true,
            uint32_t regions_registered = 3) {
    const auto probe = tiny_metadata(engine, 0, 0, blocks);
    uint64_t span = 0;
    for (const auto& r : probe.regions) span = std::max(span, r.region.base + r.region.block_len * r.region.num_blocks);
    mem.resize(span);
    fill(seed);
    md = tiny_metadata(engine, 0, reinterpret_cast<uintptr_t>(mem.data()), blocks);
    AgentOptions o;
    o.metadata = md;
    o.transport = TransportMode::Tcp;
    o.default_timeout = 5000ms;
    o.heartbeat_interval = 100ms;
    o.heartbeat_timeout = 20000ms;  // fake peers never answer Pings
    o.key = std::move(key);
    o.seal_data = seal;
    agent = std::make_unique<Agent>(o);
    for (uint32_t i = 0; i < regions_registered && i < md.regions.size(); ++i) {
      const auto& r = md.regions[i].region;
      regs.push_back(agent->register_memory(i, r.base, r.block_len * r.num_blocks, MemoryType::Host));
    }
  }
  void fill(uint8_t seed) {
    for (size_t i = 0; i < mem.size(); ++i) mem[i] = static_cast<uint8_t>((i * 131 + seed * 71 + 7) % 251);
  }
  uint8_t* at(uint32_t region, uint64_t offset) {
    return mem.data() + (md.regions[region].region.base - reinterpret_cast<uintptr_t>(mem.data())) + offset;
  }
};

// D reads `blocks` consecutive blocks of every region from P (blocks 1..blocks to the same ids): coalesced into
// reads larger than a batch, so payloads span many sealed segments.
core::TransferPlan plan_between(const core::EngineMetadata& d, const core::EngineMetadata& p, uint64_t blocks) {
  core::PlanContext ctx = core::make_plan_context(d, {p});
  core::PlanGroup g;
  g.trim.kind = core::GroupKind::Attention;
  for (uint64_t b = 1; b <= blocks; ++b) {  // block 0 is the null block
    g.trim.local_blocks.push_back(b);
    g.trim.remote_blocks.push_back(b);
  }
  g.trim.remote_computed_tokens = blocks * 16;
  return core::compile_transfer_plan(ctx, {g});
}

size_t first_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return i;
  }
  return SIZE_MAX;
}

struct Received {
  tcpdp::Header header;
  std::vector<tcpdp::Piece> pieces;
  std::vector<uint8_t> payload;
};

// One frame from the fake peer's data connection through its (sealed) reader.
Received recv_frame(FakePeer& f) {
  tcpdp::FrameReader& r = f.reader();
  Socket& s = *f.data();
  while (!r.ready()) r.received(s.recv_some(r.want(), deadline_in(3s)));
  Received out{r.header(), r.pieces(), std::vector<uint8_t>(r.payload_left())};
  size_t have = 0;
  while (!r.complete()) {
    if (auto w = r.want(); !w.empty()) {
      r.received(s.recv_some(w, deadline_in(3s)));
      continue;
    }
    const auto room = std::span<uint8_t>(out.payload).subspan(have, static_cast<size_t>(r.payload_chunk()));
    const size_t n = s.recv_some(room, deadline_in(3s));
    r.payload_received(room.first(n));
    have += n;
  }
  r.next();
  return out;
}

bool closed_within(int fd, std::chrono::milliseconds within) {
  const auto until = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    char c[4096];
    const ssize_t k = ::recv(fd, c, sizeof c, MSG_DONTWAIT);
    if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) return true;
  }
  return false;
}

// Waits for the agent's PeerLost notification of engine `engine`; returns its status.
std::optional<Status> peer_lost(Agent& a, const std::string& engine, std::chrono::milliseconds within = 3000ms) {
  const auto until = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < until) {
    for (const auto& n : a.poll_notifications()) {
      if (n.kind == NotificationKind::PeerLost && n.engine_id == engine) return n.status;
    }
    std::this_thread::sleep_for(10ms);
  }
  return std::nullopt;
}

}  // namespace

// ---- two agents ----

TEST(AgentTcpSealed, ReadAndWriteMoveEveryByteThroughSealedRecords) {
  // 512 blocks of 16 KiB per region: reads coalesce into pieces of several MiB, so batches of
  // 4 MiB and payloads of 16 sealed segments move.
  KeyedRank p("pre", 512, 1, test_key());
  KeyedRank d("dec", 512, 2, test_key());
  auto rec = d.agent->connect(p.agent->info().listen, 3000ms);
  ASSERT_EQ(rec->transport, TransportMode::Tcp);
  const auto plan = plan_between(d.md, p.md, 500);
  uint64_t planned = 0;
  for (const auto& rr : plan.ranks) {
    for (const auto& r : rr.reads) planned += r.length;
  }
  ASSERT_GT(planned, 8u << 20);
  auto expect_from = [&](const std::vector<uint8_t>& d_before) {
    std::vector<uint8_t> expect = d_before;
    for (const auto& rr : plan.ranks) {
      for (const auto& r : rr.reads) {
        std::memcpy(expect.data() + (d.at(r.local_region, r.local_offset) - d.mem.data()),
                    p.at(r.remote_region, r.remote_offset), r.length);
      }
    }
    return expect;
  };
  {
    const auto expect = expect_from(d.mem);
    PostParams pp;
    pp.plan = &plan;
    pp.peer_engine_id = "pre";
    pp.request_id = "sealed-read";
    auto t = d.agent->post(pp);
    ASSERT_TRUE(t.wait(10000ms));
    const auto s = t.status();
    ASSERT_EQ(s.status, Status::Ok) << s.message;
    EXPECT_EQ(s.bytes_done, planned);
    EXPECT_EQ(first_difference(d.mem, expect), SIZE_MAX) << "READ: first wrong byte of D";
  }
  {
    d.fill(3);
    const auto expect = expect_from(d.mem);
    PostParams pp;
    pp.op = TransferOp::Write;
    pp.plan = &plan;
    pp.peer_engine_id = "dec";
    pp.request_id = "sealed-write";
    auto t = p.agent->post(pp);
    ASSERT_TRUE(t.wait(10000ms));
    const auto s = t.status();
    ASSERT_EQ(s.status, Status::Ok) << s.message;
    EXPECT_EQ(s.bytes_done, planned);
    ASSERT_TRUE(wait_write_done(*d.agent, "sealed-write", 1));  // then D's memory (it says why)
    EXPECT_EQ(first_difference(d.mem, expect), SIZE_MAX) << "WRITE: first wrong byte of D";
  }
}

TEST(AgentTcpSealed, AgentsWhoseSealSettingsDifferAreRefusedWithAuthNamingBoth) {
  for (const bool d_seals : {true, false}) {
    SCOPED_TRACE(d_seals ? "D seals, P does not" : "P seals, D does not");
    KeyedRank p("pre", 32, 1, test_key(), !d_seals);
    KeyedRank d("dec", 32, 2, test_key(), d_seals);
    try {
      d.agent->connect(p.agent->info().listen, 3000ms);
      ADD_FAILURE() << "connected with different seal_data";
    } catch (const core::Error& e) {
      EXPECT_EQ(e.status(), Status::Auth) << e.what();
      const std::string m = e.what();
      EXPECT_NE(m.find("'pre'"), std::string::npos) << m;
      EXPECT_NE(m.find("'dec'"), std::string::npos) << m;
      EXPECT_NE(m.find("seal_data on"), std::string::npos) << m;
      EXPECT_NE(m.find("seal_data off"), std::string::npos) << m;
    }
    EXPECT_EQ(p.agent->info().num_peers, 0u);
    EXPECT_EQ(d.agent->info().num_peers, 0u);
  }
  // Both off (a trusted fabric, the control channel still sealed): connected, bytes move.
  KeyedRank p("pre", 32, 1, test_key(), false);
  KeyedRank d("dec", 32, 2, test_key(), false);
  d.agent->connect(p.agent->info().listen, 3000ms);
  const auto plan = plan_between(d.md, p.md, 20);
  PostParams pp;
  pp.plan = &plan;
  pp.peer_engine_id = "pre";
  pp.request_id = "clear-read";
  auto t = d.agent->post(pp);
  ASSERT_TRUE(t.wait(5000ms));
  EXPECT_EQ(t.status().status, Status::Ok) << t.status().message;
  const auto& r0 = plan.ranks.at(0).reads.at(0);
  EXPECT_EQ(0, std::memcmp(d.at(r0.local_region, r0.local_offset), p.at(r0.remote_region, r0.remote_offset), r0.length));
}

// ---- the agent serving a sealed READ (a fake D) ----

TEST(AgentTcpSealed, ServedBytesTravelSealedAndOpenToTheRightBytes) {
  KeyedRank p("pre", 128, 1, test_key(), true, 1);  // region 0: 2 MiB
  FakePeer peer(TransportMode::Tcp, test_key());
  peer.admit(p.agent->info().listen);
  ASSERT_NE(peer.sealer(), nullptr);
  const uint64_t L = p.regs[0]->length;
  ASSERT_EQ(L, 2u << 20);
  // 5 pieces, 2.5 MiB: ten sealed segments whose boundaries fall inside pieces.
  const std::vector<tcpdp::Piece> pieces{{0, 0, L / 2}, {0, 100, L / 2 - 100}, {0, 7, 1000}, {0, L / 3, L / 4}, {0, 5, 1}};
  uint64_t bytes = 0;
  for (const auto& x : pieces) bytes += x.length;
  peer.data()->send_all(tcpdp::encode_sealed(*peer.sealer(), {tcpdp::FrameType::ReadRequest, 1, 0, 0}, pieces, {}),
                        deadline_in(3s));
  // The raw answer: exactly the sealed size, and no 32-byte run of region 0 in it.
  const size_t wire = tcpdp::kHeaderBytes + tcpdp::kTagBytes + pieces.size() * tcpdp::kPieceBytes + tcpdp::kTagBytes +
                      tcpdp::sealed_payload_bytes(bytes);
  std::vector<uint8_t> raw(wire);
  size_t have = 0;
  while (have < raw.size()) have += peer.data()->recv_some(std::span<uint8_t>(raw).subspan(have), deadline_in(5s));
  const uint8_t* region = p.at(0, 0);
  for (uint64_t off : {uint64_t{0}, uint64_t{4096}, L / 2, L - 32}) {
    EXPECT_EQ(std::search(raw.begin(), raw.end(), region + off, region + off + 32), raw.end())
        << "32 clear bytes of region 0 at offset " << off << " are on the wire";
  }
  // Opened with this connection's key: the requested bytes, in order.
  tcpdp::FrameReader& r = peer.reader();
  size_t at = 0;
  std::vector<uint8_t> payload;
  while (!r.complete()) {
    if (auto w = r.want(); !w.empty()) {
      const size_t n = std::min(w.size(), raw.size() - at);
      std::memcpy(w.data(), raw.data() + at, n);
      at += n;
      r.received(n);
    } else {
      const size_t n = static_cast<size_t>(r.payload_chunk());
      r.payload_received(std::span<uint8_t>(raw.data() + at, n));
      payload.insert(payload.end(), raw.data() + at, raw.data() + at + n);
      at += n;
    }
  }
  EXPECT_EQ(r.header().status, 0u);
  EXPECT_EQ(r.pieces(), pieces);
  ASSERT_EQ(payload.size(), bytes);
  size_t off = 0;
  for (const auto& x : pieces) {
    EXPECT_EQ(0, std::memcmp(payload.data() + off, p.at(0, x.offset), x.length)) << "piece at " << x.offset;
    off += x.length;
  }
}

TEST(AgentTcpSealed, AnAlteredReplayedOrClearRequestLosesThePeerWithProtocol) {
  KeyedRank p("pre", 32, 1, test_key(), true, 1);
  const std::vector<tcpdp::Piece> one{{0, 0, 64}};
  struct Case {
    const char* what;
    std::function<std::vector<uint8_t>(tcpdp::RecordCipher&)> bytes;
  };
  const std::vector<Case> cases{
      {"a ciphertext byte of the header flipped",
       [&](tcpdp::RecordCipher& c) {
         auto b = tcpdp::encode_sealed(c, {tcpdp::FrameType::ReadRequest, 1, 0, 0}, one, {});
         b[5] ^= 0x20;
         return b;
       }},
      {"a tag byte of the descriptors flipped",
       [&](tcpdp::RecordCipher& c) {
         auto b = tcpdp::encode_sealed(c, {tcpdp::FrameType::ReadRequest, 1, 0, 0}, one, {});
         b.back() ^= 0x01;
         return b;
       }},
      {"a valid request replayed",
       [&](tcpdp::RecordCipher& c) {
         auto b = tcpdp::encode_sealed(c, {tcpdp::FrameType::ReadRequest, 1, 0, 0}, one, {});
         auto twice = b;
         twice.insert(twice.end(), b.begin(), b.end());
         return twice;
       }},
      {"a clear request", [&](tcpdp::RecordCipher&) { return tcpdp::encode({tcpdp::FrameType::ReadRequest, 1, 0, 0}, one); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    FakePeer peer(TransportMode::Tcp, test_key());
    peer.admit(p.agent->info().listen);
    peer.data()->send_all(c.bytes(*peer.sealer()), deadline_in(3s));
    EXPECT_TRUE(closed_within(peer.data()->fd(), 3000ms)) << "the data connection stayed open";
    const auto st = peer_lost(*p.agent, "dec");
    ASSERT_TRUE(st.has_value()) << "no PeerLost notification";
    EXPECT_EQ(*st, Status::Protocol);
  }
  // The agent serves the next, honest peer.
  FakePeer fresh(TransportMode::Tcp, test_key());
  fresh.admit(p.agent->info().listen);
  fresh.data()->send_all(tcpdp::encode_sealed(*fresh.sealer(), {tcpdp::FrameType::ReadRequest, 1, 0, 0}, one, {}),
                         deadline_in(3s));
  const Received ok = recv_frame(fresh);
  EXPECT_EQ(ok.header.status, 0u);
  EXPECT_EQ(0, std::memcmp(ok.payload.data(), p.at(0, 0), 64));
}

// ---- the agent receiving a sealed WRITE (a fake P) ----

TEST(AgentTcpSealed, ATamperedWriteIsNeverAcknowledgedAndLandsNothingOutsideItsRange) {
  KeyedRank d("pre", 128, 1, test_key(), true, 1);  // region 0: 2 MiB, registered
  const uint64_t off = 4096, len = 600 << 10;      // three sealed segments
  std::vector<uint8_t> payload(len);
  for (size_t i = 0; i < len; ++i) payload[i] = static_cast<uint8_t>(i * 29 + 1);
  const std::vector<tcpdp::Piece> piece{{0, off, len}};
  const size_t head = tcpdp::kHeaderBytes + tcpdp::kTagBytes + tcpdp::kPieceBytes + tcpdp::kTagBytes;
  const size_t seg = tcpdp::kSegmentBytes + tcpdp::kTagBytes;
  struct Case {
    const char* what;
    std::function<void(std::vector<uint8_t>&)> tamper;
  };
  const std::vector<Case> cases{
      {"a ciphertext byte of the second segment", [&](std::vector<uint8_t>& b) { b[head + seg + 1000] ^= 0x04; }},
      {"the last segment's tag", [&](std::vector<uint8_t>& b) { b.back() ^= 0x80; }},
      {"the first two segments swapped",
       [&](std::vector<uint8_t>& b) {
         std::swap_ranges(b.begin() + static_cast<std::ptrdiff_t>(head), b.begin() + static_cast<std::ptrdiff_t>(head + seg),
                          b.begin() + static_cast<std::ptrdiff_t>(head + seg));
       }},
      {"a descriptor byte (the target offset)", [&](std::vector<uint8_t>& b) { b[tcpdp::kHeaderBytes + tcpdp::kTagBytes + 9] ^= 0x10; }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    d.fill(1);
    const std::vector<uint8_t> before = d.mem;
    FakePeer peer(TransportMode::Tcp, test_key());
    peer.admit(d.agent->info().listen);
    auto b = tcpdp::encode_sealed(*peer.sealer(), {tcpdp::FrameType::Write, 7, 0, 0}, piece, payload);
    c.tamper(b);
    try {
      peer.data()->send_all(b, deadline_in(3s));
    } catch (const core::Error&) {
      // The agent may find the bad record and close before the rest is sent.
    }
    // No WriteAck: the connection closes instead (PROTOCOL on the agent's side).
    EXPECT_TRUE(closed_within(peer.data()->fd(), 3000ms)) << "the data connection stayed open (acknowledged?)";
    const auto st = peer_lost(*d.agent, "dec");
    ASSERT_TRUE(st.has_value());
    EXPECT_EQ(*st, Status::Protocol);
    // Outside the range the agent checked, nothing changed (inside it, the segments that arrived
    // before the bad one may have landed: the batch is not acknowledged, so P's transfer fails).
    const size_t lo = static_cast<size_t>(d.at(0, off) - d.mem.data());
    for (size_t i = 0; i < d.mem.size(); ++i) {
      if (i >= lo && i < lo + len) continue;
      if (d.mem[i] != before[i]) {
        ADD_FAILURE() << "byte " << i << " outside the written range changed";
        break;
      }
    }
  }
  // The same Write untampered: acknowledged, and exactly the range holds the payload.
  d.fill(1);
  const std::vector<uint8_t> before = d.mem;
  FakePeer peer(TransportMode::Tcp, test_key());
  peer.admit(d.agent->info().listen);
  peer.data()->send_all(tcpdp::encode_sealed(*peer.sealer(), {tcpdp::FrameType::Write, 7, 0, 0}, piece, payload),
                        deadline_in(3s));
  const Received ack = recv_frame(peer);
  EXPECT_EQ(ack.header.type, tcpdp::FrameType::WriteAck);
  EXPECT_EQ(ack.header.batch, 7u);
  EXPECT_EQ(ack.header.status, 0u);
  // The ack crossed a socket; D's lock (info() takes it) orders this thread after D's landing of
  // the bytes, which D's progress call did before it took the lock again to send the ack.
  (void)d.agent->info();
  std::vector<uint8_t> expect = before;
  std::memcpy(expect.data() + (d.at(0, off) - d.mem.data()), payload.data(), len);
  EXPECT_EQ(first_difference(d.mem, expect), SIZE_MAX);
}

// ---- the agent posting a sealed READ (a fake P answers) ----

namespace {

// A fake P ("pre") for a D agent ("dec") that posts READs: answers each sealed ReadRequest with
// ReadData holding `fill(offset)` for each piece, `tamper` applied to the sealed answer.
struct ReadAnswer {
  FakePeer peer;
  explicit ReadAnswer(const core::EngineMetadata& md) : peer(TransportMode::Tcp, md, test_key(), true) {}
  static uint8_t byte_at(uint32_t region, uint64_t offset) { return static_cast<uint8_t>(offset * 7 + region * 3 + 11); }
  // Serves one request; returns its payload size.
  uint64_t serve(const std::function<void(std::vector<uint8_t>&, size_t head)>& tamper) {
    const Received req = recv_frame(peer);
    EXPECT_EQ(req.header.type, tcpdp::FrameType::ReadRequest);
    std::vector<uint8_t> payload;
    for (const auto& x : req.pieces) {
      for (uint64_t i = 0; i < x.length; ++i) payload.push_back(byte_at(x.region, x.offset + i));
    }
    auto b = tcpdp::encode_sealed(*peer.sealer(), {tcpdp::FrameType::ReadData, req.header.batch, 0, 0}, req.pieces, payload);
    const size_t head = tcpdp::kHeaderBytes + tcpdp::kTagBytes + req.pieces.size() * tcpdp::kPieceBytes + tcpdp::kTagBytes;
    if (tamper) tamper(b, head);
    try {
      peer.data()->send_all(b, deadline_in(3s));
    } catch (const core::Error&) {
      // Tampered: D may find the bad segment and close before the rest of the frame is sent.
      if (!tamper) throw;
    }
    return payload.size();
  }
};

}  // namespace

TEST(AgentTcpSealed, ATamperedReadAnswerFailsTheTransferWithProtocolAndIsNotCounted) {
  for (const bool tamper : {true, false}) {
    SCOPED_TRACE(tamper ? "tampered" : "honest");
    KeyedRank d("dec", 128, 2, test_key());
    ReadAnswer p(tiny_metadata("pre", 0, 1ull << 41, 128));
    p.peer.say_minor(4);  // a P before 3.5: D's READ waits for no LeaseAnswer (the fake reads no control frame)
    // The agent (D) accepts the fake P's connection (the fake connects), which advertises keys
    // for its three regions (any packed key of a valid layout: D's own).
    const std::vector<uint8_t> rkey = d.regs[0]->ucx->packed_rkey();
    p.peer.admit(d.agent->info().listen, deadline_in(3s), {p.peer.key_for(0, rkey), p.peer.key_for(1, rkey), p.peer.key_for(2, rkey)});
    // One read of 96 consecutive blocks (1.5 MiB) per region: a first batch of 4 MiB, then the rest.
    const auto plan = plan_between(d.md, p.peer.metadata(), 96);
    const std::vector<uint8_t> before = d.mem;
    PostParams pp;
    pp.plan = &plan;
    pp.peer_engine_id = "pre";
    pp.request_id = "r";
    pp.timeout = 3000ms;
    auto t = d.agent->post(pp);
    const uint64_t served = p.serve(tamper ? std::function<void(std::vector<uint8_t>&, size_t)>(
                                                 [](std::vector<uint8_t>& b, size_t head) { b[head + 300000] ^= 1; })
                                           : nullptr);
    EXPECT_GT(served, tcpdp::kSegmentBytes);
    if (!tamper) {
      // Honest: serve every further batch until the transfer is done.
      while (!t.wait(0ms)) {
        pollfd pf{p.peer.data()->fd(), POLLIN, 0};
        if (::poll(&pf, 1, 200) > 0) p.serve(nullptr);
      }
    }
    ASSERT_TRUE(t.wait(4000ms)) << "not final within the deadline";
    const auto s = t.status();
    if (tamper) {
      EXPECT_EQ(s.status, Status::Protocol) << s.message;
      EXPECT_NE(s.message.find("failed authentication"), std::string::npos) << s.message;
      EXPECT_LT(s.bytes_done, served) << "bytes of the batch whose tag failed were counted";
    } else {
      ASSERT_EQ(s.status, Status::Ok) << s.message;
      EXPECT_EQ(s.bytes_done, s.bytes_total);
    }
    // Nothing outside the plan's reads changed; inside, the honest run holds P's bytes.
    std::vector<bool> inside(d.mem.size(), false);
    for (const auto& rr : plan.ranks) {
      for (const auto& r : rr.reads) {
        const size_t lo = static_cast<size_t>(d.at(r.local_region, r.local_offset) - d.mem.data());
        for (uint64_t i = 0; i < r.length; ++i) {
          inside[lo + i] = true;
          if (!tamper && d.mem[lo + i] != ReadAnswer::byte_at(r.remote_region, r.remote_offset + i)) {
            ADD_FAILURE() << "wrong byte in region " << r.local_region << " at " << r.local_offset + i;
            break;
          }
        }
      }
    }
    for (size_t i = 0; i < d.mem.size(); ++i) {
      if (!inside[i] && d.mem[i] != before[i]) {
        ADD_FAILURE() << "byte " << i << " outside the plan's reads changed";
        break;
      }
    }
  }
}
