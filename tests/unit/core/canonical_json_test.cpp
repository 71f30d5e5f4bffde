#include <catch2/catch.hpp>
#include <idem/core/fingerprint/canonicalize_json.hpp>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

using idem::canonicalize_json;

std::string canonical(std::string_view json) {
  return canonicalize_json(json);
}

std::string canonical(std::string_view json, const std::vector<std::string>& excluded) {
  return canonicalize_json(json, excluded);
}

// Checks that `json` is refused with a json_error at `offset` whose message contains `says`.
void require_json_error(std::string_view json, std::size_t offset, std::string_view says) {
  INFO("input: " << json);
  try {
    const std::string out = canonical(json);
    FAIL("accepted, canonical form: " << out);
  } catch (const idem::json_error& error) {
    INFO("message: " << error.what());
    CHECK(error.offset() == offset);
    CHECK(std::string_view(error.what()).find(says) != std::string_view::npos);
  }
}

// The shortest JSON number text that reads back as the double with these IEEE 754 bits.
std::string number_text(std::uint64_t bits) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.17g", std::bit_cast<double>(bits));
  return buffer;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// RFC 8785's own examples.

TEST_CASE("RFC 8785 3.2.2: the primitive data types example canonicalizes as the RFC shows") {
  const std::string_view input = R"({
  "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
})";
  const std::string_view expected =
      R"({"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],)"
      "\"string\":\"\xe2\x82\xac$\\u000f\\nA'B\\\"\\\\\\\\\\\"/\"}";
  CHECK(canonical(input) == expected);
}

TEST_CASE("RFC 8785 3.2.3: members are sorted by their names as UTF-16 code units") {
  const std::string_view input = R"({
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
})";
  const std::string_view expected =
      "{\"\\r\":\"Carriage Return\","
      "\"1\":\"One\","
      "\"\xc2\x80\":\"Control\","                               // U+0080
      "\"\xc3\xb6\":\"Latin Small Letter O With Diaeresis\","   // U+00F6
      "\"\xe2\x82\xac\":\"Euro Sign\","                         // U+20AC
      "\"\xf0\x9f\x98\x80\":\"Emoji: Grinning Face\","          // U+1F600
      "\"\xef\xac\xb3\":\"Hebrew Letter Dalet With Dagesh\"}";  // U+FB33
  CHECK(canonical(input) == expected);
}

TEST_CASE("RFC 8785 appendix B: numbers are written as ECMAScript's Number::toString writes them") {
  struct sample {
    std::uint64_t bits;
    std::string_view expected;
  };
  // The RFC's table, less NaN and Infinity, which JSON cannot carry (rejected below).
  const sample samples[] = {
      {0x0000000000000000, "0"},
      {0x8000000000000000, "0"},
      {0x0000000000000001, "5e-324"},
      {0x8000000000000001, "-5e-324"},
      {0x7fefffffffffffff, "1.7976931348623157e+308"},
      {0xffefffffffffffff, "-1.7976931348623157e+308"},
      {0x4340000000000000, "9007199254740992"},
      {0xc340000000000000, "-9007199254740992"},
      {0x4430000000000000, "295147905179352830000"},
      {0x44b52d02c7e14af5, "9.999999999999997e+22"},
      {0x44b52d02c7e14af6, "1e+23"},
      {0x44b52d02c7e14af7, "1.0000000000000001e+23"},
      {0x444b1ae4d6e2ef4e, "999999999999999700000"},
      {0x444b1ae4d6e2ef4f, "999999999999999900000"},
      {0x444b1ae4d6e2ef50, "1e+21"},
      {0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
      {0x3eb0c6f7a0b5ed8d, "0.000001"},
      {0x41b3de4355555553, "333333333.3333332"},
      {0x41b3de4355555554, "333333333.33333325"},
      {0x41b3de4355555555, "333333333.3333333"},
      {0x41b3de4355555556, "333333333.3333334"},
      {0x41b3de4355555557, "333333333.33333343"},
      {0xbecbf647612f3696, "-0.0000033333333333333333"},
      {0x43143ff3c1cb0959, "1424953923781206.2"},
  };
  for (const sample& s : samples) {
    const std::string input = number_text(s.bits);
    INFO("bits " << std::hex << s.bits << ", input " << input);
    CHECK(canonical(input) == s.expected);
  }
}

// ---------------------------------------------------------------------------------------------
// Numbers.

TEST_CASE("numbers switch to exponent notation from 1e21 up and below 1e-6") {
  CHECK(canonical("1e20") == "100000000000000000000");
  CHECK(canonical("1e21") == "1e+21");
  CHECK(canonical("123456789e20") == "1.23456789e+28");
  CHECK(canonical("0.000001") == "0.000001");
  CHECK(canonical("1e-7") == "1e-7");
  CHECK(canonical("1.5e-7") == "1.5e-7");
  CHECK(canonical("-0.0000015") == "-0.0000015");
  CHECK(canonical("-1.5E-7") == "-1.5e-7");
}

TEST_CASE("numbers with an integral value print as integers") {
  CHECK(canonical("1e2") == "100");
  CHECK(canonical("1.0") == "1");
  CHECK(canonical("100E-2") == "1");
  CHECK(canonical("-0") == "0");
  CHECK(canonical("-0.0e+5") == "0");
  CHECK(canonical("12.50") == "12.5");
  CHECK(canonical("9007199254740993") == "9007199254740992");  // rounds to the nearest double
}

TEST_CASE("a number too small for a double reads as 0, as in ECMAScript") {
  CHECK(canonical("1e-400") == "0");
  CHECK(canonical("-2e-324") == "0");
  CHECK(canonical("3e-324") == "5e-324");
}

// ---------------------------------------------------------------------------------------------
// Strings.

TEST_CASE("strings escape only the quote, the backslash and controls, in lower-case hex") {
  CHECK(canonical(R"("\u0000\u0001\u001F\u007f")") == "\"\\u0000\\u0001\\u001f\x7f\"");
  CHECK(canonical(R"("\b\t\n\f\r")") == R"("\b\t\n\f\r")");
  CHECK(canonical(R"("\u0008\u0009\u000A\u000C\u000D")") == R"("\b\t\n\f\r")");
  CHECK(canonical(R"("\u000b\u001e")") == R"("\u000b\u001e")");
  CHECK(canonical(R"("a\"b\\c")") == R"("a\"b\\c")");
  CHECK(canonical(R"("\/</script>")") == R"("/</script>")");
}

TEST_CASE("escaped and literal spellings of a character canonicalize alike") {
  CHECK(canonical(R"("\u00e9\u20AC\ud83d\ude00")") == "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"");
  CHECK(canonical("\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"") ==
        "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"");
  CHECK(canonical(R"({"\u0041":"\u0042"})") == R"({"A":"B"})");
}

TEST_CASE("Unicode noncharacters are accepted and kept") {
  // U+FFFF and U+10FFFF: I-JSON forbids them, but their canonical form is well defined.
  CHECK(canonical(R"("\uffff\udbff\udfff")") == "\"\xef\xbf\xbf\xf4\x8f\xbf\xbf\"");
}

// ---------------------------------------------------------------------------------------------
// Structure and order.

TEST_CASE("a name above U+FFFF sorts before one in U+E000..U+FFFF, as in UTF-16, not UTF-8") {
  // In UTF-8 (and code point order) U+E000 < U+10000; in UTF-16, 0xD800 0xDC00 < 0xE000.
  CHECK(canonical(R"({"\ue000":1,"\ud800\udc00":2,"\uffff":3,"\ud83d\ude00":4})") ==
        "{\"\xf0\x90\x80\x80\":2,\"\xf0\x9f\x98\x80\":4,\"\xee\x80\x80\":1,\"\xef\xbf\xbf\":3}");
}

TEST_CASE("a name sorts after the names that are prefixes of it") {
  CHECK(canonical(R"({"ab":1,"":2,"a":3,"b":4,"B":5})") == R"({"":2,"B":5,"a":3,"ab":1,"b":4})");
}

TEST_CASE("a large object's members are sorted by UTF-16 code units whatever their input order") {
  // Names from characters on both sides of the places UTF-8 and UTF-16 order differ, in objects
  // large enough that the sort is not only its insertion sort for short runs.
  struct character {
    std::string_view utf8;
    std::u16string_view utf16;
  };
  static constexpr character alphabet[] = {
      {"a", u"a"},
      {"B", u"B"},
      {"\xc3\xa9", u"\u00e9"},
      {"\xe2\x82\xac", u"\u20ac"},
      {"\xee\x80\x80", u"\ue000"},
      {"\xef\xbf\xbf", u"\uffff"},
      {"\xf0\x90\x80\x80", u"\U00010000"},
      {"\xf0\x9f\x98\x80", u"\U0001F600"},
  };
  std::mt19937_64 rng(8785);
  for (const std::size_t wanted : {17u, 100u, 700u}) {
    std::vector<std::pair<std::u16string, std::string>> names;  // (UTF-16, UTF-8)
    std::set<std::string> seen;
    while (names.size() < wanted) {
      std::u16string utf16;
      std::string utf8;
      for (std::size_t length = rng() % 5; length > 0; --length) {
        const character& c = alphabet[rng() % std::size(alphabet)];
        utf16 += c.utf16;
        utf8 += c.utf8;
      }
      if (seen.insert(utf8).second) names.emplace_back(utf16, utf8);
    }
    std::shuffle(names.begin(), names.end(), rng);
    std::string input = "{";
    for (std::size_t i = 0; i < names.size(); ++i) {
      input += (i == 0 ? "\"" : ",\"") + names[i].second + "\":" + std::to_string(i);
    }
    input += "}";
    std::vector<std::pair<std::u16string, std::string>> sorted = names;
    std::sort(sorted.begin(), sorted.end());  // by UTF-16 code units, first
    std::string expected = "{";
    for (const auto& [utf16, utf8] : sorted) {
      const auto index =
          std::find(names.begin(), names.end(), std::pair(utf16, utf8)) - names.begin();
      expected += (expected.size() == 1 ? "\"" : ",\"") + utf8 + "\":" + std::to_string(index);
    }
    expected += "}";
    INFO(wanted << " members");
    CHECK(canonical(input) == expected);
  }
}

TEST_CASE("member order and whitespace do not change the canonical form") {
  const std::string expected = R"({"a":1,"b":[true,false,null],"c":{"d":"x","e":2.5}})";
  CHECK(canonical(R"({"a":1,"b":[true,false,null],"c":{"d":"x","e":2.5}})") == expected);
  CHECK(canonical(R"({"c":{"e":2.5,"d":"x"},"b":[true,false,null],"a":1})") == expected);
  CHECK(canonical(" \t\r\n{ \"b\" : [ true , false , null ] ,\n\t\"c\" : { \"e\" : 25e-1 , "
                  "\"d\" : \"x\" } , \"a\" : 1.00 }\n ") == expected);
}

TEST_CASE("objects are sorted at every depth and arrays keep their order") {
  CHECK(canonical(R"([{"z":[{"y":1,"x":2}],"a":0},3,2,1,[{"b":[],"a":{}}]])") ==
        R"([{"a":0,"z":[{"x":2,"y":1}]},3,2,1,[{"a":{},"b":[]}]])");
}

TEST_CASE("a scalar is a whole document") {
  CHECK(canonical(" 42 ") == "42");
  CHECK(canonical("\"text\"") == "\"text\"");
  CHECK(canonical("null") == "null");
  CHECK(canonical("true") == "true");
  CHECK(canonical("false") == "false");
  CHECK(canonical("[]") == "[]");
  CHECK(canonical("{}") == "{}");
}

TEST_CASE("the canonical form is its own canonical form") {
  for (const std::string_view input :
       {R"({"b":[1e21,1E-7,0.5,-0],"a":"\u0000\u20ac\ud83d\ude00","\ue000":{"\ud800\udc00":null}})",
        R"([[[[]]],{"":{"":""}}])"}) {
    const std::string once = canonical(input);
    CHECK(canonical(once) == once);
  }
}

TEST_CASE("canonicalize_json appends to out, and leaves out untouched on error") {
  std::string out = "prefix:";
  canonicalize_json(R"({"b":1,"a":2})", out);
  CHECK(out == R"(prefix:{"a":2,"b":1})");
  CHECK_THROWS_AS(canonicalize_json(R"({"b":1,"a":2,})", out), idem::json_error);
  CHECK(out == R"(prefix:{"a":2,"b":1})");
}

// ---------------------------------------------------------------------------------------------
// Invalid input: json_error says what and where.

TEST_CASE("json_error is a std::invalid_argument whose message gives the offset") {
  try {
    canonical("[1,]");
    FAIL("accepted");
  } catch (const std::invalid_argument& error) {
    CHECK(std::string_view(error.what()) ==
          "idem: invalid JSON: trailing comma before ']' (at byte 2)");
    const auto* json = dynamic_cast<const idem::json_error*>(&error);
    REQUIRE(json != nullptr);
    CHECK(json->offset() == 2);
  }
}

TEST_CASE("empty or blank input is rejected") {
  require_json_error("", 0, "empty");
  require_json_error(" \n\t ", 4, "empty");
}

TEST_CASE("truncated input is rejected at its end") {
  require_json_error(R"({"a": [1, 2)", 11, "found end of input");
  require_json_error(R"({"a")", 4, "expected ':'");
  require_json_error(R"({"a":)", 5, "expected a value, found end of input");
  require_json_error("[", 1, "expected a value, found end of input");
  require_json_error("{", 1, "expected a member name");
  require_json_error("nul", 0, "expected 'null'");
}

TEST_CASE("an unterminated string is rejected at its opening quote") {
  require_json_error(R"(["abc)", 1, "unterminated string");
  require_json_error(R"(["abc\)", 1, "unterminated string");
}

TEST_CASE("a trailing comma is rejected at the comma") {
  require_json_error("[1,2,]", 4, "trailing comma before ']'");
  require_json_error(R"({"a":1 , })", 7, "trailing comma before '}'");
}

TEST_CASE("missing commas, colons and quotes around names are rejected") {
  require_json_error("[1 2]", 3, "expected ',' or ']'");
  require_json_error(R"({"a":1 "b":2})", 7, "expected ',' or '}'");
  require_json_error(R"({"a" 1})", 5, "expected ':'");
  require_json_error("{a:1}", 1, "expected a member name in double quotes");
  require_json_error("{1:1}", 1, "expected a member name in double quotes");
}

TEST_CASE("a number with a leading zero is rejected") {
  require_json_error("[01]", 1, "leading zero");
  require_json_error("-00.5", 0, "leading zero");
}

TEST_CASE("a number outside the JSON grammar is rejected") {
  require_json_error("+1", 0, "expected a value, found '+'");
  require_json_error(".5", 0, "expected a value, found '.'");
  require_json_error("1.", 2, "digit after the decimal point");
  require_json_error("1.e3", 2, "digit after the decimal point");
  require_json_error("1e", 2, "digit in the exponent");
  require_json_error("1e+", 3, "digit in the exponent");
  require_json_error("-", 1, "digit after '-'");
  require_json_error("0x10", 1, "after the JSON value");
}

TEST_CASE("NaN and Infinity are rejected") {
  require_json_error("NaN", 0, "NaN and Infinity");
  require_json_error("[Infinity]", 1, "NaN and Infinity");
  require_json_error("-Infinity", 0, "NaN and Infinity");
}

TEST_CASE("a number that overflows a double is rejected") {
  require_json_error("1e400", 0, "too large for a double");
  require_json_error("[-1e309]", 1, "too large for a double");
  require_json_error("1.7976931348623159e308", 0, "too large for a double");
  require_json_error("0.0000000001e99999999999999999999", 0, "too large for a double");
  CHECK(canonical("1.7976931348623157e308") == "1.7976931348623157e+308");
}

TEST_CASE("an unknown escape sequence is rejected at its backslash") {
  require_json_error(R"(["\x"])", 2, "invalid escape");
  require_json_error(R"("\U0041")", 1, "invalid escape");
  require_json_error(R"("\')", 1, "invalid escape");
}

TEST_CASE("a backslash-u escape needs four hex digits") {
  require_json_error(R"("\u12")", 1, "four hex digits");
  require_json_error(R"("\u12G4")", 1, "four hex digits");
  require_json_error(R"("\ud83d\ude0")", 7, "four hex digits");
}

TEST_CASE("a lone surrogate escape is rejected") {
  require_json_error(R"("\ud800")", 1, "lone surrogate");
  require_json_error(R"("a\udc00b")", 2, "lone surrogate");
  require_json_error(R"("\ud800\u0041")", 1, "lone surrogate");
  require_json_error(R"("\ud800\ud800")", 1, "lone surrogate");
  require_json_error(R"("\ude00\ud83d")", 1, "lone surrogate");
  require_json_error(R"("\ud83dx")", 1, "lone surrogate");
}

TEST_CASE("invalid UTF-8 in a string is rejected at the bad sequence") {
  require_json_error("\"ab\x80\"", 3, "invalid UTF-8 (0x80)");            // stray continuation
  require_json_error("\"\xc0\xaf\"", 1, "invalid UTF-8 (0xC0)");          // overlong '/'
  require_json_error("\"\xe0\x80\xaf\"", 1, "invalid UTF-8 (0xE0)");      // overlong '/'
  require_json_error("\"\xed\xa0\x80\"", 1, "invalid UTF-8 (0xED)");      // U+D800, encoded
  require_json_error("\"\xf4\x90\x80\x80\"", 1, "invalid UTF-8 (0xF4)");  // above U+10FFFF
  require_json_error("\"\xf5\x80\x80\x80\"", 1, "invalid UTF-8 (0xF5)");  // no such lead byte
  require_json_error("\"\xe2\x82\"", 1, "invalid UTF-8 (0xE2)");          // cut short
  require_json_error("\"\xe2\x82", 1, "invalid UTF-8 (0xE2)");            // cut by the end
  require_json_error("\"\xc3\xa9\xff\"", 3, "invalid UTF-8 (0xFF)");
}

TEST_CASE("a byte outside ASCII between tokens is rejected, a byte order mark too") {
  require_json_error("[\xc3\xa9]", 1, "found byte 0xC3");
  require_json_error("\xef\xbb\xbf{}", 0, "byte order mark");
}

TEST_CASE("an unescaped control character in a string is rejected") {
  require_json_error("\"a\tb\"", 2, "control character 0x09");
  require_json_error("[\"\n\"]", 2, "control character 0x0A");
  require_json_error(std::string_view("\"\0\"", 3), 1, "control character 0x00");
}

TEST_CASE("a duplicate member name is rejected at its second occurrence") {
  require_json_error(R"({"a":1,"b":2,"a":3})", 13, "duplicate member name \"a\"");
  require_json_error(R"({"b":{"x":1,"x":1}})", 12, "duplicate member name \"x\"");
}

TEST_CASE("of several duplicate names the first in canonical order is reported") {
  require_json_error(R"({"b":1,"a":2,"b":3,"a":4})", 19, "duplicate member name \"a\"");
  // More members than the sort's short runs: the same answer.
  std::string input = "{";
  for (int i = 40; i > 0; --i)
    input += "\"m" + std::to_string(i) + "\":0,";
  input += "\"m7\":1,";
  const std::size_t second_m30 = input.size();
  input += "\"m30\":1}";  // "m30" sorts before "m7"
  require_json_error(input, second_m30, "duplicate member name \"m30\"");
}

TEST_CASE("a duplicate member name is rejected also when spelled differently") {
  require_json_error(R"({"a":1,"\u0061":2})", 7, "duplicate member name \"a\"");
  require_json_error("{\"\\u00e9\":1,\"\xc3\xa9\":2}", 12, "duplicate member name");
}

TEST_CASE("nesting deeper than max_json_depth is rejected, and exactly that deep is accepted") {
  const std::size_t depth = idem::max_json_depth;
  const std::string deepest = std::string(depth, '[') + std::string(depth, ']');
  CHECK(canonical(deepest) == deepest);
  require_json_error(std::string(depth + 1, '[') + std::string(depth + 1, ']'), depth,
                     "deeper than 256");
  std::string objects;
  for (std::size_t i = 0; i <= depth; ++i)
    objects += R"({"a":)";
  require_json_error(objects, 5 * depth, "deeper than 256");
  // Far too deep must fail the same way, not overflow the stack.
  require_json_error(std::string(100'000, '['), depth, "deeper than 256");
}

TEST_CASE("anything after the value is rejected") {
  require_json_error("{} x", 3, "unexpected 'x' after the JSON value");
  require_json_error("1 2", 2, "after the JSON value");
  require_json_error("[1]]", 3, "after the JSON value");
  require_json_error("{}{}", 2, "after the JSON value");
  require_json_error(std::string_view("0\0", 2), 1, "byte 0x00 after the JSON value");
}

TEST_CASE("comments, single quotes and misspelled literals are rejected") {
  require_json_error("[1 /* one */]", 3, "no comments");
  require_json_error("// c\n1", 0, "no comments");
  require_json_error("['a']", 1, "double quotes");
  require_json_error("True", 0, "expected a value, found 'T'");
  require_json_error("[nulL]", 1, "expected 'null'");
  require_json_error("fals", 0, "expected 'false'");
}

// ---------------------------------------------------------------------------------------------
// Exclusion.

TEST_CASE("an excluded pointer leaves out that member and its value") {
  const std::string_view webhook =
      R"({"meta":{"timestamp":"2025-06-01T00:00:00Z","id":"evt_1"},"amount":5})";
  CHECK(canonical(webhook, {"/meta/timestamp"}) == R"({"amount":5,"meta":{"id":"evt_1"}})");
  CHECK(canonical(webhook, {"/meta"}) == R"({"amount":5})");
  CHECK(canonical(webhook, {"/amount"}) ==
        R"({"meta":{"id":"evt_1","timestamp":"2025-06-01T00:00:00Z"}})");
  CHECK(canonical(webhook, {"/meta/timestamp", "/meta/id"}) == R"({"amount":5,"meta":{}})");
}

TEST_CASE("two bodies that differ only in an excluded member canonicalize alike") {
  const std::vector<std::string> volatile_fields = {"/sent_at"};
  CHECK(canonical(R"({"order":7,"sent_at":1717200000})", volatile_fields) ==
        canonical(R"({"sent_at":1717200999,"order":7})", volatile_fields));
}

TEST_CASE("excluding a member that is absent changes nothing") {
  const std::string_view body = R"({"a":{"b":1},"c":[1,2]})";
  CHECK(canonical(body, {"/x"}) == canonical(body));
  CHECK(canonical(body, {"/a/x"}) == canonical(body));
  CHECK(canonical(body, {"/x/y/z"}) == canonical(body));
  CHECK(canonical(body, {"/c/5/x"}) == canonical(body));
}

TEST_CASE("an array index in a pointer reaches into that one element") {
  CHECK(canonical(R"({"items":[{"id":1,"n":"a"},{"id":2,"n":"b"}]})", {"/items/0/id"}) ==
        R"({"items":[{"n":"a"},{"id":2,"n":"b"}]})");
  CHECK(canonical(R"([[{"a":1}],[{"a":2}]])", {"/1/0/a"}) == R"([[{"a":1}],[{}]])");
}

TEST_CASE("an array index with a leading zero, a sign or '-' matches no element") {
  const std::string_view body = R"({"items":[{"id":1},{"id":2}]})";
  CHECK(canonical(body, {"/items/00/id"}) == canonical(body));
  CHECK(canonical(body, {"/items/-/id"}) == canonical(body));
  CHECK(canonical(body, {"/items/+1/id"}) == canonical(body));
}

TEST_CASE("the wildcard * matches every element of an array and every member of an object") {
  CHECK(canonical(R"({"items":[{"id":1,"ts":5},{"id":2,"ts":6},3]})", {"/items/*/ts"}) ==
        R"({"items":[{"id":1},{"id":2},3]})");
  CHECK(canonical(R"({"by_id":{"x":{"v":1,"ts":5},"y":{"v":2,"ts":6}}})", {"/by_id/*/ts"}) ==
        R"({"by_id":{"x":{"v":1},"y":{"v":2}}})");
  CHECK(canonical(R"({"meta":{"a":1,"*":2},"keep":3})", {"/meta/*"}) == R"({"keep":3,"meta":{}})");
}

TEST_CASE("in a pointer, ~0 and ~1 stand for ~ and /") {
  const std::string_view body = R"({"a/b":1,"m~n":2,"~1":3,"c":4})";
  CHECK(canonical(body, {"/a~1b"}) == R"({"c":4,"m~n":2,"~1":3})");
  CHECK(canonical(body, {"/m~0n"}) == R"({"a/b":1,"c":4,"~1":3})");
  CHECK(canonical(body, {"/~01"}) == R"({"a/b":1,"c":4,"m~n":2})");  // ~0 then 1, not ~1
  // Unescaped, '/' separates tokens: this is member "b" of member "a".
  CHECK(canonical(body, {"/a/b"}) == canonical(body));
}

TEST_CASE("a pointer is matched against member names after their escapes are decoded") {
  CHECK(canonical(R"({"\u0074s":1,"a\/b":2,"k":3})", {"/ts", "/a~1b"}) == R"({"k":3})");
}

TEST_CASE("the pointer of a lone slash names the member whose name is empty") {
  CHECK(canonical(R"({"":1,"a":2})", {"/"}) == R"({"a":2})");
  CHECK(canonical(R"({"a":{"":1,"b":2}})", {"/a/"}) == R"({"a":{"b":2}})");
}

TEST_CASE("a pointer that ends on an array element removes nothing") {
  const std::string_view body = R"({"items":[1,2,3],"o":{"0":"member"}})";
  CHECK(canonical(body, {"/items/0"}) == canonical(body));
  CHECK(canonical(body, {"/items/*"}) == canonical(body));
  CHECK(canonical("[1,2]", {"/0"}) == "[1,2]");
  CHECK(canonical(R"([{"0":{"0":1}}])", {"/0"}) == R"([{"0":{"0":1}}])");
  // The same token on an object names a member, and that member goes.
  CHECK(canonical(body, {"/o/0"}) == R"({"items":[1,2,3],"o":{}})");
}

TEST_CASE("a pointer through a scalar or into the other kind of container removes nothing") {
  const std::string_view body = R"({"a":5,"b":"text","c":[{"x":1}],"d":{"0":{"x":2}}})";
  CHECK(canonical(body, {"/a/x"}) == canonical(body));
  CHECK(canonical(body, {"/b/0"}) == canonical(body));
  CHECK(canonical(body, {"/c/x"}) == canonical(body));  // a name where an index is needed
  CHECK(canonical(body, {"/d/0/x"}) == R"({"a":5,"b":"text","c":[{"x":1}],"d":{"0":{}}})");
  CHECK(canonical("42", {"/a"}) == "42");
}

TEST_CASE("several pointers apply together, and overlapping ones are harmless") {
  const std::string_view body = R"({"a":{"b":1,"c":2},"d":3})";
  CHECK(canonical(body, {"/a/b", "/a", "/a/b", "/d"}) == "{}");
  CHECK(canonical(body, {"/a/*", "/a/c"}) == R"({"a":{},"d":3})");
}

TEST_CASE("a malformed pointer is rejected with std::invalid_argument, not json_error") {
  for (const std::string& pointer : {std::string(""), std::string("a/b"), std::string("#/a"),
                                     std::string("/a~2b"), std::string("/a~")}) {
    INFO("pointer: " << pointer);
    const std::vector<std::string> excluded = {pointer};
    try {
      canonical("{}", excluded);
      FAIL("accepted");
    } catch (const idem::json_error&) {
      FAIL("reported as invalid JSON");
    } catch (const std::invalid_argument& error) {
      CHECK(std::string_view(error.what()).find("excluded pointer") != std::string_view::npos);
    }
  }
}

TEST_CASE("excluded members are still checked: exclusion does not hide invalid input") {
  const std::vector<std::string> excluded = {"/skip"};
  CHECK_THROWS_AS(canonical(R"({"skip":{"a":1,"a":2}})", excluded), idem::json_error);
  CHECK_THROWS_AS(canonical(R"({"skip":"\ud800"})", excluded), idem::json_error);
  CHECK_THROWS_AS(canonical(R"({"skip":1,"skip":2})", excluded), idem::json_error);
}
