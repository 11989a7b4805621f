// GPU device memory for the executor: what a registration of it is checked against, and how its
// bytes are staged through host memory.
//
// Why staging: neither of the agent's data paths can touch device memory itself. Cross-memory
// attach (process_vm_readv/writev) reaches host pages only, and Debian's UCX 1.13.1 has no CUDA
// support. So device regions travel over the tcp data connection: the side that sends copies
// the bytes to a host buffer first (device -> host), the side that receives takes them into a
// host buffer and copies them to the device once the frame is complete (and, when sealed,
// authenticated), so no unverified byte ever reaches device memory.
//
// The CUDA driver (libcuda.so.1) is loaded at run time on first use: the library builds and runs
// without CUDA, and only a CUDA registration needs a driver.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace pdkv::exec::device {

// One staged copy: `length` bytes between host memory and device (virtual) address.
struct Copy {
  void* host = nullptr;
  uint64_t device_address = 0;
  size_t length = 0;
};

// The device memory of the process. Implementations are thread-safe.
class Backend {
 public:
  virtual ~Backend() = default;
  // "cuda" (the driver) or a test backend's name; used in messages.
  virtual std::string name() const = 0;
  // Every byte of [address, address + length) must lie in live device memory of device
  // `ordinal` (one allocation or several mapped back to back). Throws core::Error:
  // InvalidArgument naming the first address that is not device memory or lies on another
  // device, Transport (cause CUDA) when the driver fails otherwise.
  virtual void check_range(uint64_t address, uint64_t length, int ordinal) = 0;
  // Device -> host, every copy of the span; returns once all bytes arrived. Transport on failure.
  virtual void to_host(int ordinal, std::span<const Copy> copies) = 0;
  // Host -> device, every copy of the span; returns once all bytes are in device memory.
  virtual void to_device(int ordinal, std::span<const Copy> copies) = 0;
  // Page-locked host memory for staging (the device copies it at full speed, and the copy does
  // not first go through the driver's own bounce buffer); nullptr when the backend gives none.
  // Freed with host_free on the same ordinal. Never throws.
  virtual void* host_alloc(int ordinal, size_t bytes) noexcept = 0;
  virtual void host_free(int ordinal, void* pointer) noexcept = 0;
};

// A host buffer for staged bytes: page-locked from the backend when it gives one, else ordinary
// memory. Move-only; frees what it holds.
class StagingBuffer {
 public:
  StagingBuffer() = default;
  StagingBuffer(std::shared_ptr<Backend> backend, int ordinal, size_t bytes);
  ~StagingBuffer() { release(); }
  StagingBuffer(StagingBuffer&& other) noexcept { *this = std::move(other); }
  StagingBuffer& operator=(StagingBuffer&& other) noexcept;
  StagingBuffer(const StagingBuffer&) = delete;
  StagingBuffer& operator=(const StagingBuffer&) = delete;

  uint8_t* data() const noexcept { return data_; }
  size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  bool pinned() const noexcept { return backend_ != nullptr; }

 private:
  void release() noexcept;
  std::shared_ptr<Backend> backend_;  // set when the memory is the backend's page-locked memory
  int ordinal_ = 0;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// The process's backend: the CUDA driver, loaded on first call (and kept). Throws
// core::Error(InvalidArgument) saying why when no usable driver is present (no libcuda.so.1, a
// driver too old, no device): CUDA memory is then outside what this machine can register.
std::shared_ptr<Backend> backend();

// Tests only: the backend that backend() returns from now on; nullptr goes back to the driver.
// Registrations keep the backend they were made with.
void set_backend_for_testing(std::shared_ptr<Backend> replacement);

}  // namespace pdkv::exec::device
