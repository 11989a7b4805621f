// Transfer lifecycles between two processes: deadlines, cancel, freeing a transfer in any state,
// deregistration refused while memory is in use. Over tcp a stopped P process
// (SIGSTOP) keeps D's GETs in flight for as long as the test wants: UCX emulates a GET with
// messages the target's worker must answer (so does shm: UCX 1.13.1 does not use CMA for it).
#include <signal.h>

#include <thread>

#include "d_side.hpp"

using namespace e2e;

namespace {

constexpr int kRepeats = 3;
constexpr int64_t kSlackMs = 700;

AgentSettings tcp_settings() {
  AgentSettings st;
  st.transport = PDKV_TRANSPORT_TCP;
  st.heartbeat_interval_ms = 100;
  st.heartbeat_timeout_ms = 5000;  // the stopped P must not be declared lost by heartbeats here
  st.max_outstanding = 8;
  return st;
}

std::vector<std::string> patient_peer_args(int32_t transport = PDKV_TRANSPORT_TCP) {
  // The P side must not give up on the test's D while the test holds it stopped either.
  auto a = peer_args("tiny", transport);
  a.push_back("--hb-timeout");
  a.push_back("5000");
  return a;
}

// Waits until deregistering `region` of D succeeds (BUSY meanwhile); the last result.
Result deregister_when_idle(DSide& d, uint32_t region, Ms within) {
  const auto until = Clock::now() + within;
  for (;;) {
    const Result r = call([&](pdkv_error_t** e) { return pdkv_memory_deregister(d.rank().registration(region), e); });
    if (r.ok() || r.status != PDKV_ERR_BUSY || Clock::now() >= until) return r;
    std::this_thread::sleep_for(5ms);
  }
}

bool no_line_within(PeerProcess& p, const std::function<bool(const std::string&)>& pred, Ms quiet) {
  return !p.take(pred, quiet).has_value();
}

}  // namespace

TEST_CASE("A transfer past its deadline fails TIMED_OUT on time with its reads listed", "[e2e][deadline]") {
  const Scenario& s = scenario("tiny");
  DSide d(s, tcp_settings());
  auto p = PeerProcess::start_peer(patient_peer_args());
  for (int rep = 0; rep < kRepeats; ++rep) {
    INFO("repetition " << rep);
    d.connect_all(*p);
    const PlanPtr plan = d.plan_from_peers();
    d.reset_memory();
    p->stop();
    const uint64_t deadline = 300 + 100 * static_cast<uint64_t>(rep);
    const auto t0 = Clock::now();
    TransferPtr t;
    REQUIRE(d.post(plan.get(), "late-" + std::to_string(rep), deadline, &t).ok());
    // While it waits: in flight, counted by the agent, nothing listed as failed yet.
    std::this_thread::sleep_for(50ms);
    {
      const auto i = DSide::info(t.get());
      CHECK(i.state == PDKV_TRANSFER_IN_FLIGHT);
      CHECK(i.status == PDKV_OK);
      CHECK(i.reads_failed == 0);
      CHECK(DSide::failed_reads(t.get()).empty());
      pdkv_agent_info_t ai{};
      ai.struct_size = sizeof ai;
      E2E_OK(pdkv_agent_get_info(d.agent(), &ai, err));
      CHECK(ai.transfers_in_flight == 1);
      bool finished = true;
      const Result quick = d.wait(t.get(), 0, &finished);  // a poll
      CHECK(quick.ok());
      CHECK_FALSE(finished);
    }
    bool finished = false;
    const Result w = d.wait(t.get(), UINT64_MAX, &finished);  // bounded by the transfer's deadline
    const int64_t elapsed = ms_since(t0);
    INFO(pdkv_status_name(w.status) << ": " << w.message << " after " << elapsed << " ms");
    REQUIRE(finished);
    CHECK(w.status == PDKV_ERR_TIMED_OUT);
    CHECK_THAT(w.message, Catch::Contains(std::to_string(deadline) + " ms"));
    CHECK(elapsed >= static_cast<int64_t>(deadline));
    CHECK(elapsed < static_cast<int64_t>(deadline) + kSlackMs);
    const auto i = DSide::info(t.get());
    CHECK(i.status == PDKV_ERR_TIMED_OUT);
    CHECK(i.elapsed_us >= deadline * 1000);
    check_failed_reads(t.get(), plan.get(), PDKV_ERR_TIMED_OUT);
    // Everything in flight was returned: D's memory is free to deregister at once.
    const Result dr = call([&](pdkv_error_t** e) { return pdkv_memory_deregister(d.rank().registration(0), e); });
    INFO(dr.message);
    CHECK(dr.ok());
    E2E_OK(d.rank().reregister(0, err));  // registering a deregistered region again works
    p->resume();
    // D closed its endpoints to P at the deadline (they did not serve in time): the next
    // repetition reconnects to the same P process, which survived as well.
  }
  d.connect_all(*p);
  const PlanPtr plan = d.plan_from_peers();
  d.reset_memory();
  TransferPtr t;
  REQUIRE(d.post(plan.get(), "in-time", 3000, &t).ok());
  REQUIRE(d.wait(t.get(), 5000).ok());
  CHECK(d.verify(plan.get()).empty());
}

TEST_CASE("Cancel: nothing more is posted and the transfer fails CANCELLED; P hears it failed",
          "[e2e][cancel]") {
  const Scenario& s = scenario("tiny");
  DSide d(s, tcp_settings());
  auto p = PeerProcess::start_peer(patient_peer_args());
  for (int rep = 0; rep < kRepeats; ++rep) {
    INFO("repetition " << rep);
    d.connect_all(*p);
    const PlanPtr plan = d.plan_from_peers();
    d.reset_memory();
    const std::string req = "cancel-" + std::to_string(rep);
    REQUIRE(p->command("LEASE " + req + " 1 20000", 5000ms) == "OK LEASE");
    p->stop();
    TransferPtr t;
    const auto t0 = Clock::now();
    REQUIRE(d.post(plan.get(), req, 3000, &t).ok());
    std::this_thread::sleep_for(20ms);
    E2E_OK(pdkv_transfer_cancel(t.get(), err));
    E2E_OK(pdkv_transfer_cancel(t.get(), err));  // again: no effect
    p->resume();                          // the operations in flight complete
    bool finished = false;
    const Result w = d.wait(t.get(), 5000, &finished);
    const int64_t elapsed = ms_since(t0);
    INFO(pdkv_status_name(w.status) << ": " << w.message << " after " << elapsed << " ms");
    REQUIRE(finished);
    CHECK(w.status == PDKV_ERR_CANCELLED);
    CHECK(elapsed < 1000);  // well before its 3 s deadline
    check_failed_reads(t.get(), plan.get(), PDKV_ERR_CANCELLED);
    const auto i = DSide::info(t.get());
    CHECK(i.operations_done < i.operations_total);
    CHECK(i.operations_done <= 8);  // at most the window in flight at the cancel: nothing posted after it
    // Bytes no read names stay untouched; completed reads are P's bytes.
    CHECK(d.verify(plan.get(), 1 << 20, true).empty());
    // Each P rank hears that the request failed, and its lease does not complete.
    for (uint32_t r = 0; r < s.p.tp_size; ++r) {
      const auto line = p->take(note_is("READ_DONE", req, r), 3000ms);
      REQUIRE(line);
      CHECK(parse_note(*line)->status == "PDKV_ERR_CANCELLED");
    }
    CHECK(no_line_within(*p, note_is("REQUEST_COMPLETE", req), 200ms));
    // The peers stay connected and serve the next request.
    TransferPtr t2;
    REQUIRE(d.post(plan.get(), req + "-next", 3000, &t2).ok());
    REQUIRE(d.wait(t2.get(), 5000).ok());
    CHECK(d.verify(plan.get()).empty());
    // Cancelling a finished transfer changes nothing.
    E2E_OK(pdkv_transfer_cancel(t2.get(), err));
    CHECK(DSide::info(t2.get()).state == PDKV_TRANSFER_DONE);
    CHECK(d.wait(t2.get(), 0).ok());
  }
}

TEST_CASE("Deregistering memory a transfer uses is BUSY naming the region, and works once idle",
          "[e2e][busy]") {
  const Scenario& s = scenario("tiny");
  DSide d(s, tcp_settings());
  auto p = PeerProcess::start_peer(patient_peer_args());
  d.connect_all(*p);
  const PlanPtr plan = d.plan_from_peers();
  p->stop();
  TransferPtr t;
  REQUIRE(d.post(plan.get(), "busy", 3000, &t).ok());
  std::this_thread::sleep_for(20ms);
  REQUIRE(DSide::info(t.get()).state == PDKV_TRANSFER_IN_FLIGHT);
  for (uint32_t r = 0; r < 3; ++r) {
    const Result busy = call([&](pdkv_error_t** e) { return pdkv_memory_deregister(d.rank().registration(r), e); });
    INFO(busy.message);
    CHECK(busy.status == PDKV_ERR_BUSY);
    CHECK_THAT(busy.message, Catch::Contains("region " + std::to_string(r)));
  }
  p->resume();
  REQUIRE(d.wait(t.get(), 5000).ok());
  CHECK(d.verify(plan.get()).empty());  // the refused deregistration disturbed nothing
  for (uint32_t r = 0; r < 3; ++r) {
    const Result ok = deregister_when_idle(d, r, 1000ms);
    INFO(ok.message);
    CHECK(ok.ok());
  }
}

TEST_CASE("A transfer handle may be freed in any state", "[e2e][free]") {
  const Scenario& s = scenario("tiny");
  auto p = PeerProcess::start_peer(patient_peer_args());

  SECTION("in flight: cancelled; its memory is idle at once while no answer is being received") {
    // Over pdkv's tcp data connection a cancelled READ's requests that P has not begun to answer
    // hold nothing: their answers, when they come, go to a sink. P is stopped, so nothing is
    // being received into D's memory and it may be deregistered right away.
    DSide d(s, tcp_settings());
    d.connect_all(*p);
    const PlanPtr plan = d.plan_from_peers();
    p->stop();
    TransferPtr t;
    REQUIRE(d.post(plan.get(), "freed-in-flight", 3000, &t).ok());
    std::this_thread::sleep_for(20ms);
    t.reset();
    const Result r = deregister_when_idle(d, 0, 1000ms);
    INFO(r.message);
    CHECK(r.ok());
    p->resume();
    // P's late answers are taken in and dropped: the peer stays connected and serves again.
    std::this_thread::sleep_for(200ms);
    {
      pdkv_agent_info_t pi{};
      pi.struct_size = sizeof pi;
      E2E_OK(pdkv_agent_get_info(d.agent(), &pi, err));
      CHECK(pi.num_peers == s.p.tp_size);
    }
    // The agent's count of transfers in flight drops to 0 without the handle.
    pdkv_agent_info_t ai{};
    ai.struct_size = sizeof ai;
    E2E_OK(pdkv_agent_get_info(d.agent(), &ai, err));
    CHECK(ai.transfers_in_flight == 0);
  }
  SECTION("done, failed and cancelled handles") {
    DSide d(s, tcp_settings());
    d.connect_all(*p);
    const PlanPtr plan = d.plan_from_peers();
    TransferPtr done;
    REQUIRE(d.post(plan.get(), "done", 3000, &done).ok());
    REQUIRE(d.wait(done.get(), 5000).ok());
    done.reset();
    p->stop();
    TransferPtr failed;
    REQUIRE(d.post(plan.get(), "failed", 200, &failed).ok());
    REQUIRE(d.wait(failed.get(), 3000).status == PDKV_ERR_TIMED_OUT);
    CHECK(!DSide::failed_reads(failed.get()).empty());
    failed.reset();
    // The resumed P answers the stale requests; D takes them in and drops them, and P lives on
    // (it used to be replaced here: UCX 1.13.1 aborted a P answering GETs of a vanished worker).
    p->resume();
    std::this_thread::sleep_for(200ms);
    REQUIRE_FALSE(p->wait_exit(0ms));
  }
  SECTION("in flight when the agent is freed: SHUTDOWN, every handle still answers") {
    auto d = std::make_unique<DSide>(s, tcp_settings());
    d->connect_all(*p);
    const PlanPtr plan = d->plan_from_peers();
    PeerPtr peer = d->peer(0);
    p->stop();
    TransferPtr t;
    REQUIRE(d->post(plan.get(), "shutdown", 3000, &t).ok());
    std::this_thread::sleep_for(20ms);
    const auto t0 = Clock::now();
    d->rank().free_agent();
    CHECK(ms_since(t0) < 1000);  // no free waits for the network
    bool finished = false;
    const Result w = d->wait(t.get(), 0, &finished);
    CHECK(finished);
    CHECK(w.status == PDKV_ERR_SHUTDOWN);
    const auto i = DSide::info(t.get());
    CHECK(i.state == PDKV_TRANSFER_FAILED);
    CHECK(i.status == PDKV_ERR_SHUTDOWN);
    CHECK(!DSide::failed_reads(t.get()).empty());
    E2E_OK(pdkv_transfer_cancel(t.get(), err));
    pdkv_peer_info_t pi{};
    pi.struct_size = sizeof pi;
    E2E_OK(pdkv_peer_get_info(peer.get(), &pi, err));
    CHECK(pi.connected == 0);
    CHECK(std::string(pi.engine_id) == s.p.engine_id);
    E2E_OK(pdkv_peer_disconnect(peer.get(), err));  // on a lost peer: OK
    const Result dr = call([&](pdkv_error_t** e) { return pdkv_memory_deregister(d->rank().registration(0), e); });
    CHECK((dr.ok() || dr.status == PDKV_ERR_SHUTDOWN));
    t.reset();
    peer.reset();
    d.reset();
    // The resumed P answers requests of a D that is gone: a socket error on its data
    // connection, which drops that peer; the P process lives on and serves the next D below.
    p->resume();
    std::this_thread::sleep_for(200ms);
    REQUIRE_FALSE(p->wait_exit(0ms));
  }
  // The P process served all of it and still serves a new D.
  DSide d(s, tcp_settings());
  d.connect_all(*p);
  const PlanPtr plan = d.plan_from_peers();
  TransferPtr t;
  REQUIRE(d.post(plan.get(), "after-frees", 3000, &t).ok());
  REQUIRE(d.wait(t.get(), 5000).ok());
  CHECK(d.verify(plan.get()).empty());
}
