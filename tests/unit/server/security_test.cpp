// Security: scopes with no shared fallback, a size cap per stored response, and a codec that
// seals responses and recovery points before the store keeps them (AES-256-GCM here, through
// OpenSSL, so the transformation under test is a real one).
#include <catch2/catch.hpp>

#include <openssl/evp.h>
#include <openssl/rand.h>

#include <algorithm>
#include <array>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <idem/idem.hpp>
#include <idem/testing/faulty_store.hpp>

using namespace std::chrono_literals;

namespace {

struct memory_policies : idem::default_policies {
  using store = idem::locked_store;
  using clock = idem::manual_clock;
};

struct counted {
  std::shared_ptr<int> runs = std::make_shared<int>(0);
  std::shared_ptr<std::string> body_out = std::make_shared<std::string>("ok");
  std::string operator()(idem::handler_context& context, const std::string& body) const {
    ++*runs;
    const std::string charge =
        context.step("charge", [&] { return std::string("ch_card-4242-4242-4242-4242"); });
    return *body_out + " " + body + " " + charge;
  }
};

// ---- scopes --------------------------------------------------------------------------------

TEST_CASE("the empty scope is a scope of its own, never a fallback for the others", "[security]") {
  idem::locked_store store;
  counted handler;
  idem::idempotent<counted, memory_policies>::options parts;
  parts.store = store;
  idem::idempotent<counted, memory_policies> guarded{handler, std::move(parts)};

  // The same key in the empty scope, in "a" and in "ab" (whose concatenations with "bc", "c" and
  // "abc" are all "abc"): three records, three runs, no replay or mismatch across them.
  CHECK(guarded("", "abc", std::string("from the empty scope")).verdict() ==
        idem::verdict::executed);
  CHECK(guarded("a", "bc", std::string("from a")).verdict() == idem::verdict::executed);
  CHECK(guarded("ab", "c", std::string("from ab")).verdict() == idem::verdict::executed);
  CHECK(guarded("tenant", "abc", std::string("from tenant")).verdict() == idem::verdict::executed);
  CHECK(*handler.runs == 4);
  const auto now = guarded.clock().wall_now();
  CHECK(store.find("", "abc", now)->response.find("empty scope") != std::string::npos);
  CHECK(store.find("tenant", "abc", now)->response.find("tenant") != std::string::npos);
  CHECK_FALSE(store.find("", "bc", now));
  CHECK_FALSE(store.find("", "c", now));
  // A repeat in each scope replays its own response.
  CHECK(guarded("", "abc", std::string("from the empty scope")).verdict() ==
        idem::verdict::replayed);
  CHECK(guarded("tenant", "abc", std::string("from tenant")).value().find("tenant") !=
        std::string::npos);
  CHECK(*handler.runs == 4);
}

// ---- the size cap --------------------------------------------------------------------------

struct capped_policies : memory_policies {
  static constexpr std::size_t max_response_bytes = 64;
};

TEST_CASE(
    "a response over max_response_bytes is not stored, its caller is told, and repeats are not "
    "run again",
    "[security]") {
  idem::locked_store store;
  counted handler;
  *handler.body_out = std::string(100, 'x');
  idem::idempotent<counted, capped_policies>::options parts;
  parts.store = store;
  idem::idempotent<counted, capped_policies> guarded{handler, std::move(parts)};

  const auto first = guarded("tenant", "big", std::string("body"));
  CHECK(first.verdict() == idem::verdict::response_too_large);
  CHECK_FALSE(first.recorded());
  // The first caller keeps what the handler made.
  REQUIRE(first.has_value());
  CHECK(first.value().size() > 100);
  CHECK_THAT(std::string(first.message()), Catch::Matchers::Contains("max_response_bytes (64)") &&
                                               Catch::Matchers::Contains("not stored"));
  // What the store holds is small: the refusal, not the response.
  const auto held = store.find("tenant", "big", guarded.clock().wall_now());
  REQUIRE(held);
  CHECK(held->state == idem::record_state::completed);
  CHECK(held->response.size() < 64);
  CHECK(held->response.find(std::string(100, 'x')) == std::string::npos);

  for (int repeat = 0; repeat < 2; ++repeat) {
    const auto again = guarded("tenant", "big", std::string("body"));
    CHECK(again.verdict() == idem::verdict::response_too_large);
    CHECK_FALSE(again.has_value());
    CHECK(again.http_status() == 500);
    CHECK_THAT(std::string(again.message()), Catch::Matchers::Contains("not run again"));
  }
  CHECK(*handler.runs == 1);

  // Under the cap, as usual.
  *handler.body_out = "small";
  CHECK(guarded("tenant", "small", std::string("b")).verdict() == idem::verdict::executed);
  CHECK(guarded("tenant", "small", std::string("b")).verdict() == idem::verdict::replayed);
}

TEST_CASE("the inbox caps stored results too", "[security]") {
  idem::inbox<capped_policies> consumed;
  int runs = 0;
  const auto big = [&] {
    ++runs;
    return std::string(200, 'r');
  };
  CHECK(consumed.deduplicate("orders", "evt-1", big).verdict() ==
        idem::verdict::response_too_large);
  CHECK(consumed.deduplicate("orders", "evt-1", big).verdict() ==
        idem::verdict::response_too_large);
  CHECK(runs == 1);
}

// ---- sealing -------------------------------------------------------------------------------

// AES-256-GCM: a fresh 12-byte nonce per seal, then the ciphertext, then the 16-byte tag.
class aes_gcm_codec {
 public:
  explicit aes_gcm_codec(std::array<unsigned char, 32> key = {}) : key_(key) {}

  void seal(std::string_view plain, std::string& out) const {
    std::array<unsigned char, 12> nonce{};
    if (RAND_bytes(nonce.data(), static_cast<int>(nonce.size())) != 1) {
      throw std::runtime_error("RAND_bytes failed");
    }
    const cipher_context context;
    int length = 0;
    std::string sealed(nonce.size() + plain.size() + 16, '\0');
    std::copy(nonce.begin(), nonce.end(), sealed.begin());
    auto* text = reinterpret_cast<unsigned char*>(sealed.data() + nonce.size());
    if (EVP_EncryptInit_ex(context.get(), EVP_aes_256_gcm(), nullptr, key_.data(), nonce.data()) !=
            1 ||
        EVP_EncryptUpdate(context.get(), text, &length,
                          reinterpret_cast<const unsigned char*>(plain.data()),
                          static_cast<int>(plain.size())) != 1 ||
        EVP_EncryptFinal_ex(context.get(), text + length, &length) != 1 ||
        EVP_CIPHER_CTX_ctrl(context.get(), EVP_CTRL_GCM_GET_TAG, 16, text + plain.size()) != 1) {
      throw std::runtime_error("AES-GCM sealing failed");
    }
    out += sealed;
  }

  void open(std::string_view sealed, std::string& out) const {
    if (sealed.size() < 28) throw idem::codec_error("sealed bytes are too short");
    const auto* bytes = reinterpret_cast<const unsigned char*>(sealed.data());
    const std::size_t size = sealed.size() - 28;
    std::string plain(size, '\0');
    const cipher_context context;
    int length = 0;
    std::array<unsigned char, 16> tag{};
    std::copy(bytes + 12 + size, bytes + 28 + size, tag.begin());
    if (EVP_DecryptInit_ex(context.get(), EVP_aes_256_gcm(), nullptr, key_.data(), bytes) != 1 ||
        EVP_DecryptUpdate(context.get(), reinterpret_cast<unsigned char*>(plain.data()), &length,
                          bytes + 12, static_cast<int>(size)) != 1 ||
        EVP_CIPHER_CTX_ctrl(context.get(), EVP_CTRL_GCM_SET_TAG, 16, tag.data()) != 1 ||
        EVP_DecryptFinal_ex(context.get(), reinterpret_cast<unsigned char*>(plain.data()) + length,
                            &length) != 1) {
      throw idem::codec_error("the stored bytes do not open: another key, or tampered");
    }
    out += plain;
  }

 private:
  struct cipher_context {
    cipher_context() : raw(EVP_CIPHER_CTX_new()) {
      if (raw == nullptr) throw std::bad_alloc();
    }
    cipher_context(const cipher_context&) = delete;
    cipher_context& operator=(const cipher_context&) = delete;
    ~cipher_context() { EVP_CIPHER_CTX_free(raw); }
    EVP_CIPHER_CTX* get() const noexcept { return raw; }
    EVP_CIPHER_CTX* raw;
  };
  std::array<unsigned char, 32> key_;
};

static_assert(idem::ResponseCodec<aes_gcm_codec>);

struct sealed_policies : memory_policies {
  using response_codec = aes_gcm_codec;
};

TEST_CASE("a sealing codec keeps responses and recovery points encrypted in the store",
          "[security]") {
  idem::locked_store store;
  counted handler;
  idem::idempotent<counted, sealed_policies>::options parts;
  parts.store = store;
  std::array<unsigned char, 32> key{};
  key[0] = 7;
  parts.response_codec = aes_gcm_codec{key};
  idem::idempotent<counted, sealed_policies> guarded{handler, std::move(parts)};

  const auto first = guarded("tenant", "k", std::string("pay"));
  REQUIRE(first.verdict() == idem::verdict::executed);
  CHECK(first.value() == "ok pay ch_card-4242-4242-4242-4242");
  const auto held = store.find("tenant", "k", guarded.clock().wall_now());
  REQUIRE(held);
  // Neither the response nor the card number in it is in the store as it was.
  CHECK(held->response.find("4242") == std::string::npos);
  CHECK(held->response.find("ok pay") == std::string::npos);
  CHECK(held->response.size() == first.value().size() + 28);

  const auto again = guarded("tenant", "k", std::string("pay"));
  CHECK(again.verdict() == idem::verdict::replayed);
  CHECK(again.value() == first.value());
  CHECK(*handler.runs == 1);

  // A record tampered with in the store does not open: the replay fails loudly.
  {
    idem::locked_store other;
    idem::idempotent<counted, sealed_policies>::options tampered_parts;
    tampered_parts.store = other;
    tampered_parts.response_codec = aes_gcm_codec{key};
    idem::idempotent<counted, sealed_policies> reader{handler, std::move(tampered_parts)};
    const auto now = reader.clock().wall_now();
    const auto claimed = other.claim({"tenant", "t", held->fingerprint, now, 30s, 24h});
    std::string bytes = held->response;
    bytes[14] = static_cast<char>(bytes[14] ^ 1);
    REQUIRE(other.complete({"tenant", "t", claimed.fence}, bytes, now));
    CHECK_THROWS_AS(reader("tenant", "t", std::string("pay")), idem::codec_error);
  }
}

TEST_CASE("a sealed recovery point is opened for the attempt that takes the claim over",
          "[security]") {
  struct charging {
    std::shared_ptr<int> charges = std::make_shared<int>(0);
    std::string operator()(idem::handler_context& context, const std::string&) const {
      const std::string id = context.step("charge", [&] {
        ++*charges;
        return std::string("ch_secret_4242");
      });
      return "paid " + id;
    }
  };
  struct faulty_sealed : sealed_policies {
    using store = idem::testing::faulty_store<idem::locked_store>;
  };
  using store_type = idem::testing::faulty_store<idem::locked_store>;
  store_type store;
  charging handler;
  idem::idempotent<charging, faulty_sealed>::options parts;
  parts.store = store;
  idem::idempotent<charging, faulty_sealed> guarded{handler, std::move(parts)};

  // The charge is recorded, then the completion is lost: the claim stays in progress with its
  // recovery point, as after a crash.
  store.inject({idem::testing::store_operation::complete, 0,
                idem::testing::fault_timing::before_store, store_type::mode::unavailable});
  const auto first = guarded("tenant", "k", std::string("pay"));
  CHECK_FALSE(first.recorded());
  const auto held = store.inner().find("tenant", "k", guarded.clock().wall_now());
  REQUIRE(held);
  REQUIRE(held->state == idem::record_state::in_progress);
  CHECK_FALSE(held->recovery.empty());
  CHECK(held->recovery.find("ch_secret") == std::string::npos);
  CHECK(held->recovery.find("charge") == std::string::npos);

  guarded.clock().advance(31s);
  const auto resumed = guarded("tenant", "k", std::string("pay"));
  CHECK(resumed.verdict() == idem::verdict::executed);
  CHECK(resumed.resumed());
  CHECK(resumed.value() == "paid ch_secret_4242");
  CHECK(*handler.charges == 1);
}

TEST_CASE("a sealing resumable wrapper keeps its request sealed from the claim on", "[security]") {
  struct charging {
    std::shared_ptr<int> charges = std::make_shared<int>(0);
    std::string operator()(idem::handler_context& context, const std::string& body) const {
      const std::string id = context.step("charge", [&] {
        ++*charges;
        return std::string("ch_1");
      });
      return id + " for " + body;
    }
  };
  struct faulty_sealed : sealed_policies {
    using store = idem::testing::faulty_store<idem::locked_store>;
  };
  using store_type = idem::testing::faulty_store<idem::locked_store>;
  store_type store;
  charging handler;
  idem::idempotent<charging, faulty_sealed>::options parts;
  parts.store = store;
  parts.max_kept_request_bytes = 4096;
  parts.name = "payments";
  idem::idempotent<charging, faulty_sealed> guarded{handler, std::move(parts)};

  // A new claim starts from the kept request in plain bytes (never opened as if sealed), and the
  // store keeps it sealed; the completion is lost, so the record stays to be read.
  store.inject({idem::testing::store_operation::complete, 0,
                idem::testing::fault_timing::before_store, store_type::mode::unavailable});
  const auto first = guarded("tenant", "k", std::string("card-5555-5555"));
  REQUIRE(first.verdict() == idem::verdict::executed);
  CHECK(first.value() == "ch_1 for card-5555-5555");
  CHECK_FALSE(first.recorded());
  const auto held = store.inner().find("tenant", "k", guarded.clock().wall_now());
  REQUIRE(held);
  CHECK(held->recovery.find("card-5555") == std::string::npos);
  std::string plain;
  guarded.settings().response_codec.open(held->recovery, plain);
  CHECK(plain.starts_with(idem::detail::kept_request("payments", "card-5555-5555")));

  guarded.clock().advance(31s);
  const auto resumed = guarded("tenant", "k", std::string("card-5555-5555"));
  CHECK(resumed.verdict() == idem::verdict::executed);
  CHECK(resumed.resumed());
  CHECK(*handler.charges == 1);
}

}  // namespace

// ---- keys in telemetry ---------------------------------------------------------------------

namespace {

struct http_answer {
  int status = 200;
};

struct observed_policies : idem::default_policies {
  using clock = idem::manual_clock;
  using observer = idem::callback_observer;
};

}  // namespace

TEST_CASE("observers see a stable hash of the key, never the key", "[security]") {
  std::vector<std::string> seen_keys;
  std::string logged;
  int calls = 0;
  auto call = [&](const idem::attempt_context&) { return http_answer{++calls < 3 ? 503 : 200}; };
  idem::retrying<decltype(call), observed_policies>::options parts;
  parts.seed = 42;
  parts.observer.attempt = [&](const idem::attempt_event& e) {
    seen_keys.push_back(e.key.str());
    logged += "attempt " + e.key.str() + "\n";
  };
  parts.observer.delay = [&](const idem::delay_event& e) { seen_keys.push_back(e.key.str()); };
  parts.observer.finish = [&](const idem::finish_event& e) { seen_keys.push_back(e.key.str()); };
  idem::retrying<decltype(call), observed_policies> retried{call, parts};

  const auto outcome = retried();
  REQUIRE(outcome.verdict() == idem::retry_verdict::succeeded);
  const std::string key(outcome.key());
  REQUIRE(key.size() >= 16);
  REQUIRE(seen_keys.size() == 6);  // three attempts, two waits, one finish
  for (const std::string& shown : seen_keys) {
    CHECK(shown == seen_keys.front());  // one operation, one redacted key: logs correlate
    CHECK(shown.find(key) == std::string::npos);
    CHECK(shown.find(key.substr(0, 8)) == std::string::npos);
  }
  CHECK(logged.find(key) == std::string::npos);
  // The text is "key:" and 16 hex digits, the same in every process for the same key.
  CHECK(seen_keys.front().size() == 20);
  CHECK(seen_keys.front().rfind("key:", 0) == 0);
  CHECK(idem::redacted_key{key}.str() == seen_keys.front());
  CHECK(idem::redacted_key{"other"}.str() != seen_keys.front());
  // Known answer: SHA-256("idem redacted key v1" + "order-1"), its first 8 bytes.
  CHECK(idem::redacted_key{"order-1"}.str() == "key:7b7584dcd55134aa");
  CHECK(idem::redacted_key{""}.str() == "key:-");
}

// ---- per-scope record caps -----------------------------------------------------------------

namespace {

template <class Store>
struct capped_store_policies : idem::default_policies {
  using clock = idem::manual_clock;
  using store = Store;
};

template <class Store>
void one_tenant_cannot_fill_the_store(Store store) {
  counted handler;
  using policies = capped_store_policies<Store>;
  typename idem::idempotent<counted, policies>::options options;
  options.store = store;
  idem::idempotent<counted, policies> guarded{handler, std::move(options)};

  CHECK(guarded("tenant-a", "k1", std::string("x")).verdict() == idem::verdict::executed);
  CHECK(guarded("tenant-a", "k2", std::string("x")).verdict() == idem::verdict::executed);
  const auto refused = guarded("tenant-a", "k3", std::string("x"));
  CHECK(refused.verdict() == idem::verdict::store_full);
  CHECK(refused.http_status() == 503);
  CHECK(*handler.runs == 2);
  // Its records still replay; other tenants are not affected.
  CHECK(guarded("tenant-a", "k1", std::string("x")).verdict() == idem::verdict::replayed);
  CHECK(guarded("tenant-b", "k1", std::string("x")).verdict() == idem::verdict::executed);
  CHECK(guarded("", "k1", std::string("x")).verdict() == idem::verdict::executed);
  // Once its records expire, the tenant has room again, swept or not.
  guarded.clock().advance(24h);
  CHECK(guarded("tenant-a", "k3", std::string("x")).verdict() == idem::verdict::executed);
  CHECK(*handler.runs == 5);
}

}  // namespace

TEST_CASE("a scope at max_records_per_scope gets 503 and leaves the others room - memory_store",
          "[security]") {
  idem::memory_store::options limits;
  limits.max_records_per_scope = 2;
  one_tenant_cannot_fill_the_store(idem::memory_store{limits});
}

TEST_CASE("a scope at max_records_per_scope gets 503 and leaves the others room - locked_store",
          "[security]") {
  idem::locked_store::options limits;
  limits.max_records_per_scope = 2;
  one_tenant_cannot_fill_the_store(idem::locked_store{limits});
}
