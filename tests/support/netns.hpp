// A network namespace for the P side joined to the caller's own namespace by a veth pair, built
// with `ip` (needs root / CAP_NET_ADMIN and iproute2): P and D on "two hosts" of one kernel.
// Used by the e2e tests (tests/executor/e2e/netns_test.cpp) and by `executor_bench --netns`.
//
// Names never meet another user's: the namespace, the interfaces and the /30 carry the creating
// process's pid and a per-user part (the e2e tests and the benchmark may run at the same time on
// one machine), and a namespace or interface that already holds this pid's name is a leftover of
// a killed process (no live process can hold our pid) and is removed first. Torn down by the
// destructor, and on SIGINT / SIGTERM / SIGHUP too once tear_down_on_signals() was called.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pdkv::test_support {

// Who makes the namespace: picks its name ("pdkv-e2e-<pid>", "pdkv-bench-<pid>"), its interfaces'
// names and its address range (10.100-149.x.x for the e2e tests, 10.150-199.x.x for the benchmark).
enum class VethUser { E2eTest, Bench };

class VethNamespace {
 public:
  // The namespace, or nullptr with *why saying what the machine did not permit (not root, no
  // iproute2, no veth, ...). Anything half made is removed before it returns nullptr.
  static std::unique_ptr<VethNamespace> create(VethUser user, std::string* why);
  ~VethNamespace();
  VethNamespace(const VethNamespace&) = delete;
  VethNamespace& operator=(const VethNamespace&) = delete;

  const std::string& name() const { return name_; }
  // The file setns(2) takes to enter the namespace (what `ip netns exec` opens).
  std::string path() const { return "/var/run/netns/" + name_; }
  const std::string& host_ip() const { return host_ip_; }  // the creator's end
  const std::string& ns_ip() const { return ns_ip_; }      // the namespace's end
  const std::string& host_if() const { return host_if_; }  // the creator's interface
  const std::string& ns_if() const { return ns_if_; }      // the namespace's interface
  // Prefix that runs a command inside the namespace.
  std::vector<std::string> exec_prefix() const { return {"ip", "netns", "exec", name_}; }
  // Bytes received on the creator's end of the link so far.
  uint64_t host_rx_bytes() const;
  // Sets the creator's end of the link down (cut) or up again; throws when `ip` fails.
  void set_link(bool up);

  // Installs handlers for SIGINT, SIGTERM and SIGHUP that remove every namespace of this process
  // still alive (async-signal-safe: fork and execve of `ip` prepared at create()), then end the
  // process by the same signal. Child processes forked afterwards take the default action
  // instead; a signal the process ignores stays ignored. Not for programs with their own handlers
  // for these signals (Catch2's).
  static void tear_down_on_signals();

 private:
  VethNamespace() = default;
  std::string name_, host_if_, ns_if_, host_ip_, ns_ip_;
  bool ns_made_ = false, link_made_ = false;
  int slot_ = -1;  // in the signal handler's table
};

// Enters the namespace at `path` in this process (one thread: call it in a freshly forked child)
// the way `ip netns exec` does: setns(2), then a private mount namespace with /sys remounted so
// that /sys/class/net lists the namespace's interfaces (UCX finds its tcp devices there). Returns
// an empty string, or what failed.
std::string enter_netns(const std::string& path);

}  // namespace pdkv::test_support
