// Conformance runner: executes every case of every tests/vectors/*.json file through the C API
// (format and ops: docs/conformance.md). A case fails on an unknown op, an unused input key, a
// missing or extra output key (vectors must carry the op's full output), both/neither of
// output/error, a wrong status name, a message missing an expected substring, or any value
// that differs. Nothing is skipped.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "capi_helpers.hpp"

using json = nlohmann::json;

namespace {

/// Outcome of running one case: either the op's full output object or a C API error.
struct OpResult {
  bool ok = false;
  json output;
  std::string status;   ///< pdkv_status_name of the failing call
  std::string message;  ///< its message
};

/// Thrown by a handler when a C API call fails: carries the status and message to compare.
struct ApiFailure {
  pdkv_status_t status;
  std::string message;
};

/// A malformed vector (missing key, wrong type, unknown enum name): always a test failure.
struct VectorError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Calls a C API function taking `pdkv_error_t **err` last; throws ApiFailure on error and
/// checks the error-object convention (OK <=> err == NULL, status matches).
template <typename F>
void call(F&& f) {
  pdkv_error_t* err = nullptr;
  const pdkv_status_t st = f(&err);
  if (st == PDKV_OK) {
    if (err != nullptr) throw VectorError("call returned OK but set *err");
    return;
  }
  if (err == nullptr) throw VectorError("call failed without an error object");
  ApiFailure failure{st, pdkv_error_message(err)};
  const pdkv_status_t es = pdkv_error_status(err);
  pdkv_error_free(err);
  if (es != st) throw VectorError("error object status differs from the returned status");
  throw failure;
}

/// Read access to a case's `input` object that records which keys were used, so a vector with
/// a misspelled or unsupported input key fails instead of silently running on defaults.
class Input {
 public:
  explicit Input(const json& j) : j_(j) {
    if (!j.is_object()) throw VectorError("input must be an object");
  }
  bool has(const std::string& k) const { return j_.contains(k); }
  const json& raw(const std::string& k) {
    if (!j_.contains(k)) throw VectorError("missing input key '" + k + "'");
    used_.insert(k);
    return j_.at(k);
  }
  int64_t i64(const std::string& k) {
    const json& v = raw(k);
    if (!v.is_number_integer()) throw VectorError("input '" + k + "' must be an integer");
    return v.get<int64_t>();
  }
  uint64_t u64(const std::string& k) {
    const int64_t v = i64(k);
    if (v < 0) throw VectorError("input '" + k + "' must be non-negative");
    return static_cast<uint64_t>(v);
  }
  uint32_t u32(const std::string& k) {
    const uint64_t v = u64(k);
    if (v > UINT32_MAX) throw VectorError("input '" + k + "' does not fit in uint32");
    return static_cast<uint32_t>(v);
  }
  uint32_t u32_or(const std::string& k, uint32_t d) { return has(k) ? u32(k) : d; }
  bool boolean(const std::string& k) {
    const json& v = raw(k);
    if (!v.is_boolean()) throw VectorError("input '" + k + "' must be a boolean");
    return v.get<bool>();
  }
  bool bool_or(const std::string& k, bool d) { return has(k) ? boolean(k) : d; }
  std::string str(const std::string& k) {
    const json& v = raw(k);
    if (!v.is_string()) throw VectorError("input '" + k + "' must be a string");
    return v.get<std::string>();
  }
  std::string str_or(const std::string& k, const std::string& d) { return has(k) ? str(k) : d; }
  /// Nested object (e.g. an engine), with its own key tracking checked by the caller.
  Input object(const std::string& k) { return Input(raw(k)); }
  /// Throws when the vector carries input keys the op never read.
  void check_all_used() const {
    for (auto it = j_.begin(); it != j_.end(); ++it)
      if (!used_.count(it.key())) throw VectorError("unknown input key '" + it.key() + "'");
  }

 private:
  const json& j_;
  std::set<std::string> used_;
};

std::vector<uint32_t> u32_list(const json& v, const std::string& what) {
  if (!v.is_array()) throw VectorError(what + " must be an array");
  std::vector<uint32_t> out;
  for (const json& e : v) {
    if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() > INT64_C(0xFFFFFFFF))
      throw VectorError(what + " must hold uint32 integers");
    out.push_back(static_cast<uint32_t>(e.get<int64_t>()));
  }
  return out;
}

template <typename T>
json array_of(const T* p, size_t n) {
  json a = json::array();
  for (size_t i = 0; i < n; ++i) a.push_back(p[i]);
  return a;
}

// ---- RAII owners ------------------------------------------------------------------------

/// Model from a preset name (the `model` input).
ModelPtr preset(const std::string& name) {
  pdkv_model_t* m = nullptr;
  call([&](pdkv_error_t** e) { return pdkv_model_from_preset(name.c_str(), &m, e); });
  return ModelPtr(m);
}

/// The `model` input of the ops that take a model object too (docs/conformance.md): a preset
/// name, or a pure-attention model described field by field (pdkv_model_new).
ModelPtr model_of(Input& in) {
  const json& v = in.raw("model");
  if (v.is_string()) return preset(v.get<std::string>());
  Input d(v);
  const std::string name = d.str("name"), pattern = d.str("layer_pattern");
  pdkv_model_desc_t desc{};
  desc.struct_size = sizeof desc;
  desc.name = name.c_str();
  desc.num_kv_heads = d.u32("num_kv_heads");
  desc.head_size = d.u32("head_size");
  desc.head_size_v = d.u32("head_size_v");
  desc.use_mla = d.boolean("use_mla") ? 1 : 0;
  desc.dtype_bytes = d.u32("dtype_bytes");
  desc.layer_pattern = pattern.c_str();
  desc.mla_head_size = d.u32("mla_head_size");
  d.check_all_used();
  pdkv_model_t* m = nullptr;
  call([&](pdkv_error_t** e) { return pdkv_model_new(&desc, &m, e); });
  return ModelPtr(m);
}

/// pdkv_engine_config_t from an `engine` object (docs/conformance.md "Shared input shapes").
pdkv_engine_config_t engine_config(Input in) {
  pdkv_engine_config_t c;
  call([&](pdkv_error_t** e) { return pdkv_engine_config_init(&c, e); });
  c.tp_size = in.u32("tp_size");
  // An optional field is set (its bit with it) when the vector names it.
  auto optional = [&](const char* key, uint64_t bit, auto& field) {
    if (!in.has(key)) return;
    field = in.u32(key);
    c.field_mask |= bit;
  };
  optional("kv_cache_dtype_bytes", PDKV_CONFIG_FIELD_KV_CACHE_DTYPE, c.kv_cache_dtype_bytes);
  optional("conv_state_dtype_bytes", PDKV_CONFIG_FIELD_CONV_STATE_DTYPE, c.conv_state_dtype_bytes);
  optional("ssm_state_dtype_bytes", PDKV_CONFIG_FIELD_SSM_STATE_DTYPE, c.ssm_state_dtype_bytes);
  c.num_speculative_tokens = in.u32_or("num_speculative_tokens", 0);
  optional("user_block_size", PDKV_CONFIG_FIELD_BLOCK_SIZE, c.user_block_size);
  optional("user_mamba_block_size", PDKV_CONFIG_FIELD_MAMBA_BLOCK_SIZE, c.user_mamba_block_size);
  optional("kv_cache_element_bits", PDKV_CONFIG_FIELD_KV_CACHE_ELEMENT_BITS, c.kv_cache_element_bits);
  c.kv_cache_head_extra_bytes = in.u32_or("kv_cache_head_extra_bytes", 0);
  // Element formats by name ("fp8", "fp8_e5m2", "bfloat16", ...), each with its bit.
  const std::pair<const char*, std::pair<uint64_t, int32_t*>> formats[] = {
      {"model_format", {PDKV_CONFIG_FIELD_MODEL_FORMAT, &c.model_format}},
      {"kv_cache_format", {PDKV_CONFIG_FIELD_KV_CACHE_FORMAT, &c.kv_cache_format}},
      {"conv_state_format", {PDKV_CONFIG_FIELD_CONV_STATE_FORMAT, &c.conv_state_format}},
      {"ssm_state_format", {PDKV_CONFIG_FIELD_SSM_STATE_FORMAT, &c.ssm_state_format}}};
  std::vector<std::pair<std::string, std::pair<uint64_t, int32_t*>>> named;
  for (const auto& [key, target] : formats) {
    if (in.has(key)) named.push_back({in.str(key), target});
  }
  const std::string backend = in.str_or("backend", "flash_attn");
  const std::string mode = in.str_or("mamba_cache_mode", "none");
  if (mode == "none") c.mamba_cache_mode = PDKV_MAMBA_CACHE_NONE;
  else if (mode == "align") c.mamba_cache_mode = PDKV_MAMBA_CACHE_ALIGN;
  else if (mode == "all") c.mamba_cache_mode = PDKV_MAMBA_CACHE_ALL;
  else throw VectorError("unknown mamba_cache_mode '" + mode + "'");
  const std::string layout = in.str_or("conv_layout", "DS");
  if (layout == "DS") c.conv_layout = PDKV_CONV_LAYOUT_DS;
  else if (layout == "SD") c.conv_layout = PDKV_CONV_LAYOUT_SD;
  else throw VectorError("unknown conv_layout '" + layout + "'");
  in.check_all_used();
  call([&](pdkv_error_t** e) { return pdkv_backend_from_name(backend.c_str(), &c.attention_backend, e); });
  for (const auto& entry : named) {  // (not a structured binding: clang 14 cannot capture one)
    call([&entry](pdkv_error_t** e) { return pdkv_element_format_from_name(entry.first.c_str(), entry.second.second, e); });
    c.field_mask |= entry.second.first;
  }
  return c;
}

GeometryPtr geometry(const pdkv_model_t* m, const pdkv_engine_config_t& c) {
  pdkv_geometry_t* g = nullptr;
  call([&](pdkv_error_t** e) { return pdkv_geometry_new(m, &c, &g, e); });
  return GeometryPtr(g);
}

// ---- Ops ---------------------------------------------------------------------------------

using Handler = std::function<json(Input&)>;

/// One op of docs/conformance.md: its handler and its full output key set.
struct Op {
  std::vector<std::string> output_keys;
  Handler run;
};





json op_tp_mapping(Input& in) {
  pdkv_tp_mapping_params_t p{};
  p.struct_size = sizeof p;
  p.local_tp_size = in.u32("local_tp_size");
  p.local_tp_rank = in.u32("local_tp_rank");
  p.remote_tp_size = in.u32("remote_tp_size");
  p.total_kv_heads = in.u32("total_kv_heads");
  p.use_mla = in.boolean("use_mla") ? 1 : 0;
  p.has_mamba = in.boolean("has_mamba") ? 1 : 0;
  pdkv_tp_mapping_t* raw = nullptr;
  call([&](pdkv_error_t** e) { return pdkv_tp_mapping_new(&p, &raw, e); });
  TpMappingPtr m(raw);
  pdkv_tp_mapping_info_t i{};
  i.struct_size = sizeof i;
  call([&](pdkv_error_t** e) { return pdkv_tp_mapping_get_info(m.get(), &i, e); });
  auto list = [&](int32_t which) {
    const uint32_t* r = nullptr;
    size_t n = 0;
    call([&](pdkv_error_t** e) { return pdkv_tp_mapping_ranks(m.get(), which, &r, &n, e); });
    return array_of(r, n);
  };
  json all = list(PDKV_TP_LIST_ALL_SOURCES);
  json slots = list(PDKV_TP_LIST_ATTENTION_SLOTS);
  // The per-rank slot query must agree with the slot list.
  for (size_t k = 0; k < all.size(); ++k) {
    uint32_t s = 0;
    const uint32_t rank = all[k].get<uint32_t>();
    call([&](pdkv_error_t** e) { return pdkv_tp_mapping_attention_slot(m.get(), rank, &s, e); });
    if (json(s) != slots.at(k)) throw VectorError("pdkv_tp_mapping_attention_slot disagrees with ATTENTION_SLOTS");
  }
  json attn = list(PDKV_TP_LIST_ATTENTION_SOURCES);
  if (i.num_attention_reads != attn.size()) throw VectorError("num_attention_reads disagrees with ATTENTION_SOURCES");
  return {{"tp_ratio", i.tp_ratio},
          {"handshake_targets", list(PDKV_TP_LIST_HANDSHAKE_TARGETS)},
          {"attention_source_ranks", attn},
          {"mamba_source_ranks", list(PDKV_TP_LIST_MAMBA_SOURCES)},
          {"all_source_ranks", all},
          {"attention_slots", slots},
          {"notify_ranks", list(PDKV_TP_LIST_NOTIFY_TARGETS)},
          {"rank_offset_factor", i.rank_offset_factor},
          {"local_replicated", i.local_replicated != 0},
          {"remote_replicated", i.remote_replicated != 0},
          {"local_physical_heads", i.local_physical_heads},
          {"remote_physical_heads", i.remote_physical_heads}};
}



json op_geometry(Input& in) {
  const std::string model = in.str("model");
  Input engine_in = in.object("engine");
  const pdkv_engine_config_t c = engine_config(engine_in);
  ModelPtr m = preset(model);
  GeometryPtr g = geometry(m.get(), c);
  pdkv_geometry_info_t i{};
  i.struct_size = sizeof i;
  call([&](pdkv_error_t** e) { return pdkv_geometry_get_info(g.get(), &i, e); });
  json projections = json::array();
  for (size_t k = 0; k < i.num_projections; ++k) {
    pdkv_conv_projection_t p{};
    p.struct_size = sizeof p;
    call([&](pdkv_error_t** e) { return pdkv_geometry_projection(g.get(), k, &p, e); });
    projections.push_back({{"name", p.name}, {"dim_local", p.dim_local}, {"bytes", p.bytes},
                           {"offset", p.offset}, {"replicated", p.replicated != 0}});
  }
  json lines = json::array();
  for (size_t k = 0; k < i.num_log_lines; ++k) {
    const char* line = nullptr;
    call([&](pdkv_error_t** e) { return pdkv_geometry_log_line(g.get(), k, &line, e); });
    lines.push_back(line);
  }
  return {{"kv_heads_per_rank", i.kv_heads_per_rank},
          {"kv_head_bytes_per_token", i.kv_head_bytes_per_token},
          {"attn_bytes_per_token", i.attn_bytes_per_token},
          {"conv_bytes", i.conv_bytes},
          {"ssm_bytes", i.ssm_bytes},
          {"mamba_page_bytes", i.mamba_page_bytes},
          {"block_size", i.block_size},
          {"mamba_block_size", i.mamba_block_size},
          {"attn_page_bytes", i.attn_page_bytes},
          {"padding_ppm", i.padding_ppm},
          {"kernel_block_size", i.kernel_block_size},
          {"physical_per_logical", i.physical_per_logical},
          {"kernel_page_bytes", i.kernel_page_bytes},
          {"projections", projections},
          {"log_lines", lines}};
}

json op_mamba_reads(Input& in) {
  const std::string model = in.str("model");
  Input p_in = in.object("prefill");
  Input d_in = in.object("decode");
  const uint32_t d_tp_rank = in.u32("decode_rank");
  const std::string rule_name = in.str("rule");
  int32_t rule = 0;
  if (rule_name == "pdkv") rule = PDKV_MAMBA_READS_PDKV;
  else if (rule_name == "vllm") rule = PDKV_MAMBA_READS_VLLM;
  else throw VectorError("unknown rule '" + rule_name + "'");
  const pdkv_engine_config_t pc = engine_config(p_in);
  const pdkv_engine_config_t dc = engine_config(d_in);
  ModelPtr m = preset(model);
  GeometryPtr pg = geometry(m.get(), pc);
  GeometryPtr dg = geometry(m.get(), dc);
  pdkv_mamba_read_list_t* raw = nullptr;
  call([&](pdkv_error_t** e) { return pdkv_mamba_reads_new(pg.get(), dg.get(), d_tp_rank, rule, &raw, e); });
  ReadListPtr list(raw);
  const pdkv_mamba_read_t* reads = nullptr;
  size_t n = 0;
  call([&](pdkv_error_t** e) { return pdkv_mamba_read_list_items(list.get(), &reads, &n, e); });
  json out = json::array();
  for (size_t k = 0; k < n; ++k)
    out.push_back({{"p_tp_rank", reads[k].p_tp_rank}, {"part", reads[k].part}, {"remote_offset", reads[k].remote_offset},
                   {"local_offset", reads[k].local_offset}, {"length", reads[k].length}});
  const uint32_t* ranks = nullptr;
  size_t nr = 0;
  call([&](pdkv_error_t** e) { return pdkv_mamba_read_list_source_ranks(list.get(), &ranks, &nr, e); });
  return {{"reads", out}, {"source_ranks", array_of(ranks, nr)}};
}

// ---- Block ids, clipping, scheduler, offload --------------------------------------------

struct U64ListDeleter { void operator()(pdkv_u64_list_t* p) const { pdkv_u64_list_free(p); } };
using U64ListPtr = std::unique_ptr<pdkv_u64_list_t, U64ListDeleter>;

std::vector<uint64_t> u64_list(const json& v, const std::string& what) {
  if (!v.is_array()) throw VectorError(what + " must be an array");
  std::vector<uint64_t> out;
  for (const json& e : v) {
    if (!e.is_number_integer() || e.get<int64_t>() < 0) throw VectorError(what + " must hold non-negative integers");
    out.push_back(static_cast<uint64_t>(e.get<int64_t>()));
  }
  return out;
}

/// Group kind from its pdkv_group_kind_name ("attention", "sliding_window", "mamba").
int32_t group_kind(const std::string& name) {
  for (int32_t k : {PDKV_GROUP_ATTENTION, PDKV_GROUP_SLIDING_WINDOW, PDKV_GROUP_MAMBA})
    if (name == pdkv_group_kind_name(k)) return k;
  throw VectorError("unknown group kind '" + name + "'");
}

int32_t cache_mode(const std::string& mode) {
  if (mode == "none") return PDKV_MAMBA_CACHE_NONE;
  if (mode == "align") return PDKV_MAMBA_CACHE_ALIGN;
  if (mode == "all") return PDKV_MAMBA_CACHE_ALL;
  throw VectorError("unknown cache mode '" + mode + "'");
}

json items_of(pdkv_u64_list_t* raw) {
  U64ListPtr list(raw);
  const uint64_t* items = nullptr;
  size_t n = 0;
  call([&](pdkv_error_t** e) { return pdkv_u64_list_items(list.get(), &items, &n, e); });
  return array_of(items, n);
}

json op_clip_exchange_blocks(Input& in) {
  const std::vector<uint64_t> ids = u64_list(in.raw("ids"), "ids");
  pdkv_exchange_clip_params_t p{};
  p.struct_size = sizeof p;
  p.kind = group_kind(in.str("kind"));
  p.hma_enabled = in.bool_or("hma_enabled", true) ? 1 : 0;
  p.sliding_window = in.has("sliding_window") ? in.u64("sliding_window") : 0;
  p.block_size = in.has("block_size") ? in.u64("block_size") : 0;
  p.cache_mode = cache_mode(in.str_or("cache_mode", "none"));
  p.num_speculative_blocks = in.has("num_speculative_blocks") ? in.u64("num_speculative_blocks") : 0;
  pdkv_u64_list_t* raw = nullptr;
  call([&](pdkv_error_t** e) { return pdkv_clip_exchange_blocks(ids.data(), ids.size(), &p, &raw, e); });
  return {{"ids", items_of(raw)}};
}


json op_descriptor_ids(Input& in) {
  const json& groups_in = in.raw("groups");
  if (!groups_in.is_array()) throw VectorError("groups must be an array");
  std::vector<std::vector<uint64_t>> ids;
  std::vector<pdkv_group_block_ids_t> groups;
  for (const json& g : groups_in) {
    Input gi(g);
    const int32_t kind = group_kind(gi.str("kind"));
    ids.push_back(u64_list(gi.raw("ids"), "ids"));
    gi.check_all_used();
    groups.push_back({kind, nullptr, 0});
  }
  for (size_t i = 0; i < groups.size(); ++i) {
    groups[i].ids = ids[i].data();
    groups[i].num_ids = ids[i].size();
  }
  pdkv_descriptor_layout_t l{};
  l.struct_size = sizeof l;
  l.num_blocks = in.u64("num_blocks");
  l.block_size_ratio = in.u64("block_size_ratio");
  l.blocks_per_logical = in.u64("blocks_per_logical");
  l.num_attention_regions = in.u64("num_attention_regions");
  l.num_mamba_regions = in.u64("num_mamba_regions");
  pdkv_u64_list_t* raw = nullptr;
  call([&](pdkv_error_t** e) { return pdkv_descriptor_ids(groups.data(), groups.size(), &l, &raw, e); });
  return {{"ids", items_of(raw)}};
}

json op_logical_to_kernel_block_ids(Input& in) {
  const std::vector<uint64_t> ids = u64_list(in.raw("ids"), "ids");
  const int32_t kind = group_kind(in.str("kind"));
  const uint64_t ppl = in.u64("blocks_per_logical");
  pdkv_u64_list_t* raw = nullptr;
  call([&](pdkv_error_t** e) { return pdkv_logical_to_kernel_block_ids(ids.data(), ids.size(), kind, ppl, &raw, e); });
  return {{"ids", items_of(raw)}};
}

json op_map_block_ids_for_block_size_ratio(Input& in) {
  const std::vector<uint64_t> ids = u64_list(in.raw("ids"), "ids");
  const int32_t kind = group_kind(in.str("kind"));
  const uint64_t bsr = in.u64("block_size_ratio"), remote_len = in.u64("remote_len");
  pdkv_u64_list_t* raw = nullptr;
  call([&](pdkv_error_t** e) {
    return pdkv_map_block_ids_for_block_size_ratio(ids.data(), ids.size(), kind, bsr, remote_len, &raw, e);
  });
  return {{"ids", items_of(raw)}};
}


json op_derive_offload_geometry(Input& in) {
  const uint64_t nb = in.u64("config_num_blocks"), gbs = in.u64("gpu_block_size"), hbs = in.u64("hash_block_size");
  const json& layers_in = in.raw("layers");
  if (!layers_in.is_array()) throw VectorError("layers must be an array");
  std::vector<pdkv_offload_layer_t> layers;
  for (const json& l : layers_in) {
    Input li(l);
    layers.push_back({li.u64("tensor_bytes"), li.u64("page_bytes")});
    li.check_all_used();
  }
  pdkv_offload_geometry_t g{};
  g.struct_size = sizeof g;
  call([&](pdkv_error_t** e) { return pdkv_derive_offload_geometry(nb, gbs, hbs, layers.data(), layers.size(), &g, e); });
  return {{"num_blocks", g.num_blocks}, {"hash_blocks_per_block", g.hash_blocks_per_block}};
}

json op_plan_remote_decode_prefill(Input& in) {
  const uint64_t n = in.u64("num_prompt_tokens"), hit = in.u64("local_hit_tokens"), bs = in.u64("block_size");
  const uint8_t mamba = in.boolean("has_mamba") ? 1 : 0;
  pdkv_remote_decode_prefill_plan_t p{};
  p.struct_size = sizeof p;
  call([&](pdkv_error_t** e) { return pdkv_plan_remote_decode_prefill(n, hit, bs, mamba, &p, e); });
  return {{"num_prompt_tokens", p.num_prompt_tokens}, {"computed_tokens", p.computed_tokens},
          {"new_tokens", p.new_tokens}};
}

// ---- Issue #3 ops: trimming, scheduler helpers, zero ranges, metadata, handshake, plans -----

std::string hex_of(const uint8_t* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s.push_back(digits[p[i] >> 4]);
    s.push_back(digits[p[i] & 15]);
  }
  return s;
}

std::vector<uint8_t> bytes_of_hex(const std::string& h) {
  if (h.size() % 2 != 0) throw VectorError("hex must have an even length");
  auto nib = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    throw VectorError("hex must be lower-case hex digits");
  };
  std::vector<uint8_t> out;
  for (size_t i = 0; i < h.size(); i += 2) out.push_back(static_cast<uint8_t>(nib(h[i]) * 16 + nib(h[i + 1])));
  return out;
}

json zero_ranges_json(const pdkv_zero_range_t* z, size_t n) {
  json a = json::array();
  for (size_t i = 0; i < n; ++i)
    a.push_back({{"block", z[i].block}, {"token_begin", z[i].token_begin}, {"token_end", z[i].token_end}});
  return a;
}

struct ZeroListDeleter { void operator()(pdkv_zero_range_list_t* p) const { pdkv_zero_range_list_free(p); } };
struct TrimDeleter { void operator()(pdkv_group_trim_t* p) const { pdkv_group_trim_free(p); } };
struct MetadataDeleter { void operator()(pdkv_engine_metadata_t* p) const { pdkv_engine_metadata_free(p); } };
struct BytesDeleter { void operator()(pdkv_bytes_t* p) const { pdkv_bytes_free(p); } };
struct ReportDeleter { void operator()(pdkv_handshake_report_t* p) const { pdkv_handshake_report_free(p); } };
struct ContextDeleter { void operator()(pdkv_plan_context_t* p) const { pdkv_plan_context_free(p); } };
struct PlanDeleter { void operator()(pdkv_transfer_plan_t* p) const { pdkv_transfer_plan_free(p); } };
struct StringDeleter { void operator()(pdkv_string_t* p) const { pdkv_string_free(p); } };
using MetadataPtr = std::unique_ptr<pdkv_engine_metadata_t, MetadataDeleter>;

json zero_list_json(pdkv_zero_range_list_t* raw) {
  std::unique_ptr<pdkv_zero_range_list_t, ZeroListDeleter> list(raw);
  const pdkv_zero_range_t* z = nullptr;
  size_t n = 0;
  call([&](pdkv_error_t** e) { return pdkv_zero_range_list_items(list.get(), &z, &n, e); });
  return zero_ranges_json(z, n);
}

/// Trim inputs with their own storage (the C struct points into the vectors).
struct TrimInput {
  std::vector<uint64_t> local, remote;
  pdkv_group_trim_input_t c{};
};

/// Reads the `trim_group` input keys from `in` (shared with `transfer_plan` groups).
std::unique_ptr<TrimInput> trim_input(Input& in) {
  auto t = std::make_unique<TrimInput>();
  t->local = u64_list(in.raw("local_blocks"), "local_blocks");
  t->remote = u64_list(in.raw("remote_blocks"), "remote_blocks");
  pdkv_group_trim_input_t& c = t->c;
  c.struct_size = sizeof c;
  c.kind = group_kind(in.str("kind"));
  c.cache_mode = cache_mode(in.str_or("cache_mode", "none"));
  c.local_blocks = t->local.data();
  c.num_local_blocks = t->local.size();
  c.remote_blocks = t->remote.data();
  c.num_remote_blocks = t->remote.size();
  auto opt = [&](const char* k) { return in.has(k) ? in.u64(k) : 0; };
  // Optional fields are set (their bit with them) when the vector names them.
  if (in.has("local_tokens_per_block") || in.has("remote_tokens_per_block")) {
    c.field_mask |= PDKV_TRIM_FIELD_TOKENS_PER_BLOCK;
    c.local_tokens_per_block = opt("local_tokens_per_block");
    c.remote_tokens_per_block = opt("remote_tokens_per_block");
  }
  c.remote_computed_tokens = opt("remote_computed_tokens");
  c.local_hit_tokens = opt("local_hit_tokens");
  c.sliding_window = opt("sliding_window");
  if (in.has("local_first_block")) {
    c.field_mask |= PDKV_TRIM_FIELD_LOCAL_FIRST_BLOCK;
    c.local_first_block = in.u64("local_first_block");
  }
  c.remote_first_block = opt("remote_first_block");
  if (in.has("local_kernel_blocks_per_id") || in.has("remote_kernel_blocks_per_id")) {
    c.field_mask |= PDKV_TRIM_FIELD_KERNEL_BLOCKS_PER_ID;
    c.local_kernel_blocks_per_id = in.has("local_kernel_blocks_per_id") ? in.u64("local_kernel_blocks_per_id") : 1;
    c.remote_kernel_blocks_per_id = in.has("remote_kernel_blocks_per_id") ? in.u64("remote_kernel_blocks_per_id") : 1;
  }
  return t;
}

json op_trim_group(Input& in) {
  auto t = trim_input(in);
  pdkv_group_trim_t* raw = nullptr;
  call([&](pdkv_error_t** e) { return pdkv_group_trim_new(&t->c, &raw, e); });
  std::unique_ptr<pdkv_group_trim_t, TrimDeleter> trim(raw);
  int32_t kind = -1;
  uint64_t tokens = 0;
  call([&](pdkv_error_t** e) { return pdkv_group_trim_summary(trim.get(), &kind, &tokens, e); });
  const pdkv_token_run_t* runs = nullptr;
  size_t nr = 0;
  call([&](pdkv_error_t** e) { return pdkv_group_trim_runs(trim.get(), &runs, &nr, e); });
  json rj = json::array();
  for (size_t i = 0; i < nr; ++i)
    rj.push_back({{"local_block", runs[i].local_block}, {"local_token_begin", runs[i].local_token_begin},
                  {"remote_block", runs[i].remote_block}, {"remote_token_begin", runs[i].remote_token_begin},
                  {"num_tokens", runs[i].num_tokens}});
  const pdkv_state_pair_t* states = nullptr;
  size_t ns = 0;
  call([&](pdkv_error_t** e) { return pdkv_group_trim_states(trim.get(), &states, &ns, e); });
  json sj = json::array();
  for (size_t i = 0; i < ns; ++i)
    sj.push_back({{"local_block", states[i].local_block}, {"remote_block", states[i].remote_block},
                  {"tokens", states[i].tokens}});
  const pdkv_zero_range_t* zero = nullptr;
  size_t nz = 0;
  call([&](pdkv_error_t** e) { return pdkv_group_trim_zero_ranges(trim.get(), &zero, &nz, e); });
  const uint64_t* unfilled = nullptr;
  size_t nu = 0;
  call([&](pdkv_error_t** e) { return pdkv_group_trim_unfilled_states(trim.get(), &unfilled, &nu, e); });
  return {{"kind", pdkv_group_kind_name(kind)}, {"transferred_tokens", tokens}, {"runs", rj}, {"states", sj},
          {"zero_ranges", zero_ranges_json(zero, nz)}, {"unfilled_states", array_of(unfilled, nu)}};
}

json op_mamba_aligned_split_v0604(Input& in) {
  pdkv_aligned_split_v0604_input_t s{};
  s.struct_size = sizeof s;
  auto opt = [&](const char* k) { return in.has(k) ? in.u64(k) : 0; };
  s.num_computed_tokens = opt("num_computed_tokens");
  s.num_new_local_computed_tokens = opt("num_new_local_computed_tokens");
  s.num_external_computed_tokens = opt("num_external_computed_tokens");
  s.num_new_tokens = opt("num_new_tokens");
  s.num_prompt_tokens = opt("num_prompt_tokens");
  s.num_tokens = opt("num_tokens");
  s.block_size = opt("block_size");
  s.use_eagle = in.bool_or("use_eagle", false) ? 1 : 0;
  s.load_kv_async = in.bool_or("load_kv_async", false) ? 1 : 0;
  uint64_t out = 0;
  call([&](pdkv_error_t** e) { return pdkv_mamba_aligned_split_v0604(&s, &out, e); });
  return {{"num_new_tokens", out}};
}

json op_mamba_aligned_split(Input& in) {
  pdkv_aligned_split_input_t s{};
  s.struct_size = sizeof s;
  auto opt = [&](const char* k) { return in.has(k) ? in.u64(k) : 0; };
  s.start = opt("start");
  s.num_new_tokens = opt("num_new_tokens");
  s.num_prompt_tokens = opt("num_prompt_tokens");
  s.num_tokens = opt("num_tokens");
  s.block_size = opt("block_size");
  // An optional field is set (its bit with it) when the vector names it.
  auto optional = [&](const char* k, uint64_t bit, uint64_t& field) {
    if (!in.has(k)) return;
    field = in.u64(k);
    s.field_mask |= bit;
  };
  optional("floor_unit", PDKV_SPLIT_FIELD_FLOOR_UNIT, s.floor_unit);
  optional("tail_hash_block_size", PDKV_SPLIT_FIELD_TAIL_HASH_BLOCK_SIZE, s.tail_hash_block_size);
  s.shared_prefix_tokens = opt("shared_prefix_tokens");
  optional("max_num_scheduled_tokens", PDKV_SPLIT_FIELD_MAX_NUM_SCHEDULED_TOKENS, s.max_num_scheduled_tokens);
  optional("long_prefill_token_threshold", PDKV_SPLIT_FIELD_LONG_PREFILL_TOKEN_THRESHOLD,
           s.long_prefill_token_threshold);
  s.use_eagle = in.bool_or("use_eagle", false) ? 1 : 0;
  s.load_kv_async = in.bool_or("load_kv_async", false) ? 1 : 0;
  s.defer_oversized_block = in.bool_or("defer_oversized_block", false) ? 1 : 0;
  uint64_t out = 0;
  call([&](pdkv_error_t** e) { return pdkv_mamba_aligned_split(&s, &out, e); });
  return {{"num_new_tokens", out}};
}

json op_truncate_for_remote_decode(Input& in) {
  pdkv_remote_decode_prefill_t req{};
  req.struct_size = sizeof req;
  req.num_prompt_tokens = in.u64("num_prompt_tokens");
  req.max_tokens = in.u64("max_tokens");
  req.truncated = in.bool_or("truncated", false) ? 1 : 0;
  const uint8_t mamba = in.boolean("has_mamba") ? 1 : 0;
  pdkv_remote_decode_prefill_t out{};
  out.struct_size = sizeof out;
  call([&](pdkv_error_t** e) { return pdkv_truncate_for_remote_decode(&req, mamba, &out, e); });
  // In place (in == out) must give the same result.
  pdkv_remote_decode_prefill_t same = req;
  call([&](pdkv_error_t** e) { return pdkv_truncate_for_remote_decode(&same, mamba, &same, e); });
  if (same.num_prompt_tokens != out.num_prompt_tokens || same.max_tokens != out.max_tokens ||
      same.truncated != out.truncated)
    throw VectorError("pdkv_truncate_for_remote_decode in place differs from out of place");
  return {{"num_prompt_tokens", out.num_prompt_tokens}, {"max_tokens", out.max_tokens},
          {"truncated", out.truncated != 0}};
}

json op_receive_zero_ranges(Input& in) {
  const std::vector<uint64_t> blocks = u64_list(in.raw("local_blocks"), "local_blocks");
  const uint64_t tpb = in.u64("tokens_per_block"), bsr = in.u64("block_size_ratio"),
                 rlen = in.u64("remote_kernel_len");
  pdkv_zero_range_list_t* raw = nullptr;
  call([&](pdkv_error_t** e) { return pdkv_receive_zero_ranges(blocks.data(), blocks.size(), tpb, bsr, rlen, &raw, e); });
  return {{"zero_ranges", zero_list_json(raw)}};
}

json op_uncovered_token_ranges(Input& in) {
  const std::vector<uint64_t> blocks = u64_list(in.raw("local_blocks"), "local_blocks");
  const uint64_t first = in.u64("first_block_index"), tpb = in.u64("tokens_per_block"), held = in.u64("held_tokens");
  const json& w = in.raw("written");
  if (!w.is_array()) throw VectorError("written must be an array");
  std::vector<pdkv_token_interval_t> written;
  for (const json& x : w) {
    Input wi(x);
    written.push_back({wi.u64("begin"), wi.u64("end")});
    wi.check_all_used();
  }
  pdkv_zero_range_list_t* raw = nullptr;
  call([&](pdkv_error_t** e) {
    return pdkv_uncovered_token_ranges(blocks.data(), blocks.size(), first, tpb, held, written.data(), written.size(),
                                       &raw, e);
  });
  return {{"zero_ranges", zero_list_json(raw)}};
}

json op_mamba_descriptor_ids(Input& in) {
  const std::vector<uint64_t> ids = u64_list(in.raw("ids"), "ids");
  const uint64_t nl = in.u64("num_logical_blocks"), nr = in.u64("num_regions"), dpr = in.u64("descs_per_region"),
                 first = in.u64("first_id");
  pdkv_u64_list_t* raw = nullptr;
  call([&](pdkv_error_t** e) { return pdkv_mamba_descriptor_ids(ids.data(), ids.size(), nl, nr, dpr, first, &raw, e); });
  return {{"ids", items_of(raw)}};
}

json op_crc32c(Input& in) {
  const std::vector<uint8_t> b = bytes_of_hex(in.str("hex"));
  uint32_t out = 0;
  call([&](pdkv_error_t** e) { return pdkv_crc32c(b.data(), b.size(), &out, e); });
  return {{"crc32c", out}};
}

/// pdkv_engine_layout_t from an optional `layout` object (docs/conformance.md); strings and
/// arrays live in the returned holder.
struct LayoutHolder {
  std::string engine_id;
  std::vector<uint64_t> bases;
  std::vector<int32_t> kinds;
  pdkv_engine_layout_t c{};
};

/// Region kind names as the vectors spell them (pdkv_region_kind_t order).
const char* const kRegionKindNames[] = {"attention", "mamba", "mla"};

std::string region_kind_name(int32_t kind) {
  if (kind < 0 || kind > PDKV_REGION_MLA) throw VectorError("region kind " + std::to_string(kind) + " out of range");
  return kRegionKindNames[kind];
}

std::unique_ptr<LayoutHolder> layout_of(Input* in) {
  auto h = std::make_unique<LayoutHolder>();
  call([&](pdkv_error_t** e) { return pdkv_engine_layout_init(&h->c, e); });
  h->engine_id = h->c.engine_id;
  if (in != nullptr) {
    h->engine_id = in->str_or("engine_id", h->engine_id);
    h->c.tp_rank = in->u32_or("tp_rank", h->c.tp_rank);
    if (in->has("num_logical_blocks")) h->c.num_logical_blocks = in->u64("num_logical_blocks");
    h->c.num_regions = in->u32_or("num_regions", h->c.num_regions);
    if (in->has("base")) h->c.base = in->u64("base");
    if (in->has("region_bases")) {
      h->bases = u64_list(in->raw("region_bases"), "region_bases");
      h->c.region_bases = h->bases.data();
    }
    const std::string kv = in->str_or("kv_layout", "HND");
    if (kv == "HND") h->c.kv_layout = PDKV_KV_LAYOUT_HND;
    else if (kv == "NHD") h->c.kv_layout = PDKV_KV_LAYOUT_NHD;
    else throw VectorError("unknown kv_layout '" + kv + "'");
    // Optional fields are set (their bit with them) when the vector names them.
    if (in->has("prefix_caching")) {
      h->c.field_mask |= PDKV_LAYOUT_FIELD_PREFIX_CACHING;
      h->c.prefix_caching = static_cast<uint8_t>(in->i64("prefix_caching"));
    }
    if (in->has("pp_size") || in->has("pp_rank") || in->has("layer_begin")) {
      h->c.field_mask |= PDKV_LAYOUT_FIELD_PIPELINE;
      h->c.pp_size = in->u32_or("pp_size", 1);
      h->c.pp_rank = in->u32_or("pp_rank", 0);
      h->c.layer_begin = in->u32_or("layer_begin", 0);
    }
    if (in->has("layer_end")) {
      h->c.field_mask |= PDKV_LAYOUT_FIELD_LAYER_END;
      h->c.layer_end = in->u32("layer_end");
    }
    if (in->has("region_kinds")) {
      const json& kinds = in->raw("region_kinds");
      if (!kinds.is_array()) throw VectorError("region_kinds must be an array");
      for (const json& k : kinds) {
        if (!k.is_string()) throw VectorError("region_kinds entries must be strings");
        int32_t found = -1;
        for (int32_t i = 0; i <= PDKV_REGION_MLA; ++i)
          if (k.get<std::string>() == kRegionKindNames[i]) found = i;
        if (found < 0) throw VectorError("unknown region kind '" + k.get<std::string>() + "'");
        h->kinds.push_back(found);
      }
      h->c.region_kinds = h->kinds.data();
    }
    in->check_all_used();
  }
  h->c.engine_id = h->engine_id.c_str();
  return h;
}

MetadataPtr metadata_of(const pdkv_model_t* m, const pdkv_engine_config_t& c, const pdkv_engine_layout_t& l) {
  pdkv_engine_metadata_t* raw = nullptr;
  call([&](pdkv_error_t** e) { return pdkv_engine_metadata_from_model(m, &c, &l, &raw, e); });
  return MetadataPtr(raw);
}

/// A uint64 fingerprint as 16 lower-case hex digits (JSON integers must fit in int64).
std::string fingerprint_hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

/// The decoded fields of a metadata (the `metadata_decode` output keys).
json metadata_fields(const pdkv_engine_metadata_t* md, size_t encoded_length, uint32_t crc) {
  pdkv_engine_metadata_info_t i{};
  i.struct_size = sizeof i;
  call([&](pdkv_error_t** e) { return pdkv_engine_metadata_get_info(md, &i, e); });
  const pdkv_metadata_region_t* regions = nullptr;
  size_t nr = 0;
  call([&](pdkv_error_t** e) { return pdkv_engine_metadata_regions(md, &regions, &nr, e); });
  if (nr != i.num_regions) throw VectorError("metadata num_regions disagrees with the region list");
  json rj = json::array();
  for (size_t k = 0; k < nr; ++k)
    rj.push_back({{"base", regions[k].base}, {"block_len", regions[k].block_len}, {"num_blocks", regions[k].num_blocks},
                  {"kind", region_kind_name(regions[k].kind)}, {"layer", regions[k].layer}});
  const uint64_t* proj = nullptr;
  size_t np = 0;
  call([&](pdkv_error_t** e) { return pdkv_engine_metadata_conv_projection_bytes(md, &proj, &np, e); });
  if (np != i.num_conv_projections) throw VectorError("num_conv_projections disagrees with the projection list");
  const char* modes[] = {"none", "align", "all"};
  if (i.cache_mode < 0 || i.cache_mode > 2) throw VectorError("cache_mode out of range");
  return {{"engine_id", i.engine_id},
          {"tp_size", i.tp_size},
          {"tp_rank", i.tp_rank},
          {"kv_layout", i.kv_layout == PDKV_KV_LAYOUT_NHD ? "NHD" : "HND"},
          {"conv_layout", i.conv_layout == PDKV_CONV_LAYOUT_SD ? "SD" : "DS"},
          {"logical_block_size", i.logical_block_size},
          {"kernel_block_size", i.kernel_block_size},
          {"physical_blocks_per_logical", i.physical_blocks_per_logical},
          {"num_kernel_blocks", i.num_kernel_blocks},
          {"regions", rj},
          {"mamba_type", pdkv_mamba_type_name(i.mamba_type)},
          {"conv_bytes", i.conv_bytes},
          {"ssm_bytes", i.ssm_bytes},
          {"conv_projection_bytes", array_of(proj, np)},
          {"attention_bytes_per_token", i.attention_bytes_per_token},
          {"use_mla", i.use_mla != 0},
          {"total_kv_heads", i.total_kv_heads},
          {"prefix_caching", i.prefix_caching != 0},
          {"cache_mode", modes[i.cache_mode]},
          {"model_fingerprint", fingerprint_hex(i.model_fingerprint)},
          {"pp_size", i.pp_size},
          {"pp_rank", i.pp_rank},
          {"layer_begin", i.layer_begin},
          {"layer_end", i.layer_end},
          {"encoded_length", encoded_length},
          {"payload_crc32c", crc}};
}

/// Decodes bytes and reports the fields (shared by both metadata ops).
json decode_fields(const std::vector<uint8_t>& bytes, MetadataPtr* keep = nullptr) {
  pdkv_engine_metadata_t* raw = nullptr;
  call([&](pdkv_error_t** e) { return pdkv_engine_metadata_decode(bytes.data(), bytes.size(), &raw, e); });
  MetadataPtr md(raw);
  uint32_t crc = 0;
  if (bytes.size() < 16) throw VectorError("decoded metadata shorter than its header");
  call([&](pdkv_error_t** e) { return pdkv_crc32c(bytes.data() + 16, bytes.size() - 16, &crc, e); });
  json out = metadata_fields(md.get(), bytes.size(), crc);
  if (keep != nullptr) *keep = std::move(md);
  return out;
}

json op_metadata_roundtrip(Input& in) {
  ModelPtr m = model_of(in);
  Input engine_in = in.object("engine");
  const pdkv_engine_config_t c = engine_config(engine_in);
  std::unique_ptr<Input> layout_in;
  if (in.has("layout")) layout_in = std::make_unique<Input>(in.object("layout"));
  auto layout = layout_of(layout_in.get());
  MetadataPtr md = metadata_of(m.get(), c, layout->c);
  pdkv_bytes_t* raw = nullptr;
  call([&](pdkv_error_t** e) { return pdkv_engine_metadata_encode_bytes(md.get(), &raw, e); });
  std::unique_ptr<pdkv_bytes_t, BytesDeleter> owned(raw);
  const uint8_t* data = nullptr;
  size_t len = 0;
  call([&](pdkv_error_t** e) { return pdkv_bytes_data(owned.get(), &data, &len, e); });
  const std::vector<uint8_t> bytes(data, data + len);
  // The caller-buffer form gives the same bytes.
  size_t need = 0;
  pdkv_error_t* e0 = nullptr;
  const pdkv_status_t st = pdkv_engine_metadata_encode(md.get(), nullptr, 0, &need, &e0);
  pdkv_error_free(e0);
  if ((st != PDKV_OK && st != PDKV_ERR_BUFFER_TOO_SMALL) || need != len)
    throw VectorError("pdkv_engine_metadata_encode size query disagrees with encode_bytes");
  std::vector<uint8_t> buf(need);
  call([&](pdkv_error_t** e) { return pdkv_engine_metadata_encode(md.get(), buf.data(), buf.size(), &need, e); });
  if (buf != bytes) throw VectorError("pdkv_engine_metadata_encode bytes differ from encode_bytes");
  MetadataPtr decoded;
  json out = decode_fields(bytes, &decoded);
  uint8_t eq = 0;
  call([&](pdkv_error_t** e) { return pdkv_engine_metadata_equal(md.get(), decoded.get(), &eq, e); });
  if (eq != 1) throw VectorError("decoded metadata differs from the encoded one");
  // The fields of the built metadata equal the decoded ones.
  if (metadata_fields(md.get(), bytes.size(), out["payload_crc32c"].get<uint32_t>()) != out)
    throw VectorError("metadata fields differ before and after the round trip");
  out["hex"] = hex_of(bytes.data(), bytes.size());
  return out;
}

json op_metadata_decode(Input& in) { return decode_fields(bytes_of_hex(in.str("hex"))); }

/// Metadata of one side `{model, engine, layout}` of handshake_validate.
MetadataPtr side_metadata(Input side) {
  ModelPtr m = model_of(side);
  Input engine_in = side.object("engine");
  const pdkv_engine_config_t c = engine_config(engine_in);
  std::unique_ptr<Input> layout_in;
  if (side.has("layout")) layout_in = std::make_unique<Input>(side.object("layout"));
  auto layout = layout_of(layout_in.get());
  side.check_all_used();
  return metadata_of(m.get(), c, layout->c);
}

// ---- Issue #4 ops: descriptor builders, conv-offset helpers, model description, engine ranks,
// plan JSON ----------------------------------------------------------------------------------

struct DescListDeleter { void operator()(pdkv_descriptor_list_t* p) const { pdkv_descriptor_list_free(p); } };
using DescListPtr = std::unique_ptr<pdkv_descriptor_list_t, DescListDeleter>;

/// pdkv_region_t array from an array of `{base, block_len, num_blocks}`.
std::vector<pdkv_region_t> regions_of(const json& v, const std::string& what) {
  if (!v.is_array()) throw VectorError(what + " must be an array");
  std::vector<pdkv_region_t> out;
  for (const json& r : v) {
    Input ri(r);
    out.push_back({ri.u64("base"), ri.u64("block_len"), ri.u64("num_blocks")});
    ri.check_all_used();
  }
  return out;
}

/// `{addr, len}` array of a descriptor list (takes ownership).
json descriptors_json(pdkv_descriptor_list_t* raw) {
  DescListPtr list(raw);
  const pdkv_descriptor_t* d = nullptr;
  size_t n = 0;
  call([&](pdkv_error_t** e) { return pdkv_descriptor_list_items(list.get(), &d, &n, e); });
  json a = json::array();
  for (size_t i = 0; i < n; ++i) a.push_back({{"addr", d[i].addr}, {"len", d[i].len}});
  return a;
}

/// A TP mapping from a `mapping` object with the `tp_mapping` input keys.
TpMappingPtr mapping_of(Input mi) {
  pdkv_tp_mapping_params_t p{};
  p.struct_size = sizeof p;
  p.local_tp_size = mi.u32("local_tp_size");
  p.local_tp_rank = mi.u32("local_tp_rank");
  p.remote_tp_size = mi.u32("remote_tp_size");
  p.total_kv_heads = mi.u32("total_kv_heads");
  p.use_mla = mi.boolean("use_mla") ? 1 : 0;
  p.has_mamba = mi.boolean("has_mamba") ? 1 : 0;
  mi.check_all_used();
  pdkv_tp_mapping_t* raw = nullptr;
  call([&](pdkv_error_t** e) { return pdkv_tp_mapping_new(&p, &raw, e); });
  return TpMappingPtr(raw);
}

json op_attention_local_descriptors(Input& in) {
  const std::vector<pdkv_region_t> r = regions_of(in.raw("regions"), "regions");
  const uint32_t bsr = in.u32("block_size_ratio");
  pdkv_descriptor_list_t* raw = nullptr;
  call([&](pdkv_error_t** e) { return pdkv_attention_local_descriptors(r.data(), r.size(), bsr, &raw, e); });
  return {{"descriptors", descriptors_json(raw)}};
}

json op_attention_remote_descriptors(Input& in) {
  const std::vector<pdkv_region_t> l = regions_of(in.raw("local_regions"), "local_regions");
  const std::vector<pdkv_region_t> r = regions_of(in.raw("remote_regions"), "remote_regions");
  TpMappingPtr m = mapping_of(in.object("mapping"));
  const uint32_t bsr = in.u32("block_size_ratio");
  pdkv_descriptor_list_t* raw = nullptr;
  call([&](pdkv_error_t** e) {
    return pdkv_attention_remote_descriptors(l.data(), l.size(), r.data(), r.size(), m.get(), bsr, &raw, e);
  });
  return {{"descriptors", descriptors_json(raw)}};
}

json op_attention_split_descriptors(Input& in) {
  const std::vector<pdkv_region_t> r = regions_of(in.raw("regions"), "regions");
  TpMappingPtr m = mapping_of(in.object("mapping"));
  const uint32_t bsr = in.u32("block_size_ratio"), p_tp_rank = in.u32("p_tp_rank");
  pdkv_descriptor_list_t* local_raw = nullptr;
  call([&](pdkv_error_t** e) { return pdkv_attention_local_descriptors(r.data(), r.size(), bsr, &local_raw, e); });
  DescListPtr local(local_raw);
  pdkv_descriptor_list_t* raw = nullptr;
  call([&](pdkv_error_t** e) { return pdkv_attention_split_descriptors(local.get(), m.get(), bsr, p_tp_rank, &raw, e); });
  return {{"descriptors", descriptors_json(raw)}};
}

json op_mamba_local_descriptors(Input& in) {
  ModelPtr m = preset(in.str("model"));
  Input engine_in = in.object("engine");
  const pdkv_engine_config_t c = engine_config(engine_in);
  const std::vector<pdkv_region_t> r = regions_of(in.raw("regions"), "regions");
  const uint64_t ppl = in.u64("ppl");
  GeometryPtr g = geometry(m.get(), c);
  pdkv_descriptor_list_t* raw = nullptr;
  call([&](pdkv_error_t** e) { return pdkv_mamba_local_descriptors(r.data(), r.size(), ppl, g.get(), &raw, e); });
  return {{"descriptors", descriptors_json(raw)}};
}

/// The read list of a `mamba_*_descriptors` case (model, prefill, decode, decode_rank, rule) with
/// both geometries.
struct ReadsOfCase {
  ModelPtr model;
  GeometryPtr p, d;
  ReadListPtr reads;
};

ReadsOfCase reads_of_case(Input& in) {
  ReadsOfCase rc;
  rc.model = preset(in.str("model"));
  Input p_in = in.object("prefill");
  Input d_in = in.object("decode");
  const pdkv_engine_config_t pc = engine_config(p_in);
  const pdkv_engine_config_t dc = engine_config(d_in);
  const uint32_t d_tp_rank = in.u32("decode_rank");
  const std::string rule_name = in.str("rule");
  int32_t rule = 0;
  if (rule_name == "pdkv") rule = PDKV_MAMBA_READS_PDKV;
  else if (rule_name == "vllm") rule = PDKV_MAMBA_READS_VLLM;
  else throw VectorError("unknown rule '" + rule_name + "'");
  rc.p = geometry(rc.model.get(), pc);
  rc.d = geometry(rc.model.get(), dc);
  pdkv_mamba_read_list_t* raw = nullptr;
  call([&](pdkv_error_t** e) { return pdkv_mamba_reads_new(rc.p.get(), rc.d.get(), d_tp_rank, rule, &raw, e); });
  rc.reads.reset(raw);
  return rc;
}

json op_mamba_remote_descriptors(Input& in) {
  ReadsOfCase rc = reads_of_case(in);
  const std::vector<pdkv_region_t> r = regions_of(in.raw("p_regions"), "p_regions");
  const uint64_t ppl = in.u64("p_ppl");
  const uint32_t p_tp_rank = in.u32("p_tp_rank");
  pdkv_descriptor_list_t* raw = nullptr;
  call([&](pdkv_error_t** e) {
    return pdkv_mamba_remote_descriptors(r.data(), r.size(), ppl, rc.p.get(), rc.reads.get(), p_tp_rank, &raw, e);
  });
  return {{"descriptors", descriptors_json(raw)}};
}

json op_mamba_local_split_descriptors(Input& in) {
  ReadsOfCase rc = reads_of_case(in);
  const std::vector<pdkv_region_t> r = regions_of(in.raw("d_regions"), "d_regions");
  const uint64_t ppl = in.u64("d_ppl");
  const uint32_t p_tp_rank = in.u32("p_tp_rank");
  pdkv_descriptor_list_t* raw = nullptr;
  call([&](pdkv_error_t** e) {
    return pdkv_mamba_local_split_descriptors(r.data(), r.size(), ppl, rc.d.get(), rc.reads.get(), p_tp_rank, &raw, e);
  });
  return {{"descriptors", descriptors_json(raw)}};
}

/// Calls a function returning a byte-range list and lists its ranges.
template <typename F>
json ranges_json(F&& f) {
  pdkv_byte_range_list_t* raw = nullptr;
  call([&](pdkv_error_t** e) { return f(&raw, e); });
  std::unique_ptr<pdkv_byte_range_list_t, void (*)(pdkv_byte_range_list_t*)> list(raw, pdkv_byte_range_list_free);
  const pdkv_byte_range_t* r = nullptr;
  size_t n = 0;
  call([&](pdkv_error_t** e) { return pdkv_byte_range_list_items(list.get(), &r, &n, e); });
  json a = json::array();
  for (size_t i = 0; i < n; ++i) a.push_back({{"offset", r[i].offset}, {"size", r[i].size}});
  return a;
}

/// The geometry of a `{model, engine}` case.
struct GeometryOfCase {
  ModelPtr model;
  GeometryPtr g;
};

GeometryOfCase geometry_of_case(Input& in) {
  GeometryOfCase gc;
  gc.model = preset(in.str("model"));
  Input engine_in = in.object("engine");
  const pdkv_engine_config_t c = engine_config(engine_in);
  gc.g = geometry(gc.model.get(), c);
  return gc;
}

json op_mamba_local_conv_offsets(Input& in) {
  GeometryOfCase gc = geometry_of_case(in);
  return {{"ranges", ranges_json([&](pdkv_byte_range_list_t** out, pdkv_error_t** e) {
             return pdkv_mamba_local_conv_offsets(gc.g.get(), out, e);
           })}};
}

int32_t i32_of(Input& in, const std::string& k) {
  const int64_t v = in.i64(k);
  if (v < INT32_MIN || v > INT32_MAX) throw VectorError("input '" + k + "' does not fit in int32");
  return static_cast<int32_t>(v);
}

json op_mamba_remote_conv_offsets(Input& in) {
  GeometryOfCase gc = geometry_of_case(in);
  const uint32_t rank = in.u32("local_tp_rank");
  const int32_t ratio = i32_of(in, "tp_ratio");
  return {{"ranges", ranges_json([&](pdkv_byte_range_list_t** out, pdkv_error_t** e) {
             return pdkv_mamba_remote_conv_offsets(gc.g.get(), rank, ratio, out, e);
           })}};
}

json op_mamba_ssm_read_range(Input& in) {
  GeometryOfCase gc = geometry_of_case(in);
  const uint64_t rc = in.u64("remote_conv_bytes"), rs = in.u64("remote_ssm_bytes");
  const uint32_t rank = in.u32("local_tp_rank");
  const int32_t ratio = i32_of(in, "tp_ratio");
  pdkv_byte_range_t out{};
  call([&](pdkv_error_t** e) { return pdkv_mamba_ssm_read_range(gc.g.get(), rc, rs, rank, ratio, &out, e); });
  return {{"offset", out.offset}, {"size", out.size}};
}

/// The model keys of docs/conformance.md (describe + layer counts + fingerprint).
json model_fields(const pdkv_model_t* m) {
  pdkv_model_desc_t d{};
  d.struct_size = sizeof d;
  call([&](pdkv_error_t** e) { return pdkv_model_describe(m, &d, e); });
  uint32_t na = 0, nm = 0;
  call([&](pdkv_error_t** e) { return pdkv_model_layer_counts(m, &na, &nm, e); });
  uint64_t fp = 0;
  call([&](pdkv_error_t** e) { return pdkv_model_fingerprint(m, &fp, e); });
  if (d.name == nullptr || d.layer_pattern == nullptr) throw VectorError("describe returned a NULL string");
  return {{"name", d.name},
          {"num_kv_heads", d.num_kv_heads},
          {"head_size", d.head_size},
          {"head_size_v", d.head_size_v},
          {"use_mla", d.use_mla != 0},
          {"sliding_window", d.sliding_window},
          {"mamba_type", pdkv_mamba_type_name(d.mamba_type)},
          {"mamba_num_heads", d.mamba_num_heads},
          {"mamba_head_dim", d.mamba_head_dim},
          {"mamba_d_state", d.mamba_d_state},
          {"mamba_n_groups", d.mamba_n_groups},
          {"mamba_d_inner", d.mamba_d_inner},
          {"mamba_conv_kernel", d.mamba_conv_kernel},
          {"mamba_chunk_size", d.mamba_chunk_size},
          {"mamba_conv_rows_include_spec", d.mamba_conv_rows_include_spec != 0},
          {"dtype_bytes", d.dtype_bytes},
          {"default_ssm_dtype_bytes", d.default_ssm_dtype_bytes},
          {"layer_pattern", d.layer_pattern},
          {"num_attention_layers", na},
          {"num_mamba_layers", nm},
          {"model_fingerprint", fingerprint_hex(fp)}};
}

json op_model_preset(Input& in) {
  ModelPtr m = preset(in.str("model"));
  return model_fields(m.get());
}

json op_model_hf_config(Input& in) {
  const std::string text = in.str("json");
  const bool named = in.has("name");
  const std::string name = named ? in.str("name") : std::string();
  pdkv_model_t* raw = nullptr;
  call([&](pdkv_error_t** e) {
    return pdkv_model_from_hf_config_json(text.data(), text.size(), named ? name.c_str() : nullptr, &raw, e);
  });
  ModelPtr m(raw);
  return model_fields(m.get());
}

/// Items of a report as `{status, field}`; checks `item_messages_contain` (optional input).
json report_items(pdkv_handshake_report_t* raw, Input& in) {
  std::unique_ptr<pdkv_handshake_report_t, ReportDeleter> report(raw);
  size_t n = 0;
  call([&](pdkv_error_t** e) { return pdkv_handshake_report_count(report.get(), &n, e); });
  const json* contains = nullptr;
  if (in.has("item_messages_contain")) {
    contains = &in.raw("item_messages_contain");
    if (!contains->is_array()) throw VectorError("item_messages_contain must be an array");
    if (contains->size() != n)
      throw VectorError("item_messages_contain has " + std::to_string(contains->size()) + " entries for " +
                        std::to_string(n) + " items");
  }
  json items = json::array();
  for (size_t k = 0; k < n; ++k) {
    pdkv_incompatibility_t it{};
    it.struct_size = sizeof it;
    call([&](pdkv_error_t** e) { return pdkv_handshake_report_item(report.get(), k, &it, e); });
    if (contains != nullptr) {
      const json& want = (*contains)[k];
      if (!want.is_array()) throw VectorError("item_messages_contain entries must be arrays");
      for (const json& sub : want) {
        if (!sub.is_string()) throw VectorError("item_messages_contain must hold strings");
        if (std::string(it.message).find(sub.get<std::string>()) == std::string::npos)
          throw VectorError("item " + std::to_string(k) + " message '" + it.message + "' does not contain '" +
                            sub.get<std::string>() + "'");
      }
    }
    items.push_back({{"status", pdkv_status_name(static_cast<pdkv_status_t>(it.status))}, {"field", it.field}});
  }
  return items;
}

json op_handshake_validate_engine_ranks(Input& in) {
  const json& ranks_in = in.raw("ranks");
  if (!ranks_in.is_array()) throw VectorError("ranks must be an array");
  std::vector<MetadataPtr> ranks;
  std::vector<const pdkv_engine_metadata_t*> ptrs;
  for (const json& r : ranks_in) {
    ranks.push_back(side_metadata(Input(r)));
    ptrs.push_back(ranks.back().get());
  }
  pdkv_handshake_report_t* raw = nullptr;
  call([&](pdkv_error_t** e) { return pdkv_handshake_validate_engine_ranks(ptrs.data(), ptrs.size(), &raw, e); });
  return {{"items", report_items(raw, in)}};
}

json op_handshake_validate(Input& in) {
  MetadataPtr local = side_metadata(in.object("local"));
  MetadataPtr remote = side_metadata(in.object("remote"));
  pdkv_handshake_report_t* raw = nullptr;
  call([&](pdkv_error_t** e) { return pdkv_handshake_validate(local.get(), remote.get(), &raw, e); });
  json items = report_items(raw, in);
  pdkv_error_t* e1 = nullptr;
  const pdkv_status_t st = pdkv_handshake_require_compatible(local.get(), remote.get(), &e1);
  pdkv_error_free(e1);
  if (st != PDKV_OK && st != PDKV_ERR_INCOMPATIBLE) throw VectorError("require_compatible returned an unexpected status");
  if ((st == PDKV_OK) != items.empty()) throw VectorError("require_compatible disagrees with the report");
  return {{"items", items}, {"compatible", st == PDKV_OK}};
}

/// Builds, compiles and re-validates the plan of a `transfer_plan` case; `as_json` returns the
/// `transfer_plan_json` output instead of the `transfer_plan` one.
json transfer_plan_case(Input& in, bool as_json) {
  // The model: a preset name (`model`) or config.json text (`hf_config`), exactly one.
  if (in.has("model") == in.has("hf_config")) throw VectorError("transfer_plan needs exactly one of model / hf_config");
  ModelPtr m;
  if (in.has("model")) {
    m = model_of(in);
  } else {
    const std::string text = in.str("hf_config");
    pdkv_model_t* raw = nullptr;
    call([&](pdkv_error_t** e) { return pdkv_model_from_hf_config_json(text.data(), text.size(), nullptr, &raw, e); });
    m.reset(raw);
  }
  Input p_in = in.object("prefill");
  Input d_in = in.object("decode");
  const uint32_t d_tp_rank = in.u32("decode_rank");
  Input p_engine_in = p_in.object("engine");
  Input d_engine_in = d_in.object("engine");
  const pdkv_engine_config_t pc = engine_config(p_engine_in);
  const pdkv_engine_config_t dc = engine_config(d_engine_in);
  std::unique_ptr<Input> pl_in, dl_in;
  if (p_in.has("layout")) pl_in = std::make_unique<Input>(p_in.object("layout"));
  if (d_in.has("layout")) dl_in = std::make_unique<Input>(d_in.object("layout"));
  auto p_layout = layout_of(pl_in.get());
  auto d_layout = layout_of(dl_in.get());
  // Optional `prefill.ranks`: the P ranks whose metadata the context receives, in that order
  // (default: every rank 0..P_TP-1).
  std::vector<uint32_t> p_ranks;
  if (p_in.has("ranks")) {
    p_ranks = u32_list(p_in.raw("ranks"), "prefill.ranks");
  } else {
    for (uint32_t p = 0; p < pc.tp_size; ++p) p_ranks.push_back(p);
  }
  p_in.check_all_used();
  d_in.check_all_used();
  const bool permute_on_receive = in.bool_or("permute_on_receive", false);
  d_layout->c.tp_rank = d_tp_rank;
  MetadataPtr local = metadata_of(m.get(), dc, d_layout->c);
  std::vector<MetadataPtr> remote;
  std::vector<const pdkv_engine_metadata_t*> remote_ptrs;
  for (uint32_t p : p_ranks) {
    p_layout->c.tp_rank = p;
    remote.push_back(metadata_of(m.get(), pc, p_layout->c));
    remote_ptrs.push_back(remote.back().get());
  }
  GeometryPtr dg = geometry(m.get(), dc);
  GeometryPtr pg = geometry(m.get(), pc);
  pdkv_plan_context_params_t cp{};
  cp.struct_size = sizeof cp;
  cp.local = local.get();
  cp.remote = remote_ptrs.data();
  cp.num_remote = remote_ptrs.size();
  cp.local_geometry = dg.get();
  cp.remote_geometry = pg.get();
  cp.permute_on_receive = permute_on_receive ? 1 : 0;
  pdkv_plan_context_t* ctx_raw = nullptr;
  call([&](pdkv_error_t** e) { return pdkv_plan_context_new(&cp, &ctx_raw, e); });
  std::unique_ptr<pdkv_plan_context_t, ContextDeleter> ctx(ctx_raw);

  const json& groups_in = in.raw("groups");
  if (!groups_in.is_array()) throw VectorError("groups must be an array");
  std::vector<std::unique_ptr<TrimInput>> trims;
  std::vector<std::vector<uint32_t>> regions, layers;
  std::vector<pdkv_plan_group_t> groups;
  for (const json& g : groups_in) {
    Input gi(g);
    trims.push_back(trim_input(gi));
    regions.push_back(gi.has("regions") ? u32_list(gi.raw("regions"), "regions") : std::vector<uint32_t>{});
    layers.push_back(gi.has("layers") ? u32_list(gi.raw("layers"), "layers") : std::vector<uint32_t>{});
    gi.check_all_used();
  }
  for (size_t k = 0; k < trims.size(); ++k) {
    pdkv_plan_group_t pg_{};
    pg_.struct_size = sizeof pg_;
    pg_.trim = &trims[k]->c;
    pg_.regions = regions[k].empty() ? nullptr : regions[k].data();
    pg_.num_regions = regions[k].size();
    pg_.layers = layers[k].empty() ? nullptr : layers[k].data();
    pg_.num_layers = layers[k].size();
    groups.push_back(pg_);
  }
  pdkv_transfer_plan_t* plan_raw = nullptr;
  call([&](pdkv_error_t** e) { return pdkv_transfer_plan_compile(ctx.get(), groups.data(), groups.size(), &plan_raw, e); });
  std::unique_ptr<pdkv_transfer_plan_t, PlanDeleter> plan(plan_raw);
  call([&](pdkv_error_t** e) { return pdkv_transfer_plan_validate(plan.get(), ctx.get(), groups.data(), groups.size(), e); });
  if (as_json) {
    pdkv_string_t* str_raw = nullptr;
    call([&](pdkv_error_t** e) { return pdkv_transfer_plan_to_json_string(plan.get(), &str_raw, e); });
    std::unique_ptr<pdkv_string_t, StringDeleter> str(str_raw);
    const char* text = nullptr;
    size_t len = 0;
    call([&](pdkv_error_t** e) { return pdkv_string_text(str.get(), &text, &len, e); });
    const std::string dump(text, len);
    if (std::strlen(text) != len) throw VectorError("pdkv_string_text length differs from the NUL-terminated text");
    // The caller-buffer form: size query (BUFFER_TOO_SMALL naming the size), then the same text.
    size_t need = 0;
    pdkv_error_t* e0 = nullptr;
    const pdkv_status_t st = pdkv_transfer_plan_to_json(plan.get(), nullptr, 0, &need, &e0);
    pdkv_error_free(e0);
    if (st != PDKV_ERR_BUFFER_TOO_SMALL || need != len)
      throw VectorError("pdkv_transfer_plan_to_json size query disagrees with the string form");
    std::vector<char> buf(need + 1, 'x');
    call([&](pdkv_error_t** e) { return pdkv_transfer_plan_to_json(plan.get(), buf.data(), buf.size(), &need, e); });
    if (buf[need] != '\0' || std::string(buf.data(), need) != dump)
      throw VectorError("pdkv_transfer_plan_to_json text differs from the string form");
    json lines = json::array();
    size_t pos = 0;
    while (true) {
      const size_t nl = dump.find('\n', pos);
      lines.push_back(dump.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos));
      if (nl == std::string::npos) break;
      pos = nl + 1;
    }
    return {{"lines", lines}};
  }
  pdkv_transfer_plan_info_t i{};
  i.struct_size = sizeof i;
  call([&](pdkv_error_t** e) { return pdkv_transfer_plan_get_info(plan.get(), &i, e); });
  const uint32_t* rr = nullptr;
  size_t nrr = 0;
  call([&](pdkv_error_t** e) { return pdkv_transfer_plan_read_ranks(plan.get(), &rr, &nrr, e); });
  const uint32_t* nt = nullptr;
  size_t nnt = 0;
  call([&](pdkv_error_t** e) { return pdkv_transfer_plan_notify_ranks(plan.get(), &nt, &nnt, e); });
  if (nrr != i.num_read_ranks || nnt != i.num_notify_ranks) throw VectorError("plan info counts disagree with the lists");
  json reads = json::array(), rank_bytes = json::array();
  uint64_t total = 0;
  for (uint32_t p = 0; p < i.p_tp_size; ++p) {
    const pdkv_plan_read_t* r = nullptr;
    size_t n = 0;
    uint64_t bytes = 0;
    call([&](pdkv_error_t** e) { return pdkv_transfer_plan_rank_reads(plan.get(), p, &r, &n, &bytes, e); });
    std::vector<pdkv_plan_read_t> v(r, r + n);
    std::sort(v.begin(), v.end(), [](const pdkv_plan_read_t& a, const pdkv_plan_read_t& b) {
      return a.local_region != b.local_region ? a.local_region < b.local_region : a.local_offset < b.local_offset;
    });
    json rj = json::array();
    uint64_t sum = 0;
    for (const auto& x : v) {
      rj.push_back({{"local_region", x.local_region}, {"local_offset", x.local_offset},
                    {"remote_region", x.remote_region}, {"remote_offset", x.remote_offset}, {"length", x.length}});
      sum += x.length;
    }
    if (sum != bytes) throw VectorError("rank_reads bytes differ from the sum of the read lengths");
    total += bytes;
    reads.push_back(rj);
    rank_bytes.push_back(bytes);
  }
  if (total != i.bytes) throw VectorError("plan bytes differ from the per-rank sums");
  json gz = json::array();
  for (size_t k = 0; k < i.num_groups; ++k) {
    pdkv_plan_group_zero_t z{};
    z.struct_size = sizeof z;
    call([&](pdkv_error_t** e) { return pdkv_transfer_plan_group_zero(plan.get(), k, &z, e); });
    gz.push_back({{"kind", pdkv_group_kind_name(z.kind)}, {"regions", array_of(z.regions, z.num_regions)},
                  {"zero_ranges", zero_ranges_json(z.zero, z.num_zero)},
                  {"unfilled_states", array_of(z.unfilled_states, z.num_unfilled_states)},
                  {"permute_blocks", array_of(z.permute_blocks, z.num_permute_blocks)},
                  {"permute_regions", array_of(z.permute_regions, z.num_permute_regions)}});
  }
  return {{"d_tp_size", i.d_tp_size},
          {"p_tp_size", i.p_tp_size},
          {"read_ranks", array_of(rr, nrr)},
          {"notify_ranks", array_of(nt, nnt)},
          {"notifications_per_p_rank", i.notifications_per_p_rank},
          {"reads", reads},
          {"rank_bytes", rank_bytes},
          {"groups", gz},
          {"pieces_before_coalescing", i.pieces_before_coalescing},
          {"pieces_after_coalescing", i.pieces_after_coalescing},
          {"bytes", i.bytes},
          {"attention_bytes", i.attention_bytes},
          {"mamba_bytes", i.mamba_bytes},
          {"empty", i.empty != 0},
          {"d_pp_size", i.d_pp_size},
          {"d_pp_rank", i.d_pp_rank},
          {"p_pp_size", i.p_pp_size},
          {"p_pp_rank", i.p_pp_rank},
          {"layer_begin", i.layer_begin},
          {"layer_end", i.layer_end},
          {"permute", {{"from", i.permute_from_layout == PDKV_KV_LAYOUT_NHD ? "NHD" : "HND"},
                       {"to", i.permute_to_layout == PDKV_KV_LAYOUT_NHD ? "NHD" : "HND"},
                       {"heads", i.permute_heads},
                       {"tokens", i.permute_tokens},
                       {"head_bytes", i.permute_head_bytes}}}};
}

/// One KV block permuted in place (pdkv_permute_kv_block).
json op_permute_kv_block(Input& in) {
  std::vector<uint8_t> b = bytes_of_hex(in.str("hex"));
  auto layout = [&](const char* key) {
    const std::string v = in.str(key);
    if (v == "HND") return static_cast<int32_t>(PDKV_KV_LAYOUT_HND);
    if (v == "NHD") return static_cast<int32_t>(PDKV_KV_LAYOUT_NHD);
    throw VectorError(std::string("unknown layout '") + v + "'");
  };
  const int32_t from = layout("from"), to = layout("to");
  const uint64_t heads = in.u64("heads"), tokens = in.u64("tokens"), head_bytes = in.u64("head_bytes");
  call([&](pdkv_error_t** e) { return pdkv_permute_kv_block(b.data(), b.size(), from, to, heads, tokens, head_bytes, e); });
  return {{"hex", hex_of(b.data(), b.size())}};
}

/// vLLM's default pipeline split of `num_layers` (pdkv_pipeline_layer_window).

/// Pairs P stages with D stages (pdkv_pipeline_stage_pairs) and reports, per P stage, the
/// notifications each of its ranks waits for (pdkv_pipeline_notifications_expected).
json op_pipeline_stage_pairs(Input& in) {
  ModelPtr m = model_of(in);
  Input p_in = in.object("prefill");
  Input d_in = in.object("decode");
  Input p_engine_in = p_in.object("engine");
  Input d_engine_in = d_in.object("engine");
  const pdkv_engine_config_t pc = engine_config(p_engine_in);
  const pdkv_engine_config_t dc = engine_config(d_engine_in);
  auto stages = [&](Input& side, const pdkv_engine_config_t& c, std::vector<MetadataPtr>& keep) {
    const json& list = side.raw("stages");
    if (!list.is_array()) throw VectorError("stages must be an array");
    std::vector<const pdkv_engine_metadata_t*> out;
    for (const json& l : list) {
      Input li(l);
      auto layout = layout_of(&li);
      keep.push_back(metadata_of(m.get(), c, layout->c));
      out.push_back(keep.back().get());
    }
    side.check_all_used();
    return out;
  };
  std::vector<MetadataPtr> pk, dk;
  const auto ps = stages(p_in, pc, pk);
  const auto ds = stages(d_in, dc, dk);
  pdkv_stage_pair_list_t* raw = nullptr;
  call([&](pdkv_error_t** x) { return pdkv_pipeline_stage_pairs(ps.data(), ps.size(), ds.data(), ds.size(), &raw, x); });
  std::unique_ptr<pdkv_stage_pair_list_t, void (*)(pdkv_stage_pair_list_t*)> list(raw, pdkv_stage_pair_list_free);
  const pdkv_stage_pair_t* items = nullptr;
  size_t count = 0;
  call([&](pdkv_error_t** x) { return pdkv_stage_pair_list_items(list.get(), &items, &count, x); });
  const std::vector<pdkv_stage_pair_t> pairs =
      count == 0 ? std::vector<pdkv_stage_pair_t>{} : std::vector<pdkv_stage_pair_t>(items, items + count);
  json pj = json::array();
  for (const auto& p : pairs) {
    pj.push_back({{"p_pp_rank", p.p_pp_rank}, {"d_pp_rank", p.d_pp_rank}, {"layer_begin", p.layer_begin},
                  {"layer_end", p.layer_end}});
  }
  pdkv_engine_metadata_info_t pi{};
  pi.struct_size = sizeof pi;
  call([&](pdkv_error_t** x) { return pdkv_engine_metadata_get_info(ps.front(), &pi, x); });
  json notes = json::array();
  for (uint32_t s = 0; s < pi.pp_size; ++s) {
    uint32_t n = 0;
    call([&](pdkv_error_t** x) {
      return pdkv_pipeline_notifications_expected(pairs.data(), pairs.size(), s, pc.tp_size, dc.tp_size, &n, x);
    });
    notes.push_back(n);
  }
  return {{"pairs", pj}, {"notifications", notes}};
}

json op_transfer_plan(Input& in) { return transfer_plan_case(in, false); }

json op_transfer_plan_json(Input& in) { return transfer_plan_case(in, true); }

/// `engine_plan`: the engine-level API (pdkv/engine.h). The D rank and every P rank are described
/// as engines (model, settings, rank, layout's engine_id and num_logical_blocks); the P ranks'
/// metadata comes from pdkv_engine_get_metadata, the context from pdkv_engine_plan_context_new,
/// the plan from pdkv_engine_plan_request with the request's per-group block tables.
json op_engine_plan(Input& in) {
  if (in.has("model") == in.has("hf_config")) throw VectorError("engine_plan needs exactly one of model / hf_config");
  ModelPtr m;
  if (in.has("model")) {
    m = model_of(in);
  } else {
    const std::string text = in.str("hf_config");
    pdkv_model_t* raw = nullptr;
    call([&](pdkv_error_t** e) { return pdkv_model_from_hf_config_json(text.data(), text.size(), nullptr, &raw, e); });
    m.reset(raw);
  }
  struct EngineDeleter { void operator()(pdkv_engine_t* p) const { pdkv_engine_free(p); } };
  using EnginePtr = std::unique_ptr<pdkv_engine_t, EngineDeleter>;
  struct Side {
    pdkv_engine_config_t config{};
    std::string engine_id;
    uint64_t blocks = 0;
  };
  auto side_of = [&](const char* key) {
    Input s = in.object(key);
    Input e = s.object("engine");
    Input l = s.object("layout");
    Side out;
    out.config = engine_config(e);
    out.engine_id = l.str("engine_id");
    out.blocks = l.u64("num_logical_blocks");
    l.check_all_used();
    s.check_all_used();
    return out;
  };
  const Side p = side_of("prefill");
  const Side d = side_of("decode");
  auto make = [&](const Side& s, uint32_t rank) {
    pdkv_engine_options_t o;
    call([&](pdkv_error_t** e) { return pdkv_engine_options_init(&o, e); });
    o.model = m.get();
    o.config = &s.config;
    o.engine_id = s.engine_id.c_str();
    o.tp_rank = rank;
    o.num_logical_blocks = s.blocks;
    pdkv_engine_t* raw = nullptr;
    call([&](pdkv_error_t** e) { return pdkv_engine_new(&o, &raw, e); });
    return EnginePtr(raw);
  };
  EnginePtr engine = make(d, in.u32("decode_rank"));
  std::vector<MetadataPtr> remote;
  std::vector<const pdkv_engine_metadata_t*> remote_ptrs;
  for (uint32_t r = 0; r < p.config.tp_size; ++r) {
    EnginePtr pe = make(p, r);
    pdkv_engine_metadata_t* md = nullptr;
    call([&](pdkv_error_t** e) { return pdkv_engine_get_metadata(pe.get(), &md, e); });
    remote.emplace_back(md);
    remote_ptrs.push_back(md);
  }
  pdkv_engine_peer_t peer{};
  peer.struct_size = sizeof peer;
  peer.remote = remote_ptrs.data();
  peer.num_remote = remote_ptrs.size();
  peer.remote_config = &p.config;
  pdkv_plan_context_t* ctx_raw = nullptr;
  call([&](pdkv_error_t** e) { return pdkv_engine_plan_context_new(engine.get(), &peer, &ctx_raw, e); });
  std::unique_ptr<pdkv_plan_context_t, ContextDeleter> ctx(ctx_raw);

  Input rq = in.object("request");
  const json& groups_in = rq.raw("groups");
  if (!groups_in.is_array()) throw VectorError("request.groups must be an array");
  std::vector<std::vector<uint64_t>> local, remote_ids;
  for (const json& g : groups_in) {
    Input gi(g);
    local.push_back(u64_list(gi.raw("local"), "local"));
    remote_ids.push_back(u64_list(gi.raw("remote"), "remote"));
    gi.check_all_used();
  }
  std::vector<pdkv_engine_request_group_t> groups;
  for (size_t k = 0; k < local.size(); ++k) {
    groups.push_back({local[k].data(), local[k].size(), remote_ids[k].data(), remote_ids[k].size()});
  }
  pdkv_engine_request_t req{};
  req.struct_size = sizeof req;
  req.groups = groups.data();
  req.num_groups = groups.size();
  req.num_prompt_tokens = rq.u64("num_prompt_tokens");
  req.num_local_computed_tokens = rq.u64("num_local_computed_tokens");
  rq.check_all_used();
  pdkv_transfer_plan_t* plan_raw = nullptr;
  call([&](pdkv_error_t** e) { return pdkv_engine_plan_request(engine.get(), ctx.get(), &req, &plan_raw, e); });
  std::unique_ptr<pdkv_transfer_plan_t, PlanDeleter> plan(plan_raw);

  pdkv_engine_info_t info{};
  info.struct_size = sizeof info;
  call([&](pdkv_error_t** e) { return pdkv_engine_get_info(engine.get(), &info, e); });
  json gj = json::array();
  for (size_t k = 0; k < info.num_groups; ++k) {
    pdkv_engine_group_t g{};
    g.struct_size = sizeof g;
    call([&](pdkv_error_t** e) { return pdkv_engine_group(engine.get(), k, &g, e); });
    gj.push_back({{"kind", pdkv_group_kind_name(g.kind)}, {"layers", array_of(g.layers, g.num_layers)}});
  }
  pdkv_string_t* str_raw = nullptr;
  call([&](pdkv_error_t** e) { return pdkv_transfer_plan_to_json_string(plan.get(), &str_raw, e); });
  std::unique_ptr<pdkv_string_t, StringDeleter> str(str_raw);
  const char* text = nullptr;
  size_t len = 0;
  call([&](pdkv_error_t** e) { return pdkv_string_text(str.get(), &text, &len, e); });
  const std::string dump(text, len);
  json lines = json::array();
  size_t pos = 0;
  while (true) {
    const size_t nl = dump.find('\n', pos);
    lines.push_back(dump.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos));
    if (nl == std::string::npos) break;
    pos = nl + 1;
  }
  return {{"groups", gj}, {"num_regions", info.num_regions}, {"lines", lines}};
}


/// Output keys of model_preset and model_hf_config.
#define MODEL_KEYS                                                                                        \
  "name", "num_kv_heads", "head_size", "head_size_v", "use_mla", "sliding_window", "mamba_type",              \
      "mamba_num_heads", "mamba_head_dim", "mamba_d_state", "mamba_n_groups", "mamba_d_inner",                \
      "mamba_conv_kernel", "mamba_chunk_size", "mamba_conv_rows_include_spec", "dtype_bytes",                 \
      "default_ssm_dtype_bytes", "layer_pattern", "num_attention_layers", "num_mamba_layers", "model_fingerprint"

/// Output keys shared by metadata_roundtrip and metadata_decode.
#define METADATA_KEYS                                                                                    \
  "engine_id", "tp_size", "tp_rank", "kv_layout", "conv_layout", "logical_block_size", "kernel_block_size", \
      "physical_blocks_per_logical", "num_kernel_blocks", "regions", "mamba_type", "conv_bytes", "ssm_bytes", \
      "conv_projection_bytes", "attention_bytes_per_token", "use_mla", "total_kv_heads", "prefix_caching",   \
      "cache_mode", "model_fingerprint", "pp_size", "pp_rank", "layer_begin", "layer_end", "encoded_length", \
      "payload_crc32c"

// The plain functions' ops (named after the C function; generated from the header).
#include "conformance_plain.inc"

/// The ops table of docs/conformance.md, plus one op per plain function (add_plain_ops).
const std::map<std::string, Op>& ops() {
  static const std::map<std::string, Op> table = [] {
    std::map<std::string, Op> t = {
      {"tp_mapping",
       {{"tp_ratio", "handshake_targets", "attention_source_ranks", "mamba_source_ranks", "all_source_ranks",
         "attention_slots", "notify_ranks", "rank_offset_factor", "local_replicated", "remote_replicated",
         "local_physical_heads", "remote_physical_heads"},
        op_tp_mapping}},
      {"geometry",
       {{"kv_heads_per_rank", "kv_head_bytes_per_token", "attn_bytes_per_token", "conv_bytes", "ssm_bytes", "mamba_page_bytes", "block_size",
         "mamba_block_size", "attn_page_bytes", "padding_ppm", "kernel_block_size", "physical_per_logical",
         "kernel_page_bytes", "projections", "log_lines"},
        op_geometry}},
      {"mamba_reads", {{"reads", "source_ranks"}, op_mamba_reads}},
      {"clip_exchange_blocks", {{"ids"}, op_clip_exchange_blocks}},
      {"descriptor_ids", {{"ids"}, op_descriptor_ids}},
      {"logical_to_kernel_block_ids", {{"ids"}, op_logical_to_kernel_block_ids}},
      {"map_block_ids_for_block_size_ratio", {{"ids"}, op_map_block_ids_for_block_size_ratio}},
      {"plan_remote_decode_prefill", {{"num_prompt_tokens", "computed_tokens", "new_tokens"}, op_plan_remote_decode_prefill}},
      {"derive_offload_geometry", {{"num_blocks", "hash_blocks_per_block"}, op_derive_offload_geometry}},
      {"trim_group",
       {{"kind", "transferred_tokens", "runs", "states", "zero_ranges", "unfilled_states"}, op_trim_group}},
      {"mamba_aligned_split_v0604", {{"num_new_tokens"}, op_mamba_aligned_split_v0604}},
      {"mamba_aligned_split", {{"num_new_tokens"}, op_mamba_aligned_split}},
      {"truncate_for_remote_decode", {{"num_prompt_tokens", "max_tokens", "truncated"}, op_truncate_for_remote_decode}},
      {"receive_zero_ranges", {{"zero_ranges"}, op_receive_zero_ranges}},
      {"uncovered_token_ranges", {{"zero_ranges"}, op_uncovered_token_ranges}},
      {"mamba_descriptor_ids", {{"ids"}, op_mamba_descriptor_ids}},
      {"crc32c", {{"crc32c"}, op_crc32c}},
      {"metadata_roundtrip", {{METADATA_KEYS, "hex"}, op_metadata_roundtrip}},
      {"metadata_decode", {{METADATA_KEYS}, op_metadata_decode}},
      {"handshake_validate", {{"items", "compatible"}, op_handshake_validate}},
      {"transfer_plan",
       {{"d_tp_size", "p_tp_size", "read_ranks", "notify_ranks", "notifications_per_p_rank", "reads", "rank_bytes", "groups",
         "pieces_before_coalescing", "pieces_after_coalescing", "bytes", "attention_bytes", "mamba_bytes", "empty",
         "d_pp_size", "d_pp_rank", "p_pp_size", "p_pp_rank", "layer_begin", "layer_end", "permute"},
        op_transfer_plan}},
      {"attention_local_descriptors", {{"descriptors"}, op_attention_local_descriptors}},
      {"attention_remote_descriptors", {{"descriptors"}, op_attention_remote_descriptors}},
      {"attention_split_descriptors", {{"descriptors"}, op_attention_split_descriptors}},
      {"mamba_local_descriptors", {{"descriptors"}, op_mamba_local_descriptors}},
      {"mamba_remote_descriptors", {{"descriptors"}, op_mamba_remote_descriptors}},
      {"mamba_local_split_descriptors", {{"descriptors"}, op_mamba_local_split_descriptors}},
      {"mamba_local_conv_offsets", {{"ranges"}, op_mamba_local_conv_offsets}},
      {"mamba_remote_conv_offsets", {{"ranges"}, op_mamba_remote_conv_offsets}},
      {"mamba_ssm_read_range", {{"offset", "size"}, op_mamba_ssm_read_range}},
      {"model_preset", {{MODEL_KEYS}, op_model_preset}},
      {"model_hf_config", {{MODEL_KEYS}, op_model_hf_config}},
      {"handshake_validate_engine_ranks", {{"items"}, op_handshake_validate_engine_ranks}},
      {"transfer_plan_json", {{"lines"}, op_transfer_plan_json}},
      {"engine_plan", {{"groups", "num_regions", "lines"}, op_engine_plan}},
      {"pipeline_stage_pairs", {{"pairs", "notifications"}, op_pipeline_stage_pairs}},
      {"permute_kv_block", {{"hex"}, op_permute_kv_block}},
    };
    add_plain_ops(t);
    return t;
  }();
  return table;
}

/// Checks the JSON subset of the format (no floats, no nulls) recursively.
void check_subset(const json& v, const std::string& where) {
  if (v.is_null()) throw VectorError(where + ": null is not allowed");
  if (v.is_number_float()) throw VectorError(where + ": floats are not allowed");
  if (v.is_array())
    for (size_t i = 0; i < v.size(); ++i) check_subset(v[i], where + "[" + std::to_string(i) + "]");
  if (v.is_object())
    for (auto it = v.begin(); it != v.end(); ++it) check_subset(it.value(), where + "." + it.key());
}

/// Runs one case; returns "" when it passes, else a description of the failure.
std::string run_case(const json& c) {
  try {
    if (!c.is_object()) return "case is not an object";
    for (auto it = c.begin(); it != c.end(); ++it)
      if (it.key() != "name" && it.key() != "op" && it.key() != "input" && it.key() != "output" &&
          it.key() != "error")
        return "unknown case key '" + it.key() + "'";
    if (!c.contains("name") || !c["name"].is_string()) return "case without a string name";
    if (!c.contains("op") || !c["op"].is_string()) return "case without a string op";
    if (!c.contains("input")) return "case without input";
    check_subset(c, "case");
    const bool has_out = c.contains("output"), has_err = c.contains("error");
    if (has_out == has_err) return "case must have exactly one of output/error";
    const std::string op_name = c["op"].get<std::string>();
    auto op = ops().find(op_name);
    if (op == ops().end()) return "unknown op '" + op_name + "'";

    if (has_out) {
      const json& want = c["output"];
      if (!want.is_object()) return "output must be an object";
      std::set<std::string> expected_keys(op->second.output_keys.begin(), op->second.output_keys.end());
      for (auto it = want.begin(); it != want.end(); ++it)
        if (!expected_keys.count(it.key())) return "extra output key '" + it.key() + "'";
      for (const std::string& k : expected_keys)
        if (!want.contains(k)) return "missing output key '" + k + "'";
    } else {
      const json& e = c["error"];
      if (!e.is_object() || !e.contains("status") || !e["status"].is_string())
        return "error must be an object with a string status";
      for (auto it = e.begin(); it != e.end(); ++it)
        if (it.key() != "status" && it.key() != "message_contains") return "unknown error key '" + it.key() + "'";
    }

    OpResult res;
    Input in(c["input"]);
    try {
      res.output = op->second.run(in);
      res.ok = true;
    } catch (const ApiFailure& f) {
      res.status = pdkv_status_name(f.status);
      res.message = f.message;
    }
    in.check_all_used();

    if (has_out) {
      if (!res.ok) return "expected success, got " + res.status + ": " + res.message;
      for (auto it = c["output"].begin(); it != c["output"].end(); ++it) {
        if (!res.output.contains(it.key())) return "runner produced no '" + it.key() + "'";
        if (res.output[it.key()] != it.value())
          return "output '" + it.key() + "': expected " + it.value().dump() + ", got " +
                 res.output[it.key()].dump();
      }
      for (auto it = res.output.begin(); it != res.output.end(); ++it)
        if (!c["output"].contains(it.key())) return "runner produced undeclared key '" + it.key() + "'";
      return "";
    }
    const json& e = c["error"];
    if (res.ok) return "expected " + e["status"].get<std::string>() + ", got success " + res.output.dump();
    if (res.status != e["status"].get<std::string>())
      return "expected " + e["status"].get<std::string>() + ", got " + res.status + ": " + res.message;
    if (e.contains("message_contains")) {
      if (!e["message_contains"].is_array()) return "message_contains must be an array";
      for (const json& s : e["message_contains"]) {
        if (!s.is_string()) return "message_contains must hold strings";
        if (res.message.find(s.get<std::string>()) == std::string::npos)
          return "message '" + res.message + "' does not contain '" + s.get<std::string>() + "'";
      }
    }
    return "";
  } catch (const VectorError& v) {
    return std::string("bad vector or contract violation: ") + v.what();
  } catch (const json::exception& j) {
    return std::string("JSON error: ") + j.what();
  }
}

std::vector<std::filesystem::path> vector_files() {
  const std::filesystem::path dir = std::filesystem::path(PDKV_SOURCE_DIR) / "tests" / "vectors";
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.is_regular_file() && entry.path().extension() == ".json") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

TEST_CASE("conformance vectors: every case of every file", "[capi][conformance]") {
  const auto files = vector_files();
  REQUIRE(!files.empty());
  size_t total = 0;
  std::set<std::string> ops_seen;
  for (const auto& path : files) {
    INFO("file " << path.string());
    std::ifstream f(path);
    REQUIRE(f.good());
    json doc;
    REQUIRE_NOTHROW(doc = json::parse(f));
    REQUIRE(doc.is_object());
    REQUIRE(doc.value("format", 0) == 1);
    REQUIRE(doc.contains("cases"));
    REQUIRE(doc["cases"].is_array());
    REQUIRE(!doc["cases"].empty());
    std::set<std::string> names;
    for (const json& c : doc["cases"]) {
      const std::string name = c.is_object() && c.contains("name") && c["name"].is_string() ? c["name"].get<std::string>() : "?";
      INFO("case " << name);
      CHECK(names.insert(name).second);  // names are unique within a file
      if (c.is_object() && c.contains("op") && c["op"].is_string()) ops_seen.insert(c["op"].get<std::string>());
      CHECK(run_case(c) == "");
      ++total;
    }
  }
  // Every op of the table has at least one vector.
  for (const auto& [name, op] : ops()) {
    INFO("op " << name);
    CHECK(ops_seen.count(name) == 1);
  }
  CHECK(total > 0);
}

TEST_CASE("conformance runner rejects malformed cases", "[capi][conformance]") {
  // The runner itself must fail on these, so a broken vector can never pass silently.
  CHECK_THAT(run_case(json::parse(R"({"name":"x","op":"no_such_op","input":{},"output":{}})")),
             Catch::Matchers::Contains("unknown op"));
  CHECK_THAT(run_case(json::parse(R"({"name":"x","op":"pdkv_tp_ratio","input":{"local_tp_size":1,"remote_tp_size":1}})")),
             Catch::Matchers::Contains("exactly one"));
  CHECK_THAT(run_case(json::parse(
                 R"({"name":"x","op":"pdkv_tp_ratio","input":{"local_tp_size":1,"remote_tp_size":1},"output":{"out":1},
                     "error":{"status":"PDKV_OK"}})")),
             Catch::Matchers::Contains("exactly one"));
  CHECK_THAT(run_case(json::parse(R"({"name":"x","op":"pdkv_physical_head_range","input":{"tp_size":1,"tp_rank":0,"total_kv_heads":2},"output":{"begin":0}})")),
             Catch::Matchers::Contains("missing output key 'end'"));
  CHECK_THAT(run_case(json::parse(R"({"name":"x","op":"pdkv_tp_ratio","input":{"local_tp_size":1,"remote_tp_size":1},"output":{"out":1,"x":2}})")),
             Catch::Matchers::Contains("extra output key"));
  CHECK_THAT(run_case(json::parse(R"({"name":"x","op":"pdkv_tp_ratio","input":{"local_tp_size":1,"remote_tp_size":1,"typo":3},"output":{"out":1}})")),
             Catch::Matchers::Contains("unknown input key"));
  CHECK_THAT(run_case(json::parse(R"({"name":"x","op":"pdkv_tp_ratio","input":{"local_tp_size":4,"remote_tp_size":2},"output":{"out":3}})")),
             Catch::Matchers::Contains("expected 3, got 2"));
  CHECK_THAT(run_case(json::parse(R"({"name":"x","op":"pdkv_tp_ratio","input":{"local_tp_size":2,"remote_tp_size":3},"error":{"status":"PDKV_ERR_TP_NOT_DIVISIBLE","message_contains":["zzz"]}})")),
             Catch::Matchers::Contains("does not contain 'zzz'"));
  CHECK_THAT(run_case(json::parse(R"({"name":"x","op":"pdkv_tp_ratio","input":{"local_tp_size":2,"remote_tp_size":3},"error":{"status":"PDKV_ERR_OVERFLOW"}})")),
             Catch::Matchers::Contains("expected PDKV_ERR_OVERFLOW"));
  CHECK_THAT(run_case(json::parse(R"({"name":"x","op":"pdkv_tp_ratio","input":{"local_tp_size":2,"remote_tp_size":1.5},"output":{"out":1}})")),
             Catch::Matchers::Contains("floats"));
  CHECK(run_case(json::parse(R"({"name":"x","op":"pdkv_tp_ratio","input":{"local_tp_size":4,"remote_tp_size":2},"output":{"out":2}})")) == "");
  // item_messages_contain: a substring missing from an item's message, or a count different from
  // the item count, fails the case.
  const std::string ranks =
      R"("ranks":[{"model":"nemotron-3-nano-30b","engine":{"tp_size":2},"layout":{"engine_id":"p"}},
                  {"model":"nemotron-3-nano-30b","engine":{"tp_size":2},"layout":{"engine_id":"q","tp_rank":1}}])";
  CHECK_THAT(run_case(json::parse(R"({"name":"x","op":"handshake_validate_engine_ranks","input":{)" + ranks +
                                  R"(,"item_messages_contain":[["zzz"]]},"output":{"items":[{"status":"PDKV_ERR_INCOMPATIBLE","field":"engine_id"}]}})")),
             Catch::Matchers::Contains("does not contain 'zzz'"));
  CHECK_THAT(run_case(json::parse(R"({"name":"x","op":"handshake_validate_engine_ranks","input":{)" + ranks +
                                  R"(,"item_messages_contain":[]},"output":{"items":[{"status":"PDKV_ERR_INCOMPATIBLE","field":"engine_id"}]}})")),
             Catch::Matchers::Contains("1 items"));
  CHECK(run_case(json::parse(R"({"name":"x","op":"handshake_validate_engine_ranks","input":{)" + ranks +
                             R"(,"item_messages_contain":[["p vs q"]]},"output":{"items":[{"status":"PDKV_ERR_INCOMPATIBLE","field":"engine_id"}]}})")) == "");
  // A descriptor list that differs in one address fails.
  CHECK_THAT(run_case(json::parse(R"({"name":"x","op":"attention_local_descriptors","input":{"regions":[{"base":0,"block_len":16,"num_blocks":2}],"block_size_ratio":1},
                                      "output":{"descriptors":[{"addr":0,"len":16},{"addr":32,"len":16}]}})")),
             Catch::Matchers::Contains("output 'descriptors'"));
}
