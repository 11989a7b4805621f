// Internal: ASCII lower-casing for case-insensitive name lookups (presets, backends, dtypes).
#pragma once

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>

namespace pdkv::core {

inline std::string ascii_lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

}  // namespace pdkv::core
