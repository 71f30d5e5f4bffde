// Latency trackers: how long a dependency takes, measured, so that timeouts come from it.
//
// "Every remote call has a timeout", and a timeout picked by hand is either too short (it cuts
// the dependency's slow but healthy answers) or too long (a caller waits on a call that is not
// coming back). A latency tracker is fed the duration of every attempt and answers quantiles of
// the recent ones; retrying derives each attempt's timeout from it (attempt_timeouts below):
//
//   timeout = clamp(quantile(p) * factor, floor, the operation's time left)
//
// with p = 99.9% by default, and a configured start value until the tracker has enough samples.
//
// idem::latency_tracker keeps a log-linear histogram (HdrHistogram's layout): durations below
// 64 ns exactly, and above, 64 buckets per power of two. A quantile is answered from the bucket
// the rank falls in, as the bucket's midpoint, so it is within 1/128 (0.8%) of a duration that
// was recorded there: the answer's rank is exact over the samples kept, and its value off by at
// most 0.8% (durations past 2^41 ns, about 37 minutes, all count as that). Two histograms with
// the same layout merge by adding their counts (merge()).
//
// It forgets: samples go into the current of two windows; when the current one has `window`
// samples, the older one is cleared and becomes current. A quantile is read over both, so over
// the last `window` to 2 x `window` samples, and 2 x `window` samples after a dependency's
// latency moves, nothing from before the move is left in it.
//
// The hot path takes no lock. record() is two relaxed atomic adds (the bucket, the window's
// count) on memory that copies of the tracker share: one tracker per dependency, shared by every
// wrapper and thread that calls it. A quantile is not computed per attempt: the tracker keeps
// the latest answer for each quantile in `options::quantiles`, recomputed (one read of the
// 2 x 2,304 counts) by the record() whose count is a multiple of `options::refresh_every`, when
// the window turns over and when min_samples is first reached, so that reading one is a load.
//
// It samples: once it answers, retrying times one attempt in `options::sample_every`, chosen at
// random (sample_every()), so that the clock read at an attempt's end and the two atomic adds are
// paid by one attempt in 16, not each. The samples kept are a uniform random subset of the
// attempts: what is said above of "the samples" holds of them, and a quantile estimates the
// dependency's as well as an unsampled tracker's over as many samples.
#ifndef IDEM_CLIENT_POLICY_LATENCY_HPP
#define IDEM_CLIENT_POLICY_LATENCY_HPP

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace idem {

/// What a `latency_tracker` policy must provide. It may also provide `sample_every() const`,
/// an unsigned count: retrying then times, and records, one attempt in that many, at random
/// (latency_tracker::sample_every); without it, every attempt.
template <class T>
concept LatencyTracker = std::copy_constructible<T> &&
    requires(T& tracker, const T& read, std::chrono::nanoseconds duration, double q) {
  tracker.record(duration);
  { read.estimate(q) } -> std::same_as<std::optional<std::chrono::nanoseconds>>;
  { read.tracks(q) } -> std::same_as<bool>;
};

/// Measures nothing, costs nothing: retrying reads no clock for it, and every attempt's timeout
/// is the operation's time left.
struct no_latency_tracker {
  constexpr void record(std::chrono::nanoseconds) const noexcept {}
  constexpr std::optional<std::chrono::nanoseconds> estimate(double) const noexcept {
    return std::nullopt;
  }
  constexpr bool tracks(double) const noexcept { return true; }
};

/// How retrying derives an attempt's timeout from its latency tracker.
struct attempt_timeouts {
  /// The quantile of recent attempts' durations the timeout starts from; the tracker must keep
  /// it (latency_tracker::options::quantiles).
  double quantile = 0.999;
  /// The quantile times this: room above it, so that a healthy dependency's slowest answers are
  /// not cut.
  double factor = 1.5;
  /// Never shorter than this, whatever the tracker says.
  std::chrono::nanoseconds floor = std::chrono::milliseconds{1};
  /// The timeout while the tracker has too few samples to say.
  std::chrono::nanoseconds start = std::chrono::seconds{1};
};

namespace detail {

/// An attempt's timeout: the tracker's estimate of `settings.quantile` times the factor, or the
/// start value without one; never below the floor nor above the time left.
template <class Tracker>
std::chrono::nanoseconds attempt_timeout(const Tracker& tracker, const attempt_timeouts& settings,
                                         std::chrono::nanoseconds time_left) noexcept {
  std::chrono::nanoseconds timeout = settings.start;
  if (const std::optional<std::chrono::nanoseconds> estimate =
          tracker.estimate(settings.quantile)) {
    timeout = std::chrono::nanoseconds{static_cast<std::chrono::nanoseconds::rep>(
        static_cast<double>(estimate->count()) * settings.factor)};
  }
  return std::min(std::max(timeout, settings.floor), time_left);
}

/// Throws std::invalid_argument, naming `who`, for settings no timeout can come from, or a
/// quantile the tracker does not keep.
template <class Tracker>
void check_attempt_timeouts(const Tracker& tracker, const attempt_timeouts& settings,
                            const char* who) {
  const bool valid = settings.quantile > 0 && settings.quantile < 1 && settings.factor > 0 &&
                     settings.floor >= std::chrono::nanoseconds::zero() &&
                     settings.start > std::chrono::nanoseconds::zero();
  if (!valid) {
    throw std::invalid_argument(std::string(who) +
                                ": attempt_timeouts needs a quantile within (0, 1), a positive "
                                "factor and start, and a floor that is not negative");
  }
  if (!tracker.tracks(settings.quantile)) {
    throw std::invalid_argument(std::string(who) +
                                ": the latency tracker does not keep the timeouts' quantile (add "
                                "it to latency_tracker::options::quantiles)");
  }
}

}  // namespace detail

/// A bounded, mergeable, forgetting quantile sketch of one dependency's latency (see above).
/// Copies share it; every member is safe from many threads at once.
class latency_tracker {
 public:
  /// Sub-buckets per power of two: the answer's relative error is at most 1 / (2 x this).
  static constexpr int sub_buckets = 64;
  /// Durations from 2^max_exponent ns up count in the last bucket.
  static constexpr int max_exponent = 41;
  static constexpr std::size_t buckets =
      sub_buckets + static_cast<std::size_t>(max_exponent - 6) * sub_buckets;
  /// The most quantiles one tracker keeps answers for.
  static constexpr std::size_t max_quantiles = 4;

  struct options {
    /// Samples per window; a quantile is read over the last `window` to 2 x `window`.
    std::uint32_t window = 4096;
    /// Samples needed before the tracker answers at all.
    std::uint32_t min_samples = 1000;
    /// The kept answers are recomputed every this many samples (a power of two), when the
    /// window turns over, and when min_samples is first reached.
    std::uint32_t refresh_every = 1024;
    /// The quantiles whose answers are kept: retrying's timeouts read 0.999 by default, and
    /// hedging 0.95.
    std::vector<double> quantiles{0.95, 0.999};
    /// Once the tracker answers, retrying times one attempt in this many (a power of two), at
    /// random (sample_every()); 1 times every attempt. Until then it times every one.
    std::uint32_t sample_every = 16;
  };

  latency_tracker() : latency_tracker(options{}) {}
  explicit latency_tracker(const options& s) : state_(std::make_shared<shared>(s)) {
    if (s.window < 1 || s.min_samples < 1 || s.min_samples > s.window || s.refresh_every < 1 ||
        !std::has_single_bit(s.refresh_every) || s.quantiles.empty() ||
        s.quantiles.size() > max_quantiles ||
        std::any_of(s.quantiles.begin(), s.quantiles.end(),
                    [](double q) { return !(q > 0 && q < 1); }) ||
        s.sample_every < 1 || !std::has_single_bit(s.sample_every)) {
      throw std::invalid_argument(
          "idem::latency_tracker: window and min_samples must be positive with min_samples <= "
          "window, refresh_every and sample_every powers of two, and 1 to 4 quantiles, each "
          "within (0, 1)");
    }
  }

  /// One attempt in how many retrying times (and records): 1, every one, while the tracker
  /// has fewer than min_samples samples; then options::sample_every. A load.
  std::uint32_t sample_every() const noexcept {
    const shared& s = *state_;
    return s.answers[0].load(std::memory_order_relaxed) < 0 ? 1U : s.sample_every;
  }

  /// The bucket a duration counts in (a negative one counts as zero).
  static constexpr std::size_t bucket_of(std::chrono::nanoseconds duration) noexcept {
    const auto ns = static_cast<std::uint64_t>(std::max<std::int64_t>(duration.count(), 0));
    if (ns < sub_buckets) return static_cast<std::size_t>(ns);
    const int exponent = static_cast<int>(std::bit_width(ns)) - 1;  // 6 and up
    if (exponent >= max_exponent) return buckets - 1;
    const auto sub = static_cast<std::size_t>((ns >> (exponent - 6)) & (sub_buckets - 1));
    return sub_buckets + static_cast<std::size_t>(exponent - 6) * sub_buckets + sub;
  }

  /// The duration a bucket stands for: its midpoint (exact below 64 ns).
  static constexpr std::chrono::nanoseconds value_of(std::size_t bucket) noexcept {
    if (bucket < sub_buckets) return std::chrono::nanoseconds{static_cast<std::int64_t>(bucket)};
    const std::size_t octave = (bucket - sub_buckets) / sub_buckets;  // exponent - 6
    const std::uint64_t sub = (bucket - sub_buckets) % sub_buckets;
    const std::uint64_t width = std::uint64_t{1} << octave;
    const std::uint64_t low = (std::uint64_t{sub_buckets} + sub) << octave;
    return std::chrono::nanoseconds{static_cast<std::int64_t>(low + width / 2)};
  }

  /// One attempt took `duration`.
  void record(std::chrono::nanoseconds duration) noexcept {
    shared& s = *state_;
    const std::size_t bucket = bucket_of(duration);
    const unsigned current = s.current.load(std::memory_order_acquire);
    window& w = s.windows[current];
    w.counts[bucket].fetch_add(1, std::memory_order_relaxed);
    const std::uint64_t n = w.recorded.fetch_add(1, std::memory_order_relaxed) + 1;
    if (n == s.window_size) {
      // The one record() that filled the window turns it over: the older window is cleared
      // and becomes current. A record() that loaded the old index a moment ago adds its sample
      // to the cleared window, which is as recent a sample as any.
      window& older = s.windows[1 - current];
      older.clear();
      s.current.store(1 - current, std::memory_order_release);
      s.refresh();
    } else if ((n & (s.refresh_every - 1)) == 0 || n == s.min_samples) {
      s.refresh();
    }
  }

  /// The kept answer for quantile `q` (one of options::quantiles), or none while the tracker
  /// has fewer than min_samples samples. A load: what attempt timeouts read.
  std::optional<std::chrono::nanoseconds> estimate(double q) const noexcept {
    const shared& s = *state_;
    for (std::size_t i = 0; i < s.quantile_count; ++i) {
      if (s.quantiles[i] != q) continue;
      const std::int64_t kept = s.answers[i].load(std::memory_order_relaxed);
      if (kept < 0) return std::nullopt;
      return std::chrono::nanoseconds{kept};
    }
    return quantile(q);
  }

  /// Whether `q` is one of the quantiles whose answers are kept.
  bool tracks(double q) const noexcept {
    const shared& s = *state_;
    return std::find(s.quantiles.begin(), s.quantiles.begin() + s.quantile_count, q) !=
           s.quantiles.begin() + s.quantile_count;
  }

  /// Quantile `q` (within [0, 1]) of the samples the windows hold, computed now; none while
  /// they hold fewer than min_samples.
  std::optional<std::chrono::nanoseconds> quantile(double q) const noexcept {
    return state_->quantile(q);
  }

  /// The samples the windows hold.
  std::uint64_t samples() const noexcept { return state_->samples(); }

  /// Adds `other`'s samples (its two windows) to this tracker's current window: one sketch of
  /// several processes' or threads' trackers. The kept answers are recomputed.
  void merge(const latency_tracker& other) {
    if (other.state_ == state_) return;
    shared& s = *state_;
    window& into = s.windows[s.current.load(std::memory_order_acquire)];
    for (const window& from : other.state_->windows) {
      for (std::size_t b = 0; b < buckets; ++b) {
        const std::uint32_t c = from.counts[b].load(std::memory_order_relaxed);
        if (c == 0) continue;
        into.counts[b].fetch_add(c, std::memory_order_relaxed);
        into.recorded.fetch_add(c, std::memory_order_relaxed);
      }
    }
    s.refresh();
  }

 private:
  using histogram = std::array<std::uint64_t, buckets>;

  struct window {
    std::array<std::atomic<std::uint32_t>, buckets> counts{};
    std::atomic<std::uint64_t> recorded{0};

    void clear() noexcept {
      recorded.store(0, std::memory_order_relaxed);
      for (auto& c : counts)
        c.store(0, std::memory_order_relaxed);
    }
  };

  struct shared {
    explicit shared(const options& s)
        : window_size(s.window),
          min_samples(s.min_samples),
          refresh_every(s.refresh_every),
          sample_every(s.sample_every),
          quantile_count(s.quantiles.size()) {
      std::copy(s.quantiles.begin(), s.quantiles.end(), quantiles.begin());
      for (auto& answer : answers)
        answer.store(-1, std::memory_order_relaxed);
    }

    std::uint64_t samples() const noexcept {
      return windows[0].recorded.load(std::memory_order_relaxed) +
             windows[1].recorded.load(std::memory_order_relaxed);
    }

    // Both windows' counts added up, read once; answers the samples they hold.
    std::uint64_t read(histogram& into) const noexcept {
      std::uint64_t total = 0;
      for (std::size_t b = 0; b < buckets; ++b) {
        into[b] = windows[0].counts[b].load(std::memory_order_relaxed) +
                  windows[1].counts[b].load(std::memory_order_relaxed);
        total += into[b];
      }
      return total;
    }

    // Quantile q of a histogram holding `total` samples: the bucket of rank ceil(q * total).
    std::optional<std::chrono::nanoseconds> quantile_of(const histogram& counts,
                                                        std::uint64_t total,
                                                        double q) const noexcept {
      if (total < min_samples || total == 0) return std::nullopt;
      const double clamped = std::clamp(q, 0.0, 1.0);
      const double exact = clamped * static_cast<double>(total);
      auto rank = static_cast<std::uint64_t>(exact);
      if (static_cast<double>(rank) < exact) ++rank;  // ceil
      rank = std::clamp<std::uint64_t>(rank, 1, total);
      std::uint64_t seen = 0;
      for (std::size_t b = 0; b < buckets; ++b) {
        seen += counts[b];
        if (seen >= rank) return value_of(b);
      }
      return value_of(buckets - 1);  // not reached: seen ends at total
    }

    std::optional<std::chrono::nanoseconds> quantile(double q) const noexcept {
      histogram counts;
      const std::uint64_t total = read(counts);
      return quantile_of(counts, total, q);
    }

    // The kept answers, from one reading of the counts. The counts are read while others may
    // record or turn the window over: a statistic of the moment, each answer a bucket that
    // held samples when it was read.
    void refresh() noexcept {
      histogram counts;
      const std::uint64_t total = read(counts);
      for (std::size_t i = 0; i < quantile_count; ++i) {
        const std::optional<std::chrono::nanoseconds> answer =
            quantile_of(counts, total, quantiles[i]);
        answers[i].store(answer ? answer->count() : -1, std::memory_order_relaxed);
      }
    }

    std::array<window, 2> windows{};
    std::atomic<unsigned> current{0};
    const std::uint64_t window_size;
    const std::uint64_t min_samples;
    const std::uint64_t refresh_every;
    const std::uint32_t sample_every;
    std::array<double, max_quantiles> quantiles{};
    const std::size_t quantile_count;
    std::array<std::atomic<std::int64_t>, max_quantiles> answers{};
  };

  std::shared_ptr<shared> state_;
};

static_assert(LatencyTracker<no_latency_tracker>);
static_assert(LatencyTracker<latency_tracker>);

}  // namespace idem

#endif  // IDEM_CLIENT_POLICY_LATENCY_HPP
