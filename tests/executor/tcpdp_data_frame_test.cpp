// The tcp data connection's frame codec and incremental parser (executor/tcpdp/): every malformed
// header or descriptor is Protocol naming what is wrong, a frame may arrive in any chunking, and
// no payload larger than a batch is ever announced.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "pdkv/core/error.hpp"
#include "tcpdp/data_frame.hpp"
#include "tcpdp/data_seal.hpp"

using namespace pdkv;
using namespace pdkv::exec::tcpdp;

namespace {

// Feeds `bytes` into a reader `chunk` bytes at a time; payload bytes are received (and, sealed,
// decrypted) into `payload` as they come. Returns the headers of the frames completed.
std::vector<Header> feed(FrameReader& r, const std::vector<uint8_t>& bytes, size_t chunk,
                         std::vector<uint8_t>* payload = nullptr) {
  std::vector<Header> out;
  size_t at = 0;
  while (at < bytes.size()) {
    if (auto w = r.want(); !w.empty()) {
      const size_t n = std::min({w.size(), chunk, bytes.size() - at});
      std::memcpy(w.data(), bytes.data() + at, n);
      r.received(n);
      at += n;
    } else if (!r.complete()) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>({r.payload_chunk(), chunk, bytes.size() - at}));
      std::vector<uint8_t> in(bytes.begin() + static_cast<std::ptrdiff_t>(at),
                              bytes.begin() + static_cast<std::ptrdiff_t>(at + n));
      r.payload_received(in);
      if (payload) payload->insert(payload->end(), in.begin(), in.end());
      at += n;
    }
    if (r.complete()) {
      out.push_back(r.header());
      r.next();
    }
  }
  return out;
}

std::string protocol_error(const std::vector<uint8_t>& bytes) {
  FrameReader r;
  try {
    feed(r, bytes, 7);
  } catch (const core::Error& e) {
    EXPECT_EQ(e.status(), core::Status::Protocol) << e.what();
    return e.what();
  }
  return "";
}

}  // namespace

TEST(TcpDataFrame, FramesRoundTripInAnyChunking) {
  std::vector<Piece> pieces{{0, 16, 100}, {2, 0, 4096}};
  std::vector<uint8_t> stream;
  auto add = [&](const Header& h, const std::vector<Piece>& p, uint64_t payload) {
    auto b = encode(h, p);
    stream.insert(stream.end(), b.begin(), b.end());
    stream.insert(stream.end(), payload, 0xAB);
  };
  add({FrameType::ReadRequest, 1, 0, 0}, pieces, 0);
  add({FrameType::ReadData, 1, 0, 0}, pieces, 4196);
  add({FrameType::ReadData, 2, 0, 1}, {}, 0);
  add({FrameType::Write, 3, 0, 0}, pieces, 4196);
  add({FrameType::WriteAck, 3, 0, 0}, {}, 0);
  for (size_t chunk : {size_t{1}, size_t{5}, size_t{31}, size_t{4096}, stream.size()}) {
    FrameReader r;
    const auto hs = feed(r, stream, chunk);
    ASSERT_EQ(hs.size(), 5u) << "chunk " << chunk;
    EXPECT_EQ(hs[0].type, FrameType::ReadRequest);
    EXPECT_EQ(hs[1].batch, 1u);
    EXPECT_EQ(hs[2].status, 1u);
    EXPECT_EQ(hs[3].type, FrameType::Write);
    EXPECT_EQ(hs[4].type, FrameType::WriteAck);
    EXPECT_TRUE(r.idle());
  }
  FrameReader r;
  feed(r, encode({FrameType::Write, 9, 0, 0}, pieces), 1000);
  ASSERT_TRUE(r.ready());
  EXPECT_EQ(r.pieces(), pieces);
  EXPECT_EQ(r.payload_left(), 4196u);
}

// Answers may refuse with Range or Device (a failed CUDA copy); any other code is garbled.
TEST(TcpDataFrame, AnswersRefuseWithKnownCodesOnly) {
  for (FrameType t : {FrameType::ReadData, FrameType::WriteAck}) {
    for (uint32_t code : {1u, 2u}) {
      FrameReader r;
      const auto hs = feed(r, encode({t, 1, 0, code}, {}), 7);
      ASSERT_EQ(hs.size(), 1u);
      EXPECT_EQ(hs[0].status, code);
    }
    auto b = encode({t, 1, 0, 3}, {});
    EXPECT_NE(protocol_error(b).find("status 3"), std::string::npos);
  }
  EXPECT_EQ(refusal_reason(1, "outside"), "outside");
  EXPECT_NE(refusal_reason(2, "outside").find("CUDA device memory failed"), std::string::npos);
  EXPECT_NE(refusal_reason(9, "outside").find("refusal code 9"), std::string::npos);
}

TEST(TcpDataFrame, ATruncatedFrameIsNeverReady) {
  const auto b = encode({FrameType::ReadRequest, 1, 0, 0}, std::vector<Piece>{{0, 0, 8}, {1, 8, 8}});
  for (size_t cut = 0; cut < b.size(); ++cut) {
    FrameReader r;
    feed(r, std::vector<uint8_t>(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(cut)), 3);
    EXPECT_FALSE(r.ready()) << "cut at " << cut;
  }
}

TEST(TcpDataFrame, MalformedHeadersAreProtocolErrors) {
  const auto good = encode({FrameType::ReadRequest, 1, 0, 0}, std::vector<Piece>{{0, 0, 8}});
  auto with = [&](size_t at, uint8_t v) {
    auto b = good;
    b[at] = v;
    return b;
  };
  EXPECT_NE(protocol_error(with(0, 'X')).find("magic"), std::string::npos);
  EXPECT_NE(protocol_error(with(4, 2)).find("version 2"), std::string::npos);
  EXPECT_NE(protocol_error(with(5, 9)).find("type 9"), std::string::npos);
  EXPECT_NE(protocol_error(with(6, 1)).find("reserved"), std::string::npos);
  EXPECT_NE(protocol_error(with(30, 1)).find("reserved"), std::string::npos);
  EXPECT_NE(protocol_error(with(20, 1)).find("status"), std::string::npos);  // a request cannot refuse
  EXPECT_NE(protocol_error(with(36, 1)).find("reserved"), std::string::npos);  // piece reserved bytes
  // Oversize: more pieces than a batch may have, a piece longer than a batch, a batch too large.
  auto many = good;
  const uint32_t n = kMaxPieces + 1;
  std::memcpy(many.data() + 16, &n, 4);
  EXPECT_NE(protocol_error(many).find("pieces"), std::string::npos);
  EXPECT_NE(protocol_error(encode({FrameType::ReadRequest, 1, 0, 0}, std::vector<Piece>{{0, 0, kMaxBatchBytes + 1}}))
                .find("bytes"),
            std::string::npos);
  EXPECT_NE(protocol_error(encode({FrameType::Write, 1, 0, 0}, std::vector<Piece>{{0, 0, 0}})).find("0 bytes"),
            std::string::npos);
  EXPECT_NE(protocol_error(encode({FrameType::Write, 1, 0, 0},
                                  std::vector<Piece>{{0, 0, kMaxBatchBytes}, {1, 0, 1}}))
                .find("per batch"),
            std::string::npos);
  // A refused ReadData carries no pieces; a WriteAck never does; a request lists at least one.
  EXPECT_FALSE(protocol_error(encode({FrameType::ReadData, 1, 0, 1}, std::vector<Piece>{{0, 0, 8}})).empty());
  EXPECT_FALSE(protocol_error(encode({FrameType::WriteAck, 1, 0, 0}, std::vector<Piece>{{0, 0, 8}})).empty());
  EXPECT_FALSE(protocol_error(encode({FrameType::ReadRequest, 1, 0, 0}, {})).empty());
  EXPECT_FALSE(protocol_error(encode({FrameType::WriteAck, 1, 0, 7}, {})).empty());  // unknown refusal
}

// ---- sealed frames (data_seal.hpp) ----

namespace {

RecordKey key_of(uint8_t v) {
  RecordKey k{};
  for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<uint8_t>(v + i);
  return k;
}

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(i * 13 + seed);
  return p;
}

// A stream of three sealed frames: a request, an answer with a payload of several segments (the
// last one short), and a refusal.
struct SealedStream {
  std::vector<uint8_t> bytes;
  std::vector<size_t> frame_starts;
  std::vector<uint8_t> payload = pattern(2 * kSegmentBytes + 1000, 5);
  std::vector<Piece> pieces{{0, 0, 2 * kSegmentBytes}, {1, 64, 1000}};
  explicit SealedStream(const RecordKey& k) {
    RecordCipher c(k, RecordCipher::Mode::Seal);
    auto add = [&](const std::vector<uint8_t>& b) {
      frame_starts.push_back(bytes.size());
      bytes.insert(bytes.end(), b.begin(), b.end());
    };
    add(encode_sealed(c, {FrameType::ReadRequest, 1, 0, 0}, pieces, {}));
    add(encode_sealed(c, {FrameType::ReadData, 1, 0, 0}, pieces, payload));
    add(encode_sealed(c, {FrameType::ReadData, 2, 0, 1}, {}, {}));
  }
};

// The Protocol error a sealed reader throws on `bytes` ("" when none).
std::string sealed_error(const RecordKey& k, const std::vector<uint8_t>& bytes, size_t chunk = 4099) {
  FrameReader r(k);
  try {
    feed(r, bytes, chunk);
  } catch (const core::Error& e) {
    EXPECT_EQ(e.status(), core::Status::Protocol) << e.what();
    return e.what();
  }
  return "";
}

}  // namespace

TEST(TcpDataFrameSealed, FramesRoundTripInAnyChunkingAndTheWireHoldsNoClearByte) {
  const SealedStream s(key_of(1));
  EXPECT_EQ(s.bytes.size(), 3 * kHeaderBytes + 2 * 2 * kPieceBytes + s.payload.size() + (3 + 2 + 3) * kTagBytes);
  EXPECT_EQ(sealed_payload_bytes(s.payload.size()), s.payload.size() + 3 * kTagBytes);
  for (size_t chunk : {size_t{1}, size_t{7}, size_t{4096}, size_t{kSegmentBytes + 3}, s.bytes.size()}) {
    FrameReader r(key_of(1));
    std::vector<uint8_t> got;
    const auto hs = feed(r, s.bytes, chunk, &got);
    ASSERT_EQ(hs.size(), 3u) << "chunk " << chunk;
    EXPECT_EQ(hs[0].type, FrameType::ReadRequest);
    EXPECT_EQ(hs[1].type, FrameType::ReadData);
    EXPECT_EQ(hs[2].status, 1u);
    EXPECT_EQ(got, s.payload) << "chunk " << chunk;
    EXPECT_TRUE(r.idle());
  }
  // Neither the magic nor a 16-byte run of the payload appears on the wire.
  const uint8_t magic[4] = {0x50, 0x44, 0x4b, 0x44};
  EXPECT_EQ(std::search(s.bytes.begin(), s.bytes.end(), magic, magic + 4), s.bytes.end());
  EXPECT_EQ(std::search(s.bytes.begin(), s.bytes.end(), s.payload.begin() + 4096, s.payload.begin() + 4112), s.bytes.end());
}

TEST(TcpDataFrameSealed, AnAlteredByteAnywhereIsProtocolBeforeTheFrameIsActedOn) {
  const SealedStream s(key_of(1));
  // Every byte of the request and of the answer's head (header, descriptors, tags): the reader
  // never becomes ready on an altered head, so nothing is decided on unauthenticated bytes.
  const size_t answer_head = s.frame_starts[1] + kHeaderBytes + kTagBytes + 2 * kPieceBytes + kTagBytes;
  for (size_t at = 0; at < answer_head; ++at) {
    auto b = s.bytes;
    b[at] ^= 0x01;
    FrameReader r(key_of(1));
    size_t ready_frames = 0;
    try {
      size_t pos = 0;
      while (pos < b.size() && ready_frames < 2) {
        auto w = r.want();
        ASSERT_FALSE(w.empty());
        const size_t n = std::min(w.size(), b.size() - pos);
        std::memcpy(w.data(), b.data() + pos, n);
        pos += n;
        r.received(n);
        if (r.ready()) {
          ++ready_frames;
          if (r.complete()) r.next();
        }
      }
      ADD_FAILURE() << "byte " << at << " altered and still accepted";
    } catch (const core::Error& e) {
      EXPECT_EQ(e.status(), core::Status::Protocol);
      EXPECT_NE(std::string(e.what()).find("failed authentication"), std::string::npos) << e.what();
    }
  }
  // A payload byte in each segment, and each payload tag's last byte: Protocol, and the frame is
  // never complete.
  const size_t payload_at = answer_head;
  for (size_t at : {payload_at, payload_at + kSegmentBytes - 1, payload_at + kSegmentBytes + kTagBytes + 17,
                    payload_at + 2 * (kSegmentBytes + kTagBytes) + 999, payload_at + kSegmentBytes + kTagBytes - 1,
                    payload_at + 2 * (kSegmentBytes + kTagBytes) + 1000 + kTagBytes - 1}) {
    auto b = s.bytes;
    b[at] ^= 0x80;
    EXPECT_NE(sealed_error(key_of(1), b).find("sealed payload record"), std::string::npos) << "byte " << at;
  }
}

TEST(TcpDataFrameSealed, ReplayedReorderedDroppedOrForeignRecordsFail) {
  const SealedStream s(key_of(1));
  auto frame = [&](size_t i) {
    const size_t end = i + 1 < s.frame_starts.size() ? s.frame_starts[i + 1] : s.bytes.size();
    return std::vector<uint8_t>(s.bytes.begin() + static_cast<std::ptrdiff_t>(s.frame_starts[i]),
                                s.bytes.begin() + static_cast<std::ptrdiff_t>(end));
  };
  auto cat = [](std::vector<std::vector<uint8_t>> parts) {
    std::vector<uint8_t> out;
    for (auto& p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
  };
  // Replayed: the first frame twice.
  EXPECT_NE(sealed_error(key_of(1), cat({frame(0), frame(0)})).find("record 2"), std::string::npos);
  // Reordered: the third frame before the second; dropped: the second left out.
  EXPECT_FALSE(sealed_error(key_of(1), cat({frame(0), frame(2), frame(1)})).empty());
  EXPECT_FALSE(sealed_error(key_of(1), cat({frame(0), frame(2)})).empty());
  // Two payload segments swapped (each sealed correctly, in the wrong place).
  {
    auto b = s.bytes;
    const size_t seg = s.frame_starts[1] + kHeaderBytes + kTagBytes + 2 * kPieceBytes + kTagBytes;
    std::swap_ranges(b.begin() + static_cast<std::ptrdiff_t>(seg),
                     b.begin() + static_cast<std::ptrdiff_t>(seg + kSegmentBytes + kTagBytes),
                     b.begin() + static_cast<std::ptrdiff_t>(seg + kSegmentBytes + kTagBytes));
    EXPECT_NE(sealed_error(key_of(1), b).find("sealed payload record"), std::string::npos);
  }
  // Another key (another connection or the other direction), and clear frames on a sealed reader.
  EXPECT_NE(sealed_error(key_of(2), s.bytes).find("record 0"), std::string::npos);
  EXPECT_FALSE(sealed_error(key_of(1), encode({FrameType::ReadRequest, 1, 0, 0}, std::vector<Piece>{{0, 0, 8}})).empty());
  // A sealed record that authenticates but holds a malformed header is still Protocol (decoded).
  {
    RecordCipher c(key_of(1), RecordCipher::Mode::Seal);
    auto head = encode({FrameType::ReadRequest, 1, 0, 0}, std::vector<Piece>{{0, 0, 8}});
    head[4] = 9;  // version
    EXPECT_NE(sealed_error(key_of(1), seal_head(c, head)).find("version 9"), std::string::npos);
  }
}

TEST(TcpDataFrameSealed, APayloadIsOnlyCompleteOnceItsLastTagVerified) {
  const SealedStream s(key_of(1));
  // Everything but the last tag byte: ready, payload all received, never complete.
  std::vector<uint8_t> b(s.bytes.begin() + static_cast<std::ptrdiff_t>(s.frame_starts[1]),
                         s.bytes.begin() + static_cast<std::ptrdiff_t>(s.frame_starts[2]) - 1);
  FrameReader r(key_of(1));
  // The answer's records are numbered after the request's: read the request first.
  std::vector<uint8_t> first(s.bytes.begin(), s.bytes.begin() + static_cast<std::ptrdiff_t>(s.frame_starts[1]));
  feed(r, first, 1 << 20);
  feed(r, b, 1 << 20);
  EXPECT_TRUE(r.ready());
  EXPECT_EQ(r.payload_left(), 0u);
  EXPECT_FALSE(r.complete());
  EXPECT_EQ(r.want().size(), 1u);
}
