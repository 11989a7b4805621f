// The connection handshake over a connected ControlChannel, blocking with one deadline.
//
//   client (D, connects)                server (P, accepts)
//   Hello  ------------------------------>
//          <------------------------------  Hello      (or Error: version / key mismatch)
//          <------------------------------  Challenge  {server nonce, server MAC}
//   verify server MAC (with a key)
//   Proof  {client MAC} ----------------->  verify client MAC (with a key)
//          <------------------------------  PeerInfo   (rkeys leave only after the proof)
//   validate(server hello, info)
//   PeerInfo (or Reject) ---------------->  validate(client hello, info)
//          <------------------------------  Ready (or Reject)
//
// The server's Hello nonce equals its Challenge nonce. Both MACs cover the transcript of
// auth.hpp. Any failure throws pdkv::core::Error on this side and, where the peer is still
// listening, first tells the peer (Error frame, or Reject for a validate() refusal) so both sides
// report it: Auth names the peer, Protocol names the unexpected frame or version, TimedOut the
// awaited step.
#pragma once

#include <functional>
#include <optional>

#include "control/auth.hpp"
#include "control/channel.hpp"
#include "control/messages.hpp"

namespace pdkv::exec {

struct HandshakeParams {
  // This side's identity. The handshake sets hello.nonce (fresh) and hello.has_key (from key);
  // the other fields are sent as given.
  Hello hello;
  // This side's metadata, worker address and region keys.
  PeerInfo info;
  std::optional<PresharedKey> key;
  // Decides whether the peer is acceptable; throws pdkv::core::Error to refuse (its status and
  // message travel to the peer in a Reject). Empty: accept every peer.
  std::function<void(const Hello& peer_hello, const PeerInfo& peer_info)> validate;
};

struct HandshakeResult {
  Hello peer_hello;
  PeerInfo peer_info;
  // With a key: this connection's data connection keys (derive_data_keys), for a tcp peer whose
  // data connection is sealed. Empty without a key.
  std::optional<SessionKeys> data_keys;
};

HandshakeResult handshake_client(ControlChannel& channel, const HandshakeParams& params,
                                 Deadline deadline);
HandshakeResult handshake_server(ControlChannel& channel, const HandshakeParams& params,
                                 Deadline deadline);

}  // namespace pdkv::exec
