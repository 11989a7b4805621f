// CUDA device memory in the agent (executor/device/, agent/device_staging.hpp): registration
// checks, the choice of tcp for a pair holding device memory, and READ / WRITE staged through host
// memory, every byte checked.
//
// On the CPU the device is FakeDevice: host pages kept PROT_NONE except inside the backend's own
// copies, so any byte the agent moved without staging (readv, sendmsg, process_vm_*, memcpy)
// fails the transfer or faults, and the copy counters show what was staged. Where a CUDA driver and
// a device are present, CudaDevice.* runs the same transfers on real device memory; elsewhere it
// is skipped saying why.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "agent/agent.hpp"
#include "agent_fake_peer.hpp"
#include "device/cuda_driver.hpp"
#include "device/device_memory.hpp"
#include "pdkv/core/transfer_plan.hpp"

using namespace pdkv;
using namespace pdkv::exec;
using core::Status;
using namespace std::chrono_literals;

namespace {

// Runs f, which must throw core::Error with `status` and a message holding every one of `parts`;
// `what` says what f did wrong if it returned.
template <typename F>
void expect_error(F&& f, Status status, std::initializer_list<std::string> parts, const std::string& what) {
  try {
    f();
    ADD_FAILURE() << what;
  } catch (const core::Error& e) {
    EXPECT_EQ(e.status(), status) << e.what();
    for (const auto& part : parts) EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

// ---- the fake device --------------------------------------------------------------------

class FakeDevice final : public device::Backend {
 public:
  ~FakeDevice() override {
    for (const auto& a : allocs_) ::munmap(a.base, a.mapped);
  }
  std::string name() const override { return "fake"; }

  uint8_t* alloc(size_t length, int ordinal) {
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    const size_t mapped = (length + page - 1) / page * page;
    void* p = ::mmap(nullptr, mapped, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(p, MAP_FAILED);
    std::lock_guard<std::mutex> g(mu_);
    allocs_.push_back({static_cast<uint8_t*>(p), length, mapped, ordinal});
    return static_cast<uint8_t*>(p);
  }

  void check_range(uint64_t address, uint64_t length, int ordinal) override {
    std::lock_guard<std::mutex> g(mu_);
    const Alloc* a = find(address, length);
    if (a == nullptr) core::fail(Status::InvalidArgument, "address " + std::to_string(address) + " is not fake device memory");
    if (a->ordinal != ordinal) {
      core::fail(Status::InvalidArgument, "address " + std::to_string(address) + " lies on fake device " +
                                              std::to_string(a->ordinal) + ", not on device " + std::to_string(ordinal));
    }
  }
  void to_host(int ordinal, std::span<const device::Copy> copies) override { run(ordinal, copies, true); }
  void to_device(int ordinal, std::span<const device::Copy> copies) override { run(ordinal, copies, false); }
  // "Page-locked" buffers: plain heap memory, counted (and refused while give_pinned is off).
  void* host_alloc(int, size_t bytes) noexcept override {
    if (!give_pinned) return nullptr;
    pinned_live++;
    pinned_allocs++;
    return std::malloc(bytes);
  }
  void host_free(int, void* p) noexcept override {
    pinned_live--;
    std::free(p);
  }

  // The test's own access to device bytes (what cudaMemcpy would be for an engine).
  void store(uint8_t* at, const std::vector<uint8_t>& bytes) {
    const device::Copy c{const_cast<uint8_t*>(bytes.data()), reinterpret_cast<uint64_t>(at), bytes.size()};
    access(c, false);
  }
  std::vector<uint8_t> load(const uint8_t* at, size_t n) {
    std::vector<uint8_t> out(n);
    access({out.data(), reinterpret_cast<uint64_t>(at), n}, true);
    return out;
  }

  std::atomic<uint64_t> bytes_to_host{0}, bytes_to_device{0}, calls{0};
  std::atomic<int> fail_to_host{0}, fail_to_device{0};  // the next N calls fail
  std::atomic<bool> give_pinned{true};
  std::atomic<bool> stall_to_host{false}, stall_to_device{false};  // the next such call waits for release()
  std::atomic<bool> stalled{false};
  bool wait_stalled(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> l(stall_mu_);
    return stall_cv_.wait_for(l, timeout, [&] { return stalled.load(); });
  }
  void release() {
    std::lock_guard<std::mutex> l(stall_mu_);
    released_ = true;
    stall_cv_.notify_all();
  }
  std::atomic<int64_t> pinned_live{0}, pinned_allocs{0};

 private:
  struct Alloc {
    uint8_t* base;
    size_t length, mapped;
    int ordinal;
  };
  const Alloc* find(uint64_t address, uint64_t length) const {
    for (const auto& a : allocs_) {
      const uint64_t b = reinterpret_cast<uint64_t>(a.base);
      if (address >= b && length <= a.length && address - b <= a.length - length) return &a;
    }
    return nullptr;
  }
  void access(const device::Copy& c, bool to_host) {
    std::lock_guard<std::mutex> g(mu_);
    const Alloc* a = find(c.device_address, c.length);
    ASSERT_NE(a, nullptr) << "a staged copy outside fake device memory";
    ::mprotect(a->base, a->mapped, PROT_READ | PROT_WRITE);
    if (to_host) std::memcpy(c.host, reinterpret_cast<const void*>(c.device_address), c.length);
    else std::memcpy(reinterpret_cast<void*>(c.device_address), c.host, c.length);
    ::mprotect(a->base, a->mapped, PROT_NONE);
  }
  void run(int ordinal, std::span<const device::Copy> copies, bool to_host) {
    calls++;
    if ((to_host ? stall_to_host : stall_to_device).exchange(false)) {
      // A slow copy: waits (at most 5 s) until the test releases it.
      std::unique_lock<std::mutex> l(stall_mu_);
      stalled = true;
      stall_cv_.notify_all();
      stall_cv_.wait_for(l, 5s, [&] { return released_; });
      stalled = false;
    }
    std::atomic<int>& fail = to_host ? fail_to_host : fail_to_device;
    if (fail.load() > 0 && fail.fetch_sub(1) > 0) {
      throw core::Error(Status::Transport, "fake device: injected copy failure", core::CauseDomain::Cuda, 700);
    }
    for (const auto& c : copies) {
      {
        std::lock_guard<std::mutex> g(mu_);
        const Alloc* a = find(c.device_address, c.length);
        if (a == nullptr || a->ordinal != ordinal) core::fail(Status::Internal, "a staged copy outside the device's memory");
      }
      access(c, to_host);
      (to_host ? bytes_to_host : bytes_to_device) += c.length;
    }
  }

  std::mutex mu_;
  std::vector<Alloc> allocs_;
  std::mutex stall_mu_;
  std::condition_variable stall_cv_;
  bool released_ = false;
};

// ---- the real device, through the driver ------------------------------------------------

// Device memory from cuMemAlloc in device 0's primary context; nullptr and *why when no driver
// or device is usable here.
const device::cuda::Driver* cuda_ready(std::string* why) {
  const device::cuda::Driver* d = device::cuda::load_driver(why);
  if (d == nullptr) return nullptr;
  device::cuda::CUdevice dev = 0;
  device::cuda::CUcontext ctx = nullptr;
  if (d->DeviceGet(&dev, 0) != 0 || d->DevicePrimaryCtxRetain(&ctx, dev) != 0 || d->CtxSetCurrent(ctx) != 0) {
    *why = "device 0's primary context could not be made current";
    return nullptr;
  }
  return d;
}

// ---- ranks ------------------------------------------------------------------------------

enum class Where { Host, Fake, Cuda };

const char* where_name(Where w) { return w == Where::Host ? "host" : w == Where::Fake ? "fake-device" : "cuda"; }

constexpr uint32_t kRegions = 3;
constexpr uint64_t kBlocks = 32;

// One engine rank whose regions lie in one buffer: host memory, fake device memory or CUDA memory.
struct Rank {
  std::string engine;
  uint32_t rank = 0;
  Where where = Where::Host;
  core::EngineMetadata md;
  std::vector<uint8_t> host;          // Where::Host
  uint8_t* device_base = nullptr;     // Fake
  device::cuda::CUdeviceptr cuda = 0; // Cuda
  uint64_t bytes = 0;
  std::shared_ptr<FakeDevice> fake;
  const device::cuda::Driver* driver = nullptr;
  std::unique_ptr<Agent> agent;
  std::vector<std::shared_ptr<Registration>> regs;

  uint64_t base() const {
    return where == Where::Host ? reinterpret_cast<uint64_t>(host.data())
                                : where == Where::Fake ? reinterpret_cast<uint64_t>(device_base) : cuda;
  }
  void store(const std::vector<uint8_t>& b) {
    if (where == Where::Host) host = b;
    else if (where == Where::Fake) fake->store(device_base, b);
    else ASSERT_EQ(driver->MemcpyHtoD(cuda, b.data(), b.size()), 0);
  }
  std::vector<uint8_t> load() const {
    if (where == Where::Host) return host;
    if (where == Where::Fake) return fake->load(device_base, bytes);
    std::vector<uint8_t> out(bytes);
    EXPECT_EQ(driver->MemcpyDtoH(out.data(), cuda, bytes), 0);
    return out;
  }
  ~Rank() {
    agent.reset();
    if (cuda != 0) driver->MemFree(cuda);
  }
};

struct RankOptions {
  TransportMode transport = TransportMode::Tcp;
  std::optional<std::vector<uint8_t>> key;
  core::KvLayout layout = core::KvLayout::HND;
  uint32_t register_regions = kRegions;  // the first N are registered by make_rank
};

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>((i * 131 + seed * 71 + 7) % 251);
  return out;
}

std::unique_ptr<Rank> make_rank(const std::string& engine, uint32_t tp, uint32_t rank, Where where,
                                std::shared_ptr<FakeDevice> fake, const device::cuda::Driver* driver,
                                const RankOptions& opt = {}) {
  auto r = std::make_unique<Rank>();
  r->engine = engine;
  r->rank = rank;
  r->where = where;
  r->fake = std::move(fake);
  r->driver = driver;
  for (auto& reg : pdkv::exec::testing::tiny_metadata(engine, rank, 1ull << 40, kBlocks, kRegions, tp).regions) {
    r->bytes += reg.region.block_len * reg.region.num_blocks;
  }
  if (where == Where::Host) r->host.assign(r->bytes, 0);
  if (where == Where::Fake) r->device_base = r->fake->alloc(r->bytes, 0);
  if (where == Where::Cuda) EXPECT_EQ(driver->MemAlloc(&r->cuda, r->bytes), 0);
  r->md = pdkv::exec::testing::tiny_metadata(engine, rank, r->base(), kBlocks, kRegions, tp);
  r->md.kv_layout = opt.layout;
  AgentOptions o;
  o.metadata = r->md;
  o.transport = opt.transport;
  if (opt.key) o.key = PresharedKey(*opt.key);
  o.default_timeout = 5000ms;
  o.heartbeat_interval = 100ms;
  o.heartbeat_timeout = 3000ms;
  o.max_outstanding = 4;  // small, so the window refills and batches of several pieces form
  r->agent = std::make_unique<Agent>(o);
  const MemoryType type = where == Where::Host ? MemoryType::Host : MemoryType::Cuda;
  for (uint32_t i = 0; i < opt.register_regions; ++i) {
    const auto& reg = r->md.regions[i].region;
    r->regs.push_back(r->agent->register_memory(i, reg.base, reg.block_len * reg.num_blocks, type));
  }
  return r;
}

// D's blocks scattered and descending, P's consecutive from 3 (as the loopback tests plan).
core::TransferPlan make_plan(const Rank& d, const std::vector<Rank*>& ps, uint64_t tokens, bool permute = false) {
  std::vector<core::EngineMetadata> remote;
  for (auto* p : ps) remote.push_back(p->md);
  core::PlanContext ctx = core::make_plan_context(d.md, remote);
  ctx.permute_on_receive = permute;
  core::PlanGroup g;
  g.trim.kind = core::GroupKind::Attention;
  for (uint64_t b = 0; b < (tokens + 15) / 16; ++b) {
    g.trim.local_blocks.push_back(kBlocks - 1 - 2 * b);
    g.trim.remote_blocks.push_back(3 + b);
  }
  g.trim.remote_computed_tokens = tokens;
  return core::compile_transfer_plan(ctx, {g});
}

// What D must hold after the plan: its fill, with every read's bytes from its P source.
std::vector<uint8_t> expected(const Rank& d, const std::vector<uint8_t>& d_before, const std::vector<Rank*>& ps,
                              const std::vector<std::vector<uint8_t>>& p_bytes, const core::TransferPlan& plan) {
  std::vector<uint8_t> out = d_before;
  for (const auto& rr : plan.ranks) {
    for (size_t k = 0; k < ps.size(); ++k) {
      if (ps[k]->rank != rr.p_rank) continue;
      for (const auto& r : rr.reads) {
        const uint64_t dst = d.md.regions[r.local_region].region.base + r.local_offset - d.base();
        const uint64_t src = ps[k]->md.regions[r.remote_region].region.base + r.remote_offset - ps[k]->base();
        std::memcpy(out.data() + dst, p_bytes[k].data() + src, r.length);
      }
    }
  }
  return out;
}

size_t differing(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, size_t* first) {
  size_t bad = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (a[i] != b[i] && bad++ == 0) *first = i;
  }
  return bad + (a.size() > b.size() ? a.size() - b.size() : b.size() - a.size());
}

// D (TP1) and P (TP2) on `d_where` / `p_where`; READ (D posts) or WRITE (both P ranks post their
// share), then D's whole memory is compared with the expected bytes.
void run_pair(Where d_where, Where p_where, TransferOp op, const RankOptions& opt, std::shared_ptr<FakeDevice> fake,
              const device::cuda::Driver* driver) {
  auto d = make_rank("dec", 1, 0, d_where, fake, driver, opt);
  auto p0 = make_rank("pre", 2, 0, p_where, fake, driver, opt);
  auto p1 = make_rank("pre", 2, 1, p_where, fake, driver, opt);
  std::vector<Rank*> ps{p0.get(), p1.get()};
  const std::vector<uint8_t> d_before(d->bytes, 0xEE);
  d->store(d_before);
  std::vector<std::vector<uint8_t>> p_bytes;
  for (auto* p : ps) {
    p_bytes.push_back(pattern(p->bytes, p->rank));
    p->store(p_bytes.back());
  }
  for (auto* p : ps) {
    auto rec = d->agent->connect(p->agent->info().listen, 3000ms);
    ASSERT_EQ(rec->transport, TransportMode::Tcp) << "device memory moves over tcp only";
  }
  const auto plan = make_plan(*d, ps, 16 * 11 + 5);
  if (op == TransferOp::Read) {
    PostParams pp;
    pp.plan = &plan;
    pp.peer_engine_id = "pre";
    pp.request_id = "req";
    auto t = d->agent->post(pp);
    ASSERT_TRUE(t.wait(10000ms));
    ASSERT_EQ(t.status().status, Status::Ok) << t.status().message;
  } else {
    // WRITE: each P rank pushes its share after D is connected to it (the same connections).
    for (auto* p : ps) {
      const auto until = std::chrono::steady_clock::now() + 3000ms;
      while (!p->agent->find_peer("dec", 0) && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(2ms);
      PostParams pp;
      pp.plan = &plan;
      pp.peer_engine_id = "dec";
      pp.request_id = "req";
      pp.op = TransferOp::Write;
      auto t = p->agent->post(pp);
      ASSERT_TRUE(t.wait(10000ms));
      ASSERT_EQ(t.status().status, Status::Ok) << t.status().message;
    }
    // D's memory is read once D has told of both WRITEs (wait_write_done says why).
    ASSERT_TRUE(pdkv::exec::testing::wait_write_done(*d->agent, "req", ps.size()));
  }
  size_t first = 0;
  const auto want = expected(*d, d_before, ps, p_bytes, plan);
  EXPECT_EQ(differing(want, d->load(), &first), 0u) << "first wrong byte at D offset " << first;
  // P's memory is untouched.
  for (size_t k = 0; k < ps.size(); ++k) EXPECT_EQ(differing(p_bytes[k], ps[k]->load(), &first), 0u);
}

uint64_t plan_bytes(const core::TransferPlan& plan) {
  uint64_t n = 0;
  for (const auto& rr : plan.ranks)
    for (const auto& r : rr.reads) n += r.length;
  return n;
}

// Device memory (`device`) on D, on P, on both; READ and WRITE; clear and sealed: `body` runs
// once per case, traced.
template <typename Body>
void for_each_case(Where device, TransportMode transport, Body&& body) {
  const std::vector<std::pair<Where, Where>> sides{{device, Where::Host}, {Where::Host, device}, {device, device}};
  for (const auto& [d_where, p_where] : sides) {
    for (TransferOp op : {TransferOp::Read, TransferOp::Write}) {
      for (bool sealed : {false, true}) {
        SCOPED_TRACE(std::string("D ") + where_name(d_where) + ", P " + where_name(p_where) +
                     (op == TransferOp::Read ? ", READ" : ", WRITE") + (sealed ? ", sealed" : ", clear"));
        RankOptions opt;
        opt.transport = transport;
        if (sealed) opt.key = std::vector<uint8_t>(32, 0x5A);
        body(d_where, p_where, op, opt);
      }
    }
  }
}

class AgentDeviceMemory : public ::testing::Test {
 protected:
  void SetUp() override { device::set_backend_for_testing(fake); }
  void TearDown() override { device::set_backend_for_testing(nullptr); }
  std::shared_ptr<FakeDevice> fake = std::make_shared<FakeDevice>();
};

}  // namespace

// Every combination of where P's and D's bytes live, READ and WRITE, clear and sealed: D ends
// with exactly the planned bytes, and each device byte moved was staged once.
TEST_F(AgentDeviceMemory, ReadAndWriteStageDeviceBytesThroughHostMemory) {
  for_each_case(Where::Fake, TransportMode::Tcp, [&](Where d_where, Where p_where, TransferOp op, const RankOptions& opt) {
    const uint64_t to_host = fake->bytes_to_host, to_device = fake->bytes_to_device;
    run_pair(d_where, p_where, op, opt, fake, nullptr);
    // The bytes of one plan: the same for both engines' TP split, whichever side posts.
    auto probe_d = make_rank("dec", 1, 0, Where::Host, fake, nullptr, {.register_regions = 0});
    auto probe_p0 = make_rank("pre", 2, 0, Where::Host, fake, nullptr, {.register_regions = 0});
    auto probe_p1 = make_rank("pre", 2, 1, Where::Host, fake, nullptr, {.register_regions = 0});
    const uint64_t moved = plan_bytes(make_plan(*probe_d, {probe_p0.get(), probe_p1.get()}, 16 * 11 + 5));
    EXPECT_EQ(fake->bytes_to_host - to_host, p_where == Where::Fake ? moved : 0u);
    EXPECT_EQ(fake->bytes_to_device - to_device, d_where == Where::Fake ? moved : 0u);
  });
  // Staging buffers came from the backend's page-locked memory, and every one went back with its
  // agent.
  EXPECT_GT(fake->pinned_allocs.load(), 0);
  EXPECT_EQ(fake->pinned_live.load(), 0);
  // Where the backend gives no page-locked memory, ordinary buffers do the same work.
  fake->give_pinned = false;
  const auto before = fake->pinned_allocs.load();
  run_pair(Where::Fake, Where::Fake, TransferOp::Read, {}, fake, nullptr);
  run_pair(Where::Fake, Where::Fake, TransferOp::Write, {}, fake, nullptr);
  EXPECT_EQ(fake->pinned_allocs.load(), before);
}

TEST_F(AgentDeviceMemory, RegistrationChecksTheRangeIsDeviceMemoryOfThatDevice) {
  auto r = make_rank("pre", 1, 0, Where::Fake, fake, nullptr, {.register_regions = 0});
  const auto& reg0 = r->md.regions[0].region;
  const uint64_t len = reg0.block_len * reg0.num_blocks;
  expect_error([&] { r->agent->register_memory(0, reg0.base, len, MemoryType::Cuda, 1); }, Status::InvalidArgument,
               {"region 0 registered as CUDA device 1 memory", "not on device 1"}, "registered as device 1 memory of device 0");
  expect_error([&] { r->agent->register_memory(0, reg0.base, len, MemoryType::Host, 2); }, Status::InvalidArgument,
               {"device 2 applies to CUDA memory only"}, "a device ordinal for host memory");
  // Host memory registered as CUDA memory: the backend does not know it.
  auto h = make_rank("dec", 1, 0, Where::Host, fake, nullptr, {.register_regions = 0});
  const auto& hreg = h->md.regions[1].region;
  expect_error([&] { h->agent->register_memory(1, hreg.base, hreg.block_len * hreg.num_blocks, MemoryType::Cuda); },
               Status::InvalidArgument, {"is not fake device memory"}, "host memory registered as CUDA memory");
  // The right device registers, once.
  auto reg = r->agent->register_memory(0, reg0.base, len, MemoryType::Cuda, 0);
  EXPECT_EQ(reg->type, MemoryType::Cuda);
  EXPECT_THROW(r->agent->register_memory(0, reg0.base, len, MemoryType::Cuda, 0), core::Error);
}

// Auto on both sides of a same-host pair would choose shm; a device region on either side makes it
// tcp. Shm required is refused, naming the region.
TEST_F(AgentDeviceMemory, ASameHostPairWithDeviceMemoryUsesTcpAndShmIsRefusedNamingTheRegion) {
  {
    auto d = make_rank("dec", 1, 0, Where::Host, fake, nullptr, {.transport = TransportMode::Auto});
    auto p = make_rank("pre", 1, 0, Where::Host, fake, nullptr, {.transport = TransportMode::Auto});
    EXPECT_EQ(d->agent->connect(p->agent->info().listen, 3000ms)->transport, TransportMode::Shm)
        << "the control case: host memory on both sides of one host is shm";
  }
  for (bool device_on_d : {false, true}) {
    SCOPED_TRACE(device_on_d ? "device memory on D" : "device memory on P");
    auto d = make_rank("dec", 1, 0, device_on_d ? Where::Fake : Where::Host, fake, nullptr, {.transport = TransportMode::Auto});
    auto p = make_rank("pre", 1, 0, device_on_d ? Where::Host : Where::Fake, fake, nullptr, {.transport = TransportMode::Auto});
    EXPECT_EQ(d->agent->connect(p->agent->info().listen, 3000ms)->transport, TransportMode::Tcp);
  }
  auto d = make_rank("dec", 1, 0, Where::Host, fake, nullptr, {.transport = TransportMode::Shm});
  auto p = make_rank("pre", 1, 0, Where::Fake, fake, nullptr, {.transport = TransportMode::Shm});
  expect_error([&] { d->agent->connect(p->agent->info().listen, 3000ms); }, Status::Transport,
               {"region 0 of engine 'pre' rank 0 is CUDA device memory"}, "shm admitted a peer whose regions are device memory");
}

// A region registered as device memory after a shm peer was admitted cannot go to that peer.
TEST_F(AgentDeviceMemory, APostOverShmThatTouchesDeviceMemoryIsRefusedBeforeAnyByteMoves) {
  auto d = make_rank("dec", 1, 0, Where::Fake, fake, nullptr, {.transport = TransportMode::Auto, .register_regions = 0});
  auto p = make_rank("pre", 1, 0, Where::Host, fake, nullptr, {.transport = TransportMode::Auto});
  ASSERT_EQ(d->agent->connect(p->agent->info().listen, 3000ms)->transport, TransportMode::Shm);
  for (uint32_t i = 0; i < kRegions; ++i) {
    const auto& reg = d->md.regions[i].region;
    d->regs.push_back(d->agent->register_memory(i, reg.base, reg.block_len * reg.num_blocks, MemoryType::Cuda));
  }
  const auto plan = make_plan(*d, {p.get()}, 40);
  PostParams pp;
  pp.plan = &plan;
  pp.peer_engine_id = "pre";
  pp.request_id = "req";
  expect_error([&] { d->agent->post(pp); }, Status::InvalidArgument,
               {"is CUDA device memory, but engine 'pre' rank 0 is connected over shm"}, "posted device memory over shm");
  EXPECT_EQ(fake->calls.load(), 0u);
}

// A staged copy that fails fails the transfer, naming the read and the device copy; the agents go on.
TEST_F(AgentDeviceMemory, AFailedDeviceCopyFailsTheTransferNamingIt) {
  auto d = make_rank("dec", 1, 0, Where::Fake, fake, nullptr);
  auto p = make_rank("pre", 1, 0, Where::Fake, fake, nullptr);
  ASSERT_EQ(d->agent->connect(p->agent->info().listen, 3000ms)->transport, TransportMode::Tcp);
  const auto plan = make_plan(*d, {p.get()}, 40);
  auto read = [&](const std::string& id) {
    PostParams pp;
    pp.plan = &plan;
    pp.peer_engine_id = "pre";
    pp.request_id = id;
    auto t = d->agent->post(pp);
    EXPECT_TRUE(t.wait(10000ms));
    return t.status();
  };
  // Each failure is injected once the connection is quiet: the batches of a failed transfer that
  // were already queued are still served (P copies their bytes when it sends them) and would take
  // the next injected failure. A transfer that succeeds after the failed one drains them (one
  // connection, in order).
  fake->fail_to_device = 1;  // D's copy into its device memory
  auto s = read("into-device");
  EXPECT_EQ(s.status, Status::Transport) << s.message;
  EXPECT_NE(s.message.find("into CUDA device memory: fake device: injected copy failure"), std::string::npos) << s.message;
  EXPECT_EQ(read("settle").status, Status::Ok);
  fake->fail_to_host = 1;  // P's copy out of its device memory, serving the READ
  s = read("out-of-device");
  EXPECT_EQ(s.status, Status::Transport) << s.message;
  EXPECT_NE(s.message.find("copying the bytes out of or into its CUDA device memory failed"), std::string::npos)
      << s.message;
  s = read("after");
  EXPECT_EQ(s.status, Status::Ok) << s.message;
  // WRITE: P's copy out of its own device memory (the poster), then D's copy in (the receiver,
  // which refuses the batch instead of acknowledging it).
  const auto until = std::chrono::steady_clock::now() + 3000ms;
  while (!p->agent->find_peer("dec", 0) && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(2ms);
  auto write = [&](const std::string& id) {
    PostParams pp;
    pp.plan = &plan;
    pp.peer_engine_id = "dec";
    pp.request_id = id;
    pp.op = TransferOp::Write;
    auto t = p->agent->post(pp);
    EXPECT_TRUE(t.wait(10000ms));
    return t.status();
  };
  fake->fail_to_host = 1;
  s = write("w-out-of-device");
  EXPECT_EQ(s.status, Status::Transport) << s.message;
  EXPECT_NE(s.message.find("out of CUDA device memory: fake device: injected copy failure"), std::string::npos) << s.message;
  EXPECT_EQ(write("w-settle").status, Status::Ok);
  fake->fail_to_device = 1;
  s = write("w-into-device");
  EXPECT_EQ(s.status, Status::Transport) << s.message;
  EXPECT_NE(s.message.find("copying the bytes out of or into its CUDA device memory failed"), std::string::npos)
      << s.message;
  s = write("w-after");
  EXPECT_EQ(s.status, Status::Ok) << s.message;
}

// A device copy can take milliseconds (a few MiB over PCIe); it runs in the progress call that
// owns the connection without the agent's lock, like that call's socket I/O, so the agent's other
// calls are not held up meanwhile: while P's copy out of its device memory (serving a READ) and
// D's copy into its device memory (receiving it) are stalled, a call that takes that agent's lock
// (lease) returns at once. (Before, both copies ran under the lock: the call waited for the copy.)
TEST_F(AgentDeviceMemory, DeviceCopiesDoNotHoldTheAgentsLock) {
  for (const bool p_side : {true, false}) {
    SCOPED_TRACE(p_side ? "P copies out of its device memory" : "D copies into its device memory");
    auto fresh = std::make_shared<FakeDevice>();
    device::set_backend_for_testing(fresh);
    auto d = make_rank("dec", 1, 0, p_side ? Where::Host : Where::Fake, fresh, nullptr);
    auto p = make_rank("pre", 1, 0, p_side ? Where::Fake : Where::Host, fresh, nullptr);
    p->store(pattern(p->bytes, 5));
    ASSERT_EQ(d->agent->connect(p->agent->info().listen, 3000ms)->transport, TransportMode::Tcp);
    const auto plan = make_plan(*d, {p.get()}, 40);
    (p_side ? fresh->stall_to_host : fresh->stall_to_device) = true;
    PostParams pp;
    pp.plan = &plan;
    pp.peer_engine_id = "pre";
    pp.request_id = "slow-copy";
    auto t = d->agent->post(pp);
    ASSERT_TRUE(fresh->wait_stalled(5000ms)) << "no device copy started";
    Agent& copying = p_side ? *p->agent : *d->agent;
    const auto t0 = std::chrono::steady_clock::now();
    copying.lease("probe", 1, 1000ms);
    const auto took = std::chrono::steady_clock::now() - t0;
    EXPECT_TRUE(fresh->stalled.load()) << "the copy ended before the call returned";
    EXPECT_LT(took, 1000ms) << "a call on the agent waited for its device copy";
    fresh->release();
    ASSERT_TRUE(t.wait(10000ms));
    EXPECT_EQ(t.status().status, Status::Ok) << t.status().message;
    d.reset();
    p.reset();
    device::set_backend_for_testing(fake);
  }
}

TEST_F(AgentDeviceMemory, PermuteOnReceiveIntoDeviceMemoryIsRefused) {
  auto d = make_rank("dec", 1, 0, Where::Fake, fake, nullptr, {.layout = core::KvLayout::NHD});
  auto p = make_rank("pre", 1, 0, Where::Host, fake, nullptr);
  d->agent->connect(p->agent->info().listen, 3000ms);
  const auto plan = make_plan(*d, {p.get()}, 40, true);
  ASSERT_TRUE(plan.permute.active());
  PostParams pp;
  pp.plan = &plan;
  pp.peer_engine_id = "pre";
  pp.request_id = "req";
  expect_error([&] { d->agent->post(pp); }, Status::InvalidArgument,
               {"which is CUDA device memory: the executor permutes on the CPU"}, "a CPU permutation of device memory was posted");
}

// Without a test backend, CUDA memory needs the driver: where there is none, registering it says
// why; where there is one, host memory is still refused as not being device memory.
TEST(AgentCudaDriver, RegisteringHostMemoryAsCudaIsRefusedSayingWhy) {
  auto r = make_rank("pre", 1, 0, Where::Host, nullptr, nullptr, {.register_regions = 0});
  const auto& reg = r->md.regions[0].region;
  std::string why;
  const bool driver = device::cuda::load_driver(&why) != nullptr;
  expect_error([&] { r->agent->register_memory(0, reg.base, reg.block_len * reg.num_blocks, MemoryType::Cuda); },
               Status::InvalidArgument,
               {driver ? std::string("is not CUDA device memory") : "CUDA device memory cannot be registered on this machine: " + why},
               "host memory registered as CUDA memory");
}

// Real device memory (cuMemAlloc), on a machine with a CUDA driver and device.
TEST(CudaDevice, ReadAndWriteBetweenDeviceAndHostRegions) {
  std::string why;
  const device::cuda::Driver* driver = cuda_ready(&why);
  if (driver == nullptr) GTEST_SKIP() << "no usable CUDA device here: " << why;
  // Auto: device memory makes it tcp.
  for_each_case(Where::Cuda, TransportMode::Auto, [&](Where d_where, Where p_where, TransferOp op, const RankOptions& opt) {
    run_pair(d_where, p_where, op, opt, nullptr, driver);
  });
}

TEST(CudaDevice, RegistrationRefusesARangeReachingPastTheAllocation) {
  std::string why;
  const device::cuda::Driver* driver = cuda_ready(&why);
  if (driver == nullptr) GTEST_SKIP() << "no usable CUDA device here: " << why;
  auto r = make_rank("pre", 1, 0, Where::Cuda, nullptr, driver, {.register_regions = 0});
  // A range reaching 1 GiB past the allocation (nothing else is allocated there in this test).
  expect_error([&] { device::backend()->check_range(r->base(), r->bytes + (1ull << 30), 0); }, Status::InvalidArgument,
               {"is not CUDA device memory"}, "a range past the allocation was accepted");
  EXPECT_NO_THROW(device::backend()->check_range(r->base(), r->bytes, 0));
}
