#include "cli_error.hpp"

#include <utility>

namespace pdkv::cli {

const char* kind_name(ErrorKind k) noexcept {
  switch (k) {
    case ErrorKind::Usage:
      return "usage";
    case ErrorKind::Configuration:
      return "configuration";
    case ErrorKind::Internal:
      return "internal";
    case ErrorKind::Failed:
      return "failed";
    case ErrorKind::Killed:
      return "killed";
  }
  return "internal";
}

int exit_status_of(ErrorKind k) noexcept {
  switch (k) {
    case ErrorKind::Usage:
      return 1;
    case ErrorKind::Configuration:
      return 2;
    case ErrorKind::Internal:
      return 3;
    case ErrorKind::Failed:
      return 4;
    case ErrorKind::Killed:
      return 5;
  }
  return 3;
}

CliError::CliError(ErrorKind k, std::string w, const std::string& message, std::optional<std::string> st,
                   std::optional<std::string> sugg)
    : std::runtime_error(message), kind(k), where(std::move(w)), status(std::move(st)), suggestion(std::move(sugg)) {}

nlohmann::json CliError::to_json() const {
  return nlohmann::json{{"kind", kind_name(kind)},
                        {"where", where},
                        {"status", status ? nlohmann::json(*status) : nlohmann::json(nullptr)},
                        {"message", what()},
                        {"suggestion", suggestion ? nlohmann::json(*suggestion) : nlohmann::json(nullptr)}};
}

std::string CliError::to_text() const {
  std::string s = std::string(kind_name(kind)) + " error: ";
  if (status) s += where + ": " + *status + ": ";
  s += what();
  if (suggestion) s += "; " + *suggestion;
  return s;
}

CliError usage_error(std::string where, const std::string& message, std::optional<std::string> suggestion) {
  return CliError(ErrorKind::Usage, std::move(where), message, std::nullopt, std::move(suggestion));
}

}  // namespace pdkv::cli
