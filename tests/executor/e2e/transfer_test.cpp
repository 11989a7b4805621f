// Two processes on loopback, over tcp and over shm: the P ranks of each request shape of the
// plan tests live in pdkv_test_peer, the D rank in this process. A READ posted on D, then a WRITE
// posted by the P ranks, of the same plan; every byte D holds afterwards is checked (planned bytes
// equal P's pattern, every other byte untouched), each notification is checked to follow the data
// it announces, leases complete, and the per-peer counters add up on both sides.
#include <sys/wait.h>

#include <algorithm>
#include <sstream>

#include "d_side.hpp"

using namespace e2e;

namespace {

uint64_t rank_bytes(const pdkv_transfer_plan_t* plan, uint32_t r) {
  uint64_t b = 0;
  for (const auto& rd : rank_reads(plan, r)) b += rd.length;
  return b;
}

std::string join(const std::vector<uint32_t>& v) {
  std::string s;
  for (uint32_t x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

}  // namespace

TEST_CASE("READ then WRITE of every plan-test request shape between two processes", "[e2e][transfer]") {
  const std::string name = GENERATE(as<std::string>{}, "nano-align", "nano-full-hit", "mla", "gqa");
  const int32_t transport = GENERATE(PDKV_TRANSPORT_TCP, PDKV_TRANSPORT_SHM);
  const Scenario& s = scenario(name);
  INFO("scenario " << name << " (" << s.description << ") over " << transport_name(transport));
  const auto t0 = Clock::now();

  auto p = PeerProcess::start_peer(peer_args(name, transport));
  INFO("peer output:\n" << p->transcript());
  AgentSettings st;
  st.transport = transport;
  DSide d(s, st);
  d.connect_all(*p);
  for (const auto& [rank, port] : p->ports()) {
    const auto i = d.peer_info(rank);
    CHECK(i.transport == transport);
  }
  const PlanPtr plan = d.plan_from_peers();
  const auto pi = plan_info(plan.get());
  const auto readers = read_ranks(plan.get());
  const auto notified = notify_ranks(plan.get());
  REQUIRE(!notified.empty());
  if (name == "nano-full-hit") {
    REQUIRE(pi.empty == 1);
  } else {
    REQUIRE(pi.bytes > 0);
  }

  // ---- READ on D. P leases the request for the notifications it expects per request.
  REQUIRE(p->command("LEASE r1 " + std::to_string(pi.notifications_per_p_rank) + " 20000", 5000ms) == "OK LEASE");
  TransferPtr t;
  const Result posted = d.post(plan.get(), "r1", 5000, &t);
  INFO(posted.message);
  REQUIRE(posted.ok());
  // Each notified P rank hears READ_DONE only once D holds every byte read from it: checked the
  // moment the notification shows up, before D's own wait returns.
  for (uint32_t r : notified) {
    const auto line = p->take(note_is("READ_DONE", "r1", r), 5000ms);
    REQUIRE(line);
    const auto n = parse_note(*line);
    CHECK(n->status == "PDKV_OK");
    CHECK(n->engine == s.d.engine_id);
    CHECK(n->remote_rank == s.d_rank);
    CHECK(n->bytes == rank_bytes(plan.get(), r));
    const std::string bad = d.verify(plan.get(), r, false);
    INFO("D's bytes from P rank " << r << " when it was told READ_DONE: " << bad);
    CHECK(bad.empty());
  }
  bool finished = false;
  const Result waited = d.wait(t.get(), 5000, &finished);
  INFO(waited.message);
  REQUIRE(waited.ok());
  REQUIRE(finished);
  auto ti = DSide::info(t.get());
  CHECK(ti.state == PDKV_TRANSFER_DONE);
  CHECK(ti.status == PDKV_OK);
  CHECK(ti.bytes_total == pi.bytes);
  CHECK(ti.bytes_done == pi.bytes);
  CHECK(ti.operations_done == ti.operations_total);
  CHECK(ti.reads_failed == 0);
  CHECK(DSide::failed_reads(t.get()).empty());
  {
    const std::string bad = d.verify(plan.get());
    INFO(bad);
    CHECK(bad.empty());
  }
  for (uint32_t r : notified) {
    const auto line = p->take(note_is("REQUEST_COMPLETE", "r1", r), 5000ms);
    REQUIRE(line);
    const auto n = parse_note(*line);
    CHECK(n->count == pi.notifications_per_p_rank);
    CHECK(n->expected == pi.notifications_per_p_rank);
  }
  // D's counters per P rank: bytes read from each, a transfer done with each rank it read from,
  // a notification sent to each notified rank.
  for (uint32_t r = 0; r < s.p.tp_size; ++r) {
    const auto i = d.peer_info(r);
    INFO("D's counters of P rank " << r);
    CHECK(i.bytes_read == rank_bytes(plan.get(), r));
    CHECK(i.bytes_written == 0);
    const bool reads = std::find(readers.begin(), readers.end(), r) != readers.end();
    CHECK(i.transfers_done == (reads ? 1u : 0u));
    CHECK(i.transfers_failed == 0);
    CHECK(i.operations_failed == 0);
    const bool notifies = std::find(notified.begin(), notified.end(), r) != notified.end();
    CHECK(i.notifications_sent == (notifies ? 1u : 0u));
  }
  t.reset();

  // ---- WRITE by the P ranks into D (D was reset to its untouched pattern first). The ranks that
  // post are those with reads (the notified ones for an empty plan), D expects one WRITE_DONE each.
  d.reset_memory();
  const std::vector<uint32_t> writers = readers.empty() ? notified : readers;
  E2E_OK(pdkv_agent_lease(d.agent(), "w1", static_cast<uint32_t>(writers.size()), 20000, err));
  REQUIRE(p->send("WRITE w1 5000 " + join(writers)));
  for (size_t k = 0; k < writers.size(); ++k) {
    const auto n = d.take_note(PDKV_NOTIFY_WRITE_DONE, "w1", 5000ms);
    REQUIRE(n);
    CHECK(n->status == PDKV_OK);
    CHECK(n->engine == s.p.engine_id);
    CHECK(n->bytes == rank_bytes(plan.get(), n->rank));
    // WRITE_DONE follows the flush: every byte of that rank is in D's memory now.
    const std::string bad = d.verify(plan.get(), n->rank, false);
    INFO("D's bytes from P rank " << n->rank << " when WRITE_DONE arrived: " << bad);
    CHECK(bad.empty());
  }
  const auto done = d.take_note(PDKV_NOTIFY_REQUEST_COMPLETE, "w1", 5000ms);
  REQUIRE(done);
  CHECK(done->count == writers.size());
  CHECK(done->expected == writers.size());
  REQUIRE(p->take_prefix("OK WRITE", 5000ms));
  for (uint32_t r : writers) {
    const auto line = p->take_prefix("WRITTEN " + std::to_string(r) + " ", 1000ms);
    REQUIRE(line);
    std::istringstream in(*line);
    std::string tag, status;
    uint32_t rank = 0;
    uint64_t bytes = 0;
    in >> tag >> rank >> status >> bytes;
    CHECK(status == "PDKV_OK");
    CHECK(bytes == rank_bytes(plan.get(), r));
  }
  {
    const std::string bad = d.verify(plan.get());
    INFO(bad);
    CHECK(bad.empty());
  }
  // P's counters of the D peer: the bytes each rank wrote, one transfer each, one WRITE_DONE sent.
  const auto reply = p->command("PEERINFO " + s.d.engine_id + " " + std::to_string(s.d_rank), 5000ms);
  REQUIRE(reply == "OK PEERINFO");
  for (const auto& [rank, port] : p->ports()) {
    const auto line = p->take_prefix("PEERINFO " + std::to_string(rank) + " ", 2000ms);
    REQUIRE(line);
    std::istringstream in(*line);
    std::string tag;
    uint32_t r = 0;
    int connected = 0;
    uint64_t bytes_read = 0, bytes_written = 0, tdone = 0, tfailed = 0, ofailed = 0, sent = 0, received = 0;
    in >> tag >> r >> connected >> bytes_read >> bytes_written >> tdone >> tfailed >> ofailed >> sent >> received;
    INFO("P rank " << r << "'s counters of D: " << *line);
    const bool wrote = std::find(writers.begin(), writers.end(), r) != writers.end();
    const bool notifies = std::find(notified.begin(), notified.end(), r) != notified.end();
    CHECK(connected == 1);
    CHECK(bytes_read == 0);
    CHECK(bytes_written == (wrote ? rank_bytes(plan.get(), r) : 0u));
    CHECK(tdone == (wrote ? 1u : 0u));
    CHECK(tfailed == 0);
    CHECK(ofailed == 0);
    CHECK(sent == (wrote ? 1u : 0u));
    CHECK(received == (notifies ? 1u : 0u));
  }
  // D's side of the WRITE: notifications received from each writer, no bytes counted as read.
  for (uint32_t r : writers) {
    const auto i = d.peer_info(r);
    CHECK(i.notifications_received == 1);
    CHECK(i.bytes_read == rank_bytes(plan.get(), r));  // the READ's, unchanged by the WRITE
  }

  REQUIRE(p->send("QUIT"));
  REQUIRE(p->take_prefix("BYE", 10000ms));
  const auto status = p->wait_exit(10000ms);
  REQUIRE(status);
  CHECK(WIFEXITED(*status));
  CHECK(WEXITSTATUS(*status) == 0);
  // The P ranks said Bye: D sees each one lost.
  for (const auto& [rank, port] : p->ports()) {
    const auto n = d.take_note(PDKV_NOTIFY_PEER_LOST, "", 5000ms, rank);
    CHECK(n);
  }
  WARN("scenario " << name << " over " << transport_name(transport) << ": " << ms_since(t0) << " ms");
}
