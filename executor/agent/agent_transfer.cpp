// Transfers: a plan becomes a list of operations, every range checked before any byte moves; one
// lane per peer. A tcp lane's operations go over the peer's data connection in batches, a bounded
// window of them unanswered (agent_tcp.cpp); a shm lane's operations are copied with cross-memory
// attach in bounded batches by whoever drives progress (run_cma_batches). Completions count bytes
// per lane, notify a peer once its data is complete, and decide the final state. Deadlines and
// cancels stop starting batches; a deadline with a tcp batch still holding the transfer drops
// that peer's data connection (which returns every batch at once), so no operation outlives its
// transfer's deadline touching memory the caller believes idle (a cma batch always returns
// within its bound).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "agent/agent_core.hpp"
#include "pdkv/core/checked_math.hpp"

namespace pdkv::exec {

using core::Status;

namespace {

std::vector<RegisteredRange> local_ranges(const std::vector<std::shared_ptr<Registration>>& regs) {
  std::vector<RegisteredRange> out(regs.size());
  for (size_t i = 0; i < regs.size(); ++i) {
    if (regs[i] && regs[i]->usable()) {
      out[i] = RegisteredRange{regs[i]->base, regs[i]->length, true, regs[i]->type == MemoryType::Cuda};
    }
  }
  return out;
}

}  // namespace

std::shared_ptr<TransferJob> AgentCore::post(const PostParams& params) {
  if (params.plan == nullptr) core::fail(Status::NullPointer, "plan is NULL");
  const core::TransferPlan& plan = *params.plan;
  check_request_id(params.request_id, Status::InvalidArgument, "request_id");
  if (params.peer_engine_id.empty()) core::fail(Status::InvalidArgument, "peer_engine_id is empty");
  const auto timeout = params.timeout.value_or(opt_.default_timeout);
  if (timeout.count() <= 0) core::fail(Status::InvalidArgument, "timeout_ms must be > 0");
  const auto& me = opt_.metadata;

  std::lock_guard<std::mutex> g(mu_);
  if (stopped_) core::fail(Status::Shutdown, "the agent was shut down");
  auto job = std::make_shared<TransferJob>();
  job->core = this;
  job->seq = ++next_job_seq_;
  job->op = params.op;
  job->request_id = params.request_id;
  job->notify = params.notify;
  job->confirm_lease = params.confirm_lease;
  job->timeout = timeout;
  const auto mine = local_ranges(regs_);

  // The peer's ranks are those of the pipeline stage the plan names for the peer's side.
  const uint32_t peer_stage = params.op == TransferOp::Read ? plan.p_pp_rank : plan.d_pp_rank;
  auto peer_for = [&](uint32_t rank, const char* role) -> std::shared_ptr<PeerConn> {
    auto it = peers_.find({params.peer_engine_id, peer_stage, rank});
    if (it == peers_.end()) {
      core::fail(Status::NotFound, std::string(role) + " rank " + std::to_string(rank) + " of stage " +
                                       std::to_string(peer_stage) + " of engine '" + params.peer_engine_id +
                                       "' is not connected");
    }
    if (!it->second->record->connected) {
      core::fail(Status::PeerLost, std::string(role) + " rank " + std::to_string(rank) + " of engine '" +
                                       params.peer_engine_id + "' was lost: " +
                                       core::status_name(static_cast<Status>(it->second->record->lost_status.load())));
    }
    return it->second;
  };

  // Builds the operations of one lane, checking both sides of every read first.
  struct LaneOps {
    uint32_t p_rank;
    std::shared_ptr<PeerConn> peer;
    const core::RankReads* reads;  // listed, or factored (region repeats): walked in issue order
  };
  std::vector<LaneOps> lanes;

  // The plan names its two engines: the posting agent and the peer must play the roles the plan
  // was compiled for (a READ on D from P, a WRITE on P into D), never the mirror image.
  const bool reading = params.op == TransferOp::Read;
  const std::string& want_self = reading ? plan.d_engine_id : plan.p_engine_id;
  const std::string& want_peer = reading ? plan.p_engine_id : plan.d_engine_id;
  if (want_self != me.engine_id || want_peer != params.peer_engine_id) {
    core::fail(Status::InvalidArgument,
               std::string("the plan reads from engine '") + plan.p_engine_id + "' into engine '" +
                   plan.d_engine_id + "'; a " + (reading ? "READ" : "WRITE") + " of it must be posted on '" +
                   want_self + "' naming peer '" + want_peer + "', not on '" + me.engine_id +
                   "' naming '" + params.peer_engine_id + "'");
  }
  // Pipeline stages: the plan moves the layers of one (D stage, P stage) pair. The agent is one
  // stage; peers are found by (engine, stage, TP rank), so several stages of a peer engine can be
  // connected at once and each plan uses the stage it names. A plan for another stage than this
  // agent's, or a stage count the peer does not run, would move another stage's layers into
  // regions that merely have the same sizes. Refused, naming both stages.
  auto check_stage = [&](const core::EngineMetadata& m, uint32_t pp_size, uint32_t pp_rank, const std::string& who) {
    if (m.pp_size != pp_size || m.pp_rank != pp_rank) {
      core::fail(Status::InvalidArgument,
                 "the plan moves layers of pipeline stage " + std::to_string(pp_rank) + " of " +
                     std::to_string(pp_size) + " but " + who + " is stage " + std::to_string(m.pp_rank) + " of " +
                     std::to_string(m.pp_size));
    }
  };
  if (reading) {
    check_stage(me, plan.d_pp_size, plan.d_pp_rank, "this agent");
  } else {
    check_stage(me, plan.p_pp_size, plan.p_pp_rank, "this agent");
  }
  if (params.op == TransferOp::Read) {
    if (plan.d_rank != me.tp_rank || plan.d_tp != me.tp_size) {
      core::fail(Status::InvalidArgument,
                 "the plan is for D rank " + std::to_string(plan.d_rank) + " of TP " +
                     std::to_string(plan.d_tp) + " but this agent is rank " + std::to_string(me.tp_rank) +
                     " of TP " + std::to_string(me.tp_size));
    }
    for (const auto& rr : plan.ranks) {
      auto peer = peer_for(rr.p_rank, "P");
      if (peer->record->metadata.tp_size != plan.p_tp) {
        core::fail(Status::InvalidArgument, "the plan is for P TP " + std::to_string(plan.p_tp) + " but engine '" +
                                                params.peer_engine_id + "' runs TP " +
                                                std::to_string(peer->record->metadata.tp_size));
      }
      check_stage(peer->record->metadata, plan.p_pp_size, plan.p_pp_rank,
                  "peer '" + params.peer_engine_id + "' rank " + std::to_string(rr.p_rank));
      lanes.push_back({rr.p_rank, peer, &rr});
    }
    if (params.notify) {
      for (uint32_t r : plan.notify_ranks) {
        const bool reads = std::any_of(plan.ranks.begin(), plan.ranks.end(),
                                       [&](const core::RankReads& x) { return x.p_rank == r; });
        if (!reads) {
          job->notify_only.push_back(peer_for(r, "P"));
          job->notify_only_done.push_back(false);
        }
      }
    }
  } else {
    if (plan.p_tp != me.tp_size) {
      core::fail(Status::InvalidArgument, "the plan is for P TP " + std::to_string(plan.p_tp) +
                                              " but this agent runs TP " + std::to_string(me.tp_size));
    }
    auto peer = peer_for(plan.d_rank, "D");
    check_stage(peer->record->metadata, plan.d_pp_size, plan.d_pp_rank,
                "peer '" + params.peer_engine_id + "' rank " + std::to_string(plan.d_rank));
    if (peer->record->metadata.tp_size != plan.d_tp) {
      core::fail(Status::InvalidArgument, "the plan is for D TP " + std::to_string(plan.d_tp) + " but engine '" +
                                              params.peer_engine_id + "' runs TP " +
                                              std::to_string(peer->record->metadata.tp_size));
    }
    static const core::RankReads kNone;
    const core::RankReads* reads = &kNone;
    for (const auto& rr : plan.ranks) {
      if (rr.p_rank == me.tp_rank) reads = &rr;
    }
    lanes.push_back({me.tp_rank, peer, reads});
  }

  // Check every range of every read before anything is posted.
  std::vector<std::vector<TransferJob::Op>> per_lane(lanes.size());
  std::vector<bool> uses_region(regs_.size(), false);
  for (size_t l = 0; l < lanes.size(); ++l) {
    const auto& L = lanes[l];
    per_lane[l].reserve(core::read_count(*L.reads));  // checks a factored plan's repeats first
    size_t i = 0;  // the read's index in issue order (pdkv_failed_read_t.read_index)
    core::for_each_read(*L.reads, [&](const core::PlanRead& r) {
      const ReadRef ref{L.p_rank, i};
      TransferJob::Op op;
      op.lane = static_cast<uint32_t>(l);
      op.read_index = i;
      op.length = r.length;
      if (params.op == TransferOp::Read) {
        op.local = reinterpret_cast<void*>(static_cast<uintptr_t>(
            checked_address(ref, "local", r.local_region, mine, r.local_offset, r.length)));
        op.remote = checked_address(ref, "remote", r.remote_region, L.peer->remote_ranges,
                                    r.remote_offset, r.length);
        op.remote_region = r.remote_region;
        uses_region[r.local_region] = true;
      } else {
        op.local = reinterpret_cast<void*>(static_cast<uintptr_t>(
            checked_address(ref, "local (P)", r.remote_region, mine, r.remote_offset, r.length)));
        op.remote = checked_address(ref, "remote (D)", r.local_region, L.peer->remote_ranges,
                                    r.local_offset, r.length);
        op.remote_region = r.local_region;
        uses_region[r.remote_region] = true;
      }
      // Device memory moves over the tcp data connection only (staged through host memory):
      // a same-host shm peer admitted before this agent registered a CUDA region cannot carry it.
      const uint32_t here = params.op == TransferOp::Read ? r.local_region : r.remote_region;
      const bool here_device = mine[here].device;
      if (here_device) op.local_device = regs_[here].get();  // checked_address found it registered
      if (!L.peer->tcp) {
        const uint32_t there = op.remote_region;
        if (here_device || L.peer->remote_ranges[there].device) {
          core::fail(Status::InvalidArgument,
                     "read " + std::to_string(i) + " of P rank " + std::to_string(L.p_rank) + ": " +
                         (here_device ? "this agent's region " + std::to_string(here)
                                      : "the peer's region " + std::to_string(there)) +
                         " is CUDA device memory, but engine '" + L.peer->record->engine_id + "' rank " +
                         std::to_string(L.peer->record->tp_rank) +
                         " is connected over shm (cross-memory attach reaches host memory only): register device "
                         "memory before connecting, so the agents choose tcp, or use transport tcp");
        }
      }
      per_lane[l].push_back(op);
      ++i;
    });
  }

  // D's receive side of a plan whose blocks arrive in P's KV layout: every listed block of every
  // listed region is permuted into this rank's layout once all reads are done. Each block is
  // range-checked like a read (and keeps its registration busy). A WRITE's D rank (the peer)
  // permutes them itself after its WriteDone notifications.
  if (reading && plan.permute.active()) {
    job->permute = plan.permute;
    const uint64_t len = plan.permute.block_bytes();
    for (const core::GroupZero& z : plan.zero) {
      for (uint32_t region : z.permute_regions) {
        if (region >= me.regions.size() || me.regions[region].region.block_len != len) {
          core::fail(Status::InvalidArgument,
                     "the plan permutes blocks of " + std::to_string(len) + " bytes in region " + std::to_string(region) +
                         " but this agent's region " + std::to_string(region) +
                         (region < me.regions.size() ? " has blocks of " + std::to_string(me.regions[region].region.block_len) + " bytes"
                                                     : " does not exist"));
        }
        if (region < mine.size() && mine[region].device) {
          core::fail(Status::InvalidArgument,
                     "the plan permutes received blocks of region " + std::to_string(region) +
                         ", which is CUDA device memory: the executor permutes on the CPU, in host memory; "
                         "apply the plan's permutation on the device after the READ (pdkv_permute_kv_block's "
                         "shapes), or receive into host memory");
        }
        for (uint64_t b : z.permute_blocks) {
          const uint64_t offset = core::mul_checked(b, len, "permuted block offset");
          job->permute_blocks.push_back(reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(
              checked_address(ReadRef{0, b}, "local (permuted block)", region, mine, offset, len))));
        }
        uses_region[region] = true;
      }
    }
  }

  // Interleave the lanes so the window keeps every peer busy.
  size_t total = 0;
  for (auto& v : per_lane) total += v.size();
  job->ops.reserve(total);
  for (size_t i = 0; job->ops.size() < total; ++i) {
    for (auto& v : per_lane) {
      if (i < v.size()) job->ops.push_back(v[i]);
    }
  }
  for (size_t l = 0; l < lanes.size(); ++l) {
    TransferJob::Lane lane;
    lane.peer = lanes[l].peer;
    lane.p_rank = lanes[l].p_rank;
    lane.remaining = per_lane[l].size();
    lane.cma = lanes[l].peer->cma != nullptr;
    lane.tcp = lanes[l].peer->tcp != nullptr;
    job->lanes.push_back(std::move(lane));
  }
  for (size_t i = 0; i < job->ops.size(); ++i) {
    TransferJob::Lane& lane = job->lanes[job->ops[i].lane];
    if (lane.cma) lane.cma_ops.push_back(static_cast<uint32_t>(i));
    if (lane.tcp) lane.tcp_ops.push_back(static_cast<uint32_t>(i));
  }
  // Caller mode: the first batches wait for a progress call, which only the event fd can ask for.
  for (const auto& lane : job->lanes) {
    if ((lane.cma && !lane.cma_ops.empty()) || (lane.tcp && !lane.tcp_ops.empty())) {
      signal_work();
      break;
    }
  }
  uint64_t bytes = 0;
  for (auto& op : job->ops) {
    op.job = job.get();
    bytes += op.length;
    job->lanes[op.lane].bytes += op.length;
  }
  for (auto& lane : job->lanes) lane.job = job.get();
  for (size_t r = 0; r < uses_region.size(); ++r) {
    if (uses_region[r]) {
      regs_[r]->busy++;
      job->local_regs.push_back(regs_[r]);
    }
  }
  const auto now = Clock::now();
  job->deadline = deadline_after(now, timeout);
  {
    std::lock_guard<std::mutex> jg(job->m);
    job->visible.posted = now;
    job->visible.bytes_total = bytes;
    job->visible.ops_total = total;
  }
  active_.push_back(job);
  wake_control_at_locked(job->deadline);  // the control thread enforces it even if nobody progresses
  ask_leases_locked(job);
  // Lanes with nothing to move (a full prefix hit, a P rank without reads) are complete now.
  for (auto& lane : job->lanes) {
    if (lane.remaining == 0) lane_data_complete_locked(*job, lane);
  }
  check_final_locked(*job);
  wake_progress();
  return job;
}

void AgentCore::op_succeeded_locked(TransferJob::Op& op) {
  TransferJob& job = *op.job;
  TransferJob::Lane& lane = job.lanes[op.lane];
  {
    op.state = TransferJob::Op::State::Done;
    job.done_ops++;
    job.done_bytes += op.length;
    if (job.op == TransferOp::Read) {
      lane.peer->record->bytes_read += op.length;
    } else {
      lane.peer->record->bytes_written += op.length;
    }
    {
      std::lock_guard<std::mutex> jg(job.m);
      job.visible.ops_done = job.done_ops;
      job.visible.bytes_done = job.done_bytes;
    }
    if (lane.remaining > 0 && --lane.remaining == 0) lane_data_complete_locked(job, lane);
  }
}

void AgentCore::op_failed_locked(TransferJob::Op& op, Status status, const std::string& message) {
  TransferJob& job = *op.job;
  TransferJob::Lane& lane = job.lanes[op.lane];
  op.state = TransferJob::Op::State::Failed;
  lane.peer->record->operations_failed++;
  if (status == Status::PeerLost && !lane.peer->lost) {
    // The peer is closed and dropped after this progress round (closing an endpoint from inside
    // its own completion is not safe); its record says so from now on, so the failed transfer
    // and the peer's state agree.
    lane.peer->record->connected = false;
    lane.peer->record->lost_status = static_cast<int32_t>(Status::PeerLost);
  }
  fail_job_locked(job, status, message);
}

void AgentCore::lane_data_complete_locked(TransferJob& job, TransferJob::Lane& lane) {
  lane.data_complete = true;
  if (job.op == TransferOp::Read) {
    // The bytes count only once the P rank said its lease of the request was open when asked
    // (handle_lease_answer_locked calls this again then): blocks whose lease had ended were
    // given back and may hold another request's bytes.
    if (lane.lease_pending) return;
    // GETs completed: the bytes are in this process's memory. Now the P rank may free them.
    lane.complete = true;
    if (job.notify && !job.stopping()) {
      send_notify_locked(lane.peer, NotifyKind::ReadDone, job.request_id, lane.bytes, Status::Ok);
      lane.notified = true;
    }
    return;
  }
  // process_vm_writev returned / D acknowledged every batch (tcp): every byte is in D's memory.
  lane.complete = true;
  if (job.notify && !job.stopping()) {
    send_notify_locked(lane.peer, NotifyKind::WriteDone, job.request_id, lane.bytes, Status::Ok);
    lane.notified = true;
  }
}

void AgentCore::fail_job_locked(TransferJob& job, Status status, const std::string& message) {
  if (job.finalized || job.stopping()) return;  // the first failure is the one reported
  job.fail_status = status;
  job.fail_message = message;
  job.stopped_at = Clock::now();
  // A peer lost under a cma batch being copied: the transfer is reported failed after the grace at
  // the latest (check_deadlines_locked), a timer of the control thread.
  if (status == Status::PeerLost && job.inflight != 0) wake_control_at_locked(job.stopped_at + kCancelGrace);
}

void AgentCore::cancel(const std::shared_ptr<TransferJob>& job) {
  std::lock_guard<std::mutex> g(mu_);
  if (stopped_ || job->finalized) return;
  fail_job_locked(*job, Status::Cancelled, "transfer '" + job->request_id + "' was cancelled");
  check_final_locked(*job);
  wake_progress();
}

void AgentCore::check_final_locked(TransferJob& job) {
  if (job.finalized) {
    if (!job.released && job.inflight == 0) release_registrations_locked(job);
    return;
  }
  if (job.inflight != 0) return;
  bool all_complete = true;
  for (const auto& lane : job.lanes) all_complete &= lane.complete;
  if (!all_complete && !job.stopping()) return;
  finalize_locked(job);
  release_registrations_locked(job);
}

void AgentCore::finalize_locked(TransferJob& job) {
  job.finalized = true;
  for (auto& lane : job.lanes) {
    if (lane.lease_pending) lease_queries_.erase(lane.lease_query);  // an answer now finds no READ
  }
  if (!job.stopping() && !job.permute_blocks.empty()) {
    // Every byte is here: bring the blocks from P's layout into this rank's (checked at post).
    const uint64_t len = job.permute.block_bytes();
    for (uint8_t* b : job.permute_blocks) core::permute_kv_block(std::span<uint8_t>(b, len), job.permute);
  }
  const bool ok = !job.stopping();
  if (ok) {
    // Notify-only ranks (READ): every byte of the request is here now.
    if (job.notify) {
      for (size_t i = 0; i < job.notify_only.size(); ++i) {
        send_notify_locked(job.notify_only[i], NotifyKind::ReadDone, job.request_id, 0, Status::Ok);
      }
    }
    for (auto& lane : job.lanes) lane.peer->record->transfers_done++;
  } else {
    // Tell every peer still waiting that this request will not come, so it can free its blocks.
    if (job.notify) {
      const NotifyKind kind = job.op == TransferOp::Read ? NotifyKind::ReadDone : NotifyKind::WriteDone;
      for (auto& lane : job.lanes) {
        if (!lane.notified) send_notify_locked(lane.peer, kind, job.request_id, 0, job.fail_status);
      }
      for (auto& p : job.notify_only) send_notify_locked(p, kind, job.request_id, 0, job.fail_status);
    }
    for (auto& lane : job.lanes) lane.peer->record->transfers_failed++;
  }
  std::vector<FailedRead> failed;
  if (!ok) {
    // A read is listed unless it landed: a cma copy is remotely complete when it returns, a tcp
    // WRITE's operation is done only once D acknowledged its bytes (and see below for a READ).
    for (const auto& op : job.ops) {
      // A read counts as landed only where its P rank confirmed its lease was open: one whose
      // lease had ended landed bytes that may be another request's, and one whose answer never
      // came (the transfer failed first) is not known to be the request's.
      const TransferJob::Lane& lane = job.lanes[op.lane];
      if (op.state == TransferJob::Op::State::Done && !lane.lease_ended && !lane.lease_pending) continue;
      failed.push_back({job.lanes[op.lane].p_rank, op.read_index, job.fail_status});
    }
    std::sort(failed.begin(), failed.end(), [](const FailedRead& a, const FailedRead& b) {
      return a.p_rank != b.p_rank ? a.p_rank < b.p_rank : a.read_index < b.read_index;
    });
  }
  {
    std::lock_guard<std::mutex> jg(job.m);
    job.visible.state = ok ? TransferState::Done : TransferState::Failed;
    job.visible.status = ok ? Status::Ok : job.fail_status;
    job.visible.message = ok ? std::string() : job.fail_message + " (" + std::to_string(failed.size()) +
                                                   " of " + std::to_string(job.ops.size()) +
                                                   " reads incomplete)";
    job.visible.failed = std::move(failed);
    job.visible.finished = Clock::now();
    if (job.done_fd >= 0) {
      const uint64_t one = 1;
      [[maybe_unused]] const ssize_t r = ::write(job.done_fd, &one, sizeof one);  // wakes caller-mode waits
    }
  }
  job.cv.notify_all();
}

void AgentCore::check_deadlines_locked(Clock::time_point now) {
  for (size_t i = 0; i < active_.size(); ++i) {
    auto job = active_[i];
    if (job->finalized) continue;
    if (job->fail_status == Status::PeerLost && job->inflight != 0 && now - job->stopped_at >= kCancelGrace) {
      finalize_locked(*job);
      zombies_.push_back(job);
      continue;
    }
    if (now < job->deadline) continue;
    fail_job_locked(*job, Status::TimedOut,
                    "transfer '" + job->request_id + "' missed its " + std::to_string(job->timeout.count()) +
                        " ms deadline with " + std::to_string(job->done_ops) + " of " +
                        std::to_string(job->ops.size()) + " operations done");
    if (job->inflight != 0) {
      // A tcp batch of this job still being received or sent: drop that peer's data connection
      // (the peer did not serve within the deadline), which returns every batch at once. A cma
      // batch being copied returns within its bound by itself.
      std::vector<std::shared_ptr<PeerConn>> stuck;
      for (auto& lane : job->lanes) {
        if (lane.peer->tcp && lane.peer->inflight != 0 && !lane.peer->lost) stuck.push_back(lane.peer);
      }
      for (auto& p : stuck) {
        lose_peer_locked(p, Status::PeerLost, "data still in flight at a transfer's deadline", true);
      }
    }
    if (!job->finalized) finalize_locked(*job);
    if (job->inflight == 0) {
      release_registrations_locked(*job);
    } else {
      // A cma batch is being copied: keep the job (and its registrations busy) until it returns.
      zombies_.push_back(job);
    }
  }
}

// ---- cross-memory attach (shm peers) ----

struct AgentCore::CmaBatch {
  std::shared_ptr<TransferJob> job;
  uint32_t lane = 0;
  std::shared_ptr<PeerConn> peer;
  cma::Direction direction = cma::Direction::Read;
  std::vector<uint32_t> ops;         // per segment: the operation's index in job->ops
  std::vector<cma::Segment> segments;
  cma::CopyResult result;
  // Every segment's remote side lies in a mapping of the peer's memory (`remote` is then the
  // address in that mapping, and the copy is memcpy); the batch holds the mappings it uses.
  bool mapped = false;
  std::vector<std::shared_ptr<const cma::PeerMapping>> maps;
  bool exited = false;               // the peer process had exited when the copy returned
  std::string gone;                  // why the peer's agent is gone (its probe did not read back)
  bool gone_before = false;          // ... already before the copy (nothing was copied)
};

namespace {

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

unsigned AgentCore::run_cma_batches(std::unique_lock<std::mutex>& g) {
  if (stopped_ || stopping_.load()) return 0;
  std::vector<CmaBatch> batches;
  // Claim: one batch per lane of every transfer, within each peer's room (max_outstanding pieces
  // in flight across its transfers). The transfers of a peer take the room in turns: those posted
  // after the one that last claimed a batch on it go first (the first pass), then the others.
  // Nothing is marked until every batch is built, so an allocation failure leaves no state behind.
  for (auto& [key, p] : peers_) p->rr_mark = p->rr_last;
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto& job_ptr : active_) {
      TransferJob& job = *job_ptr;
      if (job.finalized || job.stopping()) continue;
      for (uint32_t l = 0; l < job.lanes.size() && !job.stopping(); ++l) {
        TransferJob::Lane& lane = job.lanes[l];
        if (!lane.cma || lane.hold || lane.cma_busy || lane.cma_next >= lane.cma_ops.size()) continue;
        PeerConn& peer = *lane.peer;
        if ((job.seq > peer.rr_mark) != (pass == 0)) continue;
        const auto& rec = *peer.record;
        if (peer.lost || !peer.cma) {
          fail_job_locked(job, Status::PeerLost, "peer '" + rec.engine_id + "' rank " + std::to_string(rec.tp_rank) +
                                                     " was lost");
          continue;
        }
        if (peer.cma->exited()) {
          op_failed_locked(job.ops[lane.cma_ops[lane.cma_next]], Status::PeerLost,
                           "peer '" + rec.engine_id + "' rank " + std::to_string(rec.tp_rank) + " (pid " +
                               std::to_string(peer.cma->pid()) + ") exited");
          continue;
        }
        // The peer's room: what is being copied (by other progress calls too) and claimed above.
        uint64_t taken = peer.cma_segments;
        for (const CmaBatch& c : batches) taken += c.peer.get() == &peer ? c.segments.size() : 0;
        if (taken >= opt_.max_outstanding) continue;
        CmaBatch b;
        b.job = job_ptr;
        b.lane = l;
        b.peer = lane.peer;
        b.direction = job.op == TransferOp::Read ? cma::Direction::Read : cma::Direction::Write;
        uint64_t bytes = 0;
        const size_t max_segments = std::min<uint64_t>(cma_segments_per_batch(opt_.max_outstanding),
                                                       opt_.max_outstanding - taken);
        for (size_t k = lane.cma_next;
             k < lane.cma_ops.size() && b.segments.size() < max_segments && bytes < cma_batch_bytes_; ++k) {
          const TransferJob::Op& op = job.ops[lane.cma_ops[k]];
          // The peer's range in a mapping here: exactly its registered range of the region, which
          // the posting checks already held this read to (checked again, so a mapping is never
          // left). One batch copies either through mappings or with cross-memory attach.
          const cma::PeerMapping* map = nullptr;
          if (op.remote_region < peer.maps.size() && peer.maps[op.remote_region] &&
              op.remote_region < peer.remote_ranges.size()) {
            const RegisteredRange& range = peer.remote_ranges[op.remote_region];
            const cma::PeerMapping* m = peer.maps[op.remote_region].get();
            if (op.remote >= range.base && op.remote - range.base <= m->length() &&
                op.length <= m->length() - (op.remote - range.base)) {
              map = m;
            }
          }
          if (b.segments.empty()) {
            b.mapped = map != nullptr;
          } else if (b.mapped != (map != nullptr)) {
            break;
          }
          const uint64_t take = std::min(op.length - op.cma_done, cma_batch_bytes_ - bytes);
          uint64_t remote = op.remote + op.cma_done;
          if (map != nullptr) {
            const uint8_t* view = b.direction == cma::Direction::Read ? map->read_view() : map->write_view();
            remote = reinterpret_cast<uintptr_t>(view) + (remote - peer.remote_ranges[op.remote_region].base);
            if (b.maps.empty() || b.maps.back() != peer.maps[op.remote_region]) b.maps.push_back(peer.maps[op.remote_region]);
          }
          b.segments.push_back({static_cast<uint8_t*>(op.local) + op.cma_done, remote, take});
          b.ops.push_back(lane.cma_ops[k]);
          bytes += take;
          if (op.cma_done + take != op.length) break;  // the rest of this piece goes in the next batch
        }
        batches.push_back(std::move(b));
      }
    }
  }
  if (batches.empty()) return 0;
  for (CmaBatch& b : batches) {
    TransferJob::Lane& lane = b.job->lanes[b.lane];
    lane.cma_busy = true;
    b.peer->cma_segments += b.segments.size();
    b.peer->rr_last = b.job->seq;
    note_ops_in_flight(*b.peer->record, b.peer->cma_segments);
    for (uint32_t i : b.ops) b.job->ops[i].state = TransferJob::Op::State::InFlight;
    b.job->inflight++;
    b.peer->inflight++;
  }
  unlocked_io_ += batches.size();

  // Copy without the lock: the jobs, peers and registrations stay alive and busy (inflight).
  g.unlock();
  for (CmaBatch& b : batches) {
    // The peer's probe reads back before and after the copy, or the copy does not count: a peer
    // agent that shut down (it revokes its probe first) or a pid that is another process by now.
    const uint32_t pid = static_cast<uint32_t>(b.peer->cma->pid());
    b.gone = cma::check_probe(pid, b.peer->cma_probe_address, b.peer->cma_probe);
    if (!b.gone.empty()) {
      b.gone_before = true;
      continue;
    }
    b.result = cma_copier_->copy(b.peer->cma->pid(), b.direction, b.segments, kCmaSplitBytes, b.mapped);
    b.gone = cma::check_probe(pid, b.peer->cma_probe_address, b.peer->cma_probe);
    b.exited = b.peer->cma->exited();
  }
  g.lock();

  unsigned n = 0;
  for (CmaBatch& b : batches) {
    n += static_cast<unsigned>(b.ops.size());
    cma_batch_done_locked(b, b.result, b.exited);
  }
  unlocked_io_ -= batches.size();
  if (unlocked_io_ == 0) unlocked_idle_.notify_all();
  return n;
}

void AgentCore::cma_batch_done_locked(CmaBatch& b, const cma::CopyResult& result, bool peer_exited) {
  TransferJob& job = *b.job;
  TransferJob::Lane& lane = job.lanes[b.lane];
  PeerConn& peer = *b.peer;
  lane.cma_busy = false;
  job.inflight--;
  peer.inflight--;
  peer.cma_segments -= b.segments.size();
  // A peer that exited, or whose agent went away (its probe no longer reads back), while the
  // batch ran: none of it counts (its pid could be another process's by now, or its memory
  // reused), so the batch fails at its first piece.
  const bool gone = peer_exited || !b.gone.empty();
  uint64_t left = gone ? 0 : result.bytes;
  const int error = gone ? ESRCH : result.error;
  size_t i = 0;
  for (; i < b.segments.size(); ++i) {
    TransferJob::Op& op = job.ops[b.ops[i]];
    const uint64_t len = b.segments[i].length;
    if (left < len) break;
    left -= len;
    if (b.mapped) peer.record->bytes_mapped.fetch_add(len, std::memory_order_relaxed);
    op.cma_done += len;
    if (op.cma_done == op.length) {
      op_succeeded_locked(op);
      if (lane.cma_next < lane.cma_ops.size() && lane.cma_ops[lane.cma_next] == b.ops[i]) ++lane.cma_next;
    } else {
      op.state = TransferJob::Op::State::Pending;  // a split piece: the next batch goes on with it
    }
  }
  if (i < b.segments.size()) {
    TransferJob::Op& op = job.ops[b.ops[i]];
    const uint64_t copied = op.cma_done + left;
    for (size_t j = i + 1; j < b.segments.size(); ++j) job.ops[b.ops[j]].state = TransferJob::Op::State::Pending;
    const auto& rec = *peer.record;
    const bool reading = job.op == TransferOp::Read;
    std::string why;
    Status status = Status::Transport;
    if (!b.gone.empty() && !peer_exited) {
      status = Status::PeerLost;
      why = std::string("the peer's agent is gone ") + (b.gone_before ? "(before the copy: nothing copied)" : "(during the copy)") +
            ": " + b.gone;
    } else if (error == ESRCH || peer_exited) {
      status = Status::PeerLost;
      why = "the peer process is gone";
    } else if (error == EFAULT) {
      // Either the peer is going away (its memory is being torn down) or a range that passed
      // the checks against its advertised regions is not mapped: its probe tells which.
      const std::string probe = cma::check_probe(static_cast<uint32_t>(peer.cma->pid()), peer.cma_probe_address, peer.cma_probe);
      if (!probe.empty() || peer.cma->exited()) {
        status = Status::PeerLost;
        why = "the peer process is going away (" + (probe.empty() ? std::string("it exited") : probe) + ")";
      } else {
        why = std::string("the peer's advertised region does not map ") + (reading ? "the source" : "the target") +
              " range any more (or this side's registered memory was unmapped)";
      }
    } else if (error == EPERM) {
      why = "cross-memory attach to the peer is no longer permitted";
    }
    op_failed_locked(op, status,
                     std::string(b.mapped ? (reading ? "memcpy from the mapping" : "memcpy into the mapping")
                                          : cma::syscall_name(b.direction)) +
                         " of read " + std::to_string(op.read_index) +
                         " (P rank " + std::to_string(lane.p_rank) + ") " + (reading ? "from" : "into") +
                         " peer '" + rec.engine_id + "' rank " + std::to_string(rec.tp_rank) + " (pid " +
                         std::to_string(peer.cma->pid()) + ", remote " + hex(op.remote) + ", " +
                         std::to_string(op.length) + " bytes) failed after " + std::to_string(copied) +
                         " bytes: " + (!b.gone.empty() && !peer_exited ? why
                                                                       : cma::errno_text(error) + (why.empty() ? "" : ": " + why)));
  }
  check_final_locked(job);
}

}  // namespace pdkv::exec
