// The help texts of the pdkv tool: `pdkv --help` and `pdkv COMMAND --help`.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace pdkv::cli {

// The subcommands, in the order the help lists them.
const std::vector<std::string>& command_names();

const char* general_help();
// Help of one subcommand, or nullopt for a name that is not one.
std::optional<const char*> command_help(const std::string& command);

}  // namespace pdkv::cli
