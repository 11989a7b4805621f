// Models from Hugging Face config.json. The core parser is pure; reading the file is the C API's
// job (core/ does no I/O), so Io errors are raised here, naming the path.
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>

#include "boundary.hpp"
#include "model_geometry_handles.hpp"
#include "pdkv/core/hf_config.hpp"

using pdkv::capi::guard;
using pdkv::capi::require_non_null;
namespace core = pdkv::core;

namespace {

std::string read_file(const char* path) {
  // An ifstream opens a directory on Linux and then reads nothing, which the parser would report
  // as PARSE; it is an IO error about the path.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    core::fail(core::Status::Io, std::string("cannot read config.json '") + path +
                                     "': it is a directory (pass the path of its config.json file)");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int e = errno;
    core::fail(core::Status::Io, std::string("cannot open config.json '") + path + "': " +
                                     (e != 0 ? std::strerror(e) : "unknown error") +
                                     " (pass the path of a Hugging Face config.json file)");
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) core::fail(core::Status::Io, std::string("error while reading '") + path + "'");
  return text.str();
}

pdkv_model_t* model_from_text(std::string_view text, const char* origin, const char* name) {
  core::ModelDesc m = core::model_from_hf_config(text, origin);
  if (name != nullptr) m.name = name;
  core::validate_model(m);
  return new pdkv_model{std::move(m)};
}

}  // namespace

extern "C" {

PDKV_API pdkv_status_t pdkv_model_from_hf_config_file(const char* path, const char* name, pdkv_model_t** out,
                                                      pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(path, "path");
    require_non_null(out, "out");
    *out = nullptr;
    const std::string text = read_file(path);
    *out = model_from_text(text, path, name);
  });
}

PDKV_API pdkv_status_t pdkv_model_from_hf_config_json(const char* json, size_t len, const char* name,
                                                      pdkv_model_t** out, pdkv_error_t** err) {
  return guard(err, [&] {
    require_non_null(json, "json");
    require_non_null(out, "out");
    *out = nullptr;
    *out = model_from_text(std::string_view(json, len), "<memory>", name);
  });
}

}  // extern "C"
