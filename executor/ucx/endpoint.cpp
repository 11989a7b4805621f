#include "ucx/endpoint.hpp"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "pdkv/core/error.hpp"
#include "ucx/status.hpp"

namespace pdkv::exec {
namespace {

// Stored in the bytes every UCX request reserves for pdkv (kUcxRequestReserve): which callback to
// run for the request, and with which pointer. Written right after a post returns a request; UCX
// only runs completion callbacks from progress, which cannot run between the post and the write
// (one thread at a time, worker.hpp).
struct OpSlot {
  OpCallback cb;
  void* user;
};
static_assert(sizeof(OpSlot) <= kUcxRequestReserve);

void on_request_done(void* request, ucs_status_t status, void* /*user_data*/) {
  auto* slot = static_cast<OpSlot*>(request);
  const OpCallback cb = slot->cb;
  void* const user = slot->user;
  ucp_request_free(request);
  if (cb != nullptr) cb(user, status);
}

PostResult finish_post(ucs_status_ptr_t ret, OpCallback cb, void* user) {
  if (ret == nullptr) return {PostState::Done, UCS_OK};
  if (UCS_PTR_IS_ERR(ret)) return {PostState::Failed, UCS_PTR_STATUS(ret)};
  auto* slot = static_cast<OpSlot*>(ret);
  slot->cb = cb;
  slot->user = user;
  return {PostState::InFlight, UCS_OK};
}

ucp_request_param_t op_params() {
  ucp_request_param_t p;
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK;
  p.cb.send = on_request_done;
  return p;
}

}  // namespace

UcxRemoteKey::~UcxRemoteKey() {
  if (rkey_ != nullptr) ucp_rkey_destroy(rkey_);
}

UcxRemoteKey::UcxRemoteKey(UcxRemoteKey&& other) noexcept : rkey_(std::exchange(other.rkey_, nullptr)) {}

UcxRemoteKey& UcxRemoteKey::operator=(UcxRemoteKey&& other) noexcept {
  if (this != &other) {
    if (rkey_ != nullptr) ucp_rkey_destroy(rkey_);
    rkey_ = std::exchange(other.rkey_, nullptr);
  }
  return *this;
}

std::unique_ptr<UcxEndpoint> UcxEndpoint::create(UcxWorker& worker,
                                                 std::span<const uint8_t> peer_address,
                                                 ErrorMode mode) {
  if (peer_address.empty()) {
    core::fail(core::Status::InvalidArgument, "UCX endpoint: the peer's worker address is empty");
  }
  std::unique_ptr<UcxEndpoint> ep(new UcxEndpoint(worker));
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  params.address = reinterpret_cast<const ucp_address_t*>(peer_address.data());
  if (mode == ErrorMode::Peer) {
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.err_handler.cb = &UcxEndpoint::on_peer_error;
    params.err_handler.arg = ep.get();
  } else {
    params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
  }
  const ucs_status_t st = ucp_ep_create(worker.handle(), &params, &ep->ep_);
  if (st != UCS_OK) {
    ep->ep_ = nullptr;
    ep->state_ = State::Closed;
    throw_ucx(std::string("ucp_ep_create (error mode ") + (mode == ErrorMode::Peer ? "peer" : "none") +
                  ", transport " + transport_mode_name(worker.context().mode()) + ")",
              st);
  }
  return ep;
}

void UcxEndpoint::on_peer_error(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  auto* self = static_cast<UcxEndpoint*>(arg);
  if (self->failure_ == UCS_OK) self->failure_ = status == UCS_OK ? UCS_ERR_CONNECTION_RESET : status;
}

UcxRemoteKey UcxEndpoint::unpack_rkey(std::span<const uint8_t> packed) const {
  if (packed.empty()) core::fail(core::Status::InvalidArgument, "UCX rkey: the packed key is empty");
  if (ep_ == nullptr || state_ != State::Open) {
    core::fail(core::Status::InvalidArgument, "UCX rkey: the endpoint is closed");
  }
  if (const std::string why = packed_rkey_layout_error(packed); !why.empty()) {
    core::fail(core::Status::InvalidArgument, "UCX rkey: malformed packed key: " + why);
  }
  // A transport reads its own entry as a fixed-size record, which a short entry (its size byte
  // is the sender's word) would let run past the key: the zeros keep such reads in this buffer.
  std::vector<uint8_t> padded(packed.size() + 256, 0);
  std::copy(packed.begin(), packed.end(), padded.begin());
  ucp_rkey_h rkey = nullptr;
  const ucs_status_t st = ucp_ep_rkey_unpack(ep_, padded.data(), &rkey);
  if (st != UCS_OK) throw_ucx("ucp_ep_rkey_unpack of " + std::to_string(packed.size()) + " bytes", st);
  return UcxRemoteKey(rkey);
}

PostResult UcxEndpoint::post_get(void* local, size_t length, uint64_t remote_addr,
                                 const UcxRemoteKey& rkey, OpCallback cb, void* user) {
  if (state_ != State::Open) return {PostState::Failed, UCS_ERR_NOT_CONNECTED};
  if (failure_ != UCS_OK) return {PostState::Failed, failure_};
  if (length == 0) return {PostState::Done, UCS_OK};
  const ucp_request_param_t p = op_params();
  return finish_post(ucp_get_nbx(ep_, local, length, remote_addr, rkey.handle(), &p), cb, user);
}

PostResult UcxEndpoint::post_put(const void* local, size_t length, uint64_t remote_addr,
                                 const UcxRemoteKey& rkey, OpCallback cb, void* user) {
  if (state_ != State::Open) return {PostState::Failed, UCS_ERR_NOT_CONNECTED};
  if (failure_ != UCS_OK) return {PostState::Failed, failure_};
  if (length == 0) return {PostState::Done, UCS_OK};
  const ucp_request_param_t p = op_params();
  return finish_post(ucp_put_nbx(ep_, local, length, remote_addr, rkey.handle(), &p), cb, user);
}

PostResult UcxEndpoint::post_flush(OpCallback cb, void* user) {
  if (state_ != State::Open) return {PostState::Failed, UCS_ERR_NOT_CONNECTED};
  if (failure_ != UCS_OK) return {PostState::Failed, failure_};
  const ucp_request_param_t p = op_params();
  return finish_post(ucp_ep_flush_nbx(ep_, &p), cb, user);
}

void UcxEndpoint::on_close_done(void* user, ucs_status_t status) {
  auto* self = static_cast<UcxEndpoint*>(user);
  self->close_request_ = nullptr;
  self->close_status_ = status;
  self->state_ = State::Closed;
}

void UcxEndpoint::close(bool force) {
  if (state_ != State::Open) return;
  ucp_request_param_t p;
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_FLAGS;
  p.cb.send = on_request_done;
  // After a peer failure UCX accepts only a forced close.
  p.flags = (force || failure_ != UCS_OK) ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  ucs_status_ptr_t ret = ucp_ep_close_nbx(ep_, &p);
  ep_ = nullptr;  // UCX owns the endpoint's teardown from here
  if (ret == nullptr || UCS_PTR_IS_ERR(ret)) {
    close_status_ = ret == nullptr ? UCS_OK : UCS_PTR_STATUS(ret);
    state_ = State::Closed;
    return;
  }
  auto* slot = static_cast<OpSlot*>(ret);
  slot->cb = &UcxEndpoint::on_close_done;
  slot->user = this;
  close_request_ = ret;
  state_ = State::Closing;
}

bool UcxEndpoint::progress_until_closed(Clock::time_point deadline) {
  if (state_ == State::Open) close(true);
  while (state_ != State::Closed) {
    worker_->progress();
    if (state_ != State::Closed && Clock::now() >= deadline) return false;
  }
  return true;
}

UcxEndpoint::~UcxEndpoint() {
  if (state_ == State::Closed) return;
  if (!progress_until_closed(Clock::now() + std::chrono::seconds(2)) && close_request_ != nullptr) {
    // Abandon the close rather than hang: its completion must not touch this destroyed object.
    static_cast<OpSlot*>(close_request_)->cb = nullptr;
  }
}

}  // namespace pdkv::exec
