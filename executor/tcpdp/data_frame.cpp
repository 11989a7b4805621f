#include "tcpdp/data_frame.hpp"

#include <algorithm>
#include <cstring>

#include "pdkv/core/error.hpp"
#include "tcpdp/data_seal.hpp"

namespace pdkv::exec::tcpdp {

using core::Status;

namespace {

void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

[[noreturn]] void bad(const std::string& what) { core::fail(Status::Protocol, "data frame: " + what); }

bool has_pieces_payload(const Header& h) {
  return h.type == FrameType::Write || (h.type == FrameType::ReadData && h.status == 0);
}

}  // namespace

const char* frame_type_name(FrameType t) noexcept {
  switch (t) {
    case FrameType::ReadRequest: return "ReadRequest";
    case FrameType::ReadData: return "ReadData";
    case FrameType::Write: return "Write";
    case FrameType::WriteAck: return "WriteAck";
  }
  return "unknown";
}

std::vector<uint8_t> encode(const Header& h, std::span<const Piece> pieces) {
  std::vector<uint8_t> out(kHeaderBytes + pieces.size() * kPieceBytes, 0);
  uint8_t* p = out.data();
  put_u32(p, kMagic);
  p[4] = kVersion;
  p[5] = static_cast<uint8_t>(h.type);
  put_u64(p + 8, h.batch);
  put_u32(p + 16, static_cast<uint32_t>(pieces.size()));
  put_u32(p + 20, h.status);
  p += kHeaderBytes;
  for (const Piece& x : pieces) {
    put_u32(p, x.region);
    put_u64(p + 8, x.offset);
    put_u64(p + 16, x.length);
    p += kPieceBytes;
  }
  return out;
}

Header decode_header(std::span<const uint8_t, kHeaderBytes> b) {
  const uint8_t* p = b.data();
  if (get_u32(p) != kMagic) bad("bad magic " + std::to_string(get_u32(p)));
  if (p[4] != kVersion) {
    bad("version " + std::to_string(p[4]) + " is not supported (this side speaks " + std::to_string(kVersion) + ")");
  }
  if (p[5] < 1 || p[5] > 4) bad("type " + std::to_string(p[5]) + " is not a data frame type");
  Header h;
  h.type = static_cast<FrameType>(p[5]);
  if (p[6] != 0 || p[7] != 0 || get_u64(p + 24) != 0) bad("reserved header bytes are not zero");
  h.batch = get_u64(p + 8);
  h.count = get_u32(p + 16);
  h.status = get_u32(p + 20);
  if (h.count > kMaxPieces) {
    bad(std::string(frame_type_name(h.type)) + " lists " + std::to_string(h.count) + " pieces (at most " +
        std::to_string(kMaxPieces) + ")");
  }
  const bool may_refuse = h.type == FrameType::ReadData || h.type == FrameType::WriteAck;
  if (h.status != 0 && (!may_refuse || (h.status != static_cast<uint32_t>(Refusal::Range) &&
                                        h.status != static_cast<uint32_t>(Refusal::Device)))) {
    bad(std::string(frame_type_name(h.type)) + " has status " + std::to_string(h.status));
  }
  if (h.type == FrameType::WriteAck && h.count != 0) bad("WriteAck lists " + std::to_string(h.count) + " pieces");
  if (h.type == FrameType::ReadData && h.status != 0 && h.count != 0) {
    bad("a refused ReadData lists " + std::to_string(h.count) + " pieces");
  }
  if ((h.type == FrameType::ReadRequest || h.type == FrameType::Write) && h.count == 0) {
    bad(std::string(frame_type_name(h.type)) + " lists no pieces");
  }
  return h;
}

Piece decode_piece(std::span<const uint8_t, kPieceBytes> b, uint32_t index) {
  const uint8_t* p = b.data();
  Piece x;
  x.region = get_u32(p);
  if (get_u32(p + 4) != 0) bad("piece " + std::to_string(index) + ": reserved bytes are not zero");
  x.offset = get_u64(p + 8);
  x.length = get_u64(p + 16);
  if (x.length == 0 || x.length > kMaxBatchBytes) {
    bad("piece " + std::to_string(index) + " is " + std::to_string(x.length) + " bytes (1.." +
        std::to_string(kMaxBatchBytes) + ")");
  }
  return x;
}

uint64_t payload_bytes(const Header& h, std::span<const Piece> pieces) {
  if (!has_pieces_payload(h)) return 0;
  uint64_t total = 0;
  for (const Piece& x : pieces) total += x.length;  // <= kMaxPieces * kMaxBatchBytes: no overflow
  return total;
}

FrameReader::FrameReader() { pbuf_.reserve(kMaxPieces * kPieceBytes + kTagBytes); }
FrameReader::FrameReader(const RecordKeyBytes& key) : FrameReader() {
  cipher_ = std::make_unique<RecordCipher>(key, RecordCipher::Mode::Open);
}
FrameReader::FrameReader(FrameReader&&) noexcept = default;
FrameReader& FrameReader::operator=(FrameReader&&) noexcept = default;
FrameReader::~FrameReader() = default;

std::span<uint8_t> FrameReader::want() {
  switch (stage_) {
    case Stage::Header: return std::span<uint8_t>(hbuf_).first(kHeaderBytes + (sealed() ? kTagBytes : 0)).subspan(have_);
    case Stage::Pieces: return std::span<uint8_t>(pbuf_).subspan(have_);
    case Stage::Tag: return std::span<uint8_t>(tag_).subspan(have_);
    default: return {};
  }
}

void FrameReader::received(size_t n) {
  if (n > want().size()) core::fail(Status::Internal, "FrameReader::received beyond want()");
  have_ += n;
  if (!want().empty()) return;
  switch (stage_) {
    case Stage::Header: header_done(); break;
    case Stage::Pieces: pieces_done(); break;
    case Stage::Tag:
      have_ = 0;
      cipher_->finish(std::span<uint8_t, kTagBytes>(tag_));  // Protocol on a mismatch
      if (payload_left_ == 0) stage_ = Stage::Done;
      else segment_start();
      break;
    default: break;
  }
}

void FrameReader::header_done() {
  if (sealed()) cipher_->open(RecordKind::Header, std::span<uint8_t>(hbuf_));  // authenticated first
  header_ = decode_header(std::span<const uint8_t, kHeaderBytes>(hbuf_.data(), kHeaderBytes));
  pieces_.clear();
  have_ = 0;
  if (header_.count == 0) {
    pieces_done();
    return;
  }
  pbuf_.assign(static_cast<size_t>(header_.count) * kPieceBytes + (sealed() ? kTagBytes : 0), 0);
  stage_ = Stage::Pieces;
}

void FrameReader::pieces_done() {
  if (sealed() && header_.count > 0) cipher_->open(RecordKind::Pieces, std::span<uint8_t>(pbuf_));
  pieces_.reserve(header_.count);
  for (uint32_t i = 0; i < header_.count; ++i) {
    pieces_.push_back(decode_piece(std::span<const uint8_t, kPieceBytes>(pbuf_.data() + i * kPieceBytes, kPieceBytes), i));
  }
  payload_left_ = payload_bytes(header_, pieces_);
  if (payload_left_ > kMaxBatchBytes) {
    bad(std::string(frame_type_name(header_.type)) + " carries " + std::to_string(payload_left_) +
        " bytes (at most " + std::to_string(kMaxBatchBytes) + " per batch)");
  }
  have_ = 0;
  if (payload_left_ == 0) {
    stage_ = Stage::Done;
  } else if (sealed()) {
    segment_start();
  } else {
    stage_ = Stage::Payload;
  }
}

void FrameReader::segment_start() {
  segment_left_ = std::min<uint64_t>(payload_left_, kSegmentBytes);
  cipher_->begin(RecordKind::Payload);
  stage_ = Stage::Payload;
}

void FrameReader::payload_received(std::span<uint8_t> bytes) {
  if (stage_ != Stage::Payload || bytes.size() > payload_chunk()) {
    core::fail(Status::Internal, "FrameReader::payload_received beyond the payload");
  }
  const uint64_t n = bytes.size();
  payload_left_ -= n;
  if (!sealed()) {
    if (payload_left_ == 0) stage_ = Stage::Done;
    return;
  }
  cipher_->update(bytes.data(), bytes.data(), bytes.size());
  segment_left_ -= n;
  if (segment_left_ == 0) {
    stage_ = Stage::Tag;
    have_ = 0;
  }
}

void FrameReader::next() {
  if (sealed() && cipher_->in_record()) core::fail(Status::Internal, "FrameReader::next inside a sealed record");
  stage_ = Stage::Header;
  have_ = 0;
  payload_left_ = 0;
  segment_left_ = 0;
}

std::string refusal_reason(uint32_t status, const std::string& range_text) {
  switch (static_cast<Refusal>(status)) {
    case Refusal::Range: return range_text;
    case Refusal::Device: return "copying the bytes out of or into its CUDA device memory failed";
    case Refusal::None: break;
  }
  return "refusal code " + std::to_string(status) + ", which this build does not know";
}

}  // namespace pdkv::exec::tcpdp
