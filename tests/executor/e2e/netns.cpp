#include "netns.hpp"

#include <unistd.h>

#include <fstream>
#include <stdexcept>

#include "peer_process.hpp"

namespace e2e {

namespace {

bool ip(const std::vector<std::string>& args, std::string* why) {
  std::vector<std::string> argv{"ip"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::string out;
  const int rc = run_command(argv, &out);
  if (rc == 0) return true;
  if (why) {
    std::string cmd;
    for (const auto& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
    *why = "`" + cmd + "` failed (exit " + std::to_string(rc) + "): " + out;
  }
  return false;
}

}  // namespace

std::unique_ptr<VethNamespace> VethNamespace::create(std::string* why) {
  std::unique_ptr<VethNamespace> n(new VethNamespace());
  const unsigned pid = static_cast<unsigned>(getpid());
  n->name_ = "pdkv-e2e-" + std::to_string(pid);
  n->host_if_ = "pe2e" + std::to_string(pid % 10000000) + "h";
  n->ns_if_ = "pe2e" + std::to_string(pid % 10000000) + "n";
  // A /30 of 10.0.0.0/8 per pid: 10.(100 + bits 14..20).(bits 6..13).(bits 0..5 * 4 + 1|2).
  const std::string net = "10." + std::to_string(100 + ((pid >> 14) % 100)) + "." + std::to_string((pid >> 6) & 255) + ".";
  n->host_ip_ = net + std::to_string((pid & 63) * 4 + 1);
  n->ns_ip_ = net + std::to_string((pid & 63) * 4 + 2);
  if (geteuid() != 0) {
    *why = "network namespaces need root (euid " + std::to_string(geteuid()) + ")";
    return nullptr;
  }
  if (!ip({"netns", "add", n->name_}, why)) return nullptr;
  n->ns_made_ = true;
  if (!ip({"link", "add", n->host_if_, "type", "veth", "peer", "name", n->ns_if_}, why)) return nullptr;
  n->link_made_ = true;
  if (!ip({"link", "set", n->ns_if_, "netns", n->name_}, why) ||
      !ip({"addr", "add", n->host_ip_ + "/30", "dev", n->host_if_}, why) ||
      !ip({"link", "set", n->host_if_, "up"}, why) ||
      !ip({"netns", "exec", n->name_, "ip", "addr", "add", n->ns_ip_ + "/30", "dev", n->ns_if_}, why) ||
      !ip({"netns", "exec", n->name_, "ip", "link", "set", n->ns_if_, "up"}, why) ||
      !ip({"netns", "exec", n->name_, "ip", "link", "set", "lo", "up"}, why)) {
    return nullptr;
  }
  // The namespace must reach the test's end before anything is started in it.
  if (!ip({"netns", "exec", n->name_, "ip", "route", "get", n->host_ip_}, why)) return nullptr;
  return n;
}

VethNamespace::~VethNamespace() {
  if (link_made_) ip({"link", "del", host_if_}, nullptr);  // deletes both ends
  if (ns_made_) ip({"netns", "del", name_}, nullptr);
}

uint64_t VethNamespace::host_rx_bytes() const {
  std::ifstream in("/sys/class/net/" + host_if_ + "/statistics/rx_bytes");
  uint64_t v = 0;
  if (!(in >> v)) throw std::runtime_error("cannot read the rx bytes of " + host_if_);
  return v;
}

void VethNamespace::set_link(bool up) {
  std::string why;
  if (!ip({"link", "set", host_if_, up ? "up" : "down"}, &why)) throw std::runtime_error(why);
}

}  // namespace e2e
