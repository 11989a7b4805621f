#include "pdkv/core/tp_topology.hpp"

#include <cstdint>
#include <string>

#include "pdkv/core/error.hpp"

namespace pdkv::core {

int32_t tp_ratio(uint32_t local_tp, uint32_t remote_tp) {
  if (local_tp == 0 || remote_tp == 0) {
    fail(Status::InvalidArgument, "tp_size must be >= 1, got local tp_size " +
                                      std::to_string(local_tp) + " and remote tp_size " +
                                      std::to_string(remote_tp));
  }
  const uint32_t big = local_tp >= remote_tp ? local_tp : remote_tp;
  const uint32_t small = local_tp >= remote_tp ? remote_tp : local_tp;
  if (big % small != 0) {
    fail(Status::TpNotDivisible,
         "local tp_size " + std::to_string(local_tp) + " and remote tp_size " +
             std::to_string(remote_tp) +
             " do not divide each other; choose TP sizes where one is a multiple of the other");
  }
  // Ratios come from uint32 sizes; anything above INT32_MAX cannot be represented with a sign.
  if (big / small > static_cast<uint32_t>(INT32_MAX)) {
    fail(Status::InvalidArgument, "tp ratio " + std::to_string(big / small) +
                                      " (local tp_size " + std::to_string(local_tp) +
                                      ", remote tp_size " + std::to_string(remote_tp) +
                                      ") does not fit in int32");
  }
  const auto ratio = static_cast<int32_t>(big / small);
  return local_tp >= remote_tp ? ratio : -ratio;
}

std::vector<uint32_t> handshake_target_ranks(uint32_t local_tp, uint32_t local_rank,
                                             uint32_t remote_tp) {
  const int32_t r = tp_ratio(local_tp, remote_tp);
  if (local_rank >= local_tp) {
    fail(Status::InvalidArgument, "local rank " + std::to_string(local_rank) +
                                      " is out of range for local tp_size " +
                                      std::to_string(local_tp) + " (ranks are 0.." +
                                      std::to_string(local_tp - 1) + ")");
  }
  if (r > 0) return {local_rank / static_cast<uint32_t>(r)};
  const auto a = static_cast<uint32_t>(-r);
  std::vector<uint32_t> out;
  out.reserve(a);
  for (uint32_t i = 0; i < a; ++i) out.push_back(local_rank * a + i);
  return out;
}

}  // namespace pdkv::core
