// A Store that hands every call to the store it holds: a test's own store derives from it and
// defines again only the calls it watches or changes (a derived member hides the base's).
//
// Include it after idem (idem/idem.hpp, or the single header: some tests build against either,
// so this file names no idem header itself).
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

namespace idem_test {

template <idem::Store Inner>
class forwarding_store {
 public:
  idem::claim_result claim(const idem::claim_request& request) { return inner_.claim(request); }
  bool complete(const idem::fenced_key& held, std::string_view response, idem::store_time now) {
    return inner_.complete(held, response, now);
  }
  bool release(const idem::fenced_key& held) { return inner_.release(held); }
  bool checkpoint(const idem::fenced_key& held, std::string_view recovery,
                  idem::store_time lease_until) {
    return inner_.checkpoint(held, recovery, lease_until);
  }
  std::optional<idem::record> find(std::string_view scope, std::string_view key,
                                   idem::store_time now) {
    return inner_.find(scope, key, now);
  }
  std::size_t sweep(idem::store_time now) { return inner_.sweep(now); }
  std::vector<idem::record> stuck(idem::store_time now, std::size_t limit) {
    return inner_.stuck(now, limit);
  }

 protected:
  Inner inner_{};
};

}  // namespace idem_test
