// The subset of the CUDA driver API the executor calls (and its GPU tests), resolved with dlsym
// from libcuda.so.1 at run time. Declared here rather than taken from cuda.h so the library
// builds where no CUDA toolkit is installed and links no CUDA library; the values below are the
// driver's ABI, and tests/executor/device_cuda_abi_test.cpp checks each against cuda.h where the
// toolkit is present.
#pragma once

#include <cstddef>
#include <string>

namespace pdkv::exec::device::cuda {

using CUresult = int;  // an enum in cuda.h: int-sized, returned in the same register
using CUdeviceptr = unsigned long long;
using CUdevice = int;
using CUcontext = struct CUctx_st*;
using CUstream = struct CUstream_st*;

inline constexpr CUresult kSuccess = 0;
inline constexpr CUresult kErrorInvalidValue = 1;  // e.g. a pointer the driver does not know
inline constexpr int kPointerAttributeMemoryType = 2;
inline constexpr int kPointerAttributeDeviceOrdinal = 9;
inline constexpr int kPointerAttributeRangeStartAddr = 11;
inline constexpr int kPointerAttributeRangeSize = 12;
inline constexpr unsigned kMemoryTypeHost = 1;
inline constexpr unsigned kMemoryTypeDevice = 2;
inline constexpr unsigned kMemoryTypeUnified = 4;
inline constexpr unsigned kStreamNonBlocking = 1;
inline constexpr unsigned kMemHostAllocPortable = 1;  // page-locked for every context

// Function pointers into libcuda.so.1 (the _v2 entry points where cuda.h maps a name to one).
struct Driver {
  CUresult (*Init)(unsigned flags) = nullptr;
  CUresult (*GetErrorName)(CUresult error, const char** name) = nullptr;
  CUresult (*GetErrorString)(CUresult error, const char** text) = nullptr;
  CUresult (*DeviceGetCount)(int* count) = nullptr;
  CUresult (*DeviceGet)(CUdevice* device, int ordinal) = nullptr;
  CUresult (*DevicePrimaryCtxRetain)(CUcontext* context, CUdevice device) = nullptr;
  CUresult (*CtxPushCurrent)(CUcontext context) = nullptr;
  CUresult (*CtxPopCurrent)(CUcontext* context) = nullptr;
  CUresult (*CtxSetCurrent)(CUcontext context) = nullptr;
  CUresult (*PointerGetAttribute)(void* data, int attribute, CUdeviceptr pointer) = nullptr;
  CUresult (*StreamCreate)(CUstream* stream, unsigned flags) = nullptr;
  CUresult (*StreamSynchronize)(CUstream stream) = nullptr;
  CUresult (*MemcpyDtoHAsync)(void* dst, CUdeviceptr src, size_t bytes, CUstream stream) = nullptr;
  CUresult (*MemcpyHtoDAsync)(CUdeviceptr dst, const void* src, size_t bytes, CUstream stream) = nullptr;
  CUresult (*MemHostAlloc)(void** pointer, size_t bytes, unsigned flags) = nullptr;
  CUresult (*MemFreeHost)(void* pointer) = nullptr;
  // Not used by the library: the GPU tests allocate and inspect device memory with them.
  CUresult (*MemAlloc)(CUdeviceptr* pointer, size_t bytes) = nullptr;
  CUresult (*MemFree)(CUdeviceptr pointer) = nullptr;
  CUresult (*MemcpyHtoD)(CUdeviceptr dst, const void* src, size_t bytes) = nullptr;
  CUresult (*MemcpyDtoH)(void* dst, CUdeviceptr src, size_t bytes) = nullptr;

  // "CUDA_ERROR_INVALID_VALUE (1): invalid argument" for a result code.
  std::string error_text(CUresult result) const;
};

// The driver, loaded and initialised (cuInit) once per process; nullptr, with *why saying what
// failed (no libcuda.so.1, a missing entry point, cuInit's error, no device), when unusable.
const Driver* load_driver(std::string* why);

}  // namespace pdkv::exec::device::cuda
