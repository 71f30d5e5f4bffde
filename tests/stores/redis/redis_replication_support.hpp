// Replicated Redis for the tests that kill, pause and promote its nodes: a primary and its
// replicas (private_redis processes started with --replicaof) and, when asked, Sentinels
// (redis-server --sentinel) watching them, every one on a free loopback port and a temporary
// directory of its own, killed however the test ends (and by the kernel if the test process dies
// first). Used by tests/stores/redis (WAIT, Sentinel discovery) and tests/failover (the history
// checker's nemesis).
#pragma once

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "redis_test_support.hpp"

namespace idem_redis_test {

/// ROLE's first word: "master", "slave" or "sentinel"; empty when the server does not answer.
inline std::string role_of(int port) {
  try {
    const context_ptr context = connect_raw("127.0.0.1", port);
    const timeval limit{1, 0};
    redisSetTimeout(context.get(), limit);
    const reply_ptr reply = command(context.get(), {"ROLE"});
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements == 0) return {};
    return std::string(reply->element[0]->str, reply->element[0]->len);
  } catch (const std::exception&) {
    return {};
  }
}

/// Waits until `ready()` holds, up to `limit`; whether it did. For the stores' tests' short waits;
/// the failover harness's waits are bounded by what they wait for (`until` below).
template <class Ready>
bool eventually(Ready ready, std::chrono::milliseconds limit = std::chrono::seconds{30}) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds{20});
  }
  return ready();
}

/// How long a wait may last, from the timeouts of what it waits for rather than from a guess at
/// the machine's speed: `quiet`, how long the awaited servers may show no change of state (a
/// replica retries its link once a second, a Sentinel acts within its down-after and failover
/// timeouts, and sits out 30 s of TILT when its own timer ran late); `ceiling`, the whole wait,
/// however much the state keeps changing.
struct patience {
  std::chrono::milliseconds quiet;
  std::chrono::milliseconds ceiling;
};

/// What a wait ended on: whether `ready()` held, how long it took, and the state it saw last
/// (for the message when it gave up).
struct waited {
  bool held = false;
  std::chrono::milliseconds took{0};
  std::string seen;
};

/// Waits until `ready()` holds, as long as the servers make progress: `state()` describes what
/// they show (roles, links, what the Sentinels name; no counters that move by themselves), and
/// each change of it starts `bounds.quiet` again, up to `bounds.ceiling` in all. On a loaded
/// machine a failover or a resynchronisation takes longer, but goes on changing state; a wait
/// that sees nothing change for the servers' own timeouts has nothing more to wait for.
template <class Ready, class State>
waited until(Ready ready, State state, patience bounds) {
  const auto start = std::chrono::steady_clock::now();
  const auto ceiling = start + bounds.ceiling;
  auto quiet_until = start + bounds.quiet;
  // The state is read every 100 ms at most: reading it costs the servers a connection each.
  auto described = start;
  waited result;
  result.seen = state();
  for (;;) {
    result.held = ready();
    const auto now = std::chrono::steady_clock::now();
    result.took = std::chrono::duration_cast<std::chrono::milliseconds>(now - start);
    if (result.held || now >= quiet_until || now >= ceiling) break;
    std::this_thread::sleep_for(std::chrono::milliseconds{20});
    if (std::chrono::steady_clock::now() - described < std::chrono::milliseconds{100}) continue;
    described = std::chrono::steady_clock::now();
    std::string seen = state();
    if (seen != result.seen) {
      result.seen = std::move(seen);
      quiet_until = described + bounds.quiet;
    }
  }
  result.seen = state();
  return result;
}

/// A Sentinel (redis-server CONFIG --sentinel) watching the primary named `master` at
/// `primary_port`, quorum 2, a primary taken as down after `down_after` without an answer, a
/// failover given up (and tried again after twice as long) after `failover_timeout`.
class private_sentinel {
 public:
  private_sentinel(const std::string& master, int primary_port,
                   std::chrono::milliseconds down_after = std::chrono::milliseconds{1000},
                   std::chrono::milliseconds failover_timeout = std::chrono::milliseconds{4000}) {
    for (int attempt = 1;; ++attempt) {
      port_ = free_port();
      {
        std::ofstream config(directory_.file("sentinel.conf"));
        config << "port " << port_ << "\nbind 127.0.0.1\ndir " << directory_.path().string()
               << "\nlogfile " << directory_.file("sentinel.log") << "\nsentinel monitor " << master
               << " 127.0.0.1 " << primary_port << " 2\nsentinel down-after-milliseconds " << master
               << " " << down_after.count() << "\nsentinel failover-timeout " << master << " "
               << failover_timeout.count() << "\nsentinel parallel-syncs " << master << " 2\n";
      }
      if (launch()) return;
      if (attempt == 5) FAIL("redis-server --sentinel exited at start five times");
    }
  }
  private_sentinel(const private_sentinel&) = delete;
  private_sentinel& operator=(const private_sentinel&) = delete;
  ~private_sentinel() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }

  int port() const noexcept { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  /// The last `lines` lines of its log: what it saw and did (+sdown, +tilt, +switch-master...).
  std::string log_tail(std::size_t lines) const {
    std::ifstream file(directory_.file("sentinel.log"));
    std::vector<std::string> kept;
    for (std::string line; std::getline(file, line);) {
      kept.push_back(line);
      if (kept.size() > lines) kept.erase(kept.begin());
    }
    std::string out;
    for (const std::string& line : kept)
      out += line + "\n";
    return out;
  }

  /// The port of the primary this Sentinel names for `master` now; nothing if it names none.
  std::optional<int> primary(const std::string& master) const {
    try {
      const context_ptr context = connect_raw("127.0.0.1", port_);
      const reply_ptr reply =
          command(context.get(), {"SENTINEL", "get-master-addr-by-name", master});
      if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2) return std::nullopt;
      return std::atoi(reply->element[1]->str);
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }

 private:
  bool launch() {
    std::vector<std::string> words = {redis_server_binary(), directory_.file("sentinel.conf"),
                                      "--sentinel"};
    std::vector<char*> argv;
    for (std::string& word : words)
      argv.push_back(word.data());
    argv.push_back(nullptr);
    const pid_t parent = ::getpid();
    const pid_t child = ::fork();
    if (child < 0) throw std::runtime_error("fork failed");
    if (child == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(1);
      const int null = ::open("/dev/null", O_RDWR);
      ::dup2(null, 0);
      ::dup2(null, 1);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    pid_ = child;
    return eventually(
               [&] {
                 int status = 0;
                 if (::waitpid(pid_, &status, WNOHANG) == pid_) {
                   pid_ = -1;
                   return true;
                 }
                 return role_of(port_) == "sentinel";
               },
               std::chrono::seconds{30}) &&
           pid_ > 0;
  }

  idem::testing::temporary_directory directory_{"idem-sentinel"};
  int port_ = 0;
  pid_t pid_ = -1;
};

/// One field of an INFO answer ("name:value" lines); empty when absent.
inline std::string info_field(const std::string& info, const std::string& name) {
  const std::string prefix = name + ":";
  for (std::size_t at = 0; at < info.size();) {
    std::size_t end = info.find('\n', at);
    if (end == std::string::npos) end = info.size();
    std::string line = info.substr(at, end - at);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.rfind(prefix, 0) == 0) return line.substr(prefix.size());
    at = end + 1;
  }
  return {};
}

/// A primary, `replica_count` replicas of it and `sentinel_count` Sentinels watching them
/// (named `master`). `extra` is added to every server's configuration.
///
/// Every wait here is bounded by the servers' own timeouts (patience), goes on while their state
/// changes, and when it gives up says what it saw last (describe()).
class replicated_redis {
 public:
  static constexpr const char* master = "idem";

  // The servers' own timeouts, from which the waits take their patience.
  /// A replica whose link is down tries it again once a second (replicationCron).
  static constexpr std::chrono::milliseconds reconnect_period{1000};
  /// The Sentinels' down-after-milliseconds and failover-timeout (a failed failover is tried
  /// again after twice this).
  static constexpr std::chrono::milliseconds down_after{1000};
  static constexpr std::chrono::milliseconds failover_timeout{4000};
  /// A Sentinel whose timer ran more than 2 s late (a starved machine) acts on nothing for 30 s
  /// (TILT mode, SENTINEL_TILT_PERIOD).
  static constexpr std::chrono::milliseconds tilt_period{30000};

  /// A wait on the replication links alone: each retry of a link, and each step of a full
  /// synchronisation (wait_bgsave, send_bulk, online), is a change of state within seconds.
  static patience links_patience() { return {10 * reconnect_period, std::chrono::seconds{120}}; }
  /// A wait on what the Sentinels do: one in TILT sits out tilt_period, then takes down_after
  /// to see the primary down, and a failed election is tried again after twice failover_timeout.
  patience sentinels_patience() const {
    if (sentinels_.empty()) return links_patience();
    return {tilt_period + down_after + 2 * failover_timeout + 10 * reconnect_period,
            std::chrono::seconds{240}};
  }

  explicit replicated_redis(int replica_count, int sentinel_count = 0,
                            std::vector<std::string> extra = {})
      : extra_(extra) {
    // Replicas answer for their data set as soon as they sync: no stale reads hidden by a
    // "loading" answer; the primary keeps no minimum of replicas (writes never refused by it).
    // A replica's first synchronisation starts at once (the default waits 5 s for more
    // replicas to share one transfer).
    extra.insert(extra.end(), {"--repl-diskless-sync-delay", "0"});
    extra_ = extra;
    nodes_.push_back(std::make_unique<private_redis>(extra));
    const int primary_port = nodes_.front()->port();
    for (int i = 0; i < replica_count; ++i) {
      std::vector<std::string> config = extra;
      config.insert(config.end(), {"--replicaof", "127.0.0.1", std::to_string(primary_port)});
      nodes_.push_back(std::make_unique<private_redis>(config));
    }
    require(
        "every replica in sync", [&] { return connected_replicas(primary_port) == replica_count; },
        links_patience());
    // In sync is not yet acknowledging: a replica acknowledges what it applied when the
    // primary asks (WAIT) or once a second. A write every replica has acknowledged, so a test's
    // first WAIT does not race a replica's first acknowledgement on a loaded machine.
    if (replica_count > 0) {
      const auto primary = nodes_.front()->connect();
      require(
          "every replica acknowledging",
          [&] {
            (void)command(primary.get(), {"SET", "idem-test:replicas-ready", "1"});
            const reply_ptr acknowledged =
                command(primary.get(), {"WAIT", std::to_string(replica_count), "200"});
            return acknowledged->type == REDIS_REPLY_INTEGER &&
                   acknowledged->integer == replica_count;
          },
          links_patience());
    }
    for (int i = 0; i < sentinel_count; ++i) {
      sentinels_.push_back(
          std::make_unique<private_sentinel>(master, primary_port, down_after, failover_timeout));
    }
    // Every Sentinel has found every replica (through the primary's INFO) and the other
    // Sentinels (through hello messages): a failover can be agreed and can pick a replica.
    require(
        "every Sentinel knowing every replica and every other Sentinel",
        [&] {
          return std::all_of(sentinels_.begin(), sentinels_.end(), [&](const auto& sentinel) {
            return sentinel_count_of(*sentinel, "num-slaves") == replica_count &&
                   sentinel_count_of(*sentinel, "num-other-sentinels") == sentinel_count - 1;
          });
        },
        sentinels_patience());
  }

  /// Node i: 0 is the first primary, then the replicas, in the order they started.
  private_redis& node(std::size_t i) { return *nodes_.at(i); }
  std::size_t size() const noexcept { return nodes_.size(); }

  /// The node whose ROLE says master now (the first when several do: after a promotion,
  /// before the old one was demoted); nothing when none answers.
  std::optional<std::size_t> primary() const {
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      if (nodes_[i]->running() && role_of(nodes_[i]->port()) == "master") return i;
    }
    return std::nullopt;
  }

  std::vector<std::string> sentinel_addresses() const {
    std::vector<std::string> out;
    for (const auto& sentinel : sentinels_)
      out.push_back(sentinel->address());
    return out;
  }
  private_sentinel& sentinel(std::size_t i) { return *sentinels_.at(i); }

  /// A store's options through the Sentinels (when there are any) or on node `at`.
  idem::redis_store::options options(std::size_t at = 0) const {
    idem::redis_store::options options = nodes_.at(at)->options();
    if (!sentinels_.empty()) {
      options.sentinels = sentinel_addresses();
      options.sentinel_master = master;
    }
    options.connect_timeout = std::chrono::milliseconds{500};
    options.command_timeout = std::chrono::milliseconds{2000};
    return options;
  }

  /// What the nodes and the Sentinels show now, a line each: roles, links and synchronisations,
  /// what each Sentinel names. The progress the waits watch, and what they report when they give
  /// up; no offsets or ages, which move by themselves.
  std::string describe() const {
    std::ostringstream out;
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      out << "node " << i << " (port " << nodes_[i]->port() << "): ";
      if (!nodes_[i]->running()) {
        out << "killed\n";
        continue;
      }
      const std::optional<std::string> info = replication_info(nodes_[i]->port());
      if (!info) {
        out << "no answer\n";
        continue;
      }
      const std::string role = info_field(*info, "role");
      if (role == "slave") {
        out << "replica of " << info_field(*info, "master_port") << ", link "
            << info_field(*info, "master_link_status")
            << (info_field(*info, "master_sync_in_progress") == "1" ? ", syncing" : "");
      } else {
        out << role << ", replicas:";
        for (int r = 0;; ++r) {
          const std::string replica = info_field(*info, "slave" + std::to_string(r));
          if (replica.empty()) break;
          out << " " << replica_field(replica, "port") << " " << replica_field(replica, "state");
        }
      }
      out << "\n";
    }
    for (const auto& sentinel : sentinels_) {
      out << "Sentinel " << sentinel->port() << ": names " << sentinel->primary(master).value_or(0)
          << ", flags " << sentinel_flags(*sentinel) << ", "
          << sentinel_count_of(*sentinel, "num-slaves") << " replicas, "
          << sentinel_count_of(*sentinel, "num-other-sentinels") << " other Sentinels\n";
    }
    return out.str();
  }

  /// Waits until `ready()` holds while the servers' state (describe()) keeps changing, as
  /// `bounds` allows; whether it did, how long it took and what it saw last.
  template <class Ready>
  waited wait(Ready ready, patience bounds) const {
    return until(
        ready, [this] { return describe(); }, bounds);
  }

  /// wait(), then a failed test (saying what it waited for and what it saw) if it gave up.
  template <class Ready>
  void require(const char* what, Ready ready, patience bounds) const {
    const waited result = wait(ready, bounds);
    INFO("waited " << result.took.count() << " ms for " << what << "; the servers:\n"
                   << result.seen << (result.held ? std::string() : sentinel_logs()));
    REQUIRE(result.held);
  }

  /// The end of every Sentinel's log, for a wait that gave up.
  std::string sentinel_logs() const {
    std::string out;
    for (const auto& sentinel : sentinels_)
      out += "Sentinel " + std::to_string(sentinel->port()) + "'s log:\n" + sentinel->log_tail(25);
    return out;
  }

  /// Waits until the servers have settled on one primary: a majority of the Sentinels name it,
  /// with every other node as its replica and no failover under way (one Sentinel may learn of
  /// a failover late: the store checks ROLE, so a stale answer only costs it a connection), and
  /// it says it is the primary, with every other running node in sync; its node. Without
  /// Sentinels, the node whose ROLE says master with the others in sync. It need not be the
  /// node a test promoted or made the primary: on a loaded machine the Sentinels may fail over
  /// again on their own, and a wait for the test's own choice would wait for a state that never
  /// comes. (Seen: right after a failover each Sentinel resets its link to the new primary and
  /// counts down-after from then; two that did not get a PONG through within the 1 s agreed it
  /// was down and promoted another replica.)
  std::size_t settled() const {
    const int replicas =
        static_cast<int>(std::count_if(nodes_.begin(), nodes_.end(),
                                       [](const auto& n) { return n->running(); })) -
        1;
    std::optional<std::size_t> found;
    require(
        "the servers to settle on one primary",
        [&] {
          found.reset();
          std::optional<int> port;
          if (sentinels_.empty()) {
            if (const auto i = primary()) port = nodes_[*i]->port();
          } else {
            port = majority_primary();
            int agree = 0;
            for (const auto& sentinel : sentinels_) {
              if (port && sentinel->primary(master) == *port &&
                  sentinel_count_of(*sentinel, "num-slaves") ==
                      static_cast<int>(nodes_.size()) - 1 &&
                  sentinel_flags(*sentinel) == "master") {
                ++agree;
              }
            }
            if (agree * 2 <= static_cast<int>(sentinels_.size())) return false;
          }
          if (!port || role_of(*port) != "master" || connected_replicas(*port) != replicas) {
            return false;
          }
          for (std::size_t i = 0; i < nodes_.size(); ++i) {
            if (nodes_[i]->port() == *port) found = i;
          }
          return found.has_value();
        },
        sentinels_patience());
    return *found;
  }

  /// Restarts node i (killed) as a replica of node `primary` from its first moment, so it never
  /// answers as the primary it was; waits until the servers have settled (settled()) and
  /// returns their primary: `primary`, unless the Sentinels failed over again meanwhile.
  std::size_t restart_as_replica(std::size_t i, std::size_t primary) {
    std::vector<std::string> config = extra_;
    config.insert(config.end(),
                  {"--replicaof", "127.0.0.1", std::to_string(nodes_.at(primary)->port())});
    nodes_.at(i)->start(config);
    return settled();
  }

  /// The port a majority of the Sentinels names as the primary; nothing when no majority agrees.
  std::optional<int> majority_primary() const {
    std::vector<int> named;
    for (const auto& sentinel : sentinels_) {
      if (const auto port = sentinel->primary(master)) named.push_back(*port);
    }
    for (const int port : named) {
      if (std::count(named.begin(), named.end(), port) * 2 >
          static_cast<std::ptrdiff_t>(sentinels_.size())) {
        return port;
      }
    }
    return std::nullopt;
  }

  /// Cuts the replication links of `replicas` at once (a partition between them and their
  /// primary, node `primary`): each replica keeps its data and its role, and takes nothing more
  /// from the primary until heal_link. SIGSTOP cannot do this: what the primary sends a paused
  /// replica waits in its socket's buffer and is applied as soon as it resumes, even after the
  /// primary died. Here each replica is first made to authenticate with a password the primary
  /// does not have, so that every attempt to reconnect fails, and then the primary drops every
  /// replica in one command, so none of them is cut later than another (one acknowledging
  /// writes the others lack would make the Sentinels' choice of replica matter).
  void cut_links(std::size_t primary, const std::vector<std::size_t>& replicas) {
    for (const std::size_t i : replicas)
      REQUIRE(on_node(i, {"CONFIG", "SET", "masterauth", "idem-cut-link"}) == REDIS_REPLY_STATUS);
    (void)on_node(primary, {"CLIENT", "KILL", "TYPE", "replica"});
    // A replica that was past its AUTH when its password changed (mid-handshake: not yet a
    // replica that CLIENT KILL drops) gets through once more: dropped again, by the node it
    // names as its primary.
    int kills = 1;
    const waited cut = wait(
        [&] {
          bool down = true;
          for (const std::size_t i : replicas) {
            const std::optional<std::string> info = replication_info(nodes_.at(i)->port());
            if (!info) {
              down = false;  // not known (a Sentinel closed the connection): not taken as cut
              continue;
            }
            if (info_field(*info, "master_link_status") != "up") continue;
            down = false;
            const std::string from = info_field(*info, "master_port");
            (void)on_port(from.empty() ? nodes_.at(primary)->port() : std::atoi(from.c_str()),
                          {"CLIENT", "KILL", "TYPE", "replica"});
            ++kills;
          }
          return down;
        },
        links_patience());
    INFO("waited " << cut.took.count() << " ms for the links of " << replicas.size()
                   << " replicas of node " << primary << " to be down, " << kills
                   << " CLIENT KILL TYPE replica sent; the servers:\n"
                   << cut.seen << (cut.held ? std::string() : sentinel_logs()));
    REQUIRE(cut.held);
  }
  void heal_link(std::size_t i) {
    REQUIRE(on_node(i, {"CONFIG", "SET", "masterauth", ""}) == REDIS_REPLY_STATUS);
  }

  /// `words` sent to node i on a fresh connection; the reply's type. Sent again (up to 50
  /// times, 20 ms apart) when the connection is closed under it: the Sentinels close every
  /// client of a node they reconfigure (CLIENT KILL TYPE normal).
  int on_node(std::size_t i, const std::vector<std::string>& words) {
    return on_port(nodes_.at(i)->port(), words);
  }

  /// Whether node i, a replica, has its link to its primary up (INFO: master_link_status); true
  /// when it cannot tell.
  bool link_up(std::size_t i) const {
    const std::optional<std::string> info = replication_info(nodes_.at(i)->port());
    return !info || info_field(*info, "master_link_status") == "up";
  }

  /// REPLICAOF NO ONE on node i, then every other running node made its replica.
  void promote(std::size_t i) {
    REQUIRE(on_node(i, {"REPLICAOF", "NO", "ONE"}) == REDIS_REPLY_STATUS);
    for (std::size_t j = 0; j < nodes_.size(); ++j) {
      if (j == i || !nodes_[j]->running()) continue;
      (void)on_node(j, {"REPLICAOF", "127.0.0.1", std::to_string(nodes_[i]->port())});
    }
  }

  /// Replicas that the server on `port` counts as connected and in sync (INFO replication:
  /// state=online, past the first full synchronisation); -1 when it does not answer.
  static int connected_replicas(int port) {
    const std::optional<std::string> text = replication_info(port);
    if (!text) return -1;
    int online = 0;
    for (std::size_t at = text->find("state=online"); at != std::string::npos;
         at = text->find("state=online", at + 1)) {
      ++online;
    }
    return online;
  }

 private:
  // INFO replication of the server on `port`; nothing when it does not answer.
  static std::optional<std::string> replication_info(int port) {
    try {
      const context_ptr context = connect_raw("127.0.0.1", port);
      const reply_ptr info = command(context.get(), {"INFO", "replication"});
      if (info->type != REDIS_REPLY_STRING) return std::nullopt;
      return std::string(info->str, info->len);
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }

  // One field of a replica's line in its primary's INFO ("ip=...,port=...,state=...").
  static std::string replica_field(const std::string& line, const std::string& name) {
    const std::string prefix = name + "=";
    for (std::size_t at = 0; at < line.size();) {
      std::size_t end = line.find(',', at);
      if (end == std::string::npos) end = line.size();
      if (line.compare(at, prefix.size(), prefix) == 0)
        return line.substr(at + prefix.size(), end - at - prefix.size());
      at = end + 1;
    }
    return {};
  }

  static int on_port(int port, const std::vector<std::string>& words) {
    for (int attempt = 1;; ++attempt) {
      try {
        const context_ptr connection = connect_raw("127.0.0.1", port);
        return command(connection.get(), words)->type;
      } catch (const std::runtime_error&) {
        if (attempt == 50) throw;
        std::this_thread::sleep_for(std::chrono::milliseconds{20});
      }
    }
  }

  static int sentinel_count_of(const private_sentinel& sentinel, const std::string& field) {
    try {
      const context_ptr context = connect_raw("127.0.0.1", sentinel.port());
      const reply_ptr reply = command(context.get(), {"SENTINEL", "MASTER", master});
      for (std::size_t i = 0; i + 1 < reply->elements; i += 2) {
        if (std::string(reply->element[i]->str, reply->element[i]->len) == field) {
          return std::atoi(reply->element[i + 1]->str);
        }
      }
    } catch (const std::exception&) {
    }
    return -1;
  }

  // The Sentinel's flags for the primary: "master" alone once no failover is under way.
  static std::string sentinel_flags(const private_sentinel& sentinel) {
    try {
      const context_ptr context = connect_raw("127.0.0.1", sentinel.port());
      const reply_ptr reply = command(context.get(), {"SENTINEL", "MASTER", master});
      for (std::size_t i = 0; i + 1 < reply->elements; i += 2) {
        if (std::string(reply->element[i]->str, reply->element[i]->len) == "flags") {
          return std::string(reply->element[i + 1]->str, reply->element[i + 1]->len);
        }
      }
    } catch (const std::exception&) {
    }
    return {};
  }

  std::vector<std::string> extra_;
  std::vector<std::unique_ptr<private_redis>> nodes_;
  std::vector<std::unique_ptr<private_sentinel>> sentinels_;
};

}  // namespace idem_redis_test
