// What resuming a stuck record answers: idempotent::resume, which idem::reconciler calls for each
// stuck record that kept its request (idem/reconciler.hpp).
//
// Resuming is a claim like a retry's: the record is taken over under fence + 1, fenced exactly as
// a client's retry would take it, and the handler runs from its recovery points. Whoever wins the
// claim runs; a loser changes nothing.
#ifndef IDEM_SERVER_RESUMPTION_HPP
#define IDEM_SERVER_RESUMPTION_HPP

#include <cstdint>
#include <string>
#include <string_view>

namespace idem {

enum class resumption : std::uint8_t {
  resumed,       // taken over; the handler ran to its end and its response is recorded
  settled,       // nothing left to do: completed, released or gone since it was listed
  lost,          // another attempt (a client's retry, another reconciler) holds or took it
  failed,        // taken over, but the handler threw or could not tell whether a step landed:
                 // the claim is kept (never released), so the record stays for the report
  unreadable,    // the kept request does not decode, or is not the request the record was
                 // claimed for: never run
  store_failed,  // the store could not answer; nothing changed that the next pass cannot redo
};

constexpr std::string_view to_string(resumption value) noexcept {
  switch (value) {
    case resumption::resumed:
      return "resumed";
    case resumption::settled:
      return "settled";
    case resumption::lost:
      return "lost";
    case resumption::failed:
      return "failed";
    case resumption::unreadable:
      return "unreadable";
    case resumption::store_failed:
      return "store_failed";
  }
  return "unknown";
}

struct resume_result {
  resumption what = resumption::settled;
  std::string message;      // why, in words, for every answer but resumed
  std::uint64_t fence = 0;  // resumed, failed: the fence the run held
  std::string recovery;     // failed: the recovery bytes as the run left them (opened)
};

}  // namespace idem

#endif  // IDEM_SERVER_RESUMPTION_HPP
