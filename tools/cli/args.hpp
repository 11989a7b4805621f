// Strict command-line parsing for the pdkv tool: "--flag value", "--flag=value" and switches.
// Everything that is not a known flag of the command is a usage error naming it (with a "did you
// mean" for a near miss): unknown flags, positional arguments, a flag given twice, a missing
// value, a value that is itself a flag, a value given to a switch.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace pdkv::cli {

struct FlagSpec {
  std::string name;  // "--model"
  bool takes_value;  // false: a switch such as "--json"
};

// True when argv asks for help ("--help" or "-h" anywhere): help wins over every other argument.
bool wants_help(const std::vector<std::string>& argv);

class Args {
 public:
  // `command` names the subcommand in messages ("plan"). Throws CliError (usage) on the first
  // argument that is not acceptable.
  Args(std::string command, const std::vector<std::string>& argv, const std::vector<FlagSpec>& flags);

  bool has(const std::string& flag) const { return values_.count(flag) != 0; }
  std::optional<std::string> get(const std::string& flag) const;
  // A non-negative integer; a usage error naming the flag and the value otherwise.
  std::optional<uint32_t> get_u32(const std::string& flag) const;
  // Like get_u32, but 0 is also an error (for settings where 0 would silently mean "unset").
  std::optional<uint32_t> get_positive_u32(const std::string& flag) const;
  // Usage error naming every flag of `required` that is absent, with `what` saying what each is.
  void require(const std::vector<std::pair<std::string, std::string>>& required) const;

 private:
  std::optional<uint32_t> parse_u32(const std::string& flag, bool positive) const;

  std::string command_;
  std::map<std::string, std::string> values_;
};

}  // namespace pdkv::cli
