#include "ucx/memory.hpp"

#include <cstring>
#include <string>
#include <utility>

#include "pdkv/core/error.hpp"
#include "ucx/status.hpp"

namespace pdkv::exec {

const char* memory_type_name(MemoryType type) noexcept {
  switch (type) {
    case MemoryType::Host: return "host";
    case MemoryType::Cuda: return "cuda";
  }
  return "unknown";
}

std::string packed_rkey_layout_error(std::span<const uint8_t> packed) {
  constexpr size_t kMapBytes = 8;
  if (packed.size() < kMapBytes + 1) {
    return std::to_string(packed.size()) + " bytes cannot hold the 8-byte domain map and the memory type";
  }
  uint64_t map = 0;
  for (size_t i = 0; i < kMapBytes; ++i) map |= static_cast<uint64_t>(packed[i]) << (8 * i);
  size_t at = kMapBytes + 1;
  for (unsigned bit = 0; bit < 64; ++bit) {
    if ((map >> bit & 1) == 0) continue;
    if (at >= packed.size()) {
      return "domain " + std::to_string(bit) + "'s size byte is at offset " + std::to_string(at) +
             ", past the key's " + std::to_string(packed.size()) + " bytes";
    }
    const size_t len = packed[at];
    if (len > packed.size() - at - 1) {
      return "domain " + std::to_string(bit) + " announces " + std::to_string(len) + " bytes at offset " +
             std::to_string(at + 1) + " but the key has " + std::to_string(packed.size() - at - 1) + " left";
    }
    at += 1 + len;
  }
  return {};
}

UcxRegistration::UcxRegistration(UcxContext& context, void* addr, size_t length, MemoryType type)
    : context_(context.handle()), addr_(addr), length_(length), type_(type) {
  using core::Status;
  if (type == MemoryType::Cuda) {
    core::fail(Status::InvalidArgument,
               "memory type cuda: device memory needs a CUDA-enabled UCX; this build's UCX 1.13.1 "
               "has none (register host memory, or rebuild against a UCX with CUDA support)");
  }
  if (type != MemoryType::Host) {
    core::fail(Status::InvalidArgument,
               "memory type " + std::to_string(static_cast<int>(type)) + " is not host (0) or cuda (1)");
  }
  if (addr == nullptr) core::fail(Status::InvalidArgument, "registering memory: address is null");
  if (length == 0) core::fail(Status::InvalidArgument, "registering memory: length is 0");
  ucp_mem_map_params_t params{};
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                      UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
  params.address = addr;
  params.length = length;
  params.memory_type = UCS_MEMORY_TYPE_HOST;
  ucs_status_t st = ucp_mem_map(context_, &params, &memh_);
  if (st != UCS_OK) {
    memh_ = nullptr;
    throw_ucx("ucp_mem_map of " + std::to_string(length) + " bytes at " +
                  std::to_string(reinterpret_cast<uintptr_t>(addr)),
              st);
  }
}

void UcxRegistration::release() noexcept {
  if (memh_ != nullptr) ucp_mem_unmap(context_, memh_);
  memh_ = nullptr;
}

UcxRegistration::~UcxRegistration() { release(); }

UcxRegistration::UcxRegistration(UcxRegistration&& other) noexcept
    : context_(other.context_), memh_(std::exchange(other.memh_, nullptr)), addr_(other.addr_),
      length_(other.length_), type_(other.type_) {}

UcxRegistration& UcxRegistration::operator=(UcxRegistration&& other) noexcept {
  if (this != &other) {
    release();
    context_ = other.context_;
    memh_ = std::exchange(other.memh_, nullptr);
    addr_ = other.addr_;
    length_ = other.length_;
    type_ = other.type_;
  }
  return *this;
}

std::vector<uint8_t> UcxRegistration::packed_rkey() const {
  if (memh_ == nullptr) core::fail(core::Status::InvalidArgument, "packed_rkey of a moved-from registration");
  void* buf = nullptr;
  size_t size = 0;
  ucs_status_t st = ucp_rkey_pack(context_, memh_, &buf, &size);
  if (st != UCS_OK) throw_ucx("ucp_rkey_pack", st);
  std::vector<uint8_t> out(size);
  std::memcpy(out.data(), buf, size);
  ucp_rkey_buffer_release(buf);
  return out;
}

}  // namespace pdkv::exec
