// SipHash-1-3, the keyed hash the memory store buckets by: keyed, and the same value streamed as
// in one shot.
#include <catch2/catch.hpp>

#include <idem/store/memory/detail/siphash.hpp>

#include <string>
#include <string_view>

TEST_CASE("the bucketing hash is keyed: another key scatters the same inputs differently",
          "[memory_store]") {
  const idem::detail::siphash_key one{0x0706050403020100ULL, 0x0f0e0d0c0b0a0908ULL};
  const idem::detail::siphash_key two{1, 2};
  auto hash = [](idem::detail::siphash_key key, std::string_view text) {
    idem::detail::siphash13 h(key);
    h.update(text);
    return h.finish();
  };
  int same = 0;
  for (int i = 0; i < 1000; ++i) {
    const std::string text = "key-" + std::to_string(i);
    if ((hash(one, text) & 63) == (hash(two, text) & 63)) ++same;
  }
  // Independent keys agree on a 6-bit bucket about 1 time in 64.
  CHECK(same < 50);
  // Streaming in pieces gives the one-shot value.
  idem::detail::siphash13 pieces(one);
  pieces.update("key");
  pieces.update("-12345678901");
  CHECK(pieces.finish() == hash(one, "key-12345678901"));
}

TEST_CASE("SipHash-1-3 one-shot and streamed agree at every length and split", "[memory_store]") {
  const idem::detail::siphash_key key{0x0706050403020100ULL, 0x0f0e0d0c0b0a0908ULL};
  std::string text;
  for (int length = 0; length < 80; ++length) {
    for (int split = 0; split <= length; split += 3) {
      idem::detail::siphash13 streamed(key);
      streamed.update(std::string_view(text).substr(0, static_cast<std::size_t>(split)));
      streamed.update(std::string_view(text).substr(static_cast<std::size_t>(split)));
      CHECK(streamed.finish() == idem::detail::siphash13::hash(key, text.data(), text.size()));
    }
    text.push_back(static_cast<char>(length * 7 + 1));
  }
}
