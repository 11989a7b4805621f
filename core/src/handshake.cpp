// Handshake rules (docs/semantics.md §5), each producing its own Incompatibility so an operator
// fixes a deployment in one round instead of one restart per error.
#include "pdkv/core/handshake.hpp"

#include <algorithm>
#include <cstdio>
#include <string>

#include "pdkv/core/mamba_kind.hpp"

namespace pdkv::core {
namespace {

__extension__ typedef unsigned __int128 u128;  // exact products of u64 byte counts and u32 factors

std::string num(uint64_t v) { return std::to_string(v); }
std::string yes_no(bool b) { return b ? "on" : "off"; }
std::string hex64(uint64_t v) {
  char buf[19];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

class Items {
 public:
  void add(Status s, std::string field, std::string lv, std::string rv, std::string msg,
           std::string fix) {
    items_.push_back({s, std::move(field), std::move(lv), std::move(rv), std::move(msg),
                      std::move(fix)});
  }
  std::vector<Incompatibility> take() { return std::move(items_); }

 private:
  std::vector<Incompatibility> items_;
};

bool divides_either_way(uint32_t a, uint32_t b) { return a % b == 0 || b % a == 0; }

// KV heads one rank holds: K/tp, or 1 replicated head when tp > K (vLLM: max(1, K // tp)).
uint32_t heads_per_rank(const EngineMetadata& m) {
  if (m.use_mla) return 1;
  return m.total_kv_heads >= m.tp_size ? m.total_kv_heads / m.tp_size : 1;
}

// Rules that look at one side only; `side` is "local" or "remote".
void check_one_side(const EngineMetadata& m, bool local, Items& out) {
  const char* side = local ? "local" : "remote";
  auto lv = [&](const std::string& v) { return local ? v : std::string(); };
  auto rv = [&](const std::string& v) { return local ? std::string() : v; };
  // Built only when a rule fails (plan compiles run validate_pair on every call).
  auto who = [&] { return std::string(side) + " engine '" + m.engine_id + "'"; };

  // GQA placement needs K % tp == 0 (sharded heads) or tp % K == 0 (replicated heads).
  if (!m.use_mla) {
    const uint32_t k = m.total_kv_heads;
    const uint32_t tp = m.tp_size;
    if ((tp <= k && k % tp != 0) || (tp > k && tp % k != 0)) {
      out.add(Status::HeadsNotDivisible, "tp_size", lv(num(tp)), rv(num(tp)),
              who() + ": tp_size " + num(tp) + " and total_kv_heads " + num(k) +
                  " do not divide each other, so KV heads cannot be placed on ranks",
              "use a tp_size that divides " + num(k) + " or is a multiple of it");
    }
  }
  if (m.is_hybrid() && !is_transferable_mamba_type(m.mamba_type)) {
    out.add(Status::UnsupportedMambaType, "mamba_type", lv(mamba_type_name(m.mamba_type)),
            rv(mamba_type_name(m.mamba_type)),
            who() + ": Mamba type " + mamba_type_name(m.mamba_type) +
                " has no conv-state split rule, its state cannot be transferred",
            "only " + transferable_mamba_kind_names() +
                " hybrids can be disaggregated; serve this model without P/D");
  }
  if (m.is_hybrid() && m.conv_layout != ConvLayout::DS) {
    out.add(Status::UnsupportedLayout, "conv_layout", lv("SD"), rv("SD"),
            who() + " stores the Mamba conv state as SD; the per-projection transfer needs DS so "
                  "each projection is one contiguous range",
            "set VLLM_SSM_CONV_STATE_LAYOUT=DS on the " + std::string(side) + " engine");
  }
  // Two regions sharing bytes: every read into one would overwrite the other layer's KV.
  // check_metadata (decode) refuses this already; hand-built metadata is checked here too.
  if (const auto o = find_region_overlap(m.regions)) {
    const std::string base = num(m.regions[o->second].region.base);
    out.add(Status::Incompatible, "regions[" + num(o->second) + "].base", lv(base), rv(base),
            who() + ": " + to_string(*o) + "; a transfer into one would overwrite the other",
            "register every KV tensor once, at its own non-overlapping address range");
  }
  // vLLM sends one num_blocks per engine; every region must hold exactly that many kernel blocks.
  for (size_t i = 0; i < m.regions.size(); ++i) {
    const auto& r = m.regions[i];
    if (r.region.num_blocks != m.num_kernel_blocks) {
      out.add(Status::Incompatible, "regions[" + num(i) + "].num_blocks",
              lv(num(r.region.num_blocks)), rv(num(r.region.num_blocks)),
              who() + ": region " + num(i) + " has " + num(r.region.num_blocks) +
                  " kernel blocks but the engine advertises num_kernel_blocks " +
                  num(m.num_kernel_blocks),
              "register every KV tensor with the same number of blocks");
      break;  // one item per side: the rest are the same misregistration
    }
  }
  // A kernel page is kernel_block_size tokens of attention_bytes_per_token (HMA pads the Mamba
  // page up to it, so this holds for Mamba regions as well; check_metadata enforces it, this
  // covers hand-built metadata). A mismatch means the block_len the peer would address with is
  // not the page the tensor really has.
  for (size_t i = 0; i < m.regions.size(); ++i) {
    const auto& r = m.regions[i];
    if (r.kind == RegionKind::Mla) {
      // An MLA-typed region of a GQA model holds its latent's bytes per token (compared with the
      // peer's region in validate_pair); its page is only required to hold whole tokens.
      if (m.kernel_block_size == 0 || r.region.block_len % m.kernel_block_size != 0) {
        out.add(Status::Incompatible, "regions[" + num(i) + "].block_len",
                lv(num(r.region.block_len)), rv(num(r.region.block_len)),
                who() + ": mla region " + num(i) + " block_len " + num(r.region.block_len) +
                    " is not a whole number of bytes per token for kernel_block_size " +
                    num(m.kernel_block_size),
                "advertise the kernel page size actually registered");
        break;
      }
      continue;
    }
    const u128 expect = static_cast<u128>(m.kernel_block_size) * m.attention_bytes_per_token;
    if (expect != r.region.block_len) {
      const std::string e = expect > UINT64_MAX ? std::string("> 2^64")
                                                : num(static_cast<uint64_t>(expect));
      out.add(Status::Incompatible, "regions[" + num(i) + "].block_len",
              lv(num(r.region.block_len)), rv(num(r.region.block_len)),
              who() + ": " + region_kind_name(r.kind) + " region " + num(i) + " block_len " +
                  num(r.region.block_len) + " != kernel_block_size " +
                  num(m.kernel_block_size) + " * attention_bytes_per_token " +
                  num(m.attention_bytes_per_token) + " = " + e,
              "advertise the kernel page size actually registered");
      break;
    }
  }
  // Bytes per token are heads_per_rank whole heads (check_metadata enforces it as well).
  if (m.attention_bytes_per_token % heads_per_rank(m) != 0) {
    out.add(Status::Incompatible, "attention_bytes_per_token",
            lv(num(m.attention_bytes_per_token)), rv(num(m.attention_bytes_per_token)),
            who() + ": attention_bytes_per_token " + num(m.attention_bytes_per_token) +
                " is not a whole number of bytes per KV head (" + num(heads_per_rank(m)) +
                " heads per rank)",
            "advertise heads_per_rank * (head_size + head_size_v) * KV dtype bytes");
  }
}

}  // namespace

std::string to_string(const Incompatibility& it) {
  std::string s = std::string(status_name(it.status)) + " " + it.field + ": " + it.message;
  if (!it.local_value.empty() || !it.remote_value.empty()) {
    s += " (local: " + (it.local_value.empty() ? std::string("-") : it.local_value) +
         ", remote: " + (it.remote_value.empty() ? std::string("-") : it.remote_value) + ")";
  }
  if (!it.fix.empty()) s += ". Fix: " + it.fix;
  return s;
}

namespace {

// The element formats an engine may name (metadata 1.3), compared by validate_pair (local against
// remote) and validate_engine_ranks (rank against rank): field, what it stores, vLLM's flag.
struct FormatField {
  const char* field;
  ElementFormat EngineMetadata::*format;
  const char* what;
  const char* flag;
};
constexpr FormatField kFormatFields[] = {
    {"model_format", &EngineMetadata::model_format, "model dtype", "--dtype"},
    {"kv_cache_format", &EngineMetadata::kv_cache_format, "KV cache format", "--kv-cache-dtype"},
    {"conv_state_format", &EngineMetadata::conv_state_format, "Mamba conv state dtype", "--mamba-cache-dtype"},
    {"ssm_state_format", &EngineMetadata::ssm_state_format, "Mamba SSM state dtype", "--mamba-ssm-cache-dtype"},
};

}  // namespace

std::vector<Incompatibility> validate_pair(const EngineMetadata& l, const EngineMetadata& r) {
  Items out;

  if (l.engine_id == r.engine_id) {
    out.add(Status::Incompatible, "engine_id", l.engine_id, r.engine_id,
            "both sides report engine id '" + l.engine_id +
                "'; a P/D pair needs two distinct engines",
            "give the prefill and decode instances different engine ids");
  }

  // ---- model identity ----
  if (l.model_fingerprint != r.model_fingerprint) {
    out.add(Status::Incompatible, "model_fingerprint", hex64(l.model_fingerprint),
            hex64(r.model_fingerprint),
            "the engines serve models with different geometry (fingerprint " +
                hex64(l.model_fingerprint) + " vs " + hex64(r.model_fingerprint) + ")",
            "serve the same model (same heads, head sizes, Mamba config, layer pattern) on P and D");
  }
  if (l.use_mla != r.use_mla) {
    out.add(Status::Incompatible, "use_mla", yes_no(l.use_mla), yes_no(r.use_mla),
            "one side uses MLA (one replicated latent head) and the other does not",
            "use the same attention type (and model) on P and D");
  }
  if (l.total_kv_heads != r.total_kv_heads) {
    out.add(Status::Incompatible, "total_kv_heads", num(l.total_kv_heads), num(r.total_kv_heads),
            "total KV heads differ (" + num(l.total_kv_heads) + " vs " + num(r.total_kv_heads) +
                "), so head ranges cannot be matched",
            "serve the same model on P and D");
  }
  if (l.mamba_type != r.mamba_type) {
    out.add(Status::Incompatible, "mamba_type", mamba_type_name(l.mamba_type),
            mamba_type_name(r.mamba_type),
            std::string("Mamba layer types differ (") + mamba_type_name(l.mamba_type) + " vs " +
                mamba_type_name(r.mamba_type) + ")",
            "serve the same model on P and D");
  }

  // ---- element formats (metadata 1.3) ----
  // Equal sizes do not make equal formats: fp8_e4m3 vs fp8_e5m2 KV, int8 vs fp8 per-token-head,
  // a bf16 vs fp16 model or conv state all move the same bytes, which the other side would decode
  // as garbage (vLLM's compatibility check compares the KV cache dtype and the model dtype too).
  // Unknown (the engine named no format, or runs a pdkv before 1.3) is compatible with anything.
  for (const FormatField& f : kFormatFields) {
    const ElementFormat lf = l.*f.format, rf = r.*f.format;
    if (lf == ElementFormat::Unknown || rf == ElementFormat::Unknown || lf == rf) continue;
    const std::string a = element_format_name(lf), b = element_format_name(rf);
    out.add(Status::Incompatible, f.field, a, b,
            std::string(f.field) + ": " + a + " vs " + b + ": the two engines' " + f.what +
                "s differ; the bytes would move but the receiver would decode them wrongly",
            std::string("use the same ") + f.flag + " on both engines");
  }

  // ---- TP ----
  const bool tp_ok = divides_either_way(l.tp_size, r.tp_size);
  if (!tp_ok) {
    out.add(Status::TpNotDivisible, "tp_size", num(l.tp_size), num(r.tp_size),
            "local tp_size " + num(l.tp_size) + " and remote tp_size " + num(r.tp_size) +
                " do not divide each other",
            "choose TP sizes where one is a multiple of the other (e.g. 2 and 4)");
  }
  check_one_side(l, true, out);
  check_one_side(r, false, out);

  // ---- layouts ----
  const bool heads_split = !l.use_mla && !r.use_mla && heads_per_rank(l) != heads_per_rank(r);
  // Different layouts are served: the reader takes the peer's blocks as they lie and permutes
  // them into its own layout after receipt (the plan context's permute_on_receive; vLLM's
  // enable_permute_local_kv). Heterogeneous TP splits the read side's blocks by head, which needs
  // its heads contiguous: HND there. The check cannot know which side is read from (either side
  // may run it), so it asks for HND on at least one side; compile_transfer_plan requires it of P.
  if (heads_split && l.kv_layout != KvLayout::HND && r.kv_layout != KvLayout::HND) {
    // vLLM checks this only when the remote is not replicated; pdkv checks whenever the two
    // sides hold a different number of heads per rank, because the local split into head
    // slices (P_TP > D_TP) is just as non-contiguous under NHD.
    out.add(Status::UnsupportedLayout, "kv_layout", kv_layout_name(l.kv_layout),
            kv_layout_name(r.kv_layout),
            "heterogeneous TP splits blocks by head (" + num(heads_per_rank(l)) + " vs " +
                num(heads_per_rank(r)) + " KV heads per rank), which needs contiguous heads on the side read from",
            "use the HND KV cache layout on the prefill engine (the decode engine may keep NHD and permute "
            "received blocks)");
  }

  // vLLM rejects (assert) P_TP > D_TP with replicated P heads for pure attention models: only one
  // P rank per distinct head is read, and the others would never be told their blocks are free.
  if (tp_ok && !l.use_mla && !l.is_hybrid() && !r.is_hybrid() && r.tp_size > l.tp_size &&
      r.tp_size > r.total_kv_heads) {
    out.add(Status::Incompatible, "tp_size", num(l.tp_size), num(r.tp_size),
            "remote tp_size " + num(r.tp_size) + " > local tp_size " + num(l.tp_size) +
                " with replicated remote KV heads (" + num(r.total_kv_heads) +
                " heads): duplicate remote ranks would never be read or released",
            "use a remote tp_size <= " + num(r.total_kv_heads) +
                " or a local tp_size >= the remote one");
  }

  // ---- pipeline stages ----
  // A stage pairs with the peer's stages whose layer windows overlap its own; regions are then
  // paired by layer (the plan's groups name their layers), not by index, so the index rules below
  // apply only to two stages holding the same window (every single-stage pair among them).
  const bool same_window = l.layer_begin == r.layer_begin && l.layer_end == r.layer_end;
  if (std::max<uint64_t>(l.layer_begin, r.layer_begin) >= std::min(l.layer_end_bound(), r.layer_end_bound())) {
    auto w = [](const EngineMetadata& m) {
      return "pp_rank " + num(m.pp_rank) + " of " + num(m.pp_size) + " [" + num(m.layer_begin) + ", " +
             (m.layer_end == kLayerEndOpen ? std::string("open") : num(m.layer_end)) + ")";
    };
    out.add(Status::Incompatible, "layer_begin", w(l), w(r),
            "the local stage (" + w(l) + ") and the remote stage (" + w(r) +
                ") hold layers that do not overlap; there is nothing to transfer between them",
            "pair each stage only with the peer stages whose layer windows overlap its own "
            "(pair_pipeline_stages)");
  }
  if (!same_window) {
    // Paired by layer at plan time (compile_transfer_plan checks each pair's region kinds).
  } else if (l.regions.size() != r.regions.size()) {
    out.add(Status::Incompatible, "regions", num(l.regions.size()), num(r.regions.size()),
            "region counts differ (" + num(l.regions.size()) + " vs " + num(r.regions.size()) +
                "); regions are matched by index",
            "run the same model with the same KV cache grouping (HMA on/off) on both engines");
  } else {
    size_t mismatches = 0;
    size_t first = 0;
    for (size_t i = 0; i < l.regions.size(); ++i) {
      if (l.regions[i].kind != r.regions[i].kind) {
        if (mismatches++ == 0) first = i;
      }
    }
    if (mismatches != 0) {
      out.add(Status::Incompatible, "regions[" + num(first) + "].kind",
              region_kind_name(l.regions[first].kind), region_kind_name(r.regions[first].kind),
              num(mismatches) + " regions differ in kind, first at index " + num(first),
              "run the same model with the same KV cache grouping on both engines");
    }
    // Each region is checked by its own kind: an MLA-typed region holds one latent replicated on
    // every rank, so its bytes per token are the same at every TP, while the GQA regions beside
    // it follow the head ratio (checked below on attention_bytes_per_token). A peer whose MLA
    // region shrank or grew with TP registered it head-split: D would read a partial latent.
    size_t scaled = 0, at = 0;
    for (size_t i = 0; i < l.regions.size(); ++i) {
      if (l.regions[i].kind != RegionKind::Mla || r.regions[i].kind != RegionKind::Mla) continue;
      if (l.kernel_block_size == 0 || r.kernel_block_size == 0) continue;  // reported per side
      if (l.region_bytes_per_token(i) != r.region_bytes_per_token(i) && scaled++ == 0) at = i;
    }
    if (scaled != 0) {
      const uint64_t lb = l.region_bytes_per_token(at), rb = r.region_bytes_per_token(at);
      out.add(Status::Incompatible, "regions[" + num(at) + "].block_len",
              num(l.regions[at].region.block_len), num(r.regions[at].region.block_len),
              "MLA region " + num(at) + " holds " + num(lb) + " bytes per token on the local engine (tp_size " +
                  num(l.tp_size) + ") and " + num(rb) + " on the remote (tp_size " + num(r.tp_size) +
                  "): an MLA latent is replicated whole on every rank, so its size must not change "
                  "with TP" + (scaled > 1 ? " (" + num(scaled) + " MLA regions differ)" : std::string()),
              "register every MLA region with the whole latent on every rank, and use the same "
              "--kv-cache-dtype on both engines");
    }
  }

  // ---- byte sizes against the head ratio (#45879, expressed per token per head) ----
  // vLLM: remote block_len == local block_len * rheads / lheads / bsr. Per token this is
  // remote_a * lheads == local_a * rheads, i.e. equal bytes per token per KV head, which also
  // holds across different block sizes. Checked for every model kind: a hybrid whose regions are
  // all advertised as Mamba (first user a Mamba layer) still stores attention KV in them, and a
  // doubled attention_bytes_per_token would make D slice P's pages at the wrong stride.
  if (l.use_mla == r.use_mla && l.total_kv_heads == r.total_kv_heads) {
    const uint32_t lh = heads_per_rank(l);
    const uint32_t rh = heads_per_rank(r);
    if (static_cast<u128>(l.attention_bytes_per_token) * rh !=
        static_cast<u128>(r.attention_bytes_per_token) * lh) {
      auto per_head = [](uint64_t a, uint32_t h) {
        return a % h == 0 ? num(a / h) : num(a) + "/" + num(h);
      };
      out.add(Status::Incompatible, "attention_bytes_per_token",
              num(l.attention_bytes_per_token), num(r.attention_bytes_per_token),
              "attention bytes per token per KV head differ (local " +
                  per_head(l.attention_bytes_per_token, lh) + ", remote " +
                  per_head(r.attention_bytes_per_token, rh) + "): they do not follow the head "
                  "ratio (local " + num(lh) + " heads/rank, remote " + num(rh) +
                  " heads/rank; vLLM #45879 block_len rule)",
              "use the same KV cache dtype and attention backend page format on both engines");
    }
  }
  if (l.is_hybrid() && l.mamba_type == r.mamba_type) {
    // The temporal state is always head-sharded: ssm_bytes * tp is TP-invariant.
    if (static_cast<u128>(l.ssm_bytes) * l.tp_size != static_cast<u128>(r.ssm_bytes) * r.tp_size) {
      out.add(Status::Incompatible, "ssm_bytes", num(l.ssm_bytes), num(r.ssm_bytes),
              "SSM state bytes do not scale with TP (local " + num(l.ssm_bytes) + " * tp " +
                  num(l.tp_size) + " != remote " + num(r.ssm_bytes) + " * tp " + num(r.tp_size) + ")",
              "use the same --mamba-ssm-cache-dtype on both engines");
    }
    if (l.conv_projection_bytes.size() != r.conv_projection_bytes.size()) {
      out.add(Status::Incompatible, "conv_projection_bytes",
              num(l.conv_projection_bytes.size()), num(r.conv_projection_bytes.size()),
              "the engines split the conv state into different numbers of projections",
              "serve the same model on P and D");
    } else {
      // A projection the kind may replicate (Mamba2's B/C when n_groups < TP) keeps its size
      // whatever the TP, so only the sharded ones must scale.
      const bool known = is_transferable_mamba_type(l.mamba_type);
      for (size_t j = 0; j < l.conv_projection_bytes.size(); ++j) {
        if (known && mamba_kind(l.mamba_type).projection_may_replicate(j)) continue;
        const uint64_t a = l.conv_projection_bytes[j];
        const uint64_t b = r.conv_projection_bytes[j];
        if (static_cast<u128>(a) * l.tp_size != static_cast<u128>(b) * r.tp_size) {
          out.add(Status::Incompatible, "conv_projection_bytes[" + num(j) + "]", num(a), num(b),
                  "conv projection " + num(j) + " bytes do not scale with TP (local " + num(a) +
                      " * tp " + num(l.tp_size) + " != remote " + num(b) + " * tp " +
                      num(r.tp_size) + ")",
                  "use the same --mamba-cache-dtype and speculative token count on both engines");
        }
      }
    }
  }
  if (l.is_hybrid() && l.mamba_type == r.mamba_type && l.cache_mode != r.cache_mode) {
    // The cache mode decides which of a request's state blocks holds the state to move ("all":
    // one per block, the hit position's; "align": the last block-aligned one; "none": the single
    // running state), and a plan trims both sides' state ids by one mode: with different modes D
    // would read the wrong slot of P's state. vLLM does not compare them; engine_request refuses
    // the pair too, this reports it at the handshake.
    auto name = [](MambaCacheMode m) {
      return std::string(m == MambaCacheMode::All ? "all" : m == MambaCacheMode::Align ? "align" : "none");
    };
    out.add(Status::Incompatible, "cache_mode", name(l.cache_mode), name(r.cache_mode),
            "the engines cache Mamba state differently (local " + name(l.cache_mode) + ", remote " +
                name(r.cache_mode) + "), so their state blocks do not correspond",
            "use the same --mamba-cache-mode on both engines");
  }
  // Accepted on purpose (see header): physical_blocks_per_logical differing with prefix caching
  // on, and kernel block sizes that are not multiples of each other.
  return out.take();
}

std::vector<Incompatibility> validate_pair_either_role(const EngineMetadata& a, const EngineMetadata& b) {
  auto items = validate_pair(a, b);
  if (!items.empty() && validate_pair(b, a).empty()) items.clear();
  return items;
}

void require_compatible(const EngineMetadata& local, const EngineMetadata& remote) {
  const auto items = validate_pair(local, remote);
  if (items.empty()) return;
  std::string msg = "engines '" + local.engine_id + "' (local) and '" + remote.engine_id +
                    "' (remote) are incompatible: " + num(items.size()) + " problem(s): ";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) msg += "; ";
    msg += to_string(items[i]);
  }
  fail(Status::Incompatible, msg);
}

std::vector<Incompatibility> validate_engine_ranks(std::span<const EngineMetadata> ranks) {
  Items out;
  if (ranks.empty()) return out.take();
  const EngineMetadata& a = ranks[0];
  // Strings are built only for a problem: a plan compile runs this on every call.
  auto who = [&](size_t i) {
    return "rank entry " + num(i) + " (tp_rank " + num(ranks[i].tp_rank) + ")";
  };
  for (size_t i = 0; i < ranks.size(); ++i) {
    const EngineMetadata& b = ranks[i];
    bool repeated = false;
    for (size_t j = 0; j < i && !repeated; ++j) repeated = ranks[j].tp_rank == b.tp_rank;
    if (repeated) {
      out.add(Status::Incompatible, "tp_rank", "", num(b.tp_rank),
              who(i) + " repeats a tp_rank already handshaked", "handshake each remote rank once");
    }
    if (i == 0) continue;
    auto differ = [&](bool same, const char* field, auto value, const std::string& fix) {
      if (same) return;
      const std::string va = value(a), vb = value(b);
      out.add(Status::Incompatible, field, va, vb,
              who(i) + " disagrees with rank entry 0 on " + field + " (" + va + " vs " + vb + ")",
              fix);
    };
    differ(a.engine_id == b.engine_id, "engine_id",
           [](const EngineMetadata& m) { return m.engine_id; },
           "handshake ranks of one engine together");
    differ(a.tp_size == b.tp_size, "tp_size",
           [](const EngineMetadata& m) { return num(m.tp_size); },
           "restart the remote engine consistently");
    differ(a.num_kernel_blocks == b.num_kernel_blocks, "num_kernel_blocks",
           [](const EngineMetadata& m) { return num(m.num_kernel_blocks); },
           "give every rank of an engine the same KV cache size (gpu_memory_utilization)");
    differ(a.regions.size() == b.regions.size(), "regions",
           [](const EngineMetadata& m) { return num(m.regions.size()); },
           "restart the remote engine consistently");
    differ(a.physical_blocks_per_logical == b.physical_blocks_per_logical,
           "physical_blocks_per_logical",
           [](const EngineMetadata& m) { return num(m.physical_blocks_per_logical); },
           "restart the remote engine consistently");
    differ(a.model_fingerprint == b.model_fingerprint, "model_fingerprint",
           [](const EngineMetadata& m) { return hex64(m.model_fingerprint); },
           "serve one model per engine");
    // One (engine, pipeline stage) is one peer: its TP ranks hold the same layers.
    differ(a.pp_size == b.pp_size && a.pp_rank == b.pp_rank, "pp_rank",
           [](const EngineMetadata& m) { return num(m.pp_rank) + " of " + num(m.pp_size); },
           "handshake the TP ranks of one pipeline stage together, each stage as its own peer");
    differ(a.layer_begin == b.layer_begin && a.layer_end == b.layer_end, "layer_begin",
           [](const EngineMetadata& m) {
             return "[" + num(m.layer_begin) + ", " +
                    (m.layer_end == kLayerEndOpen ? std::string("open") : num(m.layer_end)) + ")";
           },
           "restart the remote engine consistently");
  }
  // Element formats: D compares each rank with its own, which lets anything through where D named
  // none, so the ranks must agree among themselves. Known ones only (unknown: sizes only, or an
  // older pdkv), each against the first rank that names it.
  for (const FormatField& f : kFormatFields) {
    size_t first = ranks.size();
    for (size_t i = 0; i < ranks.size(); ++i) {
      const ElementFormat v = ranks[i].*f.format;
      if (v == ElementFormat::Unknown) continue;
      if (first == ranks.size()) {
        first = i;
        continue;
      }
      const ElementFormat w = ranks[first].*f.format;
      if (v == w) continue;
      const std::string va = element_format_name(w), vb = element_format_name(v);
      out.add(Status::Incompatible, f.field, va, vb,
              who(i) + " disagrees with rank entry " + num(first) + " on " + f.field + " (" + va + " vs " + vb + ")",
              "run every rank of an engine with the same dtype flags");
    }
  }
  return out.take();
}

}  // namespace pdkv::core
