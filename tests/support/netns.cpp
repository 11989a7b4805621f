#include "support/netns.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <iterator>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "support/process.hpp"

namespace pdkv::test_support {

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
    *why = "`" + cmd + "` failed (exit " + std::to_string(rc) + "): " +
           (rc == -1 && out.empty() ? "could not run `ip` (is iproute2 installed?)" : out);
  }
  return false;
}

bool exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

// The `ip` binary, for execve from the signal handler (no PATH search there).
std::string find_ip() {
  std::string dirs = std::getenv("PATH") ? std::getenv("PATH") : "";
  dirs += ":/usr/sbin:/sbin:/usr/bin:/bin";
  size_t b = 0;
  while (b <= dirs.size()) {
    const size_t e = dirs.find(':', b);
    const std::string dir = dirs.substr(b, e == std::string::npos ? std::string::npos : e - b);
    if (!dir.empty() && ::access((dir + "/ip").c_str(), X_OK) == 0) return dir + "/ip";
    if (e == std::string::npos) break;
    b = e + 1;
  }
  return "";
}

// What the signal handler removes: one slot per live namespace, filled before it is marked live.
struct Teardown {
  std::atomic<bool> live{false};
  char ip[256] = {};
  char host_if[32] = {};
  char name[64] = {};
};
Teardown g_slots[8];
std::atomic<pid_t> g_owner{0};

void copy_into(char* dst, size_t n, const std::string& s) {
  if (s.size() >= n) throw std::length_error("name too long for the teardown table: " + s);
  std::memcpy(dst, s.c_str(), s.size() + 1);
}

// Only async-signal-safe calls from here on.
void run_from_signal(const char* const* argv) {
  const pid_t pid = _Fork();
  if (pid == 0) {
    const int fd = ::open("/dev/null", O_RDWR);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    char* const envp[] = {nullptr};
    ::execve(argv[0], const_cast<char* const*>(argv), envp);
    ::_exit(127);
  }
  if (pid > 0) {
    int st = 0;
    while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
  }
}

extern "C" void tear_down_and_die(int sig) {
  const int saved = errno;
  if (::getpid() == g_owner.load()) {
    for (Teardown& s : g_slots) {
      if (!s.live.load()) continue;
      const char* del_link[] = {s.ip, "link", "del", s.host_if, nullptr};  // both ends go
      run_from_signal(del_link);
      const char* del_ns[] = {s.ip, "netns", "del", s.name, nullptr};
      run_from_signal(del_ns);
      s.live.store(false);
    }
  }
  // SA_RESETHAND put the default action back: the signal raised again ends the process (or a
  // child that inherited the handler) as soon as this handler returns.
  ::raise(sig);
  errno = saved;
}

}  // namespace

std::unique_ptr<VethNamespace> VethNamespace::create(VethUser user, std::string* why) {
  std::unique_ptr<VethNamespace> n(new VethNamespace());
  const unsigned pid = static_cast<unsigned>(getpid());
  const bool bench = user == VethUser::Bench;
  // Interface names hold at most 15 characters: 4 + 7 digits + 1.
  const std::string tag = bench ? "pbch" : "pe2e";
  n->name_ = std::string(bench ? "pdkv-bench-" : "pdkv-e2e-") + std::to_string(pid);
  n->host_if_ = tag + std::to_string(pid % 10000000) + "h";
  n->ns_if_ = tag + std::to_string(pid % 10000000) + "n";
  // A /30 of 10.0.0.0/8 per pid: 10.(base + (pid >> 14) mod 50).(bits 6..13).(bits 0..5 * 4 + 1|2),
  // base 100 for the e2e tests and 150 for the benchmark, so their ranges never overlap.
  const unsigned base = bench ? 150 : 100;
  const std::string net =
      "10." + std::to_string(base + ((pid >> 14) % 50)) + "." + std::to_string((pid >> 6) & 255) + ".";
  n->host_ip_ = net + std::to_string((pid & 63) * 4 + 1);
  n->ns_ip_ = net + std::to_string((pid & 63) * 4 + 2);
  if (geteuid() != 0) {
    *why = "network namespaces need root (euid " + std::to_string(geteuid()) + ")";
    return nullptr;
  }
  // From here on a signal handler of tear_down_on_signals() removes whatever exists of it.
  const std::string ip_path = find_ip();
  for (int i = 0; i < static_cast<int>(std::size(g_slots)) && !ip_path.empty(); ++i) {
    Teardown& s = g_slots[i];
    if (s.live.load()) continue;
    copy_into(s.ip, sizeof s.ip, ip_path);
    copy_into(s.host_if, sizeof s.host_if, n->host_if_);
    copy_into(s.name, sizeof s.name, n->name_);
    s.live.store(true);
    n->slot_ = i;
    break;
  }
  // Leftovers of a killed process that held this pid before.
  if (exists("/sys/class/net/" + n->host_if_)) ip({"link", "del", n->host_if_}, nullptr);
  if (exists(n->path())) ip({"netns", "del", n->name_}, nullptr);
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
  // The namespace must reach the creator's end before anything is started in it.
  if (!ip({"netns", "exec", n->name_, "ip", "route", "get", n->host_ip_}, why)) return nullptr;
  return n;
}

VethNamespace::~VethNamespace() {
  if (link_made_) ip({"link", "del", host_if_}, nullptr);  // deletes both ends
  if (ns_made_) ip({"netns", "del", name_}, nullptr);
  if (slot_ >= 0) g_slots[slot_].live.store(false);
}

void VethNamespace::tear_down_on_signals() {
  g_owner.store(getpid());
  struct sigaction sa {};
  sa.sa_handler = tear_down_and_die;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction old {};
    // A signal the caller ignores (nohup, a background job's SIGINT) stays ignored.
    if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    ::sigaction(sig, &sa, nullptr);
  }
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

std::string enter_netns(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "open " + path + ": " + std::strerror(errno);
  const int rc = ::setns(fd, CLONE_NEWNET);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return "setns " + path + ": " + std::strerror(err);
  // As iproute2 does: a mount namespace of our own whose mounts do not propagate back, and a
  // sysfs mounted from inside the network namespace.
  if (::unshare(CLONE_NEWNS) != 0) return std::string("unshare(CLONE_NEWNS): ") + std::strerror(errno);
  if (::mount("", "/", nullptr, MS_SLAVE | MS_REC, nullptr) != 0) {
    return std::string("mount --make-rslave /: ") + std::strerror(errno);
  }
  // A /sys that cannot be unmounted is shadowed instead (read-only if it was).
  unsigned long flags = 0;
  struct statvfs st;
  if (::umount2("/sys", MNT_DETACH) != 0 && ::statvfs("/sys", &st) == 0 && (st.f_flag & ST_RDONLY) != 0) {
    flags = MS_RDONLY;
  }
  if (::mount("sysfs", "/sys", "sysfs", flags, nullptr) != 0) return std::string("mount sysfs: ") + std::strerror(errno);
  return "";
}

}  // namespace pdkv::test_support
