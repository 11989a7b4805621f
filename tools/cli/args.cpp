#include "args.hpp"

#include <charconv>
#include <utility>

#include "cli_error.hpp"
#include "suggest.hpp"

namespace pdkv::cli {

namespace {
// Joins message parts by appending, which also keeps GCC 12 from a false -Wrestrict warning
// (GCC PR 105329) on chains of operator+ with literals.
template <typename... T>
std::string concat(const T&... parts) {
  std::string s;
  (s.append(parts), ...);
  return s;
}

bool is_help(const std::string& a) { return a == "--help" || a == "-h"; }

// A token that is a flag rather than a value: "--x" or "-x", but not a negative number ("-16"
// is a value, so that `--block-size -16` says the value is negative instead of "missing").
bool looks_like_flag(const std::string& a) {
  if (a.size() < 2 || a[0] != '-') return false;
  return !(a[1] >= '0' && a[1] <= '9');
}
}  // namespace

bool wants_help(const std::vector<std::string>& argv) {
  for (const auto& a : argv) {
    if (is_help(a)) return true;
  }
  return false;
}

Args::Args(std::string command, const std::vector<std::string>& argv, const std::vector<FlagSpec>& flags)
    : command_(std::move(command)) {
  std::vector<std::string> names;
  for (const auto& f : flags) names.push_back(f.name);
  auto find = [&](const std::string& name) -> const FlagSpec* {
    for (const auto& f : flags) {
      if (f.name == name) return &f;
    }
    return nullptr;
  };
  const std::string in_cmd = " for 'pdkv " + command_ + "'";
  for (size_t i = 0; i < argv.size(); ++i) {
    std::string a = argv[i];
    if (!looks_like_flag(a)) {
      throw usage_error("arguments",
                        "unexpected argument '" + a + "': 'pdkv " + command_ + "' takes only flags",
                        did_you_mean(a, names));
    }
    std::string value;
    bool inline_value = false;
    if (auto eq = a.find('='); eq != std::string::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
      inline_value = true;
    }
    const FlagSpec* spec = find(a);
    if (spec == nullptr) {
      throw usage_error(a, "unknown flag '" + a + "'" + in_cmd, did_you_mean(a, names));
    }
    if (values_.count(a)) throw usage_error(a, "flag " + a + " is given more than once (pass it once)");
    if (!spec->takes_value) {
      if (inline_value) throw usage_error(a, concat("flag ", a, " takes no value, got '", value, "'"));
      values_.emplace(a, "1");  // emplace: assigning the literal trips GCC 12 -Wrestrict (PR 105651)
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= argv.size()) throw usage_error(a, "flag " + a + " needs a value");
      if (looks_like_flag(argv[i + 1])) {
        throw usage_error(a, "flag " + a + " needs a value, got the flag '" + argv[i + 1] + "'");
      }
      value = argv[++i];
    }
    values_.emplace(a, value);
  }
}

std::optional<std::string> Args::get(const std::string& flag) const {
  auto it = values_.find(flag);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::optional<uint32_t> Args::parse_u32(const std::string& flag, bool positive) const {
  auto v = get(flag);
  if (!v) return std::nullopt;
  const char* kind = positive ? " must be a positive integer" : " must be a non-negative integer";
  uint32_t out = 0;
  auto [ptr, ec] = std::from_chars(v->data(), v->data() + v->size(), out);
  if (v->empty() || ec != std::errc() || ptr != v->data() + v->size()) {
    throw usage_error(flag, concat(flag, kind, " below 2^32, got '", *v, "'"));
  }
  if (positive && out == 0) throw usage_error(flag, concat(flag, kind, ", got '0'"));
  return out;
}

std::optional<uint32_t> Args::get_u32(const std::string& flag) const { return parse_u32(flag, false); }

std::optional<uint32_t> Args::get_positive_u32(const std::string& flag) const { return parse_u32(flag, true); }

void Args::require(const std::vector<std::pair<std::string, std::string>>& required) const {
  std::string missing, what;
  for (const auto& [flag, meaning] : required) {
    if (has(flag)) continue;
    missing += (missing.empty() ? "" : ", ") + flag;
    what += (what.empty() ? "" : "; ") + flag + " " + meaning;
  }
  if (!missing.empty()) {
    throw usage_error(missing, "'pdkv " + command_ + "' is missing " + missing + " (" + what + ")");
  }
}

}  // namespace pdkv::cli
