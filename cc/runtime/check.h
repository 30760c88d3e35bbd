// The checks of the runtime's C++ tests. No test framework: Debian's
// Bazel builds offline, so each failed check prints where and what, and
// main() returns Failed(name)'s exit status.
#ifndef TENSORBOW_CC_RUNTIME_CHECK_H_
#define TENSORBOW_CC_RUNTIME_CHECK_H_

#include <cstdio>

namespace tensorbow {
namespace runtime {

// Checks failed so far in this test binary.
inline int& CheckFailures() {
  static int failures = 0;
  return failures;
}

// 1 after printing how many checks failed, else 0 after saying test `name`
// passed: main()'s exit status.
inline int Failed(const char* name) {
  if (CheckFailures() > 0) {
    std::fprintf(stderr, "%d check(s) failed\n", CheckFailures());
    return 1;
  }
  std::printf("%s: all checks passed\n", name);
  return 0;
}

}  // namespace runtime
}  // namespace tensorbow

#define EXPECT(cond)                                               \
  do {                                                             \
    if (!(cond)) {                                                 \
      std::fprintf(stderr, "%s:%d: %s: expected %s\n", __FILE__,   \
                   __LINE__, __func__, #cond);                     \
      ++::tensorbow::runtime::CheckFailures();                     \
    }                                                              \
  } while (0)

#endif  // TENSORBOW_CC_RUNTIME_CHECK_H_
