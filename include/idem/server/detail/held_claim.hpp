// A claim a caller holds, and the small parts every driver of the engine uses with it: how its
// response is recorded, where its recovery points go, and the marker a record keeps in place of
// a response too large to store. Apart from engine.hpp so that a driver (the blocking wrappers,
// idem/asio) names them without the rest.
#ifndef IDEM_SERVER_DETAIL_HELD_CLAIM_HPP
#define IDEM_SERVER_DETAIL_HELD_CLAIM_HPP

#include <cstdint>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <idem/store/contract.hpp>

namespace idem::detail {

// What a record holds in place of a response too large to store: the size it had. A handler's
// own response equal to this text would replay as too large; nothing else can be mistaken for
// it, and it is written unsealed so that a codec never has to open it.
inline constexpr char too_large_text[] = "\0idem: response too large to store\0";
inline constexpr std::string_view too_large_marker{too_large_text, sizeof too_large_text - 1};

/// How a claimed run's response is recorded: by complete after the handler returned; by
/// complete_within, in the transaction the handler writes in (TransactionalStore); or by
/// complete_within after the handler returned, with the writes its commit_with carries.
enum class completion : std::uint8_t { direct, in_transaction, with_writes };

// Where a run's recovery points are written: the store, or the open transaction.
template <class Store, completion How>
struct checkpoint_writer {
  using type = Store;
};
template <class Store>
struct checkpoint_writer<Store, completion::in_transaction> {
  using type = typename Store::transaction;
};

// A T made later in place, from the prvalue a function returns: no default construction and
// assignment where the making must sit in a try block but the value must outlive it.
template <class T>
class made_later {
 public:
  made_later() noexcept {}  // not = default, which the union would delete: value_ stays unmade
  made_later(const made_later&) = delete;
  made_later& operator=(const made_later&) = delete;
  ~made_later() {
    if (made_) value_.~T();
  }

  template <class Make>
  T& make(Make&& make) {
    ::new (static_cast<void*>(&value_)) T(std::forward<Make>(make)());
    made_ = true;
    return value_;
  }
  T& get() noexcept { return value_; }  // once made

 private:
  union {
    T value_;
  };
  bool made_ = false;
};

/// What converts to a T by calling `make()`, a prvalue: given where a T is made from an argument
/// (optional::emplace, variant::emplace), the conversion's result is the prvalue that initializes
/// the T in place, where passing make() would move a temporary into it.
template <class T, class Make>
struct made_by {
  Make& make;
  operator T() const { return make(); }
};

/// Makes `slot`'s value in place from `make()` (made_by).
template <class T, class Make>
T& emplace_made(std::optional<T>& slot, Make&& make) {
  return slot.emplace(made_by<T, std::remove_reference_t<Make>>{make});
}

// A resumable wrapper's kept request: the plain recovery bytes a new record's handler starts
// with, and the form the store keeps (sealed by the response codec, or the plain bytes).
struct kept_bytes {
  std::string plain;
  std::string sealed;
  std::string_view stored;
};

/// A claim this caller holds: what run_claimed needs to run under it.
struct held_claim {
  fenced_key held;
  bool resumed = false;   // taken over from a holder whose lease expired
  std::string recovery;   // the recovery points recorded before, opened
  store_time claimed_at;  // the time the claim was made with
};

}  // namespace idem::detail

#endif  // IDEM_SERVER_DETAIL_HELD_CLAIM_HPP
