// Internals shared by transfer-plan compilation (transfer_plan.cpp) and its independent
// coverage check (plan_coverage.cpp). Not installed; not part of the public API.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "pdkv/core/attention_descriptors.hpp"
#include "pdkv/core/mamba_split.hpp"
#include "pdkv/core/transfer_plan.hpp"
#include "plan_prepared.hpp"

namespace pdkv::core::plan_detail {

inline std::string s(uint64_t v) { return std::to_string(v); }

// Tokens [token_begin, +num_tokens) of the request. The first token lives at local_token_begin of
// D block local_block and at remote_token_begin of P block remote_block; token k of the span lives
// in D block local_block + (local_token_begin + k) / local_tokens_per_block (ids are consecutive
// over the span) at offset (local_token_begin + k) % local_tokens_per_block, likewise on P.
struct SpanRun {
  SpanRun() = default;
  // Every field from a register: the trimmer appends spans with emplace_back(fields...), which
  // stores each field once (a value-initialised element is zeroed first, then overwritten).
  SpanRun(uint64_t token, uint64_t tokens, uint64_t lblock, uint64_t ltoken, uint64_t rblock, uint64_t rtoken,
          uint64_t runs)
      : token_begin(token), num_tokens(tokens), local_block(lblock), local_token_begin(ltoken),
        remote_block(rblock), remote_token_begin(rtoken), block_runs(runs) {}
  uint64_t token_begin = 0;
  uint64_t num_tokens = 0;
  uint64_t local_block = 0;
  uint64_t local_token_begin = 0;
  uint64_t remote_block = 0;
  uint64_t remote_token_begin = 0;
  // How many block-bounded TokenRuns trim_group would return for this span (splits at every
  // block boundary of either side): the planner's pieces_before_coalescing statistic.
  uint64_t block_runs = 0;
};

// A group with its tokens-per-block filled from the metadata and its region lists resolved: D's
// regions and, parallel to them, the P regions holding the same layers (views of the caller's
// list, of Trimmed::all_regions, or of Trimmed::paired_* for a group paired by layer).
struct ResolvedGroup {
  PlanGroupView g;
  std::span<const uint32_t> regions;
  std::span<const uint32_t> remote_regions;
};

// Per-region attention geometry: local / remote kernel page, tokens per block, bytes per token
// per head, and the head-granular reads of one token (attention_reads on per-token "blocks").
struct AttentionRegion {
  uint64_t local_block_len = 0, remote_block_len = 0;
  bool mla = false;  // an MLA latent: one head, read whole from mla_source_rank()
  uint64_t head_bytes_per_token = 0;
  // NHD (tokens x heads x bytes): set only when every read covers all heads of both ranks, so
  // that a token run is one contiguous range on each side (attention_layout refuses the rest).
  bool nhd = false;
  uint64_t local_token_bytes = 0, remote_token_bytes = 0;
  std::vector<AttentionRead> token_reads;
};

// The emitter's block-indexed form of one attention group (CompileOptions::indexed_reads,
// plan_indexed.hpp): `on` when the trimming walk was skipped for the group and its reads are
// recorded as one IndexedReads entry per compile. Positions are indexes into the group's D and P
// lists; the fields are those of IndexedReads.
struct IndexedGroup {
  bool on = false;
  uint64_t a0 = 0, b0 = 0, count = 0;  // D's and P's first listed position read, ids per side
  uint64_t first_token = 0, tokens = 0, tokens_per_id = 0;
  uint64_t kernel_blocks = 0;  // kernel blocks the tokens touch: the listed plan's pieces per region
  uint64_t runs = 0;           // runs of ids consecutive on both sides: reads per region
  uint64_t max_local = 0, max_remote = 0;  // the largest ids read on each side
  uint32_t p_rank = 0;
  uint64_t local_id_bytes = 0, remote_id_bytes = 0, token_bytes = 0;
};

// Per-call working memory, reused across calls on one thread so that compilation does not grow
// the heap request after request.
struct Trimmed {
  std::vector<uint32_t> all_regions;     // 0..regions-1, what an empty region list means
  std::vector<uint32_t> paired_local, paired_remote;  // regions of groups paired by layer
  std::vector<ResolvedGroup> groups;
  std::vector<SpanRun> spans;           // attention spans of every group, in group order
  std::vector<size_t> span_begin;        // group g's spans: [span_begin[g], span_begin[g+1])
  std::vector<GroupTrim> mamba;          // Mamba groups' trims (empty for attention groups)
  std::vector<std::vector<ZeroRange>> zero;  // attention groups' zero ranges
  // Per group: read block-indexed (its walk skipped, no spans) or not. Only compile sets `on`;
  // validate_transfer_plan walks every group.
  std::vector<IndexedGroup> indexed;
  // The layout D's attention blocks are written in and whether D permutes them on receive
  // (attention_layouts), known once a group with a head-split region was resolved.
  KvLayout staging = KvLayout::HND;
  bool permute = false;
  // Mamba groups the emitter wrote from the context's template (MambaHint), and per hint the index
  // of each template rank's first read; only compile fills them, and check_coverage accepts a
  // hint only after comparing the reads it points at.
  std::vector<MambaHint> hints;
  std::vector<size_t> hint_index;

  // Scratch of the emitter and the coverage check, kept here so that one thread-local lookup
  // serves a whole compile (each thread_local of a shared library costs a __tls_get_addr call).
  std::vector<std::pair<size_t, size_t>> paired_at;
  GroupTrimInput mamba_in;    // trim_groups' input for one Mamba group
  AttentionRegion attention;  // the emitter's attention geometry of the region at hand
  std::vector<size_t> rank_used;  // the emitter's reads per P rank (PlanBuilder)
  std::vector<size_t> rank_ids_used;  // the emitter's ids per P rank (PlanBuilder::add_indexed)
  std::vector<MambaRead> mreads;
  std::vector<uint64_t> remote_stride;
  std::vector<uint64_t> blocks;
  std::vector<uint32_t> regions;
  // Trivial (no member initialisers), so that copying lists of them is a memmove.
  struct Range {
    uint64_t begin;
    uint64_t end;
    friend bool operator==(const Range&, const Range&) = default;
  };
  static_assert(std::is_trivial_v<Range>);
  // Lists that grow by a known count and are then written through a pointer: resize leaves the
  // new elements uninitialised (a value-initialised resize would zero them first, a second pass
  // over every range of a fragmented request).
  template <class T>
  struct UninitAllocator : std::allocator<T> {
    template <class U>
    struct rebind {
      using other = UninitAllocator<U>;
    };
    UninitAllocator() = default;
    template <class U>
    UninitAllocator(const UninitAllocator<U>&) noexcept {}
    template <class U>
    void construct(U* p) noexcept {
      ::new (static_cast<void*>(p)) U;
    }
    template <class U, class... A>
    void construct(U* p, A&&... a) {
      ::new (static_cast<void*>(p)) U(std::forward<A>(a)...);
    }
  };
  using RangeList = std::vector<Range, UninitAllocator<Range>>;
  std::vector<RangeList> got, want;
  // A region repeat's D ranges, not copied: got[r] continues with got[src][begin, end) (the ranges
  // its source segment added). Always logically last in got[r]: anything else added to got[r]
  // copies them in first (check_coverage's materialise).
  struct Alias {
    bool set = false;
    uint32_t src = 0;
    size_t begin = 0, end = 0;  // begin < end
    Range tail{};               // got[src][end - 1] when recorded (a later merge may extend it there)
  };
  std::vector<Alias> alias;
  std::vector<uint64_t> d_size, p_size;
  // check_coverage's view of each D region: which groups use it, the earlier region whose
  // expected ranges it shares (all of them: same_as; the attention ones: att_as; -1: none),
  // whether it was verified through its same_as region, whether its plan ranges are listed as
  // its expected ones, and whether its shared lists are sorted yet.
  struct RegionClass {
    uint64_t groups = 0, att_groups = 0;
    int same_as = -1, att_as = -1;
    bool verified = false, alike = false;
    // Attention list: 0 as derived, 1 sorted and merged, 2 overlaps itself, 3 as derived and
    // proven disjoint from its group's block ids (check_coverage's IdMarks). Mamba
    // list: 0, 1 or 2.
    uint8_t att_state = 0, mam_state = 0;
  };
  std::vector<RegionClass> region_class;
  std::vector<RangeList> mam;  // expected Mamba pages (want: attention ranges)
  RangeList merged;
  // Bytes of one D region that no group may write (check_coverage's shared-block check): an
  // attention group's zero ranges and its listed blocks' prefix-hit tokens, each with its group,
  // its D kernel block and whether it is a hit (D's cached tokens) or a zero range.
  struct Guard {
    uint64_t begin;
    uint64_t end;
    uint64_t block;
    uint64_t token_begin;
    uint64_t token_end;
    uint64_t last_block;  // > block: the guard runs on through the next blocks up to token_end of this one
    uint32_t group;
    bool held;
  };
  std::vector<Guard> guards;
  std::vector<uint64_t> id_bits;  // one bit per D block id (IdMarks), all clear between uses
  // check_coverage's view of the plan's indexed entries, per group: the entry that reads it (its
  // rank's index in plan.ranks and its index there).
  struct IndexedProof {
    bool on = false;
    size_t rank = 0, entry = 0;
  };
  std::vector<IndexedProof> proofs;
  std::vector<std::vector<std::pair<size_t, size_t>>> consumed;  // per plan rank: reads a hint covered
  // accept_hints' per template rank view: the plan rank's reads, the template's reads, the P
  // rank's page strides and region sizes (looked up once per call, not per page).
  struct HintRank {
    const PlanRead* reads = nullptr;
    size_t num_reads = 0;
    const TemplateRead* tmpl = nullptr;
    size_t num_tmpl = 0;
    const uint64_t* stride = nullptr;
    size_t num_stride = 0;
    const uint64_t* psize = nullptr;
    size_t num_psize = 0;
    uint64_t extent = 0;
    std::vector<std::pair<size_t, size_t>>* consumed = nullptr;
  };
  std::vector<HintRank> hint_ranks;
};

// Checks the context (mapping vs metadata, remote ranks of one engine, Mamba states), resolves
// every group into t.groups. Errors as compile_transfer_plan documents.
// With a verdict, its context outcome replaces check_context (same error, same point).
void resolve(const PlanContext& ctx, std::span<const PlanGroupView> groups, Trimmed& t,
             const PlanContextVerdict* verdict = nullptr);

// Trims every resolved group into t (spans for attention, GroupTrim for Mamba); errors are
// prefixed "group <i> (<kind>)" as trim_prefix does.
void trim_groups(Trimmed& t);

// The KV layout D's attention blocks are written in (`staging`) and whether D then permutes them
// into its own layout: D's layout when both agree (HND for MLA, where one latent head makes both
// layouts the same bytes), P's when they differ and ctx.permute_on_receive is set.
// UnsupportedLayout when they differ without the flag (naming it), or when P's NHD blocks would
// be read by head subsets (different KV heads per rank: one piece per token; names HND on P).
struct AttentionLayouts {
  KvLayout staging = KvLayout::HND;
  bool permute = false;
};
AttentionLayouts attention_layouts(const PlanContext& ctx);

// The permutation of D's attention blocks for `layouts` (inactive without one).
BlockPermute block_permute(const PlanContext& ctx, const AttentionLayouts& layouts);

// D kernel blocks of an attention group that receive bytes (ascending, unique), from its spans;
// UnsupportedLayout when one of them also holds tokens of D's own prefix-cache hit (a staging
// write in P's layout would land on them). `where` names the group on failure.
void received_blocks(std::span<const SpanRun> spans, uint64_t local_tokens_per_block, uint64_t local_hit_tokens,
                     const BlockPermute& permute, std::vector<uint64_t>& out);

// The metadata of P rank p; NotFound when ctx.remote does not hold it.
const EngineMetadata& remote_rank(const PlanContext& ctx, uint32_t p);

// Attention bytes per token of one rank's region: block_len / kernel_block_size, exact.
uint64_t region_bytes_per_token(const EngineMetadata& m, uint32_t region, const char* side);

// Bytes of one region: block_len * num_blocks (the registered size).
uint64_t region_size(const EngineMetadata& m, uint32_t region);

// Logical Mamba page stride of one region: block_len * ppl, checked to hold `page_bytes`.
uint64_t mamba_page_stride(const EngineMetadata& m, uint32_t region, uint64_t page_bytes,
                           const char* side);

// The coverage and bounds check on resolved, trimmed groups; with `pre`, t.hints name runs of
// reads to compare with pre->mamba (each accepted one stands for its whole page).
void check_coverage(const TransferPlan& plan, const PlanContext& ctx, Trimmed& t, const Prepared* pre = nullptr);

}  // namespace pdkv::core::plan_detail
