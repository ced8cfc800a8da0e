// jit/io/json.cpp — the strict recursive-descent parser and the serde_json-compatible quoting
#include "jit/io/json.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <tuple>

namespace sinter::json {
namespace {

constexpr int max_depth = 32;

// The length of the well-formed UTF-8 sequence at `pos` (1 to 4), or 0 where it is malformed:
// bad lead or continuation bytes, truncation, overlong forms, encoded surrogates, > U+10FFFF.
std::size_t utf8_sequence_length(std::string_view s, std::size_t pos) {
  auto lead = static_cast<unsigned char>(s[pos]);
  std::size_t length = 0;
  unsigned cp = 0;
  if (lead < 0x80) return 1;
  if (lead >= 0xc2 && lead <= 0xdf)
    length = 2, cp = lead & 0x1fu;
  else if (lead >= 0xe0 && lead <= 0xef)
    length = 3, cp = lead & 0x0fu;
  else if (lead >= 0xf0 && lead <= 0xf4)
    length = 4, cp = lead & 0x07u;
  else
    return 0;
  if (pos + length > s.size()) return 0;
  for (std::size_t i = 1; i < length; ++i) {
    auto cont = static_cast<unsigned char>(s[pos + i]);
    if ((cont & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (cont & 0x3fu);
  }
  bool overlong = (length == 3 && cp < 0x800) || (length == 4 && cp < 0x10000);
  if (overlong || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff) return 0;
  return length;
}

class Parser {
public:
  Parser(std::string_view text, bool whole_grammar) : text_(text), whole_grammar_(whole_grammar) {}

  Value parse_document() {
    skip_whitespace();
    Value v = parse_value(0);
    skip_whitespace();
    if (pos_ != text_.size()) fail("unexpected text after the JSON value");
    return v;
  }

private:
  [[noreturn]] void fail(const std::string& what) const { throw ParseError(what, pos_); }

  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }

  void skip_whitespace() {
    while (!at_end() && (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r'))
      ++pos_;
  }

  void expect(char c) {
    if (peek() != c || at_end()) fail(std::string("expected '") + c + "'");
    ++pos_;
  }

  Value parse_value(int depth) {
    if (depth > max_depth) fail("nesting deeper than " + std::to_string(max_depth));
    if (at_end()) fail("unexpected end of input");
    char c = peek();
    if (c == '{') return parse_object(depth);
    if (c == '[') return parse_array(depth);
    if (c == '"') {
      Value v;
      v.kind = Value::Kind::string;
      v.text = parse_string();
      return v;
    }
    if (whole_grammar_) {
      if (c == '-' || (c >= '0' && c <= '9')) return parse_number();
      for (auto [word, kind, truth] : {std::tuple{"true", Value::Kind::boolean, true},
                                       std::tuple{"false", Value::Kind::boolean, false},
                                       std::tuple{"null", Value::Kind::null, false}}) {
        if (!text_.substr(pos_).starts_with(word)) continue;
        pos_ += std::string_view(word).size();
        Value v;
        v.kind = kind;
        v.boolean = truth;
        return v;
      }
    }
    if (c >= '0' && c <= '9') return parse_integer();
    if (c == '-') fail("negative numbers are not allowed here");
    fail(std::string("unexpected character '") + c + "'");
  }

  Value parse_object(int depth) {
    Value v;
    v.kind = Value::Kind::object;
    expect('{');
    skip_whitespace();
    if (peek() == '}') {
      ++pos_;
      return v;
    }
    for (;;) {
      skip_whitespace();
      if (peek() != '"') fail("expected a string key");
      std::size_t key_pos = pos_;
      std::string key = parse_string();
      bool duplicate = std::any_of(v.members.begin(), v.members.end(),
                                   [&](const Member& m) { return m.key == key; });
      if (duplicate) throw ParseError("duplicate key \"" + key + "\"", key_pos);
      skip_whitespace();
      expect(':');
      skip_whitespace();
      Value member = parse_value(depth + 1);
      v.members.push_back({std::move(key), std::move(member)});
      skip_whitespace();
      if (peek() == ',' && !at_end()) {
        ++pos_;
        continue;
      }
      expect('}');
      return v;
    }
  }

  Value parse_array(int depth) {
    Value v;
    v.kind = Value::Kind::array;
    expect('[');
    skip_whitespace();
    if (peek() == ']') {
      ++pos_;
      return v;
    }
    for (;;) {
      skip_whitespace();
      v.elements.push_back(parse_value(depth + 1));
      skip_whitespace();
      if (peek() == ',' && !at_end()) {
        ++pos_;
        continue;
      }
      expect(']');
      return v;
    }
  }

  Value parse_integer() {
    Value v;
    v.kind = Value::Kind::integer;
    std::size_t start = pos_;
    if (peek() == '0' && pos_ + 1 < text_.size() && text_[pos_ + 1] >= '0' &&
        text_[pos_ + 1] <= '9')
      fail("leading zeros are not allowed");
    while (!at_end() && peek() >= '0' && peek() <= '9') {
      auto digit = static_cast<uint64_t>(peek() - '0');
      if (v.integer > (std::numeric_limits<uint64_t>::max() - digit) / 10) {
        pos_ = start;
        fail("integer does not fit in 64 bits");
      }
      v.integer = v.integer * 10 + digit;
      ++pos_;
    }
    if (peek() == '.' || peek() == 'e' || peek() == 'E')
      fail("only integers are allowed here, not fractions or exponents");
    return v;
  }

  // RFC 8259's number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  Value parse_number() {
    std::size_t start = pos_;
    auto digits = [&] {
      std::size_t from = pos_;
      while (!at_end() && peek() >= '0' && peek() <= '9')
        ++pos_;
      if (pos_ == from) fail("expected a digit");
    };
    bool whole = true;
    if (peek() == '-') ++pos_, whole = false;
    if (peek() == '0' && pos_ + 1 < text_.size() && text_[pos_ + 1] >= '0' &&
        text_[pos_ + 1] <= '9')
      fail("leading zeros are not allowed");
    digits();
    if (peek() == '.') ++pos_, digits(), whole = false;
    if (peek() == 'e' || peek() == 'E') {
      ++pos_, whole = false;
      if (peek() == '+' || peek() == '-') ++pos_;
      digits();
    }
    std::string_view literal = text_.substr(start, pos_ - start);
    Value v;
    v.kind = Value::Kind::number;
    auto [end, error] = std::from_chars(literal.data(), literal.data() + literal.size(), v.number);
    if (error != std::errc() || end != literal.data() + literal.size() ||
        !std::isfinite(v.number)) {
      pos_ = start;
      fail("number out of range");
    }
    if (whole) {
      auto [int_end, int_error] =
          std::from_chars(literal.data(), literal.data() + literal.size(), v.integer);
      if (int_error == std::errc() && int_end == literal.data() + literal.size())
        v.kind = Value::Kind::integer;
    }
    return v;
  }

  unsigned hex4() {
    if (pos_ + 4 > text_.size()) fail("truncated \\u escape");
    unsigned code = 0;
    for (int i = 0; i < 4; ++i) {
      char h = text_[pos_++];
      code <<= 4;
      if (h >= '0' && h <= '9')
        code |= static_cast<unsigned>(h - '0');
      else if (h >= 'a' && h <= 'f')
        code |= static_cast<unsigned>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F')
        code |= static_cast<unsigned>(h - 'A' + 10);
      else
        fail("invalid hex digit in \\u escape");
    }
    return code;
  }

  static void append_utf8(std::string& out, unsigned cp) {
    auto byte = [&](unsigned b) { out.push_back(static_cast<char>(b)); };
    if (cp < 0x80) {
      byte(cp);
    } else if (cp < 0x800) {
      byte(0xc0 | (cp >> 6));
      byte(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      byte(0xe0 | (cp >> 12));
      byte(0x80 | ((cp >> 6) & 0x3f));
      byte(0x80 | (cp & 0x3f));
    } else {
      byte(0xf0 | (cp >> 18));
      byte(0x80 | ((cp >> 12) & 0x3f));
      byte(0x80 | ((cp >> 6) & 0x3f));
      byte(0x80 | (cp & 0x3f));
    }
  }

  void copy_utf8_sequence(std::string& out) {
    std::size_t length = utf8_sequence_length(text_, pos_);
    if (length == 0) fail("invalid UTF-8 in string");
    out.append(text_.substr(pos_, length));
    pos_ += length;
  }

  std::string parse_string() {
    expect('"');
    std::string out;
    for (;;) {
      if (at_end()) fail("unterminated string");
      auto c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c < 0x20) fail("unescaped control character in string");
      if (c >= 0x80) {
        copy_utf8_sequence(out);
        continue;
      }
      ++pos_;
      if (c != '\\') {
        out.push_back(static_cast<char>(c));
        continue;
      }
      if (at_end()) fail("unterminated escape");
      char e = text_[pos_++];
      switch (e) {
      case '"': out.push_back('"'); break;
      case '\\': out.push_back('\\'); break;
      case '/': out.push_back('/'); break;
      case 'b': out.push_back('\b'); break;
      case 'f': out.push_back('\f'); break;
      case 'n': out.push_back('\n'); break;
      case 'r': out.push_back('\r'); break;
      case 't': out.push_back('\t'); break;
      case 'u': {
        unsigned cp = hex4();
        if (cp >= 0xdc00 && cp <= 0xdfff) fail("unpaired low surrogate in \\u escape");
        if (cp >= 0xd800 && cp <= 0xdbff) {
          if (pos_ + 2 > text_.size() || text_[pos_] != '\\' || text_[pos_ + 1] != 'u')
            fail("unpaired high surrogate in \\u escape");
          pos_ += 2;
          unsigned low = hex4();
          if (low < 0xdc00 || low > 0xdfff) fail("unpaired high surrogate in \\u escape");
          cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
        }
        append_utf8(out, cp);
        break;
      }
      default: fail(std::string("invalid escape '\\") + e + "'");
      }
    }
  }

  std::string_view text_;
  bool whole_grammar_;
  std::size_t pos_ = 0;
};

} // namespace

const Value* Value::find(std::string_view key) const {
  for (const Member& m : members)
    if (m.key == key) return &m.value;
  return nullptr;
}

Value parse(std::string_view text) { return Parser(text, false).parse_document(); }

Value parse_document(std::string_view text) { return Parser(text, true).parse_document(); }

bool is_valid_utf8(std::string_view s) {
  for (std::size_t pos = 0; pos < s.size();) {
    std::size_t length = utf8_sequence_length(s, pos);
    if (length == 0) return false;
    pos += length;
  }
  return true;
}

void append_quoted(std::string& out, std::string_view s) {
  static constexpr char hex[] = "0123456789abcdef";
  out.push_back('"');
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    switch (c) {
    case '"': out += "\\\""; break;
    case '\\': out += "\\\\"; break;
    case '\b': out += "\\b"; break;
    case '\f': out += "\\f"; break;
    case '\n': out += "\\n"; break;
    case '\r': out += "\\r"; break;
    case '\t': out += "\\t"; break;
    default:
      if (c < 0x20) {
        out += "\\u00";
        out.push_back(hex[c >> 4]);
        out.push_back(hex[c & 0xf]);
      } else {
        out.push_back(ch);
      }
    }
  }
  out.push_back('"');
}

} // namespace sinter::json
