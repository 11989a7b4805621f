// One way to turn an OpenSSL failure into a pdkv error: the first queued OpenSSL error's text in
// the message and its code as the underlying cause (CauseDomain::OpenSsl), the queue cleared so a
// later call does not report a stale error.
#pragma once

#include <string>

namespace pdkv::exec {

// Throws Error(Internal, "<what> failed: <OpenSSL text>", cause OpenSsl with ERR_get_error()).
[[noreturn]] void fail_with_openssl_error(const std::string& what);

}  // namespace pdkv::exec
