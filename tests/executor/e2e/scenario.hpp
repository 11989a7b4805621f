// Request shapes of the two-process executor tests, built through the C API only: the model, the
// P and D engine settings, the region memory of one rank (anonymous mmap at the advertised
// bases), the byte pattern P's memory holds, and the plan of one request. Shared by the test
// executable (the D side) and pdkv_test_peer (the P side), so both derive the same bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "pdkv.h"

namespace e2e {

// A failed C call, with the library's status and message (tests report it; the peer prints it).
class CallError : public std::runtime_error {
 public:
  CallError(pdkv_status_t st, const std::string& what) : std::runtime_error(what), status(st) {}
  pdkv_status_t status;
};

// Runs f(&err); throws CallError naming `what`, the status and the message unless it is OK.
template <typename F>
void check(const char* what, F&& f) {
  pdkv_error_t* err = nullptr;
  const pdkv_status_t st = f(&err);
  if (st == PDKV_OK) return;
  std::string msg = std::string(what) + ": " + pdkv_status_name(st) + ": " + pdkv_error_message(err);
  pdkv_error_free(err);
  throw CallError(st, msg);
}

template <typename T, void (*Free)(T*)>
struct Deleter {
  void operator()(T* p) const { Free(p); }
};
using ModelPtr = std::unique_ptr<pdkv_model_t, Deleter<pdkv_model_t, pdkv_model_free>>;
using MetadataPtr = std::unique_ptr<pdkv_engine_metadata_t, Deleter<pdkv_engine_metadata_t, pdkv_engine_metadata_free>>;
using GeometryPtr = std::unique_ptr<pdkv_geometry_t, Deleter<pdkv_geometry_t, pdkv_geometry_free>>;
using ContextPtr = std::unique_ptr<pdkv_plan_context_t, Deleter<pdkv_plan_context_t, pdkv_plan_context_free>>;
using PlanPtr = std::unique_ptr<pdkv_transfer_plan_t, Deleter<pdkv_transfer_plan_t, pdkv_transfer_plan_free>>;

// One KV-cache group of the request (pdkv_group_trim_input_t's fields the plan tests use).
struct GroupSpec {
  int32_t kind = PDKV_GROUP_ATTENTION;
  int32_t cache_mode = PDKV_MAMBA_CACHE_NONE;
  std::vector<uint64_t> local_blocks, remote_blocks;
  uint64_t remote_computed_tokens = 0;
  uint64_t local_hit_tokens = 0;
  std::vector<uint32_t> regions;  // empty: every region
};

struct EngineSpec {
  std::string engine_id;
  uint32_t tp_size = 1;
  int32_t backend = PDKV_BACKEND_FLASH_ATTN;
  int32_t mamba_cache_mode = PDKV_MAMBA_CACHE_NONE;
  std::optional<uint32_t> user_block_size;  // unset: --block-size not given
  uint64_t num_logical_blocks = 8;
  uint32_t num_regions = 2;
};

struct Scenario {
  std::string name;
  std::string description;
  EngineSpec p, d;
  uint32_t d_rank = 0;
  std::vector<GroupSpec> groups;

  ModelPtr model() const;
  pdkv_engine_config_t config(const EngineSpec& e) const;
  GeometryPtr geometry(const EngineSpec& e) const;
  // Metadata of a rank whose regions start at `bases` (NULL: the layout default, for sizing).
  MetadataPtr metadata(const EngineSpec& e, uint32_t rank, const uint64_t* bases) const;
  // Bytes of each region of a rank of engine e.
  std::vector<uint64_t> region_sizes(const EngineSpec& e) const;
  // Compiles the request's plan: d is the D rank's metadata, p every P rank's (any order).
  PlanPtr plan(const pdkv_engine_metadata_t* d, const std::vector<const pdkv_engine_metadata_t*>& p) const;
};

// The scenarios by name: "nano-align" (Nemotron-3-Nano P TP4 -> D TP2, Mamba align mode, prefix
// hit), "nano-full-hit" (the whole prompt is a D cache hit: notify only), "mla" (DeepSeek-V3
// latent, FlashMLA, P TP4 -> D TP2), "gqa" (pure attention, 8 KV heads sharded P TP4 -> D TP2),
// "tiny" (a small GQA request, P TP2 -> D TP1, for the fault tests). Throws for other names.
const Scenario& scenario(const std::string& name);
std::vector<std::string> scenario_names();

// The byte P's memory holds at `offset` of `region` of (engine, rank); D's memory starts as the
// pattern of engine "<d engine>/untouched", so a byte written where no read points is caught.
uint8_t pattern_byte(const std::string& engine, uint32_t rank, uint32_t region, uint64_t offset);
void fill_pattern(uint8_t* dst, uint64_t len, const std::string& engine, uint32_t rank, uint32_t region,
                  uint64_t offset);
std::string untouched_engine(const std::string& d_engine);

// One rank's regions in anonymous mmap'd memory, filled with the pattern of `fill_engine`, and the
// rank's metadata advertising exactly them.
class RankMemory {
 public:
  RankMemory(const Scenario& s, const EngineSpec& e, uint32_t rank, const std::string& fill_engine);
  ~RankMemory();
  RankMemory(const RankMemory&) = delete;
  RankMemory& operator=(const RankMemory&) = delete;

  const pdkv_engine_metadata_t* metadata() const { return md_.get(); }
  size_t num_regions() const { return bufs_.size(); }
  uint8_t* region(uint32_t r) const { return bufs_[r]; }
  uint64_t region_size(uint32_t r) const { return sizes_[r]; }
  uint32_t rank() const { return rank_; }

 private:
  uint32_t rank_;
  std::vector<uint8_t*> bufs_;
  std::vector<uint64_t> sizes_;
  MetadataPtr md_;
};

// Agent settings of the tests (short deadlines and heartbeats: the suite must stay fast).
struct AgentSettings {
  int32_t transport = PDKV_TRANSPORT_AUTO;
  int32_t progress = PDKV_PROGRESS_THREAD;
  std::string listen = "127.0.0.1:0";
  uint64_t default_timeout_ms = 5000;
  uint32_t heartbeat_interval_ms = 100;
  uint32_t heartbeat_timeout_ms = 1500;
  uint32_t max_outstanding = 16;
  std::vector<uint8_t> key;  // empty: none
};

// A rank with its memory, its agent and every region registered.
class RankAgent {
 public:
  RankAgent(const Scenario& s, bool prefill, uint32_t rank, const AgentSettings& settings);
  ~RankAgent();
  RankAgent(const RankAgent&) = delete;
  RankAgent& operator=(const RankAgent&) = delete;

  pdkv_agent_t* agent() const { return agent_; }
  RankMemory& memory() { return mem_; }
  const RankMemory& memory() const { return mem_; }
  pdkv_memory_t* registration(uint32_t r) const { return regs_[r]; }
  uint16_t port() const;
  std::string address() const;  // "host:port" as bound
  // Registers region r again (after a deregistration), replacing its handle.
  pdkv_status_t reregister(uint32_t r, pdkv_error_t** err);
  // Frees the agent now (handles of regions stay valid until the destructor).
  void free_agent();

 private:
  RankMemory mem_;
  pdkv_agent_t* agent_ = nullptr;
  std::vector<pdkv_memory_t*> regs_;
};

// The reads of one P rank in a plan (empty when it has none).
std::vector<pdkv_plan_read_t> rank_reads(const pdkv_transfer_plan_t* plan, uint32_t p_rank);
pdkv_transfer_plan_info_t plan_info(const pdkv_transfer_plan_t* plan);
std::vector<uint32_t> read_ranks(const pdkv_transfer_plan_t* plan);
std::vector<uint32_t> notify_ranks(const pdkv_transfer_plan_t* plan);

// Checks D's memory against the plan: the bytes of every read of `only_rank` (every P rank when
// negative) equal P's pattern; with `untouched`, every byte no read of the plan names still holds
// the untouched pattern. Returns "" or the first difference (region, offset, got, want, which read).
std::string verify_d_memory(const Scenario& s, const RankMemory& d, const pdkv_transfer_plan_t* plan,
                            int64_t only_rank, bool untouched);

}  // namespace e2e
