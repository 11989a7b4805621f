// Transfer-plan compilation: one request's complete, validated list of byte reads a decode (D)
// rank issues against each prefill (P) rank, plus the notifications and the receive-side zeroing
// (docs/semantics.md §3, §6). It joins the pieces the other headers derive:
//   prefix_trim  -> which tokens / Mamba states D still needs and where they live on both sides,
//   tp_topology  -> which P ranks hold which KV heads, who is notified,
//   attention_reads / mamba_reads -> which bytes of a P block / page feed which bytes of D's,
// into (local region, local offset, remote region, remote offset, length) reads relative to the
// region bases, coalesced where contiguous on both sides.
//
// A compiled plan is validated before it is returned: every byte D needs is written exactly once
// and no read leaves a registered region on either side. vLLM trusted its descriptor counts and
// once reported a request ready after moving 64 KiB of a 256 KiB block (issue #52516); a plan
// that cannot cover its blocks is an error here, never a silent partial transfer.
//
// Attention layout: HND with K/V packed in the content dim, so a kernel block is
// heads x tokens x bytes_per_token_per_head. A token run that is not a whole block on both sides
// becomes one piece per head (this is how P and D block sizes that are not multiples of each other
// are served); a whole-block run of a head slice stays one piece. A Mamba state pair becomes the
// mamba_reads pieces at page stride block_len * ppl of each side.
//
// MLA regions (every attention region of an MLA model, and the `Mla` regions of a GQA model with
// MLA-typed layers) hold one latent head, the same bytes on every rank: D reads each token run
// whole from one P rank (TpMapping::mla_source_rank(), the first handshake target), in either KV
// layout, while the GQA regions of the same plan are split by heads as below. The coverage check
// derives D's expected bytes per region by its own kind.
//
// NHD layout (tokens x heads x bytes_per_head, both sides): a token run over ALL of the rank's
// heads is one contiguous piece at token_begin * heads * bytes_per_head, whole block or not. It
// is planned only where that holds, i.e. MLA or the same number of KV heads per rank on both
// sides; D reading a head subset of a P NHD block (heterogeneous heads per rank) is refused with
// UnsupportedLayout naming the fix (HND on P).
//
// Different layouts on D and P (with PlanContext::permute_on_receive, vLLM's
// enable_permute_local_kv): D's blocks are written as if D used P's layout (HND head slices, or
// NHD whole tokens when the heads per rank agree), and every D kernel block that receives a
// byte is listed for a receive-side permutation into D's own layout (TransferPlan::permute,
// GroupZero::permute_blocks; kv_permute.hpp), applied after the data and before the zero ranges.
// The coverage check proves every received byte is written exactly once in that staging layout;
// a permuted block must hold no token of D's own prefix-cache hit (the staging write would land
// on it), which is refused with UnsupportedLayout.
//
// Pipeline parallelism (pipeline.hpp): a context pairs one D rank with the TP ranks of ONE P
// stage. When the two stages hold different layer windows, regions are paired by layer: each
// group names its model layers (PlanGroup::layers), the region of a layer on a stage is its
// position among the group's layers inside that stage's window, and only the layers both stages
// hold are read (a read's local_region and remote_region then differ). The coverage check proves
// every D byte of those layers is written exactly once; pair_pipeline_stages proves each D layer
// is held by exactly one P stage, so the stage plans together write every D byte once.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "pdkv/core/engine_metadata.hpp"
#include "pdkv/core/error.hpp"
#include "pdkv/core/kv_permute.hpp"
#include "pdkv/core/mamba_state.hpp"
#include "pdkv/core/prefix_trim.hpp"
#include "pdkv/core/tp_topology.hpp"

namespace pdkv::core {

namespace plan_detail {
struct Prepared;  // per-context precomputation (core/src/plan_prepared.hpp), private
}

// Everything about one (D rank, P engine) pair that does not change per request. Build it once
// after the handshake.
struct PlanContext {
  EngineMetadata local;                 // the D rank (reader)
  // P ranks of ONE engine and ONE pipeline stage (one peer), any order; every rank read.
  std::vector<EngineMetadata> remote;
  TpMapping mapping;                    // compute_tp_mapping(local=D, remote=P)
  // Per-rank Mamba states (derive_mamba_state) of D's and P's TP size; required when a group is
  // Mamba, checked against the metadata's conv/ssm bytes.
  std::optional<MambaState> local_mamba;
  std::optional<MambaState> remote_mamba;
  // D permutes received attention blocks from P's KV layout into its own after the data (vLLM:
  // kv_connector_extra_config enable_permute_local_kv). Without it, different layouts on D and P
  // are refused with UnsupportedLayout naming this flag.
  bool permute_on_receive = false;
};

// One KV-cache group of the request.
struct PlanGroup {
  // Kind, cache mode, D's block ids still to fill, P's block ids, hit / computed tokens (see
  // prefix_trim.hpp). Tokens per block left at 0 are filled from the metadata: the kernel block
  // size for attention kinds, the logical block size for Mamba "all" mode. Non-zero values must
  // agree with the metadata for attention kinds (the byte geometry depends on them).
  GroupTrimInput trim;
  // Region indices used by the group's layers. Under vLLM's HMA every region is shared by one
  // layer of every group, so empty means "all regions".
  std::vector<uint32_t> regions;
  // The group's model layers over the WHOLE model (not one stage), strictly ascending; exclusive
  // with `regions`. Needed when D's and P's stages hold different layer windows: the region of
  // layer L on a stage is the number of the group's layers in [stage layer_begin, L) (vLLM's
  // hybrid KV cache manager gives a stage one tensor per position, shared by the layers at that
  // position in every group; a one-group model is the same rule), and only the layers inside both
  // windows are read. Empty: regions are paired by index (`regions`), which needs equal windows.
  std::vector<uint32_t> layers;
};

// One KV-cache group of the request as a non-owning view: the block ids and regions are read in
// place for the duration of the call (the C API and the bindings pass the caller's arrays through
// without copying them). Fields as GroupTrimInput / PlanGroup.
struct PlanGroupView {
  GroupKind kind = GroupKind::Attention;
  MambaCacheMode cache_mode = MambaCacheMode::None;
  std::span<const uint64_t> local_blocks;
  std::span<const uint64_t> remote_blocks;
  uint64_t local_tokens_per_block = 0;
  uint64_t remote_tokens_per_block = 0;
  uint64_t remote_computed_tokens = 0;
  uint64_t local_hit_tokens = 0;
  uint64_t sliding_window = 0;
  std::optional<uint64_t> local_first_block;
  uint64_t remote_first_block = 0;
  uint64_t local_kernel_blocks_per_id = 1;   // GroupTrimInput's: 1 = kernel ids, k > 1 = logical ids
  uint64_t remote_kernel_blocks_per_id = 1;
  std::span<const uint32_t> regions;  // empty: all regions
  std::span<const uint32_t> layers;   // empty: paired by region index (see PlanGroup::layers)
};

// The view of an owning group (valid while `g` lives and is not modified).
PlanGroupView view_of(const PlanGroup& g);

// The owning group of a view (its ids, regions and layers copied): view_of's inverse.
PlanGroup owned_copy(const PlanGroupView& v);

// Four bytes that are always zero: the padding after PlanRead's 32-bit fields, made members.
// The C API and the bindings hand a plan's reads out in place (pdkv_plan_read_t, Python and numpy
// views, Rust slices), so padding left as the allocator gave it would put stale heap bytes into
// every view: a plan's bytes would differ run to run and could not be compared or hashed. As
// members they are written by every construction and copy (and never by anything else: there is
// no way to give one a value).
struct ReadPadding {
  constexpr ReadPadding() noexcept {}
  friend constexpr bool operator==(ReadPadding, ReadPadding) noexcept { return true; }

 private:
  uint32_t zero_ = 0;
};

// One read in bytes relative to the region bases: D's [local_offset, +length) of local_region
// receives P's [remote_offset, +length) of remote_region.
// Built from its five fields in order, PlanRead{local_region, local_offset, remote_region,
// remote_offset, length} (a constructor, not an aggregate: the padding members take no value).
struct PlanRead {
  constexpr PlanRead() noexcept = default;
  constexpr PlanRead(uint32_t local_region_, uint64_t local_offset_, uint32_t remote_region_,
                     uint64_t remote_offset_, uint64_t length_) noexcept
      : local_region(local_region_),
        local_offset(local_offset_),
        remote_region(remote_region_),
        remote_offset(remote_offset_),
        length(length_) {}

  uint32_t local_region = 0;
  ReadPadding padding_after_local_region;
  uint64_t local_offset = 0;
  uint32_t remote_region = 0;
  ReadPadding padding_after_remote_region;
  uint64_t remote_offset = 0;
  uint64_t length = 0;
  friend bool operator==(const PlanRead&, const PlanRead&) = default;
};
// Every byte of a read is a member's: none is left uninitialised.
static_assert(std::has_unique_object_representations_v<PlanRead> && sizeof(PlanRead) == 40);

// Reads [begin, end) of a rank's listed reads issued again into another region pair: the same
// offsets and lengths with local_region / remote_region replaced (a region laid out like theirs).
// The copies are issued after listed read end - 1 and before listed read `end`, after any earlier
// repeat at the same position.
struct RegionRepeat {
  uint64_t begin = 0;
  uint64_t end = 0;
  uint32_t local_region = 0;
  uint32_t remote_region = 0;
  friend bool operator==(const RegionRepeat&, const RegionRepeat&) = default;
};

// A (D region, P region) pair an IndexedReads entry reads into and from.
struct RegionPair {
  uint32_t local_region = 0;
  uint32_t remote_region = 0;
  friend bool operator==(const RegionPair&, const RegionPair&) = default;
};

// One attention group's reads named by the request's block ids instead of listed one by one
// (CompileOptions::indexed_reads; docs/factored-plan.md, "Block-indexed reads"): for a rank's
// region pairs [pairs_begin, pairs_end), pair by pair, one read per listed id pair i < count,
// D's id ids[ids_begin + i] and P's id ids[ids_begin + count + i], each read the token positions
// [s, e) of its listed id (s = first_token for i = 0, else 0; e = min(tokens_per_id,
// first_token + tokens - i * tokens_per_id)):
//   D [id * local_id_bytes + s * token_bytes, +(e - s) * token_bytes) of the pair's D region,
//   P [id * remote_id_bytes + s * token_bytes, same length) of its P region,
// a read merged into the one before it (of the same pair) when it continues it on both sides,
// exactly as the listed plan coalesces. Offsets are computed modulo 2^64: the coverage check
// refuses an entry whose reads would leave a region (or wrap). The reads are issued after listed
// read at - 1, after the repeats issued there (RegionRepeat::end == at).
struct IndexedReads {
  uint32_t group = 0;           // the request's group these reads serve
  uint64_t at = 0;
  uint64_t ids_begin = 0;
  uint64_t count = 0;
  uint64_t first_token = 0;
  uint64_t tokens = 0;
  uint64_t tokens_per_id = 0;   // tokens one listed id holds (kernel blocks per id x tokens per block)
  uint64_t local_id_bytes = 0;  // bytes one listed id's kernel blocks span (kernel blocks per id x block_len)
  uint64_t remote_id_bytes = 0;
  uint64_t token_bytes = 0;     // bytes of one token on both sides
  uint64_t pairs_begin = 0;
  uint64_t pairs_end = 0;
  friend bool operator==(const IndexedReads&, const IndexedReads&) = default;
};

// All reads D issues against one P rank. A listed plan (compile_transfer_plan, and
// compile_transfer_plan_into without CompileOptions) holds them in `reads`, in issue order, and
// the other lists are empty. A factored plan lists only some of them: with region_repeats, the
// reads of the first region of each run of regions laid out alike, the others named as repeats
// (ends non-decreasing: the issue order is `reads` with each repeat's copies inserted at its
// `end`); with indexed_reads, an attention group's reads as an IndexedReads entry over the block
// ids it copied into `ids` (ats non-decreasing). Read the issue order through for_each_read /
// expand_reads, which work on every form.
struct RankReads {
  uint32_t p_rank = 0;
  std::vector<PlanRead> reads;
  std::vector<RegionRepeat> repeats;
  std::vector<IndexedReads> indexed;
  std::vector<uint64_t> ids;
  std::vector<RegionPair> region_pairs;
  uint64_t bytes = 0;

  // Whether some reads are not listed (repeats or indexed reads): read them through for_each_read.
  bool factored() const { return !repeats.empty() || !indexed.empty(); }
};

// Throws InvalidArgument naming the repeat or indexed entry when one is malformed (a repeat with
// begin >= end, end past the listed reads, ends decreasing; an entry with no ids, ids or region
// pairs past the rank's lists, token fields that leave an id reading nothing or past its
// tokens, a position past the listed reads, positions decreasing): what for_each_read and
// expand_reads check before they walk.
void check_repeats(const RankReads& rr);

// How many reads the rank issues (listed, repeated and indexed), after check_repeats.
size_t read_count(const RankReads& rr);

// Calls f(const PlanRead&) for every read of entry x of rank rr in issue order (no checks: after
// check_repeats).
template <class F>
void for_each_indexed_read(const RankReads& rr, const IndexedReads& x, F&& f) {
  const uint64_t* d = rr.ids.data() + x.ids_begin;
  const uint64_t* p = d + x.count;
  const uint64_t tb = x.token_bytes, tpi = x.tokens_per_id, end = x.first_token + x.tokens;
  for (uint64_t q = x.pairs_begin; q < x.pairs_end; ++q) {
    const RegionPair rp = rr.region_pairs[q];
    PlanRead cur{rp.local_region, d[0] * x.local_id_bytes + x.first_token * tb, rp.remote_region,
                 p[0] * x.remote_id_bytes + x.first_token * tb, (std::min(tpi, end) - x.first_token) * tb};
    for (uint64_t i = 1; i < x.count; ++i) {
      const uint64_t lo = d[i] * x.local_id_bytes, ro = p[i] * x.remote_id_bytes;
      const uint64_t len = std::min(tpi, end - i * tpi) * tb;
      if (cur.local_offset + cur.length == lo && cur.remote_offset + cur.length == ro) {
        cur.length += len;
        continue;
      }
      f(static_cast<const PlanRead&>(cur));
      cur.local_offset = lo;
      cur.remote_offset = ro;
      cur.length = len;
    }
    f(static_cast<const PlanRead&>(cur));
  }
}

// Calls f(const PlanRead&) for every read of the rank in issue order, after check_repeats: before
// listed read i (and, with i = reads.size(), after the last), the copies of every repeat ending
// at i, then the reads of every indexed entry at i.
template <class F>
void for_each_read(const RankReads& rr, F&& f) {
  if (!rr.factored()) {
    for (const PlanRead& r : rr.reads) f(r);
    return;
  }
  check_repeats(rr);
  const PlanRead* listed = rr.reads.data();
  const size_t n = rr.reads.size();
  size_t next_rep = 0, next_x = 0;
  for (size_t i = 0;; ++i) {
    for (; next_rep < rr.repeats.size() && rr.repeats[next_rep].end == i; ++next_rep) {
      const RegionRepeat& rep = rr.repeats[next_rep];
      for (uint64_t j = rep.begin; j < rep.end; ++j) {
        PlanRead c = listed[j];
        c.local_region = rep.local_region;
        c.remote_region = rep.remote_region;
        f(static_cast<const PlanRead&>(c));
      }
    }
    for (; next_x < rr.indexed.size() && rr.indexed[next_x].at == i; ++next_x) for_each_indexed_read(rr, rr.indexed[next_x], f);
    if (i == n) break;
    f(listed[i]);
  }
}

// The rank's reads in issue order (out is overwritten; its capacity is kept).
void expand_reads(const RankReads& rr, std::vector<PlanRead>& out);

// Turns a factored plan into the listed plan it stands for (no-op on a listed plan).
struct TransferPlan;
void expand_plan(TransferPlan& plan);

// Receive-side work for one group: zero these token ranges in every listed region (attention
// kinds) and never publish these Mamba slots as cache hits.
struct GroupZero {
  uint32_t group = 0;
  GroupKind kind = GroupKind::Attention;
  std::vector<uint32_t> regions;        // resolved (never empty when the group has regions)
  std::vector<ZeroRange> zero;          // kernel block + token range, D side
  std::vector<uint64_t> unfilled_states;
  // With TransferPlan::permute active: the D kernel blocks (ascending) that receive bytes and
  // must be permuted, in each of permute_regions (the group's regions that are not MLA). Done
  // after the data and before the zero ranges (which are in D's own layout).
  std::vector<uint64_t> permute_blocks;
  std::vector<uint32_t> permute_regions;
};

struct PlanStats {
  uint64_t pieces_before_coalescing = 0;
  uint64_t pieces_after_coalescing = 0;
  uint64_t bytes = 0;            // total bytes moved
  uint64_t attention_bytes = 0;
  uint64_t mamba_bytes = 0;
};

struct TransferPlan {
  // Whose plan this is: the D engine that reads (the context's local metadata) and the P engine
  // it reads from. An executor checks them against the posting agent and the named peer, so a
  // plan cannot be executed with the roles swapped.
  std::string d_engine_id;
  std::string p_engine_id;
  uint32_t d_rank = 0;
  uint32_t d_tp = 1;
  uint32_t p_tp = 1;
  // Pipeline stages of the pair (1 / 0 without PP) and the model layers the plan moves: the
  // intersection of the two stages' windows (layer_end kLayerEndOpen: through the last layer).
  // Its P ranks are TP ranks of stage p_pp_rank: a peer is (p_engine_id, p_pp_rank, p_rank).
  uint32_t d_pp_size = 1, d_pp_rank = 0;
  uint32_t p_pp_size = 1, p_pp_rank = 0;
  uint32_t layer_begin = 0, layer_end = kLayerEndOpen;
  std::vector<RankReads> ranks;         // ascending p_rank; only ranks with at least one read
  // P ranks D notifies after its reads (every handshake target, read or not; tp_topology.hpp)
  // and how many notifications each P rank waits for per request from this D stage (with D PP,
  // each D stage paired with the P stage notifies it: pipeline_notifications_expected).
  std::vector<uint32_t> notify_ranks;
  uint32_t notifications_per_p_rank = 1;
  std::vector<GroupZero> zero;          // one entry per group, in group order
  // The receive-side permutation of the listed blocks (inactive when D and P use one layout).
  BlockPermute permute;
  PlanStats stats;

  bool empty() const { return ranks.empty(); }  // a full prefix hit: notify only
};

// A context derived from what the handshake delivered: the TP mapping is computed from the
// metadata (D's TP size and rank, the P engine's TP size, D's total KV heads, MLA and hybrid
// flags), as pdkv_plan_context_new does when no mapping is given; the Mamba states are required
// for Mamba groups only. InvalidArgument when `remote` is empty; the errors of
// compute_tp_mapping (TP sizes that do not divide, ...). Nothing else is checked here:
// validate_plan_context / judge_plan_context judge the result.
PlanContext make_plan_context(EngineMetadata local, std::vector<EngineMetadata> remote,
                              std::optional<MambaState> local_mamba = std::nullopt,
                              std::optional<MambaState> remote_mamba = std::nullopt);

// Checks that a plan may be compiled for `ctx` at all: the structural checks (TP mapping vs the
// metadata's ranks and sizes, at least one P rank, one P engine, equal region counts and KV
// layouts on the P ranks, no overlapping regions: InvalidArgument / Incompatible as
// compile_transfer_plan documents), then that the peer passes the handshake D would run:
//  * validate_pair(ctx.local, p) is empty for every P rank p in ctx.remote (model fingerprint,
//    MLA, total KV heads, Mamba type, TP divisibility, region kinds, block_len vs kernel block
//    size x bytes per token, bytes per token per head, SSM / conv bytes vs TP, layouts, ...);
//  * validate_engine_ranks(ctx.remote) is empty (distinct tp_ranks, one engine id, TP size,
//    block counts, region count, ppl and model fingerprint agree);
//  * ctx.local_mamba / ctx.remote_mamba, when given, agree with the D / every P rank's metadata
//    in every field the metadata carries: mamba_type, tp_size, conv_bytes, ssm_bytes and each
//    conv projection's bytes.
// Any failure of the three throws Incompatible whose message lists EVERY problem ("D vs P rank
// 1: PDKV_ERR_INCOMPATIBLE total_kv_heads: ...; P ranks of engine 'p': ...; D: MambaState ssm_bytes ...").
// With pipeline stages, the P ranks must also agree on pp_size, pp_rank and the layer window
// (one stage per context), and D's and P's windows must overlap (validate_pair).
// compile_transfer_plan and validate_transfer_plan run the same checks on every call (after
// the request's own group / trimming errors, which are therefore reported first); when nothing
// is wrong they build no strings and allocate nothing per region, about 0.5 us for
// Nemotron-3-Nano P TP4 -> D TP2 with 6 regions. judge_plan_context runs them once and
// compile_transfer_plan_into(..., verdict) reuses the outcome (the C API does). Call this once
// after building a context to refuse a bad peer before any request arrives.
void validate_plan_context(const PlanContext& ctx);

// Compiles and validates one request's plan. Errors:
//  InvalidArgument - inconsistent context (mapping vs metadata ranks / sizes, missing Mamba
//                    states, a region index out of range, tokens_per_block disagreeing with
//                    the metadata, two regions of D or of a P rank overlapping: names both
//                    region indexes and byte ranges), naming the values; a group without
//                    `layers` for stages holding different windows, `layers` not strictly
//                    ascending or given with `regions`, a layer whose position in a stage's
//                    window is past that stage's regions or before its region's first user;
//  Incompatible    - a context validate_plan_context refuses: a P rank failing validate_pair
//                    with D, P ranks failing validate_engine_ranks (e.g. the same P rank twice),
//                    Mamba states disagreeing with the metadata; the message lists every item;
//  UnsupportedLayout - an attention group with different KV layouts on D and P (non-MLA) without
//                    permute_on_receive (names the flag), a P NHD block read by head subsets
//                    (different KV heads per rank: names HND on P as the fix), or a block to
//                    permute that holds tokens of D's prefix-cache hit;
//  NotFound        - a P rank the plan reads from has no metadata in ctx.remote;
//  Incompatible    - P and D geometry that cannot describe the same model (region counts of
//                    stages holding the same window, a layer in an MLA region on one side only,
//                    block_len vs kernel block size x bytes per token, head ratios, P ranks
//                    disagreeing on block_len or KV layout);
//  Coverage        - from prefix trimming, or when the reads would not write every needed D byte
//                    exactly once (names region, offset, length), or when a group writes into
//                    bytes of a D region that another group zeroes after receipt or holds as D's
//                    prefix-cache hit (one block id given to two groups: names both groups, the
//                    block and the region);
//  OutOfBounds     - a read would leave a registered region (names region, offset, length, size);
//  Overflow.
TransferPlan compile_transfer_plan(const PlanContext& ctx, const std::vector<PlanGroup>& groups);

// The same plan, compiled from views into `out`, whose buffers (per-rank read vectors, zero
// lists) are reused: a caller that keeps one TransferPlan per thread compiles request after
// request without growing the heap. Block ids are handled as runs of consecutive ids end to end
// (trimming, emission, coalescing and the coverage check), so the cost follows the number of id
// runs and of coalesced reads, not the number of kernel blocks. On error `out` is not a plan
// (its reads are cleared). Errors as compile_transfer_plan.
void compile_transfer_plan_into(const PlanContext& ctx, std::span<const PlanGroupView> groups,
                                TransferPlan& out);

// The request-independent checks of a context (validate_plan_context's), run once: the
// structural checks compile reports before a request's own errors, and the peer's handshake
// verdict it reports after them. Each outcome is kept (status and message, Ok when it passed),
// so that compiling with it reports exactly what compile_transfer_plan would, in the same
// order, without re-running the handshake per request. Only for a context that is not modified
// afterwards (the C API's immutable plan context handle holds one).
//
// When both outcomes are Ok, the verdict also carries what compilation can work out once for the
// context (issue 10 item 2): every rank's region sizes for the bounds check and the Mamba read
// template (one state page's reads relative to the page bases, coalesced per P rank, with each
// region's page stride). The template is verified when the verdict is built (its D reads tile
// the D page exactly, its P reads stay inside the P page) and is used only then; per request
// the planner multiplies block ids by strides and copies it, and the coverage check confirms,
// for each Mamba group, that the plan's reads equal the template at every page base (which it
// derives itself from the trimmed states and the strides) and that each page is in bounds,
// which with the verified template is the same guarantee as checking every read. The plan is
// identical, byte for byte and in order, to the one compiled without a verdict.
struct PlanContextVerdict {
  Status context_status = Status::Ok;
  std::string context_message;
  Status peer_status = Status::Ok;
  std::string peer_message;
  std::shared_ptr<const plan_detail::Prepared> prepared;  // null: per-read path only
};
PlanContextVerdict judge_plan_context(const PlanContext& ctx);
void compile_transfer_plan_into(const PlanContext& ctx, std::span<const PlanGroupView> groups,
                                TransferPlan& out, const PlanContextVerdict& verdict);

// How compile_transfer_plan_into writes the plan.
struct CompileOptions {
  // Factored form (RankReads): a region laid out like the one emitted before it (same block
  // lengths on both sides, same kind, the same P rank, vLLM's usual hybrid-attention regions) is
  // recorded as a RegionRepeat of that region's reads instead of as copies of them, and the
  // coverage check proves it through the region it repeats (docs/factored-plan.md, stage 1). The
  // plan stands for exactly the listed plan (expand_plan gives it, read for read); its stats
  // count the reads it issues. The C API's plan handles compile this form and expand a rank's
  // reads on first use.
  bool region_repeats = false;
  // Factored form (RankReads::indexed): an attention group whose block ids are fragmented (many
  // runs), laid out linearly in every region it uses (NHD, or one head per rank, or MLA) with the
  // same geometry and the same P rank in each, the only attention group in those regions, and
  // whose D and P lists start at the same kernel position within an id, is recorded as one
  // IndexedReads entry over a copy of its block ids instead of as reads: the trimming walk,
  // emission and the coverage check's per-span ranges are replaced by passes over the ids, and
  // the check proves the entry by deriving it again from the request (docs/factored-plan.md,
  // "Block-indexed reads"). Only with a verdict (its region sizes bound the ids). The plan stands
  // for exactly the listed plan (expand_plan gives it); its stats count the reads it issues.
  bool indexed_reads = false;
  // Runs of ids (spans consecutive on both sides) from which a group is read block-indexed: below
  // it the listed reads cost less than the passes over every id (measured with bench/plan_floor).
  uint64_t indexed_min_runs = 16;
};
void compile_transfer_plan_into(const PlanContext& ctx, std::span<const PlanGroupView> groups,
                                TransferPlan& out, const PlanContextVerdict& verdict, const CompileOptions& options);

// The plan's coverage and bounds check, usable on its own (e.g. on a plan that was edited or
// deserialised), on listed and factored plans alike (a malformed RegionRepeat is InvalidArgument,
// see check_repeats): the D bytes the plan must write are recomputed from the groups (prefix trimming
// and the D rank's own head / state layout, independently of the reads) and compared with the
// union of the plan's local ranges; attention bytes follow the layout D's blocks are written in
// (D's own, or P's when D permutes on receive: HND head slices or NHD token ranges), and the
// plan's permutation and permuted blocks must be those D needs. Throws the context errors of compile_transfer_plan (InvalidArgument,
// UnsupportedLayout, ...), Coverage (overlap, missing or unexpected bytes, naming region, offset
// and length) or OutOfBounds (naming side, region, offset, length, size); a context that
// validate_plan_context refuses is Incompatible here too.
void validate_transfer_plan(const TransferPlan& plan, const PlanContext& ctx,
                            const std::vector<PlanGroup>& groups);
void validate_transfer_plan_views(const TransferPlan& plan, const PlanContext& ctx,
                                  std::span<const PlanGroupView> groups);

// A human-readable JSON dump for debugging (stable key order, one object per read).
std::string plan_to_json(const TransferPlan& plan);

}  // namespace pdkv::core
