// Mamba descriptor geometry: (offset, length) pieces of one logical page, replicated over every
// logical block of every region. All address arithmetic is overflow-checked because bases,
// block lengths and counts come from the peer's handshake.
#include "pdkv/core/mamba_descriptors.hpp"

#include <string>

#include "pdkv/core/checked_math.hpp"
#include "pdkv/core/error.hpp"

namespace pdkv::core {

namespace {

// A piece of the logical page that becomes one descriptor per block.
struct PagePiece {
  uint64_t offset = 0;
  uint64_t length = 0;
};

// Logical page count and stride of a region, after checking the state fits in one page.
struct PageGrid {
  uint64_t pages = 0;
  uint64_t stride = 0;
};

PageGrid page_grid(const Region& r, uint64_t ppl, const MambaState& s, size_t index) {
  const std::string where = "mamba region " + std::to_string(index);
  if (ppl == 0) fail(Status::InvalidArgument, where + ": physical_blocks_per_logical 0 must be >= 1");
  if (r.num_blocks % ppl != 0) {
    fail(Status::InvalidArgument, where + ": num_blocks " + std::to_string(r.num_blocks) +
                                      " is not a multiple of physical_blocks_per_logical " +
                                      std::to_string(ppl));
  }
  PageGrid g;
  g.pages = r.num_blocks / ppl;
  g.stride = mul_checked(r.block_len, ppl, "mamba page stride");
  if (s.page_bytes() > g.stride) {
    fail(Status::OutOfBounds, where + ": the Mamba state of " + std::to_string(s.page_bytes()) +
                                  " bytes does not fit the logical page of block_len " +
                                  std::to_string(r.block_len) + " * ppl " + std::to_string(ppl) +
                                  " = " + std::to_string(g.stride) +
                                  " bytes (check block_len and physical_blocks_per_logical)");
  }
  // The last byte of the region must be addressable; every descriptor below lies before it.
  add_checked(r.base, mul_checked(g.pages, g.stride, "mamba region bytes"), "mamba region end");
  return g;
}

std::vector<Descriptor> expand(const std::vector<Region>& regions, uint64_t ppl,
                               const MambaState& s, const std::vector<PagePiece>& pieces) {
  std::vector<Descriptor> out;
  for (size_t i = 0; i < regions.size(); ++i) {
    const Region& r = regions[i];
    const PageGrid g = page_grid(r, ppl, s, i);
    out.reserve(out.size() + pieces.size() * g.pages);
    for (const PagePiece& piece : pieces) {
      for (uint64_t b = 0; b < g.pages; ++b) {
        const uint64_t page = add_checked(r.base, mul_checked(b, g.stride, "mamba address"),
                                          "mamba address");
        out.push_back({add_checked(page, piece.offset, "mamba address"), piece.length});
      }
    }
  }
  return out;
}

// The reads from one P rank, as pieces of the P page (remote) or the D page (local).
std::vector<PagePiece> read_pieces(const std::vector<MambaRead>& reads, uint32_t p_rank,
                                   bool remote, uint64_t page_bytes) {
  std::vector<PagePiece> pieces;
  for (const MambaRead& rd : reads) {
    if (rd.p_rank != p_rank) continue;
    const uint64_t off = remote ? rd.remote_offset : rd.local_offset;
    const uint64_t end = add_checked(off, rd.length, "mamba read end");
    if (end > page_bytes) {
      fail(Status::OutOfBounds, std::string("mamba read of part ") + rd.part + " from prefill rank " +
                                    std::to_string(p_rank) + " covers [" + std::to_string(off) +
                                    ", " + std::to_string(end) + ") which leaves the " +
                                    (remote ? "prefill" : "decode") + " page of " +
                                    std::to_string(page_bytes) + " bytes");
    }
    pieces.push_back({off, rd.length});
  }
  return pieces;
}

}  // namespace

std::vector<Descriptor> mamba_local_descriptors(const std::vector<Region>& regions, uint64_t ppl,
                                                const MambaState& state) {
  std::vector<PagePiece> pieces;
  for (const ConvProjection& p : state.projections) pieces.push_back({p.offset, p.bytes});
  pieces.push_back({state.conv_bytes, state.ssm_bytes});
  return expand(regions, ppl, state, pieces);
}

std::vector<Descriptor> mamba_remote_descriptors(const std::vector<Region>& p_regions,
                                                 uint64_t p_ppl, const MambaState& p_state,
                                                 const std::vector<MambaRead>& reads,
                                                 uint32_t p_rank) {
  return expand(p_regions, p_ppl, p_state,
                read_pieces(reads, p_rank, /*remote=*/true, p_state.page_bytes()));
}

std::vector<Descriptor> mamba_local_split_descriptors(const std::vector<Region>& d_regions,
                                                      uint64_t d_ppl, const MambaState& d_state,
                                                      const std::vector<MambaRead>& reads,
                                                      uint32_t p_rank) {
  return expand(d_regions, d_ppl, d_state,
                read_pieces(reads, p_rank, /*remote=*/false, d_state.page_bytes()));
}

std::vector<uint64_t> mamba_descriptor_ids(const std::vector<uint64_t>& logical_block_ids,
                                           uint64_t num_logical_blocks, uint64_t num_regions,
                                           uint64_t descs_per_region, uint64_t first_id) {
  for (uint64_t b : logical_block_ids) {
    if (b >= num_logical_blocks) {
      fail(Status::OutOfBounds, "mamba block id " + std::to_string(b) +
                                    " is out of range for " + std::to_string(num_logical_blocks) +
                                    " logical blocks");
    }
  }
  std::vector<uint64_t> ids;
  const uint64_t rows = mul_checked(num_regions, descs_per_region, "mamba descriptor rows");
  for (uint64_t row = 0; row < rows; ++row) {
    const uint64_t row_base =
        add_checked(first_id, mul_checked(row, num_logical_blocks, "mamba descriptor id"),
                    "mamba descriptor id");
    for (uint64_t b : logical_block_ids) ids.push_back(add_checked(row_base, b, "mamba descriptor id"));
  }
  return ids;
}

}  // namespace pdkv::core
