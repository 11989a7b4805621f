#include "agent/device_staging.hpp"

#include <algorithm>

namespace pdkv::exec {

namespace {

// Runs the copies in order, one backend call per run of copies on the same (backend, device).
template <typename Each>
void run_grouped(size_t n, Each&& each, bool to_host) {
  std::vector<device::Copy> group;
  device::Backend* backend = nullptr;
  int device = 0;
  auto flush = [&] {
    if (group.empty()) return;
    if (to_host) backend->to_host(device, group);
    else backend->to_device(device, group);
    group.clear();
  };
  for (size_t i = 0; i < n; ++i) {
    device::Backend* b = nullptr;
    int dev = 0;
    device::Copy c;
    if (!each(i, &b, &dev, &c)) continue;
    if (b != backend || dev != device) {
      flush();
      backend = b;
      device = dev;
    }
    group.push_back(c);
  }
  flush();
}

}  // namespace

void stage_outgoing(TcpData& d, TcpOut& o, std::span<const Registration* const> devices) {
  size_t bytes = 0;
  for (size_t i = 0; i < devices.size(); ++i) {
    if (devices[i] != nullptr) bytes += o.body[i].iov_len;
  }
  if (bytes == 0) return;
  // Sized once (the iovecs below point into it): a spare that holds `bytes`, or a new buffer
  // (page-locked when the backend gives one: the device copies those at full speed).
  auto spare = std::find_if(d.staging_spare.begin(), d.staging_spare.end(),
                            [&](const device::StagingBuffer& b) { return b.size() >= bytes; });
  if (spare != d.staging_spare.end()) {
    o.staged = std::move(*spare);
    d.staging_spare.erase(spare);
  } else {
    const Registration* first = *std::find_if(devices.begin(), devices.end(), [](const Registration* r) { return r != nullptr; });
    o.staged = device::StagingBuffer(first->staging, first->device, bytes);
  }
  size_t at = 0;
  run_grouped(
      devices.size(),
      [&](size_t i, device::Backend** b, int* dev, device::Copy* c) {
        const Registration* r = devices[i];
        if (r == nullptr) return false;
        iovec& v = o.body[i];
        *b = r->staging.get();
        *dev = r->device;
        *c = {o.staged.data() + at, reinterpret_cast<uint64_t>(v.iov_base), v.iov_len};
        v.iov_base = o.staged.data() + at;
        at += v.iov_len;
        return true;
      },
      true);
}

void recycle_staging(TcpData& d, TcpOut& o) {
  constexpr size_t kSpares = 4;  // a batch is at most tcpdp::kMaxBatchBytes: 16 MiB kept at most
  if (o.staged.empty()) return;
  if (d.staging_spare.size() < kSpares) d.staging_spare.push_back(std::move(o.staged));
  o.staged = device::StagingBuffer();
}

void stage_incoming(TcpData& d, std::vector<iovec>& to, std::span<const Registration* const> devices) {
  d.rx_device.clear();
  size_t bytes = 0;
  for (size_t i = 0; i < devices.size(); ++i) {
    if (devices[i] != nullptr) bytes += to[i].iov_len;
  }
  if (bytes == 0) return;
  if (d.rx_staged.size() < bytes) {  // kept for the connection's next frames (page-locked if it can be)
    const Registration* first = *std::find_if(devices.begin(), devices.end(), [](const Registration* r) { return r != nullptr; });
    d.rx_staged = device::StagingBuffer(first->staging, first->device, std::max<size_t>(bytes, tcpdp::kMaxBatchBytes));
  }
  size_t at = 0;
  for (size_t i = 0; i < devices.size(); ++i) {
    const Registration* r = devices[i];
    if (r == nullptr) continue;
    iovec& v = to[i];
    d.rx_device.push_back({r->staging, r->device, {d.rx_staged.data() + at, reinterpret_cast<uint64_t>(v.iov_base), v.iov_len}});
    v.iov_base = d.rx_staged.data() + at;
    at += v.iov_len;
  }
}

void land_incoming(TcpData& d) {
  std::vector<DeviceLanding> landing;
  landing.swap(d.rx_device);
  run_grouped(
      landing.size(),
      [&](size_t i, device::Backend** b, int* dev, device::Copy* c) {
        *b = landing[i].staging.get();
        *dev = landing[i].device;
        *c = landing[i].copy;
        return true;
      },
      false);
}

}  // namespace pdkv::exec
