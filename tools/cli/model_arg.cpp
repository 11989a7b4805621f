#include "model_arg.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli_error.hpp"
#include "pdkv/core/error.hpp"
#include "pdkv/core/hf_config.hpp"
#include "pdkv/core/presets.hpp"
#include "suggest.hpp"

namespace pdkv::cli {

using namespace pdkv::core;

std::vector<std::string> preset_names() {
  std::vector<std::string> out;
  for (const auto& p : presets()) out.push_back(p.name);
  return out;
}

ModelDesc load_model(const std::string& spec) {
  namespace fs = std::filesystem;
  const std::string io = status_name(Status::Io);
  std::error_code ec;
  const bool exists = fs::exists(spec, ec);
  const bool ends_json = spec.size() >= 5 && spec.compare(spec.size() - 5, 5, ".json") == 0;
  if (!exists && !ends_json) {
    try {
      return preset_model(spec);
    } catch (const Error& e) {
      throw CliError(ErrorKind::Usage, "--model", e.what(), status_name(e.status()), did_you_mean(spec, preset_names()));
    }
  }
  if (!exists) throw CliError(ErrorKind::Usage, "--model", "config.json '" + spec + "' does not exist", io);
  if (fs::is_directory(spec, ec)) {
    throw CliError(ErrorKind::Usage, "--model", "'" + spec + "' is a directory", io,
                   "pass the path of its config.json file");
  }
  std::ifstream in(spec, std::ios::binary);
  if (!in) throw CliError(ErrorKind::Usage, "--model", "cannot open config.json '" + spec + "'", io);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw CliError(ErrorKind::Usage, "--model", "error while reading '" + spec + "'", io);
  try {
    return model_from_hf_config(text.str(), spec);
  } catch (const Error& e) {
    throw CliError(ErrorKind::Configuration, "--model", e.what(), status_name(e.status()));
  }
}

}  // namespace pdkv::cli
