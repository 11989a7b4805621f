// What the network-facing fuzz targets share: an oracle that no single allocation made while an
// input runs exceeds the target's cap (a parser that sizes a buffer from a length the peer sent,
// unchecked, shows up here before it shows up as memory exhaustion), and `bug`, which reports an
// oracle failure under the target's name and aborts so libFuzzer keeps the input.
// Each target is its own executable: it calls install() from LLVMFuzzerInitialize and runs each
// input inside an Armed scope, so libFuzzer's own bookkeeping is not judged.
#pragma once

#include <cstddef>
#include <cstdio>
#include <cstdlib>

#include <sanitizer/allocator_interface.h>

namespace pdkv::fuzzing {

struct CapState {
  const char* target = "fuzz";
  size_t cap = 0;
  bool armed = false;
};
inline CapState g_cap;

[[noreturn]] inline void bug(const char* what, const char* detail = "") {
  std::fprintf(stderr, "%s: %s %s\n", g_cap.target, what, detail);
  std::abort();
}

// The sanitizer allocator calls this for every malloc and operator new.
inline void on_malloc(const volatile void*, size_t n) {
  if (g_cap.armed && n > g_cap.cap) {
    g_cap.armed = false;
    std::fprintf(stderr, "%s: allocation of %zu bytes exceeds the cap of %zu\n", g_cap.target, n, g_cap.cap);
    std::abort();
  }
}
inline void on_free(const volatile void*) {}

inline void install(const char* target, size_t cap) {
  g_cap.target = target;
  g_cap.cap = cap;
  __sanitizer_install_malloc_and_free_hooks(on_malloc, on_free);
}

// Judges allocations for as long as it lives.
struct Armed {
  Armed() { g_cap.armed = true; }
  ~Armed() { g_cap.armed = false; }
  Armed(const Armed&) = delete;
  Armed& operator=(const Armed&) = delete;
};

}  // namespace pdkv::fuzzing
