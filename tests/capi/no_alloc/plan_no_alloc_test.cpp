// Issue 10, item 3 ("no per-call heap churn on the hot path"), as a property of the product:
// request after request, `pdkv_transfer_plan_compile_into` into one reused plan handle, through
// the shared library every binding loads, touches the heap not once once the plan and the
// thread's scratch have grown to the largest request. The requests are bench/plan_vs_vllm's
// (Nemotron-3-Nano, P TP4 -> D TP2 rank 0, both kernel geometries, 4k to 1M tokens, consecutive
// and fragmented ids, no hit and a 50% hit with Mamba's align mode), so the figures in
// docs/benchmarks.md are of plans compiled without an allocation.
//
// A program of its own: it replaces the global operator new (the library's allocations go
// through it; libpdkv imports operator new rather than carrying its own) to count the
// allocations the calling thread makes while counting is on, and fills every allocation with a
// pattern, so that the padding test below sees a byte the library hands out unwritten.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "../capi_helpers.hpp"
#include "pdkv.h"
#include "c_plan_context.hpp"
#include "plan_request.hpp"
#include "../engine_handles.hpp"

namespace {

thread_local bool counting = false;
thread_local uint64_t allocations = 0;

// Every allocation of this program starts filled with kStale, as a reused heap block holds
// stale bytes: a byte the library hands out without writing it shows up as kStale (see the
// padding test below), not as the zero a fresh page would happen to hold.
constexpr unsigned char kStale = 0xA5;

void* counted(std::size_t n) {
  if (counting) ++allocations;
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, kStale, n);
  return p;
}

void* counted_aligned(std::size_t n, std::align_val_t a) {
  if (counting) ++allocations;
  const std::size_t al = static_cast<std::size_t>(a);
  const std::size_t size = (n + al - 1) / al * al;
  void* p = std::aligned_alloc(al, size);
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, kStale, size);
  return p;
}

}  // namespace

void* operator new(std::size_t n) { return counted(n); }
void* operator new[](std::size_t n) { return counted(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return counted(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return counted(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new(std::size_t n, std::align_val_t a) { return counted_aligned(n, a); }
void* operator new[](std::size_t n, std::align_val_t a) { return counted_aligned(n, a); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace {

using pdkv::bench::Request;

// Allocations the calling thread makes in f.
template <class F>
uint64_t allocations_in(F&& f) {
  allocations = 0;
  counting = true;
  f();
  counting = false;
  return allocations;
}

}  // namespace

TEST_CASE("transfer plan: compile_into into a reused plan allocates nothing once it has grown", "[capi][plan][alloc]") {
  // The counter sees allocations at all (else the checks below could not fail).
  REQUIRE(allocations_in([] { delete new std::vector<int>(3); }) >= 1);

  // P TP4 -> D TP2 (the bench's pair: D reads two P ranks' heads), then D TP4 <- P TP2 (a slice
  // of one P rank's heads) and TP1 on both sides.
  for (const auto& tps : {std::pair<uint32_t, uint32_t>{2, 4}, {4, 2}, {1, 1}}) {
    const uint32_t d_tp = tps.first, p_tp = tps.second;  // (named: clang 14 cannot capture a structured binding)
    for (const bool flashinfer : {true, false}) {
      for (const uint64_t hit_pct : {uint64_t{0}, uint64_t{50}}) {
        const int32_t mode = hit_pct ? PDKV_MAMBA_CACHE_ALIGN : PDKV_MAMBA_CACHE_NONE;
        pdkv::bench::CPlanContext c;
        const char* failed = "";
        REQUIRE_OK(pdkv::bench::make_c_plan_context(c, flashinfer, mode, d_tp, p_tp, err, &failed));
        const std::string name = "P TP" + std::to_string(p_tp) + " -> D TP" + std::to_string(d_tp) + " " +
                                 (flashinfer ? "flashinfer" : "flash_attn") + " hit " + std::to_string(hit_pct) + "%";
        // Every request of the bench for this geometry and hit, as the block tables hold the ids
        // (logical ids, kernel_blocks_per_id = ppl) and as kernel ids.
        std::vector<Request> requests;
        for (const uint64_t tokens : {4096, 32768, 131072, 1048576}) {
          for (const bool frag : {false, true}) {
            const Request r = pdkv::bench::make_request(tokens, hit_pct, frag, c.di.block_size, c.pi.block_size,
                                                        c.di.physical_per_logical, c.pi.physical_per_logical,
                                                        static_cast<pdkv::core::MambaCacheMode>(mode));
            requests.push_back(r.as_logical());
            requests.push_back(r);
          }
        }
        std::vector<pdkv::bench::CGroups> groups;
        for (const Request& r : requests) groups.push_back(r.c_groups());

        pdkv_transfer_plan_t* raw = nullptr;
        REQUIRE_OK(pdkv_transfer_plan_new(&raw, err));
        const TransferPlanPtr plan(raw);
        auto compile = [&](size_t i) {
          pdkv_error_t* e = nullptr;
          const pdkv_status_t st =
              pdkv_transfer_plan_compile_into(c.ctx, groups[i].groups.data(), groups[i].groups.size(), plan.get(), &e);
          if (st != PDKV_OK) {
            const std::string msg = pdkv_error_message(e);
            pdkv_error_free(e);
            FAIL(msg);
          }
        };

        // What a caller reads of each plan (the bindings' views go through these), with the
        // number of reads seen, so that the calls cannot be skipped.
        uint64_t reads_seen = 0;
        auto read_back = [&] {
          pdkv_transfer_plan_info_t info{};
          info.struct_size = sizeof info;
          bool ok = pdkv_transfer_plan_get_info(plan.get(), &info, nullptr) == PDKV_OK;
          for (uint32_t p = 0; p < p_tp; ++p) {
            const pdkv_plan_read_t* reads = nullptr;
            size_t n = 0;
            ok = ok && pdkv_transfer_plan_rank_reads(plan.get(), p, &reads, &n, nullptr, nullptr) == PDKV_OK;
            reads_seen += n;
          }
          const uint32_t* ranks = nullptr;
          size_t nr = 0;
          ok = ok && pdkv_transfer_plan_read_ranks(plan.get(), &ranks, &nr, nullptr) == PDKV_OK;
          ok = ok && pdkv_transfer_plan_notify_ranks(plan.get(), &ranks, &nr, nullptr) == PDKV_OK;
          for (size_t g = 0; g < info.num_groups; ++g) {
            pdkv_plan_group_zero_t z{};
            z.struct_size = sizeof z;
            ok = ok && pdkv_transfer_plan_group_zero(plan.get(), g, &z, nullptr) == PDKV_OK;
          }
          return ok;
        };

        // Grown once to every request's size (the plan's vectors, the thread's scratch, and the
        // buffers the handle expands a factored plan's reads into when they are read back).
        for (size_t i = 0; i < requests.size(); ++i) {
          compile(i);
          REQUIRE(read_back());
        }

        // Then, in either order (larger after smaller and the other way round), not one allocation,
        // neither compiling nor reading the plan back.
        for (size_t i = 0; i < requests.size(); ++i) {
          INFO(name << " request " << i);
          CHECK(allocations_in([&] { compile(i); }) == 0);
          bool ok = false;
          CHECK(allocations_in([&] { ok = read_back(); }) == 0);
          CHECK(ok);
        }
        CHECK(reads_seen > requests.size() * 100);
        for (size_t i = requests.size(); i-- > 0;) {
          INFO(name << " request " << i << " (reverse)");
          CHECK(allocations_in([&] { compile(i); }) == 0);
        }
        // The handle's reads were refreshed: the last plan is the first request's, not a stale one.
        pdkv_transfer_plan_info_t info{};
        info.struct_size = sizeof info;
        REQUIRE_OK(pdkv_transfer_plan_get_info(plan.get(), &info, err));
        CHECK(info.num_groups == 5);
        CHECK(info.bytes > 0);
      }
    }
  }
}

TEST_CASE("transfer plan: every byte of the reads handed out is defined (their padding is zero)",
          "[capi][plan][alloc]") {
  // pdkv_plan_read_t has 4 bytes of padding after each 32-bit region field. The library hands
  // its reads out in place (and the bindings view them without copying), so padding left as the
  // allocator gave it would be stale heap bytes (here kStale) in every view: a plan's bytes
  // would differ run to run. Listed and factored plans (rank lists written out on first read),
  // fresh and reused, logical and kernel ids, consecutive and fragmented.
  static_assert(offsetof(pdkv_plan_read_t, local_offset) == 8 && offsetof(pdkv_plan_read_t, remote_offset) == 24);
  static_assert(offsetof(pdkv_mamba_read_t, part) == 8);
  for (const bool flashinfer : {true, false}) {
    pdkv::bench::CPlanContext c;
    const char* failed = "";
    REQUIRE_OK(pdkv::bench::make_c_plan_context(c, flashinfer, PDKV_MAMBA_CACHE_ALIGN, 2, 4, err, &failed));
    pdkv_transfer_plan_t* raw = nullptr;
    REQUIRE_OK(pdkv_transfer_plan_new(&raw, err));
    const TransferPlanPtr reused(raw);
    uint64_t reads_checked = 0;
    for (const uint64_t tokens : {4096, 131072}) {
      for (const bool frag : {false, true}) {
        const Request r = pdkv::bench::make_request(tokens, 50, frag, c.di.block_size, c.pi.block_size,
                                                    c.di.physical_per_logical, c.pi.physical_per_logical,
                                                    pdkv::core::MambaCacheMode::Align);
        for (const Request& req : {r.as_logical(), r}) {
          const pdkv::bench::CGroups g = req.c_groups();
          pdkv_transfer_plan_t* fresh_raw = nullptr;
          REQUIRE_OK(pdkv_transfer_plan_compile(c.ctx, g.groups.data(), g.groups.size(), &fresh_raw, err));
          const TransferPlanPtr fresh(fresh_raw);
          REQUIRE_OK(pdkv_transfer_plan_compile_into(c.ctx, g.groups.data(), g.groups.size(), reused.get(), err));
          for (const pdkv_transfer_plan_t* plan : {static_cast<const pdkv_transfer_plan_t*>(fresh.get()),
                                                   static_cast<const pdkv_transfer_plan_t*>(reused.get())}) {
            for (uint32_t p = 0; p < 4; ++p) {
              const pdkv_plan_read_t* reads = nullptr;
              size_t n = 0;
              REQUIRE_OK(pdkv_transfer_plan_rank_reads(plan, p, &reads, &n, nullptr, err));
              for (size_t i = 0; i < n; ++i) {
                unsigned char bytes[sizeof(pdkv_plan_read_t)];
                std::memcpy(bytes, &reads[i], sizeof bytes);
                INFO("tokens " << tokens << (frag ? " fragmented" : " consecutive") << ", P rank " << p << ", read "
                               << i);
                for (const size_t at : {4u, 5u, 6u, 7u, 20u, 21u, 22u, 23u}) REQUIRE(bytes[at] == 0);
                ++reads_checked;
              }
            }
          }
        }
      }
    }
    CHECK(reads_checked > 1000);

    // The Mamba read lists too (pdkv_mamba_read_t: 4 bytes of padding after p_tp_rank), by both
    // rules, for both D ranks.
    for (const int32_t rule : {PDKV_MAMBA_READS_PDKV, PDKV_MAMBA_READS_VLLM}) {
      for (uint32_t d_rank = 0; d_rank < 2; ++d_rank) {
        pdkv_mamba_read_list_t* list = nullptr;
        REQUIRE_OK(pdkv_mamba_reads_new(c.pg, c.dg, d_rank, rule, &list, err));
        const pdkv_mamba_read_t* mr = nullptr;
        size_t n = 0;
        const pdkv_status_t st = pdkv_mamba_read_list_items(list, &mr, &n, nullptr);
        std::vector<unsigned char> bytes(n * sizeof(pdkv_mamba_read_t));
        if (n > 0) std::memcpy(bytes.data(), mr, bytes.size());
        pdkv_mamba_read_list_free(list);
        REQUIRE(st == PDKV_OK);
        REQUIRE(n > 0);
        for (size_t i = 0; i < n; ++i) {
          INFO("rule " << rule << ", D rank " << d_rank << ", Mamba read " << i);
          for (size_t at = 4; at < 8; ++at) REQUIRE(bytes[i * sizeof(pdkv_mamba_read_t) + at] == 0);
        }
      }
    }
  }
}

TEST_CASE("engine: plan_request_into into a reused plan allocates nothing once it has grown", "[capi][engine][alloc]") {
  // Nemotron-3-Nano, P TP4 -> D TP2 rank 0 as engines (pdkv/engine.h), both kernel geometries,
  // Mamba cache mode align, 4k to 1M tokens, no hit and a 50% hit, block tables of consecutive
  // ids and of a shuffled pool: the engine-level form of the requests above.
  const ModelPtr model = preset_model("nemotron-3-nano-30b");
  constexpr uint64_t kPool = 4096;  // logical blocks per engine, one pool shared by the groups
  for (const int32_t backend : {PDKV_BACKEND_FLASHINFER, PDKV_BACKEND_FLASH_ATTN}) {
    pdkv_engine_config_t dc = engine(2, backend), pc = engine(4, backend);
    dc.mamba_cache_mode = pc.mamba_cache_mode = PDKV_MAMBA_CACHE_ALIGN;
    const EnginePair pair(model.get(), dc, pc, 0, kPool);
    pdkv_engine_t* const d = pair.d.get();
    pdkv_plan_context_t* const ctx = pair.ctx.get();
    const pdkv_engine_info_t di = pair.d_info, pi = pair.p_info;
    REQUIRE(di.num_groups == 5);
    const uint64_t bs = di.logical_block_size;

    std::vector<EngineRequestTables> requests;
    for (const uint64_t tokens : {4096, 32768, 131072, 1048576})
      for (const bool frag : {false, true})
        for (const uint64_t hit_pct : {uint64_t{0}, uint64_t{50}}) {
          const uint64_t blocks = (tokens + bs - 1) / bs;
          // P computes N-1 of the N prompt tokens (Mamba state), in blocks of its own size.
          const uint64_t p_blocks = (tokens - 1 + pi.logical_block_size - 1) / pi.logical_block_size;
          REQUIRE(std::max(blocks, p_blocks) < kPool);
          std::vector<uint64_t> pool(kPool - 1);  // block 0 is the null block
          for (uint64_t i = 0; i < pool.size(); ++i) pool[i] = i + 1;
          uint64_t seed = tokens * 7 + hit_pct;
          if (frag) {
            for (uint64_t i = pool.size() - 1; i > 0; --i) {
              seed = seed * 6364136223846793005ull + 1442695040888963407ull;
              std::swap(pool[i], pool[(seed >> 33) % (i + 1)]);
            }
          }
          EngineRequestTables q;
          const uint64_t hit = blocks * hit_pct / 100 * bs;
          // Each group's blocks are its own (one pool, as vLLM's hybrid manager hands them out);
          // P's come from the other end of its pool.
          size_t d_next = 0, p_next = pool.size();
          for (size_t g = 0; g < di.num_groups; ++g) {
            std::vector<uint64_t> l, r;
            if (group_kind(d, g) == PDKV_GROUP_MAMBA) {
              // Align: the hit positions' cached states, null placeholders, the running state last.
              for (uint64_t i = 0; i < blocks; ++i) l.push_back(i < hit / bs || i + 1 == blocks ? pool[d_next++] : 0);
              r.push_back(pool[--p_next]);
            } else {
              for (uint64_t i = 0; i < blocks; ++i) l.push_back(pool[d_next++]);
              for (uint64_t i = 0; i < p_blocks; ++i) r.push_back(pool[--p_next]);
            }
            REQUIRE(d_next <= p_next);
            q.local.push_back(std::move(l));
            q.remote.push_back(std::move(r));
          }
          q.seal(tokens, hit);
          requests.push_back(std::move(q));
        }

    pdkv_transfer_plan_t* raw = nullptr;
    REQUIRE_OK(pdkv_transfer_plan_new(&raw, err));
    const TransferPlanPtr plan(raw);
    auto plan_one = [&](size_t i) {
      pdkv_error_t* e = nullptr;
      if (pdkv_engine_plan_request_into(d, ctx, &requests[i].c, plan.get(), &e) != PDKV_OK) {
        const std::string msg = pdkv_error_message(e);
        pdkv_error_free(e);
        FAIL(msg);
      }
    };
    for (size_t i = 0; i < requests.size(); ++i) plan_one(i);
    for (size_t i = 0; i < requests.size(); ++i) {
      INFO((backend == PDKV_BACKEND_FLASHINFER ? "flashinfer" : "flash_attn") << " request " << i);
      CHECK(allocations_in([&] { plan_one(i); }) == 0);
      pdkv_transfer_plan_info_t info{};
      info.struct_size = sizeof info;
      REQUIRE_OK(pdkv_transfer_plan_get_info(plan.get(), &info, err));
      CHECK(info.num_groups == 5);
      CHECK(info.bytes > 0);
    }
    for (size_t i = requests.size(); i-- > 0;) CHECK(allocations_in([&] { plan_one(i); }) == 0);
    // The owning call allocates (a handle at least): the counter sees this library's allocations.
    pdkv_transfer_plan_t* owned = nullptr;
    CHECK(allocations_in([&] {
            REQUIRE(pdkv_engine_plan_request(d, ctx, &requests[0].c, &owned, nullptr) == PDKV_OK);
          }) > 0);
    pdkv_transfer_plan_free(owned);
  }
}
