// What the lease query of pdkv 2.7 costs one READ (docs/benchmarks.md, "READ latency and the lease
// query"): D's READ of a P rank at control protocol 3.5 counts its bytes only once P answered
// that its lease of the request was open (LeaseQuery / LeaseAnswer on the control channel, sent
// when the READ is posted, beside the data); a P rank saying 3.4 is not asked, as before 2.7.
//
// The same work, in one run: one D agent connected to two P engines in the same process, "p-34"
// (its Hello says 3.4: the baseline) and "p-35" (this build's), each with its own copy of the same
// working set. For every size, READs of the same pieces alternate between the two (the order
// swapped every repetition), timed post -> DONE; P leases each request before it is read, as an
// engine would. Reported: median, 10th and 90th percentile per engine, and the ratio of medians.
//
// Usage: read_latency [--sizes 4096,262144,4194304] [--reps 2000] [--modes shm,tcp]
// Output: one JSON object per (mode, size) on stdout. Exit 0, or 2 when a READ failed or moved
// wrong bytes (named on stderr).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "agent/agent.hpp"
#include "agent_get.hpp"

using namespace pdkv;
using Clock = std::chrono::steady_clock;

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string x; std::getline(in, x, ',');) out.push_back(x);
  return out;
}

struct P {
  std::unique_ptr<bench::Buffer> mem;
  std::unique_ptr<exec::Agent> agent;
};

P make_p(const std::string& engine, uint16_t minor, exec::TransportMode mode, uint64_t bytes) {
  P p;
  p.mem = std::make_unique<bench::Buffer>(bench::round_page(bytes));
  bench::fill_pattern(p.mem->data, p.mem->size);
  exec::AgentOptions o;
  o.metadata = bench::bench_metadata(engine, reinterpret_cast<uint64_t>(p.mem->data), p.mem->size);
  o.transport = mode;
  o.control_minor = minor;
  p.agent = std::make_unique<exec::Agent>(o);
  p.agent->register_memory(0, reinterpret_cast<uint64_t>(p.mem->data), p.mem->size, exec::MemoryType::Host);
  return p;
}

core::TransferPlan plan_of(const std::string& p_engine, uint64_t bytes) {
  core::TransferPlan plan;
  plan.d_engine_id = "bench-d";
  plan.p_engine_id = p_engine;
  plan.d_rank = 0;
  plan.d_tp = 1;
  plan.p_tp = 1;
  core::RankReads rr;
  rr.p_rank = 0;
  // 4 KiB pieces (one kernel block each, as a FlashInfer-sized read of one layer), every other
  // block of P into consecutive blocks of D.
  for (uint64_t at = 0; at < bytes; at += 4096) {
    rr.reads.push_back({0, at, 0, 2 * at, std::min<uint64_t>(4096, bytes - at)});
    rr.bytes += rr.reads.back().length;
  }
  plan.ranks.push_back(std::move(rr));
  plan.notify_ranks = {0};
  return plan;
}

struct Stats {
  double p10 = 0, median = 0, p90 = 0;
};

Stats stats(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  auto at = [&](double q) { return us[static_cast<size_t>(q * static_cast<double>(us.size() - 1))]; };
  return {at(0.1), at(0.5), at(0.9)};
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<uint64_t> sizes = {4096, 262144, 4194304};
  int reps = 2000;
  std::vector<std::string> modes = {"shm", "tcp"};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--sizes") {
      sizes.clear();
      for (const auto& s : split(argv[i + 1])) sizes.push_back(std::stoull(s));
    } else if (a == "--reps") {
      reps = std::atoi(argv[i + 1]);
    } else if (a == "--modes") {
      modes = split(argv[i + 1]);
    } else {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      return 1;
    }
  }
  int rc = 0;
  for (const auto& mode_name : modes) {
    const auto mode = mode_name == "shm" ? exec::TransportMode::Shm : exec::TransportMode::Tcp;
    for (const uint64_t size : sizes) {
      try {
        const uint64_t p_bytes = 2 * size;
        P old_p = make_p("p-34", 4, mode, p_bytes);
        P new_p = make_p("p-35", exec::kControlProtoMinor, mode, p_bytes);
        bench::Buffer local(bench::round_page(size));
        exec::AgentOptions o;
        o.metadata = bench::bench_metadata("bench-d", reinterpret_cast<uint64_t>(local.data), local.size);
        o.transport = mode;
        exec::Agent d(o);
        d.register_memory(0, reinterpret_cast<uint64_t>(local.data), local.size, exec::MemoryType::Host);
        d.connect(old_p.agent->info().listen, std::chrono::seconds(10));
        d.connect(new_p.agent->info().listen, std::chrono::seconds(10));
        P* ps[2] = {&old_p, &new_p};
        const core::TransferPlan plans[2] = {plan_of("p-34", size), plan_of("p-35", size)};
        std::vector<double> us[2];
        for (int r = -20; r < reps; ++r) {  // 20 warm-up rounds
          for (int k = 0; k < 2; ++k) {
            const int which = (r & 1) != 0 ? 1 - k : k;
            const std::string id = "r" + std::to_string(r);
            ps[which]->agent->lease(id, 1, std::chrono::seconds(30));
            std::memset(local.data, 0xEE, size);
            exec::PostParams pp;
            pp.plan = &plans[which];
            pp.peer_engine_id = plans[which].p_engine_id;
            pp.request_id = id;
            const auto t0 = Clock::now();
            auto t = d.post(pp);
            t.wait(std::chrono::milliseconds::max());
            const double took = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
            const auto s = t.status();
            if (s.status != core::Status::Ok) throw std::runtime_error("READ failed: " + s.message);
            for (uint64_t at = 0; at < size; at += 4096) {
              const uint64_t n = std::min<uint64_t>(4096, size - at);
              if (std::memcmp(local.data + at, ps[which]->mem->data + 2 * at, n) != 0) {
                throw std::runtime_error("READ moved wrong bytes at " + std::to_string(at));
              }
            }
            if (r >= 0) us[which].push_back(took);
            (void)ps[which]->agent->poll_notifications();  // REQUEST_COMPLETE and READ_DONE
          }
          (void)d.poll_notifications();
        }
        const Stats a = stats(us[0]), b = stats(us[1]);
        std::printf(
            "{\"mode\": \"%s\", \"bytes\": %llu, \"reps\": %d, \"p34_us\": {\"p10\": %.1f, \"median\": %.1f, \"p90\": %.1f}, "
            "\"p35_us\": {\"p10\": %.1f, \"median\": %.1f, \"p90\": %.1f}, \"median_ratio\": %.3f}\n",
            mode_name.c_str(), static_cast<unsigned long long>(size), reps, a.p10, a.median, a.p90, b.p10, b.median,
            b.p90, b.median / a.median);
        std::fflush(stdout);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s %llu bytes: %s\n", mode_name.c_str(), static_cast<unsigned long long>(size), e.what());
        rc = 2;
      }
    }
  }
  return rc;
}
