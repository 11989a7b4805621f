// `pdkv plan`: parses its flags into a Deployment and builds the report.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace pdkv::cli {

// The report of `pdkv plan ARGS` (build_deployment_report's fields and "errors"). Throws CliError:
// usage errors for the command line, a configuration error for a config.json that cannot be
// described. Every flag is parsed before the model is read, so a usage error wins.
nlohmann::json run_plan(const std::vector<std::string>& argv, bool& json_output);

}  // namespace pdkv::cli
