#include "json_document.hpp"

#include <utility>

#include "demo_result.hpp"
#include "deployment_report.hpp"

namespace pdkv::cli {

using json = nlohmann::json;

std::string pdkv_version_string() {
  return std::to_string(PDKV_VERSION_MAJOR_CLI) + "." + std::to_string(PDKV_VERSION_MINOR_CLI) + "." +
         std::to_string(PDKV_VERSION_PATCH_CLI);
}

json envelope(const std::optional<std::string>& command, int exit_status, json errors) {
  return json{{"schema_version", kSchemaVersion},
              {"pdkv_version", pdkv_version_string()},
              {"command", command ? json(*command) : json(nullptr)},
              {"exit_status", exit_status},
              {"errors", std::move(errors)}};
}

json error_document(const std::optional<std::string>& command, const CliError& error) {
  json doc = envelope(command, exit_status_of(error.kind), json::array({error.to_json()}));
  if (command == "plan") doc.update(null_plan_fields());
  if (command == "presets") doc["presets"] = nullptr;
  if (command == "demo") doc.update(demo::null_demo_fields());
  return doc;
}

}  // namespace pdkv::cli
