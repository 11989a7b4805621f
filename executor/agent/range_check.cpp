#include "agent/range_check.hpp"

#include <string>

#include "pdkv/core/error.hpp"

namespace pdkv::exec {

namespace {
std::string where(ReadRef read, std::string_view side, uint32_t region) {
  return "read " + std::to_string(read.index) + " of P rank " + std::to_string(read.p_rank) + ": " +
         std::string(side) + " region " + std::to_string(region);
}
}  // namespace

uint64_t checked_address(ReadRef read, std::string_view side, uint32_t region,
                         std::span<const RegisteredRange> regions, uint64_t offset,
                         uint64_t length) {
  using core::Status;
  if (region >= regions.size()) {
    core::fail(Status::OutOfBounds, where(read, side, region) + " does not exist (" +
                                        std::to_string(regions.size()) + " regions)");
  }
  const RegisteredRange& r = regions[region];
  if (!r.present) {
    core::fail(Status::OutOfBounds, where(read, side, region) + " is not registered");
  }
  // offset + length <= r.length without overflow.
  if (length > r.length || offset > r.length - length) {
    core::fail(Status::OutOfBounds, where(read, side, region) + " range [" +
                                        std::to_string(offset) + ", +" + std::to_string(length) +
                                        ") leaves the registered " + std::to_string(r.length) +
                                        " bytes");
  }
  if (r.base > UINT64_MAX - offset) {
    core::fail(Status::OutOfBounds, where(read, side, region) + " address overflows");
  }
  return r.base + offset;
}

}  // namespace pdkv::exec
