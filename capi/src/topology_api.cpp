// TP topology: the tp_ratio sign convention and handshake targets (core/tp_topology.hpp).
#include "boundary.hpp"
#include <memory>

#include "plan_handles.hpp"
#include "pdkv/core/tp_topology.hpp"

using pdkv::capi::guard;
using pdkv::capi::require_non_null;
namespace core = pdkv::core;

extern "C" {

PDKV_API pdkv_status_t pdkv_tp_ratio(uint32_t local_tp_size, uint32_t remote_tp_size, int32_t* out, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(out, "out");
    *out = core::tp_ratio(local_tp_size, remote_tp_size);
  });
}

PDKV_API pdkv_status_t pdkv_handshake_target_ranks(uint32_t local_tp_size, uint32_t local_tp_rank, uint32_t remote_tp_size,
                                                   pdkv_u32_list_t** out, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(out, "out");
    *out = nullptr;
    auto list = std::make_unique<pdkv_u32_list>();
    list->items = core::handshake_target_ranks(local_tp_size, local_tp_rank, remote_tp_size);
    *out = list.release();
  });
}

}  // extern "C"

