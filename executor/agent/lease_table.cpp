#include "agent/lease_table.hpp"

#include <algorithm>

namespace pdkv::exec {

Notification LeaseTable::finished(const std::string& request, const Entry& e,
                                  NotificationKind kind) const {
  Notification n;
  n.kind = kind;
  n.status = kind == NotificationKind::LeaseExpired ? core::Status::TimedOut : core::Status::Ok;
  n.request_id = request;
  n.count = e.count;
  n.expected = e.expected;
  return n;
}

void LeaseTable::remember_unleased(const std::string& request) {
  unleased_order_.push_back(request);
  unleased_bytes_ += request.size();
  // Drop the oldest unleased counts beyond the caps; names that were leased since are skipped.
  while (unleased_order_.size() > kMaxUnleased || unleased_bytes_ > kMaxUnleasedBytes) {
    const std::string victim = std::move(unleased_order_.front());
    unleased_order_.pop_front();
    unleased_bytes_ -= victim.size();
    auto it = entries_.find(victim);
    if (it != entries_.end() && it->second.expected == 0) entries_.erase(it);
  }
}

void LeaseTable::remember_ended(const std::string& request, LeaseState how) {
  const uint64_t seq = ++ended_seq_;
  ended_[request] = {how, seq};
  ended_order_.emplace_back(request, seq);
  ended_bytes_ += request.size();
  while (ended_order_.size() > kMaxEnded || ended_bytes_ > kMaxUnleasedBytes) {
    auto& [victim, vseq] = ended_order_.front();
    ended_bytes_ -= victim.size();
    auto it = ended_.find(victim);
    if (it != ended_.end() && it->second.second == vseq) ended_.erase(it);
    ended_order_.pop_front();
  }
}

LeaseState LeaseTable::query(const std::string& request, Clock::time_point now) {
  if (keep(request, now)) return LeaseState::Open;
  auto it = ended_.find(request);
  return it == ended_.end() ? LeaseState::NotLeased : it->second.first;
}

uint32_t LeaseTable::on_success(const std::string& request, const std::string& notifier_engine,
                                uint32_t notifier_stage, uint32_t notifier_rank, std::optional<Notification>& complete,
                                bool& duplicate) {
  complete.reset();
  duplicate = false;
  auto [it, inserted] = entries_.try_emplace(request);
  if (inserted) remember_unleased(request);
  Entry& e = it->second;
  const auto who = std::make_tuple(notifier_engine, notifier_stage, notifier_rank);
  if (std::find(e.notifiers.begin(), e.notifiers.end(), who) != e.notifiers.end()) {
    duplicate = true;
    return e.count;
  }
  e.notifiers.push_back(who);
  // One engine's ranks move a request; ranks of another engine that notify the same request id
  // (the request re-routed to another D engine after a failure, or a stray peer) never make up
  // this engine's missing ranks. Bounded: one entry per connected peer rank.
  const auto count = static_cast<uint32_t>(std::count_if(
      e.notifiers.begin(), e.notifiers.end(), [&](const auto& n) { return std::get<0>(n) == notifier_engine; }));
  e.count = std::max(e.count, count);
  if (e.expected != 0 && count >= e.expected) {
    complete = finished(request, e, NotificationKind::RequestComplete);
    entries_.erase(it);
    remember_ended(request, LeaseState::Completed);
  }
  return count;
}

std::optional<Notification> LeaseTable::lease(const std::string& request, uint32_t expected,
                                              Clock::time_point deadline, Clock::duration ttl) {
  ended_.erase(request);  // leased again: what a reader learns is this lease's state
  Entry& e = entries_[request];
  e.expected = expected;
  e.deadline = deadline;
  e.ttl = ttl;
  if (e.count >= e.expected) {
    Notification n = finished(request, e, NotificationKind::RequestComplete);
    entries_.erase(request);
    remember_ended(request, LeaseState::Completed);
    return n;
  }
  return std::nullopt;
}

bool LeaseTable::keep(const std::string& request, Clock::time_point now) {
  auto it = entries_.find(request);
  if (it == entries_.end() || it->second.expected == 0) return false;
  Entry& e = it->second;
  // Saturating: a ttl near the clock's range must not wrap the deadline into the past.
  const Clock::time_point until =
      e.ttl >= Clock::time_point::max() - now ? Clock::time_point::max() : now + e.ttl;
  e.deadline = std::max(e.deadline, until);
  return true;
}

std::vector<Notification> LeaseTable::expire(Clock::time_point now) {
  std::vector<std::pair<Clock::time_point, Notification>> due;
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->second.expected != 0 && it->second.deadline <= now) {
      due.emplace_back(it->second.deadline,
                       finished(it->first, it->second, NotificationKind::LeaseExpired));
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
  // Report them in the order they expired (the map's order is arbitrary).
  std::sort(due.begin(), due.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : a.second.request_id < b.second.request_id;
  });
  std::vector<Notification> out;
  out.reserve(due.size());
  for (auto& d : due) {
    remember_ended(d.second.request_id, LeaseState::Expired);  // oldest first: the newest are kept
    out.push_back(std::move(d.second));
  }
  return out;
}

std::optional<LeaseTable::Clock::time_point> LeaseTable::next_deadline() const {
  std::optional<Clock::time_point> best;
  for (const auto& [name, e] : entries_) {
    if (e.expected != 0 && (!best || e.deadline < *best)) best = e.deadline;
  }
  return best;
}

uint32_t LeaseTable::expected(const std::string& request) const {
  auto it = entries_.find(request);
  return it == entries_.end() ? 0 : it->second.expected;
}

}  // namespace pdkv::exec
