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
// request's blocks while the other rank still reads them. Same engine, other rank; other engine,
// same rank: both distinct.
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
  EXPECT_EQ(t.on_success("early", "other", 0, 0, done, dup), 2u);
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
