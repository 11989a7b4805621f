#include "pdkv/core/block_ids.hpp"

#include <string>

#include "pdkv/core/checked_math.hpp"
#include "pdkv/core/error.hpp"

namespace pdkv::core {

const char* group_kind_name(GroupKind k) noexcept {
  switch (k) {
    case GroupKind::Attention: return "attention";
    case GroupKind::SlidingWindow: return "sliding_window";
    case GroupKind::Mamba: return "mamba";
  }
  return "unknown";
}

std::vector<uint64_t> logical_to_kernel_block_ids(const std::vector<uint64_t>& logical,
                                                  GroupKind kind, uint64_t blocks_per_logical) {
  require(blocks_per_logical > 0, Status::InvalidArgument,
          "blocks_per_logical 0 is invalid: an engine has at least 1 kernel block per logical block");
  // One Mamba block is the whole state: expanding it would read ppl unrelated states.
  if (kind == GroupKind::Mamba || blocks_per_logical == 1) return logical;
  std::vector<uint64_t> out;
  out.reserve(mul_checked(logical.size(), blocks_per_logical, "kernel block count"));
  for (uint64_t l : logical) {
    const uint64_t first = mul_checked(l, blocks_per_logical, "kernel block id");
    add_checked(first, blocks_per_logical - 1, "kernel block id");
    for (uint64_t j = 0; j < blocks_per_logical; ++j) out.push_back(first + j);
  }
  return out;
}

std::vector<uint64_t> map_block_ids_for_block_size_ratio(const std::vector<uint64_t>& local,
                                                         GroupKind kind,
                                                         uint64_t block_size_ratio,
                                                         uint64_t remote_len) {
  require(block_size_ratio > 0, Status::InvalidArgument,
          "block_size_ratio 0 is invalid: the local kernel block must hold >= 1 remote block");
  if (kind == GroupKind::Mamba) return local;  // states do not subdivide
  std::vector<uint64_t> out;
  for (uint64_t b : local) {
    const uint64_t first = mul_checked(b, block_size_ratio, "sub-block id");
    add_checked(first, block_size_ratio - 1, "sub-block id");
    for (uint64_t j = 0; j < block_size_ratio; ++j) {
      // P's list ends where its tokens end: sub-blocks past it have no source.
      if (out.size() == remote_len) return out;
      out.push_back(first + j);
    }
  }
  return out;
}

std::vector<uint64_t> descriptor_ids(const std::vector<GroupBlockIds>& groups,
                                     const DescriptorLayout& layout) {
  require(layout.num_blocks > 0, Status::InvalidArgument, "descriptor layout num_blocks is 0");
  require(layout.block_size_ratio > 0, Status::InvalidArgument,
          "descriptor layout block_size_ratio is 0");
  require(layout.blocks_per_logical > 0, Status::InvalidArgument,
          "descriptor layout blocks_per_logical is 0");
  const uint64_t nb = mul_checked(layout.num_blocks, layout.block_size_ratio, "attention blocks");
  const uint64_t n_fa = mul_checked(layout.num_attention_regions, nb, "attention descriptors");

  bool has_mamba = false;
  for (const auto& g : groups) has_mamba = has_mamba || g.kind == GroupKind::Mamba;

  auto check_attention = [&](uint64_t b) {
    if (b >= nb) {
      fail(Status::OutOfBounds, "attention block id " + std::to_string(b) +
                                    " is outside the region of " + std::to_string(nb) +
                                    " kernel blocks (num_blocks " +
                                    std::to_string(layout.num_blocks) + " x block_size_ratio " +
                                    std::to_string(layout.block_size_ratio) + ")");
    }
  };

  std::vector<uint64_t> out;
  if (!has_mamba) {
    for (uint64_t r = 0; r < layout.num_attention_regions; ++r) {
      for (const auto& g : groups) {
        for (uint64_t b : g.ids) {
          check_attention(b);
          out.push_back(r * nb + b);  // r*nb + b < n_fa, already overflow-checked
        }
      }
    }
    return out;
  }

  if (layout.num_blocks % layout.blocks_per_logical != 0) {
    fail(Status::InvalidArgument,
         "num_blocks " + std::to_string(layout.num_blocks) +
             " is not a multiple of blocks_per_logical " +
             std::to_string(layout.blocks_per_logical) +
             ": a Mamba region holds whole logical pages");
  }
  const uint64_t mamba_stride = layout.num_blocks / layout.blocks_per_logical;
  add_checked(n_fa, mul_checked(layout.num_mamba_regions, mamba_stride, "Mamba descriptors"),
              "descriptor count");
  for (const auto& g : groups) {
    if (g.kind == GroupKind::Mamba) {
      for (uint64_t r = 0; r < layout.num_mamba_regions; ++r) {
        for (uint64_t b : g.ids) {
          if (b >= mamba_stride) {
            fail(Status::OutOfBounds, "Mamba block id " + std::to_string(b) +
                                          " is outside the region of " +
                                          std::to_string(mamba_stride) + " logical pages");
          }
          out.push_back(n_fa + r * mamba_stride + b);
        }
      }
    } else {
      for (uint64_t r = 0; r < layout.num_attention_regions; ++r) {
        for (uint64_t b : g.ids) {
          check_attention(b);
          out.push_back(r * nb + b);
        }
      }
    }
  }
  return out;
}

}  // namespace pdkv::core
