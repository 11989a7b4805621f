// Out-of-line failure path of checked_math.hpp.
#include "pdkv/core/checked_math.hpp"

#include <string>

namespace pdkv::core {

void fail_overflow(const char* what, uint64_t a, uint64_t b, char op) {
  fail(Status::Overflow, std::string(what) + ": " + std::to_string(a) + " " + op + " " +
                             std::to_string(b) + " overflows 64 bits");
}

}  // namespace pdkv::core
