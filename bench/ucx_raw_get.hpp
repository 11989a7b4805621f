// Baselines for the executor over a piece list (transfer_pieces.hpp), each measured the same way:
// a warm-up pass whose bytes are verified, then `reps` timed passes, median and best reported.
//   raw_ucx_get  two processes (fork): P registers its working set and progresses; D posts
//                ucp_get_nbx for every piece with at most `window` outstanding and progresses
//                until all completed. Plain UCX calls, no pdkv logic: the ceiling the executor is
//                judged against. shm: posix,sysv,cma,self with error handling off; tcp:
//                tcp,self with peer error handling (the agent's two configurations until the
//                agent moved shm peers to cross-memory attach; see cma_raw_read.hpp). P's working
//                set is private anonymous memory, or (p_shared) a pdkv shared allocation, the
//                memory the executor's mapped column reads, so both can be compared on the same
//                kind of memory.
//   memcpy_pieces  the same pieces copied in one process.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cma/shared_memory.hpp"
#include "placement.hpp"
#include "transfer_pieces.hpp"
#include "ucx/context.hpp"
#include "ucx/endpoint.hpp"
#include "ucx/memory.hpp"
#include "ucx/worker.hpp"

namespace pdkv::bench {

struct Measurement {
  double median_gbps = 0;  // decimal GB/s of piece bytes
  double best_gbps = 0;
  double median_s = 0;
  bool verified = false;
  std::string error;  // empty on success
};

inline Measurement summarize(std::vector<double> seconds, uint64_t bytes) {
  Measurement m;
  std::sort(seconds.begin(), seconds.end());
  m.median_s = seconds[seconds.size() / 2];
  m.median_gbps = static_cast<double>(bytes) / m.median_s / 1e9;
  m.best_gbps = static_cast<double>(bytes) / seconds.front() / 1e9;
  return m;
}

// Page-aligned, pre-faulted anonymous memory (faults are not what we measure).
struct Buffer {
  explicit Buffer(uint64_t n) : size(n) {
    void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("mmap of " + std::to_string(n) + " bytes failed");
    data = static_cast<uint8_t*>(p);
  }
  ~Buffer() { ::munmap(data, size); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  uint8_t* data;
  uint64_t size;
};

inline Measurement memcpy_pieces(const PieceList& pl, int reps) {
  Buffer src(pl.remote_bytes), dst(pl.local_bytes);
  fill_pattern(src.data, src.size);
  auto pass = [&] {
    for (const Piece& p : pl.pieces) std::memcpy(dst.data + p.local_offset, src.data + p.remote_offset, p.length);
  };
  pass();
  const bool ok = first_wrong_piece(pl, dst.data) < 0;
  std::vector<double> secs;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    pass();
    secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  Measurement m = summarize(secs, pl.bytes);
  m.verified = ok;
  if (!ok) m.error = "memcpy produced wrong bytes";
  return m;
}

namespace detail {

inline bool write_all(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

inline bool read_all(int fd, void* data, size_t n) {
  auto* p = static_cast<uint8_t*>(data);
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

inline bool send_blob(int fd, const std::vector<uint8_t>& v) {
  const uint64_t n = v.size();
  return write_all(fd, &n, sizeof n) && write_all(fd, v.data(), v.size());
}

inline std::vector<uint8_t> recv_blob(int fd) {
  uint64_t n = 0;
  if (!read_all(fd, &n, sizeof n) || n > (1u << 20)) return {};
  std::vector<uint8_t> v(n);
  if (!read_all(fd, v.data(), n)) return {};
  return v;
}

// P: fills and registers its working set, publishes address/base/rkey, progresses until D closes
// the pipe.
[[noreturn]] inline void run_target(exec::TransportMode mode, uint64_t bytes, int out, int in, bool shared) {
  int rc = 0;
  try {
    exec::UcxContext ctx(mode);
    exec::UcxWorker worker(ctx);
    std::optional<Buffer> own;
    std::unique_ptr<exec::cma::SharedMemory> shm;
    uint8_t* data = nullptr;
    if (shared) {
      shm = exec::cma::SharedMemory::allocate((bytes + 4095) & ~uint64_t{4095});
      data = static_cast<uint8_t*>(shm->data());
    } else {
      own.emplace(bytes);
      data = own->data;
    }
    fill_pattern(data, bytes);
    exec::UcxRegistration reg(ctx, data, bytes);
    const uint64_t base = reinterpret_cast<uint64_t>(data);
    std::vector<uint8_t> base_bytes(sizeof base);
    std::memcpy(base_bytes.data(), &base, sizeof base);
    if (!send_blob(out, worker.address()) || !send_blob(out, base_bytes) || !send_blob(out, reg.packed_rkey())) {
      ::_exit(2);
    }
    pollfd pfd{in, POLLIN, 0};
    for (unsigned i = 0;; ++i) {
      worker.progress();
      if ((i & 63) == 0 && ::poll(&pfd, 1, 0) > 0) break;
    }
  } catch (...) {
    rc = 3;
  }
  ::_exit(rc);
}

struct Completion {
  uint64_t done = 0;
  uint64_t errors = 0;
};

inline void on_get_done(void* request, ucs_status_t status, void* user) {
  auto* c = static_cast<Completion*>(user);
  ++c->done;
  c->errors += status != UCS_OK;
  ucp_request_free(request);
}

}  // namespace detail

// See the file comment. D's process is this one; P is a forked child, in another network namespace
// where `where` says so (placement.hpp). Nothing of UCX may be alive in this process when it is
// called (fork and UCX do not mix).
inline Measurement raw_ucx_get(const PieceList& pl, exec::TransportMode mode, unsigned window, int reps,
                               const Placement& where = loopback_placement(), bool p_shared = false) {
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
    enter_p_side(where);
    detail::run_target(mode, pl.remote_bytes, to_parent[1], to_child[0], p_shared);
  }
  ::close(to_parent[1]);
  ::close(to_child[0]);
  try {
    const std::vector<uint8_t> address = detail::recv_blob(to_parent[0]);
    const std::vector<uint8_t> base_bytes = detail::recv_blob(to_parent[0]);
    const std::vector<uint8_t> rkey_bytes = detail::recv_blob(to_parent[0]);
    if (address.empty() || base_bytes.size() != 8 || rkey_bytes.empty()) throw std::runtime_error("P did not start");
    uint64_t base = 0;
    std::memcpy(&base, base_bytes.data(), 8);
    const DSideUcxDevice device(where);
    exec::UcxContext ctx(mode);
    exec::UcxWorker worker(ctx);
    auto ep = exec::UcxEndpoint::create(worker, address,
                                        mode == exec::TransportMode::Shm ? exec::ErrorMode::None : exec::ErrorMode::Peer);
    {
      exec::UcxRemoteKey rkey = ep->unpack_rkey(rkey_bytes);
      Buffer local(pl.local_bytes);
      ucp_ep_h h = ep->handle();
      ucp_worker_h w = worker.handle();
      detail::Completion c;
      ucp_request_param_t param;
      param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
      param.cb.send = detail::on_get_done;
      param.user_data = &c;
      auto pass = [&] {
        c = {};
        uint64_t posted = 0;  // requests (not inline completions)
        size_t next = 0;
        while (next < pl.pieces.size() || c.done < posted) {
          while (next < pl.pieces.size() && posted - c.done < window) {
            const Piece& p = pl.pieces[next++];
            ucs_status_ptr_t r =
                ucp_get_nbx(h, local.data + p.local_offset, p.length, base + p.remote_offset, rkey.handle(), &param);
            if (UCS_PTR_IS_ERR(r)) throw std::runtime_error(std::string("ucp_get_nbx: ") + ucs_status_string(UCS_PTR_STATUS(r)));
            posted += r != nullptr;
          }
          ucp_worker_progress(w);
        }
        if (c.errors != 0) throw std::runtime_error(std::to_string(c.errors) + " GETs failed");
      };
      pass();
      m.verified = first_wrong_piece(pl, local.data) < 0;
      if (!m.verified) throw std::runtime_error("raw UCX GET produced wrong bytes");
      std::vector<double> secs;
      for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        pass();
        secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      const bool verified = m.verified;
      m = summarize(secs, pl.bytes);
      m.verified = verified;
    }
    ep->progress_until_closed(std::chrono::steady_clock::now() + std::chrono::seconds(5));
  } catch (const std::exception& e) {
    m.error = e.what();
  }
  ::close(to_child[1]);  // P exits on EOF
  ::close(to_parent[0]);
  int status = 0;
  for (int i = 0; i < 100 && ::waitpid(pid, &status, WNOHANG) == 0; ++i) ::usleep(50000);
  if (::waitpid(pid, &status, WNOHANG) == 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  return m;
}

}  // namespace pdkv::bench
