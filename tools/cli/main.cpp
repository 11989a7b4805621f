// pdkv: command-line front end. `pdkv plan` explains a P/D deployment of a model: the geometry
// of each side and, for each decode rank, what it reads from which prefill rank. This file only
// dispatches commands and prints their results or errors (as text or, under --json, as one JSON
// document on stdout: json_document.hpp).
#include <algorithm>
#include <cstdio>
#include <exception>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "args.hpp"
#include "cli_error.hpp"
#include "demo_command.hpp"
#include "demo_rank.hpp"
#include "help_text.hpp"
#include "json_document.hpp"
#include "pdkv/core/error.hpp"
#include "pdkv/core/presets.hpp"
#include "plan_command.hpp"
#include "report_text.hpp"
#include "suggest.hpp"

namespace {

using nlohmann::json;
using pdkv::cli::Args;
using pdkv::cli::CliError;
using pdkv::cli::ErrorKind;
using pdkv::cli::usage_error;

void print_json(const json& doc) { std::cout << doc.dump(2) << "\n"; }

int cmd_plan(const std::vector<std::string>& argv) {
  bool as_json = false;
  json report = pdkv::cli::run_plan(argv, as_json);
  const int status = report["errors"].empty() ? 0 : 2;
  if (as_json) {
    json doc = pdkv::cli::envelope("plan", status, report["errors"]);
    report.erase("errors");
    doc.update(report);
    print_json(doc);
  } else {
    std::cout << pdkv::cli::render_report_text(report);
  }
  return status;
}

int cmd_presets(const std::vector<std::string>& argv) {
  const Args a("presets", argv, {{"--json", false}});
  if (a.has("--json")) {
    json list = json::array();
    for (const auto& p : pdkv::core::presets()) list.push_back(json{{"name", p.name}, {"hf_name", p.hf_name}});
    json doc = pdkv::cli::envelope("presets", 0, json::array());
    doc["presets"] = list;
    print_json(doc);
    return 0;
  }
  for (const auto& p : pdkv::core::presets()) std::printf("%-24s %s\n", p.name.c_str(), p.hf_name.c_str());
  return 0;
}

int cmd_version(const std::vector<std::string>& argv) {
  const Args a("version", argv, {{"--json", false}});
  if (a.has("--json")) {
    print_json(pdkv::cli::envelope("version", 0, json::array()));
  } else {
    std::printf("pdkv %s\n", pdkv::cli::pdkv_version_string().c_str());
  }
  return 0;
}

// `pdkv help [COMMAND]`.
int cmd_help(const std::vector<std::string>& argv) {
  if (argv.empty()) {
    std::fputs(pdkv::cli::general_help(), stdout);
    return 0;
  }
  if (argv.size() > 1) {
    throw usage_error("arguments", "'pdkv help' takes at most one command, got '" + argv[1] + "' after '" +
                                       argv[0] + "'");
  }
  if (auto text = pdkv::cli::command_help(argv[0])) {
    std::fputs(*text, stdout);
    return 0;
  }
  throw usage_error("command", "unknown command '" + argv[0] + "'",
                    pdkv::cli::did_you_mean(argv[0], pdkv::cli::command_names()));
}

// Under --json every outcome is a JSON document on stdout, errors included.
bool json_requested(const std::vector<std::string>& args) {
  for (const auto& a : args) {
    if (a == "--json" || a.rfind("--json=", 0) == 0) return true;
  }
  return false;
}

int report_error(const std::optional<std::string>& command, const CliError& e, bool as_json) {
  if (as_json) {
    print_json(pdkv::cli::error_document(command, e));
  } else {
    std::fprintf(stderr, "pdkv: %s\n", e.to_text().c_str());
    if (e.kind == ErrorKind::Usage) {
      std::fprintf(stderr, "run '%s' for usage\n", command ? ("pdkv " + *command + " --help").c_str() : "pdkv --help");
    }
  }
  return pdkv::cli::exit_status_of(e.kind);
}

int run(std::vector<std::string> args, std::optional<std::string>& command) {
  if (args.empty()) {
    throw usage_error("command", "no command given (plan, demo, presets, version, help)");
  }
  std::string first = args[0];
  args.erase(args.begin());
  if (first == "--help" || first == "-h") first = "help";
  if (first == "--version") first = "version";
  if (first.rfind("-", 0) == 0) {
    throw usage_error(first, "unknown flag '" + first + "' before the command; flags go after it, as in " +
                                 "'pdkv plan ... " + first + "'",
                      pdkv::cli::did_you_mean(first, {"--help", "--version"}));
  }
  const auto& names = pdkv::cli::command_names();
  if (std::find(names.begin(), names.end(), first) == names.end()) {
    throw usage_error("command", "unknown command '" + first + "'", pdkv::cli::did_you_mean(first, names));
  }
  command = first;
  if (first == "help") return cmd_help(args);
  if (pdkv::cli::wants_help(args)) {
    std::fputs(*pdkv::cli::command_help(first), stdout);
    return 0;
  }
  if (first == "plan") return cmd_plan(args);
  if (first == "demo") return pdkv::cli::run_demo(args);
  if (first == "presets") return cmd_presets(args);
  return cmd_version(args);
}

}  // namespace

int main(int argc, char** argv) {
  // A rank process `pdkv demo` started (hidden: not a command anyone types).
  if (argc >= 2 && std::string(argv[1]) == pdkv::cli::demo::kRankCommand) return pdkv::cli::demo::run_rank_process();
  const std::vector<std::string> args(argv + 1, argv + argc);
  const bool as_json = json_requested(args);
  std::optional<std::string> command;
  try {
    return run(args, command);
  } catch (const CliError& e) {
    return report_error(command, e, as_json);
  } catch (const pdkv::core::Error& e) {
    // Every library call the commands make reports its errors itself; one that escapes is a bug.
    return report_error(command,
                        CliError(ErrorKind::Internal, "pdkv", e.what(), pdkv::core::status_name(e.status())),
                        as_json);
  } catch (const std::exception& e) {
    return report_error(command, CliError(ErrorKind::Internal, "pdkv", e.what()), as_json);
  }
}
