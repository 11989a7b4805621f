#include "scenario.hpp"

#include <sys/mman.h>

#include <cstring>
#include <map>

namespace e2e {

namespace {

// DeepSeek-V3's attention as the MLA plan test builds it: a 576-element bf16 latent per token.
const char kDeepSeekConfig[] =
    R"({"model_type": "deepseek_v3", "num_hidden_layers": 2, "kv_lora_rank": 512, )"
    R"("qk_rope_head_dim": 64, "torch_dtype": "bfloat16"})";

std::map<std::string, Scenario> make_scenarios() {
  std::map<std::string, Scenario> out;
  {
    // Nemotron-3-Nano, P TP4 -> D TP2 rank 0, Mamba prefix caching in align mode: D already holds
    // the first 2096 tokens (one D block) of a 5000-token prompt; the attention tokens after the
    // hit come from P rank 0 (the head's owner; rank 1 is its GQA twin) and the final Mamba state
    // from both SSM shards (P ranks 0 and 1). As the plan tests' align-mode case, at P TP4.
    Scenario s;
    s.name = "nano-align";
    s.description = "Nemotron-3-Nano P TP4 -> D TP2 rank 0, align mode, 2096-token prefix hit";
    s.p = {"nano-p", 4, PDKV_BACKEND_FLASH_ATTN, PDKV_MAMBA_CACHE_ALIGN, std::nullopt, 8, 3};
    s.d = {"nano-d", 2, PDKV_BACKEND_FLASH_ATTN, PDKV_MAMBA_CACHE_ALIGN, std::nullopt, 8, 3};
    s.d_rank = 0;
    s.groups.push_back({PDKV_GROUP_ATTENTION, PDKV_MAMBA_CACHE_NONE, {4, 5}, {1, 2, 3, 6, 7}, 5000, 2096, {}});
    s.groups.push_back({PDKV_GROUP_MAMBA, PDKV_MAMBA_CACHE_ALIGN, {0, 6, 7}, {0, 0, 0, 0, 5}, 5000, 2096, {}});
    out[s.name] = s;
  }
  {
    // The plan tests' full hit: D rank 1 holds all 2000 prompt tokens; nothing moves, P ranks 2
    // and 3 (D rank 1's handshake targets) are still notified so they can free the blocks.
    Scenario s;
    s.name = "nano-full-hit";
    s.description = "Nemotron-3-Nano P TP4 -> D TP2 rank 1, full prefix hit (notify only)";
    s.p = {"nano-p", 4, PDKV_BACKEND_FLASH_ATTN, PDKV_MAMBA_CACHE_NONE, std::nullopt, 4, 2};
    s.d = {"nano-d", 2, PDKV_BACKEND_FLASH_ATTN, PDKV_MAMBA_CACHE_NONE, std::nullopt, 4, 2};
    s.d_rank = 1;
    s.groups.push_back({PDKV_GROUP_ATTENTION, PDKV_MAMBA_CACHE_NONE, {}, {1, 2}, 2000, 2000, {}});
    out[s.name] = s;
  }
  {
    // DeepSeek-V3 MLA with FlashMLA (64-token kernel blocks), P TP4 -> D TP2 rank 1, 64-token
    // hit of a 150-token prompt: the replicated latent is read once, from one P rank.
    Scenario s;
    s.name = "mla";
    s.description = "DeepSeek-V3 MLA (FlashMLA) P TP4 -> D TP2 rank 1, 64-token prefix hit";
    s.p = {"mla-p", 4, PDKV_BACKEND_FLASHMLA, PDKV_MAMBA_CACHE_NONE, std::nullopt, 16, 2};
    s.d = {"mla-d", 2, PDKV_BACKEND_FLASHMLA, PDKV_MAMBA_CACHE_NONE, std::nullopt, 16, 2};
    s.d_rank = 1;
    s.groups.push_back({PDKV_GROUP_ATTENTION, PDKV_MAMBA_CACHE_NONE, {2, 3}, {4, 5, 6}, 150, 64, {}});
    out[s.name] = s;
  }
  {
    // Pure attention, 8 KV heads of 128 (a Llama-3-8B-like GQA layer stack), P TP4 (2 heads per
    // rank) -> D TP2 rank 1 (4 heads: P ranks 2 and 3 each give half of every D token), 64-token
    // blocks, an 80-token hit of a 200-token prompt (a mid-block hit), D's block ids scattered.
    Scenario s;
    s.name = "gqa";
    s.description = "GQA 8 KV heads P TP4 -> D TP2 rank 1, 80-token prefix hit";
    s.p = {"gqa-p", 4, PDKV_BACKEND_FLASH_ATTN, PDKV_MAMBA_CACHE_NONE, 64, 16, 2};
    s.d = {"gqa-d", 2, PDKV_BACKEND_FLASH_ATTN, PDKV_MAMBA_CACHE_NONE, 64, 16, 2};
    s.d_rank = 1;
    s.groups.push_back({PDKV_GROUP_ATTENTION, PDKV_MAMBA_CACHE_NONE, {9, 4, 12}, {6, 7, 8, 2}, 200, 80, {}});
    out[s.name] = s;
  }
  {
    // Small and quick, for the fault tests: 4 KV heads of 64, P TP2 -> D TP1, 16-token blocks,
    // 473 tokens in 30 P blocks read into 30 scattered D blocks, 3 regions: 186 reads, 1.4 MiB.
    Scenario s;
    s.name = "tiny";
    s.description = "GQA 4 KV heads P TP2 -> D TP1, 30 scattered blocks";
    s.p = {"tiny-p", 2, PDKV_BACKEND_FLASH_ATTN, PDKV_MAMBA_CACHE_NONE, 16, 64, 3};
    s.d = {"tiny-d", 1, PDKV_BACKEND_FLASH_ATTN, PDKV_MAMBA_CACHE_NONE, 16, 64, 3};
    s.d_rank = 0;
    GroupSpec g;
    for (uint64_t b = 0; b < 30; ++b) {
      g.local_blocks.push_back(63 - 2 * b);
      g.remote_blocks.push_back(2 + b);
    }
    g.remote_computed_tokens = 30 * 16 - 7;
    s.groups.push_back(g);
    out[s.name] = s;
  }
  return out;
}

const std::map<std::string, Scenario>& all() {
  static const std::map<std::string, Scenario> s = make_scenarios();
  return s;
}

uint64_t splitmix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t seed_of(const std::string& engine, uint32_t rank, uint32_t region) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a of the engine id
  for (unsigned char c : engine) h = (h ^ c) * 1099511628211ull;
  return splitmix(h ^ (uint64_t{rank} << 40) ^ (uint64_t{region} << 20));
}

}  // namespace

const Scenario& scenario(const std::string& name) {
  auto it = all().find(name);
  if (it == all().end()) throw std::invalid_argument("unknown scenario '" + name + "'");
  return it->second;
}

std::vector<std::string> scenario_names() {
  std::vector<std::string> out;
  for (const auto& [k, v] : all()) out.push_back(k);
  return out;
}

ModelPtr Scenario::model() const {
  pdkv_model_t* m = nullptr;
  if (name.rfind("nano", 0) == 0) {
    check("preset", [&](pdkv_error_t** e) { return pdkv_model_from_preset("nemotron-3-nano-30b", &m, e); });
  } else if (name == "mla") {
    check("hf config", [&](pdkv_error_t** e) {
      return pdkv_model_from_hf_config_json(kDeepSeekConfig, sizeof kDeepSeekConfig - 1, "deepseek-v3-2l", &m, e);
    });
  } else {
    pdkv_model_desc_t d{};
    d.struct_size = sizeof d;
    d.name = name == "gqa" ? "gqa8-llama-like" : "tiny-gqa4";
    d.num_kv_heads = name == "gqa" ? 8 : 4;
    d.head_size = name == "gqa" ? 128 : 64;
    d.head_size_v = d.head_size;
    d.dtype_bytes = 2;
    d.layer_pattern = name == "gqa" ? "****" : "***";
    check("model", [&](pdkv_error_t** e) { return pdkv_model_new(&d, &m, e); });
  }
  return ModelPtr(m);
}

pdkv_engine_config_t Scenario::config(const EngineSpec& e) const {
  pdkv_engine_config_t c;
  check("engine config", [&](pdkv_error_t** err) { return pdkv_engine_config_init(&c, err); });
  c.tp_size = e.tp_size;
  c.attention_backend = e.backend;
  c.mamba_cache_mode = e.mamba_cache_mode;
  if (e.user_block_size) {
    c.field_mask |= PDKV_CONFIG_FIELD_BLOCK_SIZE;
    c.user_block_size = *e.user_block_size;
  }
  return c;
}

GeometryPtr Scenario::geometry(const EngineSpec& e) const {
  const auto m = model();
  const auto c = config(e);
  pdkv_geometry_t* g = nullptr;
  check("geometry", [&](pdkv_error_t** err) { return pdkv_geometry_new(m.get(), &c, &g, err); });
  return GeometryPtr(g);
}

MetadataPtr Scenario::metadata(const EngineSpec& e, uint32_t rank, const uint64_t* bases) const {
  const auto m = model();
  const auto c = config(e);
  pdkv_engine_layout_t l;
  check("layout", [&](pdkv_error_t** err) { return pdkv_engine_layout_init(&l, err); });
  l.engine_id = e.engine_id.c_str();
  l.tp_rank = rank;
  l.num_logical_blocks = e.num_logical_blocks;
  l.num_regions = e.num_regions;
  l.region_bases = bases;
  pdkv_engine_metadata_t* md = nullptr;
  check("metadata", [&](pdkv_error_t** err) { return pdkv_engine_metadata_from_model(m.get(), &c, &l, &md, err); });
  return MetadataPtr(md);
}

std::vector<uint64_t> Scenario::region_sizes(const EngineSpec& e) const {
  const auto md = metadata(e, 0, nullptr);
  const pdkv_metadata_region_t* regions = nullptr;
  size_t n = 0;
  check("regions", [&](pdkv_error_t** err) { return pdkv_engine_metadata_regions(md.get(), &regions, &n, err); });
  std::vector<uint64_t> out;
  for (size_t i = 0; i < n; ++i) out.push_back(regions[i].block_len * regions[i].num_blocks);
  return out;
}

PlanPtr Scenario::plan(const pdkv_engine_metadata_t* d_md, const std::vector<const pdkv_engine_metadata_t*>& p_mds) const {
  const auto dg = geometry(d);
  const auto pg = geometry(p);
  pdkv_plan_context_params_t cp{};
  cp.struct_size = sizeof cp;
  cp.local = d_md;
  cp.remote = p_mds.data();
  cp.num_remote = p_mds.size();
  cp.local_geometry = dg.get();
  cp.remote_geometry = pg.get();
  pdkv_plan_context_t* ctx_raw = nullptr;
  check("plan context", [&](pdkv_error_t** e) { return pdkv_plan_context_new(&cp, &ctx_raw, e); });
  const ContextPtr ctx(ctx_raw);
  std::vector<pdkv_group_trim_input_t> trims(groups.size());
  std::vector<pdkv_plan_group_t> pg_(groups.size());
  for (size_t i = 0; i < groups.size(); ++i) {
    const GroupSpec& g = groups[i];
    pdkv_group_trim_input_t& t = trims[i];
    t = pdkv_group_trim_input_t{};
    t.struct_size = sizeof t;
    t.kind = g.kind;
    t.cache_mode = g.cache_mode;
    t.local_blocks = g.local_blocks.data();
    t.num_local_blocks = g.local_blocks.size();
    t.remote_blocks = g.remote_blocks.data();
    t.num_remote_blocks = g.remote_blocks.size();
    t.remote_computed_tokens = g.remote_computed_tokens;
    t.local_hit_tokens = g.local_hit_tokens;
    pg_[i] = pdkv_plan_group_t{};
    pg_[i].struct_size = sizeof pg_[i];
    pg_[i].trim = &t;
    pg_[i].regions = g.regions.empty() ? nullptr : g.regions.data();
    pg_[i].num_regions = g.regions.size();
  }
  pdkv_transfer_plan_t* plan_raw = nullptr;
  check("plan compile", [&](pdkv_error_t** e) {
    return pdkv_transfer_plan_compile(ctx.get(), pg_.data(), pg_.size(), &plan_raw, e);
  });
  return PlanPtr(plan_raw);
}

uint8_t pattern_byte(const std::string& engine, uint32_t rank, uint32_t region, uint64_t offset) {
  const uint64_t w = splitmix(seed_of(engine, rank, region) + (offset >> 3));
  return static_cast<uint8_t>(w >> (8 * (offset & 7)));
}

void fill_pattern(uint8_t* dst, uint64_t len, const std::string& engine, uint32_t rank, uint32_t region,
                  uint64_t offset) {
  const uint64_t seed = seed_of(engine, rank, region);
  uint64_t o = offset, i = 0;
  while (i < len && (o & 7) != 0) dst[i++] = pattern_byte(engine, rank, region, o++);
  while (len - i >= 8) {
    const uint64_t w = splitmix(seed + (o >> 3));
    std::memcpy(dst + i, &w, 8);  // little-endian: byte k of the word is offset o + k
    i += 8;
    o += 8;
  }
  while (i < len) dst[i++] = pattern_byte(engine, rank, region, o++);
}

std::string untouched_engine(const std::string& d_engine) { return d_engine + "/untouched"; }

RankMemory::RankMemory(const Scenario& s, const EngineSpec& e, uint32_t rank, const std::string& fill_engine)
    : rank_(rank) {
  sizes_ = s.region_sizes(e);
  std::vector<uint64_t> bases;
  for (size_t r = 0; r < sizes_.size(); ++r) {
    void* p = mmap(nullptr, sizes_[r], PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      for (size_t k = 0; k < bufs_.size(); ++k) munmap(bufs_[k], sizes_[k]);
      throw std::runtime_error("mmap of " + std::to_string(sizes_[r]) + " bytes failed");
    }
    bufs_.push_back(static_cast<uint8_t*>(p));
    fill_pattern(bufs_.back(), sizes_[r], fill_engine, rank, static_cast<uint32_t>(r), 0);
    bases.push_back(reinterpret_cast<uint64_t>(p));
  }
  md_ = s.metadata(e, rank, bases.data());
}

RankMemory::~RankMemory() {
  for (size_t r = 0; r < bufs_.size(); ++r) munmap(bufs_[r], sizes_[r]);
}

RankAgent::RankAgent(const Scenario& s, bool prefill, uint32_t rank, const AgentSettings& st)
    : mem_(s, prefill ? s.p : s.d, rank, prefill ? s.p.engine_id : untouched_engine(s.d.engine_id)) {
  pdkv_agent_options_t o{};
  o.struct_size = sizeof o;
  o.metadata = mem_.metadata();
  o.listen_address = st.listen.c_str();
  o.transport = st.transport;
  o.progress_mode = st.progress;
  o.default_timeout_ms = st.default_timeout_ms;
  o.heartbeat_interval_ms = st.heartbeat_interval_ms;
  o.heartbeat_timeout_ms = st.heartbeat_timeout_ms;
  o.max_outstanding = st.max_outstanding;
  o.preshared_key = st.key.empty() ? nullptr : st.key.data();
  o.preshared_key_len = st.key.size();
  o.field_mask = PDKV_AGENT_FIELD_LISTEN_ADDRESS | PDKV_AGENT_FIELD_TRANSPORT | PDKV_AGENT_FIELD_PROGRESS_MODE |
                 PDKV_AGENT_FIELD_DEFAULT_TIMEOUT | PDKV_AGENT_FIELD_HEARTBEAT | PDKV_AGENT_FIELD_MAX_OUTSTANDING |
                 PDKV_AGENT_FIELD_PRESHARED_KEY;
  check("agent", [&](pdkv_error_t** e) { return pdkv_agent_new(&o, &agent_, e); });
  try {
    for (uint32_t r = 0; r < mem_.num_regions(); ++r) {
      pdkv_memory_desc_t d{};
      d.struct_size = sizeof d;
      d.region = r;
      d.address = reinterpret_cast<uint64_t>(mem_.region(r));
      d.length = mem_.region_size(r);
      pdkv_memory_t* m = nullptr;
      check("register memory", [&](pdkv_error_t** e) { return pdkv_agent_register_memory(agent_, &d, &m, e); });
      regs_.push_back(m);
    }
  } catch (...) {
    pdkv_agent_free(agent_);
    for (auto* m : regs_) pdkv_memory_free(m);
    throw;
  }
}

RankAgent::~RankAgent() {
  // The agent first: it releases the registrations before the memory is unmapped.
  pdkv_agent_free(agent_);
  for (auto* m : regs_) pdkv_memory_free(m);
}

pdkv_status_t RankAgent::reregister(uint32_t r, pdkv_error_t** err) {
  pdkv_memory_desc_t d{};
  d.struct_size = sizeof d;
  d.region = r;
  d.address = reinterpret_cast<uint64_t>(mem_.region(r));
  d.length = mem_.region_size(r);
  pdkv_memory_t* m = nullptr;
  const pdkv_status_t st = pdkv_agent_register_memory(agent_, &d, &m, err);
  if (st == PDKV_OK) {
    pdkv_memory_free(regs_[r]);
    regs_[r] = m;
  }
  return st;
}

void RankAgent::free_agent() {
  pdkv_agent_free(agent_);
  agent_ = nullptr;
}

uint16_t RankAgent::port() const {
  pdkv_agent_info_t i{};
  i.struct_size = sizeof i;
  check("agent info", [&](pdkv_error_t** e) { return pdkv_agent_get_info(agent_, &i, e); });
  return i.port;
}

std::string RankAgent::address() const {
  pdkv_agent_info_t i{};
  i.struct_size = sizeof i;
  check("agent info", [&](pdkv_error_t** e) { return pdkv_agent_get_info(agent_, &i, e); });
  return i.listen_address;
}

std::vector<pdkv_plan_read_t> rank_reads(const pdkv_transfer_plan_t* plan, uint32_t p_rank) {
  const pdkv_plan_read_t* reads = nullptr;
  size_t n = 0;
  check("rank reads", [&](pdkv_error_t** e) { return pdkv_transfer_plan_rank_reads(plan, p_rank, &reads, &n, nullptr, e); });
  return n == 0 ? std::vector<pdkv_plan_read_t>{} : std::vector<pdkv_plan_read_t>(reads, reads + n);
}

pdkv_transfer_plan_info_t plan_info(const pdkv_transfer_plan_t* plan) {
  pdkv_transfer_plan_info_t i{};
  i.struct_size = sizeof i;
  check("plan info", [&](pdkv_error_t** e) { return pdkv_transfer_plan_get_info(plan, &i, e); });
  return i;
}

std::vector<uint32_t> read_ranks(const pdkv_transfer_plan_t* plan) {
  const uint32_t* r = nullptr;
  size_t n = 0;
  check("read ranks", [&](pdkv_error_t** e) { return pdkv_transfer_plan_read_ranks(plan, &r, &n, e); });
  return n == 0 ? std::vector<uint32_t>{} : std::vector<uint32_t>(r, r + n);
}

std::vector<uint32_t> notify_ranks(const pdkv_transfer_plan_t* plan) {
  const uint32_t* r = nullptr;
  size_t n = 0;
  check("notify ranks", [&](pdkv_error_t** e) { return pdkv_transfer_plan_notify_ranks(plan, &r, &n, e); });
  return n == 0 ? std::vector<uint32_t>{} : std::vector<uint32_t>(r, r + n);
}

std::string verify_d_memory(const Scenario& s, const RankMemory& d, const pdkv_transfer_plan_t* plan,
                            int64_t only_rank, bool untouched) {
  const auto info = plan_info(plan);
  // Expected image of every D region: the untouched pattern, then each read's P bytes on top.
  std::vector<std::vector<uint8_t>> want(d.num_regions());
  std::vector<std::vector<uint8_t>> named(d.num_regions());  // 1 where a checked read writes
  for (uint32_t r = 0; r < d.num_regions(); ++r) {
    want[r].resize(d.region_size(r));
    named[r].assign(d.region_size(r), 0);
    if (untouched) fill_pattern(want[r].data(), want[r].size(), untouched_engine(s.d.engine_id), d.rank(), r, 0);
  }
  std::vector<std::vector<uint8_t>> any_read(d.num_regions());  // 1 where any read writes
  for (uint32_t r = 0; r < d.num_regions(); ++r) any_read[r].assign(d.region_size(r), 0);
  for (uint32_t p = 0; p < info.p_tp_size; ++p) {
    const auto reads = rank_reads(plan, p);
    for (const auto& rd : reads) {
      if (rd.local_region >= d.num_regions() || rd.local_offset + rd.length > d.region_size(rd.local_region)) {
        return "read outside D region " + std::to_string(rd.local_region);
      }
      std::memset(any_read[rd.local_region].data() + rd.local_offset, 1, rd.length);
      if (only_rank >= 0 && static_cast<uint32_t>(only_rank) != p) continue;
      fill_pattern(want[rd.local_region].data() + rd.local_offset, rd.length, s.p.engine_id, p, rd.remote_region,
                   rd.remote_offset);
      std::memset(named[rd.local_region].data() + rd.local_offset, 1, rd.length);
    }
  }
  for (uint32_t r = 0; r < d.num_regions(); ++r) {
    const uint8_t* got = d.region(r);
    for (uint64_t o = 0; o < d.region_size(r); ++o) {
      const bool check_byte = named[r][o] || (untouched && !any_read[r][o]);
      if (!check_byte || got[o] == want[r][o]) continue;
      return "D rank " + std::to_string(d.rank()) + " region " + std::to_string(r) + " offset " + std::to_string(o) +
             ": got " + std::to_string(got[o]) + ", want " + std::to_string(want[r][o]) +
             (named[r][o] ? " (a planned read)" : " (no read names this byte: it must be untouched)");
    }
  }
  return "";
}

}  // namespace e2e
