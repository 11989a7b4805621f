// executor/device/cuda_driver.hpp declares the CUDA driver's types and constants itself, so the
// library builds without a CUDA toolkit. This file, built only where cuda.h is found (CMake's
// PDKV_CUDA_INCLUDE_DIR), checks each declaration against the real header: a constant that
// drifted would make the agent ask the driver for the wrong attribute.
#include <cuda.h>
#include <gtest/gtest.h>

#include <type_traits>

#include "device/cuda_driver.hpp"

namespace c = pdkv::exec::device::cuda;

static_assert(sizeof(c::CUresult) == sizeof(CUresult));
static_assert(std::is_same_v<c::CUdeviceptr, CUdeviceptr>);
static_assert(std::is_same_v<c::CUdevice, CUdevice>);
static_assert(std::is_same_v<c::CUcontext, CUcontext>);
static_assert(std::is_same_v<c::CUstream, CUstream>);
static_assert(c::kSuccess == CUDA_SUCCESS);
static_assert(c::kErrorInvalidValue == CUDA_ERROR_INVALID_VALUE);
static_assert(c::kPointerAttributeMemoryType == CU_POINTER_ATTRIBUTE_MEMORY_TYPE);
static_assert(c::kPointerAttributeDeviceOrdinal == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL);
static_assert(c::kPointerAttributeRangeStartAddr == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR);
static_assert(c::kPointerAttributeRangeSize == CU_POINTER_ATTRIBUTE_RANGE_SIZE);
static_assert(c::kMemoryTypeHost == CU_MEMORYTYPE_HOST);
static_assert(c::kMemoryTypeDevice == CU_MEMORYTYPE_DEVICE);
static_assert(c::kMemoryTypeUnified == CU_MEMORYTYPE_UNIFIED);
static_assert(c::kStreamNonBlocking == CU_STREAM_NON_BLOCKING);
static_assert(c::kMemHostAllocPortable == CU_MEMHOSTALLOC_PORTABLE);

// Each entry point has the parameters cuda.h gives the symbol dlsym resolves (cuda.h maps the
// plain names to the _v2 ones where this file resolves those), with CUresult as int.
template <typename Mine, typename Theirs>
struct SameParameters : std::false_type {};
template <typename... A, typename R1, typename R2>
struct SameParameters<R1 (*)(A...), R2 (*)(A...)> : std::bool_constant<sizeof(R1) == sizeof(R2)> {};
// Where cuda.h takes an enum (CUresult, CUpointer_attribute) the declaration takes an int: the
// parameters must then agree in number and size, each passed in the same register.
template <typename Mine, typename Theirs>
struct SameShape : std::false_type {};
template <typename R1, typename... A, typename R2, typename... B>
struct SameShape<R1 (*)(A...), R2 (*)(B...)>
    : std::bool_constant<sizeof...(A) == sizeof...(B) && sizeof(R1) == sizeof(R2) && ((sizeof(A) == sizeof(B)) && ...)> {};
#define PDKV_SAME(field, symbol) \
  static_assert(SameParameters<decltype(c::Driver::field), decltype(&symbol)>::value, #symbol)
#define PDKV_SAME_SHAPE(field, symbol) \
  static_assert(SameShape<decltype(c::Driver::field), decltype(&symbol)>::value, #symbol)
PDKV_SAME(Init, cuInit);
PDKV_SAME_SHAPE(GetErrorName, cuGetErrorName);
PDKV_SAME_SHAPE(GetErrorString, cuGetErrorString);
PDKV_SAME(DeviceGetCount, cuDeviceGetCount);
PDKV_SAME(DeviceGet, cuDeviceGet);
PDKV_SAME(DevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain);
PDKV_SAME(CtxPushCurrent, cuCtxPushCurrent_v2);
PDKV_SAME(CtxPopCurrent, cuCtxPopCurrent_v2);
PDKV_SAME(CtxSetCurrent, cuCtxSetCurrent);
PDKV_SAME_SHAPE(PointerGetAttribute, cuPointerGetAttribute);
PDKV_SAME(StreamCreate, cuStreamCreate);
PDKV_SAME(StreamSynchronize, cuStreamSynchronize);
PDKV_SAME(MemcpyDtoHAsync, cuMemcpyDtoHAsync_v2);
PDKV_SAME(MemcpyHtoDAsync, cuMemcpyHtoDAsync_v2);
PDKV_SAME(MemHostAlloc, cuMemHostAlloc);
PDKV_SAME(MemFreeHost, cuMemFreeHost);
PDKV_SAME(MemAlloc, cuMemAlloc_v2);
PDKV_SAME(MemFree, cuMemFree_v2);
PDKV_SAME(MemcpyHtoD, cuMemcpyHtoD_v2);
PDKV_SAME(MemcpyDtoH, cuMemcpyDtoH_v2);

// The checks above are compile-time; this test exists so the file is a suite ctest runs.
TEST(DeviceCudaAbi, TheDriverDeclarationsMatchCudaH) { SUCCEED() << "checked at compile time against " << CUDA_VERSION; }
