// What staging CUDA device memory through host memory costs: one P and one D agent in this
// process over the tcp data connection (loopback), the same plan (every block of every region,
// D's ids consecutive) READ with each side's regions on the host or on the GPU. The host/host row
// is the baseline of the same run on the same work (bytes, pieces, transport, seal setting); each
// device row is reported as a ratio of it. Without a CUDA driver and device only the baseline runs,
// and the device rows say why they are absent.
//
// Usage: device_staging_bench [--region-mib 64] [--reps 5] [--key]   (--key: sealed data connection)
// Results: docs/benchmarks.md, "CUDA device memory, staged".
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "agent/agent.hpp"
#include "device/cuda_driver.hpp"
#include "pdkv/core/geometry.hpp"
#include "pdkv/core/metadata_from_geometry.hpp"
#include "pdkv/core/transfer_plan.hpp"

using namespace pdkv;
using namespace pdkv::exec;
using namespace std::chrono_literals;
namespace cu = pdkv::exec::device::cuda;

namespace {

constexpr uint32_t kRegions = 2;

core::ModelDesc model() {
  core::ModelDesc m;
  m.name = "bench-gqa";
  m.attention.num_kv_heads = 8;
  m.attention.head_size = 128;
  m.attention.head_size_v = 128;
  m.dtype_bytes = 2;
  return m;
}

struct Rank {
  core::EngineMetadata md;
  std::vector<uint8_t> host;
  cu::CUdeviceptr cuda = 0;
  const cu::Driver* driver = nullptr;
  std::unique_ptr<Agent> agent;
  ~Rank() {
    agent.reset();
    if (cuda != 0) driver->MemFree(cuda);
  }
};

std::unique_ptr<Rank> make_rank(const std::string& engine, uint64_t blocks, bool on_gpu, const cu::Driver* driver,
                                const std::string& key) {
  auto r = std::make_unique<Rank>();
  r->driver = driver;
  const auto m = model();
  core::EngineConfig cfg;
  cfg.tp_size = 1;
  cfg.user_block_size = 16;
  const auto geo = core::derive_geometry(m, cfg);
  const auto probe = core::metadata_from_geometry(m, cfg, geo, {engine, 0, blocks, kRegions, 1ull << 40});
  uint64_t bytes = 0;
  for (const auto& reg : probe.regions) bytes += reg.region.block_len * reg.region.num_blocks;
  uint64_t base = 0;
  if (on_gpu) {
    if (driver->MemAlloc(&r->cuda, bytes) != cu::kSuccess) core::fail(core::Status::Internal, "cuMemAlloc failed");
    std::vector<uint8_t> fill(bytes);
    for (size_t i = 0; i < bytes; ++i) fill[i] = static_cast<uint8_t>(i * 7 + 1);
    driver->MemcpyHtoD(r->cuda, fill.data(), bytes);
    base = r->cuda;
  } else {
    r->host.resize(bytes);
    for (size_t i = 0; i < bytes; ++i) r->host[i] = static_cast<uint8_t>(i * 7 + 1);
    base = reinterpret_cast<uint64_t>(r->host.data());
  }
  r->md = core::metadata_from_geometry(m, cfg, geo, {engine, 0, blocks, kRegions, base});
  AgentOptions o;
  o.metadata = r->md;
  o.transport = TransportMode::Tcp;
  o.default_timeout = 60000ms;
  if (!key.empty()) o.key = PresharedKey::from_string(key);
  r->agent = std::make_unique<Agent>(o);
  for (uint32_t i = 0; i < kRegions; ++i) {
    const auto& reg = r->md.regions[i].region;
    r->agent->register_memory(i, reg.base, reg.block_len * reg.num_blocks, on_gpu ? MemoryType::Cuda : MemoryType::Host);
  }
  return r;
}

struct Row {
  double median_s = 0;
  uint64_t bytes = 0;
  size_t reads = 0;
};

Row measure(bool d_gpu, bool p_gpu, uint64_t blocks, int reps, const cu::Driver* driver, const std::string& key) {
  auto d = make_rank("dec", blocks, d_gpu, driver, key);
  auto p = make_rank("pre", blocks, p_gpu, driver, key);
  d->agent->connect(p->agent->info().listen, 5000ms);
  core::PlanContext ctx = core::make_plan_context(d->md, {p->md});
  core::PlanGroup g;
  g.trim.kind = core::GroupKind::Attention;
  for (uint64_t b = 1; b < blocks; ++b) {  // block 0 is vLLM's null block
    g.trim.local_blocks.push_back(b);
    g.trim.remote_blocks.push_back(b);
  }
  g.trim.remote_computed_tokens = (blocks - 1) * 16;
  const auto plan = core::compile_transfer_plan(ctx, {g});
  Row row;
  for (const auto& rr : plan.ranks) {
    row.reads += rr.reads.size();
    for (const auto& r : rr.reads) row.bytes += r.length;
  }
  std::vector<double> times;
  for (int i = 0; i <= reps; ++i) {  // the first pass warms up (connections, staging buffers)
    PostParams pp;
    pp.plan = &plan;
    pp.peer_engine_id = "pre";
    pp.request_id = "bench-" + std::to_string(i);
    const auto t0 = std::chrono::steady_clock::now();
    auto t = d->agent->post(pp);
    t.wait(120000ms);
    const auto s = t.status();
    if (s.status != core::Status::Ok) core::fail(s.status, s.message);
    if (i > 0) times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  row.median_s = times[times.size() / 2];
  return row;
}

int run(int argc, char** argv) {
  uint64_t region_mib = 64;
  int reps = 5;
  std::string key;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--region-mib" && i + 1 < argc) region_mib = std::stoull(argv[++i]);
    else if (a == "--reps" && i + 1 < argc) reps = std::stoi(argv[++i]);
    else if (a == "--key") key = "device-staging-bench-key";
    else {
      std::fprintf(stderr, "usage: device_staging_bench [--region-mib 64] [--reps 5] [--key]\n");
      return 2;
    }
  }
  uint64_t block_len = 0;
  {
    const auto m = model();
    core::EngineConfig cfg;
    cfg.user_block_size = 16;
    block_len = core::metadata_from_geometry(m, cfg, core::derive_geometry(m, cfg), {"probe", 0, 1, kRegions, 1ull << 40})
                    .regions[0]
                    .region.block_len;
  }
  const uint64_t blocks = std::max<uint64_t>(2, region_mib * 1024 * 1024 / block_len);
  std::string why;
  const cu::Driver* driver = cu::load_driver(&why);
  if (driver != nullptr) {
    cu::CUdevice dev = 0;
    cu::CUcontext ctx = nullptr;
    if (driver->DeviceGet(&dev, 0) != cu::kSuccess || driver->DevicePrimaryCtxRetain(&ctx, dev) != cu::kSuccess ||
        driver->CtxSetCurrent(ctx) != cu::kSuccess) {
      driver = nullptr;
      why = "device 0's primary context could not be made current";
    }
  }
  std::printf("READ of %llu blocks x %u regions over tcp loopback%s, median of %d\n",
              static_cast<unsigned long long>(blocks), kRegions, key.empty() ? " (clear)" : " (sealed)", reps);
  std::printf("| D memory | P memory | bytes | reads | median ms | GB/s | speed vs host/host |\n|---|---|---:|---:|---:|---:|---:|\n");
  const Row base = measure(false, false, blocks, reps, nullptr, key);
  auto print = [&](const char* d, const char* p, const Row& r) {
    std::printf("| %s | %s | %llu | %zu | %.2f | %.2f | %.2fx |\n", d, p, static_cast<unsigned long long>(r.bytes), r.reads,
                r.median_s * 1e3, static_cast<double>(r.bytes) / r.median_s / 1e9, base.median_s / r.median_s);
  };
  print("host", "host", base);
  if (driver == nullptr) {
    std::printf("(no device rows: %s)\n", why.c_str());
    return 0;
  }
  print("cuda", "host", measure(true, false, blocks, reps, driver, key));
  print("host", "cuda", measure(false, true, blocks, reps, driver, key));
  print("cuda", "cuda", measure(true, true, blocks, reps, driver, key));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "device_staging_bench: %s\n", e.what());
    return 1;
  }
}
