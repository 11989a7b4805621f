#include "pdkv/core/error.hpp"

namespace pdkv::core {

const char* status_name(Status s) noexcept {
  switch (s) {
    case Status::Ok: return "PDKV_OK";
    case Status::InvalidArgument: return "PDKV_ERR_INVALID_ARGUMENT";
    case Status::NullPointer: return "PDKV_ERR_NULL_POINTER";
    case Status::StructSize: return "PDKV_ERR_STRUCT_SIZE";
    case Status::TpNotDivisible: return "PDKV_ERR_TP_NOT_DIVISIBLE";
    case Status::HeadsNotDivisible: return "PDKV_ERR_HEADS_NOT_DIVISIBLE";
    case Status::UnsupportedMambaType: return "PDKV_ERR_UNSUPPORTED_MAMBA_TYPE";
    case Status::UnsupportedLayout: return "PDKV_ERR_UNSUPPORTED_LAYOUT";
    case Status::Overflow: return "PDKV_ERR_OVERFLOW";
    case Status::BufferTooSmall: return "PDKV_ERR_BUFFER_TOO_SMALL";
    case Status::Parse: return "PDKV_ERR_PARSE";
    case Status::Io: return "PDKV_ERR_IO";
    case Status::NotFound: return "PDKV_ERR_NOT_FOUND";
    case Status::Incompatible: return "PDKV_ERR_INCOMPATIBLE";
    case Status::Coverage: return "PDKV_ERR_COVERAGE";
    case Status::OutOfBounds: return "PDKV_ERR_OUT_OF_BOUNDS";
    case Status::Checksum: return "PDKV_ERR_CHECKSUM";
    case Status::Internal: return "PDKV_ERR_INTERNAL";
    case Status::TimedOut: return "PDKV_ERR_TIMED_OUT";
    case Status::Cancelled: return "PDKV_ERR_CANCELLED";
    case Status::PeerLost: return "PDKV_ERR_PEER_LOST";
    case Status::Auth: return "PDKV_ERR_AUTH";
    case Status::Protocol: return "PDKV_ERR_PROTOCOL";
    case Status::Transport: return "PDKV_ERR_TRANSPORT";
    case Status::Busy: return "PDKV_ERR_BUSY";
    case Status::Shutdown: return "PDKV_ERR_SHUTDOWN";
  }
  return "PDKV_ERR_UNKNOWN";
}

void fail(Status status, std::string message) { throw Error(status, std::move(message)); }

}  // namespace pdkv::core
