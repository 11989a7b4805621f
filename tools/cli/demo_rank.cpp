#include "demo_rank.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "agent/agent.hpp"
#include "cli_error.hpp"
#include "control/socket.hpp"
#include "demo_layout.hpp"
#include "demo_options.hpp"
#include "demo_pattern.hpp"
#include "demo_requests.hpp"
#include "demo_wire.hpp"
#include "model_arg.hpp"
#include "pdkv/core/error.hpp"
#include "pdkv/core/tp_topology.hpp"
#include "pdkv/core/transfer_plan.hpp"

namespace pdkv::cli::demo {

namespace {

using json = nlohmann::json;
using core::Status;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// A request's plan in the C API's form (factored: regions laid out alike recorded as repeats, a
// fragmented attention group as block-indexed reads).
core::TransferPlan compile(const core::PlanContext& ctx, const core::PlanContextVerdict& verdict,
                           const std::vector<core::PlanGroup>& groups) {
  std::vector<core::PlanGroupView> views;
  views.reserve(groups.size());
  for (const core::PlanGroup& g : groups) views.push_back(core::view_of(g));
  core::TransferPlan plan;
  core::compile_transfer_plan_into(ctx, views, plan, verdict,
                                   core::CompileOptions{.region_repeats = true, .indexed_reads = true});
  return plan;
}

inline constexpr const char* kPrefillEngine = "prefill";
inline constexpr const char* kDecodeEngine = "decode";

uint64_t micros(Clock::duration d) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(d).count());
}

exec::TransportMode transport_of(const std::string& name) {
  if (name == "shm") return exec::TransportMode::Shm;
  if (name == "tcp") return exec::TransportMode::Tcp;
  return exec::TransportMode::Auto;
}

// The rank's registered memory: one anonymous mapping holding every region back to back.
struct Mapping {
  uint8_t* base = nullptr;
  size_t bytes = 0;
  explicit Mapping(size_t n) : bytes(n) {
    void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      core::fail(Status::Io, "mmap of " + std::to_string(n) + " bytes failed: " + std::strerror(errno));
    }
    base = static_cast<uint8_t*>(p);
  }
  ~Mapping() {
    if (base != nullptr) ::munmap(base, bytes);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
};

// What a D rank found checking one request's blocks.
struct Check {
  uint64_t bytes = 0;       // bytes compared
  uint64_t mismatches = 0;  // ranges holding a wrong byte
  std::string first;        // where the first wrong byte is, and what it should be
};

class Rank {
 public:
  explicit Rank(const json& init);
  ~Rank();
  void run(LineReader& in);

 private:
  // ---- set-up
  void on_peers(const json& msg);
  // ---- requests
  void worker_main();
  void d_request(const RankRequest& rq);
  void p_write(const RankRequest& rq);
  void p_lease(const std::string& id);
  void on_abort(const std::string& id);
  void on_release(const std::string& id);
  void notes_main();
  void freed(const std::string& id, const std::string& how, Status status);
  // ---- memory
  uint8_t* region(uint32_t g) const;
  Stream own(uint32_t g) const { return Stream::of(prefill_ ? 0 : 1, rank_, g); }
  uint64_t region_bytes() const;
  Check verify(const core::TransferPlan& plan, const std::vector<uint64_t>& kblocks) const;
  void inject_fault(const core::TransferPlan& plan);
  void restore_blocks(const std::vector<uint64_t>& kblocks);
  void finish();

  void out(const json& msg) {
    std::lock_guard<std::mutex> g(out_mu_);
    send(kRankOutFd, msg);
  }

  bool prefill_ = false;
  uint32_t rank_ = 0;
  bool write_ = false;
  std::chrono::milliseconds deadline_{5000};
  uint32_t concurrency_ = 1;
  Layout layout_;
  std::unique_ptr<Mapping> mem_;
  core::EngineMetadata md_;
  std::unique_ptr<exec::Agent> agent_;  // destroyed before mem_ (declared after it)
  std::vector<core::EngineMetadata> p_md_, d_md_;
  std::optional<core::PlanContext> ctx_;     // D: its context with the P engine
  std::vector<core::PlanContext> d_ctx_;     // P (WRITE): one context per D rank
  // Judged once per context: the demo compiles factored plans, as the C API does, so the agents
  // execute region repeats and block-indexed reads across processes.
  std::optional<core::PlanContextVerdict> verdict_;
  std::vector<core::PlanContextVerdict> d_verdict_;

  std::mutex out_mu_;
  std::mutex mu_;  // everything below
  std::condition_variable cv_;
  std::deque<json> queue_;
  size_t busy_ = 0;
  bool closing_ = false;
  std::vector<std::thread> workers_;
  std::thread notes_;
  std::atomic<bool> stop_notes_{false};
  std::atomic<bool> fault_done_{false};
  // P (READ): leased requests not yet freed; outcomes that arrived before the request did.
  std::set<std::string> held_;
  std::set<std::string> closed_;
  std::map<std::string, std::pair<std::string, Status>> early_;
  // D (WRITE): requests waiting for their writers.
  struct Waiting {
    std::set<uint32_t> writers;
    int state = 0;  // 0 waiting, 1 complete, 2 failed
    Status status = Status::Ok;
    std::string message;
  };
  std::map<std::string, Waiting> waiting_;
  std::set<uint32_t> lost_p_;
  // D: blocks of failed requests, restored when the coordinator releases them.
  std::map<std::string, std::vector<uint64_t>> failed_blocks_;
};

Rank::Rank(const json& init) {
  prefill_ = init.at("role").get<std::string>() == "prefill";
  rank_ = init.at("rank").get<uint32_t>();
  write_ = init.at("op").get<std::string>() == "write";
  deadline_ = std::chrono::milliseconds(init.at("deadline_ms").get<uint32_t>());
  concurrency_ = init.at("concurrency").get<uint32_t>();
  LayoutInputs li;
  li.model = load_model(init.at("model").get<std::string>());
  li.prefill_tp = init.at("prefill_tp").get<uint32_t>();
  li.decode_tp = init.at("decode_tp").get<uint32_t>();
  li.cache_mode = static_cast<core::MambaCacheMode>(init.at("cache_mode").get<int>());
  li.max_tokens = init.at("max_tokens").get<uint64_t>();
  li.concurrency = concurrency_;
  layout_ = make_layout(li);
  const Side& side = prefill_ ? layout_.prefill : layout_.decode;

  mem_ = std::make_unique<Mapping>(side.bytes_per_rank);
  md_ = rank_metadata(layout_, prefill_, prefill_ ? kPrefillEngine : kDecodeEngine, rank_,
                      reinterpret_cast<uint64_t>(mem_->base));
  for (uint32_t g = 0; g < md_.regions.size(); ++g) fill(region(g), own(g), 0, region_bytes());

  exec::AgentOptions o;
  o.metadata = md_;
  o.transport = transport_of(init.at("transport").get<std::string>());
  o.default_timeout = deadline_;
  o.key = exec::PresharedKey(from_hex(init.at("key").get<std::string>()));
  // A killed peer's control socket closes at once; heartbeats catch a peer that hangs instead.
  o.heartbeat_interval = 200ms;
  o.heartbeat_timeout = std::max<std::chrono::milliseconds>(1000ms, deadline_ / 2);
  agent_ = std::make_unique<exec::Agent>(o);
  for (uint32_t g = 0; g < md_.regions.size(); ++g) {
    const auto& r = md_.regions[g].region;
    agent_->register_memory(g, r.base, r.block_len * r.num_blocks, exec::MemoryType::Host);
  }
  const auto info = agent_->info();
  out({{"type", "ready"},
       {"address", info.listen.to_string()},
       {"metadata", to_hex(core::encode(md_))},
       {"bytes", side.bytes_per_rank}});
}

Rank::~Rank() {
  {
    std::lock_guard<std::mutex> g(mu_);
    closing_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) {
    if (t.joinable()) t.join();
  }
  stop_notes_ = true;
  if (notes_.joinable()) notes_.join();
}

uint64_t Rank::region_bytes() const {
  const auto& r = md_.regions.at(0).region;
  return r.block_len * r.num_blocks;
}

uint8_t* Rank::region(uint32_t g) const {
  return mem_->base + (md_.regions.at(g).region.base - reinterpret_cast<uint64_t>(mem_->base));
}

void Rank::on_peers(const json& msg) {
  for (const auto& p : msg.at("prefill")) p_md_.push_back(core::decode(from_hex(p.at("metadata").get<std::string>())));
  for (const auto& d : msg.at("decode")) d_md_.push_back(core::decode(from_hex(d.at("metadata").get<std::string>())));
  const auto mamba = [&](const Side& s) {
    return layout_.model.is_hybrid() ? std::optional<core::MambaState>(s.geo.mamba) : std::nullopt;
  };
  json targets = json::array();
  if (!prefill_) {
    ctx_ = core::make_plan_context(md_, p_md_, mamba(layout_.decode), mamba(layout_.prefill));
    core::validate_plan_context(*ctx_);
    verdict_ = core::judge_plan_context(*ctx_);
    // D connects to the P ranks it reads from and notifies, as a decode engine's connector does.
    for (uint32_t t : ctx_->mapping.handshake_targets) {
      const auto addr = exec::parse_host_port(msg.at("prefill").at(t).at("address").get<std::string>());
      agent_->connect(addr, deadline_);
      targets.push_back(t);
    }
  } else if (write_) {
    for (const auto& d : d_md_) d_ctx_.push_back(core::make_plan_context(d, p_md_, mamba(layout_.decode), mamba(layout_.prefill)));
    for (const auto& c : d_ctx_) d_verdict_.push_back(core::judge_plan_context(c));
  }
  for (uint32_t i = 0; i < concurrency_; ++i) workers_.emplace_back([this] { worker_main(); });
  notes_ = std::thread([this] { notes_main(); });
  out({{"type", "connected"}, {"targets", targets}});
}

void Rank::run(LineReader& in) {
  while (auto msg = in.next()) {
    const std::string type = msg->at("type").get<std::string>();
    if (type == "peers") {
      on_peers(*msg);
    } else if (type == "request") {
      if (prefill_ && !write_) {
        p_lease(msg->at("id").get<std::string>());
        continue;
      }
      {
        std::lock_guard<std::mutex> g(mu_);
        queue_.push_back(std::move(*msg));
      }
      // All: cv_ also wakes D workers waiting for their writers, which would swallow a single one.
      cv_.notify_all();
    } else if (type == "abort") {
      on_abort(msg->at("id").get<std::string>());
    } else if (type == "release") {
      on_release(msg->at("id").get<std::string>());
    } else if (type == "finish") {
      finish();
      return;
    }
  }
  // The coordinator is gone (its end of the pipe closed): nothing is left to serve.
  std::_Exit(1);
}

void Rank::worker_main() {
  for (;;) {
    json msg;
    {
      std::unique_lock<std::mutex> g(mu_);
      cv_.wait(g, [&] { return closing_ || !queue_.empty(); });
      if (queue_.empty()) return;
      msg = std::move(queue_.front());
      queue_.pop_front();
      ++busy_;
    }
    try {
      const RankRequest rq = parse_request(msg, layout_);
      if (prefill_) {
        p_write(rq);
      } else {
        d_request(rq);
      }
    } catch (const std::exception& e) {
      // A bug of the demo, not an outcome of the transfer: the coordinator stops the run.
      out({{"type", "error"}, {"kind", "internal"}, {"where", "request " + msg.value("id", std::string("?"))},
           {"message", e.what()}, {"status", nullptr}});
    }
    {
      std::lock_guard<std::mutex> g(mu_);
      --busy_;
    }
    cv_.notify_all();
  }
}

// ---- D: compile, pull (or wait for the P ranks' writes), verify ---------------------------

void Rank::d_request(const RankRequest& rq) {
  const auto t0 = Clock::now();
  json done{{"type", "done"}, {"id", rq.id}, {"ok", false}};
  auto fail = [&](const char* stage, Status st, const std::string& message) {
    done["stage"] = stage;
    done["status"] = core::status_name(st);
    done["message"] = message;
    done["fail_us"] = micros(Clock::now() - t0);
    {
      std::lock_guard<std::mutex> g(mu_);
      failed_blocks_[rq.id] = rq.d_kernel_blocks;
    }
    out(done);
  };
  core::TransferPlan plan;
  try {
    plan = compile(*ctx_, *verdict_, rq.groups);
  } catch (const core::Error& e) {
    return fail("compile", e.status(), e.what());
  }
  done["bytes"] = plan.stats.bytes;
  done["attention_bytes"] = plan.stats.attention_bytes;
  done["mamba_bytes"] = plan.stats.mamba_bytes;
  done["pieces_before"] = plan.stats.pieces_before_coalescing;
  done["pieces_after"] = plan.stats.pieces_after_coalescing;
  uint64_t transfer_us = 0;
  if (!write_) {
    exec::PostParams pp;
    pp.op = exec::TransferOp::Read;
    pp.plan = &plan;
    pp.peer_engine_id = kPrefillEngine;
    pp.request_id = rq.id;
    pp.timeout = deadline_;
    std::optional<exec::TransferHandle> h;
    try {
      h.emplace(agent_->post(pp));
    } catch (const core::Error& e) {
      return fail("post", e.status(), e.what());
    }
    h->wait(std::chrono::milliseconds::max());
    const exec::TransferStatus st = h->status();
    if (st.state != exec::TransferState::Done) return fail("transfer", st.status, st.message);
    transfer_us = micros(st.finished - st.posted);
  } else {
    // The P ranks holding reads of this plan each push theirs and say so (WRITE_DONE); the lease
    // turns their count into one REQUEST_COMPLETE.
    std::set<uint32_t> writers;
    for (const auto& rr : plan.ranks) writers.insert(rr.p_rank);
    if (!writers.empty()) {
      Status st = Status::Ok;
      std::string message;
      {
        std::unique_lock<std::mutex> g(mu_);
        Waiting& w = waiting_[rq.id];
        w.writers = writers;
        for (uint32_t r : writers) {
          if (lost_p_.count(r) != 0 && w.state == 0) {
            w.state = 2;
            w.status = Status::PeerLost;
            w.message = "P rank " + std::to_string(r) + " was lost before it wrote";
          }
        }
      }
      try {
        agent_->lease(rq.id, static_cast<uint32_t>(writers.size()), deadline_);
      } catch (const core::Error& e) {
        std::lock_guard<std::mutex> g(mu_);
        waiting_.erase(rq.id);
        return fail("lease", e.status(), e.what());
      }
      {
        std::unique_lock<std::mutex> g(mu_);
        // The lease expires at the deadline; the margin only covers its notification's delivery.
        const bool ended = cv_.wait_for(g, deadline_ + 2s, [&] { return waiting_[rq.id].state != 0; });
        Waiting w = waiting_[rq.id];
        waiting_.erase(rq.id);
        if (!ended) {
          st = Status::TimedOut;
          message = "no REQUEST_COMPLETE nor LEASE_EXPIRED within the deadline";
        } else if (w.state == 2) {
          st = w.status;
          message = w.message;
        }
      }
      if (st != Status::Ok) return fail("transfer", st, message);
    }
    transfer_us = micros(Clock::now() - t0);
  }
  inject_fault(plan);
  const auto v0 = Clock::now();
  const Check c = verify(plan, rq.d_kernel_blocks);
  done["verify_us"] = micros(Clock::now() - v0);
  done["transfer_us"] = transfer_us;
  done["checked_bytes"] = c.bytes;
  done["mismatches"] = c.mismatches;
  if (c.mismatches != 0) {
    done["mismatch"] = c.first;
    return fail("verify", Status::Coverage, "wrong bytes: " + c.first);
  }
  // Put back D's own bytes where the reads landed, so the blocks can serve the next request and
  // the final scan finds the whole memory untouched.
  for (const auto& rr : plan.ranks) {
    core::for_each_read(rr, [&](const core::PlanRead& r) {
      fill(region(r.local_region) + r.local_offset, own(r.local_region), r.local_offset, r.length);
    });
  }
  done["ok"] = true;
  done["status"] = core::status_name(Status::Ok);
  out(done);
}

// The demo's own tests prove that its checks can fail: PDKV_DEMO_FAULT=flip-byte makes D rank 0
// flip one received byte of the first request that moved any, =stray-write one byte of the null
// block (never part of a request: only the final scan can see it).
void Rank::inject_fault(const core::TransferPlan& plan) {
  static const char* fault = std::getenv("PDKV_DEMO_FAULT");
  if (fault == nullptr || rank_ != 0 || plan.ranks.empty() || fault_done_.exchange(true)) return;
  if (std::strcmp(fault, "flip-byte") == 0) {
    // The read issued first (a factored rank may list none: its reads are all indexed).
    core::PlanRead r{};
    bool found = false;
    core::for_each_read(plan.ranks.front(), [&](const core::PlanRead& x) {
      if (!found) r = x;
      found = true;
    });
    if (found) region(r.local_region)[r.local_offset + r.length / 2] ^= 0x01;
  } else if (std::strcmp(fault, "stray-write") == 0) {
    region(0)[md_.regions[0].region.block_len / 2] ^= 0x01;
  }
}

Check Rank::verify(const core::TransferPlan& plan, const std::vector<uint64_t>& kblocks) const {
  struct Read {
    uint32_t region;
    uint64_t offset, length;
    uint32_t p_rank, p_region;
    uint64_t p_offset;
  };
  std::vector<Read> reads;
  for (const auto& rr : plan.ranks) {
    core::for_each_read(rr, [&](const core::PlanRead& r) {
      reads.push_back({r.local_region, r.local_offset, r.length, rr.p_rank, r.remote_region, r.remote_offset});
    });
  }
  std::sort(reads.begin(), reads.end(),
            [](const Read& a, const Read& b) { return a.region != b.region ? a.region < b.region : a.offset < b.offset; });
  // The request's blocks as byte intervals of a region (consecutive blocks merged).
  const uint64_t len = md_.regions.at(0).region.block_len;
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (uint64_t b : kblocks) {
    if (!spans.empty() && spans.back().second == b * len) {
      spans.back().second += len;
    } else {
      spans.emplace_back(b * len, (b + 1) * len);
    }
  }
  Check c;
  auto wrong = [&](const std::string& what) {
    if (c.mismatches++ == 0) c.first = what;
  };
  auto own_ok = [&](uint32_t g, uint64_t from, uint64_t n) {
    c.bytes += n;
    if (auto at = first_mismatch(region(g) + from, own(g), from, n)) {
      wrong("D region " + std::to_string(g) + " offset " + std::to_string(from + *at) +
            " changed although no read of the plan writes it");
    }
  };
  size_t i = 0;
  for (uint32_t g = 0; g < md_.regions.size(); ++g) {
    for (const auto& [lo, hi] : spans) {
      while (i < reads.size() && reads[i].region == g && reads[i].offset < lo) {
        wrong("a read lands at D region " + std::to_string(g) + " offset " + std::to_string(reads[i].offset) +
              ", outside the request's blocks");
        ++i;
      }
      uint64_t cur = lo;
      for (; i < reads.size() && reads[i].region == g && reads[i].offset < hi; ++i) {
        const Read& r = reads[i];
        if (r.offset < cur || r.offset + r.length > hi) {
          wrong("a read at D region " + std::to_string(g) + " offset " + std::to_string(r.offset) +
                " overlaps another or leaves the request's blocks");
          continue;
        }
        own_ok(g, cur, r.offset - cur);
        c.bytes += r.length;
        if (auto at = first_mismatch(region(g) + r.offset, Stream::of(0, r.p_rank, r.p_region), r.p_offset, r.length)) {
          wrong("D region " + std::to_string(g) + " offset " + std::to_string(r.offset + *at) +
                " should hold P rank " + std::to_string(r.p_rank) + " region " + std::to_string(r.p_region) +
                " offset " + std::to_string(r.p_offset + *at));
        }
        cur = r.offset + r.length;
      }
      own_ok(g, cur, hi - cur);
    }
    for (; i < reads.size() && reads[i].region == g; ++i) {
      wrong("a read lands at D region " + std::to_string(g) + " offset " + std::to_string(reads[i].offset) +
            ", outside the request's blocks");
    }
  }
  return c;
}

void Rank::restore_blocks(const std::vector<uint64_t>& kblocks) {
  const uint64_t len = md_.regions.at(0).region.block_len;
  for (uint32_t g = 0; g < md_.regions.size(); ++g) {
    for (uint64_t b : kblocks) fill(region(g) + b * len, own(g), b * len, len);
  }
}

void Rank::on_release(const std::string& id) {
  std::vector<uint64_t> blocks;
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = failed_blocks_.find(id);
    if (it != failed_blocks_.end()) {
      blocks = std::move(it->second);
      failed_blocks_.erase(it);
    }
  }
  // Every writer is done with them now: a failed request's blocks get D's own bytes back.
  restore_blocks(blocks);
  out({{"type", "released"}, {"id", id}});
}

// ---- P: hold blocks until the D ranks say they are done (READ) or push them (WRITE) -------

void Rank::freed(const std::string& id, const std::string& how, Status status) {
  out({{"type", "freed"}, {"id", id}, {"how", how}, {"status", core::status_name(status)}});
}

void Rank::p_lease(const std::string& id) {
  std::optional<std::pair<std::string, Status>> early;
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = early_.find(id);
    if (it != early_.end()) {
      early = it->second;
      early_.erase(it);
      closed_.insert(id);
    } else {
      held_.insert(id);
    }
  }
  if (early) return freed(id, early->first, early->second);
  // Each P rank hears from every D rank that handshakes with it; twice the deadline is long
  // after any of them could still read.
  agent_->lease(id, core::notifications_expected_per_request(layout_.prefill.tp, layout_.decode.tp), 2 * deadline_);
}

void Rank::p_write(const RankRequest& rq) {
  std::vector<exec::TransferHandle> mine;
  Status worst = Status::Ok;
  std::vector<core::TransferPlan> plans(d_ctx_.size());
  for (size_t d = 0; d < d_ctx_.size(); ++d) {
    try {
      plans[d] = compile(d_ctx_[d], d_verdict_[d], rq.groups);
    } catch (const core::Error& e) {
      if (worst == Status::Ok) worst = e.status();
      continue;
    }
    const auto& ranks = plans[d].ranks;
    if (std::none_of(ranks.begin(), ranks.end(), [&](const core::RankReads& r) { return r.p_rank == rank_; })) continue;
    exec::PostParams pp;
    pp.op = exec::TransferOp::Write;
    pp.plan = &plans[d];
    pp.peer_engine_id = kDecodeEngine;
    pp.request_id = rq.id;
    pp.timeout = deadline_;
    try {
      mine.push_back(agent_->post(pp));
    } catch (const core::Error& e) {
      if (worst == Status::Ok) worst = e.status();
    }
  }
  for (auto& h : mine) {
    h.wait(std::chrono::milliseconds::max());
    const auto st = h.status();
    if (st.state != exec::TransferState::Done && worst == Status::Ok) worst = st.status;
  }
  freed(rq.id, worst == Status::Ok ? "written" : "write failed", worst);
}

void Rank::on_abort(const std::string& id) {
  // Only a P rank serving READs is told to abort: a D rank that reads from it failed, so the
  // lease may never complete. (Under WRITE the coordinator lets every push run to its flush.)
  if (!prefill_ || write_) return;
  bool was_held;
  {
    std::lock_guard<std::mutex> g(mu_);
    was_held = held_.erase(id) != 0;
    if (was_held) closed_.insert(id);
  }
  if (was_held) freed(id, "aborted", Status::Cancelled);
}

void Rank::notes_main() {
  int fd = -1;
  try {
    fd = agent_->event_fd();
  } catch (const core::Error&) {
    return;
  }
  while (!stop_notes_) {
    pollfd p{fd, POLLIN, 0};
    (void)::poll(&p, 1, 50);
    for (const auto& n : agent_->poll_notifications()) {
      using K = exec::NotificationKind;
      if (n.kind == K::PeerLost && !prefill_) {
        // D losing a P rank is news (a kill, a crash); P losing D happens at every normal end.
        std::fprintf(stderr, "lost peer '%s' rank %u: %s\n", n.engine_id.c_str(), n.tp_rank, core::status_name(n.status));
      }
      if (prefill_ && !write_) {
        std::string how;
        Status st = n.status;
        if (n.kind == K::RequestComplete) how = "complete";
        if (n.kind == K::LeaseExpired) how = "expired";
        if (n.kind == K::ReadDone && n.status != Status::Ok) how = "read failed";
        if (how.empty()) continue;
        bool report = false;
        {
          std::lock_guard<std::mutex> g(mu_);
          if (held_.erase(n.request_id) != 0) {
            closed_.insert(n.request_id);
            report = true;
          } else if (closed_.count(n.request_id) == 0 && n.kind == K::ReadDone) {
            early_[n.request_id] = {how, st};  // the request message is still on its way
          }
        }
        if (report) freed(n.request_id, how, st);
      } else if (!prefill_ && write_) {
        std::lock_guard<std::mutex> g(mu_);
        auto settle = [&](Waiting& w, Status st, const std::string& m) {
          if (w.state != 0) return;
          w.state = st == Status::Ok ? 1 : 2;
          w.status = st;
          w.message = m;
        };
        if (n.kind == K::RequestComplete) {
          auto it = waiting_.find(n.request_id);
          if (it != waiting_.end()) settle(it->second, Status::Ok, "");
        } else if (n.kind == K::LeaseExpired) {
          auto it = waiting_.find(n.request_id);
          if (it != waiting_.end()) settle(it->second, Status::TimedOut, "the lease expired before every P rank wrote");
        } else if (n.kind == K::WriteDone && n.status != Status::Ok) {
          // waiting_[] also covers a failure that arrives before the worker registered.
          settle(waiting_[n.request_id], n.status,
                 "P rank " + std::to_string(n.tp_rank) + " failed to write: " + core::status_name(n.status));
        } else if (n.kind == K::PeerLost && n.engine_id == kPrefillEngine) {
          lost_p_.insert(n.tp_rank);
          for (auto& [id, w] : waiting_) {
            if (w.writers.count(n.tp_rank) != 0) {
              settle(w, Status::PeerLost, "P rank " + std::to_string(n.tp_rank) + " was lost before it wrote");
            }
          }
        }
        cv_.notify_all();
      }
    }
  }
}

// ---- the end: every request is over; check the whole memory and report -----------------

void Rank::finish() {
  {
    std::unique_lock<std::mutex> g(mu_);
    cv_.wait(g, [&] { return queue_.empty() && busy_ == 0; });
    closing_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
  stop_notes_ = true;
  if (notes_.joinable()) notes_.join();
  // Nothing may have changed this rank's memory for good: P's is only ever read (or pushed
  // from), D put its own bytes back after each request.
  const auto t0 = Clock::now();
  uint64_t mismatches = 0;
  std::string first;
  for (uint32_t g = 0; g < md_.regions.size(); ++g) {
    if (auto at = first_mismatch(region(g), own(g), 0, region_bytes())) {
      if (mismatches++ == 0) {
        first = "region " + std::to_string(g) + " offset " + std::to_string(*at) + " (block " +
                std::to_string(*at / md_.regions[g].region.block_len) + ") changed";
      }
    }
  }
  out({{"type", "final"},
       {"scanned_bytes", region_bytes() * md_.regions.size()},
       {"scan_us", micros(Clock::now() - t0)},
       {"mismatched_regions", mismatches},
       {"mismatch", first}});
  agent_.reset();
}

}  // namespace

int run_rank_process() {
  ::signal(SIGPIPE, SIG_IGN);
  // Die with the coordinator, whatever kills it (its pid is checked once known: it may be gone
  // already).
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  LineReader in(kRankInFd);
  std::optional<json> init;
  try {
    init = in.next();
    if (!init || init->at("type") != "init") return 3;
    if (static_cast<int64_t>(::getppid()) != init->at("parent_pid").get<int64_t>()) return 3;
    Rank r(*init);
    r.run(in);
    return 0;
  } catch (const CliError& e) {
    send(kRankOutFd, {{"type", "error"}, {"kind", kind_name(e.kind)}, {"where", e.where}, {"message", e.what()},
                      {"status", e.status ? json(*e.status) : json(nullptr)}});
  } catch (const core::Error& e) {
    send(kRankOutFd, {{"type", "error"}, {"kind", "internal"}, {"where", "rank"}, {"message", e.what()},
                      {"status", core::status_name(e.status())}});
  } catch (const std::exception& e) {
    send(kRankOutFd,
         {{"type", "error"}, {"kind", "internal"}, {"where", "rank"}, {"message", e.what()}, {"status", nullptr}});
  }
  return 3;
}

}  // namespace pdkv::cli::demo
