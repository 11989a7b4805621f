// The C API's "Thread-safe" promises on one transfer and its agent, kept with many threads at
// once: waits (several on one CALLER-mode transfer, which drive its progress), polls of its
// state, failed reads and done fd, agent info, progress and notification polls, and a cancel.
// Its own program (capi_thread_tests) so that scripts/tsan.sh runs it under ThreadSanitizer
// without building the whole C API suite; Catch2's assertions are not thread-safe, so the threads
// record what they saw and the test thread checks it after joining them.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "../agent_nodes.hpp"
#include "../capi_helpers.hpp"

using namespace capi_agent;  // NOLINT(google-build-using-namespace): the shared helpers of agent_nodes.hpp

namespace {

// What one thread saw: a call's status (and its error's message), never a Catch2 assertion.
struct Seen {
  pdkv_status_t status = PDKV_OK;
  std::string message;
  uint8_t finished = 0;
  const pdkv_failed_read_t* reads = nullptr;
  size_t num_reads = 0;
  int calls = 0;  // how many rounds of calls a polling thread made
};

pdkv_status_t keep(pdkv_status_t st, pdkv_error_t* e, Seen& s) {
  if (st != PDKV_OK && s.status == PDKV_OK) {
    s.status = st;
    s.message = e != nullptr ? pdkv_error_message(e) : "(no error object)";
  }
  pdkv_error_free(e);
  return st;
}

// One round of every read-only call a thread may make on the transfer and the agent while others
// wait on it. Returns whether the transfer was final when asked.
bool poll_round(pdkv_agent_t* agent, const pdkv_transfer_t* t, Seen& s) {
  pdkv_error_t* e = nullptr;
  pdkv_transfer_info_t info{};
  info.struct_size = sizeof info;
  keep(pdkv_transfer_get_info(t, &info, &e), e, s);
  e = nullptr;
  keep(pdkv_transfer_failed_reads(t, &s.reads, &s.num_reads, &e), e, s);
  int fd = -1;
  e = nullptr;
  keep(pdkv_transfer_done_fd(t, &fd, &e), e, s);
  pdkv_agent_info_t ai{};
  ai.struct_size = sizeof ai;
  e = nullptr;
  keep(pdkv_agent_get_info(agent, &ai, &e), e, s);
  pdkv_notification_list_t* list = nullptr;
  e = nullptr;
  if (keep(pdkv_agent_poll_notifications(agent, &list, &e), e, s) == PDKV_OK) pdkv_notification_list_free(list);
  ++s.calls;
  return info.state != PDKV_TRANSFER_IN_FLIGHT;
}

void wait_final(pdkv_transfer_t* t, Seen& s) {
  pdkv_error_t* e = nullptr;
  const pdkv_status_t st = pdkv_transfer_wait(t, UINT64_MAX, &s.finished, &e);
  s.status = st;
  s.message = e != nullptr ? pdkv_error_message(e) : "";
  pdkv_error_free(e);
}

// P's bytes differ from D's everywhere before the READ: a pattern per region on P.
void fill_pattern(Node& n) {
  for (size_t r = 0; r < n.view.size(); ++r) {
    for (size_t i = 0; i < n.view[r].second; ++i) n.view[r].first[i] = static_cast<uint8_t>((i * 13 + r * 5 + 1) % 251);
  }
}

// Every read of the plan landed: D's bytes equal P's at each read. Returns the first wrong read.
std::string first_wrong_read(const Node& d, const Node& p, const pdkv_transfer_plan_t* plan) {
  const pdkv_plan_read_t* reads = nullptr;
  size_t n = 0;
  REQUIRE_OK(pdkv_transfer_plan_rank_reads(plan, 0, &reads, &n, nullptr, err));
  REQUIRE(n > 0);
  for (size_t i = 0; i < n; ++i) {
    const auto& r = reads[i];
    if (std::memcmp(d.view[r.local_region].first + r.local_offset, p.view[r.remote_region].first + r.remote_offset,
                    r.length) != 0) {
      return "read " + std::to_string(i) + " of " + std::to_string(n);
    }
  }
  return "";
}

// D's READ of `plan` for `request` (20 s deadline), posted.
TransferPtr post_read(Node& d, const pdkv_transfer_plan_t* plan, const char* request) {
  auto params = transfer_params(plan, request);
  params.field_mask = PDKV_TRANSFER_FIELD_TIMEOUT;
  params.timeout_ms = 20000;
  pdkv_transfer_t* raw = nullptr;
  REQUIRE_OK(pdkv_agent_post(d.agent.get(), &params, &raw, err));
  return TransferPtr(raw);
}

// Starts a thread per `waited` entry waiting for `t` to be final and one per `polled` entry polling
// it and `agent` (poll_round) until it is; they are the first entries of `threads`.
void start_waiters_and_pollers(std::vector<std::thread>& threads, pdkv_agent_t* agent, pdkv_transfer_t* t,
                               std::vector<Seen>& waited, std::vector<Seen>& polled) {
  for (Seen& s : waited) threads.emplace_back([t, &s] { wait_final(t, s); });
  for (Seen& s : polled) {
    threads.emplace_back([agent, t, &s] {
      while (!poll_round(agent, t, s)) std::this_thread::yield();
    });
  }
}

}  // namespace

TEST_CASE("several threads wait on one CALLER-mode transfer while others poll it and its agent", "[threads]") {
  auto p = node("pre", PDKV_TRANSPORT_TCP, PDKV_PROGRESS_THREAD);
  auto d = node("dec", PDKV_TRANSPORT_TCP, PDKV_PROGRESS_CALLER);
  fill_pattern(*p);
  auto peer = connect(d->agent.get(), p->agent.get());
  auto plan = read_plan(d->md.get(), p->md.get());
  for (int round = 0; round < 3; ++round) {
    const std::string request = "many-" + std::to_string(round);
    TransferPtr t = post_read(*d, plan.get(), request.c_str());
    std::vector<Seen> waited(4), polled(2);
    Seen progressed;
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    start_waiters_and_pollers(threads, d->agent.get(), t.get(), waited, polled);
    // Progress driven from one more thread too, beside the waits that drive it.
    threads.emplace_back([&] {
      while (!stop.load()) {
        pdkv_error_t* e = nullptr;
        keep(pdkv_agent_progress(d->agent.get(), nullptr, &e), e, progressed);
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    });
    for (size_t i = 0; i + 1 < threads.size(); ++i) threads[i].join();
    stop = true;
    threads.back().join();
    INFO(request);
    for (const Seen& s : waited) {
      INFO(s.message);
      CHECK(s.finished == 1);
      CHECK(s.status == PDKV_OK);
    }
    for (const Seen& s : polled) {
      INFO(s.message);
      CHECK(s.status == PDKV_OK);
      CHECK(s.calls > 0);
      CHECK(s.num_reads == 0);  // a DONE transfer lists no failed read
    }
    INFO(progressed.message);
    CHECK(progressed.status == PDKV_OK);
    // The waits returned after the final state: every byte is in D's memory.
    CHECK(first_wrong_read(*d, *p, plan.get()).empty());
    for (const auto& [at, len] : d->view) std::memset(at, 0, len);  // the next round starts from zeros
  }
}

TEST_CASE("a cancel racing several waits and polls: every thread sees the one final state", "[threads]") {
  // P in CALLER mode with nobody driving it until the cancel: D's READ stays in flight.
  auto p = node("pre", PDKV_TRANSPORT_TCP, PDKV_PROGRESS_CALLER);
  auto d = node("dec", PDKV_TRANSPORT_TCP, PDKV_PROGRESS_THREAD);
  auto peer = connect(d->agent.get(), p->agent.get());
  auto plan = read_plan(d->md.get(), p->md.get());
  TransferPtr t = post_read(*d, plan.get(), "cancelled");
  std::vector<Seen> waited(4), polled(2);
  Seen cancelled, driven;
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  start_waiters_and_pollers(threads, d->agent.get(), t.get(), waited, polled);
  threads.emplace_back([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    pdkv_error_t* e = nullptr;
    keep(pdkv_transfer_cancel(t.get(), &e), e, cancelled);
  });
  // P is driven after the cancel, so the READs already in flight complete and the cancel ends.
  threads.emplace_back([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    while (!stop.load()) {
      pdkv_error_t* e = nullptr;
      keep(pdkv_agent_progress(p->agent.get(), nullptr, &e), e, driven);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  for (size_t i = 0; i + 1 < threads.size(); ++i) threads[i].join();
  stop = true;
  threads.back().join();
  CHECK(cancelled.status == PDKV_OK);
  CHECK(driven.status == PDKV_OK);
  pdkv_transfer_info_t info{};
  info.struct_size = sizeof info;
  REQUIRE_OK(pdkv_transfer_get_info(t.get(), &info, err));
  REQUIRE(info.state == PDKV_TRANSFER_FAILED);
  CHECK(info.status == PDKV_ERR_CANCELLED);
  const pdkv_failed_read_t* reads = nullptr;
  size_t n = 0;
  REQUIRE_OK(pdkv_transfer_failed_reads(t.get(), &reads, &n, err));
  CHECK(n == info.reads_failed);
  for (const Seen& s : waited) {
    INFO(s.message);
    CHECK(s.finished == 1);
    CHECK(s.status == PDKV_ERR_CANCELLED);
  }
  // Each poller's last look was at the final transfer: the one list of failed reads, the same
  // array for every thread.
  for (const Seen& s : polled) {
    INFO(s.message);
    CHECK(s.status == PDKV_OK);
    CHECK(s.num_reads == n);
    CHECK(s.reads == reads);
  }
}
