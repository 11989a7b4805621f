// Runs Debian's ucx_perftest (server and client on loopback) for ucp_get at one message size with
// the same transports and window as raw_ucx_get, and returns its overall bandwidth. ucx_perftest
// GETs the same buffer over and over (cache-hot on both sides): a reference, not the ceiling.
// Across two network namespaces (placement.hpp) the server runs in P's namespace (`ip netns
// exec`), the client connects to P's veth address, each held to its side's veth interface.
#pragma once

#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "placement.hpp"
#include "ucx/context.hpp"

namespace pdkv::bench {

struct PerftestResult {
  bool ran = false;
  double gbps = 0;     // decimal GB/s (ucx_perftest prints MiB/s)
  std::string error;   // why it did not run
  std::string command;
};

inline bool have_ucx_perftest() { return ::access("/usr/bin/ucx_perftest", X_OK) == 0; }

inline PerftestResult run_ucx_perftest(exec::TransportMode mode, uint64_t size, unsigned window, uint64_t bytes_target,
                                       const Placement& where = loopback_placement()) {
  PerftestResult r;
  if (!have_ucx_perftest()) {
    r.error = "/usr/bin/ucx_perftest not installed (apt-get install ucx-utils)";
    return r;
  }
  const uint64_t iters = std::max<uint64_t>(20, std::min<uint64_t>(200000, bytes_target / size));
  // Its buffers grow with the outstanding count: keep them under 256 MiB for large messages.
  window = static_cast<unsigned>(std::max<uint64_t>(1, std::min<uint64_t>(window, (256ull << 20) / size)));
  static int calls = 0;  // a fresh port per run: a server left by a failed run cannot answer
  const int port = 20000 + static_cast<int>((::getpid() * 7 + calls++) % 20000);
  const std::string env = std::string("UCX_TLS=") + exec::transport_list(mode);
  const std::string server_env =
      (where.across_namespaces() ? "ip netns exec " + where.netns_name + " env " : std::string()) + env +
      (where.p_net_device.empty() ? "" : " UCX_NET_DEVICES=" + where.p_net_device);
  const std::string client_env = env + (where.d_net_device.empty() ? "" : " UCX_NET_DEVICES=" + where.d_net_device);
  const std::string err = mode == exec::TransportMode::Tcp ? " -e" : "";
  const std::string client = client_env + " timeout 120 ucx_perftest " + where.p_address + " -p " + std::to_string(port) +
                             " -t ucp_get -s " + std::to_string(size) + " -n " + std::to_string(iters) +
                             " -w " + std::to_string(std::max<uint64_t>(2, iters / 20)) + " -O " +
                             std::to_string(window) + err + " -f -v";
  r.command = client;
  const std::string cmd = "(" + server_env + " timeout 150 ucx_perftest -p " + std::to_string(port) + err +
                          " >/dev/null 2>&1 &); sleep " +
                          (where.across_namespaces() ? "1" : "0.5") + "; " + client + " 2>/dev/null";
  FILE* f = ::popen(cmd.c_str(), "r");
  if (f == nullptr) {
    r.error = "popen failed";
    return r;
  }
  std::string last;
  char line[512];
  while (std::fgets(line, sizeof line, f) != nullptr) {
    const char* c = line;
    while (*c == ' ') ++c;  // short iteration counts are right-aligned
    if (*c >= '0' && *c <= '9') last = c;
  }
  const int rc = ::pclose(f);
  // iterations,50.0_percentile_lat,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr
  std::vector<std::string> cols;
  std::stringstream ss(last);
  for (std::string c; std::getline(ss, c, ',');) cols.push_back(c);
  if (rc != 0 || cols.size() < 6) {
    r.error = "ucx_perftest failed (exit " + std::to_string(rc) + "): " + client;
    return r;
  }
  r.ran = true;
  r.gbps = std::stod(cols[5]) * 1048576.0 / 1e9;
  return r;
}

}  // namespace pdkv::bench
