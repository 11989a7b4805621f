// The JSON documents `--json` prints (docs/cli-json.md, docs/cli-json.schema.json). Every
// document is one object with the same envelope:
//   schema_version  integer, kSchemaVersion: bumped when a field is removed, renamed or changes
//                   type; adding a field keeps it
//   pdkv_version    string, "MAJOR.MINOR.PATCH"
//   command         "plan" | "demo" | "presets" | "version" | "help", or null when no command was
//                   recognised
//   exit_status     integer, the process exit status (0, 1, 2, 3; pdkv demo also 4, 5)
//   errors          array of {kind, where, status, message, suggestion}
// plus the command's own fields, which are always present (null when they do not apply).
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_error.hpp"

namespace pdkv::cli {

inline constexpr int kSchemaVersion = 1;

// "MAJOR.MINOR.PATCH" of this build.
std::string pdkv_version_string();

// The envelope: schema_version, pdkv_version, command, exit_status, errors.
nlohmann::json envelope(const std::optional<std::string>& command, int exit_status, nlohmann::json errors);

// The document for an error that stopped `command` (nullopt: no command recognised): the
// envelope with the error, and the command's own fields all null.
nlohmann::json error_document(const std::optional<std::string>& command, const CliError& error);

}  // namespace pdkv::cli
