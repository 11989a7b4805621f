// Per-request notification counts and leases (pdkv_agent_lease). P leases a request's blocks
// with the number of successful notifications it expects and a time to live; the table says when
// the count is reached (RequestComplete) or the time runs out first (LeaseExpired), so P frees
// blocks neither too early nor never. Notifications that arrive before the lease count; counts of
// requests nobody leases are kept for at most kMaxUnleased requests and kMaxUnleasedBytes of their
// names (oldest dropped first), so a peer cannot grow the table without bound. How a lease ended
// (expired, completed) is remembered for the last kMaxEnded leases (and kMaxUnleasedBytes of
// names), so a reader asking about it later (LeaseQuery) learns that its blocks were given back.
// Not thread-safe: the agent's mutex guards it.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "agent/agent.hpp"
#include "control/messages.hpp"

namespace pdkv::exec {

class LeaseTable {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr size_t kMaxUnleased = 65536;
  // ...and at most this many bytes of their names (request ids run up to 1 KiB).
  static constexpr size_t kMaxUnleasedBytes = 16u << 20;
  static constexpr size_t kMaxEnded = 65536;

  // A successful notification for `request` from `notifier` (the sending peer's engine id,
  // stage and rank): returns its count so far and, when that reaches the lease's expected count,
  // the RequestComplete notification (the lease ends). The count is of distinct ranks (stage,
  // rank) of the notifier's engine: the expected count is the number of ranks of the ONE engine
  // that moves the request, so neither a second success from the same rank (a resent or
  // duplicated Notify, a buggy or hostile peer; not counted, `duplicate` set) nor ranks of another
  // engine notifying the same request id (a request re-routed to another D engine) may complete
  // the lease early and let P free blocks a rank of the reading engine still reads.
  uint32_t on_success(const std::string& request, const std::string& notifier_engine, uint32_t notifier_stage,
                      uint32_t notifier_rank, std::optional<Notification>& complete, bool& duplicate);

  // Leases `request` (replacing an earlier lease); completes at once when enough notifications
  // already arrived. expected >= 1, ttl > 0 (the caller checks).
  std::optional<Notification> lease(const std::string& request, uint32_t expected,
                                    Clock::time_point deadline, Clock::duration ttl = {});

  // A reader asks to keep `request`'s lease open: an open lease's deadline becomes at least
  // now + its ttl (the time to live it was leased with). True when a lease was open; requests
  // nobody leases are not remembered.
  bool keep(const std::string& request, Clock::time_point now);

  // What a reader asking about `request` learns (LeaseQuery): Open (and the lease is kept, as by
  // keep()), Expired or Completed (it ended within the last kMaxEnded leases), else NotLeased.
  LeaseState query(const std::string& request, Clock::time_point now);

  // The LeaseExpired notifications of leases whose deadline is <= now (those leases end).
  std::vector<Notification> expire(Clock::time_point now);

  // The earliest lease deadline, if any lease is open.
  std::optional<Clock::time_point> next_deadline() const;

  // The expected count of an open lease (0: none).
  uint32_t expected(const std::string& request) const;

  size_t size() const noexcept { return entries_.size(); }

 private:
  struct Entry {
    uint32_t count = 0;  // the largest count of one engine so far (reported)
    // Who counted so far; at most one entry per connected peer rank (a peer can only notify as
    // itself: the agent checks the Notify names the connection's own identity).
    std::vector<std::tuple<std::string, uint32_t, uint32_t>> notifiers;  // (engine, stage, rank)
    uint32_t expected = 0;  // 0: no lease
    Clock::time_point deadline{};
    Clock::duration ttl{};  // what keep() extends by
  };
  Notification finished(const std::string& request, const Entry& e, NotificationKind kind) const;
  void remember_unleased(const std::string& request);
  void remember_ended(const std::string& request, LeaseState how);

  std::unordered_map<std::string, Entry> entries_;
  std::deque<std::string> unleased_order_;  // may hold stale names (already leased or dropped)
  size_t unleased_bytes_ = 0;               // of the names in unleased_order_
  // How the latest leases ended, oldest first in ended_order_ (which may hold names leased again
  // since, or ended twice: only the newest entry counts).
  std::unordered_map<std::string, std::pair<LeaseState, uint64_t>> ended_;  // state, sequence
  std::deque<std::pair<std::string, uint64_t>> ended_order_;
  size_t ended_bytes_ = 0;
  uint64_t ended_seq_ = 0;
};

}  // namespace pdkv::exec
