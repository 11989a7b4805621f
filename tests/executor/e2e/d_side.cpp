#include "d_side.hpp"

#include <algorithm>
#include <atomic>
#include <thread>

namespace e2e {

const char* transport_name(int32_t t) {
  switch (t) {
    case PDKV_TRANSPORT_SHM: return "shm";
    case PDKV_TRANSPORT_TCP: return "tcp";
    default: return "auto";
  }
}

std::vector<std::string> peer_args(const std::string& scenario, int32_t transport, const std::vector<std::string>& extra) {
  std::vector<std::string> a{"--scenario", scenario, "--transport", transport_name(transport), "--hb-interval", "100",
                             "--hb-timeout", "1500", "--timeout", "5000"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

DSide::DSide(const Scenario& s, const AgentSettings& settings)
    : s_(s), settings_(settings), d_(s, false, s.d_rank, settings) {}

Result DSide::connect(const std::string& address, uint64_t timeout_ms, PeerPtr* out) {
  pdkv_connect_options_t co{};
  co.struct_size = sizeof co;
  co.field_mask = PDKV_CONNECT_FIELD_TIMEOUT;
  co.address = address.c_str();
  co.timeout_ms = timeout_ms;
  pdkv_peer_t* peer = nullptr;
  std::atomic<bool> connecting{true};
  std::thread loop;
  if (settings_.progress == PDKV_PROGRESS_CALLER) {
    loop = std::thread([&] {
      while (connecting) {
        pdkv_agent_progress(agent(), nullptr, nullptr);
        std::this_thread::sleep_for(1ms);
      }
    });
  }
  const Result r = call([&](pdkv_error_t** e) { return pdkv_agent_connect(agent(), &co, &peer, e); });
  connecting = false;
  if (loop.joinable()) loop.join();
  if (r.ok()) {
    REQUIRE(peer != nullptr);
  } else {
    REQUIRE(peer == nullptr);
  }
  if (out) {
    out->reset(peer);
  } else {
    pdkv_peer_free(peer);
  }
  return r;
}

void DSide::connect_all(const PeerProcess& p, const std::string& host, uint64_t timeout_ms) {
  for (const auto& [rank, port] : p.ports()) {
    PeerPtr peer;
    const Result r = connect(host + ":" + std::to_string(port), timeout_ms, &peer);
    INFO("connect to P rank " << rank << ": " << pdkv_status_name(r.status) << ": " << r.message);
    REQUIRE(r.ok());
    pdkv_peer_info_t i{};
    i.struct_size = sizeof i;
    E2E_OK(pdkv_peer_get_info(peer.get(), &i, err));
    CHECK(std::string(i.engine_id) == s_.p.engine_id);
    CHECK(i.tp_rank == rank);
    CHECK(i.connected == 1);
    CHECK(i.inbound == 0);
    CHECK(i.lost_status == PDKV_OK);
  }
}

PeerPtr DSide::peer(uint32_t p_rank) const {
  pdkv_peer_t* p = nullptr;
  E2E_OK(pdkv_agent_find_peer(agent(), s_.p.engine_id.c_str(), p_rank, &p, err));
  return PeerPtr(p);
}

pdkv_peer_info_t DSide::peer_info(uint32_t p_rank) const {
  const PeerPtr p = peer(p_rank);
  pdkv_peer_info_t i{};
  i.struct_size = sizeof i;
  E2E_OK(pdkv_peer_get_info(p.get(), &i, err));
  // engine_id and address are owned by the handle, freed here: keep only the scalars.
  i.engine_id = nullptr;
  i.address = nullptr;
  return i;
}

PlanPtr DSide::plan_from_peers() const {
  std::vector<MetadataPtr> owned;
  std::vector<const pdkv_engine_metadata_t*> mds;
  for (uint32_t r = 0; r < s_.p.tp_size; ++r) {
    const PeerPtr p = peer(r);
    pdkv_engine_metadata_t* md = nullptr;
    E2E_OK(pdkv_peer_metadata(p.get(), &md, err));
    owned.emplace_back(md);
    mds.push_back(md);
  }
  return s_.plan(d_.memory().metadata(), mds);
}

Result DSide::post(const pdkv_transfer_plan_t* plan, const std::string& request, uint64_t timeout_ms, TransferPtr* out,
                   int32_t op, bool notify) {
  pdkv_transfer_params_t tp{};
  tp.struct_size = sizeof tp;
  tp.field_mask = PDKV_TRANSFER_FIELD_TIMEOUT | PDKV_TRANSFER_FIELD_NOTIFY;
  tp.op = op;
  tp.plan = plan;
  tp.peer_engine_id = op == PDKV_TRANSFER_READ ? s_.p.engine_id.c_str() : s_.d.engine_id.c_str();
  tp.request_id = request.c_str();
  tp.timeout_ms = timeout_ms;
  tp.notify = notify ? 1 : 0;
  pdkv_transfer_t* t = nullptr;
  const Result r = call([&](pdkv_error_t** e) { return pdkv_agent_post(agent(), &tp, &t, e); });
  if (r.ok()) {
    REQUIRE(t != nullptr);
  } else {
    REQUIRE(t == nullptr);
  }
  out->reset(t);
  return r;
}

Result DSide::wait(pdkv_transfer_t* t, uint64_t ms, bool* finished) {
  uint8_t f = 0;
  const Result r = call([&](pdkv_error_t** e) { return pdkv_transfer_wait(t, ms, &f, e); });
  if (finished) *finished = f != 0;
  return r;
}

pdkv_transfer_info_t DSide::info(const pdkv_transfer_t* t) {
  pdkv_transfer_info_t i{};
  i.struct_size = sizeof i;
  E2E_OK(pdkv_transfer_get_info(t, &i, err));
  return i;
}

std::vector<pdkv_failed_read_t> DSide::failed_reads(const pdkv_transfer_t* t) {
  const pdkv_failed_read_t* reads = nullptr;
  size_t n = 0;
  E2E_OK(pdkv_transfer_failed_reads(t, &reads, &n, err));
  return n == 0 ? std::vector<pdkv_failed_read_t>{} : std::vector<pdkv_failed_read_t>(reads, reads + n);
}

void DSide::poll_notes() {
  pdkv_notification_list_t* list = nullptr;
  E2E_OK(pdkv_agent_poll_notifications(agent(), &list, err));
  const pdkv_notification_t* items = nullptr;
  size_t n = 0;
  E2E_OK(pdkv_notification_list_items(list, &items, &n, err));
  for (size_t i = 0; i < n; ++i) {
    const pdkv_notification_t& x = items[i];
    notes_.push_back({x.kind, static_cast<pdkv_status_t>(x.status), x.request_id, x.engine_id, x.tp_rank, x.count,
                      x.expected, x.bytes});
  }
  pdkv_notification_list_free(list);
}

std::optional<Note> DSide::take_note(int32_t kind, const std::string& request, Ms within, int64_t remote_rank) {
  const auto until = Clock::now() + within;
  for (;;) {
    poll_notes();
    for (size_t i = 0; i < notes_.size(); ++i) {
      const Note& n = notes_[i];
      if (n.kind == kind && (request.empty() || n.request == request) &&
          (remote_rank < 0 || n.rank == static_cast<uint32_t>(remote_rank))) {
        Note out = n;
        notes_.erase(notes_.begin() + static_cast<std::ptrdiff_t>(i));
        return out;
      }
    }
    if (Clock::now() >= until) return std::nullopt;
    std::this_thread::sleep_for(1ms);
  }
}

void DSide::reset_memory() {
  RankMemory& m = d_.memory();
  for (uint32_t r = 0; r < m.num_regions(); ++r) {
    fill_pattern(m.region(r), m.region_size(r), untouched_engine(s_.d.engine_id), m.rank(), r, 0);
  }
}

void check_failed_reads(const pdkv_transfer_t* t, const pdkv_transfer_plan_t* plan, pdkv_status_t status) {
  const auto info = DSide::info(t);
  REQUIRE(info.state == PDKV_TRANSFER_FAILED);
  const auto failed = DSide::failed_reads(t);
  CHECK(failed.size() == info.reads_failed);
  CHECK(!failed.empty());
  for (size_t i = 0; i < failed.size(); ++i) {
    const auto& f = failed[i];
    INFO("failed read " << i << ": P rank " << f.p_tp_rank << " index " << f.read_index);
    CHECK(f.status == status);
    CHECK(f.read_index < rank_reads(plan, f.p_tp_rank).size());
    if (i > 0) {
      const auto& g = failed[i - 1];
      CHECK((g.p_tp_rank < f.p_tp_rank || (g.p_tp_rank == f.p_tp_rank && g.read_index < f.read_index)));
    }
  }
}

}  // namespace e2e
