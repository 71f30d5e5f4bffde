// A Redis Cluster of the test's own: `primaries` primaries with `replicas_each` replicas each,
// private_redis processes started with --cluster-enabled on free loopback ports (the cluster
// bus on a free port of its own), joined by `redis-cli --cluster create`, and killed however
// the test ends. Used by the cluster store's tests (redis_cluster_test.cpp), its model test and
// its benchmark's peer setup.
#pragma once

#include <catch2/catch.hpp>

#include <hiredis/hiredis.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <idem/store/redis/cluster.hpp>
#include <idem/store/redis/detail/keys.hpp>

#include "redis_test_support.hpp"

namespace idem_redis_test {

class private_cluster {
 public:
  explicit private_cluster(std::size_t primaries = 3, std::size_t replicas_each = 1)
      : primaries_(primaries), replicas_each_(replicas_each) {
    const std::size_t count = primaries * (1 + replicas_each);
    for (std::size_t i = 0; i < count; ++i) {
      nodes_.push_back(std::make_unique<private_redis>(
          std::vector<std::string>{"--cluster-enabled", "yes", "--cluster-config-file",
                                   "nodes.conf", "--cluster-node-timeout", "2000", "--cluster-port",
                                   std::to_string(free_port()), "--appendonly", "no"}));
    }
    std::vector<std::string> words = {"redis-cli", "--cluster", "create"};
    for (const auto& node : nodes_)
      words.push_back("127.0.0.1:" + std::to_string(node->port()));
    words.insert(words.end(),
                 {"--cluster-replicas", std::to_string(replicas_each), "--cluster-yes"});
    const std::string output = run(words);
    INFO("redis-cli --cluster create said:\n" << output);
    REQUIRE(settled());
  }
  private_cluster(const private_cluster&) = delete;
  private_cluster& operator=(const private_cluster&) = delete;
  ~private_cluster() = default;

  std::size_t size() const noexcept { return nodes_.size(); }
  private_redis& node(std::size_t i) { return *nodes_.at(i); }

  /// Store options naming every node as a seed, a prefix of their own.
  idem::redis_cluster_store::options options(
      idem::time_source time = idem::time_source::server) const {
    idem::redis_cluster_store::options made;
    for (const auto& node : nodes_)
      made.nodes.push_back("127.0.0.1:" + std::to_string(node->port()));
    made.prefix = unique_prefix();
    made.clock = time;
    return made;
  }

  /// Whether every running node says the cluster is ok and serves all 16384 slots, every one
  /// has the same view of which node serves each slot and, `with_replicas`, every primary has
  /// its replicas past their first synchronisation (WAIT counts on them). Waits up to `limit`.
  bool settled(std::chrono::milliseconds limit = std::chrono::seconds{60},
               bool with_replicas = true) const {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      if (agreed(with_replicas)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds{100});
    }
    return agreed(with_replicas);
  }

  /// The port of the primary that serves `slot`, as the node at index `asked` sees it.
  int owner_port(std::uint16_t slot, std::size_t asked = 0) const {
    const auto context = nodes_.at(asked)->connect();
    const reply_ptr slots = command(context.get(), {"CLUSTER", "SLOTS"});
    for (std::size_t i = 0; i < slots->elements; ++i) {
      const redisReply* range = slots->element[i];
      if (range->element[0]->integer <= slot && slot <= range->element[1]->integer) {
        return static_cast<int>(range->element[2]->element[1]->integer);
      }
    }
    return 0;
  }

  /// The index of the node listening on `port`.
  std::size_t index_of(int port) const {
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      if (nodes_[i]->port() == port) return i;
    }
    FAIL("no node of the cluster listens on port " << port);
    return 0;
  }

  /// The primaries' indexes, as the first running node sees them now.
  std::vector<std::size_t> primaries() const {
    std::set<int> ports;
    for (std::uint16_t slot = 0; slot < idem::detail::redis_slot_count; slot += 64)
      ports.insert(owner_port(slot, first_running()));
    std::vector<std::size_t> found;
    for (const int port : ports)
      found.push_back(index_of(port));
    return found;
  }

  /// Moves `slot` from its primary to the primary at index `to`, as redis-cli --cluster
  /// reshard does, by hand so that it can be slow: IMPORTING on the target, MIGRATING on the
  /// source, the keys moved `batch` at a time with MIGRATE (a pause of `pause` after each
  /// batch), then the slot assigned to the target on every primary. Answers how many keys
  /// moved.
  std::size_t migrate_slot(std::uint16_t slot, std::size_t to, std::size_t batch = 10,
                           std::chrono::milliseconds pause = std::chrono::milliseconds{2}) {
    const std::size_t from = begin_migration(slot, to);
    std::size_t moved = 0;
    for (std::size_t step = move_keys(slot, from, to, batch); step > 0;
         step = move_keys(slot, from, to, batch)) {
      moved += step;
      std::this_thread::sleep_for(pause);
    }
    finish_migration(slot, from, to);
    return moved;
  }

  /// The steps of migrate_slot. begin_migration answers the source's index.
  std::size_t begin_migration(std::uint16_t slot, std::size_t to) {
    const std::size_t from = index_of(owner_port(slot));
    REQUIRE(from != to);
    const auto source = nodes_.at(from)->connect();
    const auto target = nodes_.at(to)->connect();
    const std::string number = std::to_string(slot);
    require_ok(
        command(target.get(), {"CLUSTER", "SETSLOT", number, "IMPORTING", id_of(source.get())}));
    require_ok(
        command(source.get(), {"CLUSTER", "SETSLOT", number, "MIGRATING", id_of(target.get())}));
    return from;
  }
  /// Moves up to `batch` keys of `slot`; answers how many (0: none is left).
  std::size_t move_keys(std::uint16_t slot, std::size_t from, std::size_t to, std::size_t batch) {
    const auto source = nodes_.at(from)->connect();
    const reply_ptr keys = command(
        source.get(), {"CLUSTER", "GETKEYSINSLOT", std::to_string(slot), std::to_string(batch)});
    REQUIRE(keys->type == REDIS_REPLY_ARRAY);
    if (keys->elements == 0) return 0;
    std::vector<std::string> words = {
        "MIGRATE", "127.0.0.1", std::to_string(nodes_.at(to)->port()), "", "0", "5000", "KEYS"};
    for (std::size_t i = 0; i < keys->elements; ++i)
      words.emplace_back(keys->element[i]->str, keys->element[i]->len);
    const reply_ptr migrated = command(source.get(), words);
    INFO("MIGRATE answered " << std::string(migrated->str == nullptr ? "" : migrated->str));
    REQUIRE(migrated->type == REDIS_REPLY_STATUS);
    return keys->elements;
  }
  /// The slot assigned to the target: on the target first, then the source, then every other
  /// primary (as redis-cli does).
  void finish_migration(std::uint16_t slot, std::size_t from, std::size_t to) {
    const auto source = nodes_.at(from)->connect();
    const auto target = nodes_.at(to)->connect();
    const std::string number = std::to_string(slot);
    const std::string target_id = id_of(target.get());
    require_ok(command(target.get(), {"CLUSTER", "SETSLOT", number, "NODE", target_id}));
    require_ok(command(source.get(), {"CLUSTER", "SETSLOT", number, "NODE", target_id}));
    for (const std::size_t other : primaries()) {
      if (other == from || other == to) continue;
      const auto context = nodes_.at(other)->connect();
      (void)command(context.get(), {"CLUSTER", "SETSLOT", number, "NODE", target_id});
    }
  }

  /// Deletes every key under `prefix` on every primary; never throws.
  void remove_keys(const std::string& prefix) const noexcept {
    for (const auto& node : nodes_) {
      try {
        const auto context = node->connect();
        if (role_is_master(context.get())) {
          for (const std::string& key : keys_under(context.get(), prefix))
            (void)command(context.get(), {"DEL", key});
        }
      } catch (...) {
        // A node that is gone has nothing to clean.
      }
    }
  }

  /// Every key under `prefix`, on all primaries.
  std::vector<std::string> keys(const std::string& prefix) const {
    std::vector<std::string> found;
    for (const auto& node : nodes_) {
      if (!node->running()) continue;
      const auto context = node->connect();
      if (!role_is_master(context.get())) continue;
      for (std::string& key : keys_under(context.get(), prefix))
        found.push_back(std::move(key));
    }
    return found;
  }

 private:
  static bool role_is_master(redisContext* context) {
    const reply_ptr role = command(context, {"ROLE"});
    return role->type == REDIS_REPLY_ARRAY && role->elements > 0 &&
           std::string(role->element[0]->str, role->element[0]->len) == "master";
  }

  static std::string id_of(redisContext* context) {
    const reply_ptr id = command(context, {"CLUSTER", "MYID"});
    REQUIRE(id->type == REDIS_REPLY_STRING);
    return std::string(id->str, id->len);
  }

  static void require_ok(const reply_ptr& reply) {
    INFO("the node answered " << std::string(reply->str == nullptr ? "" : reply->str));
    REQUIRE(reply->type == REDIS_REPLY_STATUS);
  }

  std::size_t first_running() const {
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      if (nodes_[i]->running()) return i;
    }
    FAIL("no node of the cluster is running");
    return 0;
  }

  bool agreed(bool with_replicas) const {
    std::string view;
    for (const auto& node : nodes_) {
      if (!node->running()) continue;
      try {
        const auto context = node->connect();
        const reply_ptr info = command(context.get(), {"CLUSTER", "INFO"});
        const std::string text(info->str, info->len);
        if (text.find("cluster_state:ok") == std::string::npos ||
            text.find("cluster_slots_ok:16384") == std::string::npos) {
          return false;
        }
        const reply_ptr slots = command(context.get(), {"CLUSTER", "SLOTS"});
        std::ostringstream mine;
        std::size_t primaries = 0;
        for (std::size_t i = 0; i < slots->elements; ++i) {
          const redisReply* range = slots->element[i];
          mine << range->element[0]->integer << '-' << range->element[1]->integer << ':'
               << range->element[2]->element[1]->integer << '+' << (range->elements - 3) << ';';
          ++primaries;
        }
        if (primaries < primaries_) return false;
        const reply_ptr replication = command(context.get(), {"INFO", "replication"});
        const std::string state(replication->str, replication->len);
        if (with_replicas && state.find("role:master") != std::string::npos) {
          std::size_t online = 0;
          for (std::size_t at = state.find("state=online"); at != std::string::npos;
               at = state.find("state=online", at + 1)) {
            ++online;
          }
          if (online < replicas_each_) return false;
        }
        if (view.empty()) view = mine.str();
        if (mine.str() != view) return false;
      } catch (const std::exception&) {
        return false;
      }
    }
    return !view.empty();
  }

  // Runs a command (redis-cli) to its end; answers what it printed. Fails the test unless it
  // exits with 0.
  static std::string run(const std::vector<std::string>& words) {
    const idem::testing::temporary_directory directory{"idem-redis-cli"};
    const std::string log = (directory.path() / "out.txt").string();
    std::vector<std::string> copy = words;
    std::vector<char*> argv;
    for (std::string& word : copy)
      argv.push_back(word.data());
    argv.push_back(nullptr);
    const pid_t child = ::fork();
    if (child < 0) throw std::runtime_error("fork failed");
    if (child == 0) {
      const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      const int null = ::open("/dev/null", O_RDONLY);
      ::dup2(null, 0);
      ::dup2(out, 1);
      ::dup2(out, 2);
      ::execvp(argv[0], argv.data());
      ::_exit(127);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    std::ifstream file(log);
    std::stringstream text;
    text << file.rdbuf();
    INFO(words[0] << " said:\n" << text.str());
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) == 0);
    return text.str();
  }

  std::size_t primaries_;
  std::size_t replicas_each_;
  std::vector<std::unique_ptr<private_redis>> nodes_;
};

}  // namespace idem_redis_test
