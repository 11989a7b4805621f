// A UCX endpoint to one peer's worker, its unpacked remote keys, and one-sided GET/PUT.
//
// Threading: everything here runs under the worker's rule (worker.hpp): one thread at a time.
//
// Completion contract for post_get / post_put / post_flush (the hot path: no allocation by pdkv,
// no std::function; the callback is a plain function pointer plus the caller's pointer):
//   PostState::Done      the operation completed inside the call; the callback is NOT called.
//   PostState::Failed    it failed inside the call (status() says why); the callback is NOT called.
//   PostState::InFlight  the callback is called exactly once, later, from UcxWorker::progress()
//                        (or from the progress that drives a close), with UCS_OK or an error
//                        status. Until then UCX may still read/write the local buffer and use
//                        the rkey: keep both alive.
// A force-closed endpoint completes every InFlight operation with an error status (observed on
// 1.13.1: UCS_ERR_CANCELED), so waiting for all callbacks after close() always ends.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include <ucp/api/ucp.h>

#include "ucx/memory.hpp"
#include "ucx/worker.hpp"

namespace pdkv::exec {

enum class ErrorMode : uint8_t {
  // UCP_ERR_HANDLING_MODE_NONE: shared memory and CMA are usable; UCX never reports a dead peer
  // (liveness must come from the control channel's heartbeats).
  None = 0,
  // UCP_ERR_HANDLING_MODE_PEER: a dead peer fails the endpoint (failed() turns true) and its
  // operations. On one host only tcp supports it in UCX 1.13.1.
  Peer = 1,
};

// Called once per InFlight operation: user is the pointer given at post time.
using OpCallback = void (*)(void* user, ucs_status_t status);

enum class PostState : uint8_t { Done = 0, InFlight = 1, Failed = 2 };

struct PostResult {
  PostState state;
  ucs_status_t status;  // UCS_OK unless Failed
};

// An unpacked remote key (ucp_rkey_h), destroyed with the object. It belongs to the endpoint that
// unpacked it: destroy it after every operation using it has completed and before the worker.
class UcxRemoteKey {
 public:
  UcxRemoteKey() = default;
  explicit UcxRemoteKey(ucp_rkey_h rkey) noexcept : rkey_(rkey) {}
  ~UcxRemoteKey();
  UcxRemoteKey(UcxRemoteKey&& other) noexcept;
  UcxRemoteKey& operator=(UcxRemoteKey&& other) noexcept;
  UcxRemoteKey(const UcxRemoteKey&) = delete;
  UcxRemoteKey& operator=(const UcxRemoteKey&) = delete;

  ucp_rkey_h handle() const noexcept { return rkey_; }
  explicit operator bool() const noexcept { return rkey_ != nullptr; }

 private:
  ucp_rkey_h rkey_ = nullptr;
};

class UcxEndpoint {
 public:
  using Clock = std::chrono::steady_clock;

  // Connects to the worker whose packed address is peer_address.
  // PRECONDITION: the peer answered on the control channel just before this call. Debian's UCX
  // 1.13.1 aborts the whole process when ucp_ep_create targets a worker that is already dead.
  // Empty address: InvalidArgument. UCX failures: Error(Transport, cause Ucx).
  // The worker must outlive the endpoint. Pinned in memory (UCX holds its address for the error
  // callback), hence the unique_ptr.
  static std::unique_ptr<UcxEndpoint> create(UcxWorker& worker, std::span<const uint8_t> peer_address,
                                             ErrorMode mode);

  // Force-closes if still open and progresses the worker until the close completes or 2 s pass
  // (then the UCX close request is abandoned rather than hanging the caller). That progress runs
  // the callbacks of any of the worker's operations that complete meanwhile (this endpoint's,
  // cancelled, and other endpoints'): their user pointers must still be valid. The clean order is
  // close(), progress_until_closed(), then destroy.
  ~UcxEndpoint();
  UcxEndpoint(const UcxEndpoint&) = delete;
  UcxEndpoint& operator=(const UcxEndpoint&) = delete;

  // Unpacks a peer's packed rkey (UcxRegistration::packed_rkey on its side). UCX failures:
  // Error(Transport, cause Ucx); empty bytes or a layout that announces more than the bytes hold
  // (packed_rkey_layout_error): InvalidArgument. UCX reads from a zero-padded copy, so a transport's
  // own unpacker reading its fixed-size record past a short entry stays inside pdkv's buffer.
  // SAFETY: beyond that layout this is not a validation step. Observed on Debian's UCX 1.13.1: random bytes, and a
  // shm rkey with one bit flipped, crash the process (SEGV in ucp_ep_rkey_unpack_internal /
  // uct_rkey_release on its own error path); tcp rkeys with flipped bits or truncated are
  // accepted. Unpack only bytes from an authenticated peer (after the key proof), length-checked
  // by the frame layer.
  // Nor does UCX enforce registrations here: a GET through the rkey of a region its owner has
  // since deregistered still reads the memory (cma and tcp use plain addresses; ucx_peer_test).
  // The agent must check every remote range against the peer's advertised, live regions.
  UcxRemoteKey unpack_rkey(std::span<const uint8_t> packed) const;

  // GET: copies length bytes from the peer's remote_addr (inside the range rkey covers) into
  // local. PUT: copies local into the peer's remote_addr. The caller must have bounds-checked the
  // range against the peer's advertised registration. length 0 completes as Done.
  PostResult post_get(void* local, size_t length, uint64_t remote_addr, const UcxRemoteKey& rkey,
                      OpCallback cb, void* user);
  PostResult post_put(const void* local, size_t length, uint64_t remote_addr,
                      const UcxRemoteKey& rkey, OpCallback cb, void* user);

  // Remote completion of every PUT/GET posted before it on this endpoint (ucp_ep_flush_nbx);
  // same contract as the posts.
  PostResult post_flush(OpCallback cb, void* user);

  // True once UCX reported the peer failed (ErrorMode::Peer only); failure_status() says how.
  // After a failure the endpoint accepts no new posts (they return Failed) and must be closed
  // with force=true.
  bool failed() const noexcept { return failure_ != UCS_OK; }
  ucs_status_t failure_status() const noexcept { return failure_; }

  // Starts a nonblocking close (ucp_ep_close_nbx). force=false flushes outstanding operations
  // first; force=true cancels them (each InFlight callback gets an error status). Idempotent:
  // a second call does nothing. Posts after close() return Failed (UCS_ERR_NOT_CONNECTED).
  void close(bool force);
  // True when the close has completed (or close() has not been called: false).
  bool closed() const noexcept { return state_ == State::Closed; }
  // Progresses the worker until the close completes (true) or the deadline passes (false).
  // Calls close(true) first if close() was never called.
  bool progress_until_closed(Clock::time_point deadline);
  // The status the close completed with (UCS_OK when not closed or closed cleanly).
  ucs_status_t close_status() const noexcept { return close_status_; }

  UcxWorker& worker() const noexcept { return *worker_; }
  ucp_ep_h handle() const noexcept { return ep_; }

 private:
  enum class State : uint8_t { Open, Closing, Closed };
  explicit UcxEndpoint(UcxWorker& worker) : worker_(&worker) {}
  static void on_peer_error(void* arg, ucp_ep_h ep, ucs_status_t status);
  static void on_close_done(void* user, ucs_status_t status);

  UcxWorker* worker_;
  ucp_ep_h ep_ = nullptr;
  State state_ = State::Open;
  void* close_request_ = nullptr;
  ucs_status_t failure_ = UCS_OK;
  ucs_status_t close_status_ = UCS_OK;
};

}  // namespace pdkv::exec
