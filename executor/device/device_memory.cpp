#include "device/device_memory.hpp"

#include <cstdio>
#include <map>
#include <mutex>
#include <utility>

#include "device/cuda_driver.hpp"
#include "pdkv/core/error.hpp"

namespace pdkv::exec::device {

using core::Status;

namespace {

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// Copies run on one non-blocking stream per device, in the device's primary context (the one
// the CUDA runtime and PyTorch use): the stream does not wait for the engine's work on the
// legacy default stream, so the engine must have finished writing a block before P serves it
// (as with any transfer), and a copy never stalls behind the engine's kernels.
class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const cuda::Driver& d) : d_(d) {}

  std::string name() const override { return "cuda"; }

  void check_range(uint64_t address, uint64_t length, int ordinal) override {
    const uint64_t end = address + length;  // the caller checked address + length does not wrap
    for (uint64_t at = address; at < end;) {
      const std::string where = "address " + hex(at) + " (byte " + std::to_string(at - address) + " of [" +
                                hex(address) + ", +" + std::to_string(length) + "))";
      unsigned type = 0;
      cuda::CUresult r = d_.PointerGetAttribute(&type, cuda::kPointerAttributeMemoryType, at);
      if (r == cuda::kErrorInvalidValue) {
        core::fail(Status::InvalidArgument, where + " is not CUDA device memory: the driver does not know it");
      }
      check(r, "cuPointerGetAttribute(MEMORY_TYPE) of " + where);
      if (type != cuda::kMemoryTypeDevice && type != cuda::kMemoryTypeUnified) {
        core::fail(Status::InvalidArgument, where + " is not CUDA device memory (the driver reports memory type " +
                                                std::to_string(type) + (type == cuda::kMemoryTypeHost ? ", host" : "") + ")");
      }
      int on = -1;
      check(d_.PointerGetAttribute(&on, cuda::kPointerAttributeDeviceOrdinal, at),
            "cuPointerGetAttribute(DEVICE_ORDINAL) of " + where);
      if (on != ordinal) {
        core::fail(Status::InvalidArgument, where + " lies on CUDA device " + std::to_string(on) + ", not on device " +
                                                std::to_string(ordinal) + " as registered");
      }
      cuda::CUdeviceptr start = 0;
      size_t size = 0;
      check(d_.PointerGetAttribute(&start, cuda::kPointerAttributeRangeStartAddr, at),
            "cuPointerGetAttribute(RANGE_START_ADDR) of " + where);
      check(d_.PointerGetAttribute(&size, cuda::kPointerAttributeRangeSize, at),
            "cuPointerGetAttribute(RANGE_SIZE) of " + where);
      if (start > at || size == 0 || start + size <= at) {
        core::fail(Status::Transport, "the CUDA driver reports the allocation holding " + where + " as [" + hex(start) +
                                          ", +" + std::to_string(size) + "), which does not contain it");
      }
      at = start + size;  // the next allocation mapped after this one, if the range goes on
    }
  }

  void to_host(int ordinal, std::span<const Copy> copies) override { run(ordinal, copies, true); }
  void to_device(int ordinal, std::span<const Copy> copies) override { run(ordinal, copies, false); }

  void* host_alloc(int ordinal, size_t bytes) noexcept override {
    try {
      const PerDevice pd = device(ordinal);
      if (d_.CtxPushCurrent(pd.context) != cuda::kSuccess) return nullptr;
      void* p = nullptr;
      if (d_.MemHostAlloc(&p, bytes, cuda::kMemHostAllocPortable) != cuda::kSuccess) p = nullptr;
      cuda::CUcontext popped = nullptr;
      d_.CtxPopCurrent(&popped);
      return p;
    } catch (...) {
      return nullptr;  // pageable memory will do
    }
  }
  void host_free(int ordinal, void* pointer) noexcept override {
    try {
      const PerDevice pd = device(ordinal);
      if (d_.CtxPushCurrent(pd.context) != cuda::kSuccess) return;
      d_.MemFreeHost(pointer);
      cuda::CUcontext popped = nullptr;
      d_.CtxPopCurrent(&popped);
    } catch (...) {
    }
  }

 private:
  struct PerDevice {
    cuda::CUcontext context = nullptr;
    cuda::CUstream stream = nullptr;
  };

  void check(cuda::CUresult r, const std::string& what) const {
    if (r != cuda::kSuccess) {
      throw core::Error(Status::Transport, what + " failed: " + d_.error_text(r), core::CauseDomain::Cuda, r);
    }
  }

  // The device's primary context (retained for the process's life) and the executor's stream on it.
  PerDevice device(int ordinal) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = devices_.find(ordinal);
    if (it != devices_.end()) return it->second;
    PerDevice pd;
    cuda::CUdevice dev = 0;
    check(d_.DeviceGet(&dev, ordinal), "cuDeviceGet(" + std::to_string(ordinal) + ")");
    check(d_.DevicePrimaryCtxRetain(&pd.context, dev), "cuDevicePrimaryCtxRetain(device " + std::to_string(ordinal) + ")");
    check(d_.CtxPushCurrent(pd.context), "cuCtxPushCurrent");
    const cuda::CUresult r = d_.StreamCreate(&pd.stream, cuda::kStreamNonBlocking);
    cuda::CUcontext popped = nullptr;
    d_.CtxPopCurrent(&popped);
    check(r, "cuStreamCreate on device " + std::to_string(ordinal));
    devices_.emplace(ordinal, pd);
    return pd;
  }

  void run(int ordinal, std::span<const Copy> copies, bool to_host) {
    if (copies.empty()) return;
    const PerDevice pd = device(ordinal);
    check(d_.CtxPushCurrent(pd.context), "cuCtxPushCurrent");
    cuda::CUresult r = cuda::kSuccess;
    std::string what;
    for (const Copy& c : copies) {
      r = to_host ? d_.MemcpyDtoHAsync(c.host, c.device_address, c.length, pd.stream)
                  : d_.MemcpyHtoDAsync(c.device_address, c.host, c.length, pd.stream);
      if (r != cuda::kSuccess) {
        what = std::string(to_host ? "cuMemcpyDtoHAsync from " : "cuMemcpyHtoDAsync to ") + hex(c.device_address) +
               " (" + std::to_string(c.length) + " bytes)";
        break;
      }
    }
    // Wait even after a failed enqueue: the copies already queued read or write host buffers
    // the caller frees once this returns.
    const cuda::CUresult s = d_.StreamSynchronize(pd.stream);
    cuda::CUcontext popped = nullptr;
    d_.CtxPopCurrent(&popped);
    check(r, what);
    check(s, "cuStreamSynchronize after " + std::to_string(copies.size()) + " staged copies");
  }

  const cuda::Driver& d_;
  std::mutex mu_;
  std::map<int, PerDevice> devices_;  // never released: the driver outlives every registration
};

std::mutex g_mu;
std::shared_ptr<Backend> g_replacement;

}  // namespace

StagingBuffer::StagingBuffer(std::shared_ptr<Backend> backend, int ordinal, size_t bytes) : ordinal_(ordinal), size_(bytes) {
  if (bytes == 0) return;
  if (backend) data_ = static_cast<uint8_t*>(backend->host_alloc(ordinal, bytes));
  if (data_ != nullptr) {
    backend_ = std::move(backend);
  } else {
    data_ = new uint8_t[bytes];  // not zeroed: every byte is written before it is read
  }
}

StagingBuffer& StagingBuffer::operator=(StagingBuffer&& other) noexcept {
  if (this != &other) {
    release();
    backend_ = std::move(other.backend_);
    ordinal_ = other.ordinal_;
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void StagingBuffer::release() noexcept {
  if (data_ == nullptr) return;
  if (backend_) backend_->host_free(ordinal_, data_);
  else delete[] data_;
  data_ = nullptr;
  size_ = 0;
  backend_.reset();
}

std::shared_ptr<Backend> backend() {
  {
    std::lock_guard<std::mutex> g(g_mu);
    if (g_replacement) return g_replacement;
  }
  static std::shared_ptr<Backend> driver_backend;  // set once, under g_once
  static std::once_flag g_once;
  static std::string g_why;
  std::call_once(g_once, [] {
    if (const cuda::Driver* d = cuda::load_driver(&g_why)) driver_backend = std::make_shared<CudaBackend>(*d);
  });
  if (!driver_backend) {
    core::fail(Status::InvalidArgument, "CUDA device memory cannot be registered on this machine: " + g_why);
  }
  return driver_backend;
}

void set_backend_for_testing(std::shared_ptr<Backend> replacement) {
  std::lock_guard<std::mutex> g(g_mu);
  g_replacement = std::move(replacement);
}

}  // namespace pdkv::exec::device
