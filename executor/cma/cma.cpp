#include "cma/cma.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

#include "pdkv/core/error.hpp"

namespace pdkv::exec::cma {

namespace {

// A single call moves at most this much: the kernel refuses totals above SSIZE_MAX, and smaller
// calls keep a huge piece from holding the caller for seconds (the caller's batches are far
// smaller anyway).
constexpr uint64_t kMaxCallBytes = 1ull << 30;

ssize_t vm_call(pid_t pid, Direction d, const iovec* local, const iovec* remote, unsigned long n) noexcept {
  return d == Direction::Read ? ::process_vm_readv(pid, local, n, remote, n, 0)
                              : ::process_vm_writev(pid, local, n, remote, n, 0);
}

}  // namespace

const char* syscall_name(Direction direction) noexcept {
  return direction == Direction::Read ? "process_vm_readv" : "process_vm_writev";
}

std::string errno_text(int error) {
  const char* name = ::strerrorname_np(error);
  return std::string(name ? name : ("errno " + std::to_string(error)).c_str()) + " (" + std::strerror(error) + ")";
}

CopyResult copy(pid_t pid, Direction direction, std::span<const Segment> segments) noexcept {
  CopyResult out;
  iovec local[kMaxIov];
  iovec remote[kMaxIov];
  size_t seg = 0;
  uint64_t off = 0;  // bytes of segments[seg] already copied
  while (seg < segments.size()) {
    if (segments[seg].length == off) {
      ++seg;
      off = 0;
      continue;
    }
    // Fill one call from (seg, off) on.
    unsigned long n = 0;
    uint64_t total = 0;
    for (size_t s = seg; s < segments.size() && n < kMaxIov && total < kMaxCallBytes; ++s) {
      const uint64_t start = s == seg ? off : 0;
      const uint64_t len = std::min<uint64_t>(segments[s].length - start, kMaxCallBytes - total);
      if (len == 0) continue;
      local[n].iov_base = static_cast<uint8_t*>(segments[s].local) + start;
      local[n].iov_len = static_cast<size_t>(len);
      remote[n].iov_base = reinterpret_cast<void*>(static_cast<uintptr_t>(segments[s].remote + start));
      remote[n].iov_len = static_cast<size_t>(len);
      ++n;
      total += len;
    }
    const ssize_t r = vm_call(pid, direction, local, remote, n);
    if (r < 0) {
      if (errno == EINTR) continue;
      out.error = errno;
      return out;
    }
    if (r == 0) {
      out.error = EFAULT;  // no progress and no error: never loop on it
      return out;
    }
    // Advance by r bytes.
    uint64_t left = static_cast<uint64_t>(r);
    out.bytes += left;
    while (left > 0 && seg < segments.size()) {
      const uint64_t in_seg = segments[seg].length - off;
      if (left >= in_seg) {
        left -= in_seg;
        ++seg;
        off = 0;
      } else {
        off += left;
        left = 0;
      }
    }
  }
  return out;
}

CopyResult copy_mapped(Direction direction, std::span<const Segment> segments) noexcept {
  CopyResult out;
  for (const Segment& s : segments) {
    void* remote = reinterpret_cast<void*>(static_cast<uintptr_t>(s.remote));
    if (direction == Direction::Read) {
      std::memcpy(s.local, remote, static_cast<size_t>(s.length));
    } else {
      std::memcpy(remote, s.local, static_cast<size_t>(s.length));
    }
    out.bytes += s.length;
  }
  return out;
}

Copier::Copier(unsigned threads) {
  for (unsigned i = 1; i < threads; ++i) {
    auto h = std::make_unique<Helper>();
    Helper* hp = h.get();
    h->thread = std::thread([hp] {
      std::unique_lock<std::mutex> g(hp->m);
      for (;;) {
        hp->cv.wait(g, [&] { return hp->has_task || hp->stop; });
        if (hp->stop) return;
        hp->has_task = false;
        g.unlock();
        const CopyResult r = hp->mapped ? cma::copy_mapped(hp->direction, hp->segments)
                                        : cma::copy(hp->pid, hp->direction, hp->segments);
        g.lock();
        hp->result = r;
        hp->done = true;
        hp->cv.notify_all();
      }
    });
    helpers_.push_back(std::move(h));
  }
}

Copier::~Copier() {
  for (auto& h : helpers_) {
    {
      std::lock_guard<std::mutex> g(h->m);
      h->stop = true;
    }
    h->cv.notify_all();
    if (h->thread.joinable()) h->thread.join();
  }
}

CopyResult Copier::copy(pid_t pid, Direction direction, std::span<const Segment> segments, uint64_t min_split_bytes,
                        bool mapped) {
  auto one = [&](std::span<const Segment> part) {
    return mapped ? cma::copy_mapped(direction, part) : cma::copy(pid, direction, part);
  };
  uint64_t total = 0;
  for (const Segment& s : segments) total += s.length;
  std::unique_lock<std::mutex> busy(busy_, std::defer_lock);
  if (helpers_.empty() || total < min_split_bytes || total < threads() || !busy.try_lock()) {
    return one(segments);
  }
  // Cut into threads() parts of about total / threads() bytes each.
  const unsigned n = threads();
  std::vector<std::vector<Segment>> parts(n);
  std::vector<uint64_t> part_bytes(n, 0);
  const uint64_t share = (total + n - 1) / n;
  unsigned k = 0;
  for (const Segment& s : segments) {
    uint64_t off = 0;
    while (off < s.length) {
      if (part_bytes[k] >= share && k + 1 < n) ++k;
      const uint64_t take = std::min(s.length - off, k + 1 < n ? share - part_bytes[k] : s.length - off);
      parts[k].push_back({static_cast<uint8_t*>(s.local) + off, s.remote + off, take});
      part_bytes[k] += take;
      off += take;
    }
  }
  for (unsigned i = 1; i < n; ++i) {
    Helper& h = *helpers_[i - 1];
    std::lock_guard<std::mutex> g(h.m);
    h.pid = pid;
    h.direction = direction;
    h.mapped = mapped;
    h.segments = std::move(parts[i]);
    h.done = false;
    h.has_task = true;
    h.cv.notify_all();
  }
  std::vector<CopyResult> results(n);
  results[0] = one(parts[0]);
  for (unsigned i = 1; i < n; ++i) {
    Helper& h = *helpers_[i - 1];
    std::unique_lock<std::mutex> g(h.m);
    h.cv.wait(g, [&] { return h.done; });
    results[i] = h.result;
  }
  CopyResult out;
  for (unsigned i = 0; i < n; ++i) {
    out.bytes += results[i].bytes;
    if (results[i].error != 0) {
      out.error = results[i].error;
      return out;
    }
  }
  return out;
}

Probe::Probe() : pid_(static_cast<uint32_t>(::getpid())) {
  size_t got = 0;
  while (got < value_.size()) {
    const ssize_t r = ::getrandom(value_.data() + got, value_.size() - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw core::Error(core::Status::Io, "getrandom for the cross-memory-attach probe: " + errno_text(errno),
                        core::CauseDomain::Errno, errno);
    }
    got += static_cast<size_t>(r);
  }
}

Probe::~Probe() { revoke(); }

void Probe::revoke() noexcept {
  volatile uint8_t* p = value_.data();
  for (size_t i = 0; i < value_.size(); ++i) p[i] = 0;
}

std::string check_probe(uint32_t pid, uint64_t address, const ProbeValue& expected) {
  if (std::all_of(expected.begin(), expected.end(), [](uint8_t b) { return b == 0; })) {
    return "the peer advertised a revoked (all-zero) probe";
  }
  if (pid == 0 || pid > static_cast<uint32_t>(INT32_MAX)) {
    return "the peer advertised no usable process id (" + std::to_string(pid) + ")";
  }
  ProbeValue got{};
  const Segment s{got.data(), address, got.size()};
  const CopyResult r = copy(static_cast<pid_t>(pid), Direction::Read, std::span<const Segment>(&s, 1));
  if (r.error != 0) {
    std::string why = "process_vm_readv of its probe at 0x";
    char hex[32];
    std::snprintf(hex, sizeof hex, "%llx", static_cast<unsigned long long>(address));
    why += hex;
    why += " in pid " + std::to_string(pid) + " failed: " + errno_text(r.error);
    switch (r.error) {
      case EPERM:
        why += "; cross-memory attach needs ptrace access to the peer (same user and "
               "kernel.yama.ptrace_scope 0, or CAP_SYS_PTRACE; containers: the seccomp profile must allow "
               "process_vm_readv)";
        break;
      case ESRCH:
        why += "; no such process here: the peer runs in another pid namespace (container) or exited";
        break;
      case EFAULT:
        why += "; the address is not mapped in that process: pid " + std::to_string(pid) +
               " is another process here (another pid namespace)";
        break;
      case ENOSYS:
        why += "; this kernel has no cross-memory attach";
        break;
      default:
        break;
    }
    return why;
  }
  if (got != expected) {
    return "pid " + std::to_string(pid) +
           " holds other bytes at the advertised probe address: it is another process here (the peer "
           "runs in another pid namespace)";
  }
  return {};
}

namespace {

// A TCP endpoint as /proc/net/tcp6 lists it: the address as 16 bytes (IPv4 as ::ffff:a.b.c.d, the
// form tcp6 lists an IPv4 peer of a dual-stack socket in) and the port.
struct Endpoint {
  std::array<uint8_t, 16> addr{};
  uint16_t port = 0;
  bool operator==(const Endpoint&) const = default;
};

bool endpoint_of(const sockaddr_storage& ss, Endpoint* out) {
  if (ss.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(ss);
    out->addr = {};
    out->addr[10] = 0xff;
    out->addr[11] = 0xff;
    std::memcpy(out->addr.data() + 12, &a.sin_addr, 4);
    out->port = ntohs(a.sin_port);
    return true;
  }
  if (ss.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(ss);
    std::memcpy(out->addr.data(), &a.sin6_addr, 16);
    out->port = ntohs(a.sin6_port);
    return true;
  }
  return false;
}

// "0100007F:1F90" (tcp: one 32-bit word) or 32 hex digits ":" port (tcp6: four words). The kernel
// prints each word of the address as the number its bytes (network order) make in this machine's
// order, so the word's bytes in memory are the address's bytes.
bool parse_endpoint(const char* text, bool v6, Endpoint* out) {
  const size_t words = v6 ? 4 : 1;
  uint8_t bytes[16];
  for (size_t w = 0; w < words; ++w) {
    char hex[9];
    std::memcpy(hex, text + 8 * w, 8);
    hex[8] = '\0';
    char* end = nullptr;
    const uint32_t v = static_cast<uint32_t>(std::strtoul(hex, &end, 16));
    if (end != hex + 8) return false;
    std::memcpy(bytes + 4 * w, &v, 4);
  }
  if (text[8 * words] != ':') return false;
  char* end = nullptr;
  const unsigned long port = std::strtoul(text + 8 * words + 1, &end, 16);
  if (end == text + 8 * words + 1 || port > 0xffff) return false;
  out->addr = {};
  if (v6) {
    std::memcpy(out->addr.data(), bytes, 16);
  } else {
    out->addr[10] = 0xff;
    out->addr[11] = 0xff;
    std::memcpy(out->addr.data() + 12, bytes, 4);
  }
  out->port = static_cast<uint16_t>(port);
  return true;
}

std::string endpoint_text(const sockaddr_storage& ss) {
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (ss.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(ss);
    ::inet_ntop(AF_INET, &a.sin_addr, host, sizeof host);
    port = ntohs(a.sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(ss);
    ::inet_ntop(AF_INET6, &a.sin6_addr, host, sizeof host);
    port = ntohs(a.sin6_port);
  }
  return std::string(host) + ":" + std::to_string(port);
}

}  // namespace

std::string check_connection_owner(uint32_t pid, int fd) {
  if (pid == 0 || pid > static_cast<uint32_t>(INT32_MAX)) {
    return "the peer advertised no usable process id (" + std::to_string(pid) + ")";
  }
  sockaddr_storage mine{};
  sockaddr_storage theirs{};
  socklen_t mine_len = sizeof mine;
  socklen_t theirs_len = sizeof theirs;
  Endpoint local;
  Endpoint remote;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&mine), &mine_len) != 0 ||
      ::getpeername(fd, reinterpret_cast<sockaddr*>(&theirs), &theirs_len) != 0) {
    return "the control connection's addresses cannot be read: " + errno_text(errno);
  }
  if (!endpoint_of(mine, &local) || !endpoint_of(theirs, &remote)) {
    return "the control connection is not a TCP/IP connection";
  }
  const std::string conn = endpoint_text(theirs) + " -> " + endpoint_text(mine);
  const std::string proc = "/proc/" + std::to_string(pid);
  // The far end of the connection, in pid's network namespace: local = our peer, remote = us.
  std::set<unsigned long> inodes;
  for (const bool v6 : {false, true}) {
    FILE* f = std::fopen((proc + (v6 ? "/net/tcp6" : "/net/tcp")).c_str(), "re");
    if (f == nullptr) continue;
    char line[512];
    bool header = true;
    while (std::fgets(line, sizeof line, f) != nullptr) {
      if (header) {
        header = false;
        continue;
      }
      // "sl: local remote st tx:rx tr:when retrnsmt uid timeout inode ..."
      char sl[32], loc[64], rem[64], st[8], q[32], tr[32], retr[16];
      unsigned long uid = 0, timeout = 0, inode = 0;
      if (std::sscanf(line, "%31s %63s %63s %7s %31s %31s %15s %lu %lu %lu", sl, loc, rem, st, q, tr, retr, &uid, &timeout,
                      &inode) != 10) {
        continue;
      }
      Endpoint l;
      Endpoint r;
      if (inode == 0 || !parse_endpoint(loc, v6, &l) || !parse_endpoint(rem, v6, &r)) continue;
      if (l == remote && r == local) inodes.insert(inode);
    }
    std::fclose(f);
  }
  if (inodes.empty()) {
    return "pid " + std::to_string(pid) + " does not hold the other end of this control connection (" + conn +
           "): its network namespace has no such socket, so it is not the peer that authenticated";
  }
  DIR* dir = ::opendir((proc + "/fd").c_str());
  if (dir == nullptr) {
    return "cannot list the descriptors of pid " + std::to_string(pid) + " to check that it holds the other end of " +
           "this control connection: " + errno_text(errno);
  }
  bool found = false;
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    char target[64];
    const ssize_t n = ::readlinkat(::dirfd(dir), e->d_name, target, sizeof target - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    unsigned long inode = 0;
    char close = '\0';
    if (std::sscanf(target, "socket:[%lu%c", &inode, &close) == 2 && close == ']' && inodes.count(inode) != 0) {
      found = true;
      break;
    }
  }
  ::closedir(dir);
  if (!found) {
    return "pid " + std::to_string(pid) + " does not hold the other end of this control connection (" + conn +
           "): another process does, so pid " + std::to_string(pid) + " is not the peer that authenticated";
  }
  return {};
}

PeerProcess::PeerProcess(uint32_t pid) noexcept : pid_(static_cast<pid_t>(pid)) {
#ifdef SYS_pidfd_open
  const long fd = ::syscall(SYS_pidfd_open, pid_, 0);
  pidfd_ = fd >= 0 ? static_cast<int>(fd) : -1;
#endif
}

PeerProcess::~PeerProcess() {
  if (pidfd_ >= 0) ::close(pidfd_);
}

bool PeerProcess::exited() const noexcept {
  if (pidfd_ >= 0) {
    pollfd p{pidfd_, POLLIN, 0};
    const int r = ::poll(&p, 1, 0);
    return r > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
  }
  return ::kill(pid_, 0) != 0 && errno == ESRCH;
}

}  // namespace pdkv::exec::cma
