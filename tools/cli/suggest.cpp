#include "suggest.hpp"

#include <algorithm>
#include <cctype>

namespace pdkv::cli {

namespace {
char lower(char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); }

std::string_view without_dashes(std::string_view s) {
  while (!s.empty() && s.front() == '-') s.remove_prefix(1);
  return s;
}
}  // namespace

size_t edit_distance(std::string_view a, std::string_view b) {
  // Three rows of the dynamic programme: the swap rule looks two rows back.
  std::vector<size_t> two_back(b.size() + 1), prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const bool same = lower(a[i - 1]) == lower(b[j - 1]);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (same ? 0 : 1)});
      if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) && lower(a[i - 2]) == lower(b[j - 1])) {
        cur[j] = std::min(cur[j], two_back[j - 2] + 1);
      }
    }
    std::swap(two_back, prev);
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::vector<std::string> closest(std::string_view typed, const std::vector<std::string>& candidates) {
  const std::string_view t = without_dashes(typed);
  const size_t limit = std::max<size_t>(1, t.size() / 3);
  size_t best = limit + 1;
  std::vector<std::string> out;
  for (const auto& c : candidates) {
    const size_t d = edit_distance(t, without_dashes(c));
    if (d > limit || d > best) continue;
    if (d < best) {
      best = d;
      out.clear();
    }
    out.push_back(c);
  }
  // An abbreviation ("--prefill" for "--prefill-tp" and "--prefill-backend") is far from every
  // candidate by edit distance but still a plausible intent: offer the names it starts.
  if (out.empty() && t.size() >= 3) {
    for (const auto& c : candidates) {
      const std::string_view name = without_dashes(c);
      if (name.size() > t.size() && edit_distance(name.substr(0, t.size()), t) == 0) out.push_back(c);
    }
  }
  return out;
}

std::optional<std::string> did_you_mean(std::string_view typed, const std::vector<std::string>& candidates) {
  const auto c = closest(typed, candidates);
  if (c.empty()) return std::nullopt;
  std::string s = "did you mean ";
  for (size_t i = 0; i < c.size(); ++i) {
    if (i > 0) s += i + 1 == c.size() ? " or " : ", ";
    s += "'" + c[i] + "'";
  }
  return s + "?";
}

}  // namespace pdkv::cli
