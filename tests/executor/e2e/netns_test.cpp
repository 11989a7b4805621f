// P and D in separate network namespaces joined by a veth pair: the P process runs inside a new
// namespace (`ip netns exec`), D in the test's own; everything crosses the veth link over tcp.
// Then the link is cut mid-transfer, repeatedly: the transfer fails PEER_LOST within its
// deadline and D serves a fresh peer once the link is back. Skipped with a message where the
// machine does not permit namespaces (not root, no iproute2, no veth).
#include <signal.h>

#include <thread>

#include "d_side.hpp"
#include "support/netns.hpp"

using namespace e2e;
using pdkv::test_support::VethNamespace;
using pdkv::test_support::VethUser;

namespace {

std::unique_ptr<PeerProcess> start_in(const VethNamespace& ns, const std::string& scenario_name) {
  auto args = peer_args(scenario_name, PDKV_TRANSPORT_TCP, {"--listen", ns.ns_ip(), "--hb-timeout", "5000"});
  return PeerProcess::start_peer(args, 20000ms, ns.exec_prefix());
}

void read_and_verify(DSide& d, const std::string& req) {
  const PlanPtr plan = d.plan_from_peers();
  d.reset_memory();
  TransferPtr t;
  const Result r = d.post(plan.get(), req, 3000, &t);
  INFO(r.message);
  REQUIRE(r.ok());
  const Result w = d.wait(t.get(), 5000);
  INFO(w.message);
  REQUIRE(w.ok());
  const std::string bad = d.verify(plan.get());
  INFO(bad);
  CHECK(bad.empty());
}

}  // namespace

TEST_CASE("P in another network namespace over veth: transfers, and the link cut mid-transfer",
          "[e2e][netns]") {
  std::string why;
  const auto ns = VethNamespace::create(VethUser::E2eTest, &why);
  if (!ns) {
    WARN("SKIPPED: P and D in separate network namespaces need root and iproute2 here: " << why);
    return;
  }
  const Scenario& s = scenario("nano-align");
  AgentSettings st;
  st.transport = PDKV_TRANSPORT_TCP;
  st.listen = ns->host_ip() + ":0";
  st.heartbeat_interval_ms = 100;
  st.heartbeat_timeout_ms = 600;
  DSide d(s, st);
  auto p = start_in(*ns, "nano-align");

  // READ and WRITE across the namespaces, every byte checked.
  d.connect_all(*p, ns->ns_ip());
  for (uint32_t r = 0; r < s.p.tp_size; ++r) {
    const PeerPtr peer = d.peer(r);
    pdkv_peer_info_t i{};
    i.struct_size = sizeof i;
    E2E_OK(pdkv_peer_get_info(peer.get(), &i, err));
    CHECK(std::string(i.address).rfind(ns->ns_ip() + ":", 0) == 0);
    CHECK(i.transport == PDKV_TRANSPORT_TCP);
  }
  const uint64_t rx0 = ns->host_rx_bytes();
  read_and_verify(d, "veth-read");
  // The bytes crossed the veth link (not a loopback or shared-memory shortcut).
  CHECK(ns->host_rx_bytes() - rx0 >= plan_info(d.plan_from_peers().get()).bytes);
  {
    const PlanPtr plan = d.plan_from_peers();
    d.reset_memory();
    const auto readers = read_ranks(plan.get());
    std::string list;
    for (uint32_t r : readers) list += (list.empty() ? "" : ",") + std::to_string(r);
    E2E_OK(pdkv_agent_lease(d.agent(), "veth-write", static_cast<uint32_t>(readers.size()), 10000, err));
    REQUIRE(p->send("WRITE veth-write 5000 " + list));
    REQUIRE(d.take_note(PDKV_NOTIFY_REQUEST_COMPLETE, "veth-write", 5000ms));
    REQUIRE(p->take_prefix("OK WRITE", 5000ms));
    const std::string bad = d.verify(plan.get());
    INFO(bad);
    CHECK(bad.empty());
  }

  // The link cut mid-transfer: P is stopped first so the GETs are surely in flight, the link
  // goes down, P resumes behind the dead link. D's heartbeats (600 ms) fail the transfer with
  // PEER_LOST before its 2 s deadline.
  for (int rep = 0; rep < 3; ++rep) {
    INFO("repetition " << rep);
    const PlanPtr plan = d.plan_from_peers();
    d.reset_memory();
    p->stop();
    TransferPtr t;
    const auto t0 = Clock::now();
    REQUIRE(d.post(plan.get(), "cut-" + std::to_string(rep), 2000, &t).ok());
    std::this_thread::sleep_for(20ms);
    REQUIRE(DSide::info(t.get()).state == PDKV_TRANSFER_IN_FLIGHT);
    ns->set_link(false);
    p->resume();
    bool finished = false;
    const Result w = d.wait(t.get(), 4000, &finished);
    const int64_t elapsed = ms_since(t0);
    INFO(pdkv_status_name(w.status) << ": " << w.message << " after " << elapsed << " ms");
    REQUIRE(finished);
    CHECK(w.status == PDKV_ERR_PEER_LOST);
    CHECK(elapsed < 2000);
    check_failed_reads(t.get(), plan.get(), PDKV_ERR_PEER_LOST);
    CHECK(d.verify(plan.get(), 1 << 20, true).empty());
    for (uint32_t r = 0; r < s.p.tp_size; ++r) CHECK(d.take_note(PDKV_NOTIFY_PEER_LOST, "", 3000ms, r));
    ns->set_link(true);
    p->signal(SIGKILL);
    REQUIRE(p->wait_exit(5000ms));
    p = start_in(*ns, "nano-align");
    d.connect_all(*p, ns->ns_ip());
    read_and_verify(d, "after-cut-" + std::to_string(rep));
  }
}
