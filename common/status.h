// Status helpers shared by every module.
//
// Errors cross module boundaries as absl::Status / absl::StatusOr<T>; the
// codes follow one retry rule (Unavailable: retry the call;
// Aborted: retry at a higher level; FailedPrecondition / InvalidArgument:
// do not retry). These macros keep the early-return plumbing short.
#ifndef TAGI_COMMON_STATUS_H_
#define TAGI_COMMON_STATUS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define TAGI_STATUS_CONCAT_INNER_(a, b) a##b
#define TAGI_STATUS_CONCAT_(a, b) TAGI_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function when `expr` yields a non-OK status.
#define TAGI_RETURN_IF_ERROR(expr)             \
  do {                                         \
    const absl::Status tagi_status_ = (expr);  \
    if (!tagi_status_.ok()) return tagi_status_; \
  } while (0)

// `lhs` = value of the StatusOr `rexpr`, or returns its status.
#define TAGI_ASSIGN_OR_RETURN(lhs, rexpr)                                   \
  TAGI_ASSIGN_OR_RETURN_IMPL_(TAGI_STATUS_CONCAT_(tagi_statusor_, __LINE__), \
                              lhs, rexpr)
#define TAGI_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                                \
  if (!tmp.ok()) return std::move(tmp).status();     \
  lhs = std::move(tmp).value()

#endif  // TAGI_COMMON_STATUS_H_
