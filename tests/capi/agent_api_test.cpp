// C API tests of pdkv/agent.h: every NULL, struct_size, field_mask and enum refusal names the
// offending argument or value; unset fields are ignored whatever their bytes hold; and the
// executor's handles may be freed in any order, also while a transfer is in flight (run under
// ASan in CI: a use after free fails there).
#include <poll.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "agent_nodes.hpp"
#include "capi_helpers.hpp"

using Catch::Matchers::Contains;

using namespace capi_agent;  // NOLINT(google-build-using-namespace): the shared helpers of agent_nodes.hpp

TEST_CASE("pdkv_agent_new refuses each bad argument naming it", "[agent]") {
  auto m = tiny_model();
  auto md = metadata(m.get(), "pre", nullptr);
  pdkv_agent_t* a = nullptr;

  auto r = capture([&](pdkv_error_t** e) { return pdkv_agent_new(nullptr, &a, e); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(r.message, Contains("options"));
  auto o = options(md.get());
  r = capture([&](pdkv_error_t** e) { return pdkv_agent_new(&o, nullptr, e); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(r.message, Contains("out"));

  SECTION("struct_size") {
    for (size_t s : {size_t{0}, sizeof(pdkv_agent_options_t) - 1, sizeof(pdkv_agent_options_t) + 1}) {
      o.struct_size = s;
      r = new_agent_fails(o);
      CHECK(r.status == PDKV_ERR_STRUCT_SIZE);
      CHECK_THAT(r.message, Contains("pdkv_agent_options_t.struct_size = " + std::to_string(s)));
    }
  }
  SECTION("unknown field_mask bits") {
    o.field_mask = PDKV_AGENT_FIELD_TRANSPORT | (1ULL << 40);
    r = new_agent_fails(o);
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("0x10000000000"));
  }
  SECTION("metadata") {
    o.metadata = nullptr;
    r = new_agent_fails(o);
    CHECK(r.status == PDKV_ERR_NULL_POINTER);
    CHECK_THAT(r.message, Contains("options->metadata"));
  }
  SECTION("enums") {
    o.field_mask = PDKV_AGENT_FIELD_TRANSPORT;
    o.transport = 7;
    r = new_agent_fails(o);
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("transport 7"));
    o.field_mask = PDKV_AGENT_FIELD_PROGRESS_MODE;
    o.transport = 0;
    o.progress_mode = -3;
    r = new_agent_fails(o);
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("progress_mode -3"));
  }
  SECTION("times and counts") {
    o.field_mask = PDKV_AGENT_FIELD_DEFAULT_TIMEOUT;
    r = new_agent_fails(o);
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("default_timeout_ms"));
    o.default_timeout_ms = UINT64_MAX;
    r = new_agent_fails(o);
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains(std::to_string(UINT64_MAX)));
    o.field_mask = PDKV_AGENT_FIELD_HEARTBEAT;
    o.heartbeat_interval_ms = 0;
    o.heartbeat_timeout_ms = 100;
    r = new_agent_fails(o);
    CHECK_THAT(r.message, Contains("heartbeat_interval_ms"));
    o.heartbeat_interval_ms = 100;
    o.heartbeat_timeout_ms = 100;
    r = new_agent_fails(o);
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("heartbeat_timeout_ms 100"));
    o.field_mask = PDKV_AGENT_FIELD_MAX_OUTSTANDING;
    o.max_outstanding = 0;
    r = new_agent_fails(o);
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("max_outstanding"));
  }
  SECTION("key") {
    o.field_mask = PDKV_AGENT_FIELD_PRESHARED_KEY;
    o.preshared_key_len = 5;
    r = new_agent_fails(o);
    CHECK(r.status == PDKV_ERR_NULL_POINTER);
    CHECK_THAT(r.message, Contains("preshared_key_len 5"));
    const uint8_t short_key[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    o.preshared_key = short_key;
    o.preshared_key_len = sizeof short_key;
    r = new_agent_fails(o);
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("8 bytes"));
  }
  SECTION("seal_data") {
    o.field_mask = PDKV_AGENT_FIELD_SEAL_DATA;
    o.struct_size = 80;  // an older caller's struct ends before seal_data: its bit cannot be honoured
    r = new_agent_fails(o);
    CHECK(r.status == PDKV_ERR_STRUCT_SIZE);
    CHECK_THAT(r.message, Contains("seal_data") && Contains("80"));
    o.struct_size = sizeof o;
    o.seal_data = 2;
    r = new_agent_fails(o);
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("seal_data 2"));
    o.seal_data = 1;  // sealing needs a key
    r = new_agent_fails(o);
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("seal_data 1") && Contains("preshared_key"));
    o.seal_data = 0;  // nothing to turn off without a key: accepted
    CHECK(new_agent(o) != nullptr);
    const uint8_t key[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    o.field_mask = PDKV_AGENT_FIELD_SEAL_DATA | PDKV_AGENT_FIELD_PRESHARED_KEY;
    o.preshared_key = key;
    o.preshared_key_len = sizeof key;
    for (uint8_t v : {uint8_t{0}, uint8_t{1}}) {
      o.seal_data = v;
      CHECK(new_agent(o) != nullptr);
    }
  }
  SECTION("min_peer_protocol_minor") {
    o.field_mask = PDKV_AGENT_FIELD_MIN_PEER_PROTOCOL_MINOR;
    o.struct_size = 80;  // a 2.0 caller's struct ends before the field: its bit cannot be honoured
    r = new_agent_fails(o);
    CHECK(r.status == PDKV_ERR_STRUCT_SIZE);
    CHECK_THAT(r.message, Contains("min_peer_protocol_minor"));
    o.struct_size = sizeof o;
    o.min_peer_protocol_minor = PDKV_CONTROL_PROTOCOL_MINOR + 1;
    r = new_agent_fails(o);
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("min_peer_protocol_minor 6 is newer than this build's control protocol 3.5"));
    for (uint16_t v : {uint16_t{0}, uint16_t{PDKV_CONTROL_PROTOCOL_MINOR}}) {
      o.min_peer_protocol_minor = v;
      CHECK(new_agent(o) != nullptr);
    }
  }
  SECTION("listen address") {
    o.field_mask = PDKV_AGENT_FIELD_LISTEN_ADDRESS;
    r = new_agent_fails(o);
    CHECK(r.status == PDKV_ERR_NULL_POINTER);
    CHECK_THAT(r.message, Contains("listen_address"));
    o.listen_address = "no-port-here";
    r = new_agent_fails(o);
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("no-port-here"));
  }
  SECTION("unset fields are ignored whatever their bytes hold") {
    o.field_mask = 0;
    o.listen_address = "garbage";
    o.transport = 99;
    o.progress_mode = 99;
    o.preshared_key_len = 3;
    o.heartbeat_interval_ms = 0;
    o.max_outstanding = 0;
    o.seal_data = 7;
    auto agent = new_agent(o);
    pdkv_agent_info_t i{};
    i.struct_size = sizeof i;
    REQUIRE_OK(pdkv_agent_get_info(agent.get(), &i, err));
    CHECK(i.transport == PDKV_TRANSPORT_AUTO);
    CHECK(i.progress_mode == PDKV_PROGRESS_THREAD);
    CHECK(std::string(i.listen_address).rfind("127.0.0.1:", 0) == 0);
  }
}

// copy_threads, the first field appended after 2.0 (pdkv 2.1): read only with its bit (a 2.0
// caller cannot set it), refused outside 1..16, and reported by pdkv_agent_get_info (also when
// defaulted), which a 2.0-sized info struct omits.
TEST_CASE("copy_threads (2.1) is honoured, bounded, and needs a struct that has it", "[agent]") {
  auto m = tiny_model();
  auto md = metadata(m.get(), "pre", nullptr);
  auto o = options(md.get());
  const uint32_t hw = std::thread::hardware_concurrency();
  const uint32_t by_default = hw >= 4 ? 2 : 1;
  auto info_threads = [](pdkv_agent_t* a) {
    pdkv_agent_info_t i{};
    i.struct_size = sizeof i;
    REQUIRE_OK(pdkv_agent_get_info(a, &i, err));
    return i.copy_threads;
  };
  SECTION("unset: the default, whatever the field holds") {
    o.copy_threads = 999;
    auto a = new_agent(o);
    CHECK(info_threads(a.get()) == by_default);
  }
  SECTION("set: the count asked for") {
    o.field_mask = PDKV_AGENT_FIELD_COPY_THREADS;
    for (uint32_t n : {1u, 3u, 16u}) {
      o.copy_threads = n;
      auto a = new_agent(o);
      CHECK(info_threads(a.get()) == n);
    }
  }
  SECTION("out of range") {
    o.field_mask = PDKV_AGENT_FIELD_COPY_THREADS;
    for (uint32_t n : {0u, 17u}) {
      o.copy_threads = n;
      const auto r = new_agent_fails(o);
      CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
      CHECK_THAT(r.message, Contains("copy_threads must be 1 to 16, got " + std::to_string(n)));
    }
  }
  SECTION("it lives in the 2.0 struct's tail padding: the size is unchanged, the bit decides") {
    CHECK(offsetof(pdkv_agent_options_t, copy_threads) == 76);
    CHECK(offsetof(pdkv_agent_options_t, seal_data) == 80);  // 2.3's field starts at the 2.0 size
  }
  SECTION("a 2.0-sized info struct is filled without the 2.1 field") {
    o.field_mask = PDKV_AGENT_FIELD_COPY_THREADS;
    o.copy_threads = 5;
    auto a = new_agent(o);
    pdkv_agent_info_t i{};
    i.copy_threads = 77;
    i.struct_size = offsetof(pdkv_agent_info_t, copy_threads);
    REQUIRE_OK(pdkv_agent_get_info(a.get(), &i, err));
    CHECK(i.copy_threads == 77);
    CHECK(i.tp_size >= 1);
  }
}

// With a key, tcp data connections are sealed unless seal_data is 0 on both agents; agents whose
// settings differ are refused at connect with AUTH naming both engines and settings.
TEST_CASE("seal_data: sealed by default with a key, off on both, refused when they differ", "[agent]") {
  const char* key = "a sixteen+ byte pre-shared key";
  for (const int p_seal : {-1, 1, 0}) {
    const int d_seal = p_seal == 0 ? 0 : -1;  // off on both, or on (default / explicit) on both
    INFO("P seal_data " << p_seal << ", D seal_data " << d_seal);
    auto p = node("pre", PDKV_TRANSPORT_TCP, PDKV_PROGRESS_THREAD, false, key, p_seal);
    auto d = node("dec", PDKV_TRANSPORT_TCP, PDKV_PROGRESS_THREAD, false, key, d_seal);
    for (size_t r = 0; r < kRegions; ++r) {
      for (size_t i = 0; i < p->mem[r].size(); ++i) p->mem[r][i] = static_cast<uint8_t>(i * 31 + r);
    }
    auto peer = connect(d->agent.get(), p->agent.get());
    auto plan = read_plan(d->md.get(), p->md.get());
    auto t = transfer_params(plan.get(), "sealed");
    pdkv_transfer_t* tr = nullptr;
    REQUIRE_OK(pdkv_agent_post(d->agent.get(), &t, &tr, err));
    TransferPtr transfer(tr);
    uint8_t finished = 0;
    REQUIRE_OK(pdkv_transfer_wait(tr, 5000, &finished, err));
    CHECK(finished == 1);
    for (size_t r = 0; r < kRegions; ++r) {
      const size_t block = d->mem[r].size() / kBlocks;  // block 0 (the null block) is not read
      CHECK(std::memcmp(d->mem[r].data() + block, p->mem[r].data() + block, d->mem[r].size() - block) == 0);
    }
  }
  for (const bool d_seals : {true, false}) {
    INFO(std::string(d_seals ? "D seals, P does not" : "P seals, D does not"));
    auto p = node("pre", PDKV_TRANSPORT_TCP, PDKV_PROGRESS_THREAD, false, key, d_seals ? 0 : 1);
    auto d = node("dec", PDKV_TRANSPORT_TCP, PDKV_PROGRESS_THREAD, false, key, d_seals ? 1 : 0);
    const std::string address = listen_of(p->agent.get());
    pdkv_connect_options_t c{};
    c.struct_size = sizeof c;
    c.address = address.c_str();
    pdkv_peer_t* out = nullptr;
    const CallResult r = capture([&](pdkv_error_t** e) { return pdkv_agent_connect(d->agent.get(), &c, &out, e); });
    CHECK(out == nullptr);
    CHECK(r.status == PDKV_ERR_AUTH);
    CHECK_THAT(r.message, Contains("'pre'") && Contains("'dec'") && Contains("seal_data on") && Contains("seal_data off"));
  }
}

TEST_CASE("the agent's calls refuse NULL, struct_size and enum values naming them", "[agent]") {
  auto n = node("pre", PDKV_TRANSPORT_SHM, PDKV_PROGRESS_THREAD);
  pdkv_agent_t* a = n->agent.get();

  SECTION("info, progress, event fd") {
    pdkv_agent_info_t i{};
    auto r = capture([&](pdkv_error_t** e) { return pdkv_agent_get_info(a, &i, e); });
    CHECK(r.status == PDKV_ERR_STRUCT_SIZE);
    CHECK_THAT(r.message, Contains("pdkv_agent_info_t.struct_size = 0"));
    r = capture([&](pdkv_error_t** e) { return pdkv_agent_get_info(nullptr, &i, e); });
    CHECK(r.status == PDKV_ERR_NULL_POINTER);
    CHECK_THAT(r.message, Contains("agent"));
    r = capture([&](pdkv_error_t** e) { return pdkv_agent_get_info(a, nullptr, e); });
    CHECK(r.status == PDKV_ERR_NULL_POINTER);
    r = capture([&](pdkv_error_t** e) { return pdkv_agent_progress(nullptr, nullptr, e); });
    CHECK(r.status == PDKV_ERR_NULL_POINTER);
    REQUIRE_OK(pdkv_agent_progress(a, nullptr, err));
    r = capture([&](pdkv_error_t** e) { return pdkv_agent_event_fd(a, nullptr, e); });
    CHECK(r.status == PDKV_ERR_NULL_POINTER);
    CHECK_THAT(r.message, Contains("fd"));
  }
  SECTION("register_memory") {
    pdkv_memory_desc_t d{};
    d.struct_size = sizeof d;
    d.region = 0;
    d.address = reinterpret_cast<uint64_t>(n->mem[0].data());
    d.length = n->mem[0].size();
    pdkv_memory_t* m = nullptr;
    auto call = [&] { return capture([&](pdkv_error_t** e) { return pdkv_agent_register_memory(a, &d, &m, e); }); };
    auto r = capture([&](pdkv_error_t** e) { return pdkv_agent_register_memory(a, nullptr, &m, e); });
    CHECK(r.status == PDKV_ERR_NULL_POINTER);
    CHECK_THAT(r.message, Contains("desc"));
    r = call();  // registered by node()
    CHECK(r.status == PDKV_ERR_BUSY);
    CHECK_THAT(r.message, Contains("region 0"));
    d.struct_size = 4;
    r = call();
    CHECK(r.status == PDKV_ERR_STRUCT_SIZE);
    CHECK_THAT(r.message, Contains("pdkv_memory_desc_t.struct_size = 4"));
    d.struct_size = sizeof d;
    d.field_mask = 1ULL << 9;
    r = call();
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("0x200"));
    d.field_mask = PDKV_MEMORY_FIELD_MEMORY_TYPE;
    d.memory_type = 5;
    r = call();
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("memory_type 5"));
    // Host memory registered as CUDA memory (2.5 registers device memory): refused before the
    // region's BUSY check, saying why: no driver on this machine, or not device memory.
    d.memory_type = PDKV_MEMORY_CUDA;
    r = call();
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("region 0 registered as CUDA device 0 memory") ||
                              Contains("CUDA device memory cannot be registered on this machine"));
    CHECK_THAT(r.message, Contains("libcuda.so.1") || Contains("is not CUDA device memory") ||
                              Contains("no device"));
    d.field_mask = PDKV_MEMORY_FIELD_DEVICE;
    d.device = 3;
    r = call();
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("device 3"));
    d.field_mask = 0;
    d.region = 99;
    r = call();
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("region 99"));
    d.region = 1;
    d.length = 17;
    r = call();
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("+17"));
    CHECK(m == nullptr);
    r = capture([&](pdkv_error_t** e) { return pdkv_memory_deregister(nullptr, e); });
    CHECK(r.status == PDKV_ERR_NULL_POINTER);
  }
  SECTION("connect and find_peer") {
    pdkv_connect_options_t c{};
    c.struct_size = sizeof c;
    pdkv_peer_t* p = nullptr;
    auto call = [&] { return capture([&](pdkv_error_t** e) { return pdkv_agent_connect(a, &c, &p, e); }); };
    auto r = call();
    CHECK(r.status == PDKV_ERR_NULL_POINTER);
    CHECK_THAT(r.message, Contains("options->address"));
    c.address = "[::1";
    r = call();
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("[::1"));
    c.address = "127.0.0.1:1";
    c.field_mask = PDKV_CONNECT_FIELD_TIMEOUT;
    r = call();
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("timeout_ms"));
    c.field_mask = 1ULL << 5;
    r = call();
    CHECK_THAT(r.message, Contains("0x20"));
    c.field_mask = 0;
    c.struct_size = sizeof c + 8;
    r = call();
    CHECK(r.status == PDKV_ERR_STRUCT_SIZE);
    CHECK_THAT(r.message, Contains("pdkv_connect_options_t"));
    c.struct_size = sizeof c;
    r = call();  // nobody listens on port 1
    CHECK(r.status == PDKV_ERR_PEER_LOST);
    CHECK_THAT(r.message, Contains("127.0.0.1:1"));
    CHECK(p == nullptr);
    r = capture([&](pdkv_error_t** e) { return pdkv_agent_find_peer(a, nullptr, 0, &p, e); });
    CHECK(r.status == PDKV_ERR_NULL_POINTER);
    r = capture([&](pdkv_error_t** e) { return pdkv_agent_find_peer(a, "nobody", 3, &p, e); });
    CHECK(r.status == PDKV_ERR_NOT_FOUND);
    CHECK_THAT(r.message, Contains("'nobody' rank 3"));
    r = capture([&](pdkv_error_t** e) { return pdkv_agent_find_stage_peer(a, "nobody", 2, 3, &p, e); });
    CHECK(r.status == PDKV_ERR_NOT_FOUND);
    CHECK_THAT(r.message, Contains("'nobody' stage 2 rank 3"));
    CHECK(p == nullptr);
    r = capture([&](pdkv_error_t** e) { return pdkv_agent_find_stage_peer(a, nullptr, 0, 0, &p, e); });
    CHECK(r.status == PDKV_ERR_NULL_POINTER);
    CHECK_THAT(r.message, Contains("engine_id"));
  }
  SECTION("post") {
    auto d_md = metadata(n->model.get(), "dec", nullptr);
    auto plan = read_plan(d_md.get(), n->md.get());  // the argument checks come first
    auto t = transfer_params(plan.get(), "req");
    pdkv_transfer_t* out = nullptr;
    auto call = [&] { return capture([&](pdkv_error_t** e) { return pdkv_agent_post(a, &t, &out, e); }); };
    auto r = capture([&](pdkv_error_t** e) { return pdkv_agent_post(a, nullptr, &out, e); });
    CHECK(r.status == PDKV_ERR_NULL_POINTER);
    CHECK_THAT(r.message, Contains("params"));
    t.op = 4;
    r = call();
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("op 4"));
    t.op = PDKV_TRANSFER_READ;
    t.plan = nullptr;
    r = call();
    CHECK(r.status == PDKV_ERR_NULL_POINTER);
    CHECK_THAT(r.message, Contains("params->plan"));
    t.plan = plan.get();
    t.peer_engine_id = nullptr;
    r = call();
    CHECK(r.status == PDKV_ERR_NULL_POINTER);
    CHECK_THAT(r.message, Contains("params->peer_engine_id"));
    t.peer_engine_id = "pre";
    t.request_id = nullptr;
    r = call();
    CHECK(r.status == PDKV_ERR_NULL_POINTER);
    CHECK_THAT(r.message, Contains("params->request_id"));
    t.request_id = "";
    r = call();
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("got 0"));
    const std::string long_id(1025, 'x');
    t.request_id = long_id.c_str();
    r = call();
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("got 1025"));
    t.request_id = "req";
    t.field_mask = PDKV_TRANSFER_FIELD_NOTIFY;
    t.notify = 2;
    r = call();
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("got 2"));
    t.notify = 1;
    t.field_mask = PDKV_TRANSFER_FIELD_CONFIRM_LEASE;
    t.confirm_lease = 2;
    r = call();
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("confirm_lease must be 0 or 1, got 2"));
    t.confirm_lease = 1;
    t.field_mask = PDKV_TRANSFER_FIELD_TIMEOUT;
    r = call();
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("timeout_ms"));
    t.field_mask = 1ULL << 63;
    r = call();
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("0x8000000000000000"));
    t.field_mask = 0;
    t.struct_size = 8;
    r = call();
    CHECK(r.status == PDKV_ERR_STRUCT_SIZE);
    CHECK_THAT(r.message, Contains("pdkv_transfer_params_t.struct_size = 8"));
    CHECK(out == nullptr);
  }
  SECTION("leases and notifications") {
    auto r = capture([&](pdkv_error_t** e) { return pdkv_agent_lease(a, nullptr, 1, 10, e); });
    CHECK(r.status == PDKV_ERR_NULL_POINTER);
    CHECK_THAT(r.message, Contains("request_id"));
    r = capture([&](pdkv_error_t** e) { return pdkv_agent_lease(a, "r", 0, 10, e); });
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("expected"));
    r = capture([&](pdkv_error_t** e) { return pdkv_agent_lease(a, "r", 1, 0, e); });
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("ttl_ms"));
    REQUIRE_OK(pdkv_agent_lease(a, "r", 1, 1, err));
    r = capture([&](pdkv_error_t** e) { return pdkv_agent_poll_notifications(a, nullptr, e); });
    CHECK(r.status == PDKV_ERR_NULL_POINTER);
    // The control loop expires the lease within a tick or two (50 ms each); allow a loaded machine.
    ListPtr list;
    const pdkv_notification_t* items = nullptr;
    size_t count = 0;
    for (int i = 0; i < 300 && count == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      pdkv_notification_list_t* l = nullptr;
      REQUIRE_OK(pdkv_agent_poll_notifications(a, &l, err));
      list.reset(l);
      REQUIRE_OK(pdkv_notification_list_items(list.get(), &items, &count, err));
      CHECK((count == 0) == (items == nullptr));
    }
    REQUIRE(count == 1);
    const pdkv_notification_t& note = items[0];
    CHECK(note.kind == PDKV_NOTIFY_LEASE_EXPIRED);
    CHECK(note.status == PDKV_ERR_TIMED_OUT);
    CHECK(std::string(note.request_id) == "r");
    CHECK(std::string(note.engine_id).empty());
    CHECK(note.expected == 1);
    // The items stay put across queries of the same list.
    const pdkv_notification_t* again = nullptr;
    size_t n2 = 0;
    REQUIRE_OK(pdkv_notification_list_items(list.get(), &again, &n2, err));
    CHECK((again == items && n2 == 1));
    r = capture([&](pdkv_error_t** e) { return pdkv_notification_list_items(nullptr, &items, &count, e); });
    CHECK(r.status == PDKV_ERR_NULL_POINTER);
    CHECK_THAT(r.message, Contains("list"));
    r = capture([&](pdkv_error_t** e) { return pdkv_notification_list_items(list.get(), nullptr, &count, e); });
    CHECK(r.status == PDKV_ERR_NULL_POINTER);
    CHECK_THAT(r.message, Contains("items"));
    r = capture([&](pdkv_error_t** e) { return pdkv_notification_list_items(list.get(), &items, nullptr, e); });
    CHECK(r.status == PDKV_ERR_NULL_POINTER);
    CHECK_THAT(r.message, Contains("count"));
  }
  pdkv_agent_free(nullptr);
  pdkv_memory_free(nullptr);
  pdkv_peer_free(nullptr);
  pdkv_transfer_free(nullptr);
  pdkv_notification_list_free(nullptr);
}

// pdkv_agent_keep_leases (2.6): a reader keeps P's lease open past its ttl; its arguments are
// checked naming each; the counters of both peers show what travelled.
TEST_CASE("pdkv_agent_keep_leases keeps the other side's lease open and refuses bad arguments", "[agent]") {
  auto p = node("pre", PDKV_TRANSPORT_TCP, PDKV_PROGRESS_THREAD);
  auto d = node("dec", PDKV_TRANSPORT_TCP, PDKV_PROGRESS_THREAD);
  const char* ids[] = {"req,1", "unknown"};
  auto r = capture([&](pdkv_error_t** e) { return pdkv_agent_keep_leases(d->agent.get(), "pre", ids, 2, e); });
  CHECK(r.status == PDKV_ERR_NOT_FOUND);
  CHECK_THAT(r.message, Contains("no connected rank of engine 'pre'"));
  PeerPtr peer = connect(d->agent.get(), p->agent.get());
  r = capture([&](pdkv_error_t** e) { return pdkv_agent_keep_leases(nullptr, "pre", ids, 2, e); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(r.message, Contains("agent"));
  r = capture([&](pdkv_error_t** e) { return pdkv_agent_keep_leases(d->agent.get(), nullptr, ids, 2, e); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(r.message, Contains("peer_engine_id"));
  r = capture([&](pdkv_error_t** e) { return pdkv_agent_keep_leases(d->agent.get(), "pre", nullptr, 2, e); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(r.message, Contains("request_ids"));
  const char* with_null[] = {"a", nullptr};
  r = capture([&](pdkv_error_t** e) { return pdkv_agent_keep_leases(d->agent.get(), "pre", with_null, 2, e); });
  CHECK(r.status == PDKV_ERR_NULL_POINTER);
  CHECK_THAT(r.message, Contains("request_ids[1]"));
  const std::string long_id(5000, 'x');
  const char* too_long[] = {long_id.c_str()};
  r = capture([&](pdkv_error_t** e) { return pdkv_agent_keep_leases(d->agent.get(), "pre", too_long, 1, e); });
  CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
  CHECK_THAT(r.message, Contains("request_ids[0] is longer than 1024 bytes"));
  const char* empty[] = {"a", ""};
  r = capture([&](pdkv_error_t** e) { return pdkv_agent_keep_leases(d->agent.get(), "pre", empty, 2, e); });
  CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
  CHECK_THAT(r.message, Contains("request_ids[1] must be 1..1024 bytes, got 0"));
  REQUIRE_OK(pdkv_agent_keep_leases(d->agent.get(), "pre", nullptr, 0, err));  // nothing to send

  // P leases "req,1" for 1 s; D keeps it every 50 ms for 2.5 s: no LEASE_EXPIRED meanwhile.
  REQUIRE_OK(pdkv_agent_lease(p->agent.get(), "req,1", 1, 1000, err));
  auto expired_now = [&] {
    pdkv_notification_list_t* l = nullptr;
    REQUIRE_OK(pdkv_agent_poll_notifications(p->agent.get(), &l, err));
    ListPtr list(l);
    const pdkv_notification_t* items = nullptr;
    size_t count = 0;
    REQUIRE_OK(pdkv_notification_list_items(list.get(), &items, &count, err));
    for (size_t i = 0; i < count; ++i) {
      if (items[i].kind == PDKV_NOTIFY_LEASE_EXPIRED && std::string(items[i].request_id) == "req,1") return true;
    }
    return false;
  };
  const auto start = std::chrono::steady_clock::now();
  bool early = false;
  while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(2500)) {
    REQUIRE_OK(pdkv_agent_keep_leases(d->agent.get(), "pre", ids, 2, err));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    early |= expired_now();
  }
  CHECK_FALSE(early);
  bool ended = false;
  for (int i = 0; i < 500 && !ended; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ended = expired_now();
  }
  CHECK(ended);
  pdkv_peer_info_t info{};
  info.struct_size = sizeof info;
  REQUIRE_OK(pdkv_peer_get_info(peer.get(), &info, err));
  CHECK(info.lease_keeps_sent >= 20);
  pdkv_peer_t* on_p = nullptr;
  REQUIRE_OK(pdkv_agent_find_peer(p->agent.get(), "dec", 0, &on_p, err));
  PeerPtr on_p_ptr(on_p);
  pdkv_peer_info_t pi{};
  pi.struct_size = sizeof pi;
  REQUIRE_OK(pdkv_peer_get_info(on_p, &pi, err));
  CHECK(pi.lease_keeps_received == info.lease_keeps_sent);
}

// Over tcp a GET needs the target's worker to progress: with P in caller-progress mode and its
// caller never calling, D's READ stays in flight, which is when freeing in the "wrong" order
// matters most.
TEST_CASE("agent handles may be freed in any order, also mid-transfer", "[agent]") {
  auto p = node("pre", PDKV_TRANSPORT_TCP, PDKV_PROGRESS_CALLER);
  auto d = node("dec", PDKV_TRANSPORT_TCP, PDKV_PROGRESS_THREAD);
  auto peer = connect(d->agent.get(), p->agent.get());
  auto plan = read_plan(d->md.get(), p->md.get());
  auto t = transfer_params(plan.get(), "stuck");
  t.field_mask = PDKV_TRANSFER_FIELD_TIMEOUT;
  t.timeout_ms = 60000;
  pdkv_transfer_t* tr = nullptr;
  REQUIRE_OK(pdkv_agent_post(d->agent.get(), &t, &tr, err));
  TransferPtr transfer(tr);
  pdkv_transfer_info_t info{};
  info.struct_size = sizeof info;
  REQUIRE_OK(pdkv_transfer_get_info(transfer.get(), &info, err));
  REQUIRE(info.state == PDKV_TRANSFER_IN_FLIGHT);
  uint8_t finished = 1;
  REQUIRE_OK(pdkv_transfer_wait(transfer.get(), 20, &finished, err));
  REQUIRE(finished == 0);
  // The done fd (2.5): not readable while the transfer is in flight; the same descriptor each call.
  int done = -1;
  REQUIRE_OK(pdkv_transfer_done_fd(transfer.get(), &done, err));
  REQUIRE(done >= 0);
  int again = -1;
  REQUIRE_OK(pdkv_transfer_done_fd(transfer.get(), &again, err));
  CHECK(again == done);
  pollfd pf{done, POLLIN, 0};
  CHECK(::poll(&pf, 1, 50) == 0);

  SECTION("the D agent first, then the transfer, peer and memory handles") {
    const auto t0 = std::chrono::steady_clock::now();
    d->agent.reset();
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
    // Final: the done fd is readable (and stays so: polling does not consume it).
    CHECK(::poll(&pf, 1, 5000) == 1);
    CHECK(::poll(&pf, 1, 0) == 1);
    // The transfer is final: SHUTDOWN, every read listed.
    auto r = capture([&](pdkv_error_t** e) { return pdkv_transfer_wait(transfer.get(), UINT64_MAX, &finished, e); });
    CHECK(finished == 1);
    CHECK(r.status == PDKV_ERR_SHUTDOWN);
    REQUIRE_OK(pdkv_transfer_get_info(transfer.get(), &info, err));
    CHECK(info.state == PDKV_TRANSFER_FAILED);
    CHECK(info.status == PDKV_ERR_SHUTDOWN);
    const pdkv_failed_read_t* reads = nullptr;
    size_t n = 0;
    REQUIRE_OK(pdkv_transfer_failed_reads(transfer.get(), &reads, &n, err));
    CHECK(n == info.reads_failed);
    CHECK(n > 0);
    REQUIRE_OK(pdkv_transfer_cancel(transfer.get(), err));
    // The peer handle reports its final state.
    pdkv_peer_info_t pi{};
    pi.struct_size = sizeof pi;
    REQUIRE_OK(pdkv_peer_get_info(peer.get(), &pi, err));
    CHECK(pi.connected == 0);
    CHECK(pi.lost_status == PDKV_ERR_SHUTDOWN);
    CHECK(std::string(pi.engine_id) == "pre");
    REQUIRE_OK(pdkv_peer_disconnect(peer.get(), err));
    pdkv_engine_metadata_t* pmd = nullptr;
    REQUIRE_OK(pdkv_peer_metadata(peer.get(), &pmd, err));
    pdkv_engine_metadata_free(pmd);
    // Memory handles: deregistering after the agent is a no-op.
    REQUIRE_OK(pdkv_memory_deregister(d->regs[0].get(), err));
    d->regs.clear();
    transfer.reset();
    peer.reset();
  }
  SECTION("the transfer first (cancelled), then memory, then the agent") {
    transfer.reset();
    // The cancelled transfer's operations may still be in flight: its memory stays registered
    // until they return, and freeing the handle now defers the release.
    d->regs.clear();
    peer.reset();
    d->agent.reset();
  }
  SECTION("memory first while busy, then the P agent (the transfer fails), then the rest") {
    pdkv_error_t* e = nullptr;
    CHECK(pdkv_memory_deregister(d->regs[0].get(), &e) == PDKV_ERR_BUSY);
    CHECK_THAT(pdkv_error_message(e), Contains("region 0"));
    pdkv_error_free(e);
    d->regs.clear();
    p->agent.reset();
    auto r = capture([&](pdkv_error_t** er) { return pdkv_transfer_wait(transfer.get(), 10000, &finished, er); });
    CHECK(finished == 1);
    CHECK(r.status == PDKV_ERR_PEER_LOST);
    d->agent.reset();
    REQUIRE_OK(pdkv_transfer_get_info(transfer.get(), &info, err));
    CHECK(info.state == PDKV_TRANSFER_FAILED);
  }
}

TEST_CASE("shared host memory: regions inside it are read through the peer's mapping", "[agent]") {
  SECTION("allocation errors name the value") {
    pdkv_shared_memory_t* sm = reinterpret_cast<pdkv_shared_memory_t*>(0x1);
    auto r = capture([&](pdkv_error_t** e) { return pdkv_shared_memory_alloc(0, &sm, e); });
    CHECK(r.status == PDKV_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.message, Contains("bytes 0"));
    r = capture([&](pdkv_error_t** e) { return pdkv_shared_memory_alloc(64, nullptr, e); });
    CHECK(r.status == PDKV_ERR_NULL_POINTER);
    REQUIRE_OK(pdkv_shared_memory_alloc(100, &sm, err));
    SharedPtr held(sm);
    void* at = nullptr;
    size_t bytes = 0;
    r = capture([&](pdkv_error_t** e) { return pdkv_shared_memory_address(sm, nullptr, &bytes, e); });
    CHECK(r.status == PDKV_ERR_NULL_POINTER);
    r = capture([&](pdkv_error_t** e) { return pdkv_shared_memory_address(nullptr, &at, &bytes, e); });
    CHECK(r.status == PDKV_ERR_NULL_POINTER);
    REQUIRE_OK(pdkv_shared_memory_address(sm, &at, &bytes, err));
    CHECK(bytes == 100);
    CHECK(reinterpret_cast<uintptr_t>(at) % 4096 == 0);
    CHECK(static_cast<uint8_t*>(at)[99] == 0);
    pdkv_shared_memory_free(nullptr);
  }
  for (const bool shared : {true, false}) {
    DYNAMIC_SECTION((shared ? "P's regions in shared memory: memcpy" : "ordinary memory: cross-memory attach")) {
      auto p = node("pre", PDKV_TRANSPORT_SHM, PDKV_PROGRESS_THREAD, shared);
      auto d = node("dec", PDKV_TRANSPORT_SHM, PDKV_PROGRESS_THREAD);
      auto peer = connect(d->agent.get(), p->agent.get());
      auto plan = read_plan(d->md.get(), p->md.get());
      auto t = transfer_params(plan.get(), "mapped");
      pdkv_transfer_t* tr = nullptr;
      REQUIRE_OK(pdkv_agent_post(d->agent.get(), &t, &tr, err));
      TransferPtr transfer(tr);
      uint8_t finished = 0;
      REQUIRE_OK(pdkv_transfer_wait(transfer.get(), 10000, &finished, err));
      REQUIRE(finished == 1);
      // Asked for only once the transfer is final: readable at once.
      int done = -1;
      REQUIRE_OK(pdkv_transfer_done_fd(transfer.get(), &done, err));
      pollfd pf{done, POLLIN, 0};
      CHECK(::poll(&pf, 1, 0) == 1);
      auto nr = capture([&](pdkv_error_t** e) { return pdkv_transfer_done_fd(transfer.get(), nullptr, e); });
      CHECK(nr.status == PDKV_ERR_NULL_POINTER);
      CHECK_THAT(nr.message, Contains("fd"));
      nr = capture([&](pdkv_error_t** e) { return pdkv_transfer_done_fd(nullptr, &done, e); });
      CHECK(nr.status == PDKV_ERR_NULL_POINTER);
      CHECK_THAT(nr.message, Contains("transfer"));
      pdkv_transfer_info_t ti{};
      ti.struct_size = sizeof ti;
      REQUIRE_OK(pdkv_transfer_get_info(transfer.get(), &ti, err));
      pdkv_peer_info_t pi{};
      pi.struct_size = sizeof pi;
      REQUIRE_OK(pdkv_peer_get_info(peer.get(), &pi, err));
      CHECK(pi.transport == PDKV_TRANSPORT_SHM);
      CHECK(pi.mapped_regions == (shared ? kRegions : 0));
      CHECK(pi.bytes_mapped == (shared ? ti.bytes_total : 0));
      CHECK(pi.bytes_read == ti.bytes_total);
      for (uint32_t r = 0; r < kRegions; ++r) {
        const size_t block = d->view[r].second / kBlocks;  // blocks 1.. were read into the same blocks
        CHECK(std::memcmp(d->view[r].first + block, p->view[r].first + block, d->view[r].second - block) == 0);
      }
      // A 2.1-sized info struct is filled without the 2.2 fields.
      pdkv_peer_info_t old{};
      old.struct_size = offsetof(pdkv_peer_info_t, mapped_regions);
      old.mapped_regions = 77;
      REQUIRE_OK(pdkv_peer_get_info(peer.get(), &old, err));
      CHECK(old.mapped_regions == 77);
    }
  }
}
