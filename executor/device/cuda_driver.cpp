#include "device/cuda_driver.hpp"

#include <dlfcn.h>

#include <mutex>

namespace pdkv::exec::device::cuda {

std::string Driver::error_text(CUresult result) const {
  const char* name = nullptr;
  const char* text = nullptr;
  if (GetErrorName == nullptr || GetErrorName(result, &name) != kSuccess || name == nullptr) name = "CUDA error";
  if (GetErrorString == nullptr || GetErrorString(result, &text) != kSuccess || text == nullptr) text = "no description";
  return std::string(name) + " (" + std::to_string(result) + "): " + text;
}

namespace {

struct Loaded {
  Driver driver;
  std::string why;  // empty when the driver is usable
};

template <typename F>
bool resolve(void* lib, const char* symbol, F* out, std::string* why) {
  void* p = ::dlsym(lib, symbol);
  if (p == nullptr) {
    *why = std::string("libcuda.so.1 has no ") + symbol + " (a driver older than this library needs)";
    return false;
  }
  *out = reinterpret_cast<F>(p);
  return true;
}

Loaded load() {
  Loaded l;
  // RTLD_LOCAL: the driver's symbols serve only these pointers. Never closed: the driver stays
  // for the process's life (its contexts and streams are in use until exit).
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* e = ::dlerror();
    l.why = std::string("the CUDA driver (libcuda.so.1) could not be loaded: ") + (e ? e : "unknown reason");
    return l;
  }
  Driver& d = l.driver;
  std::string why;
  const bool ok = resolve(lib, "cuInit", &d.Init, &why) && resolve(lib, "cuGetErrorName", &d.GetErrorName, &why) &&
                  resolve(lib, "cuGetErrorString", &d.GetErrorString, &why) &&
                  resolve(lib, "cuDeviceGetCount", &d.DeviceGetCount, &why) &&
                  resolve(lib, "cuDeviceGet", &d.DeviceGet, &why) &&
                  resolve(lib, "cuDevicePrimaryCtxRetain", &d.DevicePrimaryCtxRetain, &why) &&
                  resolve(lib, "cuCtxPushCurrent_v2", &d.CtxPushCurrent, &why) &&
                  resolve(lib, "cuCtxPopCurrent_v2", &d.CtxPopCurrent, &why) &&
                  resolve(lib, "cuCtxSetCurrent", &d.CtxSetCurrent, &why) &&
                  resolve(lib, "cuPointerGetAttribute", &d.PointerGetAttribute, &why) &&
                  resolve(lib, "cuStreamCreate", &d.StreamCreate, &why) &&
                  resolve(lib, "cuStreamSynchronize", &d.StreamSynchronize, &why) &&
                  resolve(lib, "cuMemcpyDtoHAsync_v2", &d.MemcpyDtoHAsync, &why) &&
                  resolve(lib, "cuMemcpyHtoDAsync_v2", &d.MemcpyHtoDAsync, &why) &&
                  resolve(lib, "cuMemHostAlloc", &d.MemHostAlloc, &why) &&
                  resolve(lib, "cuMemFreeHost", &d.MemFreeHost, &why) &&
                  resolve(lib, "cuMemAlloc_v2", &d.MemAlloc, &why) && resolve(lib, "cuMemFree_v2", &d.MemFree, &why) &&
                  resolve(lib, "cuMemcpyHtoD_v2", &d.MemcpyHtoD, &why) &&
                  resolve(lib, "cuMemcpyDtoH_v2", &d.MemcpyDtoH, &why);
  if (!ok) {
    l.why = why;
    return l;
  }
  if (const CUresult r = d.Init(0); r != kSuccess) {
    l.why = "cuInit failed: " + d.error_text(r);
    return l;
  }
  int count = 0;
  if (const CUresult r = d.DeviceGetCount(&count); r != kSuccess) {
    l.why = "cuDeviceGetCount failed: " + d.error_text(r);
  } else if (count == 0) {
    l.why = "the CUDA driver sees no device";
  }
  return l;
}

}  // namespace

const Driver* load_driver(std::string* why) {
  static std::once_flag once;
  static Loaded* loaded = nullptr;  // kept until exit on purpose (see load)
  std::call_once(once, [] { loaded = new Loaded(load()); });
  if (!loaded->why.empty()) {
    if (why != nullptr) *why = loaded->why;
    return nullptr;
  }
  return &loaded->driver;
}

}  // namespace pdkv::exec::device::cuda
