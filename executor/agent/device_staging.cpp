#include "agent/device_staging.hpp"

#include <algorithm>

namespace pdkv::exec {

namespace {

// Runs the copies in order, one backend call per run of copies on the same (backend, device).
void run_copies(std::span<const DeviceLanding> copies, bool to_host) {
  std::vector<device::Copy> group;
  for (size_t i = 0; i < copies.size(); ++i) {
    const DeviceLanding& c = copies[i];
    group.push_back(c.copy);
    if (i + 1 < copies.size() && copies[i + 1].staging == c.staging && copies[i + 1].device == c.device) continue;
    if (to_host) c.staging->to_host(c.device, group);
    else c.staging->to_device(c.device, group);
    group.clear();
  }
}

// Points each device piece of `pieces` (devices[i] set) at the next bytes of `staging` and
// lists where they go; the rest stay as they are.
std::vector<DeviceLanding> restage(std::vector<iovec>& pieces, std::span<const Registration* const> devices,
                                   uint8_t* staging) {
  std::vector<DeviceLanding> out;
  size_t at = 0;
  for (size_t i = 0; i < devices.size(); ++i) {
    const Registration* r = devices[i];
    if (r == nullptr) continue;
    iovec& v = pieces[i];
    out.push_back({r->staging, r->device, {staging + at, reinterpret_cast<uint64_t>(v.iov_base), v.iov_len}});
    v.iov_base = staging + at;
    at += v.iov_len;
  }
  return out;
}

size_t device_bytes(const std::vector<iovec>& pieces, std::span<const Registration* const> devices) {
  size_t bytes = 0;
  for (size_t i = 0; i < devices.size(); ++i) {
    if (devices[i] != nullptr) bytes += pieces[i].iov_len;
  }
  return bytes;
}

const Registration* first_device(std::span<const Registration* const> devices) {
  return *std::find_if(devices.begin(), devices.end(), [](const Registration* r) { return r != nullptr; });
}

}  // namespace

void stage_outgoing(TcpData& d, TcpOut& o, std::span<const Registration* const> devices) {
  const size_t bytes = device_bytes(o.body, devices);
  if (bytes == 0) return;
  // Sized once (the iovecs point into it): a spare that holds `bytes`, or a new buffer
  // (page-locked when the backend gives one: the device copies those at full speed).
  auto spare = std::find_if(d.staging_spare.begin(), d.staging_spare.end(),
                            [&](const device::StagingBuffer& b) { return b.size() >= bytes; });
  if (spare != d.staging_spare.end()) {
    o.staged = std::move(*spare);
    d.staging_spare.erase(spare);
  } else {
    const Registration* first = first_device(devices);
    o.staged = device::StagingBuffer(first->staging, first->device, bytes);
  }
  run_copies(restage(o.body, devices, o.staged.data()), true);
}

void recycle_staging(TcpData& d, TcpOut& o) {
  constexpr size_t kSpares = 4;  // a batch is at most tcpdp::kMaxBatchBytes: 16 MiB kept at most
  if (o.staged.empty()) return;
  if (d.staging_spare.size() < kSpares) d.staging_spare.push_back(std::move(o.staged));
  o.staged = device::StagingBuffer();
}

void stage_incoming(TcpData& d, std::vector<iovec>& to, std::span<const Registration* const> devices) {
  d.rx_device.clear();
  const size_t bytes = device_bytes(to, devices);
  if (bytes == 0) return;
  if (d.rx_staged.size() < bytes) {  // kept for the connection's next frames (page-locked if it can be)
    const Registration* first = first_device(devices);
    d.rx_staged = device::StagingBuffer(first->staging, first->device, std::max<size_t>(bytes, tcpdp::kMaxBatchBytes));
  }
  d.rx_device = restage(to, devices, d.rx_staged.data());
}

void land_incoming(std::span<const DeviceLanding> landing) { run_copies(landing, false); }

}  // namespace pdkv::exec
