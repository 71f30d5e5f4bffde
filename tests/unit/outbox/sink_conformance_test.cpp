// The sink conformance check (idem/testing/sink_conformance.hpp) run on sinks in memory: one
// that keeps the contract passes every case, and ones that break it in one way each fail the
// case that checks that way ([!shouldfail]: Catch2 counts the case as passed only if it fails),
// so the check is shown to catch them.
#include <catch2/catch.hpp>

#include <idem/outbox/sink.hpp>
#include <idem/testing/sink_conformance.hpp>

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

using delivered_map = std::map<std::string, std::vector<idem::outbox_entry>, std::less<>>;

// What the in-memory sinks differ in: each flag breaks the contract in one way.
struct flaws {
  bool drops_headers = false;
  bool answers_failed_when_down = false;
};

class memory_sink {
 public:
  memory_sink(std::shared_ptr<delivered_map> delivered, flaws how, bool down)
      : delivered_(std::move(delivered)), flaws_(how), down_(down) {}

  void publish(std::span<const idem::outbox_entry> batch, std::span<idem::sink_result> results) {
    if (down_ && !flaws_.answers_failed_when_down) {
      throw std::runtime_error("memory_sink: the broker is down");
    }
    for (std::size_t i = 0; i < batch.size(); ++i) {
      if (down_) {
        results[i] = {idem::sink_status::failed, "the broker is down"};
        continue;
      }
      if (batch[i].message.topic.empty()) {
        results[i] = {idem::sink_status::rejected, "the message has no topic"};
        continue;
      }
      idem::outbox_entry kept = batch[i];
      if (flaws_.drops_headers) kept.message.headers.clear();
      (*delivered_)[kept.message.topic].push_back(std::move(kept));
      results[i] = {idem::sink_status::acknowledged, {}};
    }
  }

 private:
  std::shared_ptr<delivered_map> delivered_;
  flaws flaws_;
  bool down_;
};

static_assert(idem::Sink<memory_sink>);

template <bool DropsHeaders, bool AnswersFailedWhenDown>
struct memory_sink_factory {
  static constexpr flaws how{DropsHeaders, AnswersFailedWhenDown};
  memory_sink make() { return memory_sink(delivered, how, false); }
  memory_sink make_unavailable() { return memory_sink(delivered, how, true); }
  std::vector<idem::outbox_entry> read(std::string_view topic) const {
    const auto found = delivered->find(topic);
    return found == delivered->end() ? std::vector<idem::outbox_entry>{} : found->second;
  }
  std::shared_ptr<delivered_map> delivered = std::make_shared<delivered_map>();
};

using conforming_memory_sink = memory_sink_factory<false, false>;
using headerless_memory_sink = memory_sink_factory<true, false>;
using outage_hiding_memory_sink = memory_sink_factory<false, true>;

// A factory without make_unavailable(): the outage case is skipped, not failed.
struct memory_sink_without_outages {
  memory_sink make() { return memory_sink(delivered, {}, false); }
  std::vector<idem::outbox_entry> read(std::string_view topic) const {
    const auto found = delivered->find(topic);
    return found == delivered->end() ? std::vector<idem::outbox_entry>{} : found->second;
  }
  std::shared_ptr<delivered_map> delivered = std::make_shared<delivered_map>();
};

}  // namespace

IDEM_SINK_CONFORMANCE_TESTS(conforming_memory_sink)

TEST_CASE("the sink conformance check skips the outage case for a factory without the hook",
          "[outbox]") {
  static_assert(idem::testing::SinkFactory<memory_sink_without_outages>);
  static_assert(!idem::testing::UnavailableSinkFactory<memory_sink_without_outages>);
  idem::testing::sink_conformance::an_unavailable_sink_throws<memory_sink_without_outages>();
}

TEST_CASE("the sink conformance check fails a sink that drops headers", "[outbox][!shouldfail]") {
  idem::testing::sink_conformance::an_acknowledged_message_is_read_back_byte_for_byte<
      headerless_memory_sink>();
}

TEST_CASE("the sink conformance check fails a sink that answers an outage with failed results",
          "[outbox][!shouldfail]") {
  idem::testing::sink_conformance::an_unavailable_sink_throws<outage_hiding_memory_sink>();
}

TEST_CASE("a sink that drops headers or hides outages still passes the cases of what it keeps",
          "[outbox]") {
  // Each flawed sink fails only where it is flawed: the check points at the broken promise.
  idem::testing::sink_conformance::the_batch_order_is_kept_for_each_partition_key_in_each_topic<
      headerless_memory_sink>();
  idem::testing::sink_conformance::an_acknowledged_message_is_read_back_byte_for_byte<
      outage_hiding_memory_sink>();
}
