// Status-propagation macros. Debian's Abseil (2022-06) has no ABSL_RETURN_IF_ERROR, so the project
// keeps these two here and nowhere else.
#ifndef PS_COMMON_STATUS_MACROS_H_
#define PS_COMMON_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define PS_STATUS_CONCAT_INNER_(a, b) a##b
#define PS_STATUS_CONCAT_(a, b) PS_STATUS_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status) and returns it from the enclosing function if it is not OK.
#define PS_RETURN_IF_ERROR(expr)                     \
  do {                                               \
    ::absl::Status ps_status_ = (expr);              \
    if (!ps_status_.ok()) return ps_status_;         \
  } while (false)

// Evaluates `rexpr` (an absl::StatusOr<T>); on error returns its status from the enclosing
// function, otherwise moves the value into `lhs`, which may be a declaration (`auto x`).
#define PS_ASSIGN_OR_RETURN(lhs, rexpr) \
  PS_ASSIGN_OR_RETURN_IMPL_(PS_STATUS_CONCAT_(ps_statusor_, __LINE__), lhs, rexpr)

#define PS_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                              \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()

#endif  // PS_COMMON_STATUS_MACROS_H_
