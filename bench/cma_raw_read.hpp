// The second baseline of the executor over shm (bench/executor_bench.cpp): a plain
// process_vm_readv loop over the same piece list, working sets and two processes (fork) as the raw
// UCX loop: P fills its working set and waits; D calls process_vm_readv once per piece (one iovec
// each side), no pdkv code in the loop. The agent batches up to 512 pieces a call, so it may beat
// this loop where per-call costs matter (small pieces).
#pragma once

#include <sys/uio.h>

#include <cerrno>
#include <cstring>

#include "ucx_raw_get.hpp"

namespace pdkv::bench {

inline Measurement raw_cma_read(const PieceList& pl, int reps) {
  Measurement m;
  int to_parent[2], to_child[2];
  if (::pipe(to_parent) != 0 || ::pipe(to_child) != 0) {
    m.error = "pipe failed";
    return m;
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    m.error = "fork failed";
    return m;
  }
  if (pid == 0) {
    ::close(to_parent[0]);
    ::close(to_child[1]);
    int rc = 0;
    try {
      Buffer buf(pl.remote_bytes);
      fill_pattern(buf.data, buf.size);
      const uint64_t addr = reinterpret_cast<uint64_t>(buf.data);
      if (!detail::write_all(to_parent[1], &addr, sizeof addr)) std::_Exit(3);
      char c;
      (void)detail::read_all(to_child[0], &c, 1);  // the parent closes the pipe when done
    } catch (const std::exception& e) {
      std::fprintf(stderr, "cma target: %s\n", e.what());
      rc = 2;
    }
    std::_Exit(rc);
  }
  ::close(to_parent[1]);
  ::close(to_child[0]);
  try {
    uint64_t remote = 0;
    if (!detail::read_all(to_parent[0], &remote, sizeof remote)) throw std::runtime_error("the P process did not start");
    Buffer local(pl.local_bytes);
    auto pass = [&] {
      for (const Piece& p : pl.pieces) {
        iovec l{local.data + p.local_offset, p.length};
        iovec r{reinterpret_cast<void*>(remote + p.remote_offset), p.length};
        const ssize_t n = ::process_vm_readv(pid, &l, 1, &r, 1, 0);
        if (n != static_cast<ssize_t>(p.length)) {
          throw std::runtime_error(std::string("process_vm_readv: ") + (n < 0 ? std::strerror(errno) : "short read"));
        }
      }
    };
    pass();
    const bool ok = first_wrong_piece(pl, local.data) < 0;
    std::vector<double> secs;
    for (int i = 0; i < reps; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      pass();
      secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    m = summarize(secs, pl.bytes);
    m.verified = ok;
    if (!ok) m.error = "process_vm_readv moved wrong bytes";
  } catch (const std::exception& e) {
    m.error = e.what();
  }
  ::close(to_child[1]);
  ::close(to_parent[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return m;
}

}  // namespace pdkv::bench
