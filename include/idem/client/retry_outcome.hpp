// What a retried operation returns: how it ended, its last result or error, its key and the
// history of its attempts.
//
// Ending is a value, not an exception: a spent budget or an open breaker is something the caller
// branches on. The last error is kept exactly as it was thrown, and value() rethrows it unchanged.
// The type depends only on the call's result type, never on the policies, so outcomes from
// differently configured wrappers mix freely.
#ifndef IDEM_CLIENT_RETRY_OUTCOME_HPP
#define IDEM_CLIENT_RETRY_OUTCOME_HPP

#include <array>
#include <compare>
#include <cstddef>
#include <exception>
#include <iterator>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <idem/client/attempt.hpp>
#include <idem/client/policy/observer.hpp>
#include <idem/core/key.hpp>

namespace idem {

/// Thrown by retry_outcome::value() when the operation ended without a value and without an
/// error of its own to rethrow: the breaker or the budget refused before any attempt could run.
class retry_error : public std::runtime_error {
 public:
  explicit retry_error(retry_verdict verdict)
      : std::runtime_error("idem::retrying gave up: " + std::string(to_string(verdict))),
        verdict_(verdict) {}
  retry_verdict verdict() const noexcept { return verdict_; }

 private:
  retry_verdict verdict_;
};

/// The attempts of one operation, oldest first. The first eight are held inline, so the common
/// case allocates nothing; more spill to the heap.
class attempt_history {
 public:
  static constexpr std::size_t inline_capacity = 8;

  attempt_history() = default;
  attempt_history(const attempt_history& other) : size_(other.size_), spilled_(other.spilled_) {
    copy_inline(other);
  }
  attempt_history(attempt_history&& other) noexcept
      : size_(other.size_), spilled_(std::move(other.spilled_)) {
    copy_inline(other);
  }
  attempt_history& operator=(const attempt_history& other) {
    if (this != &other) {
      size_ = other.size_;
      spilled_ = other.spilled_;
      copy_inline(other);
    }
    return *this;
  }
  attempt_history& operator=(attempt_history&& other) noexcept {
    if (this != &other) {
      size_ = other.size_;
      spilled_ = std::move(other.spilled_);
      copy_inline(other);
    }
    return *this;
  }

  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  const attempt_record& operator[](std::size_t i) const noexcept {
    return i < inline_capacity ? inline_[i] : spilled_[i - inline_capacity];
  }
  const attempt_record& back() const noexcept { return (*this)[size_ - 1]; }

  class const_iterator;
  using iterator = const_iterator;
  using value_type = attempt_record;
  using size_type = std::size_t;
  /// Oldest first, so `for (const auto& attempt : outcome.history())` reads in order.
  const_iterator begin() const noexcept;
  const_iterator end() const noexcept;

  /// Appends a record made of `fields` (attempt_record's members, in order) and returns it,
  /// for the loop to fill in the delay later.
  template <class... Fields>
  attempt_record& emplace(Fields... fields) {
    // Built in its slot, not copied there: a record built field by field on the stack and then
    // copied as a whole is read back in wider loads than it was written, which store forwarding
    // cannot serve (a stall of several ns on the path of every successful call).
    if (size_ < inline_capacity) return *::new (&inline_[size_++]) attempt_record{fields...};
    return spill(attempt_record{fields...});
  }

 private:
  [[gnu::noinline]] attempt_record& spill(const attempt_record& record) {
    spilled_.push_back(record);
    ++size_;
    return spilled_.back();
  }

  // Only the records in use: the rest were never written.
  void copy_inline(const attempt_history& other) noexcept {
    const std::size_t count = size_ < inline_capacity ? size_ : inline_capacity;
    for (std::size_t i = 0; i < count; ++i)
      inline_[i] = other.inline_[i];
  }

  // Left unwritten beyond size_, so that an outcome does not clear eight records it may not use.
  std::array<attempt_record, inline_capacity> inline_;
  std::size_t size_ = 0;
  std::vector<attempt_record> spilled_;
};

/// A random-access iterator over the records: a position in the history, which keeps its first
/// records inline and the rest on the heap, so the records are not one array.
class attempt_history::const_iterator {
 public:
  using iterator_category = std::random_access_iterator_tag;
  using iterator_concept = std::random_access_iterator_tag;
  using value_type = attempt_record;
  using difference_type = std::ptrdiff_t;
  using pointer = const attempt_record*;
  using reference = const attempt_record&;

  const_iterator() = default;
  const_iterator(const attempt_history* history, std::size_t index) noexcept
      : history_(history), index_(static_cast<difference_type>(index)) {}

  reference operator*() const noexcept { return (*history_)[static_cast<std::size_t>(index_)]; }
  pointer operator->() const noexcept { return &**this; }
  reference operator[](difference_type n) const noexcept { return *(*this + n); }

  const_iterator& operator++() noexcept { return *this += 1; }
  const_iterator operator++(int) noexcept {
    auto before = *this;
    ++*this;
    return before;
  }
  const_iterator& operator--() noexcept { return *this -= 1; }
  const_iterator operator--(int) noexcept {
    auto before = *this;
    --*this;
    return before;
  }
  const_iterator& operator+=(difference_type n) noexcept {
    index_ += n;
    return *this;
  }
  const_iterator& operator-=(difference_type n) noexcept {
    index_ -= n;
    return *this;
  }
  friend const_iterator operator+(const_iterator it, difference_type n) noexcept { return it += n; }
  friend const_iterator operator+(difference_type n, const_iterator it) noexcept { return it += n; }
  friend const_iterator operator-(const_iterator it, difference_type n) noexcept { return it -= n; }
  friend difference_type operator-(const const_iterator& a, const const_iterator& b) noexcept {
    return a.index_ - b.index_;
  }
  friend bool operator==(const const_iterator& a, const const_iterator& b) noexcept {
    return a.index_ == b.index_;
  }
  friend auto operator<=>(const const_iterator& a, const const_iterator& b) noexcept {
    return a.index_ <=> b.index_;
  }

 private:
  const attempt_history* history_ = nullptr;
  difference_type index_ = 0;
};

inline attempt_history::const_iterator attempt_history::begin() const noexcept {
  return {this, 0};
}
inline attempt_history::const_iterator attempt_history::end() const noexcept {
  return {this, size_};
}

namespace detail {
template <class Policies>
class retry_core;

/// Stands in for the value of a call that returns void.
struct no_value {};
}  // namespace detail

/// The result of `retrying::operator()`: one operation, all its attempts.
template <class Result>
class retry_outcome {
  using stored = std::conditional_t<std::is_void_v<Result>, detail::no_value, Result>;

 public:
  using value_type = Result;

  retry_outcome() = default;

  retry_verdict verdict() const noexcept { return verdict_; }
  /// The operation's effect happened: an attempt succeeded, or the resolve hook found it.
  bool succeeded() const noexcept {
    return verdict_ == retry_verdict::succeeded || verdict_ == retry_verdict::resolved;
  }
  explicit operator bool() const noexcept { return succeeded(); }

  /// The last attempt returned a value (a success, or a failure judged from a value such as a
  /// 503 response), or the resolve hook supplied one.
  bool has_value() const noexcept { return value_.has_value(); }

  /// The value if there is one; otherwise rethrows the last attempt's exception unchanged, or
  /// throws retry_error when no attempt ran.
  decltype(auto) value() & { return get(*this); }
  decltype(auto) value() const& { return get(*this); }
  decltype(auto) value() && {
    if constexpr (std::is_void_v<Result>) {
      get(*this);
    } else {
      return std::move(get(*this));
    }
  }

  /// The last attempt's exception, exactly as thrown; null if it returned a value.
  const std::exception_ptr& error() const noexcept { return error_; }

  /// The idempotency key every attempt was given.
  std::string_view key() const noexcept { return key_.view(); }
  int attempts() const noexcept { return static_cast<int>(history_.size()); }
  const attempt_history& history() const noexcept { return history_; }

 private:
  // The decision core fills outcomes in, for the blocking and the asynchronous driver alike.
  template <class>
  friend class detail::retry_core;

  // The key is made straight into the outcome (guaranteed copy elision from make_key's
  // prvalue): assigning a finished key_buffer would copy its text a second time.
  template <class MakeKey>
  requires std::is_invocable_r_v<key_buffer, MakeKey&>
  explicit retry_outcome(MakeKey make_key) : key_(make_key()) {}

  template <class Self>
  static decltype(auto) get(Self& self) {
    if (!self.value_) {
      if (self.error_) std::rethrow_exception(self.error_);
      throw retry_error(self.verdict_);
    }
    if constexpr (!std::is_void_v<Result>) return (*self.value_);
  }

  retry_verdict verdict_ = retry_verdict::succeeded;
  std::optional<stored> value_;
  std::exception_ptr error_;
  key_buffer key_;
  attempt_history history_;
};

}  // namespace idem

#endif  // IDEM_CLIENT_RETRY_OUTCOME_HPP
