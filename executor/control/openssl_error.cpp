#include "control/openssl_error.hpp"

#include <openssl/err.h>

#include "pdkv/core/error.hpp"

namespace pdkv::exec {

void fail_with_openssl_error(const std::string& what) {
  const unsigned long code = ERR_get_error();
  char buf[256] = "no OpenSSL error queued";
  if (code != 0) ERR_error_string_n(code, buf, sizeof buf);
  ERR_clear_error();
  throw core::Error(core::Status::Internal, what + " failed: " + buf, core::CauseDomain::OpenSsl,
                    static_cast<int64_t>(code));
}

}  // namespace pdkv::exec
