// Argument checks shared by every backend's ops: each failure names the op, the argument, and
// the expected and actual values.
#pragma once

#include <initializer_list>
#include <string>

#include "megatron/error.h"
#include "megatron/tensor/tensor.h"

namespace megatron::ops {

[[noreturn]] inline void fail(const char* op, const std::string& message) {
  throw Error(std::string(op) + ": " + message);
}

inline void check_defined(const char* op, const char* name, const Tensor& t) {
  if (!t.defined()) fail(op, std::string(name) + " is an undefined tensor");
}

inline void check_shape(const char* op, const char* name, const Tensor& t, const Shape& expected) {
  check_defined(op, name, t);
  if (t.shape() != expected) {
    fail(op, std::string(name) + " must have shape " + shape_str(expected) + ", got " + t.describe());
  }
}

inline void check_same_shape(const char* op, const char* name, const Tensor& t, const char* other_name,
                             const Tensor& other) {
  check_defined(op, name, t);
  if (t.shape() != other.shape()) {
    fail(op, std::string(name) + " " + t.describe() + " must have the shape of " + other_name + " " +
                 other.describe());
  }
}

inline void check_dtype(const char* op, const char* name, const Tensor& t,
                        std::initializer_list<DType> allowed) {
  check_defined(op, name, t);
  std::string list;
  for (DType d : allowed) {
    if (t.dtype() == d) return;
    list += (list.empty() ? "" : " or ") + std::string(dtype_name(d));
  }
  fail(op, std::string(name) + " must be " + list + ", got " + t.describe());
}

inline void check_same_dtype(const char* op, const char* name, const Tensor& t, const char* other_name,
                             const Tensor& other) {
  if (t.dtype() != other.dtype()) {
    fail(op, std::string(name) + " " + t.describe() + " must have the dtype of " + other_name + " " +
                 other.describe());
  }
}

inline void check_device(const char* op, const char* name, const Tensor& t, Device device) {
  check_defined(op, name, t);
  if (t.device() != device) {
    fail(op, std::string(name) + " " + t.describe() + " must be on " + device.str());
  }
}

inline void check_rank(const char* op, const char* name, const Tensor& t, int rank) {
  check_defined(op, name, t);
  if (t.dim() != rank) {
    fail(op, std::string(name) + " must have " + std::to_string(rank) + " dimensions, got " +
                 t.describe());
  }
}

inline void check_last_dim_contiguous(const char* op, const char* name, const Tensor& t) {
  if (t.dim() > 0 && t.size(-1) > 1 && t.stride(-1) != 1) {
    fail(op, std::string(name) + " " + t.describe() + " must have a contiguous last dimension");
  }
}

inline void check_contiguous(const char* op, const char* name, const Tensor& t) {
  if (!t.is_contiguous()) fail(op, std::string(name) + " " + t.describe() + " must be contiguous");
}

}  // namespace megatron::ops
