// The D side of the two-process tests: a D rank agent in the test process, connected to the P
// ranks a pdkv_test_peer serves, compiling the scenario's plan from the metadata the peers
// advertised, posting transfers and collecting its own notifications. Every C call's status and
// message are captured (never ignored).
#pragma once

#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "peer_process.hpp"
#include "scenario.hpp"

namespace e2e {

struct Result {
  pdkv_status_t status = PDKV_OK;
  std::string message;
  bool ok() const { return status == PDKV_OK; }
};

// Runs f(&err) and checks the error convention (OK <=> no error object; the object's status is
// the returned one).
template <typename F>
Result call(F&& f) {
  pdkv_error_t* err = reinterpret_cast<pdkv_error_t*>(0x1);  // the library must overwrite it
  const pdkv_status_t st = f(&err);
  if (st == PDKV_OK) {
    REQUIRE(err == nullptr);
    return {};
  }
  REQUIRE(err != nullptr);
  REQUIRE(pdkv_error_status(err) == st);
  Result r{st, pdkv_error_message(err)};
  pdkv_error_free(err);
  return r;
}

#define E2E_OK(expr)                                                       \
  do {                                                                     \
    const ::e2e::Result e2e_r_ = ::e2e::call([&](pdkv_error_t** err) { return (expr); }); \
    INFO(#expr << ": " << pdkv_status_name(e2e_r_.status) << ": " << e2e_r_.message);   \
    REQUIRE(e2e_r_.status == PDKV_OK);                                     \
  } while (0)

using TransferPtr = std::unique_ptr<pdkv_transfer_t, Deleter<pdkv_transfer_t, pdkv_transfer_free>>;
using PeerPtr = std::unique_ptr<pdkv_peer_t, Deleter<pdkv_peer_t, pdkv_peer_free>>;

using Clock = std::chrono::steady_clock;
inline int64_t ms_since(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
}

const char* transport_name(int32_t t);
// pdkv_test_peer arguments for a scenario over a transport (short heartbeats), plus `extra`.
std::vector<std::string> peer_args(const std::string& scenario, int32_t transport,
                                   const std::vector<std::string>& extra = {});

struct Note {
  int32_t kind;
  pdkv_status_t status;
  std::string request, engine;
  uint32_t rank, count, expected;
  uint64_t bytes;
};

class DSide {
 public:
  DSide(const Scenario& s, const AgentSettings& settings);

  const Scenario& scenario() const { return s_; }
  RankAgent& rank() { return d_; }
  pdkv_agent_t* agent() const { return d_.agent(); }

  // Connects to every P rank the peer process serves (at host:port), checking who answered.
  void connect_all(const PeerProcess& p, const std::string& host = "127.0.0.1", uint64_t timeout_ms = 5000);
  // In CALLER progress mode a thread calls pdkv_agent_progress while the connect runs, as an
  // application's event loop would (see finding F4, "CALLER-mode connect", in fault_test.cpp).
  Result connect(const std::string& address, uint64_t timeout_ms, PeerPtr* out = nullptr);
  PeerPtr peer(uint32_t p_rank) const;
  pdkv_peer_info_t peer_info(uint32_t p_rank) const;

  // The scenario's plan from the metadata the connected P ranks advertised.
  PlanPtr plan_from_peers() const;

  // Posts a READ (or whatever params say) of `plan`; returns the status and the handle.
  Result post(const pdkv_transfer_plan_t* plan, const std::string& request, uint64_t timeout_ms,
              TransferPtr* out, int32_t op = PDKV_TRANSFER_READ, bool notify = true);
  // pdkv_transfer_wait until final (bounded by `ms`); finished says whether it was.
  Result wait(pdkv_transfer_t* t, uint64_t ms, bool* finished = nullptr);
  static pdkv_transfer_info_t info(const pdkv_transfer_t* t);
  static std::vector<pdkv_failed_read_t> failed_reads(const pdkv_transfer_t* t);

  // Polls D's notifications into the backlog; take_note waits for one matching and removes it.
  void poll_notes();
  std::optional<Note> take_note(int32_t kind, const std::string& request, Ms within, int64_t remote_rank = -1);
  const std::vector<Note>& backlog() const { return notes_; }

  // Refills every region with the untouched pattern (before a second transfer into it).
  void reset_memory();
  std::string verify(const pdkv_transfer_plan_t* plan, int64_t only_rank = -1, bool untouched = true) const {
    return verify_d_memory(s_, d_.memory(), plan, only_rank, untouched);
  }

 private:
  const Scenario& s_;
  AgentSettings settings_;
  RankAgent d_;
  std::vector<Note> notes_;
};

// Checks the failed-read list of a FAILED transfer: non-empty, as many as info.reads_failed,
// sorted by (P rank, index), each naming a read of the plan with the transfer's status.
void check_failed_reads(const pdkv_transfer_t* t, const pdkv_transfer_plan_t* plan, pdkv_status_t status);

}  // namespace e2e
