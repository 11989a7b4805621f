// The planning calls' thread-safety promises: one engine and one plan context shared by several
// threads, each planning request after request into its own reused plan
// (pdkv_engine_plan_request_into), some refused, while another thread plans with new handles
// (pdkv_engine_plan_request), all at once. In capi_thread_tests so that scripts/tsan.sh runs it under
// ThreadSanitizer. The threads record each plan's JSON and status; the test thread compares them
// with the same requests planned one at a time after joining them.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../engine_handles.hpp"

namespace {

constexpr uint64_t kPool = 64;

// The plan as JSON, or the error's status name and message: what a thread records.
std::string outcome(pdkv_status_t st, pdkv_error_t* e, const pdkv_transfer_plan_t* plan) {
  if (st != PDKV_OK) {
    std::string s = std::string(pdkv_status_name(st)) + ": " + (e != nullptr ? pdkv_error_message(e) : "");
    pdkv_error_free(e);
    return s;
  }
  pdkv_string_t* json = nullptr;
  const char* text = nullptr;
  if (pdkv_transfer_plan_to_json_string(plan, &json, nullptr) != PDKV_OK ||
      pdkv_string_text(json, &text, nullptr, nullptr) != PDKV_OK) {
    pdkv_string_free(json);
    return "to_json failed";
  }
  std::string s = text;
  pdkv_string_free(json);
  return s;
}

}  // namespace

TEST_CASE("planning: one engine and context, many threads each planning into its own plan", "[capi][threads][plan]") {
  const ModelPtr model = preset_model("nemotron-3-nano-30b");
  pdkv_engine_config_t dc = engine(2, PDKV_BACKEND_FLASHINFER), pc = engine(4, PDKV_BACKEND_FLASHINFER);
  dc.mamba_cache_mode = pc.mamba_cache_mode = PDKV_MAMBA_CACHE_ALIGN;
  const EnginePair pair(model.get(), dc, pc, 0, kPool);
  pdkv_engine_t* const d = pair.d.get();
  pdkv_plan_context_t* const ctx = pair.ctx.get();
  const pdkv_engine_info_t di = pair.d_info, pi = pair.p_info;

  // Requests of 1 to 6 D blocks, with and without a hit, ids from a rotating window of the pool
  // (each group its own blocks); one in four is refused (a hit that is not whole blocks), so
  // that threads also fail into their plans.
  std::vector<EngineRequestTables> requests;
  for (uint64_t k = 0; k < 24; ++k) {
    const uint64_t blocks = 1 + k % 6, bs = di.logical_block_size;
    const uint64_t tokens = blocks * bs - k % 3, hit = (k % 2 == 0 ? (blocks - 1) / 2 * bs : 0) + (k % 4 == 3 ? 7 : 0);
    const uint64_t p_blocks = (tokens - 1 + pi.logical_block_size - 1) / pi.logical_block_size;
    EngineRequestTables q;
    uint64_t next = 1 + (k * 5) % 7;
    for (size_t g = 0; g < di.num_groups; ++g) {
      std::vector<uint64_t> l, r;
      if (group_kind(d, g) == PDKV_GROUP_MAMBA) {
        for (uint64_t i = 0; i < blocks; ++i) l.push_back(i < hit / bs || i + 1 == blocks ? next++ : 0);
        r.push_back(40 + g);
      } else {
        for (uint64_t i = 0; i < blocks; ++i) l.push_back(next++);
        for (uint64_t i = 0; i < p_blocks; ++i) r.push_back(1 + i + k % 3);
      }
      q.local.push_back(std::move(l));
      q.remote.push_back(std::move(r));
    }
    q.seal(tokens, hit);
    requests.push_back(std::move(q));
  }

  // One at a time first: what every thread must see.
  std::vector<std::string> want;
  for (const EngineRequestTables& q : requests) {
    pdkv_transfer_plan_t* plan = nullptr;
    pdkv_error_t* e = nullptr;
    const pdkv_status_t st = pdkv_engine_plan_request(d, ctx, &q.c, &plan, &e);
    want.push_back(outcome(st, e, plan));
    pdkv_transfer_plan_free(plan);
  }
  size_t refused = 0;
  for (const std::string& w : want) refused += w.rfind("PDKV_ERR_", 0) == 0 ? 1 : 0;
  REQUIRE(refused > 0);
  REQUIRE(refused < want.size() / 2);

  constexpr int kThreads = 4, kRounds = 3;
  std::vector<std::vector<std::string>> seen(kThreads + 1);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      pdkv_transfer_plan_t* raw = nullptr;
      if (pdkv_transfer_plan_new(&raw, nullptr) != PDKV_OK) return;
      const TransferPlanPtr plan(raw);
      for (int round = 0; round < kRounds; ++round) {
        for (size_t i = 0; i < requests.size(); ++i) {
          const size_t k = (i + static_cast<size_t>(t) * 5) % requests.size();  // each thread its own order
          pdkv_error_t* e = nullptr;
          const pdkv_status_t st = pdkv_engine_plan_request_into(d, ctx, &requests[k].c, plan.get(), &e);
          seen[t].push_back(std::to_string(k) + "\n" + outcome(st, e, plan.get()));
        }
      }
    });
  }
  // Meanwhile new plans, one handle per request.
  threads.emplace_back([&] {
    for (size_t k = 0; k < requests.size(); ++k) {
      pdkv_transfer_plan_t* plan = nullptr;
      pdkv_error_t* e = nullptr;
      const pdkv_status_t st = pdkv_engine_plan_request(d, ctx, &requests[k].c, &plan, &e);
      seen[kThreads].push_back(std::to_string(k) + "\n" + outcome(st, e, plan));
      pdkv_transfer_plan_free(plan);
    }
  });
  for (std::thread& th : threads) th.join();

  for (int t = 0; t <= kThreads; ++t) {
    INFO("thread " << t);
    CHECK(seen[t].size() == (t < kThreads ? kRounds * requests.size() : requests.size()));
    for (const std::string& s : seen[t]) {
      const size_t nl = s.find('\n');
      const size_t k = std::stoul(s.substr(0, nl));
      CHECK(s.substr(nl + 1) == want[k]);
    }
  }
}

TEST_CASE("planning: one plan's reads read back by many threads at once", "[capi][threads][plan]") {
  // The C API compiles plans in factored form (regions laid out alike as repeats of the first
  // one's reads) and expands a rank's reads on the first pdkv_transfer_plan_rank_reads after each
  // compile: threads asking at once must all get the one expansion (same pointer, same reads),
  // equal to the reads of the plan's JSON (expanded by the core, not by the handle).
  const ModelPtr model = preset_model("nemotron-3-nano-30b");
  const pdkv_engine_config_t dc = engine(2, PDKV_BACKEND_FLASHINFER), pc = engine(4, PDKV_BACKEND_FLASHINFER);
  const EnginePair pair(model.get(), dc, pc, 0, kPool);
  pdkv_engine_t* const d = pair.d.get();
  const pdkv_engine_info_t di = pair.d_info, pi = pair.p_info;
  pdkv_transfer_plan_t* raw = nullptr;
  REQUIRE_OK(pdkv_transfer_plan_new(&raw, err));
  const TransferPlanPtr plan(raw);
  for (uint64_t round = 0; round < 4; ++round) {
    // Fragmented ids (every other block), 3 to 6 D blocks: several reads per region.
    const uint64_t blocks = 3 + round, bs = di.logical_block_size;
    const uint64_t tokens = blocks * bs - 5;
    const uint64_t p_blocks = (tokens - 1 + pi.logical_block_size - 1) / pi.logical_block_size;
    EngineRequestTables q;
    for (size_t g = 0; g < di.num_groups; ++g) {
      std::vector<uint64_t> l, r;
      if (group_kind(d, g) == PDKV_GROUP_MAMBA) {
        for (uint64_t i = 0; i < blocks; ++i) l.push_back(i + 1 == blocks ? 50 + g : 0);
        r.push_back(40 + g);
      } else {
        for (uint64_t i = 0; i < blocks; ++i) l.push_back(1 + 2 * i + round);
        for (uint64_t i = 0; i < p_blocks; ++i) r.push_back(1 + 3 * i);
      }
      q.local.push_back(std::move(l));
      q.remote.push_back(std::move(r));
    }
    q.seal(tokens, 0);
    REQUIRE_OK(pdkv_engine_plan_request_into(d, pair.ctx.get(), &q.c, plan.get(), err));

    constexpr int kThreads = 4;
    struct Seen {
      std::vector<const pdkv_plan_read_t*> ptr;
      std::vector<std::vector<pdkv_plan_read_t>> reads;
      bool ok = true;
    };
    std::vector<Seen> seen(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (uint32_t p = 0; p < pi.tp_size; ++p) {
          const uint32_t rank = (p + static_cast<uint32_t>(t)) % pi.tp_size;  // each thread its own order
          const pdkv_plan_read_t* r = nullptr;
          size_t n = 0;
          seen[t].ok = seen[t].ok && pdkv_transfer_plan_rank_reads(plan.get(), rank, &r, &n, nullptr, nullptr) == PDKV_OK;
          seen[t].ptr.resize(pi.tp_size);
          seen[t].reads.resize(pi.tp_size);
          seen[t].ptr[rank] = r;
          seen[t].reads[rank].assign(r, r + n);
        }
      });
    }
    for (std::thread& th : threads) th.join();

    const std::string json = outcome(PDKV_OK, nullptr, plan.get());
    size_t total = 0;
    for (uint32_t p = 0; p < pi.tp_size; ++p) {
      const pdkv_plan_read_t* r = nullptr;
      size_t n = 0;
      REQUIRE_OK(pdkv_transfer_plan_rank_reads(plan.get(), p, &r, &n, nullptr, err));
      total += n;
      // The JSON lists the same reads, in the same order.
      size_t at = json.find("\"p_tp_rank\":" + std::to_string(p));
      for (size_t i = 0; i < n && at != std::string::npos; ++i) {
        const std::string one = "{\"local_region\":" + std::to_string(r[i].local_region) +
                                ",\"local_offset\":" + std::to_string(r[i].local_offset) +
                                ",\"remote_region\":" + std::to_string(r[i].remote_region) +
                                ",\"remote_offset\":" + std::to_string(r[i].remote_offset) +
                                ",\"length\":" + std::to_string(r[i].length) + "}";
        at = json.find(one, at);
        CHECK(at != std::string::npos);
      }
      for (int t = 0; t < kThreads; ++t) {
        INFO("round " << round << " thread " << t << " P rank " << p);
        CHECK(seen[t].ok);
        CHECK(seen[t].ptr[p] == r);
        CHECK(seen[t].reads[p].size() == n);
        CHECK((n == 0 || std::memcmp(seen[t].reads[p].data(), r, n * sizeof *r) == 0));
      }
    }
    pdkv_transfer_plan_info_t info{};
    info.struct_size = sizeof info;
    REQUIRE_OK(pdkv_transfer_plan_get_info(plan.get(), &info, err));
    CHECK(total == info.pieces_after_coalescing);
    CHECK(total >= 6 * blocks);  // six attention regions, a read per fragmented block at least
  }
}
