// Minimal command-line parsing for the pdkv tool: "--flag value" and "--flag=value" pairs plus
// boolean switches. Unknown flags are errors that name the flag (no silent ignoring).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace pdkv::cli {

class Args {
 public:
  // `switches` take no value; `valued` take one. Throws std::invalid_argument on unknown flags
  // or a missing value.
  Args(const std::vector<std::string>& argv, const std::set<std::string>& valued,
       const std::set<std::string>& switches);

  bool has(const std::string& flag) const { return values_.count(flag) != 0; }
  std::optional<std::string> get(const std::string& flag) const;
  // Parses an unsigned integer flag; throws std::invalid_argument naming the flag and value.
  std::optional<uint32_t> get_u32(const std::string& flag) const;

 private:
  std::map<std::string, std::string> values_;
};

}  // namespace pdkv::cli
