// The UCX context: one per agent. It fixes which UCX transports may carry pdkv's data and enables
// the two features the data path uses: RMA (get/put on registered memory) and WAKEUP (every worker
// gets a pollable event file descriptor).
//
// Transports are pinned by pdkv, never taken from the user's environment: UCX_TLS is overridden
// with ucp_config_modify after ucp_config_read has read the environment, because
// which transports are allowed decides whether a dead peer is ever reported (see TransportMode).
// Other UCX_* variables (device lists, thresholds, logging) are still honoured: they tune
// performance or diagnostics, not correctness. Names are those of Debian's UCX 1.13.1
// (`ucx_info -d`): posix, sysv, cma, tcp, self.
#pragma once

#include <cstdint>
#include <string>

#include <ucp/api/ucp.h>

namespace pdkv::exec {

enum class TransportMode : uint8_t {
  // posix,sysv,cma,self: shared memory and cross-memory attach on one host (~10-12 GB/s here).
  // Use with ErrorMode::None: UCX 1.13.1 cannot do peer error handling over these, so liveness
  // must come from pdkv's control channel.
  Shm = 0,
  // tcp,self: works across hosts and with ErrorMode::Peer (a dead peer fails the endpoint's
  // operations). A GET over tcp is emulated: the TARGET's worker must progress for it to finish.
  Tcp = 1,
  // posix,sysv,cma,tcp,self: UCX picks per peer (shared memory on the same host when the
  // endpoint's error mode allows it, tcp otherwise).
  Auto = 2,
};

const char* transport_mode_name(TransportMode mode) noexcept;

// The UCX_TLS value pdkv sets for a mode.
const char* transport_list(TransportMode mode) noexcept;

// Bytes every UCX request reserves for pdkv's completion record (endpoint.cpp). Internal.
inline constexpr size_t kUcxRequestReserve = 2 * sizeof(void*);

class UcxContext {
 public:
  // ucp_init with RMA | WAKEUP and the mode's transports. UCX failures: Error(Transport, cause Ucx).
  explicit UcxContext(TransportMode mode);
  ~UcxContext();
  UcxContext(const UcxContext&) = delete;
  UcxContext& operator=(const UcxContext&) = delete;

  TransportMode mode() const noexcept { return mode_; }
  ucp_context_h handle() const noexcept { return context_; }

 private:
  TransportMode mode_;
  ucp_context_h context_ = nullptr;
};

}  // namespace pdkv::exec
