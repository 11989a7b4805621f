// "Did you mean ...?" for the pdkv tool: the closest known spelling of a mistyped flag, command
// or value, by edit distance.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pdkv::cli {

// Optimal string alignment distance (Levenshtein plus the swap of two adjacent characters, the
// most common typo), case-insensitive.
size_t edit_distance(std::string_view a, std::string_view b);

// The candidates closest to `typed`, if they are close enough to be a plausible typo: distance
// at most max(1, length / 3) with the flags' leading dashes ignored, so "--prefil-tp" finds
// "--prefill-tp" but "--x" finds nothing. Several candidates at the same distance are all
// returned, in the order given. When nothing is that close, a name of 3 or more characters
// that begins some candidates (an abbreviation: "--prefill") returns those. Empty when nothing
// matches.
std::vector<std::string> closest(std::string_view typed, const std::vector<std::string>& candidates);

// "did you mean 'A'?" / "did you mean 'A' or 'B'?", or nullopt when nothing is close.
std::optional<std::string> did_you_mean(std::string_view typed, const std::vector<std::string>& candidates);

}  // namespace pdkv::cli
