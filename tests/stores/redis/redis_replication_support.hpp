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

/// Waits until `ready()` holds, up to `limit`; whether it did.
template <class Ready>
bool eventually(Ready ready, std::chrono::milliseconds limit = std::chrono::seconds{30}) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds{20});
  }
  return ready();
}

/// A Sentinel (redis-server CONFIG --sentinel) watching the primary named `master` at
/// `primary_port`, quorum 2, a primary taken as down after `down_after` without an answer.
class private_sentinel {
 public:
  private_sentinel(const std::string& master, int primary_port,
                   std::chrono::milliseconds down_after = std::chrono::milliseconds{1000}) {
    for (int attempt = 1;; ++attempt) {
      port_ = free_port();
      {
        std::ofstream config(directory_.file("sentinel.conf"));
        config << "port " << port_ << "\nbind 127.0.0.1\ndir " << directory_.path().string()
               << "\nlogfile " << directory_.file("sentinel.log") << "\nsentinel monitor " << master
               << " 127.0.0.1 " << primary_port << " 2\nsentinel down-after-milliseconds " << master
               << " " << down_after.count() << "\nsentinel failover-timeout " << master
               << " 4000\nsentinel parallel-syncs " << master << " 2\n";
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

/// A primary, `replica_count` replicas of it and `sentinel_count` Sentinels watching them
/// (named `master`). `extra` is added to every server's configuration.
class replicated_redis {
 public:
  static constexpr const char* master = "idem";

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
    REQUIRE(eventually([&] { return connected_replicas(primary_port) == replica_count; }));
    // In sync is not yet acknowledging: a replica acknowledges what it applied when the
    // primary asks (WAIT) or once a second. A write every replica has acknowledged, so a test's
    // first WAIT does not race a replica's first acknowledgement on a loaded machine.
    if (replica_count > 0) {
      const auto primary = nodes_.front()->connect();
      REQUIRE(eventually([&] {
        (void)command(primary.get(), {"SET", "idem-test:replicas-ready", "1"});
        const reply_ptr acknowledged =
            command(primary.get(), {"WAIT", std::to_string(replica_count), "200"});
        return acknowledged->type == REDIS_REPLY_INTEGER && acknowledged->integer == replica_count;
      }));
    }
    for (int i = 0; i < sentinel_count; ++i)
      sentinels_.push_back(std::make_unique<private_sentinel>(master, primary_port));
    // Every Sentinel has found every replica (through the primary's INFO) and the other
    // Sentinels (through hello messages): a failover can be agreed and can pick a replica.
    for (const auto& sentinel : sentinels_) {
      REQUIRE(eventually([&] {
        return sentinel_count_of(*sentinel, "num-slaves") == replica_count &&
               sentinel_count_of(*sentinel, "num-other-sentinels") == sentinel_count - 1;
      }));
    }
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

  /// Restarts node i (killed) as a replica of node `primary` from its first moment, so it never
  /// answers as the primary it was; waits until every Sentinel names `primary` and counts every
  /// other node as its replica, and the primary has them all in sync.
  void restart_as_replica(std::size_t i, std::size_t primary) {
    std::vector<std::string> config = extra_;
    config.insert(config.end(),
                  {"--replicaof", "127.0.0.1", std::to_string(nodes_.at(primary)->port())});
    nodes_.at(i)->start(config);
    const int replicas = static_cast<int>(nodes_.size()) - 1;
    REQUIRE(eventually([&] { return connected_replicas(nodes_[primary]->port()) == replicas; }));
    // A majority of the Sentinels names it, with no failover under way: one Sentinel may learn
    // of a failover late (the store checks ROLE, so a stale answer only costs it a connection).
    const bool settled = eventually([&] {
      int agree = 0;
      for (const auto& sentinel : sentinels_) {
        if (sentinel->primary(master) == nodes_[primary]->port() &&
            sentinel_count_of(*sentinel, "num-slaves") == replicas &&
            sentinel_flags(*sentinel) == "master") {
          ++agree;
        }
      }
      return sentinels_.empty() || agree * 2 > static_cast<int>(sentinels_.size());
    });
    for (const auto& sentinel : sentinels_) {
      UNSCOPED_INFO("Sentinel " << sentinel->address() << " names port "
                                << sentinel->primary(master).value_or(0) << ", flags "
                                << sentinel_flags(*sentinel) << ", replicas "
                                << sentinel_count_of(*sentinel, "num-slaves"));
    }
    INFO("the primary is on port " << nodes_[primary]->port());
    REQUIRE(settled);
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
    // A replica that was between two attempts to connect when its password changed may get
    // through once more: dropped again.
    REQUIRE(eventually([&] {
      const bool cut =
          std::none_of(replicas.begin(), replicas.end(), [&](std::size_t i) { return link_up(i); });
      if (!cut) (void)on_node(primary, {"CLIENT", "KILL", "TYPE", "replica"});
      return cut;
    }));
  }
  void heal_link(std::size_t i) {
    REQUIRE(on_node(i, {"CONFIG", "SET", "masterauth", ""}) == REDIS_REPLY_STATUS);
  }

  /// `words` sent to node i on a fresh connection; the reply's type. Sent again (up to 50
  /// times, 20 ms apart) when the connection is closed under it: the Sentinels close every
  /// client of a node they reconfigure (CLIENT KILL TYPE normal).
  int on_node(std::size_t i, const std::vector<std::string>& words) {
    for (int attempt = 1;; ++attempt) {
      try {
        const auto connection = nodes_.at(i)->connect();
        return command(connection.get(), words)->type;
      } catch (const std::runtime_error&) {
        if (attempt == 50) throw;
        std::this_thread::sleep_for(std::chrono::milliseconds{20});
      }
    }
  }

  /// Whether node i, a replica, has its link to its primary up (INFO: master_link_status); true
  /// when it cannot tell.
  bool link_up(std::size_t i) const {
    try {
      const auto replica = nodes_.at(i)->connect();
      const reply_ptr info = command(replica.get(), {"INFO", "replication"});
      return std::string(info->str, info->len).find("master_link_status:up") != std::string::npos;
    } catch (const std::exception&) {
      return true;  // not known (a Sentinel closed the connection): not taken as cut
    }
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
    try {
      const context_ptr context = connect_raw("127.0.0.1", port);
      const reply_ptr info = command(context.get(), {"INFO", "replication"});
      const std::string text(info->str, info->len);
      int online = 0;
      for (std::size_t at = text.find("state=online"); at != std::string::npos;
           at = text.find("state=online", at + 1)) {
        ++online;
      }
      return online;
    } catch (const std::exception&) {
      return -1;
    }
  }

 private:
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
