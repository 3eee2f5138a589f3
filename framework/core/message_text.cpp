#include "framework/core/message_text.h"

#include <cstdio>

namespace vitddp {

std::string quote_for_message(const std::string& text, size_t max_len) {
  std::string out = "'";
  for (size_t i = 0; i < text.size(); ++i) {
    if (i == max_len) {
      out += "...";
      break;
    }
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    }
  }
  return out + "'";
}

std::string sanitize_for_message(const std::string& text, size_t max_len) {
  std::string out;
  for (size_t i = 0; i < text.size() && i < max_len; ++i) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    out += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '?';
  }
  if (text.size() > max_len) out += "...";
  return out;
}

}  // namespace vitddp
