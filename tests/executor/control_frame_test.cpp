// Wire encoding and frames of the control channel: round trips and every malformed input.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "control/frame.hpp"
#include "control/wire.hpp"
#include "pdkv/core/engine_metadata.hpp"
#include "pdkv/core/error.hpp"

using namespace pdkv::exec;
using pdkv::core::Error;
using pdkv::core::Status;

namespace {

// Runs f, expects Error with `status` whose message contains every needle.
template <class F>
void expect_error(F&& f, Status status, std::vector<std::string> needles) {
  try {
    f();
    FAIL() << "no error thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), status) << e.what();
    for (const std::string& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << "missing \"" << n << "\" in: " << e.what();
  }
}

std::vector<uint8_t> payload_of(size_t n) {
  std::vector<uint8_t> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(i * 7 + 3);
  return p;
}

std::vector<Frame> decode_all(const std::vector<uint8_t>& bytes, size_t chunk) {
  FrameDecoder d;
  std::vector<Frame> out;
  for (size_t at = 0; at < bytes.size(); at += chunk) {
    d.feed(bytes.data() + at, std::min(chunk, bytes.size() - at));
    while (auto f = d.next()) out.push_back(std::move(*f));
  }
  return out;
}

}  // namespace

TEST(ControlWire, RoundTripsLittleEndian) {
  WireWriter w;
  w.u8(0xAB);
  w.u16(0x1234);
  w.u32(0xDEADBEEF);
  w.u64(0x0102030405060708ull);
  w.string("hello", 16, "greeting");
  const std::vector<uint8_t> blob{1, 2, 3};
  w.bytes(blob, 3, "blob");
  const uint8_t fixed[4] = {9, 8, 7, 6};
  w.raw(fixed);
  const std::vector<uint8_t> b = w.take();
  // Little-endian on the wire whatever the host.
  EXPECT_EQ(b[1], 0x34);
  EXPECT_EQ(b[2], 0x12);
  EXPECT_EQ(b[3], 0xEF);
  EXPECT_EQ(b[7], 0x08);
  WireReader r(b, "Test");
  EXPECT_EQ(r.u8("a"), 0xAB);
  EXPECT_EQ(r.u16("b"), 0x1234);
  EXPECT_EQ(r.u32("c"), 0xDEADBEEFu);
  EXPECT_EQ(r.u64("d"), 0x0102030405060708ull);
  EXPECT_EQ(r.string("greeting", 16), "hello");
  EXPECT_EQ(r.bytes("blob", 3), blob);
  uint8_t got[4];
  r.raw(got, "fixed");
  EXPECT_EQ(std::memcmp(got, fixed, 4), 0);
  r.expect_end();
}

TEST(ControlWire, WriterRefusesOverLimitNamingField) {
  WireWriter w;
  expect_error([&] { w.string("toolong", 3, "Hello.engine_id"); }, Status::InvalidArgument,
               {"Hello.engine_id", "7", "3"});
}

TEST(ControlWire, ReaderRefusesTruncationAtEveryOffset) {
  WireWriter w;
  w.u16(1);
  w.u32(2);
  w.u64(3);
  w.string("abcdef", 64, "s");
  const std::vector<uint8_t> full = w.take();
  for (size_t cut = 0; cut < full.size(); ++cut) {
    std::vector<uint8_t> part(full.begin(), full.begin() + static_cast<ptrdiff_t>(cut));
    expect_error(
        [&] {
          WireReader r(part, "Msg");
          r.u16("f16");
          r.u32("f32");
          r.u64("f64");
          r.string("s", 64);
        },
        Status::Protocol, {"Msg:", "truncated"});
  }
}

TEST(ControlWire, ReaderRefusesLengthOverLimitAndTrailingBytes) {
  WireWriter w;
  w.string("abcdef", 64, "s");
  const std::vector<uint8_t> b = w.take();
  expect_error([&] { WireReader(b, "Msg").string("name", 5); }, Status::Protocol, {"Msg", "name", "6", "5"});
  expect_error([&] { WireReader(b, "Msg").bytes("blob", 5); }, Status::Protocol, {"blob", "6", "5"});
  std::vector<uint8_t> extra = b;
  extra.push_back(0);
  expect_error(
      [&] {
        WireReader r(extra, "Msg");
        r.string("s", 64);
        r.expect_end();
      },
      Status::Protocol, {"1 trailing bytes"});
}

TEST(ControlWire, HugeLengthPrefixIsRefusedBeforeAllocating) {
  WireWriter w;
  w.u32(0xFFFFFFFFu);  // claims 4 GiB, carries nothing
  const std::vector<uint8_t> b = w.take();
  expect_error([&] { WireReader(b, "Msg").bytes("blob", SIZE_MAX); }, Status::Protocol, {"blob", "truncated"});
  expect_error([&] { WireReader(b, "Msg").count("items", 100, 1); }, Status::Protocol, {"items", "4294967295", "100"});
  WireWriter c;
  c.u32(50);
  c.u32(0);
  const std::vector<uint8_t> cb = c.take();
  // 50 elements of at least 8 bytes cannot fit in the 4 remaining bytes.
  expect_error([&] { WireReader(cb, "Msg").count("items", 100, 8); }, Status::Protocol, {"items", "50", "400"});
}

TEST(ControlFrame, RoundTripsEveryChunking) {
  std::vector<uint8_t> stream;
  const std::vector<size_t> sizes{0, 1, 15, 16, 17, 1000, 70000};
  for (size_t i = 0; i < sizes.size(); ++i) {
    const auto f = encode_frame(i % 2 ? FrameType::Notify : FrameType::PeerInfo, payload_of(sizes[i]));
    ASSERT_EQ(f.size(), kFrameHeaderBytes + sizes[i]);
    stream.insert(stream.end(), f.begin(), f.end());
  }
  for (size_t chunk : {size_t{1}, size_t{3}, size_t{16}, size_t{17}, size_t{4096}, stream.size()}) {
    const std::vector<Frame> frames = decode_all(stream, chunk);
    ASSERT_EQ(frames.size(), sizes.size()) << "chunk " << chunk;
    for (size_t i = 0; i < sizes.size(); ++i) {
      EXPECT_EQ(frames[i].type, i % 2 ? FrameType::Notify : FrameType::PeerInfo);
      EXPECT_EQ(frames[i].payload, payload_of(sizes[i]));
      EXPECT_EQ(frames[i].version_minor, kFrameVersionMinor);
    }
  }
}

TEST(ControlFrame, HeaderLayoutIsAsDocumented) {
  const std::vector<uint8_t> p{1, 2, 3};
  const auto f = encode_frame(FrameType::Ping, p);
  EXPECT_EQ(std::string(f.begin(), f.begin() + 4), "PDKF");
  EXPECT_EQ(f[4], 1);
  EXPECT_EQ(f[5], 0);
  EXPECT_EQ(f[6], static_cast<uint8_t>(FrameType::Ping));
  EXPECT_EQ(f[7], 0);
  EXPECT_EQ(f[8], 3);
  const uint32_t crc = pdkv::core::crc32c(p);
  EXPECT_EQ(f[12] | f[13] << 8 | f[14] << 16 | static_cast<uint32_t>(f[15]) << 24, crc);
}

TEST(ControlFrame, TruncatedStreamYieldsNothingAtEveryOffset) {
  const auto f = encode_frame(FrameType::Hello, payload_of(40));
  for (size_t cut = 0; cut < f.size(); ++cut) {
    FrameDecoder d;
    d.feed(f.data(), cut);
    EXPECT_FALSE(d.next().has_value()) << cut;
    EXPECT_EQ(d.partial_bytes(), cut);
    EXPECT_EQ(d.at_frame_boundary(), cut == 0);
    d.feed(f.data() + cut, f.size() - cut);  // the rest completes it
    auto got = d.next();
    ASSERT_TRUE(got.has_value()) << cut;
    EXPECT_EQ(got->payload, payload_of(40));
  }
}

TEST(ControlFrame, BadMagicVersionTypeLengthAndCrcAreRefusedNamingTheValue) {
  const auto good = encode_frame(FrameType::Hello, payload_of(8));
  auto with = [&](size_t at, uint8_t v) {
    auto b = good;
    b[at] = v;
    return b;
  };
  auto feed_all = [](const std::vector<uint8_t>& b) {
    FrameDecoder d;
    d.feed(b.data(), b.size());
    (void)d.next();
  };
  expect_error([&] { feed_all(with(0, 'X')); }, Status::Protocol, {"bad magic", "0x464B4458"});
  expect_error([&] { feed_all(with(4, 2)); }, Status::Protocol, {"version 2.0", "major version 1"});
  expect_error([&] { feed_all(with(6, 99)); }, Status::Protocol, {"unknown frame type 99"});
  expect_error([&] { feed_all(with(6, 0)); }, Status::Protocol, {"unknown frame type 0"});
  expect_error([&] { feed_all(with(kFrameHeaderBytes + 3, good[kFrameHeaderBytes + 3] ^ 1)); }, Status::Protocol,
               {"crc32c", "Hello"});
  // A newer minor version is accepted and reported.
  FrameDecoder d;
  const auto minor = with(5, 7);
  d.feed(minor.data(), minor.size());
  EXPECT_EQ(d.next()->version_minor, 7);
}

TEST(ControlFrame, OversizeLengthIsRefusedFromTheHeaderAlone) {
  auto h = encode_frame(FrameType::PeerInfo, {});
  const uint32_t len = kMaxFramePayload + 1;
  for (int i = 0; i < 4; ++i) h[8 + i] = static_cast<uint8_t>(len >> (8 * i));
  FrameDecoder d;
  // Only the 16 header bytes: the decoder refuses before any payload byte arrives.
  expect_error([&] { d.feed(h.data(), kFrameHeaderBytes); }, Status::Protocol,
               {std::to_string(len), std::to_string(kMaxFramePayload)});
  // The decoder stays failed.
  expect_error([&] { d.feed(h.data(), 1); }, Status::Protocol, {std::to_string(len)});
  expect_error([&] { (void)d.next(); }, Status::Protocol, {std::to_string(len)});
}

TEST(ControlFrame, MaximumPayloadIsAccepted) {
  const std::vector<uint8_t> p(kMaxFramePayload, 0x5A);
  const auto f = encode_frame(FrameType::PeerInfo, p);
  const auto frames = decode_all(f, 1 << 16);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].payload.size(), kMaxFramePayload);
  const std::vector<uint8_t> over(kMaxFramePayload + 1);
  expect_error([&] { encode_frame(FrameType::PeerInfo, over); }, Status::InvalidArgument,
               {std::to_string(kMaxFramePayload + 1)});
}

TEST(ControlFrame, FramesBeforeACorruptOneAreStillDelivered) {
  auto a = encode_frame(FrameType::Ping, payload_of(16));
  auto b = encode_frame(FrameType::Pong, payload_of(16));
  b[0] = 0;
  a.insert(a.end(), b.begin(), b.end());
  FrameDecoder d;
  EXPECT_THROW(d.feed(a.data(), a.size()), Error);
  auto first = d.next();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->type, FrameType::Ping);
  EXPECT_THROW((void)d.next(), Error);
}

TEST(ControlFrame, TypeNames) {
  EXPECT_STREQ(frame_type_name(FrameType::PeerInfo), "PeerInfo");
  EXPECT_STREQ(frame_type_name(static_cast<FrameType>(77)), "unknown");
  for (uint16_t t = 1; t <= 15; ++t) EXPECT_TRUE(is_known_frame_type(t));
  EXPECT_FALSE(is_known_frame_type(16));
  EXPECT_STREQ(frame_type_name(FrameType::KeepLeases), "KeepLeases");
  EXPECT_STREQ(frame_type_name(FrameType::LeaseQuery), "LeaseQuery");
  EXPECT_STREQ(frame_type_name(FrameType::LeaseAnswer), "LeaseAnswer");
}
