// What the two translation units of the single-header adapter test share.
#ifndef IDEM_TESTS_SINGLE_HEADER_ADAPTERS_HPP
#define IDEM_TESTS_SINGLE_HEADER_ADAPTERS_HPP

#include <string_view>

namespace idem {
class digest;
}

namespace idem_single_header {

idem::digest digest_from_single_header_first(std::string_view text);
bool adapter_first_translation_unit_sees_one_digest();

}  // namespace idem_single_header

#endif  // IDEM_TESTS_SINGLE_HEADER_ADAPTERS_HPP
