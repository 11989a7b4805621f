// Cross-memory attach: the data path between two agents on the same host. The posting side copies
// the bytes itself with process_vm_readv (READ: D pulls from P) or process_vm_writev (WRITE: P
// pushes into D), straight between the two processes' registered memory, one system call per
// batch of pieces. Nothing is queued in a transport library: a peer that died is an error code
// (ESRCH, EFAULT) from the next call, and nothing can stay in flight after a call returns.
//
// Before a peer's pid is used, Probe proves that the pid, as this process sees it, is that peer
// and that cross-memory attach to it is allowed: the peer advertises (over its authenticated
// control channel) its pid and the address of a random value in its memory; the reader reads it
// back and compares. A pid from another pid namespace, a ptrace policy that forbids the access, or
// another host fails the probe with a reason.
//
// Internal to executor/. Depends on nothing but libc (and pdkv/core/error.hpp for messages).
#pragma once

#include <sys/types.h>

#include <array>
#include <memory>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace pdkv::exec::cma {

enum class Direction : uint8_t { Read = 0, Write = 1 };

// One contiguous piece: `length` bytes at `local` in this process and at `remote` in the peer.
struct Segment {
  void* local = nullptr;
  uint64_t remote = 0;
  uint64_t length = 0;
};

// The most iovec entries one system call is given (IOV_MAX is 1024 on Linux).
inline constexpr size_t kMaxIov = 1024;

struct CopyResult {
  uint64_t bytes = 0;  // bytes copied, in segment order from the first segment's first byte
  int error = 0;       // 0 when every byte was copied; else the errno that stopped the copy
};

// Copies `segments` in order between this process and process `pid`, resuming after short counts,
// until every byte is copied or a call fails (EINTR is retried). A call that copies nothing
// without an error stops the copy with EFAULT. Never throws.
CopyResult copy(pid_t pid, Direction direction, std::span<const Segment> segments) noexcept;

// copy() between this process's memory and a peer's memory mapped here (shared_memory.hpp):
// `remote` of each segment is the address of the peer's bytes in this process's mapping. A READ
// copies remote -> local, a WRITE local -> remote, with memcpy. Never fails (the mapping's file
// is sealed against shrinking, so no access to it can fault); bytes is the total.
CopyResult copy_mapped(Direction direction, std::span<const Segment> segments) noexcept;

// copy() on several threads: a call of at least `min_split_bytes` is cut into `threads` parts of
// about equal bytes (a segment may be cut), part 0 copied by the calling thread and the others by
// helper threads the Copier owns. The result reads as copy()'s: bytes in segment order up to the
// first part that failed. With `mapped` each part is copy_mapped()'s instead. Safe to call from several threads: a call that finds the helpers busy
// copies alone. With threads == 1 it is copy().
class Copier {
 public:
  explicit Copier(unsigned threads);
  ~Copier();
  Copier(const Copier&) = delete;
  Copier& operator=(const Copier&) = delete;

  unsigned threads() const noexcept { return static_cast<unsigned>(helpers_.size()) + 1; }
  CopyResult copy(pid_t pid, Direction direction, std::span<const Segment> segments, uint64_t min_split_bytes,
                  bool mapped = false);

 private:
  struct Helper {
    std::mutex m;
    std::condition_variable cv;
    bool has_task = false, done = false, stop = false, mapped = false;
    pid_t pid = 0;
    Direction direction = Direction::Read;
    std::vector<Segment> segments;
    CopyResult result;
    std::thread thread;
  };
  std::vector<std::unique_ptr<Helper>> helpers_;
  std::mutex busy_;  // held by the call using the helpers
};

// "process_vm_readv" / "process_vm_writev".
const char* syscall_name(Direction direction) noexcept;

inline constexpr size_t kProbeBytes = 32;
using ProbeValue = std::array<uint8_t, kProbeBytes>;

// This process's proof of identity for its peers: kProbeBytes random bytes (getrandom) at a fixed
// address for the object's lifetime. Peers read it back before and after every batch they copy,
// so revoke() (and the destructor), which zero it, stop every peer's copies: an agent revokes its
// probe first thing when it shuts down, before its caller may reuse the memory.
class Probe {
 public:
  Probe();  // Error(Io) when no random bytes can be had
  ~Probe();
  void revoke() noexcept;
  Probe(const Probe&) = delete;
  Probe& operator=(const Probe&) = delete;

  uint32_t pid() const noexcept { return pid_; }
  uint64_t address() const noexcept { return reinterpret_cast<uintptr_t>(value_.data()); }
  const ProbeValue& value() const noexcept { return value_; }

 private:
  uint32_t pid_;
  alignas(64) ProbeValue value_{};
};

// Reads kProbeBytes at `address` in process `pid` and compares them with `expected`. Returns ""
// when they match; otherwise why not, in words (with the errno's name and the likely cause:
// another pid namespace, a ptrace policy, a process that is gone).
std::string check_probe(uint32_t pid, uint64_t address, const ProbeValue& expected);

// Whether process `pid` holds the other end of this process's connected TCP socket `fd`: the
// socket whose local address is fd's peer address and whose peer address is fd's local address,
// as pid's own network namespace lists it (/proc/<pid>/net/tcp and tcp6), must be one of pid's
// descriptors (/proc/<pid>/fd). Returns "" when it is; otherwise why not, in words.
// Why: check_probe only shows that pid holds bytes the peer knows, and a peer can know another
// process's bytes (a forked copy of a probe, or bytes of a registered region it read over tcp, in
// another agent's process or in this one). Attaching to pid is only safe once pid is shown to be
// the process at the far end of the connection that authenticated the peer; a relaying or remote
// peer cannot make another process hold its socket.
std::string check_connection_owner(uint32_t pid, int fd);

// A peer process watched through a pidfd, so a pid that the kernel recycled after the peer died
// is never read or written: exited() turns true once the peer has exited (before its pid can be
// reused). Without pidfd support (kernel < 5.3) exited() only reports what kill(pid, 0) says.
class PeerProcess {
 public:
  explicit PeerProcess(uint32_t pid) noexcept;
  ~PeerProcess();
  PeerProcess(const PeerProcess&) = delete;
  PeerProcess& operator=(const PeerProcess&) = delete;

  pid_t pid() const noexcept { return pid_; }
  int pidfd() const noexcept { return pidfd_; }  // -1 without pidfd support
  bool exited() const noexcept;

 private:
  pid_t pid_;
  int pidfd_ = -1;
};

// "ESRCH (no such process)" and the like, for messages.
std::string errno_text(int error);

}  // namespace pdkv::exec::cma
