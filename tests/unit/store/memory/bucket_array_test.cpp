// The memory store's bucket array: zeroed, on huge pages when large, and sized two buckets a
// record, a power of two a shard.
#include <catch2/catch.hpp>

#include <idem/store/memory/detail/bucket_array.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

TEST_CASE("a bucket array of a huge page or more is aligned to one and advised for huge pages",
          "[memory_store]") {
  using bucket_array = idem::detail::memory::bucket_array;
  const bucket_array small(1000);
  for (std::size_t i = 0; i < 1000; ++i)
    REQUIRE(small.data()[i].load() == 0);

  constexpr std::size_t count = bucket_array::huge_page / sizeof(std::uintptr_t);
  const bucket_array big(count);
  const auto address = reinterpret_cast<std::uintptr_t>(big.data());
  CHECK(address % bucket_array::huge_page == 0);
  for (std::size_t i = 0; i < count; ++i)
    REQUIRE(big.data()[i].load() == 0);
  big.data()[count - 1].store(7);
  CHECK(big.data()[count - 1].load() == 7);

  // Where the kernel has transparent huge pages, the mapping that holds the array carries the
  // advice: "hg" (VM_HUGEPAGE) among its VmFlags in /proc/self/smaps.
  if (!std::filesystem::exists("/sys/kernel/mm/transparent_hugepage/enabled")) {
    WARN("no transparent huge pages in this kernel: the advice is not checked");
    return;
  }
  std::ifstream smaps("/proc/self/smaps");
  REQUIRE(smaps);
  std::string line;
  bool inside = false;
  bool advised = false;
  bool found = false;
  while (std::getline(smaps, line)) {
    unsigned long long from = 0;
    unsigned long long to = 0;
    char dash = 0;
    std::istringstream words(line);
    if (words >> std::hex >> from >> dash >> to && dash == '-') {
      inside = from <= address && address + bucket_array::huge_page <= to;
      found = found || inside;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      advised = line.find(" hg") != std::string::npos;
    }
  }
  REQUIRE(found);
  CHECK(advised);
}

TEST_CASE("a shard's bucket count is two a record, a power of two, at least 16", "[memory_store]") {
  using idem::detail::memory::buckets_per_shard;
  CHECK(buckets_per_shard(0, 64) == 16);
  CHECK(buckets_per_shard(512, 64) == 16);  // 16 a shard hold 512 records at two a record
  CHECK(buckets_per_shard(513, 64) == 32);
  CHECK(buckets_per_shard(65536, 64) == 2048);
  CHECK(buckets_per_shard(65537, 64) == 4096);
  CHECK(buckets_per_shard(std::size_t{1} << 20, 64) == std::size_t{1} << 15);
  for (std::size_t expected = 1; expected < 5'000'000; expected = expected * 3 + 1) {
    const std::size_t per_shard = buckets_per_shard(expected, 64);
    CAPTURE(expected);
    CHECK((per_shard & (per_shard - 1)) == 0);
    CHECK(per_shard * 64 >= 2 * expected);
    CHECK((per_shard == 16 || per_shard * 64 < 4 * expected));
  }
  // Capped at 2^30 a shard, whatever is asked for.
  CHECK(buckets_per_shard(~std::size_t{0}, 64) == std::size_t{1} << 30);
}
