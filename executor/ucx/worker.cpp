#include "ucx/worker.hpp"

#include <cstring>

#include "ucx/status.hpp"

namespace pdkv::exec {

UcxWorker::UcxWorker(UcxContext& context) : context_(&context) {
  ucp_worker_params_t params{};
  params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  params.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  ucs_status_t st = ucp_worker_create(context.handle(), &params, &worker_);
  if (st != UCS_OK) throw_ucx("ucp_worker_create", st);
  st = ucp_worker_get_efd(worker_, &event_fd_);
  if (st != UCS_OK) {
    ucp_worker_destroy(worker_);
    worker_ = nullptr;
    throw_ucx("ucp_worker_get_efd", st);
  }
}

UcxWorker::~UcxWorker() {
  if (worker_ != nullptr) ucp_worker_destroy(worker_);
}

std::vector<uint8_t> UcxWorker::address() const {
  ucp_address_t* addr = nullptr;
  size_t len = 0;
  ucs_status_t st = ucp_worker_get_address(worker_, &addr, &len);
  if (st != UCS_OK) throw_ucx("ucp_worker_get_address", st);
  std::vector<uint8_t> out(len);
  std::memcpy(out.data(), addr, len);
  ucp_worker_release_address(worker_, addr);
  return out;
}

unsigned UcxWorker::progress() { return ucp_worker_progress(worker_); }

bool UcxWorker::arm() {
  ucs_status_t st = ucp_worker_arm(worker_);
  if (st == UCS_OK) return true;
  if (st == UCS_ERR_BUSY) return false;
  throw_ucx("ucp_worker_arm", st);
}

}  // namespace pdkv::exec
