#include "cma/shared_memory.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <mutex>

#include "cma/cma.hpp"
#include "pdkv/core/error.hpp"

namespace pdkv::exec::cma {

namespace {

struct Registry {
  std::mutex m;
  std::map<uintptr_t, const SharedMemory*> by_base;  // live allocations by their first byte
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: allocations may outlive static teardown
  return *r;
}

uint64_t page_size() {
  const long p = ::sysconf(_SC_PAGESIZE);
  return p > 0 ? static_cast<uint64_t>(p) : 4096;
}

[[noreturn]] void fail_errno(const std::string& what, int e) {
  throw core::Error(core::Status::Io, "pdkv shared host memory: " + what + " failed: " + errno_text(e),
                    core::CauseDomain::Errno, e);
}

constexpr int kSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

}  // namespace

std::unique_ptr<SharedMemory> SharedMemory::allocate(uint64_t bytes) {
  const uint64_t page = page_size();
  if (bytes == 0 || bytes > (uint64_t{1} << 47)) {
    throw core::Error(core::Status::InvalidArgument,
                      "pdkv shared host memory: bytes " + std::to_string(bytes) + " is not in 1..2^47");
  }
  std::unique_ptr<SharedMemory> m(new SharedMemory);
  m->size_ = bytes;
  m->mapped_ = (bytes + page - 1) / page * page;
  m->fd_ = ::memfd_create("pdkv-shared", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (m->fd_ < 0) fail_errno("memfd_create", errno);
  if (::ftruncate(m->fd_, static_cast<off_t>(m->mapped_)) != 0) {
    fail_errno("ftruncate to " + std::to_string(m->mapped_) + " bytes", errno);
  }
  // Every page allocated now (not at a peer's first write into a hole, where a failed allocation
  // would be SIGBUS in the copying process).
  if (const int e = ::posix_fallocate(m->fd_, 0, static_cast<off_t>(m->mapped_)); e != 0) {
    fail_errno("fallocate of " + std::to_string(m->mapped_) + " bytes", e);
  }
  // Sealed before anyone can see the file: a mapping of it can never lose its backing pages.
  if (::fcntl(m->fd_, F_ADD_SEALS, kSeals) != 0) fail_errno("sealing the memfd (F_ADD_SEALS)", errno);
  void* p = ::mmap(nullptr, m->mapped_, PROT_READ | PROT_WRITE, MAP_SHARED, m->fd_, 0);
  if (p == MAP_FAILED) fail_errno("mmap of " + std::to_string(m->mapped_) + " bytes", errno);
  m->base_ = p;
  std::lock_guard<std::mutex> g(registry().m);
  registry().by_base[reinterpret_cast<uintptr_t>(p)] = m.get();
  return m;
}

SharedMemory::~SharedMemory() {
  if (base_ != nullptr) {
    {
      std::lock_guard<std::mutex> g(registry().m);
      registry().by_base.erase(reinterpret_cast<uintptr_t>(base_));
    }
    ::munmap(base_, mapped_);
  }
  if (fd_ >= 0) ::close(fd_);
}

std::optional<SharedLocation> find_shared(uint64_t address, uint64_t length) {
  if (length == 0) return std::nullopt;
  std::lock_guard<std::mutex> g(registry().m);
  auto& map = registry().by_base;
  auto it = map.upper_bound(static_cast<uintptr_t>(address));
  if (it == map.begin()) return std::nullopt;
  --it;
  const SharedMemory& s = *it->second;
  const uint64_t base = it->first;
  if (address - base > s.size() || length > s.size() - (address - base)) return std::nullopt;
  struct stat st {};
  if (::fstat(s.fd(), &st) != 0) return std::nullopt;
  SharedLocation out;
  out.fd = s.fd();
  out.offset = address - base;
  out.file_size = static_cast<uint64_t>(st.st_size);
  out.dev = static_cast<uint64_t>(st.st_dev);
  out.ino = static_cast<uint64_t>(st.st_ino);
  return out;
}

size_t shared_allocations() {
  std::lock_guard<std::mutex> g(registry().m);
  return registry().by_base.size();
}

std::unique_ptr<PeerMapping> PeerMapping::open(int pidfd, uint32_t fd, uint64_t offset, uint64_t length,
                                               uint64_t file_size, uint64_t dev, uint64_t ino, std::string* why) {
  if (pidfd < 0) {
    *why = "no pidfd for the peer process (kernel < 5.3)";
    return nullptr;
  }
  if (length == 0 || offset > file_size || length > file_size - offset || fd > static_cast<uint32_t>(INT32_MAX)) {
    *why = "the advertised range (offset " + std::to_string(offset) + ", " + std::to_string(length) +
           " bytes) does not fit its file of " + std::to_string(file_size) + " bytes";
    return nullptr;
  }
#ifdef SYS_pidfd_getfd
  const long got = ::syscall(SYS_pidfd_getfd, pidfd, static_cast<int>(fd), 0);
#else
  const long got = -1;
  errno = ENOSYS;
#endif
  if (got < 0) {
    *why = "pidfd_getfd of the peer's descriptor " + std::to_string(fd) + " failed: " + errno_text(errno);
    return nullptr;
  }
  const int local = static_cast<int>(got);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{local};
  struct stat st {};
  if (::fstat(local, &st) != 0) {
    *why = "fstat of the peer's descriptor failed: " + errno_text(errno);
    return nullptr;
  }
  if (static_cast<uint64_t>(st.st_dev) != dev || static_cast<uint64_t>(st.st_ino) != ino ||
      static_cast<uint64_t>(st.st_size) != file_size) {
    *why = "the peer's descriptor " + std::to_string(fd) + " is not the advertised file any more";
    return nullptr;
  }
  const int seals = ::fcntl(local, F_GET_SEALS);
  if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_SEAL)) != (F_SEAL_SHRINK | F_SEAL_SEAL)) {
    *why = "the peer's file is not sealed against shrinking (a mapping of it could fault)";
    return nullptr;
  }
  const uint64_t page = page_size();
  std::unique_ptr<PeerMapping> m(new PeerMapping);
  const uint64_t start = offset / page * page;
  m->skew_ = offset - start;
  m->mapped_ = m->skew_ + length;
  m->length_ = length;
  void* ro = ::mmap(nullptr, m->mapped_, PROT_READ, MAP_SHARED, local, static_cast<off_t>(start));
  if (ro == MAP_FAILED) {
    *why = "mmap (read) of the peer's range failed: " + errno_text(errno);
    return nullptr;
  }
  m->ro_ = static_cast<uint8_t*>(ro);
  void* rw = ::mmap(nullptr, m->mapped_, PROT_READ | PROT_WRITE, MAP_SHARED, local, static_cast<off_t>(start));
  if (rw == MAP_FAILED) {
    *why = "mmap (write) of the peer's range failed: " + errno_text(errno);
    return nullptr;  // ~PeerMapping unmaps ro
  }
  m->rw_ = static_cast<uint8_t*>(rw);
  return m;
}

PeerMapping::~PeerMapping() {
  if (ro_ != nullptr) ::munmap(ro_, mapped_);
  if (rw_ != nullptr) ::munmap(rw_, mapped_);
}

}  // namespace pdkv::exec::cma
