// Fuzz target: RFC 8785 canonical JSON (idem/core/fingerprint/canonicalize_json.hpp) and the
// canonical_json fingerprint (idem/core/fingerprint/canonical_json.hpp), which read request
// bodies clients send.
//
// Input: one byte whose low two bits say how many excluded JSON Pointers follow (each a length
// byte and its bytes), then the JSON text.
//
// Properties, for every input:
//  * the only exceptions are json_error for the document (with an offset inside it) and
//    std::invalid_argument for a pointer; a failed call leaves its output as it was;
//  * canonicalization is idempotent: canon(canon(x)) == canon(x), with or without the same
//    exclusions, and its output is valid JSON;
//  * whitespace around the document changes nothing;
//  * the canonical_json fingerprint of x equals the inner fingerprint of canon(x), and so the
//    fingerprint of canon(x) as well.
#include <idem/core/fingerprint/canonical_json.hpp>
#include <idem/core/fingerprint/canonicalize_json.hpp>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_support.hpp"

namespace {

using idem_fuzz::fuzz_require;

idem::request_view post(std::string_view body) {
  idem::request_view view;
  view.method = "POST";
  view.target = "/fuzz";
  view.body = body;
  return view;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  idem_fuzz::input_reader in(data, size);
  std::vector<std::string> excluded;
  for (int count = in.byte() & 3; count > 0; --count)
    excluded.emplace_back(in.piece());
  const std::string_view json = in.rest();

  std::string canonical = "kept";
  try {
    idem::canonicalize_json(json, canonical, excluded);
  } catch (const idem::json_error& error) {
    fuzz_require(error.offset() <= json.size(), "a json_error's offset lies inside the input");
    fuzz_require(canonical == "kept", "a refused document leaves the output as it was");
    return 0;
  } catch (const std::invalid_argument&) {
    fuzz_require(!excluded.empty(), "only an excluded pointer can be refused as an argument");
    fuzz_require(canonical == "kept", "a refused pointer leaves the output as it was");
    return 0;
  }
  fuzz_require(canonical.starts_with("kept"), "canonicalize_json appends");
  canonical.erase(0, 4);

  std::string again;
  try {
    again = idem::canonicalize_json(canonical);
  } catch (const idem::json_error&) {
    fuzz_require(false, "canonical output is valid JSON");
  }
  fuzz_require(again == canonical, "canonicalization is idempotent");
  fuzz_require(idem::canonicalize_json(canonical, excluded) == canonical,
               "canonical output has nothing left to exclude");

  const std::string padded = " \n\t" + std::string(json) + "\r\n ";
  fuzz_require(idem::canonicalize_json(padded, excluded) == canonical,
               "whitespace around the document changes nothing");

  if (!json.empty()) {
    const idem::canonical_json<> fingerprint{excluded};
    const idem::digest of_input = fingerprint(post(json));
    fuzz_require(of_input == fingerprint.inner(post(canonical)),
                 "the fingerprint is the inner fingerprint of the canonical form");
    fuzz_require(of_input == fingerprint(post(canonical)),
                 "a body and its canonical form have one fingerprint");
  }
  return 0;
}
