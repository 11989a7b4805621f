// A UCX worker: the progress engine every endpoint, GET and PUT of an agent runs on.
//
// Threading: created with UCS_THREAD_MODE_SERIALIZED. The caller guarantees that at most one
// thread at a time calls into this worker or anything created from it (endpoints, rkeys, posts,
// progress); which thread may change from call to call (e.g. a progress thread and a poster
// sharing one mutex). SERIALIZED rather than SINGLE because the agent's progress thread and its
// callers are different threads; UCX takes no locks in either mode.
#pragma once

#include <cstdint>
#include <vector>

#include <ucp/api/ucp.h>

#include "ucx/context.hpp"

namespace pdkv::exec {

class UcxWorker {
 public:
  // The context must outlive the worker. UCX failures: Error(Transport, cause Ucx).
  explicit UcxWorker(UcxContext& context);
  ~UcxWorker();
  UcxWorker(const UcxWorker&) = delete;
  UcxWorker& operator=(const UcxWorker&) = delete;

  // The worker's packed address, for the peer's UcxEndpoint::create (sent over the control channel).
  std::vector<uint8_t> address() const;

  // One ucp_worker_progress: runs completion callbacks of finished operations on this thread.
  // Returns the number of events processed (0: nothing happened).
  unsigned progress();

  // The worker's event fd (ucp_worker_get_efd): becomes readable when there may be work after a
  // successful arm(). Owned by the worker; do not close it.
  int event_fd() const noexcept { return event_fd_; }

  // ucp_worker_arm: true when armed (safe to sleep on event_fd()); false when the worker has
  // pending events (UCS_ERR_BUSY): call progress() until it returns 0, then arm again.
  // Other failures: Error(Transport, cause Ucx).
  bool arm();

  UcxContext& context() const noexcept { return *context_; }
  ucp_worker_h handle() const noexcept { return worker_; }

 private:
  UcxContext* context_;
  ucp_worker_h worker_ = nullptr;
  int event_fd_ = -1;
};

}  // namespace pdkv::exec
