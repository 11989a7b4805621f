// The errors of the pdkv tool and the exit status each one maps to (documented in `pdkv --help`
// and docs/cli-json.md): 1 usage, 2 configuration, 3 internal; `pdkv demo` adds 4 (the demo
// failed) and 5 (requests failed because --kill-prefill-after killed a prefill rank).
#pragma once

#include <optional>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace pdkv::cli {

enum class ErrorKind {
  Usage,          // the command line is wrong: unknown command/flag, missing or bad value (exit 1)
  Configuration,  // the command line is fine but describes a deployment that does not work (2)
  Internal,       // a bug in pdkv (3)
  Failed,         // pdkv demo: wrong bytes, or a failure nothing explains (4)
  Killed,         // pdkv demo: requests failed, cleanly, because a prefill rank was killed (5)
};

const char* kind_name(ErrorKind k) noexcept;  // "usage", "configuration", "internal", "failed", "killed"
int exit_status_of(ErrorKind k) noexcept;

// One error as the tool reports it. `where` names what is wrong in the user's terms (a flag such
// as "--prefill-tp", "command", "arguments", "decode rank 1 attention"); `status` is the
// PDKV_ERR_* name when the library raised it; `suggestion` is a "did you mean ...?" or a fix.
struct CliError : std::runtime_error {
  CliError(ErrorKind kind, std::string where, const std::string& message,
           std::optional<std::string> status = std::nullopt,
           std::optional<std::string> suggestion = std::nullopt);

  ErrorKind kind;
  std::string where;
  std::optional<std::string> status;
  std::optional<std::string> suggestion;

  // {"kind", "where", "status" (string or null), "message", "suggestion" (string or null)}.
  nlohmann::json to_json() const;
  // "usage error: WHERE: STATUS: MESSAGE; SUGGESTION" (WHERE and STATUS only when there is a
  // status: messages without one name their flag themselves).
  std::string to_text() const;
};

// A usage error (exit 1).
CliError usage_error(std::string where, const std::string& message,
                     std::optional<std::string> suggestion = std::nullopt);

}  // namespace pdkv::cli
