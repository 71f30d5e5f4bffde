// What a reconciler pass reports: one row per discrepancy between a record that did not finish and
// the downstream system of record, a summary of the pass, and the two forms a person or a cron
// job reads them in (JSON Lines, a summary table, an exit status).
//
// A row says what is known about one step of one stuck record that the reconciler could not
// finish: landed (the effect exists, though the request never completed: the record says so for
// a step it recorded, the lookup for a step it started), not_landed (the lookup found nothing
// under the step's reference, or no step ever started), unknown (the lookup failed, threw, or
// there is none). The reconciler never corrects anything downstream: refunding, re-sending or
// cancelling is for the person who reads the report.
//
// Keys are never written as they are (a key is a bearer token of sorts): a row carries the key's
// redacted form (idem/client/redacted_key.hpp), which correlates with observers' and logs' lines
// of the same key. Standard library only.
#ifndef IDEM_RECONCILE_REPORT_HPP
#define IDEM_RECONCILE_REPORT_HPP

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include <idem/client/redacted_key.hpp>
#include <idem/core/fingerprint/json/detail/utf8.hpp>
#include <idem/server/lookup.hpp>

namespace idem {

/// Where a row's classification comes from.
enum class evidence : std::uint8_t {
  record,  // the record itself: a step it recorded (landed), or no step started (not_landed)
  lookup,  // the downstream lookup, for a step started and not recorded
};

constexpr std::string_view to_string(evidence value) noexcept {
  return value == evidence::record ? "record" : "lookup";
}

/// One row of the report.
struct discrepancy {
  std::string scope;
  std::string redacted_key;        // redacted_key(key).str(): never the key itself
  std::chrono::nanoseconds age{};  // since the record was claimed
  std::string handler;             // the wrapper's name the record kept, empty when it kept none
  std::string step;                // empty: the record as a whole (no step started)
  std::string downstream_key;      // the reference the step's downstream call was made under
  landing classification = landing::unknown;
  evidence source = evidence::record;
  std::string reason;  // why the reconciler did not finish the record, and what the lookup said

  friend bool operator==(const discrepancy&, const discrepancy&) = default;
};

/// The age buckets of stuck records: under 1 minute, 10 minutes, 1 hour, 1 day, and older.
inline constexpr std::array<std::chrono::seconds, 4> stuck_age_limits{
    std::chrono::minutes{1}, std::chrono::minutes{10}, std::chrono::hours{1},
    std::chrono::hours{24}};
inline constexpr std::array<std::string_view, 5> stuck_age_labels{"<1m", "<10m", "<1h", "<1d",
                                                                  ">=1d"};

constexpr std::size_t stuck_age_bucket(std::chrono::nanoseconds age) noexcept {
  std::size_t bucket = 0;
  while (bucket < stuck_age_limits.size() && age >= stuck_age_limits[bucket])
    ++bucket;
  return bucket;
}

/// What a pass did, in counts.
struct reconcile_summary {
  std::size_t examined = 0;        // stuck records looked at
  std::size_t resumed = 0;         // finished by the reconciler: taken over, handler ran to its end
  std::size_t settled = 0;         // nothing left to do (completed, released or gone meanwhile)
  std::size_t lost = 0;            // a client's retry or another reconciler held or took it
  std::size_t failed = 0;          // resumed, but the handler failed again: reported
  std::size_t not_resumable = 0;   // kept no request, an unreadable one, or no wrapper for it:
                                   // reported
  std::size_t store_failures = 0;  // the store could not answer: the pass did not finish these
  std::size_t landed = 0;          // rows by classification
  std::size_t not_landed = 0;
  std::size_t unknown = 0;
  std::array<std::size_t, stuck_age_labels.size()> stuck_by_age{};

  std::size_t reported() const noexcept { return failed + not_resumable; }
  /// Whether a person is needed: an effect landed for a request that never finished, or
  /// nobody can tell whether one did. not_landed rows alone need nobody (nothing happened; the
  /// client may retry, or the record expires).
  bool needs_person() const noexcept { return landed != 0 || unknown != 0; }
  /// For a cron job: 0 nothing to do, 1 a person is needed, 2 the pass did not finish (the store
  /// failed), whatever else it found.
  int exit_status() const noexcept {
    if (store_failures != 0) return 2;
    return needs_person() ? 1 : 0;
  }

  reconcile_summary& operator+=(const reconcile_summary& other) noexcept {
    examined += other.examined;
    resumed += other.resumed;
    settled += other.settled;
    lost += other.lost;
    failed += other.failed;
    not_resumable += other.not_resumable;
    store_failures += other.store_failures;
    landed += other.landed;
    not_landed += other.not_landed;
    unknown += other.unknown;
    for (std::size_t i = 0; i < stuck_by_age.size(); ++i)
      stuck_by_age[i] += other.stuck_by_age[i];
    return *this;
  }
};

/// A pass's (or several passes') summary and rows.
struct reconcile_report {
  reconcile_summary summary;
  std::vector<discrepancy> rows;

  reconcile_report& operator+=(reconcile_report&& other) {
    summary += other.summary;
    for (discrepancy& row : other.rows)
      rows.push_back(std::move(row));
    return *this;
  }
};

namespace detail {

// A JSON string of `text`: the escapes JSON requires, and U+FFFD for each byte that is not part
// of well-formed UTF-8 (a scope or a reason may hold any bytes; the report must stay JSON).
inline void append_report_string(std::string& out, std::string_view text) {
  out.push_back('"');
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
      ++i;
    } else if (c < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
      out.append(escaped);
      ++i;
    } else {
      const std::size_t length = utf8_sequence_length(text, i);
      if (length == 0) {
        out.append("\xef\xbf\xbd");
        ++i;
      } else {
        out.append(text.substr(i, length));
        i += length;
      }
    }
  }
  out.push_back('"');
}

}  // namespace detail

/// One row as a line of JSON (no newline): scope, key (redacted), age_seconds, handler, step,
/// downstream_key, classification, evidence, reason.
inline std::string json_line(const discrepancy& row) {
  std::string out = "{\"scope\":";
  detail::append_report_string(out, row.scope);
  out += ",\"key\":";
  detail::append_report_string(out, row.redacted_key);
  out += ",\"age_seconds\":";
  out += std::to_string(std::chrono::duration_cast<std::chrono::seconds>(row.age).count());
  out += ",\"handler\":";
  detail::append_report_string(out, row.handler);
  out += ",\"step\":";
  detail::append_report_string(out, row.step);
  out += ",\"downstream_key\":";
  detail::append_report_string(out, row.downstream_key);
  out += ",\"classification\":";
  detail::append_report_string(out, to_string(row.classification));
  out += ",\"evidence\":";
  detail::append_report_string(out, to_string(row.source));
  out += ",\"reason\":";
  detail::append_report_string(out, row.reason);
  out += '}';
  return out;
}

/// Every row, a line each.
inline std::string json_lines(const std::vector<discrepancy>& rows) {
  std::string out;
  for (const discrepancy& row : rows) {
    out += json_line(row);
    out += '\n';
  }
  return out;
}

/// The summary as a small table for a person (and a cron mail).
inline std::string summary_table(const reconcile_summary& summary) {
  std::string out;
  const auto line = [&](std::string_view label, std::size_t value) {
    char text[96];
    std::snprintf(text, sizeof text, "  %-26.*s %10zu\n", static_cast<int>(label.size()),
                  label.data(), value);
    out += text;
  };
  out += "reconciler pass\n";
  line("stuck records examined", summary.examined);
  for (std::size_t i = 0; i < stuck_age_labels.size(); ++i) {
    line("  aged " + std::string(stuck_age_labels[i]), summary.stuck_by_age[i]);
  }
  line("resumed (finished)", summary.resumed);
  line("settled meanwhile", summary.settled);
  line("held by another attempt", summary.lost);
  line("failed again (reported)", summary.failed);
  line("not resumable (reported)", summary.not_resumable);
  line("store failures", summary.store_failures);
  out += "report rows\n";
  line("landed", summary.landed);
  line("not_landed", summary.not_landed);
  line("unknown", summary.unknown);
  out += summary.store_failures != 0 ? "verdict: the pass did not finish (the store failed)\n"
         : summary.needs_person()    ? "verdict: a person is needed (landed or unknown rows)\n"
                                     : "verdict: nothing needs a person\n";
  return out;
}

}  // namespace idem

#endif  // IDEM_RECONCILE_REPORT_HPP
