// Registration of existing memory with UCX, so peers can GET from / PUT into it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <ucp/api/ucp.h>

#include "ucx/context.hpp"

namespace pdkv::exec {

// Where the registered bytes live. Values are stable (they travel in the C API).
enum class MemoryType : uint8_t {
  Host = 0,
  // GPU device memory. The agent registers it without UCX (Debian's UCX 1.13.1 has no CUDA
  // support): device/ checks it and stages its bytes; UcxRegistration refuses it.
  Cuda = 1,
};

const char* memory_type_name(MemoryType type) noexcept;

// What is wrong with the layout of a packed rkey's bytes ("" when nothing is): an 8-byte map of
// memory domains, a memory-type byte, then for each bit of the map a size byte and that many
// bytes. ucp_ep_rkey_unpack takes no length and walks exactly this layout (UCX 1.13.1), so a key
// that announces more than it holds would make UCX read past it. Says nothing about whether the
// contents are sound (UcxEndpoint::unpack_rkey).
std::string packed_rkey_layout_error(std::span<const uint8_t> packed);

class UcxRegistration {
 public:
  // Registers [addr, addr+length) as it is (ucp_mem_map with ADDRESS|LENGTH, no allocation).
  // addr null or length 0: InvalidArgument. Cuda: InvalidArgument (see MemoryType). UCX failures:
  // Error(Transport, cause Ucx). The context and the memory must outlive the registration.
  UcxRegistration(UcxContext& context, void* addr, size_t length, MemoryType type = MemoryType::Host);
  ~UcxRegistration();  // ucp_mem_unmap
  UcxRegistration(UcxRegistration&& other) noexcept;
  UcxRegistration& operator=(UcxRegistration&& other) noexcept;
  UcxRegistration(const UcxRegistration&) = delete;
  UcxRegistration& operator=(const UcxRegistration&) = delete;

  void* address() const noexcept { return addr_; }
  size_t length() const noexcept { return length_; }
  MemoryType memory_type() const noexcept { return type_; }

  // The packed remote key a peer unpacks (UcxEndpoint::unpack_rkey) to reach this range.
  std::vector<uint8_t> packed_rkey() const;

  ucp_mem_h handle() const noexcept { return memh_; }

 private:
  void release() noexcept;

  ucp_context_h context_ = nullptr;
  ucp_mem_h memh_ = nullptr;
  void* addr_ = nullptr;
  size_t length_ = 0;
  MemoryType type_ = MemoryType::Host;
};

}  // namespace pdkv::exec
