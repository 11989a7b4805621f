// Who drives a transfer: several threads posting to one agent at once, and an agent in CALLER
// progress mode driven through its event fd and pdkv_agent_progress, or by pdkv_transfer_wait.
#include <poll.h>

#include <atomic>
#include <thread>

#include "d_side.hpp"

using namespace e2e;

namespace {

constexpr int kRepeats = 3;
constexpr int64_t kSlackMs = 700;

}  // namespace

TEST_CASE("Transfers posted from several threads at once", "[e2e][threads]") {
  const int32_t transport = GENERATE(PDKV_TRANSPORT_TCP, PDKV_TRANSPORT_SHM);
  INFO("over " << transport_name(transport));
  const Scenario& s = scenario("tiny");
  AgentSettings st;
  st.transport = transport;
  DSide d(s, st);
  auto p = PeerProcess::start_peer(peer_args("tiny", transport));
  d.connect_all(*p);
  const PlanPtr plan = d.plan_from_peers();
  constexpr int kThreads = 4, kPerThread = 5;
  // Catch2's assertions are not thread-safe: the threads record, the main thread checks.
  std::vector<std::string> problems(kThreads);
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int k = 0; k < kThreads; ++k) {
    threads.emplace_back([&, k] {
      while (!go) std::this_thread::yield();
      std::vector<pdkv_transfer_t*> mine;
      std::vector<std::string> ids;
      for (int j = 0; j < kPerThread; ++j) ids.push_back("thread-" + std::to_string(k) + "-" + std::to_string(j));
      for (int j = 0; j < kPerThread; ++j) {
        pdkv_transfer_params_t tp{};
        tp.struct_size = sizeof tp;
        tp.field_mask = PDKV_TRANSFER_FIELD_TIMEOUT;
        tp.op = PDKV_TRANSFER_READ;
        tp.plan = plan.get();
        tp.peer_engine_id = s.p.engine_id.c_str();
        tp.request_id = ids[j].c_str();
        tp.timeout_ms = 5000;
        pdkv_transfer_t* t = nullptr;
        pdkv_error_t* err = nullptr;
        if (pdkv_agent_post(d.agent(), &tp, &t, &err) != PDKV_OK) {
          problems[k] += ids[j] + ": post: " + pdkv_error_message(err) + "; ";
          pdkv_error_free(err);
          continue;
        }
        mine.push_back(t);
      }
      for (auto* t : mine) {
        uint8_t finished = 0;
        pdkv_error_t* err = nullptr;
        if (pdkv_transfer_wait(t, UINT64_MAX, &finished, &err) != PDKV_OK || !finished) {
          problems[k] += std::string("wait: ") + pdkv_error_message(err) + "; ";
        }
        pdkv_error_free(err);
        pdkv_transfer_free(t);
      }
    });
  }
  go = true;
  for (auto& th : threads) th.join();
  for (int k = 0; k < kThreads; ++k) {
    INFO("thread " << k);
    CHECK(problems[k].empty());
  }
  CHECK(d.verify(plan.get()).empty());
  constexpr uint64_t kAll = kThreads * kPerThread;
  for (uint32_t r = 0; r < s.p.tp_size; ++r) {
    const auto i = d.peer_info(r);
    uint64_t bytes = 0;
    for (const auto& rd : rank_reads(plan.get(), r)) bytes += rd.length;
    CHECK(i.transfers_done == kAll);
    CHECK(i.bytes_read == kAll * bytes);
    CHECK(i.notifications_sent == kAll);
    // P heard every request from this rank once.
    for (uint64_t k = 0; k < kAll; ++k) REQUIRE(p->take(note_is("READ_DONE", "", r), 5000ms));
  }
}

TEST_CASE("CALLER progress mode: the event fd and pdkv_agent_progress drive transfers", "[e2e][caller]") {
  const int32_t transport = GENERATE(PDKV_TRANSPORT_TCP, PDKV_TRANSPORT_SHM);
  INFO("over " << transport_name(transport));
  const Scenario& s = scenario("tiny");
  AgentSettings st;
  st.transport = transport;
  st.progress = PDKV_PROGRESS_CALLER;
  DSide d(s, st);
  {
    pdkv_agent_info_t ai{};
    ai.struct_size = sizeof ai;
    E2E_OK(pdkv_agent_get_info(d.agent(), &ai, err));
    CHECK(ai.progress_mode == PDKV_PROGRESS_CALLER);
  }
  auto p = PeerProcess::start_peer(peer_args("tiny", transport));
  d.connect_all(*p);
  const PlanPtr plan = d.plan_from_peers();
  int fd = -1;
  E2E_OK(pdkv_agent_event_fd(d.agent(), &fd, err));
  REQUIRE(fd >= 0);

  SECTION("an event loop: poll the fd, call progress") {
    TransferPtr t;
    REQUIRE(d.post(plan.get(), "loop", 3000, &t).ok());
    // Nobody drives D's progress: no batch starts (tcp) or is copied (shm).
    std::this_thread::sleep_for(100ms);
    CHECK(DSide::info(t.get()).state == PDKV_TRANSFER_IN_FLIGHT);
    const auto until = Clock::now() + 5000ms;
    uint64_t events = 0;
    int wakeups = 0;
    while (DSide::info(t.get()).state == PDKV_TRANSFER_IN_FLIGHT && Clock::now() < until) {
      pollfd pfd{fd, POLLIN, 0};
      if (poll(&pfd, 1, 5) > 0) wakeups++;
      uint32_t n = 0;
      E2E_OK(pdkv_agent_progress(d.agent(), &n, err));
      events += n;
    }
    const auto i = DSide::info(t.get());
    CHECK(i.state == PDKV_TRANSFER_DONE);
    CHECK(events > 0);
    CHECK(wakeups > 0);
    CHECK(d.verify(plan.get()).empty());
    CHECK(p->take(note_is("READ_DONE", "loop"), 3000ms));
  }
  SECTION("pdkv_transfer_wait drives progress itself") {
    for (int rep = 0; rep < kRepeats; ++rep) {
      d.reset_memory();
      TransferPtr t;
      REQUIRE(d.post(plan.get(), "wait-" + std::to_string(rep), 3000, &t).ok());
      bool finished = false;
      const Result w = d.wait(t.get(), 5000, &finished);
      INFO(w.message);
      CHECK(w.ok());
      CHECK(finished);
      CHECK(d.verify(plan.get()).empty());
    }
    // P's notifications arrive in CALLER mode too (the control channel has its own thread).
    CHECK(p->take(note_is("READ_DONE"), 3000ms));
  }
  SECTION("a deadline in CALLER mode is kept by the wait") {
    {
      p->stop();
      TransferPtr t;
      const auto t0 = Clock::now();
      REQUIRE(d.post(plan.get(), "caller-late", 300, &t).ok());
      bool finished = false;
      const Result w = d.wait(t.get(), UINT64_MAX, &finished);
      CHECK(finished);
      CHECK(ms_since(t0) < 300 + kSlackMs);
      // Over tcp P's progress answers D's batches: a stopped P holds them past the deadline. Over
      // shm D copies P's memory itself, but (pdkv 2.7) the bytes count only once P said its lease
      // of the request was open, which a stopped P never says: past the deadline as well.
      INFO(w.message);
      CHECK(w.status == PDKV_ERR_TIMED_OUT);
      p->resume();
    }
  }
}
