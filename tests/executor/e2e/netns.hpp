// A network namespace for the P side joined to the test's own namespace by a veth pair, built
// with `ip` (needs root / CAP_NET_ADMIN and iproute2). Addresses come from the test's pid so
// concurrent runs on one machine do not collide. Torn down by the destructor.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace e2e {

class VethNamespace {
 public:
  // The namespace, or nullptr with *why saying what the machine did not permit.
  static std::unique_ptr<VethNamespace> create(std::string* why);
  ~VethNamespace();
  VethNamespace(const VethNamespace&) = delete;
  VethNamespace& operator=(const VethNamespace&) = delete;

  const std::string& host_ip() const { return host_ip_; }  // the test's end
  const std::string& ns_ip() const { return ns_ip_; }      // the namespace's end
  // Prefix that runs a command inside the namespace.
  std::vector<std::string> exec_prefix() const { return {"ip", "netns", "exec", name_}; }
  // Bytes received on the test's end of the link so far.
  uint64_t host_rx_bytes() const;
  // Sets the test's end of the link down (cut) or up again; throws when `ip` fails.
  void set_link(bool up);

 private:
  VethNamespace() = default;
  std::string name_, host_if_, ns_if_, host_ip_, ns_ip_;
  bool ns_made_ = false, link_made_ = false;
};

}  // namespace e2e
