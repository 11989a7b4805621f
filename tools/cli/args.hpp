// Minimal command-line parsing for the pdkv tool: "--flag value" and "--flag=value" pairs plus
// boolean switches. Unknown flags and flags given more than once are errors that name the flag
// (no silent ignoring, no "last one wins").
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace pdkv::cli {

class Args {
 public:
  // `switches` take no value; `valued` take one. Throws std::invalid_argument naming the flag on
  // an unknown flag, a missing value, or a flag given more than once (either form).
  Args(const std::vector<std::string>& argv, const std::set<std::string>& valued,
       const std::set<std::string>& switches);

  bool has(const std::string& flag) const { return values_.count(flag) != 0; }
  std::optional<std::string> get(const std::string& flag) const;
  // Parses an unsigned integer flag; throws std::invalid_argument naming the flag and value.
  std::optional<uint32_t> get_u32(const std::string& flag) const;
  // Like get_u32, but 0 is also an error (for settings where 0 would silently mean "unset").
  std::optional<uint32_t> get_positive_u32(const std::string& flag) const;

 private:
  std::map<std::string, std::string> values_;
};

}  // namespace pdkv::cli
