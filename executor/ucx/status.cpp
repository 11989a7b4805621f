#include "ucx/status.hpp"

#include "pdkv/core/error.hpp"

namespace pdkv::exec {

std::string ucx_message(const std::string& what, ucs_status_t status) {
  return what + ": " + ucs_status_string(status) + " (UCX status " + std::to_string(status) + ")";
}

void throw_ucx(const std::string& what, ucs_status_t status) {
  throw core::Error(core::Status::Transport, ucx_message(what, status), core::CauseDomain::Ucx,
                    static_cast<int64_t>(status));
}

}  // namespace pdkv::exec
