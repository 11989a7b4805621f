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
  for (size_t i = 0; i < n; ++i) t.on_success(id(i), done);
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
  for (size_t i = 0; i < LeaseTable::kMaxUnleased + 100; ++i) t.on_success("r" + std::to_string(i), done);
  EXPECT_EQ(t.size(), LeaseTable::kMaxUnleased);
}

}  // namespace
