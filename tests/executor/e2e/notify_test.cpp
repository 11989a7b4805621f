// Notifications and leases between two processes: a READ_DONE that came before the lease, TTL
// expiry counting what arrived, a lease replaced, READs posted without notifications, and
// WRITE_DONE held back until the bytes are in D's memory.
#include <thread>

#include "d_side.hpp"

using namespace e2e;

namespace {

constexpr int kRepeats = 3;
constexpr int64_t kSlackMs = 700;

bool no_line_within(PeerProcess& p, const std::function<bool(const std::string&)>& pred, Ms quiet) {
  return !p.take(pred, quiet).has_value();
}

}  // namespace

TEST_CASE("Leases: notifications count before and after the lease, TTL expiry, replacement, no-notify posts",
          "[e2e][lease]") {
  const Scenario& s = scenario("tiny");
  AgentSettings st;
  st.transport = PDKV_TRANSPORT_SHM;
  DSide d(s, st);
  auto p = PeerProcess::start_peer(peer_args("tiny", PDKV_TRANSPORT_SHM));
  d.connect_all(*p);
  const PlanPtr plan = d.plan_from_peers();
  auto read = [&](const std::string& req, bool notify) {
    TransferPtr t;
    REQUIRE(d.post(plan.get(), req, 3000, &t, PDKV_TRANSFER_READ, notify).ok());
    REQUIRE(d.wait(t.get(), 5000).ok());
  };

  SECTION("a READ_DONE that arrived before the lease counts") {
    read("early", true);
    for (uint32_t r = 0; r < s.p.tp_size; ++r) REQUIRE(p->take(note_is("READ_DONE", "early", r), 3000ms));
    REQUIRE(p->command("LEASE early 1 20000", 5000ms) == "OK LEASE");
    for (uint32_t r = 0; r < s.p.tp_size; ++r) {
      const auto line = p->take(note_is("REQUEST_COMPLETE", "early", r), 3000ms);
      REQUIRE(line);
      CHECK(parse_note(*line)->count == 1);
      CHECK(parse_note(*line)->expected == 1);
    }
  }
  SECTION("a lease whose TTL passes first expires, counting what arrived") {
    for (int rep = 0; rep < kRepeats; ++rep) {
      const std::string req = "ttl-" + std::to_string(rep);
      const auto t0 = Clock::now();
      REQUIRE(p->command("LEASE " + req + " 2 300", 5000ms) == "OK LEASE");
      read(req, true);  // one of the two notifications it waits for
      for (uint32_t r = 0; r < s.p.tp_size; ++r) {
        const auto line = p->take(note_is("LEASE_EXPIRED", req, r), 3000ms);
        const int64_t elapsed = ms_since(t0);
        REQUIRE(line);
        INFO(*line << " after " << elapsed << " ms");
        CHECK(elapsed >= 290);
        CHECK(elapsed < 300 + kSlackMs);
        CHECK(parse_note(*line)->count == 1);
        CHECK(parse_note(*line)->expected == 2);
      }
      CHECK(no_line_within(*p, note_is("REQUEST_COMPLETE", req), 50ms));
    }
  }
  SECTION("leasing again replaces the lease") {
    REQUIRE(p->command("LEASE again 3 20000", 5000ms) == "OK LEASE");
    REQUIRE(p->command("LEASE again 1 20000", 5000ms) == "OK LEASE");
    read("again", true);
    for (uint32_t r = 0; r < s.p.tp_size; ++r) {
      const auto line = p->take(note_is("REQUEST_COMPLETE", "again", r), 3000ms);
      REQUIRE(line);
      CHECK(parse_note(*line)->expected == 1);
    }
  }
  SECTION("a READ posted with notify 0 tells P nothing") {
    REQUIRE(p->command("LEASE quiet 1 20000", 5000ms) == "OK LEASE");
    read("quiet", false);
    CHECK(d.verify(plan.get()).empty());
    CHECK(no_line_within(*p, note_is("READ_DONE", "quiet"), 300ms));
    for (uint32_t r = 0; r < s.p.tp_size; ++r) CHECK(d.peer_info(r).notifications_sent == 0);
  }
  SECTION("on D: a WRITE lease that expires") {
    const auto t0 = Clock::now();
    E2E_OK(pdkv_agent_lease(d.agent(), "d-ttl", 2, 250, err));
    const auto n = d.take_note(PDKV_NOTIFY_LEASE_EXPIRED, "d-ttl", 3000ms);
    REQUIRE(n);
    CHECK(ms_since(t0) >= 240);
    CHECK(n->count == 0);
    CHECK(n->expected == 2);
    CHECK(n->engine.empty());
  }
}

TEST_CASE("WRITE_DONE comes only after the bytes are in D's memory (D in CALLER mode, held back)",
          "[e2e][write][caller]") {
  const int32_t transport = GENERATE(PDKV_TRANSPORT_TCP, PDKV_TRANSPORT_SHM);
  INFO("over " << transport_name(transport));
  const Scenario& s = scenario("tiny");
  AgentSettings st;
  st.transport = transport;
  st.progress = PDKV_PROGRESS_CALLER;
  DSide d(s, st);
  auto p = PeerProcess::start_peer(peer_args("tiny", transport));
  d.connect_all(*p);
  const PlanPtr plan = d.plan_from_peers();
  E2E_OK(pdkv_agent_lease(d.agent(), "held", 2, 10000, err));
  REQUIRE(p->send("WRITE held 5000 0,1"));
  // Over tcp D's worker is not progressed: P's PUTs cannot land (UCX delivers them through D's
  // worker), so P's flush cannot complete and no WRITE_DONE may arrive. Over shm P copies into
  // D's memory itself (process_vm_writev) and needs nothing from D: whenever a WRITE_DONE comes,
  // its bytes must already be in place (checked below, for both).
  if (transport == PDKV_TRANSPORT_TCP) {
    const auto quiet_until = Clock::now() + 300ms;
    while (Clock::now() < quiet_until) {
      d.poll_notes();
      std::this_thread::sleep_for(5ms);
    }
    for (const Note& n : d.backlog()) CHECK(n.kind != PDKV_NOTIFY_WRITE_DONE);
  }
  // Now progress: each WRITE_DONE finds its rank's bytes in place.
  int done = 0;
  const auto until = Clock::now() + 5000ms;
  while (done < 2 && Clock::now() < until) {
    E2E_OK(pdkv_agent_progress(d.agent(), nullptr, err));
    if (const auto n = d.take_note(PDKV_NOTIFY_WRITE_DONE, "held", 0ms)) {
      done++;
      CHECK(n->status == PDKV_OK);
      const std::string bad = d.verify(plan.get(), n->rank, false);
      INFO("D's bytes from P rank " << n->rank << " when WRITE_DONE arrived: " << bad);
      CHECK(bad.empty());
    }
  }
  CHECK(done == 2);
  REQUIRE(d.take_note(PDKV_NOTIFY_REQUEST_COMPLETE, "held", 2000ms));
  REQUIRE(p->take_prefix("OK WRITE", 5000ms));
  CHECK(d.verify(plan.get()).empty());
}
