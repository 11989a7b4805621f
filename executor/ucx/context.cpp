#include "ucx/context.hpp"

#include "ucx/status.hpp"

namespace pdkv::exec {

const char* transport_mode_name(TransportMode mode) noexcept {
  switch (mode) {
    case TransportMode::Shm: return "shm";
    case TransportMode::Tcp: return "tcp";
    case TransportMode::Auto: return "auto";
  }
  return "unknown";
}

const char* transport_list(TransportMode mode) noexcept {
  switch (mode) {
    case TransportMode::Shm: return "posix,sysv,cma,self";
    case TransportMode::Tcp: return "tcp,self";
    case TransportMode::Auto: return "posix,sysv,cma,tcp,self";
  }
  return "self";
}

UcxContext::UcxContext(TransportMode mode) : mode_(mode) {
  ucp_config_t* config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) throw_ucx("ucp_config_read", st);
  // Pin the transports after the environment was read: UCX_TLS from the environment must not
  // decide whether dead peers are detected.
  st = ucp_config_modify(config, "TLS", transport_list(mode));
  if (st != UCS_OK) {
    ucp_config_release(config);
    throw_ucx(std::string("ucp_config_modify TLS=") + transport_list(mode), st);
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_REQUEST_SIZE |
                      UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
  params.request_size = kUcxRequestReserve;
  params.mt_workers_shared = 0;
  st = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  if (st != UCS_OK) {
    throw_ucx(std::string("ucp_init (transport ") + transport_mode_name(mode) + ", UCX_TLS=" +
                  transport_list(mode) + ")",
              st);
  }
}

UcxContext::~UcxContext() {
  if (context_ != nullptr) ucp_cleanup(context_);
}

}  // namespace pdkv::exec
