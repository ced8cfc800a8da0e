// jit/io/json.hpp — JSON: the strict subset of safetensors headers, whole documents (config
// files), and a string writer
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sinter::json {

struct Member;

/// One parsed value. A safetensors header holds objects (members in file order), arrays,
/// strings and non-negative integers; a whole document (parse_document) also numbers of any
/// sign, fraction or exponent, true, false and null.
struct Value {
  enum class Kind : uint8_t { object, array, string, integer, number, boolean, null };
  Kind kind = Kind::object;
  std::vector<Member> members; // object (a vector of an incomplete type: allowed since C++17)
  std::vector<Value> elements; // array
  std::string text;            // string (valid UTF-8)
  uint64_t integer = 0;        // integer
  double number = 0.0;         // number, and integer in a whole document (as a double)
  bool boolean = false;        // boolean

  /// The member `key` of an object, or nullptr.
  const Value* find(std::string_view key) const;

  bool is(Kind k) const { return kind == k; }
};

/// An object's member: `"key": value`.
struct Member {
  std::string key;
  Value value;
};

/// A syntax error, with the byte offset where parsing stopped.
class ParseError : public std::runtime_error {
public:
  ParseError(const std::string& what, std::size_t offset)
      : std::runtime_error(what + " at byte " + std::to_string(offset)), offset_(offset) {}
  std::size_t offset() const { return offset_; }

private:
  std::size_t offset_;
};

/// Parses exactly one value surrounded by optional whitespace. Rejects what this subset lacks
/// (true/false/null, negative or fractional numbers), duplicate object keys, invalid UTF-8,
/// unpaired surrogates and nesting deeper than 32.
Value parse(std::string_view text);

/// Parses a whole JSON document (RFC 8259), as configuration files hold: as `parse`, and also
/// true, false, null and numbers with a sign, fraction or exponent (Kind::number). A
/// non-negative whole number that fits 64 bits is Kind::integer, with `number` set too.
Value parse_document(std::string_view text);

/// Whether `s` is well-formed UTF-8 (what a JSON string may hold).
bool is_valid_utf8(std::string_view s);

/// Appends `s` as a JSON string literal, escaped the way serde_json does (`"`, `\`, and control
/// characters; everything else verbatim), so headers match the reference writer byte for byte.
void append_quoted(std::string& out, std::string_view s);

} // namespace sinter::json
