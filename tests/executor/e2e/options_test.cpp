// Argument errors of the executor's C API: every refused option, descriptor and parameter gets
// the status the header names and a message that names the offending value. Both ranks live in
// this process (the errors are decided before anything crosses a process boundary).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "d_side.hpp"

using namespace e2e;
using Catch::Contains;

namespace {

struct AgentPtrDeleter {
  void operator()(pdkv_agent_t* a) const { pdkv_agent_free(a); }
};
using AgentPtr = std::unique_ptr<pdkv_agent_t, AgentPtrDeleter>;

Result agent_new(const pdkv_agent_options_t& o) {
  pdkv_agent_t* a = reinterpret_cast<pdkv_agent_t*>(0x1);
  const Result r = call([&](pdkv_error_t** e) { return pdkv_agent_new(&o, &a, e); });
  if (r.ok()) {
    REQUIRE(a != nullptr);
    pdkv_agent_free(a);
  } else {
    REQUIRE(a == nullptr);
  }
  return r;
}

}  // namespace

TEST_CASE("pdkv_agent_new refuses bad options naming the field and value", "[e2e][options]") {
  const Scenario& s = scenario("tiny");
  const MetadataPtr md = s.metadata(s.d, 0, nullptr);
  pdkv_agent_options_t o{};
  o.struct_size = sizeof o;
  o.metadata = md.get();

  SECTION("defaults only") {
    // Unset fields take their defaults whatever their bytes hold.
    o.transport = 77;
    o.progress_mode = 9;
    o.default_timeout_ms = 0;
    o.heartbeat_interval_ms = 9;
    o.heartbeat_timeout_ms = 1;
    o.max_outstanding = 0;
    o.listen_address = "not an address";
    pdkv_agent_t* a = nullptr;
    E2E_OK(pdkv_agent_new(&o, &a, err));
    AgentPtr owner(a);
    pdkv_agent_info_t i{};
    i.struct_size = sizeof i;
    E2E_OK(pdkv_agent_get_info(a, &i, err));
    CHECK(std::string(i.listen_address).rfind("127.0.0.1:", 0) == 0);
    CHECK(i.port != 0);
    CHECK(i.transport == PDKV_TRANSPORT_AUTO);
    CHECK(i.progress_mode == PDKV_PROGRESS_THREAD);
    CHECK(std::string(i.engine_id) == s.d.engine_id);
    CHECK(i.num_peers == 0);
    CHECK(i.transfers_in_flight == 0);
  }
  SECTION("unknown field_mask bits are named") {
    o.field_mask = PDKV_AGENT_FIELD_TRANSPORT | (1ull << 62) | (1ull << 40);
    const Result r = agent_new(o);
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("0x4000010000000000"));
  }
  SECTION("struct_size and NULLs") {
    o.struct_size = 80 - 8;  // a field below the 2.0 size (80, where 2.3's seal_data starts)
    CHECK(agent_new(o).status == PDKV_ERR_STRUCT_SIZE);
    o.struct_size = sizeof o;
    o.metadata = nullptr;
    CHECK(agent_new(o).status == PDKV_ERR_NULL_POINTER);
    pdkv_agent_t* a = nullptr;
    CHECK(call([&](pdkv_error_t** e) { return pdkv_agent_new(nullptr, &a, e); }).status == PDKV_ERR_NULL_POINTER);
    o.metadata = md.get();
    CHECK(call([&](pdkv_error_t** e) { return pdkv_agent_new(&o, nullptr, e); }).status == PDKV_ERR_NULL_POINTER);
    o.field_mask = PDKV_AGENT_FIELD_LISTEN_ADDRESS;
    o.listen_address = nullptr;
    CHECK(agent_new(o).status == PDKV_ERR_NULL_POINTER);
  }
  SECTION("bad listen addresses are named") {
    o.field_mask = PDKV_AGENT_FIELD_LISTEN_ADDRESS;
    for (const char* bad : {"127.0.0.1", "127.0.0.1:99999", "127.0.0.1:port", "", ":5", "300.1.2.3:0"}) {
      o.listen_address = bad;
      const Result r = agent_new(o);
      INFO("'" << bad << "': " << pdkv_status_name(r.status) << ": " << r.message);
      CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
      if (*bad != 0) CHECK_THAT(r.message, Contains(bad));
    }
  }
  SECTION("an address that cannot be bound is IO, naming it") {
    // A port in use.
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(listen(fd, 1) == 0);
    socklen_t len = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    const std::string busy = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
    o.field_mask = PDKV_AGENT_FIELD_LISTEN_ADDRESS;
    o.listen_address = busy.c_str();
    Result r = agent_new(o);
    INFO(r.message);
    CHECK(r.status == PDKV_ERR_IO);
    CHECK_THAT(r.message, Contains(busy));
    close(fd);
    // An address no interface of this machine has (TEST-NET-1).
    o.listen_address = "192.0.2.1:0";
    r = agent_new(o);
    INFO(r.message);
    CHECK(r.status == PDKV_ERR_IO);
    CHECK_THAT(r.message, Contains("192.0.2.1"));
  }
  SECTION("keys shorter than 16 bytes, or NULL with a length") {
    o.field_mask = PDKV_AGENT_FIELD_PRESHARED_KEY;
    const uint8_t key[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    o.preshared_key = key;
    o.preshared_key_len = 15;
    Result r = agent_new(o);
    INFO(r.message);
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("15") && Contains("16"));
    o.preshared_key_len = 16;
    CHECK(agent_new(o).ok());
    o.preshared_key = nullptr;
    o.preshared_key_len = 20;
    r = agent_new(o);
    CHECK(r.status == PDKV_ERR_NULL_POINTER);
    CHECK_THAT(r.message, Contains("20"));
    o.preshared_key_len = 0;  // NULL with length 0: no key
    CHECK(agent_new(o).ok());
  }
  SECTION("enums, timeouts, heartbeats and the window") {
    o.field_mask = PDKV_AGENT_FIELD_TRANSPORT;
    o.transport = 3;
    Result r = agent_new(o);
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("transport 3"));
    o.field_mask = PDKV_AGENT_FIELD_PROGRESS_MODE;
    o.progress_mode = -1;
    r = agent_new(o);
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("progress_mode -1"));
    o.field_mask = PDKV_AGENT_FIELD_DEFAULT_TIMEOUT;
    o.default_timeout_ms = 0;
    r = agent_new(o);
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("default_timeout_ms"));
    o.field_mask = PDKV_AGENT_FIELD_HEARTBEAT;
    o.heartbeat_interval_ms = 500;
    o.heartbeat_timeout_ms = 500;
    r = agent_new(o);
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("heartbeat_timeout_ms 500") && Contains("heartbeat_interval_ms 500"));
    o.heartbeat_interval_ms = 0;
    o.heartbeat_timeout_ms = 500;
    r = agent_new(o);
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("heartbeat_interval_ms"));
    o.field_mask = PDKV_AGENT_FIELD_MAX_OUTSTANDING;
    o.max_outstanding = 0;
    r = agent_new(o);
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("max_outstanding"));
  }
}

TEST_CASE("Registration, connect, post and lease errors name the value", "[e2e][options]") {
  const Scenario& s = scenario("tiny");
  AgentSettings st;
  st.transport = PDKV_TRANSPORT_SHM;
  DSide d(s, st);
  RankAgent p0(s, true, 0, st), p1(s, true, 1, st);

  SECTION("memory descriptors") {
    RankMemory& m = d.rank().memory();
    pdkv_memory_desc_t md{};
    md.struct_size = sizeof md;
    md.region = 0;
    md.address = reinterpret_cast<uint64_t>(m.region(0));
    md.length = m.region_size(0);
    pdkv_memory_t* out = nullptr;
    auto reg = [&] {
      out = nullptr;
      const Result r = call([&](pdkv_error_t** e) { return pdkv_agent_register_memory(d.agent(), &md, &out, e); });
      if (!r.ok()) REQUIRE(out == nullptr);
      pdkv_memory_free(out);
      return r;
    };
    Result r = reg();  // already registered by the D side
    CHECK(r.status == PDKV_ERR_BUSY);
    CHECK_THAT(r.message, Contains("region 0"));
    md.region = 7;
    r = reg();
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("region 7") && Contains("3 regions"));
    md.region = 1;
    md.address = reinterpret_cast<uint64_t>(m.region(1));
    md.length = m.region_size(1) - 4096;
    r = reg();
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains(std::to_string(m.region_size(1) - 4096)) &&
                              Contains(std::to_string(m.region_size(1))));
    md.length = m.region_size(1);
    md.field_mask = PDKV_MEMORY_FIELD_MEMORY_TYPE;
    md.memory_type = PDKV_MEMORY_CUDA;
    r = reg();
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("CUDA"));
    md.field_mask = 1ull << 5;
    r = reg();
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("0x20"));
    md.field_mask = 0;
    md.struct_size = 8;
    CHECK(reg().status == PDKV_ERR_STRUCT_SIZE);
    CHECK(call([&](pdkv_error_t** e) { return pdkv_memory_deregister(nullptr, e); }).status == PDKV_ERR_NULL_POINTER);
    pdkv_memory_free(nullptr);
  }
  SECTION("connect") {
    pdkv_connect_options_t co{};
    co.struct_size = sizeof co;
    pdkv_peer_t* peer = nullptr;
    auto connect = [&] {
      peer = nullptr;
      const Result r = call([&](pdkv_error_t** e) { return pdkv_agent_connect(d.agent(), &co, &peer, e); });
      if (!r.ok()) REQUIRE(peer == nullptr);
      pdkv_peer_free(peer);
      return r;
    };
    CHECK(connect().status == PDKV_ERR_NULL_POINTER);  // no address
    co.address = "nowhere";
    Result r = connect();
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("nowhere"));
    // Refused: a port with nothing listening (bound, then closed).
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    socklen_t len = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    close(fd);
    const std::string closed = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
    co.address = closed.c_str();
    r = connect();
    CHECK(r.status == PDKV_ERR_PEER_LOST);
    CHECK_THAT(r.message, Contains(closed));
    co.field_mask = 1ull << 3;
    r = connect();
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("0x8"));
    // find_peer of a rank that is not connected names it.
    pdkv_peer_t* none = nullptr;
    r = call([&](pdkv_error_t** e) { return pdkv_agent_find_peer(d.agent(), "tiny-p", 5, &none, e); });
    CHECK(r.status == PDKV_ERR_NOT_FOUND);
    CHECK_THAT(r.message, Contains("tiny-p") && Contains("5"));
  }
  SECTION("post") {
    // Only P rank 0 connected: the plan also needs rank 1.
    PeerPtr peer0;
    REQUIRE(d.connect(p0.address(), 3000, &peer0).ok());
    std::vector<const pdkv_engine_metadata_t*> mds{p0.memory().metadata(), p1.memory().metadata()};
    const PlanPtr plan = s.plan(d.rank().memory().metadata(), mds);
    TransferPtr t;
    Result r = d.post(plan.get(), "x", 1000, &t);
    CHECK(r.status == PDKV_ERR_NOT_FOUND);
    CHECK_THAT(r.message, Contains("tiny-p") && Contains("rank 1"));
    REQUIRE(d.connect(p1.address(), 3000).ok());
    CHECK(d.post(plan.get(), "", 1000, &t).status == PDKV_ERR_INVALID_ARGUMENT);
    r = d.post(plan.get(), std::string(1025, 'r'), 1000, &t);
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("1025"));
    CHECK(d.post(plan.get(), std::string(1024, 'r'), 1000, &t).ok());
    CHECK(d.wait(t.get(), 3000).ok());
    // Raw parameters: unknown bits, op, NULL plan, NULL peer, struct_size.
    pdkv_transfer_params_t tp{};
    tp.struct_size = sizeof tp;
    tp.op = PDKV_TRANSFER_READ;
    tp.plan = plan.get();
    tp.peer_engine_id = "tiny-p";
    tp.request_id = "raw";
    pdkv_transfer_t* raw = nullptr;
    auto post = [&] {
      raw = nullptr;
      const Result pr = call([&](pdkv_error_t** e) { return pdkv_agent_post(d.agent(), &tp, &raw, e); });
      if (pr.ok()) {
        uint8_t finished = 0;
        pdkv_transfer_wait(raw, 3000, &finished, nullptr);
      } else {
        REQUIRE(raw == nullptr);
      }
      pdkv_transfer_free(raw);
      return pr;
    };
    CHECK(post().ok());
    tp.field_mask = 1ull << 9;
    r = post();
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("0x200"));
    tp.field_mask = 0;
    tp.op = 5;
    r = post();
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("5"));
    tp.op = PDKV_TRANSFER_READ;
    tp.plan = nullptr;
    CHECK(post().status == PDKV_ERR_NULL_POINTER);
    tp.plan = plan.get();
    tp.peer_engine_id = nullptr;
    CHECK(post().status == PDKV_ERR_NULL_POINTER);
    tp.peer_engine_id = "tiny-p";
    tp.struct_size = 16;
    CHECK(post().status == PDKV_ERR_STRUCT_SIZE);
    tp.struct_size = sizeof tp;
    tp.field_mask = PDKV_TRANSFER_FIELD_TIMEOUT;
    tp.timeout_ms = 0;
    CHECK(post().status == PDKV_ERR_INVALID_ARGUMENT);
    // A plan for another D rank: names both ranks. Compiled as D rank 0 of TP 1 by a D of TP 2.
    Scenario other = s;
    other.d.tp_size = 2;
    other.d_rank = 1;
    const MetadataPtr d1 = other.metadata(other.d, 1, nullptr);
    const PlanPtr wrong = other.plan(d1.get(), mds);
    tp.field_mask = 0;
    tp.plan = wrong.get();
    r = post();
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("rank 1") && Contains("rank 0"));
  }
  SECTION("lease and notification lists") {
    CHECK(call([&](pdkv_error_t** e) { return pdkv_agent_lease(d.agent(), "r", 0, 100, e); }).status ==
          PDKV_ERR_INVALID_ARGUMENT);
    CHECK(call([&](pdkv_error_t** e) { return pdkv_agent_lease(d.agent(), "r", 1, 0, e); }).status ==
          PDKV_ERR_INVALID_ARGUMENT);
    CHECK(call([&](pdkv_error_t** e) { return pdkv_agent_lease(d.agent(), "", 1, 100, e); }).status ==
          PDKV_ERR_INVALID_ARGUMENT);
    CHECK(call([&](pdkv_error_t** e) { return pdkv_agent_lease(d.agent(), nullptr, 1, 100, e); }).status ==
          PDKV_ERR_NULL_POINTER);
    pdkv_notification_list_t* list = nullptr;
    E2E_OK(pdkv_agent_poll_notifications(d.agent(), &list, err));
    const pdkv_notification_t* items = nullptr;
    size_t n = 0;
    E2E_OK(pdkv_notification_list_items(list, &items, &n, err));
    CHECK((n == 0) == (items == nullptr));
    Result r = call([&](pdkv_error_t** e) { return pdkv_notification_list_items(list, nullptr, &n, e); });
    CHECK(r.status == PDKV_ERR_NULL_POINTER);
    CHECK_THAT(r.message, Contains("items"));
    r = call([&](pdkv_error_t** e) { return pdkv_notification_list_items(nullptr, &items, &n, e); });
    CHECK(r.status == PDKV_ERR_NULL_POINTER);
    CHECK_THAT(r.message, Contains("list"));
    pdkv_notification_list_free(list);
    pdkv_notification_list_free(nullptr);
  }
}
