// Fuzzes the engine-metadata decoder with hostile bytes (they come from the network).
// Input: one control byte, then the message. Control bit 0 set: the harness rewrites the header's
// payload length and CRC32C first, so mutations reach the field parser instead of dying at the
// checksum; clear: the bytes are decoded as received (exercises header/length/checksum checks).
// Oracles: decode either succeeds or throws pdkv::core::Error with Parse / Checksum / OutOfBounds
// (anything else, including std::bad_alloc, is a bug); a successful decode re-encodes without
// error to bytes that decode to the same value (and, for a message of a minor this pdkv knows,
// to the exact input bytes but for a minor label that may drop to the lowest one describing the
// content); validate_pair never throws on decoded metadata. ASan/UBSan catch the rest.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "pdkv/core/engine_metadata.hpp"
#include "pdkv/core/handshake.hpp"

using namespace pdkv::core;

namespace {

[[noreturn]] void bug(const char* what, const char* detail = "") {
  std::fprintf(stderr, "metadata_fuzz: %s %s\n", what, detail);
  std::abort();
}

void reseal(std::vector<uint8_t>& b) {
  if (b.size() < kMetadataHeaderBytes) return;
  const auto len = static_cast<uint32_t>(b.size() - kMetadataHeaderBytes);
  const uint32_t crc = crc32c(std::span<const uint8_t>(b).subspan(kMetadataHeaderBytes));
  for (int i = 0; i < 4; ++i) {
    b[8 + i] = static_cast<uint8_t>(len >> (8 * i));
    b[12 + i] = static_cast<uint8_t>(crc >> (8 * i));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::vector<uint8_t> msg(data + 1, data + size);
  if (data[0] & 1) reseal(msg);

  EngineMetadata m;
  try {
    m = decode(msg);
  } catch (const Error& e) {
    if (e.status() != Status::Parse && e.status() != Status::Checksum &&
        e.status() != Status::OutOfBounds) {
      bug("decode threw an unexpected status", e.what());
    }
    return 0;
  } catch (const std::exception& e) {
    bug("decode threw a non-pdkv exception", e.what());
  }

  std::vector<uint8_t> again;
  try {
    again = encode(m);
  } catch (const std::exception& e) {
    bug("encode rejected decoded metadata", e.what());
  }
  if (!(decode(again) == m)) bug("decode(encode(m)) != m");
  // Canonical up to the minor label: the writer labels an encoding with the lowest minor that
  // describes it (engine_metadata.hpp), so a 1.1 label on content 1.0 describes re-encodes as
  // 1.0; every other byte (the payload and its checksum) must come back identical.
  const uint16_t minor = static_cast<uint16_t>(msg[6] | msg[7] << 8);
  const uint16_t again_minor = static_cast<uint16_t>(again[6] | again[7] << 8);
  auto without_minor = [](std::vector<uint8_t> b) {
    b[6] = b[7] = 0;
    return b;
  };
  if (minor <= kMetadataMinorVersion && (again_minor > minor || without_minor(again) != without_minor(msg))) {
    bug("encoding is not canonical");
  }

  try {
    (void)validate_pair(m, m);
    EngineMetadata other = m;
    other.engine_id += "-peer";
    if (other.engine_id.size() <= kMaxEngineIdBytes) (void)validate_pair(m, other);
  } catch (const std::exception& e) {
    bug("validate_pair threw on valid metadata", e.what());
  }
  return 0;
}
