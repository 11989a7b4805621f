// pdkv_test_peer: the P side of the two-process executor tests. It serves P ranks of a scenario
// (scenario.hpp) from one process: each rank's regions are mmap'd, filled with the pattern of
// (engine, rank, region, offset), registered with its own agent; the rank's port is printed, and
// commands read on stdin drive leases and WRITE transfers. Notifications are printed as they
// arrive. With --misbehave it runs no agent: a raw TCP listener that never answers (silent) or
// answers every connection with garbage bytes (garbage).
//
// Usage: pdkv_test_peer --scenario NAME [--ranks all|R,R..] [--transport auto|shm|tcp]
//          [--listen HOST] [--key TEXT] [--hb-interval MS] [--hb-timeout MS] [--timeout MS]
//          [--max-outstanding N] [--skip-register REGION] [--misbehave silent|garbage]
//   (--listen takes a host; the port is always chosen by the system; --skip-register deregisters
//   that region on every rank after registering it, so peers see it advertised but unreachable)
//        pdkv_test_peer --describe NAME
// Output lines: "PORT <rank> <port>" per rank, then "READY"; "NOTE <rank> <kind> <status>
// <request|-> <engine|-> <remote rank> <count> <expected> <bytes>"; command replies below.
// Commands (one per line):
//   LEASE <request> <expected> <ttl_ms>            every rank leases; "OK LEASE"
//   WRITE <request> <timeout_ms> <R,R..>          the ranks post a WRITE of the scenario's plan to
//                                                 the D rank (connected either way), wait, print
//                                                 "WRITTEN <rank> <status> <bytes_done> <ms>"; "OK WRITE"
//   CONNECT <host:port>                           every rank connects to it; "OK CONNECT"
//   PEERINFO <engine> <rank>                      "PEERINFO <my rank> <connected> <bytes_read>
//                                                 <bytes_written> <done> <failed> <ops_failed>
//                                                 <notes_sent> <notes_received>" per rank
//   PING -> "PONG"; QUIT -> "BYE" and a clean exit (the agents are freed first).
// A failed command prints "ERR <command> <status> <message>". Exit status 0 after QUIT.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "scenario.hpp"

using namespace e2e;

namespace {

std::mutex out_mu;

void say(const std::string& line) {
  std::lock_guard<std::mutex> g(out_mu);
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

const char* kind_name(int32_t k) {
  switch (k) {
    case PDKV_NOTIFY_READ_DONE: return "READ_DONE";
    case PDKV_NOTIFY_WRITE_DONE: return "WRITE_DONE";
    case PDKV_NOTIFY_REQUEST_COMPLETE: return "REQUEST_COMPLETE";
    case PDKV_NOTIFY_LEASE_EXPIRED: return "LEASE_EXPIRED";
    case PDKV_NOTIFY_PEER_CONNECTED: return "PEER_CONNECTED";
    case PDKV_NOTIFY_PEER_LOST: return "PEER_LOST";
    default: return "UNKNOWN";
  }
}

std::string dash(const char* s) { return (s == nullptr || *s == 0) ? "-" : s; }

struct Options {
  std::string scenario;
  std::string ranks = "all";
  std::string misbehave;
  AgentSettings agent;
  int64_t skip_register = -1;
};

std::vector<uint32_t> parse_ranks(const std::string& text, uint32_t tp) {
  std::vector<uint32_t> out;
  if (text == "all") {
    for (uint32_t r = 0; r < tp; ++r) out.push_back(r);
    return out;
  }
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const unsigned long r = std::stoul(item);
    if (r >= tp) throw std::invalid_argument("rank " + item + " is not below P TP " + std::to_string(tp));
    out.push_back(static_cast<uint32_t>(r));
  }
  return out;
}

int describe(const std::string& name) {
  const Scenario& s = scenario(name);
  std::printf("%s: %s\n", s.name.c_str(), s.description.c_str());
  for (const EngineSpec* e : {&s.p, &s.d}) {
    std::printf("  %s TP%u regions:", e->engine_id.c_str(), e->tp_size);
    for (uint64_t b : s.region_sizes(*e)) std::printf(" %llu", static_cast<unsigned long long>(b));
    std::printf("\n");
  }
  const auto d = s.metadata(s.d, s.d_rank, nullptr);
  std::vector<MetadataPtr> ps;
  std::vector<const pdkv_engine_metadata_t*> pp;
  for (uint32_t r = 0; r < s.p.tp_size; ++r) {
    ps.push_back(s.metadata(s.p, r, nullptr));
    pp.push_back(ps.back().get());
  }
  const auto plan = s.plan(d.get(), pp);
  const auto i = plan_info(plan.get());
  std::printf("  plan: bytes %llu (attention %llu, mamba %llu), notifications_per_p_rank %u, empty %u\n",
              static_cast<unsigned long long>(i.bytes), static_cast<unsigned long long>(i.attention_bytes),
              static_cast<unsigned long long>(i.mamba_bytes), i.notifications_per_p_rank, i.empty);
  std::printf("  read ranks:");
  for (uint32_t r : read_ranks(plan.get())) std::printf(" %u(%zu reads)", r, rank_reads(plan.get(), r).size());
  std::printf("\n  notify ranks:");
  for (uint32_t r : notify_ranks(plan.get())) std::printf(" %u", r);
  std::printf("\n");
  return 0;
}

// --misbehave: a listener that never speaks pdkv.
int misbehave(const Options& o) {
  const int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  const std::string host = o.agent.listen.substr(0, o.agent.listen.find(':'));
  if (inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1 || bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      listen(lfd, 16) != 0) {
    std::perror("pdkv_test_peer: listen");
    return 1;
  }
  socklen_t len = sizeof a;
  getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
  say("PORT 0 " + std::to_string(ntohs(a.sin_port)));
  say("READY");
  const bool garbage = o.misbehave == "garbage";
  std::atomic<bool> quit{false};
  std::thread server([&] {
    std::vector<int> conns;
    while (!quit) {
      std::vector<pollfd> fds{{lfd, POLLIN, 0}};
      for (int c : conns) fds.push_back({c, POLLIN, 0});
      if (poll(fds.data(), fds.size(), 20) <= 0) continue;
      if (fds[0].revents & POLLIN) {
        const int c = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
        if (c >= 0) {
          conns.push_back(c);
          if (garbage) {
            // Bytes that are no pdkv frame: a wrong magic, absurd lengths, then noise.
            std::vector<uint8_t> junk(4096);
            uint64_t x = 0x1234567;
            for (auto& b : junk) {
              x = x * 6364136223846793005ull + 1442695040888963407ull;
              b = static_cast<uint8_t>(x >> 56);
            }
            junk[0] = 0xFF, junk[1] = 0xFF, junk[2] = 0xFF, junk[3] = 0xFF;
            (void)!send(c, junk.data(), junk.size(), MSG_NOSIGNAL);
          }
        }
      }
      for (size_t i = 1; i < fds.size(); ++i) {
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
          char buf[4096];
          (void)!recv(fds[i].fd, buf, sizeof buf, MSG_DONTWAIT);  // read and ignore
        }
      }
    }
    for (int c : conns) close(c);
  });
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line == "QUIT") break;
    if (line == "PING") say("PONG");
  }
  quit = true;
  server.join();
  close(lfd);
  say("BYE");
  return 0;
}

class Peer {
 public:
  explicit Peer(const Options& o) : o_(o), s_(scenario(o.scenario)) {
    for (uint32_t r : parse_ranks(o.ranks, s_.p.tp_size)) {
      AgentSettings st = o.agent;
      ranks_.push_back(std::make_unique<RankAgent>(s_, true, r, st));
    }
    if (o.skip_register >= 0) {
      // Deregister one region on every rank: peers see it advertised but not reachable.
      for (auto& ra : ranks_) {
        check("deregister", [&](pdkv_error_t** e) {
          return pdkv_memory_deregister(ra->registration(static_cast<uint32_t>(o.skip_register)), e);
        });
      }
    }
  }

  void run() {
    for (auto& ra : ranks_) say("PORT " + std::to_string(ra->memory().rank()) + " " + std::to_string(ra->port()));
    say("READY");
    std::thread notes([this] { notes_loop(); });
    std::string line;
    while (std::getline(std::cin, line)) {
      std::istringstream in(line);
      std::string cmd;
      in >> cmd;
      if (cmd.empty()) continue;
      if (cmd == "QUIT") break;
      try {
        if (cmd == "PING") {
          say("PONG");
        } else if (cmd == "LEASE") {
          std::string req;
          uint32_t expected = 0;
          uint64_t ttl = 0;
          in >> req >> expected >> ttl;
          for (auto& ra : ranks_) {
            check("lease", [&](pdkv_error_t** e) { return pdkv_agent_lease(ra->agent(), req.c_str(), expected, ttl, e); });
          }
          say("OK LEASE");
        } else if (cmd == "CONNECT") {
          std::string addr;
          in >> addr;
          for (auto& ra : ranks_) {
            pdkv_connect_options_t co{};
            co.struct_size = sizeof co;
            co.address = addr.c_str();
            pdkv_peer_t* peer = nullptr;
            check("connect", [&](pdkv_error_t** e) { return pdkv_agent_connect(ra->agent(), &co, &peer, e); });
            pdkv_peer_free(peer);
          }
          say("OK CONNECT");
        } else if (cmd == "WRITE") {
          std::string req, which;
          uint64_t timeout = 0;
          in >> req >> timeout >> which;
          write(req, timeout, which);
          say("OK WRITE");
        } else if (cmd == "PEERINFO") {
          std::string engine;
          uint32_t rank = 0;
          in >> engine >> rank;
          peer_info(engine, rank);
          say("OK PEERINFO");
        } else {
          say("ERR " + cmd + " INVALID_ARGUMENT unknown command");
        }
      } catch (const CallError& e) {
        say("ERR " + cmd + " " + pdkv_status_name(e.status) + " " + e.what());
      } catch (const std::exception& e) {
        say("ERR " + cmd + " INTERNAL " + e.what());
      }
    }
    stop_ = true;
    notes.join();
    ranks_.clear();  // agents freed: peers see Bye
    say("BYE");
  }

 private:
  RankAgent* rank_agent(uint32_t r) {
    for (auto& ra : ranks_) {
      if (ra->memory().rank() == r) return ra.get();
    }
    throw std::invalid_argument("rank " + std::to_string(r) + " is not served here");
  }

  void write(const std::string& req, uint64_t timeout, const std::string& which) {
    // The plan as D compiles it: D's metadata from the peer, every P rank's own.
    std::vector<const pdkv_engine_metadata_t*> p_mds(s_.p.tp_size, nullptr);
    for (uint32_t r = 0; r < s_.p.tp_size; ++r) {
      for (auto& ra : ranks_) {
        if (ra->memory().rank() == r) p_mds[r] = ra->memory().metadata();
      }
      if (p_mds[r] == nullptr) throw std::invalid_argument("WRITE needs every P rank served here");
    }
    struct Posted {
      uint32_t rank;
      pdkv_transfer_t* t = nullptr;
    };
    std::vector<Posted> posted;
    std::vector<PlanPtr> plans;
    for (uint32_t r : parse_ranks(which, s_.p.tp_size)) {
      RankAgent* ra = rank_agent(r);
      pdkv_peer_t* peer = nullptr;
      check("find D", [&](pdkv_error_t** e) {
        return pdkv_agent_find_peer(ra->agent(), s_.d.engine_id.c_str(), s_.d_rank, &peer, e);
      });
      pdkv_engine_metadata_t* d_raw = nullptr;
      const pdkv_status_t st = pdkv_peer_metadata(peer, &d_raw, nullptr);
      pdkv_peer_free(peer);
      if (st != PDKV_OK) throw CallError(st, "peer metadata");
      const MetadataPtr d_md(d_raw);
      plans.push_back(s_.plan(d_md.get(), p_mds));
      pdkv_transfer_params_t tp{};
      tp.struct_size = sizeof tp;
      tp.field_mask = PDKV_TRANSFER_FIELD_TIMEOUT;
      tp.op = PDKV_TRANSFER_WRITE;
      tp.plan = plans.back().get();
      tp.peer_engine_id = s_.d.engine_id.c_str();
      tp.request_id = req.c_str();
      tp.timeout_ms = timeout;
      Posted p{r};
      pdkv_error_t* err = nullptr;
      const pdkv_status_t pst = pdkv_agent_post(ra->agent(), &tp, &p.t, &err);
      if (pst != PDKV_OK) {
        say("WRITTEN " + std::to_string(r) + " " + pdkv_status_name(pst) + " 0 0 " + pdkv_error_message(err));
        pdkv_error_free(err);
        continue;
      }
      posted.push_back(p);
    }
    for (auto& p : posted) {
      uint8_t finished = 0;
      pdkv_error_t* err = nullptr;
      const pdkv_status_t st = pdkv_transfer_wait(p.t, UINT64_MAX, &finished, &err);
      pdkv_transfer_info_t info{};
      info.struct_size = sizeof info;
      pdkv_transfer_get_info(p.t, &info, nullptr);
      say("WRITTEN " + std::to_string(p.rank) + " " + pdkv_status_name(st) + " " + std::to_string(info.bytes_done) +
          " " + std::to_string(info.elapsed_us / 1000) + (err ? std::string(" ") + pdkv_error_message(err) : ""));
      pdkv_error_free(err);
      pdkv_transfer_free(p.t);
    }
  }

  void peer_info(const std::string& engine, uint32_t rank) {
    for (auto& ra : ranks_) {
      pdkv_peer_t* peer = nullptr;
      check("find peer", [&](pdkv_error_t** e) { return pdkv_agent_find_peer(ra->agent(), engine.c_str(), rank, &peer, e); });
      pdkv_peer_info_t i{};
      i.struct_size = sizeof i;
      const pdkv_status_t st = pdkv_peer_get_info(peer, &i, nullptr);
      if (st == PDKV_OK) {
        std::ostringstream os;
        os << "PEERINFO " << ra->memory().rank() << " " << int(i.connected) << " " << i.bytes_read << " "
           << i.bytes_written << " " << i.transfers_done << " " << i.transfers_failed << " " << i.operations_failed
           << " " << i.notifications_sent << " " << i.notifications_received;
        say(os.str());
      }
      pdkv_peer_free(peer);
      if (st != PDKV_OK) throw CallError(st, "peer info");
    }
  }

  void notes_loop() {
    while (!stop_) {
      for (auto& ra : ranks_) {
        pdkv_notification_list_t* list = nullptr;
        if (pdkv_agent_poll_notifications(ra->agent(), &list, nullptr) != PDKV_OK) continue;
        const pdkv_notification_t* items = nullptr;
        size_t n = 0;
        if (pdkv_notification_list_items(list, &items, &n, nullptr) != PDKV_OK) n = 0;
        for (size_t i = 0; i < n; ++i) {
          const pdkv_notification_t& x = items[i];
          std::ostringstream os;
          os << "NOTE " << ra->memory().rank() << " " << kind_name(x.kind) << " "
             << pdkv_status_name(static_cast<pdkv_status_t>(x.status)) << " " << dash(x.request_id) << " "
             << dash(x.engine_id) << " " << x.tp_rank << " " << x.count << " " << x.expected << " " << x.bytes;
          say(os.str());
        }
        pdkv_notification_list_free(list);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

  Options o_;
  const Scenario& s_;
  std::vector<std::unique_ptr<RankAgent>> ranks_;
  std::atomic<bool> stop_{false};
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      const std::string v = argv[++i];
      if (a == "--describe") return describe(v);
      if (a == "--scenario") o.scenario = v;
      else if (a == "--ranks") o.ranks = v;
      else if (a == "--misbehave") o.misbehave = v;
      else if (a == "--listen") o.agent.listen = v + ":0";
      else if (a == "--key") o.agent.key.assign(v.begin(), v.end());
      else if (a == "--hb-interval") o.agent.heartbeat_interval_ms = static_cast<uint32_t>(std::stoul(v));
      else if (a == "--hb-timeout") o.agent.heartbeat_timeout_ms = static_cast<uint32_t>(std::stoul(v));
      else if (a == "--timeout") o.agent.default_timeout_ms = std::stoull(v);
      else if (a == "--max-outstanding") o.agent.max_outstanding = static_cast<uint32_t>(std::stoul(v));
      else if (a == "--skip-register") o.skip_register = std::stoll(v);
      else if (a == "--transport") {
        if (v == "auto") o.agent.transport = PDKV_TRANSPORT_AUTO;
        else if (v == "shm") o.agent.transport = PDKV_TRANSPORT_SHM;
        else if (v == "tcp") o.agent.transport = PDKV_TRANSPORT_TCP;
        else throw std::invalid_argument("unknown transport " + v);
      } else {
        throw std::invalid_argument("unknown argument " + a);
      }
    }
    if (!o.misbehave.empty()) {
      if (o.misbehave != "silent" && o.misbehave != "garbage") throw std::invalid_argument("unknown --misbehave " + o.misbehave);
      return misbehave(o);
    }
    if (o.scenario.empty()) throw std::invalid_argument("--scenario is required");
    Peer peer(o);
    peer.run();
    return 0;
  } catch (const std::exception& e) {
    say(std::string("FATAL ") + e.what());
    return 1;
  }
}
