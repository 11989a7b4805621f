// C glue of pdkv/agent.h over executor/agent. Handles hold shared_ptrs to the executor's records
// (and weak_ptrs to the agent's core), which is what lets them be freed in any order.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "agent/agent.hpp"
#include "cma/shared_memory.hpp"
#include "boundary.hpp"
#include "struct_sizes.hpp"
#include "plan_handles.hpp"
#include "structs.hpp"
#include "struct_sizes.hpp"

using pdkv::capi::guard;
using pdkv::capi::require_non_null;
using pdkv::capi::write_struct_prefix;
namespace core = pdkv::core;
namespace exec = pdkv::exec;
using core::Status;

struct pdkv_agent {
  std::unique_ptr<exec::Agent> agent;
  std::string engine_id;
  std::string listen;
};

struct pdkv_memory {
  std::shared_ptr<exec::Registration> reg;
  std::weak_ptr<exec::AgentCore> core;
};

struct pdkv_shared_memory {
  std::unique_ptr<exec::cma::SharedMemory> memory;
};

struct pdkv_peer {
  std::shared_ptr<exec::PeerRecord> rec;
  std::weak_ptr<exec::AgentCore> core;
};

struct pdkv_transfer {
  explicit pdkv_transfer(exec::TransferHandle h) : handle(std::move(h)) {}
  exec::TransferHandle handle;
  // Filled once the transfer is final (failed reads are read-only from then on).
  mutable std::mutex m;
  mutable std::vector<pdkv_failed_read_t> failed;
  mutable bool failed_filled = false;
};

struct pdkv_notification_list {
  std::vector<exec::Notification> notes;  // owns the strings items point to
  std::vector<pdkv_notification_t> items;
};

namespace {

exec::TransportMode transport_from_c(int32_t t) {
  switch (t) {
    case PDKV_TRANSPORT_AUTO: return exec::TransportMode::Auto;
    case PDKV_TRANSPORT_SHM: return exec::TransportMode::Shm;
    case PDKV_TRANSPORT_TCP: return exec::TransportMode::Tcp;
    default:
      core::fail(Status::InvalidArgument, "transport " + std::to_string(t) +
                                              " is not a pdkv_transport_t (AUTO 0, SHM 1, TCP 2)");
  }
}

int32_t transport_to_c(exec::TransportMode t) {
  switch (t) {
    case exec::TransportMode::Shm: return PDKV_TRANSPORT_SHM;
    case exec::TransportMode::Tcp: return PDKV_TRANSPORT_TCP;
    default: return PDKV_TRANSPORT_AUTO;
  }
}

std::string c_text(const char* s, const char* field) {
  if (s == nullptr) core::fail(Status::NullPointer, std::string(field) + " is NULL");
  return std::string(s);
}

std::chrono::milliseconds ms(uint64_t v, const char* field) {
  if (v == 0) core::fail(Status::InvalidArgument, std::string(field) + " must be > 0, got 0");
  if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max() / 1000000)) {
    core::fail(Status::InvalidArgument, std::string(field) + " " + std::to_string(v) + " is too large");
  }
  return std::chrono::milliseconds(static_cast<int64_t>(v));
}

static_assert(PDKV_TRANSFER_IN_FLIGHT == static_cast<int>(exec::TransferState::InFlight) &&
              PDKV_TRANSFER_DONE == static_cast<int>(exec::TransferState::Done) &&
              PDKV_TRANSFER_FAILED == static_cast<int>(exec::TransferState::Failed));
static_assert(PDKV_NOTIFY_READ_DONE == static_cast<int>(exec::NotificationKind::ReadDone) &&
              PDKV_NOTIFY_WRITE_DONE == static_cast<int>(exec::NotificationKind::WriteDone) &&
              PDKV_NOTIFY_REQUEST_COMPLETE == static_cast<int>(exec::NotificationKind::RequestComplete) &&
              PDKV_NOTIFY_LEASE_EXPIRED == static_cast<int>(exec::NotificationKind::LeaseExpired) &&
              PDKV_NOTIFY_PEER_CONNECTED == static_cast<int>(exec::NotificationKind::PeerConnected) &&
              PDKV_NOTIFY_PEER_LOST == static_cast<int>(exec::NotificationKind::PeerLost));

}  // namespace

extern "C" {

PDKV_API pdkv_status_t pdkv_agent_new(const pdkv_agent_options_t* options, pdkv_agent_t** out,
                                      pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(options, "options");
    require_non_null(out, "out");
    *out = nullptr;
    const auto o = pdkv::capi::read_options(*options, pdkv::capi::kAgentOptionsMinSize, "pdkv_agent_options_t",
                                            PDKV_AGENT_FIELD_LISTEN_ADDRESS | PDKV_AGENT_FIELD_TRANSPORT |
                                             PDKV_AGENT_FIELD_PROGRESS_MODE | PDKV_AGENT_FIELD_DEFAULT_TIMEOUT |
                                             PDKV_AGENT_FIELD_PRESHARED_KEY | PDKV_AGENT_FIELD_HEARTBEAT |
                                             PDKV_AGENT_FIELD_MAX_OUTSTANDING | PDKV_AGENT_FIELD_COPY_THREADS |
                                             PDKV_AGENT_FIELD_SEAL_DATA | PDKV_AGENT_FIELD_MIN_PEER_PROTOCOL_MINOR);
    require_non_null(o.metadata, "options->metadata");
    exec::AgentOptions a;
    a.metadata = o.metadata->md;
    if (o.field_mask & PDKV_AGENT_FIELD_LISTEN_ADDRESS) {
      a.listen = exec::parse_host_port(c_text(o.listen_address, "options->listen_address"));
    }
    if (o.field_mask & PDKV_AGENT_FIELD_TRANSPORT) a.transport = transport_from_c(o.transport);
    if (o.field_mask & PDKV_AGENT_FIELD_PROGRESS_MODE) {
      if (o.progress_mode != PDKV_PROGRESS_THREAD && o.progress_mode != PDKV_PROGRESS_CALLER) {
        core::fail(Status::InvalidArgument, "progress_mode " + std::to_string(o.progress_mode) +
                                                " is not a pdkv_progress_mode_t (THREAD 0, CALLER 1)");
      }
      a.progress = o.progress_mode == PDKV_PROGRESS_CALLER ? exec::ProgressMode::Caller : exec::ProgressMode::Thread;
    }
    if (o.field_mask & PDKV_AGENT_FIELD_DEFAULT_TIMEOUT) a.default_timeout = ms(o.default_timeout_ms, "default_timeout_ms");
    if (o.field_mask & PDKV_AGENT_FIELD_PRESHARED_KEY) {
      if (o.preshared_key == nullptr && o.preshared_key_len != 0) {
        core::fail(Status::NullPointer, "preshared_key is NULL with preshared_key_len " +
                                            std::to_string(o.preshared_key_len));
      }
      if (o.preshared_key_len != 0) {
        a.key.emplace(std::span<const uint8_t>(o.preshared_key, o.preshared_key_len));
      }
    }
    if (o.field_mask & PDKV_AGENT_FIELD_HEARTBEAT) {
      a.heartbeat_interval = ms(o.heartbeat_interval_ms, "heartbeat_interval_ms");
      a.heartbeat_timeout = ms(o.heartbeat_timeout_ms, "heartbeat_timeout_ms");
      if (a.heartbeat_timeout <= a.heartbeat_interval) {
        core::fail(Status::InvalidArgument, "heartbeat_timeout_ms " + std::to_string(o.heartbeat_timeout_ms) +
                                                " must exceed heartbeat_interval_ms " +
                                                std::to_string(o.heartbeat_interval_ms));
      }
    }
    if (o.field_mask & PDKV_AGENT_FIELD_MAX_OUTSTANDING) {
      if (o.max_outstanding == 0) core::fail(Status::InvalidArgument, "max_outstanding must be >= 1, got 0");
      a.max_outstanding = o.max_outstanding;
    }
    if (o.field_mask & PDKV_AGENT_FIELD_COPY_THREADS) {
      // In the 2.0 struct's tail padding (struct_sizes.hpp): inside every accepted struct_size.
      static_assert(offsetof(pdkv_agent_options_t, copy_threads) + sizeof(uint32_t) <= pdkv::capi::kAgentOptionsMinSize);
      if (o.copy_threads < 1 || o.copy_threads > 16) {
        core::fail(Status::InvalidArgument,
                   "copy_threads must be 1 to 16, got " + std::to_string(o.copy_threads));
      }
      a.cma_copy_threads = o.copy_threads;
    }
    if (o.field_mask & PDKV_AGENT_FIELD_SEAL_DATA) {
      PDKV_REQUIRE_APPENDED_FIELD(o, pdkv_agent_options_t, seal_data);  // at the 2.0 size, past a 2.0 struct
      if (o.seal_data > 1) {
        core::fail(Status::InvalidArgument, "seal_data " + std::to_string(o.seal_data) + " is not 0 (clear) or 1 (sealed)");
      }
      if (o.seal_data == 1 && !a.key) {
        core::fail(Status::InvalidArgument, "seal_data 1 needs a preshared_key (the data connection is sealed with keys "
                                            "derived from it); set the key, or leave seal_data unset");
      }
      a.seal_data = o.seal_data == 1;
    }
    if (o.field_mask & PDKV_AGENT_FIELD_MIN_PEER_PROTOCOL_MINOR) {
      static_assert(PDKV_CONTROL_PROTOCOL_MAJOR == exec::kControlProtoMajor &&
                    PDKV_CONTROL_PROTOCOL_MINOR == exec::kControlProtoMinor);
      PDKV_REQUIRE_APPENDED_FIELD(o, pdkv_agent_options_t, min_peer_protocol_minor);
      if (o.min_peer_protocol_minor > exec::kControlProtoMinor) {
        core::fail(Status::InvalidArgument,
                   "min_peer_protocol_minor " + std::to_string(o.min_peer_protocol_minor) +
                       " is newer than this build's control protocol " + std::to_string(exec::kControlProtoMajor) +
                       "." + std::to_string(exec::kControlProtoMinor) + ": no peer it can speak with would pass");
      }
      a.min_peer_minor = o.min_peer_protocol_minor;
    }
    auto h = std::make_unique<pdkv_agent>();
    h->agent = std::make_unique<exec::Agent>(std::move(a));
    const auto info = h->agent->info();
    h->engine_id = info.engine_id;
    h->listen = info.listen.to_string();
    *out = h.release();
  });
}

PDKV_API void pdkv_agent_free(pdkv_agent_t* agent) {
  try {
    delete agent;
  } catch (...) {
  }
}

PDKV_API pdkv_status_t pdkv_agent_get_info(const pdkv_agent_t* agent, pdkv_agent_info_t* out,
                                           pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(agent, "agent");
    require_non_null(out, "out");
    const auto i = agent->agent->info();
    pdkv_agent_info_t c{};
    c.engine_id = agent->engine_id.c_str();
    c.tp_rank = i.tp_rank;
    c.tp_size = i.tp_size;
    c.listen_address = agent->listen.c_str();
    c.port = i.listen.port;
    c.transport = transport_to_c(i.transport);
    c.progress_mode = i.progress == exec::ProgressMode::Caller ? PDKV_PROGRESS_CALLER : PDKV_PROGRESS_THREAD;
    c.num_peers = i.num_peers;
    c.transfers_in_flight = i.transfers_in_flight;
    c.copy_threads = i.copy_threads;
    write_struct_prefix(out, c, pdkv::capi::kAgentInfoMinSize, "pdkv_agent_info_t");
  });
}

PDKV_API pdkv_status_t pdkv_agent_progress(pdkv_agent_t* agent, uint32_t* events, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(agent, "agent");
    const unsigned n = agent->agent->progress();
    if (events != nullptr) *events = n;
  });
}

PDKV_API pdkv_status_t pdkv_agent_event_fd(const pdkv_agent_t* agent, int* fd, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(agent, "agent");
    require_non_null(fd, "fd");
    *fd = agent->agent->event_fd();
  });
}

PDKV_API pdkv_status_t pdkv_agent_register_memory(pdkv_agent_t* agent, const pdkv_memory_desc_t* desc,
                                                  pdkv_memory_t** out, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(agent, "agent");
    require_non_null(desc, "desc");
    require_non_null(out, "out");
    *out = nullptr;
    const auto d = pdkv::capi::read_options(*desc, pdkv::capi::kMemoryDescMinSize, "pdkv_memory_desc_t",
                                            PDKV_MEMORY_FIELD_MEMORY_TYPE | PDKV_MEMORY_FIELD_DEVICE);
    exec::MemoryType type = exec::MemoryType::Host;
    if (d.field_mask & PDKV_MEMORY_FIELD_MEMORY_TYPE) {
      if (d.memory_type == PDKV_MEMORY_CUDA) {
        type = exec::MemoryType::Cuda;
      } else if (d.memory_type != PDKV_MEMORY_HOST) {
        core::fail(Status::InvalidArgument, "memory_type " + std::to_string(d.memory_type) +
                                                " is not a pdkv_memory_type_t (HOST 0, CUDA 1)");
      }
    }
    const int32_t device = (d.field_mask & PDKV_MEMORY_FIELD_DEVICE) ? d.device : 0;
    auto h = std::make_unique<pdkv_memory>();
    h->reg = agent->agent->register_memory(d.region, d.address, d.length, type, device);
    h->core = agent->agent->core();
    *out = h.release();
  });
}

PDKV_API pdkv_status_t pdkv_memory_deregister(pdkv_memory_t* memory, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(memory, "memory");
    exec::deregister_memory(memory->core, memory->reg);
  });
}

PDKV_API pdkv_status_t pdkv_shared_memory_alloc(size_t bytes, pdkv_shared_memory_t** out, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(out, "out");
    auto h = std::make_unique<pdkv_shared_memory>();
    h->memory = exec::cma::SharedMemory::allocate(bytes);
    *out = h.release();
  });
}

PDKV_API pdkv_status_t pdkv_shared_memory_address(const pdkv_shared_memory_t* memory, void** address, size_t* bytes,
                                                  pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(memory, "memory");
    require_non_null(address, "address");
    require_non_null(bytes, "bytes");
    *address = memory->memory->data();
    *bytes = static_cast<size_t>(memory->memory->size());
  });
}

PDKV_API void pdkv_shared_memory_free(pdkv_shared_memory_t* memory) { delete memory; }

PDKV_API void pdkv_memory_free(pdkv_memory_t* memory) {
  if (memory == nullptr) return;
  try {
    exec::release_memory(memory->core, memory->reg);
  } catch (...) {
  }
  delete memory;
}

PDKV_API pdkv_status_t pdkv_agent_connect(pdkv_agent_t* agent, const pdkv_connect_options_t* options,
                                          pdkv_peer_t** out, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(agent, "agent");
    require_non_null(options, "options");
    require_non_null(out, "out");
    *out = nullptr;
    const auto o = pdkv::capi::read_options(*options, pdkv::capi::kConnectOptionsMinSize, "pdkv_connect_options_t",
                                            PDKV_CONNECT_FIELD_TIMEOUT);
    const auto address = exec::parse_host_port(c_text(o.address, "options->address"));
    std::optional<std::chrono::milliseconds> timeout;
    if (o.field_mask & PDKV_CONNECT_FIELD_TIMEOUT) timeout = ms(o.timeout_ms, "timeout_ms");
    auto h = std::make_unique<pdkv_peer>();
    h->rec = agent->agent->connect(address, timeout);
    h->core = agent->agent->core();
    *out = h.release();
  });
}

PDKV_API pdkv_status_t pdkv_agent_find_peer(pdkv_agent_t* agent, const char* engine_id, uint32_t tp_rank,
                                            pdkv_peer_t** out, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(agent, "agent");
    require_non_null(engine_id, "engine_id");
    require_non_null(out, "out");
    *out = nullptr;
    auto h = std::make_unique<pdkv_peer>();
    h->rec = agent->agent->find_peer(engine_id, tp_rank);
    h->core = agent->agent->core();
    *out = h.release();
  });
}

PDKV_API pdkv_status_t pdkv_agent_find_stage_peer(pdkv_agent_t* agent, const char* engine_id, uint32_t pp_rank,
                                                  uint32_t tp_rank, pdkv_peer_t** out, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(agent, "agent");
    require_non_null(engine_id, "engine_id");
    require_non_null(out, "out");
    *out = nullptr;
    auto h = std::make_unique<pdkv_peer>();
    h->rec = agent->agent->find_peer(engine_id, pp_rank, tp_rank);
    h->core = agent->agent->core();
    *out = h.release();
  });
}

PDKV_API pdkv_status_t pdkv_peer_get_info(const pdkv_peer_t* peer, pdkv_peer_info_t* out, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(peer, "peer");
    require_non_null(out, "out");
    const auto& r = *peer->rec;
    pdkv_peer_info_t c{};
    c.engine_id = r.engine_id.c_str();
    c.tp_rank = r.tp_rank;
    c.address = r.address.c_str();
    c.connected = r.connected.load() ? 1 : 0;
    c.inbound = r.inbound ? 1 : 0;
    c.transport = transport_to_c(r.transport);
    c.lost_status = r.lost_status.load();
    c.bytes_read = r.bytes_read;
    c.bytes_written = r.bytes_written;
    c.transfers_done = r.transfers_done;
    c.transfers_failed = r.transfers_failed;
    c.operations_failed = r.operations_failed;
    c.notifications_sent = r.notifications_sent;
    c.notifications_received = r.notifications_received;
    c.heartbeat_rtt_us = r.heartbeat_rtt_us;
    c.pp_rank = r.pp_rank;
    c.mapped_regions = r.mapped_regions;
    c.bytes_mapped = r.bytes_mapped;
    c.lease_keeps_sent = r.lease_keeps_sent;
    c.lease_keeps_received = r.lease_keeps_received;
    write_struct_prefix(out, c, pdkv::capi::kPeerInfoMinSize, "pdkv_peer_info_t");
  });
}

PDKV_API pdkv_status_t pdkv_peer_metadata(const pdkv_peer_t* peer, pdkv_engine_metadata_t** out,
                                          pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(peer, "peer");
    require_non_null(out, "out");
    *out = pdkv::capi::make_metadata(peer->rec->metadata);
  });
}

PDKV_API pdkv_status_t pdkv_peer_disconnect(pdkv_peer_t* peer, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(peer, "peer");
    exec::disconnect_peer(peer->core, peer->rec);
  });
}

PDKV_API void pdkv_peer_free(pdkv_peer_t* peer) { delete peer; }

PDKV_API pdkv_status_t pdkv_agent_post(pdkv_agent_t* agent, const pdkv_transfer_params_t* params,
                                       pdkv_transfer_t** out, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(agent, "agent");
    require_non_null(params, "params");
    require_non_null(out, "out");
    *out = nullptr;
    const auto p = pdkv::capi::read_options(*params, pdkv::capi::kTransferParamsMinSize, "pdkv_transfer_params_t",
                                            PDKV_TRANSFER_FIELD_TIMEOUT | PDKV_TRANSFER_FIELD_NOTIFY |
                                                PDKV_TRANSFER_FIELD_CONFIRM_LEASE);
    require_non_null(p.plan, "params->plan");
    exec::PostParams q;
    if (p.op == PDKV_TRANSFER_READ) {
      q.op = exec::TransferOp::Read;
    } else if (p.op == PDKV_TRANSFER_WRITE) {
      q.op = exec::TransferOp::Write;
    } else {
      core::fail(Status::InvalidArgument, "op " + std::to_string(p.op) + " is not a pdkv_transfer_op_t (READ 0, WRITE 1)");
    }
    q.plan = &p.plan->plan;
    q.peer_engine_id = c_text(p.peer_engine_id, "params->peer_engine_id");
    q.request_id = c_text(p.request_id, "params->request_id");
    if (p.field_mask & PDKV_TRANSFER_FIELD_TIMEOUT) q.timeout = ms(p.timeout_ms, "timeout_ms");
    if (p.field_mask & PDKV_TRANSFER_FIELD_NOTIFY) {
      if (p.notify > 1) core::fail(Status::InvalidArgument, "notify must be 0 or 1, got " + std::to_string(p.notify));
      q.notify = p.notify == 1;
    }
    if (p.field_mask & PDKV_TRANSFER_FIELD_CONFIRM_LEASE) {
      if (p.confirm_lease > 1) {
        core::fail(Status::InvalidArgument, "confirm_lease must be 0 or 1, got " + std::to_string(p.confirm_lease));
      }
      q.confirm_lease = p.confirm_lease == 1;
    }
    auto h = std::make_unique<pdkv_transfer>(agent->agent->post(q));
    *out = h.release();
  });
}

PDKV_API pdkv_status_t pdkv_transfer_get_info(const pdkv_transfer_t* transfer, pdkv_transfer_info_t* out,
                                              pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(transfer, "transfer");
    require_non_null(out, "out");
    const auto s = transfer->handle.status();
    pdkv_transfer_info_t c{};
    c.state = static_cast<int32_t>(s.state);
    c.status = static_cast<int32_t>(s.status);
    c.bytes_total = s.bytes_total;
    c.bytes_done = s.bytes_done;
    c.operations_total = s.ops_total;
    c.operations_done = s.ops_done;
    c.reads_failed = s.failed.size();
    const auto end = s.state == exec::TransferState::InFlight ? std::chrono::steady_clock::now() : s.finished;
    c.elapsed_us = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(end - s.posted).count());
    write_struct_prefix(out, c, pdkv::capi::kTransferInfoMinSize, "pdkv_transfer_info_t");
  });
}

PDKV_API pdkv_status_t pdkv_transfer_wait(pdkv_transfer_t* transfer, uint64_t timeout_ms, uint8_t* finished,
                                          pdkv_error_t** err) {
  if (finished != nullptr) *finished = 0;
  return guard(err, [&] {
    require_non_null(transfer, "transfer");
    require_non_null(finished, "finished");
    const auto t = timeout_ms >= static_cast<uint64_t>(std::numeric_limits<int64_t>::max() / 1000000)
                       ? std::chrono::milliseconds::max()
                       : std::chrono::milliseconds(static_cast<int64_t>(timeout_ms));
    if (!transfer->handle.wait(t)) return;
    *finished = 1;
    const auto s = transfer->handle.status();
    if (s.status != Status::Ok) throw core::Error(s.status, s.message);
  });
}

PDKV_API pdkv_status_t pdkv_transfer_cancel(pdkv_transfer_t* transfer, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(transfer, "transfer");
    transfer->handle.cancel();
  });
}

PDKV_API pdkv_status_t pdkv_transfer_done_fd(const pdkv_transfer_t* transfer, int* fd, pdkv_error_t** err) {
  if (fd != nullptr) *fd = -1;
  return guard(err, [&] {
    require_non_null(transfer, "transfer");
    require_non_null(fd, "fd");
    *fd = transfer->handle.done_fd();
  });
}

PDKV_API pdkv_status_t pdkv_transfer_failed_reads(const pdkv_transfer_t* transfer, const pdkv_failed_read_t** reads,
                                                  size_t* count, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(transfer, "transfer");
    require_non_null(reads, "reads");
    require_non_null(count, "count");
    std::lock_guard<std::mutex> g(transfer->m);
    if (!transfer->failed_filled) {
      const auto s = transfer->handle.status();
      if (s.state == exec::TransferState::InFlight) {
        *reads = nullptr;
        *count = 0;
        return;
      }
      for (const auto& f : s.failed) {
        pdkv_failed_read_t c{};
        c.p_tp_rank = f.p_rank;
        c.read_index = f.read_index;
        c.status = static_cast<int32_t>(f.status);
        transfer->failed.push_back(c);
      }
      transfer->failed_filled = true;
    }
    *reads = transfer->failed.empty() ? nullptr : transfer->failed.data();
    *count = transfer->failed.size();
  });
}

PDKV_API void pdkv_transfer_free(pdkv_transfer_t* transfer) {
  if (transfer == nullptr) return;
  try {
    transfer->handle.cancel();
  } catch (...) {
  }
  delete transfer;
}

PDKV_API pdkv_status_t pdkv_agent_lease(pdkv_agent_t* agent, const char* request_id, uint32_t expected,
                                        uint64_t ttl_ms, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(agent, "agent");
    require_non_null(request_id, "request_id");
    agent->agent->lease(request_id, expected, ms(ttl_ms, "ttl_ms"));
  });
}

PDKV_API pdkv_status_t pdkv_agent_keep_leases(pdkv_agent_t* agent, const char* peer_engine_id,
                                              const char* const* request_ids, size_t count, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(agent, "agent");
    require_non_null(peer_engine_id, "peer_engine_id");
    if (count > 0) require_non_null(request_ids, "request_ids");
    std::vector<std::string> ids;
    ids.reserve(count);
    for (size_t i = 0; i < count; ++i) {
      if (request_ids[i] == nullptr) {
        throw core::Error(Status::NullPointer, "request_ids[" + std::to_string(i) + "] is NULL");
      }
      // Bounded read: an id longer than any request id is refused without scanning further.
      const size_t n = ::strnlen(request_ids[i], exec::kMaxRequestIdBytes + 1);
      if (n > exec::kMaxRequestIdBytes) {
        throw core::Error(Status::InvalidArgument, "request_ids[" + std::to_string(i) + "] is longer than " +
                                                       std::to_string(exec::kMaxRequestIdBytes) + " bytes");
      }
      ids.emplace_back(request_ids[i], n);
    }
    agent->agent->keep_leases(peer_engine_id, ids);
  });
}

PDKV_API pdkv_status_t pdkv_agent_poll_notifications(pdkv_agent_t* agent, pdkv_notification_list_t** out,
                                                     pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(agent, "agent");
    require_non_null(out, "out");
    *out = nullptr;
    auto h = std::make_unique<pdkv_notification_list>();
    h->notes = agent->agent->poll_notifications();
    h->items.reserve(h->notes.size());
    for (const auto& n : h->notes) {
      pdkv_notification_t& c = pdkv::capi::append_zeroed(h->items);
      c.kind = static_cast<int32_t>(n.kind);
      c.status = static_cast<int32_t>(n.status);
      c.request_id = n.request_id.c_str();
      c.engine_id = n.engine_id.c_str();
      c.tp_rank = n.tp_rank;
      c.count = n.count;
      c.expected = n.expected;
      c.bytes = n.bytes;
      c.pp_rank = n.pp_rank;
    }
    *out = h.release();
  });
}

PDKV_API pdkv_status_t pdkv_notification_list_items(const pdkv_notification_list_t* list,
                                                    const pdkv_notification_t** items, size_t* count,
                                                    pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(list, "list");
    require_non_null(items, "items");
    require_non_null(count, "count");
    *items = list->items.empty() ? nullptr : list->items.data();
    *count = list->items.size();
  });
}

PDKV_API void pdkv_notification_list_free(pdkv_notification_list_t* list) { delete list; }

}  // extern "C"
