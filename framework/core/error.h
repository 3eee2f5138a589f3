// vitddp::Error and the two check macros. VITDDP_CHECK is for user errors (bad shapes, flags,
// files); VITDDP_ASSERT is for broken invariants (our bugs). Both throw; the message is built
// from the streamed arguments, so call sites read as sentences.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace vitddp {

// What went wrong, for exit codes and messages. See train/main.cpp for the mapping.
enum class ErrorKind { kUser, kInternal, kPeer, kTimeout, kNumeric };

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what, ErrorKind kind = ErrorKind::kUser)
      : std::runtime_error(what), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

namespace detail {
inline void stream_all(std::ostringstream&) {}
template <typename T, typename... Rest>
void stream_all(std::ostringstream& os, const T& first, const Rest&... rest) {
  os << first;
  stream_all(os, rest...);
}
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  stream_all(os, args...);
  return os.str();
}
}  // namespace detail

}  // namespace vitddp

#define VITDDP_CHECK(cond, ...)                                                           \
  do {                                                                                    \
    if (!(cond)) throw ::vitddp::Error(::vitddp::detail::concat(__VA_ARGS__));            \
  } while (0)

#define VITDDP_ASSERT(cond, ...)                                                          \
  do {                                                                                    \
    if (!(cond))                                                                          \
      throw ::vitddp::Error(::vitddp::detail::concat("internal error: ", #cond, " at ",   \
                                                     __FILE__, ":", __LINE__, ": ",       \
                                                     ##__VA_ARGS__),                      \
                            ::vitddp::ErrorKind::kInternal);                              \
  } while (0)
