// Text from files and libraries made safe for one-line error messages: printable, bounded.
#pragma once

#include <cstddef>
#include <string>

namespace vitddp {

// 'text', with non-printable bytes, quotes and backslashes as \xNN, cut after max_len bytes.
std::string quote_for_message(const std::string& text, size_t max_len);
// Non-printable bytes replaced by '?', cut after max_len bytes (library messages echo input).
std::string sanitize_for_message(const std::string& text, size_t max_len);

}  // namespace vitddp
