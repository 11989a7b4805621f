// The tcp data connection's frame codec and incremental parser (executor/tcpdp/): every malformed
// header or descriptor is Protocol naming what is wrong, a frame may arrive in any chunking, and
// no payload larger than a batch is ever announced.
#include <gtest/gtest.h>

#include <cstring>

#include "pdkv/core/error.hpp"
#include "tcpdp/data_frame.hpp"

using namespace pdkv;
using namespace pdkv::exec::tcpdp;

namespace {

// Feeds `bytes` into a reader `chunk` bytes at a time; payload bytes are consumed as they come.
// Returns the headers of the frames completed.
std::vector<Header> feed(FrameReader& r, const std::vector<uint8_t>& bytes, size_t chunk) {
  std::vector<Header> out;
  size_t at = 0;
  while (at < bytes.size()) {
    if (!r.ready()) {
      auto w = r.want();
      const size_t n = std::min({w.size(), chunk, bytes.size() - at});
      std::memcpy(w.data(), bytes.data() + at, n);
      r.received(n);
      at += n;
    } else if (!r.complete()) {
      const uint64_t n = std::min<uint64_t>({r.payload_left(), chunk, bytes.size() - at});
      r.payload_received(n);
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
