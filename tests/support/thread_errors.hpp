// For tests that run real threads: what the threads threw, kept until the test's own thread can
// report it. Catch2's macros are not thread-safe (INFO from a worker races with the runner's
// message stack, which TSan reports), so a worker only records here and the test, after
// joining, asserts on `count()` and names every message with `report()`.
#pragma once

#include <catch2/catch.hpp>

#include <cstddef>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace idem::testing {

class thread_errors {
 public:
  /// Records one message; safe from any thread.
  void add(std::string message) {
    const std::lock_guard lock(mutex_);
    messages_.push_back(std::move(message));
  }

  [[nodiscard]] std::size_t count() const {
    const std::lock_guard lock(mutex_);
    return messages_.size();
  }

  /// From the test's thread, after the workers are joined: each message as an unscoped INFO, so
  /// the next assertion that fails shows them all.
  void report() const {
    const std::lock_guard lock(mutex_);
    for (const std::string& message : messages_)
      UNSCOPED_INFO(message);
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> messages_;
};

}  // namespace idem::testing
