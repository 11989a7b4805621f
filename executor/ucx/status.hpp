// UCX status codes as pdkv errors. Every UCX failure the data path raises is
// Error(Status::Transport, "<what>: <ucs_status_string> (<code>)", CauseDomain::Ucx, code), so the
// C API can report the UCX code beside pdkv's status.
#pragma once

#include <string>

#include <ucs/type/status.h>

namespace pdkv::exec {

// "<what>: <ucs_status_string(status)> (UCX status <status>)".
std::string ucx_message(const std::string& what, ucs_status_t status);

// Throws Error(Status::Transport, ucx_message(what, status), CauseDomain::Ucx, status).
[[noreturn]] void throw_ucx(const std::string& what, ucs_status_t status);

}  // namespace pdkv::exec
