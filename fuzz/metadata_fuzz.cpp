// Fuzzes the engine-metadata decoder with hostile bytes (they come from the network).
// Input: one control byte, then the message. Control bit 0 set: the harness rewrites the header's
// payload length and CRC32C first, so mutations reach the field parser instead of dying at the
// checksum; clear: the bytes are decoded as received (exercises header/length/checksum checks).
// Oracles: decode either succeeds or throws pdkv::core::Error with Parse / Checksum / OutOfBounds
// (anything else, including std::bad_alloc, is a bug); a successful decode re-encodes without
// error to bytes that decode to the same value (and, for a current-minor message, to the exact
// input bytes); validate_pair never throws on decoded metadata. ASan/UBSan catch the rest.
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
  const uint16_t minor = static_cast<uint16_t>(msg[6] | msg[7] << 8);
  if (minor <= kMetadataMinorVersion && again != msg) bug("encoding is not canonical");

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
