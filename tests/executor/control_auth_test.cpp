// Pre-shared-key authentication: HMAC-SHA256 against RFC 4231, and the properties the handshake
// relies on (domain separation against reflection, binding of nonces and identities).
#include <algorithm>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "control/auth.hpp"
#include "pdkv/core/error.hpp"

using namespace pdkv::exec;
using pdkv::core::Error;
using pdkv::core::Status;

namespace {

std::string hex(const Mac& m) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (uint8_t b : m) {
    s += d[b >> 4];
    s += d[b & 15];
  }
  return s;
}

std::vector<uint8_t> bytes_of(std::string_view s) { return {s.begin(), s.end()}; }

AuthTranscript sample() {
  AuthTranscript t;
  t.client_nonce.fill(0x11);
  t.server_nonce.fill(0x22);
  t.client_engine_id = "decode";
  t.client_tp_rank = 0;
  t.server_engine_id = "prefill";
  t.server_tp_rank = 1;
  return t;
}

const PresharedKey kKey = PresharedKey::from_string("correct horse battery staple");

}  // namespace

TEST(ControlAuth, HmacSha256MatchesRfc4231) {
  // Test case 1.
  EXPECT_EQ(hex(hmac_sha256(std::vector<uint8_t>(20, 0x0b), bytes_of("Hi There"))),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  // Test case 2.
  EXPECT_EQ(hex(hmac_sha256(bytes_of("Jefe"), bytes_of("what do ya want for nothing?"))),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Test case 6: a key longer than the block size is hashed first.
  EXPECT_EQ(hex(hmac_sha256(std::vector<uint8_t>(131, 0xaa),
                            bytes_of("Test Using Larger Than Block-Size Key - Hash Key First"))),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(ControlAuth, ShortKeyIsRefusedNamingItsLength) {
  try {
    PresharedKey::from_string("fifteen bytes!!");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("15 bytes"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("at least 16"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(PresharedKey::from_string("sixteen bytes!!!"));
  EXPECT_THROW(PresharedKey(std::span<const uint8_t>{}), Error);
}

TEST(ControlAuth, ServerAndClientMacsAreDomainSeparated) {
  // Reflection: the server's own proof echoed back must not pass as the client's.
  const AuthTranscript t = sample();
  EXPECT_FALSE(macs_equal(server_mac(kKey, t), client_mac(kKey, t)));
  // Swapping roles (a client reflecting a connection it opened to the server back at it) changes
  // the transcript, so neither MAC carries over.
  AuthTranscript swapped = t;
  std::swap(swapped.client_nonce, swapped.server_nonce);
  std::swap(swapped.client_engine_id, swapped.server_engine_id);
  std::swap(swapped.client_tp_rank, swapped.server_tp_rank);
  EXPECT_FALSE(macs_equal(server_mac(kKey, t), client_mac(kKey, swapped)));
  EXPECT_FALSE(macs_equal(client_mac(kKey, t), server_mac(kKey, swapped)));
  EXPECT_FALSE(macs_equal(server_mac(kKey, t), server_mac(kKey, swapped)));
}

TEST(ControlAuth, MacsBindKeyNoncesAndIdentities) {
  const AuthTranscript t = sample();
  const Mac base = client_mac(kKey, t);
  EXPECT_TRUE(macs_equal(base, client_mac(kKey, t)));  // deterministic
  EXPECT_FALSE(macs_equal(base, client_mac(PresharedKey::from_string("correct horse battery stapl3"), t)));
  auto differs = [&](auto change) {
    AuthTranscript u = t;
    change(u);
    return !macs_equal(base, client_mac(kKey, u));
  };
  EXPECT_TRUE(differs([](AuthTranscript& u) { u.client_nonce[31] ^= 1; }));
  EXPECT_TRUE(differs([](AuthTranscript& u) { u.server_nonce[0] ^= 1; }));
  EXPECT_TRUE(differs([](AuthTranscript& u) { u.client_engine_id = "decodf"; }));
  EXPECT_TRUE(differs([](AuthTranscript& u) { u.client_tp_rank = 1; }));
  EXPECT_TRUE(differs([](AuthTranscript& u) { u.server_engine_id = "prefil"; }));
  EXPECT_TRUE(differs([](AuthTranscript& u) { u.server_tp_rank = 2; }));
  // Length prefixes keep ("ab","c") and ("a","bc") apart.
  AuthTranscript a = t, b = t;
  a.client_engine_id = "ab";
  a.server_engine_id = "c";
  b.client_engine_id = "a";
  b.server_engine_id = "bc";
  EXPECT_NE(a.encode(), b.encode());
}

// The 3.2 transcript (no Hellos) must stay byte for byte what 3.2 peers compute, or they could no
// longer admit this version; the 3.3 form appends a form byte and both Hellos. Both values were
// computed outside pdkv (Python's hmac over the documented encoding).
TEST(ControlAuth, TranscriptFormsMatchTheirDocumentedEncoding) {
  AuthTranscript t = sample();
  EXPECT_EQ(hex(client_mac(kKey, t)), "7249e6a90b84c166c4346da4673e1fb033fd8850420dd7d60166a6bf7275331d");
  t.client_hello = bytes_of("client-hello-bytes");
  t.server_hello = bytes_of("server-hello");
  EXPECT_EQ(hex(client_mac(kKey, t)), "1f7f0f29daffcb69985641945a17c268015b01f7eb376ac67ef19df72e86e103");
}

TEST(ControlAuth, MacsBindEveryByteOfBothHellos) {
  AuthTranscript t = sample();
  t.client_hello = bytes_of("client hello");
  t.server_hello = bytes_of("server hello");
  const Mac client = client_mac(kKey, t);
  const Mac server = server_mac(kKey, t);
  for (bool of_client : {true, false}) {
    const size_t n = (of_client ? t.client_hello : t.server_hello).size();
    for (size_t i = 0; i < n; ++i) {
      AuthTranscript u = t;
      (of_client ? u.client_hello : u.server_hello)[i] ^= 0x20;
      EXPECT_FALSE(macs_equal(client, client_mac(kKey, u))) << of_client << " " << i;
      EXPECT_FALSE(macs_equal(server, server_mac(kKey, u))) << of_client << " " << i;
    }
  }
  // The boundary between the Hellos is part of what is bound.
  AuthTranscript moved = t;
  moved.client_hello = bytes_of("client hellos");
  moved.server_hello = bytes_of("erver hello");
  EXPECT_NE(moved.encode(), t.encode());
  // Swapped roles differ too.
  AuthTranscript swapped = t;
  std::swap(swapped.client_hello, swapped.server_hello);
  EXPECT_FALSE(macs_equal(client, client_mac(kKey, swapped)));
}

TEST(ControlAuth, NoncesAreFreshAndMacCompareIsExact) {
  const Nonce a = random_nonce();
  const Nonce b = random_nonce();
  EXPECT_NE(a, b);
  Mac m{};
  Mac n{};
  EXPECT_TRUE(macs_equal(m, n));
  n[31] = 1;
  EXPECT_FALSE(macs_equal(m, n));
}

// The 3.5 downgrade mark: 8 fixed bytes at the end, the other 24 still random; an unmarked random
// nonce (a 3.4 or older peer's) does not read as marked, nor does one differing in any mark byte.
TEST(ControlAuth, TheNonceMarkKeepsTwentyFourRandomBytes) {
  Nonce a = random_nonce();
  Nonce b = random_nonce();
  EXPECT_FALSE(nonce_is_marked(a));
  const Nonce a0 = a;
  mark_nonce(a);
  mark_nonce(b);
  EXPECT_TRUE(nonce_is_marked(a));
  EXPECT_TRUE(std::equal(a.begin(), a.begin() + 24, a0.begin()));
  EXPECT_NE(a, b);
  EXPECT_TRUE(std::equal(a.begin() + 24, a.end(), b.begin() + 24));
  for (size_t i = 24; i < kNonceBytes; ++i) {
    Nonce c = a;
    c[i] ^= 0x01;
    EXPECT_FALSE(nonce_is_marked(c)) << "byte " << i;
  }
  Nonce zero{};
  EXPECT_FALSE(nonce_is_marked(zero));
}

TEST(ControlAuth, KeyCopiesAndMovesKeepTheBytes) {
  PresharedKey k = PresharedKey::from_string("0123456789abcdef0123");
  PresharedKey c = k;
  PresharedKey m = std::move(k);
  EXPECT_EQ(std::string(c.bytes().begin(), c.bytes().end()), "0123456789abcdef0123");
  EXPECT_EQ(std::string(m.bytes().begin(), m.bytes().end()), "0123456789abcdef0123");
}
