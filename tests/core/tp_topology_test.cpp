// TP topology: tp_ratio sign convention, handshake targets, compute_tp_mapping on every worked
// example of vllm-semantics.md §2.2 / §2.3, and the notification rule of §7.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pdkv/core/error.hpp"
#include "pdkv/core/tp_topology.hpp"

using namespace pdkv::core;
using Ranks = std::vector<uint32_t>;

namespace {

// Runs fn, expects an Error with `status` whose message contains every needle.
template <class Fn>
void expect_error(Fn&& fn, Status status, const std::vector<std::string>& needles) {
  try {
    fn();
    ADD_FAILURE() << "expected " << status_name(status);
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), status) << e.what();
    for (const auto& n : needles) {
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos)
          << "message '" << e.what() << "' lacks '" << n << "'";
    }
  }
}

}  // namespace

TEST(TpRatio, SignConvention) {
  EXPECT_EQ(tp_ratio(1, 1), 1);
  EXPECT_EQ(tp_ratio(4, 4), 1);
  EXPECT_EQ(tp_ratio(4, 1), 4);
  EXPECT_EQ(tp_ratio(8, 2), 4);
  EXPECT_EQ(tp_ratio(1, 4), -4);
  EXPECT_EQ(tp_ratio(2, 8), -4);
  EXPECT_EQ(tp_ratio(2, 4), -2);
}

TEST(TpRatio, NeverZero) {
  for (uint32_t l : {1u, 2u, 4u, 8u, 16u})
    for (uint32_t r : {1u, 2u, 4u, 8u, 16u}) EXPECT_NE(tp_ratio(l, r), 0) << l << " " << r;
}

TEST(TpRatio, Errors) {
  expect_error([] { tp_ratio(0, 2); }, Status::InvalidArgument, {"local tp_size 0"});
  expect_error([] { tp_ratio(2, 0); }, Status::InvalidArgument, {"remote tp_size 0"});
  expect_error([] { tp_ratio(3, 2); }, Status::TpNotDivisible,
               {"local tp_size 3", "remote tp_size 2", "do not divide"});
  expect_error([] { tp_ratio(4, 6); }, Status::TpNotDivisible, {"4", "6"});
}

TEST(HandshakeTargets, Examples) {
  EXPECT_EQ(handshake_target_ranks(2, 1, 4), (Ranks{2, 3}));   // a = 2
  EXPECT_EQ(handshake_target_ranks(1, 0, 4), (Ranks{0, 1, 2, 3}));
  EXPECT_EQ(handshake_target_ranks(4, 3, 1), (Ranks{0}));
  EXPECT_EQ(handshake_target_ranks(8, 5, 4), (Ranks{2}));      // 5 // 2
  EXPECT_EQ(handshake_target_ranks(4, 3, 4), (Ranks{3}));      // homogeneous
  EXPECT_EQ(handshake_target_ranks(2, 1, 8), (Ranks{4, 5, 6, 7}));
}

TEST(HandshakeTargets, Errors) {
  expect_error([] { handshake_target_ranks(4, 4, 2); }, Status::InvalidArgument,
               {"local rank 4", "tp_size 4"});
  expect_error([] { handshake_target_ranks(3, 0, 2); }, Status::TpNotDivisible, {"3", "2"});
}
