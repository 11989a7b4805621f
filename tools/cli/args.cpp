#include "args.hpp"

#include <charconv>
#include <stdexcept>

namespace pdkv::cli {

Args::Args(const std::vector<std::string>& argv, const std::set<std::string>& valued,
           const std::set<std::string>& switches) {
  for (size_t i = 0; i < argv.size(); ++i) {
    std::string a = argv[i];
    std::string value;
    bool inline_value = false;
    if (auto eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
      inline_value = true;
    }
    if ((switches.count(a) || valued.count(a)) && values_.count(a)) {
      throw std::invalid_argument("flag " + a + " is given more than once (pass it once)");
    }
    if (switches.count(a)) {
      if (inline_value) throw std::invalid_argument("flag " + a + " takes no value");
      values_[a] = "1";
    } else if (valued.count(a)) {
      if (!inline_value) {
        if (i + 1 >= argv.size()) throw std::invalid_argument("flag " + a + " needs a value");
        value = argv[++i];
      }
      values_[a] = value;
    } else {
      throw std::invalid_argument("unknown argument '" + a + "' (see pdkv --help)");
    }
  }
}

std::optional<std::string> Args::get(const std::string& flag) const {
  auto it = values_.find(flag);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::optional<uint32_t> Args::get_u32(const std::string& flag) const {
  auto v = get(flag);
  if (!v) return std::nullopt;
  uint32_t out = 0;
  auto [ptr, ec] = std::from_chars(v->data(), v->data() + v->size(), out);
  if (ec != std::errc() || ptr != v->data() + v->size()) {
    throw std::invalid_argument(flag + " must be a non-negative integer, got '" + *v + "'");
  }
  return out;
}

std::optional<uint32_t> Args::get_positive_u32(const std::string& flag) const {
  auto v = get_u32(flag);
  if (v && *v == 0) throw std::invalid_argument(flag + " must be a positive integer, got '0'");
  return v;
}

}  // namespace pdkv::cli
