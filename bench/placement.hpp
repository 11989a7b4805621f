// Where executor_bench's P process runs and how D reaches it. Loopback (the default): P is a
// forked child in D's own network namespace, listening on 127.0.0.1. Across two network
// namespaces (`executor_bench --netns`, tests/support/netns.hpp): the forked child enters P's
// namespace (setns, /sys remounted as `ip netns exec` does) before anything else, listens on its
// end of the veth pair, and D connects to that address; UCX's tcp transport on each side is held
// to that side's veth interface (UCX_NET_DEVICES), as a deployment names the NIC that joins the
// two hosts (otherwise D's UCX would also try P's loopback address, which is D's own there).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include <unistd.h>

#include "support/netns.hpp"

namespace pdkv::bench {

struct Placement {
  std::string netns_path;                // empty: P stays in D's network namespace
  std::string netns_name;                // for `ip netns exec` (ucx_perftest's server)
  std::string p_address = "127.0.0.1";   // P listens here; D connects here
  std::string p_net_device, d_net_device;  // UCX_NET_DEVICES of each side; empty: UCX's choice

  bool across_namespaces() const { return !netns_path.empty(); }
};

inline Placement loopback_placement() { return {}; }

inline Placement netns_placement(const test_support::VethNamespace& ns) {
  Placement p;
  p.netns_path = ns.path();
  p.netns_name = ns.name();
  p.p_address = ns.ns_ip();
  p.p_net_device = ns.ns_if();
  p.d_net_device = ns.host_if();
  return p;
}

// First thing in P's forked child: its namespace and UCX device. Ends the child (exit status 4,
// the reason on stderr) when it cannot get there: the parent then reports that P did not start.
inline void enter_p_side(const Placement& where) {
  if (where.across_namespaces()) {
    const std::string err = test_support::enter_netns(where.netns_path);
    if (!err.empty()) {
      std::fprintf(stderr, "P process: cannot enter the network namespace: %s\n", err.c_str());
      std::_Exit(4);
    }
  }
  if (!where.p_net_device.empty()) ::setenv("UCX_NET_DEVICES", where.p_net_device.c_str(), 1);
}

// Sets UCX_NET_DEVICES to D's device for its lifetime (the UCX context of D reads it), and puts
// the previous value back.
class DSideUcxDevice {
 public:
  explicit DSideUcxDevice(const Placement& where) {
    if (where.d_net_device.empty()) return;
    if (const char* v = std::getenv("UCX_NET_DEVICES")) old_ = v;
    ::setenv("UCX_NET_DEVICES", where.d_net_device.c_str(), 1);
    set_ = true;
  }
  ~DSideUcxDevice() {
    if (!set_) return;
    if (old_) ::setenv("UCX_NET_DEVICES", old_->c_str(), 1);
    else ::unsetenv("UCX_NET_DEVICES");
  }
  DSideUcxDevice(const DSideUcxDevice&) = delete;
  DSideUcxDevice& operator=(const DSideUcxDevice&) = delete;

 private:
  bool set_ = false;
  std::optional<std::string> old_;
};

}  // namespace pdkv::bench
