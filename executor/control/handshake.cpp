#include "control/handshake.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include "control/session_crypto.hpp"

namespace pdkv::exec {

using core::Error;
using core::Status;

namespace {

std::string version_text(uint16_t major, uint16_t minor) {
  return std::to_string(major) + "." + std::to_string(minor);
}

// One run of the handshake, on either side. Keeps the peer's identity as soon as it is known so
// every message names the peer, and remembers whether the peer was already told of a failure.
class Run {
 public:
  Run(ControlChannel& ch, const HandshakeParams& params, Deadline deadline)
      : ch_(ch), p_(params), deadline_(deadline) {
    local_ = params.hello;
    local_.proto_major = kControlProtoMajor;
    // A side may say an older minor than this build's (Hello's default is this build's): tests
    // play an older peer that way.
    local_.proto_minor = std::min(params.hello.proto_minor, kControlProtoMinor);
    local_.has_key = params.key.has_value();
    local_.nonce = random_nonce();
    // Only a side that says 3.5 or later marks it (a test playing an older peer must not).
    if (local_.proto_minor >= kNonceMarkMinor) mark_nonce(local_.nonce);
    local_bytes_ = local_.encode();  // what send(local_) puts on the wire, byte for byte
    // A stranger until its proof (or, without a key, until the exchange of proofs) is checked.
    ch_.set_max_payload(kMaxPreAuthPayload);
  }

  HandshakeResult client() {
    return guarded([&] {
      send(local_);
      receive_peer_hello();
      const Challenge challenge = Challenge::decode(expect(FrameType::Challenge).payload);
      if (challenge.server_nonce != peer_.nonce) {
        protocol_failure("its Challenge nonce differs from the nonce of its Hello");
      }
      const AuthTranscript t = transcript(/*local_is_client=*/true);
      Proof proof;
      if (p_.key) {
        if (!macs_equal(challenge.server_mac, server_mac(*p_.key, t))) key_failure();
        proof.client_mac = client_mac(*p_.key, t);
      }
      send(proof);
      // The server seals everything after checking this proof; so does this side from here on.
      if (p_.key) ch_.protect(derive_session_keys(*p_.key, t, /*local_is_client=*/true));
      ch_.set_max_payload(kMaxFramePayload);  // the server proved the key: its PeerInfo may be large
      HandshakeResult r{peer_, PeerInfo::decode(expect(FrameType::PeerInfo).payload), std::nullopt};
      if (p_.key) r.data_keys = derive_data_keys(*p_.key, t, /*local_is_client=*/true);
      validate(r);
      send(p_.info);
      expect(FrameType::Ready);
      Ready::decode(last_.payload);
      return r;
    });
  }

  HandshakeResult server() {
    return guarded([&] {
      receive_peer_hello();
      send(local_);
      const AuthTranscript t = transcript(/*local_is_client=*/false);
      Challenge challenge;
      challenge.server_nonce = local_.nonce;
      if (p_.key) challenge.server_mac = server_mac(*p_.key, t);
      send(challenge);
      const Proof proof = Proof::decode(expect(FrameType::Proof).payload);
      if (p_.key && !macs_equal(proof.client_mac, client_mac(*p_.key, t))) key_failure();
      if (p_.key) ch_.protect(derive_session_keys(*p_.key, t, /*local_is_client=*/false));
      ch_.set_max_payload(kMaxFramePayload);
      // Only now, with the peer's proof checked, do this side's region keys leave the process,
      // and (with a key) sealed so that only that peer can read them.
      send(p_.info);
      HandshakeResult r{peer_, PeerInfo::decode(expect(FrameType::PeerInfo).payload), std::nullopt};
      if (p_.key) r.data_keys = derive_data_keys(*p_.key, t, /*local_is_client=*/false);
      validate(r);
      send(Ready{});
      return r;
    });
  }

 private:
  // Runs a side; a Protocol error found here (malformed or unexpected frame) is also reported to
  // the peer, so it does not wait out its deadline in silence.
  template <class F>
  HandshakeResult guarded(F&& f) {
    try {
      return f();
    } catch (const Error& e) {
      if (!told_ && e.status() == Status::Protocol) {
        tell(Status::Protocol, "handshake refused by " + who_am_i() + ": " + e.what());
      }
      throw;
    }
  }

  std::string who_am_i() const {
    return "engine " + local_.engine_id + " rank " + std::to_string(local_.tp_rank);
  }

  std::string peer_name() const {
    std::string s = "peer " + ch_.peer();
    if (have_peer_) s += " (" + peer_.engine_id + " rank " + std::to_string(peer_.tp_rank) + ")";
    return s;
  }

  template <class Message>
  void send(const Message& m) {
    ch_.send(m, deadline_);
  }

  // Best effort, never blocks: the peer learns why before the connection closes.
  void tell(Status status, const std::string& message) {
    told_ = true;
    try {
      ch_.queue(ErrorMessage{status, clip_message_text(message)});
      ch_.flush_some();
    } catch (const Error&) {
      // The peer is gone or the socket is full; the local error is what matters.
    }
  }

  const Frame& expect(FrameType want) {
    try {
      last_ = ch_.recv(deadline_);
    } catch (const Error& e) {
      // A failure the peer reported (Error frame) or a lost connection: nothing to tell back.
      told_ = true;
      if (e.status() == Status::TimedOut) {
        throw Error(Status::TimedOut, std::string("timed out waiting for ") + frame_type_name(want) +
                                          " from " + peer_name() + " (the peer did not answer in time)");
      }
      if (e.status() == Status::Protocol && std::string_view(e.what()).starts_with("control frame:")) {
        // Our decoder refused the bytes: the peer does not know yet.
        told_ = false;
        throw Error(Status::Protocol, peer_name() + " sent a malformed frame: " + e.what());
      }
      throw;
    }
    if (last_.type == FrameType::Reject && want != FrameType::Reject) {
      Reject rej = Reject::decode(last_.payload);
      told_ = true;
      const Status s = rej.status == Status::Ok ? Status::Incompatible : rej.status;
      throw Error(s, peer_name() + " refused this side: " + rej.message);
    }
    if (last_.type != want) {
      protocol_failure(std::string("it sent ") + frame_type_name(last_.type) + " where the handshake expects " +
                       frame_type_name(want));
    }
    return last_;
  }

  [[noreturn]] void protocol_failure(const std::string& what) {
    throw Error(Status::Protocol, "handshake with " + peer_name() + " failed: " + what);
  }

  void receive_peer_hello() {
    peer_bytes_ = expect(FrameType::Hello).payload;
    peer_ = Hello::decode(peer_bytes_);
    check_peer_hello();
  }

  void check_peer_hello() {
    have_peer_ = true;
    if (peer_.proto_major != kControlProtoMajor) {
      const std::string ours = version_text(kControlProtoMajor, kControlProtoMinor);
      const std::string theirs = version_text(peer_.proto_major, peer_.proto_minor);
      tell(Status::Protocol, who_am_i() + " speaks control protocol " + ours + " and cannot serve " +
                                 theirs + "; run the same pdkv major version on both sides");
      throw Error(Status::Protocol, peer_name() + " speaks control protocol " + theirs +
                                        " but this side speaks " + ours +
                                        "; run the same pdkv major version on both sides");
    }
    if (peer_.proto_minor < kNonceMarkMinor && nonce_is_marked(peer_.nonce)) {
      // The nonce says its sender speaks 3.5 or later; the minor beside it says older. Proceeding
      // would let the path pick the transcript (3.2's binds no Hello field) and what is offered.
      const std::string theirs = version_text(peer_.proto_major, peer_.proto_minor);
      tell(Status::Auth, who_am_i() + " received this side's Hello saying control protocol " + theirs +
                             " with a nonce marked by a 3." + std::to_string(kNonceMarkMinor) +
                             "-or-later sender: the Hello was rewritten on the path (a downgrade)");
      throw Error(Status::Auth, peer_name() + " sent a Hello saying control protocol " + theirs +
                                    " with a nonce marked by a 3." + std::to_string(kNonceMarkMinor) +
                                    "-or-later sender: the Hello was rewritten on the path (a downgrade); refused");
    }
    if (peer_.purpose != static_cast<uint8_t>(HelloPurpose::Peer)) {
      tell(Status::Protocol, who_am_i() + " does not know connection purpose " + std::to_string(peer_.purpose));
      throw Error(Status::Protocol, peer_name() + " asks for connection purpose " +
                                        std::to_string(peer_.purpose) + ", which this side does not know");
    }
    if (local_.has_key && !peer_.has_key) {
      tell(Status::Auth, who_am_i() + " requires a pre-shared key but this side has none configured; "
                         "configure the same key on both sides");
      throw Error(Status::Auth, peer_name() + " has no pre-shared key configured but this side requires one; "
                                              "configure the same key on both sides");
    }
    if (!local_.has_key && peer_.has_key) {
      tell(Status::Auth, who_am_i() + " has no pre-shared key configured but this side presents one; "
                         "configure the same key on both sides");
      throw Error(Status::Auth, peer_name() + " presents a pre-shared key but this side has none configured; "
                                              "configure the same key on both sides");
    }
  }

  [[noreturn]] void key_failure() {
    tell(Status::Auth, who_am_i() + " could not verify this side's pre-shared key proof: the keys differ; "
                       "configure the same key on both sides");
    throw Error(Status::Auth, peer_name() + " failed to prove the pre-shared key (the keys differ; "
                                            "configure the same key on both sides)");
  }

  AuthTranscript transcript(bool local_is_client) const {
    const Hello& c = local_is_client ? local_ : peer_;
    const Hello& s = local_is_client ? peer_ : local_;
    AuthTranscript t;
    t.client_nonce = c.nonce;
    t.server_nonce = s.nonce;
    t.client_engine_id = c.engine_id;
    t.client_tp_rank = c.tp_rank;
    t.server_engine_id = s.engine_id;
    t.server_tp_rank = s.tp_rank;
    // Both sides decide alike: each knows both Hellos' minors (a path changing one changes the
    // Hello bytes the other side MACs, so the proofs fail).
    if (std::min(local_.proto_minor, peer_.proto_minor) >= kHelloBoundMinor) {
      t.client_hello = local_is_client ? local_bytes_ : peer_bytes_;
      t.server_hello = local_is_client ? peer_bytes_ : local_bytes_;
    }
    return t;
  }

  void validate(const HandshakeResult& r) {
    if (!p_.validate) return;
    try {
      p_.validate(r.peer_hello, r.peer_info);
    } catch (const Error& e) {
      told_ = true;
      try {
        ch_.queue(Reject{e.status(), clip_message_text(e.what())});
        ch_.flush_some();
      } catch (const Error&) {
        // The peer is gone; the refusal stands locally.
      }
      throw;
    }
  }

  ControlChannel& ch_;
  const HandshakeParams& p_;
  Deadline deadline_;
  Hello local_;
  Hello peer_;
  std::vector<uint8_t> local_bytes_;  // this side's Hello payload as sent
  std::vector<uint8_t> peer_bytes_;   // the peer's Hello payload as received
  bool have_peer_ = false;
  bool told_ = false;
  Frame last_;
};

}  // namespace

HandshakeResult handshake_client(ControlChannel& channel, const HandshakeParams& params, Deadline deadline) {
  return Run(channel, params, deadline).client();
}

HandshakeResult handshake_server(ControlChannel& channel, const HandshakeParams& params, Deadline deadline) {
  return Run(channel, params, deadline).server();
}

}  // namespace pdkv::exec
