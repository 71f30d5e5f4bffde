// Sinks for testing an outbox relay against any store's reader: one that records what it was
// handed and acknowledges it, and one whose answers a test scripts (fail or reject a message by
// id, fail everything, throw as an outage does). Both record every delivery, so a test can say
// what a consumer would have seen, duplicates included.
#pragma once

#include <idem/outbox/sink.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace idem::testing {

/// Acknowledges everything and remembers it: `delivered` in the order it was handed over.
struct recording_sink {
  std::vector<outbox_entry> delivered;
  std::size_t calls = 0;

  void publish(std::span<const outbox_entry> batch, std::span<sink_result> results) {
    ++calls;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      delivered.push_back(batch[i]);
      results[i].status = sink_status::acknowledged;
    }
  }

  /// The ids delivered, in order.
  std::vector<std::string> ids() const {
    std::vector<std::string> out;
    for (const outbox_entry& entry : delivered)
      out.push_back(entry.id);
    return out;
  }
  /// The payloads delivered for one partition key, in order.
  std::vector<std::string> payloads_of(const std::string& partition_key) const {
    std::vector<std::string> out;
    for (const outbox_entry& entry : delivered) {
      if (entry.message.partition_key == partition_key) out.push_back(entry.message.payload);
    }
    return out;
  }
};

/// A sink whose answers are scripted. By default it acknowledges, like recording_sink; then:
/// * fail(id, n): the next n sends of that id answer `failed` ("scripted failure n");
/// * reject(id): every send of that id answers `rejected`;
/// * down = true: publish throws std::runtime_error (an outage) and records nothing;
/// * fail_everything = true: every entry answers `failed`.
/// Following the Sink contract, once an entry of a partition key failed, the later entries of
/// that key in the batch are not sent and answer `failed` too.
struct scripted_sink {
  bool down = false;
  bool fail_everything = false;
  std::map<std::string, int> failures_left;
  std::map<std::string, std::string> rejections;
  /// What was acknowledged (what a consumer has), in order.
  std::vector<outbox_entry> delivered;
  /// Every entry handed over, answered or not, in order.
  std::vector<outbox_entry> offered;
  std::size_t calls = 0;
  std::size_t throws = 0;

  void fail(const std::string& id, int times) { failures_left[id] = times; }
  void reject(const std::string& id, std::string reason = "scripted rejection") {
    rejections[id] = std::move(reason);
  }

  void publish(std::span<const outbox_entry> batch, std::span<sink_result> results) {
    ++calls;
    if (down) {
      ++throws;
      throw std::runtime_error("scripted outage: the sink is unreachable");
    }
    std::vector<std::string> failed_keys;
    const auto key_failed = [&](const std::string& key) {
      for (const std::string& k : failed_keys)
        if (k == key) return true;
      return false;
    };
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const outbox_entry& entry = batch[i];
      offered.push_back(entry);
      if (key_failed(entry.message.partition_key)) {
        results[i] = {sink_status::failed, "held back behind an earlier failure of its key"};
        continue;
      }
      if (const auto found = rejections.find(entry.id); found != rejections.end()) {
        results[i] = {sink_status::rejected, found->second};
        continue;
      }
      auto left = failures_left.find(entry.id);
      if (fail_everything || (left != failures_left.end() && left->second > 0)) {
        const int n = left != failures_left.end() ? left->second-- : 0;
        results[i] = {sink_status::failed, "scripted failure " + std::to_string(n)};
        failed_keys.push_back(entry.message.partition_key);
        continue;
      }
      delivered.push_back(entry);
      results[i].status = sink_status::acknowledged;
    }
  }

  std::vector<std::string> payloads_of(const std::string& partition_key) const {
    std::vector<std::string> out;
    for (const outbox_entry& entry : delivered) {
      if (entry.message.partition_key == partition_key) out.push_back(entry.message.payload);
    }
    return out;
  }
};

}  // namespace idem::testing
