// The settings idempotent and inbox share: declared once here, each defaulted from its policy in
// the Policies struct (idem/policies.hpp, the one place a default is written), and checked once.
// idempotent::options and inbox::options derive from it; the engine keeps the options it was
// built with as they are, so a setting has no third copy.
#ifndef IDEM_SERVER_DETAIL_OPTIONS_HPP
#define IDEM_SERVER_DETAIL_OPTIONS_HPP

#include <chrono>
#include <cstddef>
#include <stdexcept>
#include <string>

namespace idem::detail {

template <class Policies>
struct server_options {
  /// Where records live. A store is a handle: give several wrappers copies of one store and
  /// they share its records.
  typename Policies::store store{};
  typename Policies::clock clock{};
  /// How long a claim is honoured before another attempt may take it over. Longer than the
  /// handler's usual run time; each recovery point renews it.
  std::chrono::nanoseconds lease = Policies::lease;
  /// How long records are kept. A repeat after this runs again: choose it longer than your
  /// clients retry for.
  std::chrono::nanoseconds retention = Policies::retention;
  /// How long a duplicate of a request in progress waits for its response before answering
  /// in_progress; zero answers at once.
  std::chrono::nanoseconds coalesce = Policies::coalesce;
  /// The longest key (or event id) accepted, in bytes.
  std::size_t max_key_length = Policies::max_key_length;
  /// The largest stored response, in bytes (after the response codec): a larger one is not
  /// stored, its caller gets it with verdict response_too_large, and repeats answer
  /// response_too_large (500) without running again.
  std::size_t max_response_bytes = Policies::max_response_bytes;
  /// Seals responses and recovery points before the store keeps them, opens them on replay.
  typename Policies::response_codec response_codec{};

  /// Throws std::invalid_argument, naming `who`, for settings that can never work.
  void validate(const char* who) const {
    using std::chrono::nanoseconds;
    if (lease <= nanoseconds::zero()) {
      throw std::invalid_argument(std::string(who) + ": the lease must be positive");
    }
    if (retention <= lease) {
      throw std::invalid_argument(std::string(who) +
                                  ": the retention must be longer than the lease, or a claim "
                                  "could expire while its holder still runs");
    }
    if (coalesce < nanoseconds::zero()) {
      throw std::invalid_argument(std::string(who) + ": the coalescing wait cannot be negative");
    }
    if (max_key_length == 0) {
      throw std::invalid_argument(std::string(who) + ": max_key_length must be at least 1");
    }
  }
};

}  // namespace idem::detail

#endif  // IDEM_SERVER_DETAIL_OPTIONS_HPP
