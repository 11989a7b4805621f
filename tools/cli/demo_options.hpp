// `pdkv demo`'s command line: strict flags (args.hpp), each bad value a usage error naming its
// flag. What the options mean is in `pdkv demo --help` (help_text.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pdkv/core/model.hpp"

namespace pdkv::cli::demo {

enum class Transport { Auto, Shm, Tcp };
const char* transport_name(Transport t);

struct Options {
  std::string model = "nemotron-3-nano-30b";
  uint32_t prefill_tp = 4;
  uint32_t decode_tp = 2;
  Transport transport = Transport::Auto;
  uint32_t requests = 32;
  uint64_t min_tokens = 512;
  uint64_t max_tokens = 12288;
  uint32_t partial_hit_rate = 30;  // percent of requests with a partial prefix-cache hit on D
  uint32_t full_hit_rate = 10;     // percent with a full hit (D holds every token P computed)
  core::MambaCacheMode cache_mode = core::MambaCacheMode::Align;
  bool write = false;              // WRITE (P pushes) instead of READ (D pulls)
  std::optional<uint32_t> kill_prefill_after;  // requests completed before a P rank is killed
  uint32_t concurrency = 4;
  uint32_t deadline_ms = 5000;
  uint64_t seed = 1;
  bool json = false;

  // The P rank --kill-prefill-after kills: the last one.
  uint32_t kill_rank() const { return prefill_tp - 1; }
};

// Parses `pdkv demo ARGS`. Throws CliError (usage) naming the flag. `json_output` is set as soon
// as --json is seen, so a usage error is still reported as JSON.
Options parse_options(const std::vector<std::string>& argv, bool& json_output);

const char* cache_mode_name(core::MambaCacheMode m);

}  // namespace pdkv::cli::demo
