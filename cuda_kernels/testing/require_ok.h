// Catch2 assertions on cuda_kernels' Error, shared by the kernels' tests.
#ifndef PS_CUDA_KERNELS_TESTING_REQUIRE_OK_H_
#define PS_CUDA_KERNELS_TESTING_REQUIRE_OK_H_

#include <catch2/catch.hpp>

#include "cuda_kernels/error.h"

// Evaluates `expr` (a ps::cuda::Error) once and fails the test, printing its message, unless it
// is ok.
#define REQUIRE_OK(expr)                   \
  do {                                     \
    const ::ps::cuda::Error err_ = (expr); \
    INFO(err_.message);                    \
    REQUIRE(err_.ok());                    \
  } while (0)

#endif  // PS_CUDA_KERNELS_TESTING_REQUIRE_OK_H_
