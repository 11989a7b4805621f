#include "demo_options.hpp"

#include <charconv>

#include "args.hpp"
#include "cli_error.hpp"
#include "suggest.hpp"

namespace pdkv::cli::demo {

namespace {

// Largest prompt the demo accepts: far beyond any default, small enough that block counts and
// byte sizes cannot overflow (the memory check refuses what does not fit long before).
constexpr uint64_t kMaxTokens = uint64_t{1} << 24;

uint64_t parse_u64(const std::string& flag, const std::string& text, const std::string& whole) {
  uint64_t v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size()) {
    throw usage_error(flag, flag + " '" + whole + "' is not a token count or a range MIN-MAX of token counts");
  }
  return v;
}

uint32_t percent(const Args& a, const std::string& flag, uint32_t fallback) {
  const auto v = a.get_u32(flag);
  if (!v) return fallback;
  if (*v > 100) throw usage_error(flag, flag + " is a percentage (0 to 100), got '" + *a.get(flag) + "'");
  return *v;
}

}  // namespace

const char* transport_name(Transport t) {
  switch (t) {
    case Transport::Auto:
      return "auto";
    case Transport::Shm:
      return "shm";
    case Transport::Tcp:
      return "tcp";
  }
  return "auto";
}

const char* cache_mode_name(core::MambaCacheMode m) {
  switch (m) {
    case core::MambaCacheMode::None:
      return "none";
    case core::MambaCacheMode::Align:
      return "align";
    case core::MambaCacheMode::All:
      return "all";
  }
  return "none";
}

Options parse_options(const std::vector<std::string>& argv, bool& json_output) {
  for (const auto& s : argv) json_output = json_output || s == "--json";
  const Args a("demo", argv,
               {{"--model", true},
                {"--prefill-tp", true},
                {"--decode-tp", true},
                {"--transport", true},
                {"--requests", true},
                {"--tokens", true},
                {"--partial-hit-rate", true},
                {"--full-hit-rate", true},
                {"--mamba-cache-mode", true},
                {"--op", true},
                {"--kill-prefill-after", true},
                {"--concurrency", true},
                {"--deadline-ms", true},
                {"--seed", true},
                {"--json", false}});
  Options o;
  o.json = a.has("--json");
  if (auto v = a.get("--model")) {
    if (v->empty()) throw usage_error("--model", "--model is empty (a preset or a config.json path)");
    o.model = *v;
  }
  if (auto v = a.get_positive_u32("--prefill-tp")) o.prefill_tp = *v;
  if (auto v = a.get_positive_u32("--decode-tp")) o.decode_tp = *v;
  // Every TP rank is a process with its own agent; more than this is not a demo.
  for (const char* f : {"--prefill-tp", "--decode-tp"}) {
    if (a.has(f) && *a.get_positive_u32(f) > 64) {
      throw usage_error(f, std::string(f) + " " + *a.get(f) + " would start more than 64 processes for one side");
    }
  }
  if (auto v = a.get("--transport")) {
    if (*v == "auto") {
      o.transport = Transport::Auto;
    } else if (*v == "shm") {
      o.transport = Transport::Shm;
    } else if (*v == "tcp") {
      o.transport = Transport::Tcp;
    } else {
      throw usage_error("--transport", "--transport '" + *v + "' is not one of auto, shm, tcp",
                        did_you_mean(*v, {"auto", "shm", "tcp"}));
    }
  }
  if (auto v = a.get_positive_u32("--requests")) {
    if (*v > 1000000) throw usage_error("--requests", "--requests " + *a.get("--requests") + " is above 1000000");
    o.requests = *v;
  }
  if (auto v = a.get("--tokens")) {
    const size_t dash = v->find('-');
    o.min_tokens = parse_u64("--tokens", v->substr(0, dash), *v);
    o.max_tokens = dash == std::string::npos ? o.min_tokens : parse_u64("--tokens", v->substr(dash + 1), *v);
    if (o.min_tokens < 2) {
      throw usage_error("--tokens", "--tokens '" + *v + "': a prompt needs at least 2 tokens (P computes all but the "
                                    "last one, which D recomputes)");
    }
    if (o.min_tokens > o.max_tokens) {
      throw usage_error("--tokens", "--tokens '" + *v + "': the minimum is above the maximum");
    }
    if (o.max_tokens > kMaxTokens) {
      throw usage_error("--tokens", "--tokens '" + *v + "': the maximum is above " + std::to_string(kMaxTokens));
    }
  }
  if (auto v = a.get("--mamba-cache-mode")) {
    if (*v == "align") {
      o.cache_mode = core::MambaCacheMode::Align;
    } else if (*v == "none") {
      o.cache_mode = core::MambaCacheMode::None;
    } else if (*v == "all") {
      throw usage_error("--mamba-cache-mode", "--mamba-cache-mode 'all' is not run by the demo (it runs none or align)");
    } else {
      throw usage_error("--mamba-cache-mode", "--mamba-cache-mode '" + *v + "' is not one of none, align",
                        did_you_mean(*v, {"none", "align"}));
    }
  }
  // Prefix caching of a hybrid model needs cached Mamba states: without them (mode none) D never
  // holds a prefix, so the hit rates default to 0 and asking for hits is an error.
  const bool caching = o.cache_mode != core::MambaCacheMode::None;
  o.partial_hit_rate = percent(a, "--partial-hit-rate", caching ? o.partial_hit_rate : 0);
  o.full_hit_rate = percent(a, "--full-hit-rate", caching ? o.full_hit_rate : 0);
  if (!caching) {
    for (const char* f : {"--partial-hit-rate", "--full-hit-rate"}) {
      if (a.has(f) && *a.get_u32(f) != 0) {
        throw usage_error(f, std::string(f) + " " + *a.get(f) +
                                 " needs prefix caching, which --mamba-cache-mode none turns off (use align)");
      }
    }
  }
  if (o.partial_hit_rate + o.full_hit_rate > 100) {
    throw usage_error("--partial-hit-rate", "--partial-hit-rate " + std::to_string(o.partial_hit_rate) +
                                                " and --full-hit-rate " + std::to_string(o.full_hit_rate) +
                                                " add up to more than 100 percent");
  }
  if (auto v = a.get("--op")) {
    if (*v == "read" || *v == "READ") {
      o.write = false;
    } else if (*v == "write" || *v == "WRITE") {
      o.write = true;
    } else {
      throw usage_error("--op", "--op '" + *v + "' is not one of read, write", did_you_mean(*v, {"read", "write"}));
    }
  }
  if (auto v = a.get_u32("--kill-prefill-after")) {
    if (*v >= o.requests) {
      throw usage_error("--kill-prefill-after", "--kill-prefill-after " + std::to_string(*v) +
                                                    " leaves no request after the kill: --requests is " +
                                                    std::to_string(o.requests));
    }
    o.kill_prefill_after = *v;
  }
  if (auto v = a.get_positive_u32("--concurrency")) {
    if (*v > 256) throw usage_error("--concurrency", "--concurrency " + *a.get("--concurrency") + " is above 256");
    o.concurrency = *v;
  }
  if (auto v = a.get_positive_u32("--deadline-ms")) {
    if (*v < 100 || *v > 600000) {
      throw usage_error("--deadline-ms", "--deadline-ms " + *a.get("--deadline-ms") + " is outside 100 to 600000");
    }
    o.deadline_ms = *v;
  }
  if (auto v = a.get_u32("--seed")) o.seed = *v;
  return o;
}

}  // namespace pdkv::cli::demo
