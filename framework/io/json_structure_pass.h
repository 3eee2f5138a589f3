// A base for checks that look only at a JSON text's structure (nesting, keys) in one linear
// pass of nlohmann's SAX interface, before the text is parsed into a tree: every scalar is
// accepted; the derived check overrides the object, array, key and error events it needs.
// (nlohmann's callback parser, the other way to see those events, rescans the parent object at
// each nested object's end: quadratic in the width of a hostile file.)
#pragma once

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

namespace vitddp {

class JsonStructurePass : public nlohmann::json_sax<nlohmann::json> {
 public:
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool key(string_t&) override { return true; }
};

}  // namespace vitddp
