// What redis_cluster_store reads in a cluster's answers, as free functions, so that each is
// tested without a cluster (tests/stores/redis/redis_keys_test.cpp): the redirects a node
// answers (MOVED and ASK), the errors after which a command is sent again unchanged (TRYAGAIN,
// CLUSTERDOWN), and the slot map CLUSTER SLOTS describes. The slots of keys, and the names of
// the per-slot scope registries, are in keys.hpp.
#ifndef IDEM_STORE_REDIS_DETAIL_CLUSTER_HPP
#define IDEM_STORE_REDIS_DETAIL_CLUSTER_HPP

#include <hiredis/hiredis.h>

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <idem/store/redis/detail/connection.hpp>
#include <idem/store/redis/detail/keys.hpp>
#include <idem/store/redis/detail/reply.hpp>

namespace idem::detail {

// A redirect a cluster node answered instead of running a command: MOVED (the slot lives
// elsewhere now: the map is stale) or ASK (the slot is being migrated and this key is on the
// importing node already: that one command goes there, after ASKING).
struct redis_redirect {
  enum class kind : std::uint8_t { moved, ask };
  kind how = kind::moved;
  std::uint16_t slot = 0;
  redis_address to;
};

// "MOVED 3999 127.0.0.1:6381" or "ASK 3999 127.0.0.1:6381"; nothing for any other reply.
inline std::optional<redis_redirect> redis_redirect_of(const redisReply* reply) {
  if (reply->type != REDIS_REPLY_ERROR) return std::nullopt;
  std::string_view text = reply_text(reply);
  redis_redirect found;
  if (text.starts_with("MOVED ")) {
    found.how = redis_redirect::kind::moved;
    text.remove_prefix(6);
  } else if (text.starts_with("ASK ")) {
    found.how = redis_redirect::kind::ask;
    text.remove_prefix(4);
  } else {
    return std::nullopt;
  }
  const std::size_t space = text.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  unsigned slot = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + space, slot);
  if (error != std::errc{} || end != text.data() + space || slot >= redis_slot_count) {
    return std::nullopt;
  }
  const std::optional<redis_address> to = redis_address_of(text.substr(space + 1));
  if (!to) return std::nullopt;
  found.slot = static_cast<std::uint16_t>(slot);
  found.to = *to;
  return found;
}

// Whether a node refused a command without running it, and it may simply be sent again after a
// moment: TRYAGAIN (a migration has some of the command's keys here and some on the importing
// node) and CLUSTERDOWN (the cluster lost a slot's primary and has not failed over yet).
inline bool redis_retry_later(const redisReply* reply) noexcept {
  if (reply->type != REDIS_REPLY_ERROR) return false;
  const std::string_view text = reply_text(reply);
  return text.starts_with("TRYAGAIN") || text.starts_with("CLUSTERDOWN");
}

// One range of CLUSTER SLOTS: slots first..last, served by the primary at `primary`.
struct redis_slot_range {
  std::uint16_t first = 0;
  std::uint16_t last = 0;
  redis_address primary;
};

// The ranges of an answer to CLUSTER SLOTS. A node that names no host for itself (an empty
// host, or "?" when it does not know its own address) is at the host the answer came from,
// `asked`. Throws std::invalid_argument when the answer is an error (a server that is not a
// cluster node) or not that shape.
inline std::vector<redis_slot_range> redis_slot_ranges_of(const redisReply* answer,
                                                          const std::string& asked,
                                                          const std::string& who) {
  if (answer->type == REDIS_REPLY_ERROR) {
    throw std::invalid_argument(who + ": the server at " + asked +
                                " refused CLUSTER SLOTS (is it a cluster node? Use "
                                "idem::redis_store for one server): " +
                                std::string(reply_text(answer)));
  }
  const auto malformed = [&] {
    return std::invalid_argument(who + ": the server at " + asked +
                                 " answered CLUSTER SLOTS with something that is not a slot map");
  };
  if (answer->type != REDIS_REPLY_ARRAY) throw malformed();
  const std::optional<redis_address> asked_address = redis_address_of(asked);
  std::vector<redis_slot_range> ranges;
  for (std::size_t i = 0; i < answer->elements; ++i) {
    const redisReply* range = answer->element[i];
    if (range->type != REDIS_REPLY_ARRAY || range->elements < 3 ||
        range->element[0]->type != REDIS_REPLY_INTEGER ||
        range->element[1]->type != REDIS_REPLY_INTEGER ||
        range->element[2]->type != REDIS_REPLY_ARRAY || range->element[2]->elements < 2 ||
        range->element[2]->element[1]->type != REDIS_REPLY_INTEGER) {
      throw malformed();
    }
    const long long first = range->element[0]->integer;
    const long long last = range->element[1]->integer;
    const long long port = range->element[2]->element[1]->integer;
    if (first < 0 || last < first || last >= static_cast<long long>(redis_slot_count) ||
        port <= 0 || port > 65535) {
      throw malformed();
    }
    std::string host(reply_text(range->element[2]->element[0]));
    if ((host.empty() || host == "?") && asked_address) host = asked_address->host;
    ranges.push_back(redis_slot_range{static_cast<std::uint16_t>(first),
                                      static_cast<std::uint16_t>(last),
                                      redis_address{std::move(host), static_cast<int>(port)}});
  }
  return ranges;
}

inline std::string redis_address_text(const redis_address& address) {
  return address.host + ":" + std::to_string(address.port);
}

}  // namespace idem::detail

#endif  // IDEM_STORE_REDIS_DETAIL_CLUSTER_HPP
