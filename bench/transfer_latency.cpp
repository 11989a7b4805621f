// What the lease query of pdkv 2.7 costs one transfer (docs/benchmarks.md, "Transfer latency and
// the lease query"): a transfer with a peer rank at control protocol 3.5 asks it first whether its
// lease of the request is open (LeaseQuery / LeaseAnswer on the control channel, sent when the
// transfer is posted): a READ counts its bytes only once answered (it reads meanwhile), a WRITE
// sends nothing before the answer. A peer rank saying 3.4 is not asked, as before 2.7.
//
// The same work, in one run: the posting agent (D for a READ, P for a WRITE) connected to two
// peer engines in the same process, "t-34" (its Hello says 3.4: the baseline) and "t-35" (this
// build's), each with its own memory. For every size, transfers of the same pieces alternate
// between the two (the order swapped every repetition), timed post -> DONE; the peer leases each
// request first, as an engine would. Reported: median, 10th and 90th percentile per peer, and the
// ratio of medians.
//
// Usage: transfer_latency [--sizes 4096,262144,4194304] [--reps 2000] [--modes shm,tcp] [--ops read,write]
// Output: one JSON object per (op, mode, size) on stdout. Exit 0, or 2 when a transfer failed or
// moved wrong bytes (named on stderr).
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

struct Node {
  std::unique_ptr<bench::Buffer> mem;
  std::unique_ptr<exec::Agent> agent;
};

// An agent of `engine` over `bytes` of memory holding the pattern, registered as region 0.
Node make_node(const std::string& engine, uint16_t minor, exec::TransportMode mode, uint64_t bytes) {
  Node p;
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

core::TransferPlan plan_of(const std::string& d_engine, const std::string& p_engine, uint64_t bytes) {
  core::TransferPlan plan;
  plan.d_engine_id = d_engine;
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
  std::vector<std::string> ops = {"read", "write"};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--sizes") {
      sizes.clear();
      for (const auto& s : split(argv[i + 1])) sizes.push_back(std::stoull(s));
    } else if (a == "--reps") {
      reps = std::atoi(argv[i + 1]);
    } else if (a == "--modes") {
      modes = split(argv[i + 1]);
    } else if (a == "--ops") {
      ops = split(argv[i + 1]);
    } else {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      return 1;
    }
  }
  int rc = 0;
  for (const auto& op_name : ops) {
    const bool read = op_name == "read";
    for (const auto& mode_name : modes) {
      const auto mode = mode_name == "shm" ? exec::TransportMode::Shm : exec::TransportMode::Tcp;
      for (const uint64_t size : sizes) {
        try {
          // A READ's poster is D (size bytes) reading every other 4 KiB block of P (2 x size); a
          // WRITE's poster is P writing them into D. The peers are the other side.
          const uint64_t d_bytes = size, p_bytes = 2 * size;
          Node targets[2] = {make_node("t-34", 4, mode, read ? p_bytes : d_bytes),
                             make_node("t-35", exec::kControlProtoMinor, mode, read ? p_bytes : d_bytes)};
          Node poster = make_node("poster", exec::kControlProtoMinor, mode, read ? d_bytes : p_bytes);
          for (auto& t : targets) poster.agent->connect(t.agent->info().listen, std::chrono::seconds(10));
          const core::TransferPlan plans[2] = {read ? plan_of("poster", "t-34", size) : plan_of("t-34", "poster", size),
                                               read ? plan_of("poster", "t-35", size) : plan_of("t-35", "poster", size)};
          std::vector<double> us[2];
          for (int r = -20; r < reps; ++r) {  // 20 warm-up rounds
            for (int k = 0; k < 2; ++k) {
              const int which = (r & 1) != 0 ? 1 - k : k;
              Node& target = targets[which];
              const std::string id = "r" + std::to_string(r);
              target.agent->lease(id, 1, std::chrono::seconds(30));
              uint8_t* d_mem = read ? poster.mem->data : target.mem->data;
              const uint8_t* p_mem = read ? target.mem->data : poster.mem->data;
              std::memset(d_mem, 0xEE, size);
              exec::PostParams pp;
              pp.op = read ? exec::TransferOp::Read : exec::TransferOp::Write;
              pp.plan = &plans[which];
              pp.peer_engine_id = read ? plans[which].p_engine_id : plans[which].d_engine_id;
              pp.request_id = id;
              const auto t0 = Clock::now();
              auto t = poster.agent->post(pp);
              t.wait(std::chrono::milliseconds::max());
              const double took = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
              const auto s = t.status();
              if (s.status != core::Status::Ok) throw std::runtime_error(op_name + " failed: " + s.message);
              if (!read) {
                // D's memory is final once D took every byte in (acknowledged them over tcp; P's
                // cma write returned over shm) and before P's WRITE_DONE; wait for D's lease to
                // complete so the next round's memset does not race nothing in flight.
                bool done = false;
                while (!done) {
                  for (const auto& n : target.agent->poll_notifications()) {
                    done |= n.kind == exec::NotificationKind::RequestComplete && n.request_id == id;
                  }
                }
              }
              for (uint64_t at = 0; at < size; at += 4096) {
                const uint64_t n = std::min<uint64_t>(4096, size - at);
                if (std::memcmp(d_mem + at, p_mem + 2 * at, n) != 0) {
                  throw std::runtime_error(op_name + " moved wrong bytes at " + std::to_string(at));
                }
              }
              if (r >= 0) us[which].push_back(took);
              if (read) (void)target.agent->poll_notifications();  // READ_DONE, REQUEST_COMPLETE
            }
            (void)poster.agent->poll_notifications();
          }
          const Stats a = stats(us[0]), b = stats(us[1]);
          std::printf(
              "{\"op\": \"%s\", \"mode\": \"%s\", \"bytes\": %llu, \"reps\": %d, \"peer34_us\": {\"p10\": %.1f, "
              "\"median\": %.1f, \"p90\": %.1f}, \"peer35_us\": {\"p10\": %.1f, \"median\": %.1f, \"p90\": %.1f}, "
              "\"median_ratio\": %.3f}\n",
              op_name.c_str(), mode_name.c_str(), static_cast<unsigned long long>(size), reps, a.p10, a.median, a.p90,
              b.p10, b.median, b.p90, b.median / a.median);
          std::fflush(stdout);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "%s %s %llu bytes: %s\n", op_name.c_str(), mode_name.c_str(),
                       static_cast<unsigned long long>(size), e.what());
          rc = 2;
        }
      }
    }
  }
  return rc;
}
