// Fuzz target: If-Match lists (idem/http/conditional.hpp), read from requests that change a
// resource, before anything else is done with them.
//
// Input: the field values, one per line ('\n' separates fields).
//
// Properties, for every input:
//  * parse_if_match_fields never throws; a malformed list says why, holds no tags, never holds;
//  * "*" holds for any current version and for no missing resource, and stands alone;
//  * every tag read is made of entity-tag characters, and written again (format_etag) and read
//    back, is the same tag;
//  * the list holds for a current version exactly when a strong tag read equals it;
//  * spaces and tabs around a field change nothing.
#include <idem/http/conditional.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_support.hpp"

namespace {

using idem_fuzz::fuzz_require;
namespace http = idem::http;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  idem_fuzz::input_reader in(data, size);
  const std::string_view text = in.rest();
  std::vector<std::string_view> fields;
  std::size_t start = 0;
  while (true) {
    const std::size_t end = text.find('\n', start);
    fields.push_back(text.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) break;
    start = end + 1;
  }

  const http::parsed_if_match parsed = http::parse_if_match_fields(fields);
  fuzz_require(parsed.present(), "a field is there");
  if (!parsed) {
    fuzz_require(!parsed.message().empty(), "a refusal says why");
    fuzz_require(parsed.tags().empty() && !parsed.any(), "a refusal holds nothing");
    fuzz_require(!http::if_match_holds(parsed, "v1"), "a malformed condition never holds");
    return 0;
  }
  fuzz_require(parsed.message().empty(), "a list has no refusal message");
  if (parsed.any()) {
    fuzz_require(parsed.tags().empty(), "* stands alone");
    fuzz_require(http::if_match_holds(parsed, "anything"), "* holds for any version");
    fuzz_require(!http::if_match_holds(parsed, std::nullopt), "* needs the resource");
    return 0;
  }
  fuzz_require(!parsed.tags().empty(), "a list names a tag");
  for (const http::entity_tag& tag : parsed.tags()) {
    const std::string written = http::format_etag(tag.opaque, tag.weak);
    const http::parsed_if_match again = http::parse_if_match(written);
    fuzz_require(again && again.tags().size() == 1 && again.tags()[0] == tag,
                 "a tag written reads back");
    fuzz_require(
        http::if_match_holds(parsed, tag.opaque) ==
            [&] {
              for (const http::entity_tag& other : parsed.tags())
                if (!other.weak && other.opaque == tag.opaque) return true;
              return false;
            }(),
        "holds exactly when a strong tag is the version");
  }
  std::vector<std::string> spaced;
  for (const std::string_view field : fields)
    spaced.push_back(" \t" + std::string(field) + "\t ");
  const http::parsed_if_match around = http::parse_if_match_fields(spaced);
  fuzz_require(around && around.tags().size() == parsed.tags().size(),
               "spaces around change nothing");
  return 0;
}
