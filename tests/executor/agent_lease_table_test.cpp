// The lease table's memory for requests nobody leased is bounded by bytes as well as by count: a
// peer sending successful notifications for ever-new 1 KiB request ids cannot make it hold more
// than kMaxUnleasedBytes of names (before: 65536 names, ~140 MB with their copies).
#include <gtest/gtest.h>

#include <string>

#include "agent/lease_table.hpp"

using namespace pdkv::exec;

namespace {

std::string id(size_t i) { return std::string(1000, 'q') + std::to_string(i); }

TEST(LeaseTable, UnleasedCountsAreBoundedByBytes) {
  LeaseTable t;
  std::optional<Notification> done;
  const size_t n = 40000;  // 40000 x ~1 KiB: over the byte bound, under the count bound
  bool dup = false;
  for (size_t i = 0; i < n; ++i) t.on_success(id(i), "dec", 0, 0, done, dup);
  EXPECT_LE(t.size() * 1000, LeaseTable::kMaxUnleasedBytes);
  EXPECT_GT(t.size(), LeaseTable::kMaxUnleasedBytes / 2000);
  // The newest are kept, the oldest dropped: a lease on the newest finds its count.
  auto newest = t.lease(id(n - 1), 1, LeaseTable::Clock::now() + std::chrono::seconds(5));
  ASSERT_TRUE(newest.has_value());
  EXPECT_EQ(newest->kind, NotificationKind::RequestComplete);
  auto oldest = t.lease(id(0), 1, LeaseTable::Clock::now() + std::chrono::seconds(5));
  EXPECT_FALSE(oldest.has_value());
}

TEST(LeaseTable, ShortIdsStillKeepTheCountBound) {
  LeaseTable t;
  std::optional<Notification> done;
  bool dup = false;
  for (size_t i = 0; i < LeaseTable::kMaxUnleased + 100; ++i) t.on_success("r" + std::to_string(i), "dec", 0, 0, done, dup);
  EXPECT_EQ(t.size(), LeaseTable::kMaxUnleased);
}

// A lease expecting two D ranks completes only when two distinct ranks notified: a rank whose
// Notify arrives twice (resent, duplicated or hostile) is not counted again, so P cannot free the
// request's blocks while the other rank still reads them. Same engine, other rank, or other stage:
// distinct.
TEST(LeaseTable, ASecondSuccessFromTheSameRankIsNotCounted) {
  LeaseTable t;
  const auto ttl = LeaseTable::Clock::now() + std::chrono::seconds(5);
  EXPECT_FALSE(t.lease("req", 2, ttl).has_value());
  std::optional<Notification> done;
  bool dup = true;
  EXPECT_EQ(t.on_success("req", "dec", 0, 0, done, dup), 1u);
  EXPECT_FALSE(dup);
  EXPECT_FALSE(done.has_value());
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(t.on_success("req", "dec", 0, 0, done, dup), 1u);
    EXPECT_TRUE(dup);
    EXPECT_FALSE(done.has_value());
  }
  EXPECT_EQ(t.on_success("req", "dec", 0, 1, done, dup), 2u);
  EXPECT_FALSE(dup);
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->kind, NotificationKind::RequestComplete);
  EXPECT_EQ(done->count, 2u);

  // Before the lease too: duplicates counted while nobody leased do not pre-fill it.
  EXPECT_EQ(t.on_success("early", "dec", 0, 0, done, dup), 1u);
  EXPECT_EQ(t.on_success("early", "dec", 0, 0, done, dup), 1u);
  EXPECT_TRUE(dup);
  EXPECT_FALSE(t.lease("early", 2, ttl).has_value());
  EXPECT_EQ(t.on_success("early", "dec", 0, 1, done, dup), 2u);
  EXPECT_FALSE(dup);
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->request_id, "early");

  // Pipeline stages: rank 0 of stage 0 and rank 0 of stage 1 are two notifiers.
  EXPECT_FALSE(t.lease("staged", 2, ttl).has_value());
  EXPECT_EQ(t.on_success("staged", "dec", 0, 0, done, dup), 1u);
  EXPECT_EQ(t.on_success("staged", "dec", 1, 0, done, dup), 2u);
  EXPECT_FALSE(dup);
  ASSERT_TRUE(done.has_value());
}

}  // namespace

// The ranks of one engine move a request; another engine's ranks notifying the same request id
// (the request re-routed to a second D engine after the first failed, or a stray peer) never make
// up the first engine's missing ranks, before or after the lease: with two ranks expected, rank 0
// of "dec-a" and rank 0 of "dec-b" complete nothing; the lease completes when one engine has two.
// (Before, any two distinct (engine, rank) pairs completed it: P freed blocks "dec-b" rank 1 still
// read.) A lease that expires reports the furthest engine's count.
TEST(LeaseTable, RanksOfAnotherEngineDoNotCompleteALease) {
  LeaseTable t;
  const auto ttl = LeaseTable::Clock::now() + std::chrono::seconds(5);
  std::optional<Notification> done;
  bool dup = true;
  EXPECT_FALSE(t.lease("req", 2, ttl).has_value());
  EXPECT_EQ(t.on_success("req", "dec-a", 0, 0, done, dup), 1u);
  EXPECT_EQ(t.on_success("req", "dec-b", 0, 0, done, dup), 1u);
  EXPECT_FALSE(dup);
  EXPECT_FALSE(done.has_value());
  EXPECT_EQ(t.on_success("req", "dec-b", 0, 1, done, dup), 2u);
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->kind, NotificationKind::RequestComplete);
  EXPECT_EQ(done->count, 2u);

  // Counted before the lease: the same rule.
  EXPECT_EQ(t.on_success("early", "dec-a", 0, 0, done, dup), 1u);
  EXPECT_EQ(t.on_success("early", "dec-b", 0, 0, done, dup), 1u);
  EXPECT_FALSE(t.lease("early", 2, ttl).has_value());
  EXPECT_EQ(t.on_success("early", "dec-a", 0, 1, done, dup), 2u);
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->request_id, "early");
  // ...and a lease asked after one engine already has enough completes at once.
  EXPECT_EQ(t.on_success("late", "dec-b", 0, 0, done, dup), 1u);
  EXPECT_EQ(t.on_success("late", "dec-a", 0, 0, done, dup), 1u);
  EXPECT_EQ(t.on_success("late", "dec-a", 0, 1, done, dup), 2u);
  EXPECT_FALSE(done.has_value());  // not leased yet
  const auto at_once = t.lease("late", 2, ttl);
  ASSERT_TRUE(at_once.has_value());
  EXPECT_EQ(at_once->count, 2u);

  // Expiry reports the furthest engine's count.
  EXPECT_FALSE(t.lease("slow", 3, ttl).has_value());
  t.on_success("slow", "dec-a", 0, 0, done, dup);
  t.on_success("slow", "dec-b", 0, 0, done, dup);
  t.on_success("slow", "dec-b", 0, 1, done, dup);
  const auto expired = t.expire(ttl);
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].kind, NotificationKind::LeaseExpired);
  EXPECT_EQ(expired[0].count, 2u);
  EXPECT_EQ(expired[0].expected, 3u);
}

// keep() (a reader's KeepLeases) moves an open lease's deadline to at least now + its own ttl and
// never shortens it; a request nobody leases is neither opened nor remembered by it.
TEST(LeaseTable, KeepMovesAnOpenLeasesDeadlineByItsOwnTtlOnly) {
  LeaseTable t;
  const auto t0 = LeaseTable::Clock::now();
  EXPECT_FALSE(t.lease("r", 1, t0 + std::chrono::seconds(1), std::chrono::seconds(1)).has_value());
  EXPECT_TRUE(t.keep("r", t0));  // now + ttl == the deadline: unchanged
  EXPECT_EQ(*t.next_deadline(), t0 + std::chrono::seconds(1));
  EXPECT_TRUE(t.keep("r", t0 + std::chrono::milliseconds(500)));
  EXPECT_EQ(*t.next_deadline(), t0 + std::chrono::milliseconds(1500));
  EXPECT_TRUE(t.keep("r", t0 + std::chrono::milliseconds(100)));  // a late, older keep: no shorter
  EXPECT_EQ(*t.next_deadline(), t0 + std::chrono::milliseconds(1500));
  EXPECT_TRUE(t.expire(t0 + std::chrono::milliseconds(1499)).empty());
  EXPECT_EQ(t.expire(t0 + std::chrono::milliseconds(1500)).size(), 1u);
  // Not leased: nothing opened, nothing remembered for a later lease.
  EXPECT_FALSE(t.keep("later", t0));
  EXPECT_EQ(t.size(), 0u);
  // A ttl reaching past the clock's range saturates instead of wrapping into the past.
  EXPECT_FALSE(t.lease("long", 1, LeaseTable::Clock::time_point::max(), LeaseTable::Clock::duration::max()).has_value());
  EXPECT_TRUE(t.keep("long", t0));
  EXPECT_TRUE(t.expire(t0 + std::chrono::hours(24 * 365)).empty());
}

// What a reader's LeaseQuery learns (pdkv 2.7): an open lease is Open and kept; one that ended is
// Expired or Completed, remembered for the last kMaxEnded leases; leasing it again makes it Open;
// an id never leased (or forgotten) is NotLeased.
TEST(LeaseTable, AQueryTellsWhetherTheLeaseIsOpenOrHowItEnded) {
  using Clock = LeaseTable::Clock;
  LeaseTable t;
  const auto now = Clock::now();
  std::optional<Notification> done;
  bool dup = false;
  EXPECT_EQ(t.query("never", now), LeaseState::NotLeased);
  t.lease("open", 1, now + std::chrono::milliseconds(100), std::chrono::milliseconds(100));
  EXPECT_EQ(t.query("open", now + std::chrono::milliseconds(50)), LeaseState::Open);
  // The query kept it: open past its first deadline, until 50 + 100 ms.
  EXPECT_TRUE(t.expire(now + std::chrono::milliseconds(120)).empty());
  EXPECT_EQ(t.expire(now + std::chrono::milliseconds(150)).size(), 1u);
  EXPECT_EQ(t.query("open", now + std::chrono::milliseconds(160)), LeaseState::Expired);
  t.lease("read", 1, now + std::chrono::seconds(5), std::chrono::seconds(5));
  t.on_success("read", "dec", 0, 0, done, dup);
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(t.query("read", now), LeaseState::Completed);
  // Notifications that came first complete a lease at once: it ended too.
  t.on_success("early", "dec", 0, 0, done, dup);
  ASSERT_TRUE(t.lease("early", 1, now + std::chrono::seconds(5)).has_value());
  EXPECT_EQ(t.query("early", now), LeaseState::Completed);
  // Leased again: open again.
  t.lease("open", 1, now + std::chrono::seconds(5), std::chrono::seconds(5));
  EXPECT_EQ(t.query("open", now), LeaseState::Open);
  // Only the last kMaxEnded ended leases are remembered: the oldest is forgotten.
  for (size_t i = 0; i < LeaseTable::kMaxEnded; ++i) {
    t.lease("e" + std::to_string(i), 1, now);
  }
  (void)t.expire(now);
  EXPECT_EQ(t.query("read", now), LeaseState::NotLeased);
  EXPECT_EQ(t.query("e0", now), LeaseState::Expired);
  EXPECT_EQ(t.query("e" + std::to_string(LeaseTable::kMaxEnded - 1), now), LeaseState::Expired);
}

// The memory of ended leases is bounded by the bytes of their ids too: 20000 leases of ~1 KiB ids
// expiring in one sweep keep at most kMaxUnleasedBytes of names, those that expired last.
TEST(LeaseTable, EndedLeasesAreRememberedWithinTheByteBound) {
  using Clock = LeaseTable::Clock;
  LeaseTable t;
  const auto now = Clock::now();
  const size_t n = 20000;  // 20000 x ~1 KiB: over the byte bound, under the count bound
  for (size_t i = 0; i < n; ++i) t.lease(id(i), 1, now + std::chrono::microseconds(i));
  EXPECT_EQ(t.expire(now + std::chrono::microseconds(n)).size(), n);
  EXPECT_EQ(t.query(id(n - 1), now), LeaseState::Expired);
  EXPECT_EQ(t.query(id(0), now), LeaseState::NotLeased);
  size_t kept = 0;
  for (size_t i = 0; i < n; ++i) kept += t.query(id(i), now) == LeaseState::Expired;
  EXPECT_LE(kept * 1000, LeaseTable::kMaxUnleasedBytes);
  EXPECT_GT(kept, LeaseTable::kMaxUnleasedBytes / 2000);
}
