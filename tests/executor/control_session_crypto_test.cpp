// Sealing of control frames after the pre-shared-key proofs (session_crypto.hpp): the two sides
// derive matching per-direction keys; a sealed payload hides its plaintext; any altered,
// replayed, reordered, retyped or foreign frame fails to open; a channel and a whole handshake
// with a key put no region key on the wire in clear, and a peer that splices a plaintext frame
// into a protected connection is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "control/auth.hpp"
#include "control/channel.hpp"
#include "control/handshake.hpp"
#include "control/session_crypto.hpp"
#include "pdkv/core/error.hpp"

using namespace pdkv::exec;
using namespace std::chrono_literals;
using pdkv::core::Error;
using pdkv::core::Status;

namespace {

const PresharedKey kKey = PresharedKey::from_string("session-key-0123456789abcdef");

AuthTranscript transcript(uint8_t salt = 1) {
  AuthTranscript t;
  t.client_nonce.fill(salt);
  t.server_nonce.fill(static_cast<uint8_t>(salt + 1));
  t.client_engine_id = "decode";
  t.client_tp_rank = 0;
  t.server_engine_id = "prefill";
  t.server_tp_rank = 3;
  return t;
}

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

bool contains_bytes(const std::vector<uint8_t>& hay, const std::vector<uint8_t>& needle) {
  return std::search(hay.begin(), hay.end(), needle.begin(), needle.end()) != hay.end();
}

// Expects `f` to throw Protocol with `what` in the message.
template <class F>
void expect_protocol(F&& f, const std::string& what) {
  try {
    f();
    ADD_FAILURE() << "no error; expected Protocol with: " << what;
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::Protocol) << e.what();
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(SessionCrypto, BothSidesDeriveMatchingDirectionalKeys) {
  const SessionKeys c = derive_session_keys(kKey, transcript(), true);
  const SessionKeys s = derive_session_keys(kKey, transcript(), false);
  EXPECT_EQ(c.send, s.recv);
  EXPECT_EQ(c.recv, s.send);
  EXPECT_NE(c.send, c.recv);  // the directions never share a key (no reflection)
  // Fresh per connection (other nonces), bound to the identities and to the key.
  EXPECT_NE(derive_session_keys(kKey, transcript(7), true).send, c.send);
  AuthTranscript other = transcript();
  other.server_tp_rank = 2;
  EXPECT_NE(derive_session_keys(kKey, other, true).send, c.send);
  EXPECT_NE(derive_session_keys(PresharedKey::from_string("another-key-0123456789"), transcript(), true).send, c.send);
}

TEST(SessionCrypto, DataConnectionKeysMatchPerDirectionAndDifferFromTheControlChannels) {
  const SessionKeys c = derive_data_keys(kKey, transcript(), true);
  const SessionKeys s = derive_data_keys(kKey, transcript(), false);
  EXPECT_EQ(c.send, s.recv);
  EXPECT_EQ(c.recv, s.send);
  EXPECT_NE(c.send, c.recv);
  // Never a control channel key (both count their frames / records from 0 under their keys).
  const SessionKeys control = derive_session_keys(kKey, transcript(), true);
  for (const auto& k : {c.send, c.recv}) {
    EXPECT_NE(k, control.send);
    EXPECT_NE(k, control.recv);
  }
  EXPECT_NE(derive_data_keys(kKey, transcript(7), true).send, c.send);  // fresh per connection
}

TEST(SessionCrypto, SealedFramesOpenInOrderAndHideThePlaintext) {
  const SessionKeys c = derive_session_keys(kKey, transcript(), true);
  const SessionKeys s = derive_session_keys(kKey, transcript(), false);
  FrameSealer out(c.send);
  FrameSealer in(s.recv);
  const std::vector<uint8_t> secret = bytes("rkey:0123456789abcdef0123456789abcdef");
  for (int i = 0; i < 3; ++i) {
    const std::vector<uint8_t> sealed = out.seal(4, 0, secret);
    EXPECT_EQ(sealed.size(), secret.size() + kSealTagBytes);
    EXPECT_FALSE(contains_bytes(sealed, bytes("0123456789abcdef")));
    EXPECT_EQ(in.open(4, 0, sealed), secret);
  }
  EXPECT_EQ(out.next_counter(), 3u);
  EXPECT_EQ(in.next_counter(), 3u);
  // The same plaintext never seals to the same bytes twice (the nonce is the frame number).
  EXPECT_NE(out.seal(4, 0, secret), out.seal(4, 0, secret));
  const std::vector<uint8_t> empty = FrameSealer(c.send).seal(5, 0, {});
  EXPECT_EQ(empty.size(), kSealTagBytes);
  EXPECT_TRUE(FrameSealer(s.recv).open(5, 0, empty).empty());
}

TEST(SessionCrypto, AlteredReplayedReorderedRetypedOrForeignFramesFailToOpen) {
  const SessionKeys c = derive_session_keys(kKey, transcript(), true);
  const SessionKeys s = derive_session_keys(kKey, transcript(), false);
  const std::vector<uint8_t> msg = bytes("notify request-42");
  FrameSealer out(c.send);
  const std::vector<uint8_t> f0 = out.seal(7, 0, msg);
  const std::vector<uint8_t> f1 = out.seal(7, 0, msg);

  for (size_t pos : {size_t{0}, msg.size() / 2, msg.size(), f0.size() - 1}) {  // body and tag bytes
    std::vector<uint8_t> bad = f0;
    bad[pos] ^= 0x01;
    FrameSealer in(s.recv);
    expect_protocol([&] { in.open(7, 0, bad); }, "sealed frame 0 failed authentication");
  }
  {  // replayed: frame 0 twice
    FrameSealer in(s.recv);
    EXPECT_EQ(in.open(7, 0, f0), msg);
    expect_protocol([&] { in.open(7, 0, f0); }, "sealed frame 1 failed authentication");
  }
  {  // reordered: frame 1 first
    FrameSealer in(s.recv);
    expect_protocol([&] { in.open(7, 0, f1); }, "sealed frame 0 failed authentication");
  }
  {  // retyped: a sealed Notify passed off as a Bye, or another minor version
    FrameSealer in(s.recv);
    expect_protocol([&] { in.open(11, 0, f0); }, "failed authentication");
    FrameSealer in2(s.recv);
    expect_protocol([&] { in2.open(7, 1, f0); }, "failed authentication");
  }
  {  // reflected back to its sender (its own sending key is not its receiving key)
    FrameSealer in(c.recv);
    expect_protocol([&] { in.open(7, 0, f0); }, "failed authentication");
  }
  {  // another connection's keys
    FrameSealer in(derive_session_keys(kKey, transcript(9), false).recv);
    expect_protocol([&] { in.open(7, 0, f0); }, "failed authentication");
  }
  {  // shorter than a tag
    FrameSealer in(s.recv);
    expect_protocol([&] { in.open(7, 0, std::vector<uint8_t>(kSealTagBytes - 1, 0)); },
                    "15 payload bytes, fewer than the 16-byte authentication tag");
  }
}

// A connected pair of channels over loopback.
struct Pair {
  std::optional<ControlChannel> a, b;
  Pair() {
    Listener l(HostPort{"127.0.0.1", 0});
    std::thread t([&] { b.emplace(l.accept(deadline_in(10s))); });
    a.emplace(ControlChannel::connect(HostPort{"127.0.0.1", l.port()}, deadline_in(10s)));
    t.join();
  }
};

Notify notify(const std::string& id) {
  Notify n;
  n.request_id = id;
  n.engine_id = "decode";
  n.bytes = 4096;
  return n;
}

TEST(SessionCrypto, ProtectedChannelsCarryFramesBothWaysOnEitherPath) {
  Pair p;
  p.a->protect(derive_session_keys(kKey, transcript(), true));
  p.b->protect(derive_session_keys(kKey, transcript(), false));
  ASSERT_TRUE(p.a->is_protected());
  // Blocking path.
  p.a->send(notify("req-1"), deadline_in(5s));
  Frame f = p.b->recv(deadline_in(5s));
  ASSERT_EQ(f.type, FrameType::Notify);
  EXPECT_EQ(Notify::decode(f.payload).request_id, "req-1");
  // Queued path (the agent's event loop) in the other direction, several frames at once.
  for (const char* id : {"req-2", "req-3", "req-4"}) p.b->queue(notify(id));
  while (!p.b->flush_some()) {
  }
  std::vector<std::string> got;
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (got.size() < 3 && std::chrono::steady_clock::now() < until) {
    for (const Frame& g : p.a->read_available()) got.push_back(Notify::decode(g.payload).request_id);
  }
  EXPECT_EQ(got, (std::vector<std::string>{"req-2", "req-3", "req-4"}));
  // An Error frame is sealed too and still becomes the peer's error.
  p.a->send(ErrorMessage{Status::Busy, "region 1 is in use"}, deadline_in(5s));
  try {
    p.b->recv(deadline_in(5s));
    ADD_FAILURE() << "the Error frame was not raised";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::Busy) << e.what();
    EXPECT_NE(std::string(e.what()).find("region 1 is in use"), std::string::npos) << e.what();
  }
}

TEST(SessionCrypto, AProtectedChannelHidesPayloadsAndRefusesSplicedPlaintext) {
  Pair p;
  p.a->protect(derive_session_keys(kKey, transcript(), true));
  // b reads the raw frames: the request id is not on the wire.
  p.a->send(notify("secret-request-id"), deadline_in(5s));
  const Frame raw = p.b->recv(deadline_in(5s));
  EXPECT_EQ(raw.type, FrameType::Notify);
  EXPECT_FALSE(contains_bytes(raw.payload, bytes("secret-request-id")));
  // b (unprotected, like an attacker on the path) sends a plaintext frame: refused, both paths.
  p.b->send(notify("injected"), deadline_in(5s));
  expect_protocol([&] { p.a->recv(deadline_in(5s)); }, "sealed frame 0 failed authentication");

  Pair q;
  q.a->protect(derive_session_keys(kKey, transcript(), true));
  q.b->send(notify("injected"), deadline_in(5s));
  const auto until = std::chrono::steady_clock::now() + 5s;
  bool refused = false;
  while (!refused && std::chrono::steady_clock::now() < until) {
    try {
      EXPECT_TRUE(q.a->read_available().empty());
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::Protocol) << e.what();
      refused = true;
    }
  }
  EXPECT_TRUE(refused);
}

HandshakeParams params(const std::string& engine, uint32_t rank) {
  HandshakeParams p;
  p.hello.engine_id = engine;
  p.hello.tp_rank = rank;
  p.hello.host_id = host_identity();
  p.info.metadata = std::vector<uint8_t>(64, static_cast<uint8_t>(rank + 1));
  p.info.worker_address = std::vector<uint8_t>(200, 0xAB);
  p.info.regions.push_back(RegionKey{0, 0x10000, 1 << 20, 0, std::vector<uint8_t>(40, 0xEE)});
  p.key = kKey;
  return p;
}

// A client that knows the key but reads the server's PeerInfo off the wire as it arrives: it
// carries no region key or worker address in clear, and opens to exactly the server's info
// under the keys the transcript derives.
TEST(SessionCrypto, AKeyedHandshakeSendsRegionKeysSealed) {
  const HandshakeParams server = params("prefill", 1);
  Listener l(HostPort{"127.0.0.1", 0});
  std::optional<Error> server_error;
  std::thread t([&] {
    try {
      ControlChannel ch(l.accept(deadline_in(10s)));
      handshake_server(ch, server, deadline_in(10s));
    } catch (const Error& e) {
      server_error = e;  // the client below stops after reading the PeerInfo
    }
  });
  ControlChannel raw = ControlChannel::connect(HostPort{"127.0.0.1", l.port()}, deadline_in(10s));
  Hello hello;
  hello.engine_id = "decode";
  hello.tp_rank = 0;
  hello.nonce = random_nonce();
  hello.has_key = true;
  raw.send(hello, deadline_in(10s));
  const std::vector<uint8_t> server_hello_bytes = raw.recv(deadline_in(10s)).payload;
  const Hello server_hello = Hello::decode(server_hello_bytes);
  const Challenge ch = Challenge::decode(raw.recv(deadline_in(10s)).payload);
  AuthTranscript tr;
  tr.client_nonce = hello.nonce;
  tr.server_nonce = ch.server_nonce;
  tr.client_engine_id = "decode";
  tr.client_tp_rank = 0;
  tr.server_engine_id = server_hello.engine_id;
  tr.server_tp_rank = server_hello.tp_rank;
  tr.client_hello = hello.encode();  // both Hellos say 3.3 or later: the transcript binds them
  tr.server_hello = server_hello_bytes;
  ASSERT_TRUE(macs_equal(ch.server_mac, server_mac(kKey, tr)));
  Proof proof;
  proof.client_mac = client_mac(kKey, tr);
  raw.send(proof, deadline_in(10s));
  raw.set_max_payload(kMaxFramePayload);
  const Frame info = raw.recv(deadline_in(10s));  // not protected: the bytes as they travelled
  ASSERT_EQ(info.type, FrameType::PeerInfo);
  EXPECT_FALSE(contains_bytes(info.payload, std::vector<uint8_t>(40, 0xEE)));
  EXPECT_FALSE(contains_bytes(info.payload, std::vector<uint8_t>(32, 0xAB)));
  FrameSealer opener(derive_session_keys(kKey, tr, true).recv);
  const PeerInfo opened = PeerInfo::decode(opener.open(static_cast<uint16_t>(info.type), info.version_minor, info.payload));
  EXPECT_EQ(opened.worker_address, server.info.worker_address);
  ASSERT_EQ(opened.regions.size(), 1u);
  EXPECT_EQ(opened.regions[0].rkey, server.info.regions[0].rkey);
  raw.close();
  t.join();
  ASSERT_TRUE(server_error);
}

}  // namespace

// The handshake hands both sides the same data connection keys (each side's send is the other's
// receive), and none without a key.
TEST(SessionCrypto, AKeyedHandshakeDerivesTheDataConnectionKeysOnBothSides) {
  Listener listener(HostPort{"127.0.0.1", 0});
  auto with_key = [](HandshakeParams p, bool keyed) {
    if (!keyed) p.key.reset();
    return p;
  };
  for (const bool keyed : {true, false}) {
    SCOPED_TRACE(keyed ? "keyed" : "no key");
    std::optional<HandshakeResult> server;
    std::thread t([&] {
      ControlChannel ch(listener.accept(deadline_in(3s)));
      server = handshake_server(ch, with_key(params("prefill", 1), keyed), deadline_in(3s));
    });
    ControlChannel ch = ControlChannel::connect(HostPort{"127.0.0.1", listener.port()}, deadline_in(3s));
    const HandshakeResult client =
        handshake_client(ch, with_key(params("decode", 0), keyed), deadline_in(3s));
    t.join();
    ASSERT_TRUE(server.has_value());
    ASSERT_EQ(client.data_keys.has_value(), keyed);
    ASSERT_EQ(server->data_keys.has_value(), keyed);
    if (keyed) {
      EXPECT_EQ(client.data_keys->send, server->data_keys->recv);
      EXPECT_EQ(client.data_keys->recv, server->data_keys->send);
    }
  }
}
