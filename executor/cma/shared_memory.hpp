// Mapped same-host memory: host memory that pdkv allocates (a sealed memfd mapped MAP_SHARED) so
// that a same-host peer agent can map the very pages an engine registered and copy them with
// memcpy instead of cross-memory attach.
//
// Owner side: SharedMemory::allocate makes an allocation and records it in a process-wide
// registry of live allocations; find_shared() tells an agent whether a registered range lies
// inside one (it then advertises the memfd's number in this process and the range's offset to
// its same-host peers over the authenticated control channel).
//
// Peer side: PeerMapping::open takes that descriptor out of the owner's process with
// pidfd_getfd (the same ptrace permission as process_vm_readv; Linux >= 5.6), checks that it is
// the advertised file (device, inode, size, and the seals that keep it from shrinking), and maps
// exactly the advertised range twice: read-only (the source of READs) and read-write (the target
// of WRITEs). Every page of the file is allocated up front (fallocate) and the file can neither
// shrink nor grow (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL are set before anyone sees it), so a
// mapped page always has a backing page and a copy through the mapping can never raise SIGBUS,
// even when the owner dies mid-copy: its pages live on until the last mapping goes.
//
// Internal to executor/. Depends on nothing but libc (and pdkv/core/error.hpp for messages).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace pdkv::exec::cma {

class SharedMemory {
 public:
  // `bytes` (> 0) rounded up to whole pages, zero-filled. Error(InvalidArgument) for 0 or a size
  // beyond what a mapping can hold, Error(Io) naming the failing call and errno (memfd_create,
  // ftruncate, the seals, mmap).
  static std::unique_ptr<SharedMemory> allocate(uint64_t bytes);
  ~SharedMemory();  // leaves the registry, then unmaps and closes
  SharedMemory(const SharedMemory&) = delete;
  SharedMemory& operator=(const SharedMemory&) = delete;

  void* data() const noexcept { return base_; }
  uint64_t size() const noexcept { return size_; }  // the requested bytes
  int fd() const noexcept { return fd_; }

 private:
  SharedMemory() = default;
  void* base_ = nullptr;
  uint64_t size_ = 0;
  uint64_t mapped_ = 0;  // whole pages
  int fd_ = -1;
};

// Where a range of this process's memory lives in a live pdkv shared allocation.
struct SharedLocation {
  int fd = -1;            // the memfd's number in this process
  uint64_t offset = 0;    // of the range's first byte in the file
  uint64_t file_size = 0;
  uint64_t dev = 0, ino = 0;  // the file's identity (fstat), for the peer to check
};

// The allocation that holds all of [address, address + length), if any (length > 0).
std::optional<SharedLocation> find_shared(uint64_t address, uint64_t length);

// Live allocations (for tests).
size_t shared_allocations();

// A peer's advertised range, mapped here.
class PeerMapping {
 public:
  // Maps `length` bytes at `offset` of descriptor `fd` of the process behind `pidfd`. Returns
  // nullptr with *why set when it cannot (no pidfd_getfd, refused, another file than advertised,
  // a file that is not sealed against shrinking, mmap failed).
  static std::unique_ptr<PeerMapping> open(int pidfd, uint32_t fd, uint64_t offset, uint64_t length,
                                           uint64_t file_size, uint64_t dev, uint64_t ino, std::string* why);
  ~PeerMapping();
  PeerMapping(const PeerMapping&) = delete;
  PeerMapping& operator=(const PeerMapping&) = delete;

  const uint8_t* read_view() const noexcept { return ro_ + skew_; }  // PROT_READ
  uint8_t* write_view() const noexcept { return rw_ + skew_; }       // PROT_READ | PROT_WRITE
  uint64_t length() const noexcept { return length_; }

 private:
  PeerMapping() = default;
  uint8_t* ro_ = nullptr;
  uint8_t* rw_ = nullptr;
  uint64_t skew_ = 0;     // offset - the page-aligned offset mapped
  uint64_t mapped_ = 0;   // bytes of each mapping
  uint64_t length_ = 0;
};

}  // namespace pdkv::exec::cma
