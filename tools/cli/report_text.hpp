// Renders a deployment report (deployment_report.hpp) as readable tables for a terminal.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace pdkv::cli {

std::string render_report_text(const nlohmann::json& report);

}  // namespace pdkv::cli
