// Helpers for the elementwise, normalisation and softmax backend tests: tensors in several memory
// layouts (contiguous, padded rows, strided or transposed last dimension), host values for
// references, and error-message checks.
#pragma once

#include <functional>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "backend_test_util.h"

namespace megatron::testing {

inline constexpr DType kFloatTypes[] = {DType::f32, DType::f64};

enum class Layout { contiguous, padded_rows, strided_last, transposed };
inline constexpr Layout kAllLayouts[] = {Layout::contiguous, Layout::padded_rows,
                                         Layout::strided_last, Layout::transposed};

inline const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::contiguous:
      return "contiguous";
    case Layout::padded_rows:
      return "padded rows";
    case Layout::strided_last:
      return "strided last dim";
    case Layout::transposed:
      return "transposed";
  }
  return "?";
}

// An uninitialised tensor of `shape` on the backend's device laid out as `layout` (a view into a
// larger allocation for all but contiguous; transposed needs rank >= 2, else it is strided_last).
inline Tensor make_tensor(Backend& be, const Shape& shape, DType dtype, Layout layout) {
  const Device device = be.device();
  const int rank = static_cast<int>(shape.size());
  if (layout == Layout::transposed && rank < 2) layout = Layout::strided_last;
  switch (layout) {
    case Layout::contiguous:
      return Tensor::empty(shape, dtype, device);
    case Layout::padded_rows: {
      Shape wide = shape;
      wide.back() += 3;
      return Tensor::empty(wide, dtype, device).slice(rank - 1, 1, shape.back());
    }
    case Layout::strided_last: {
      Shape pairs = shape;
      pairs.push_back(2);
      return Tensor::empty(pairs, dtype, device).select(rank, 1);
    }
    case Layout::transposed: {
      Shape swapped = shape;
      std::swap(swapped[rank - 1], swapped[rank - 2]);
      return Tensor::empty(swapped, dtype, device).transpose(rank - 1, rank - 2);
    }
  }
  return {};
}

// make_tensor filled with Uniform[low, high) values from `seed`.
inline Tensor random_on(Backend& be, const Shape& shape, DType dtype, std::uint64_t seed,
                        Layout layout = Layout::contiguous, float low = -1.0f, float high = 1.0f) {
  Tensor t = make_tensor(be, shape, dtype, layout);
  be.fill_uniform(t, low, high, seed, 0);
  return t;
}

// make_tensor filled with `value`.
inline Tensor filled_on(Backend& be, const Shape& shape, DType dtype, double value,
                        Layout layout = Layout::contiguous) {
  Tensor t = make_tensor(be, shape, dtype, layout);
  be.fill(t, value);
  return t;
}

// A contiguous host copy of a backend tensor (any layout).
inline Tensor to_host(Backend& be, const Tensor& t) {
  Tensor h = Tensor::empty(t.shape(), t.dtype());
  be.copy(t, h);
  be.synchronize();
  return h;
}

inline std::vector<double> host_values(Backend& be, const Tensor& t) {
  return to_host(be, t).to_vector<double>();
}

// An f64 host tensor holding reference values.
inline Tensor reference(const std::vector<double>& values, const Shape& shape) {
  return Tensor::from(values, shape);
}

// fn() throws megatron::Error whose message contains every fragment.
template <typename Fn>
::testing::AssertionResult throws_error(Fn&& fn, std::initializer_list<std::string> fragments) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const auto& fragment : fragments) {
      if (message.find(fragment) == std::string::npos) {
        return ::testing::AssertionFailure()
               << "message \"" << message << "\" lacks \"" << fragment << "\"";
      }
    }
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "no megatron::Error thrown";
}

// run() computes some outputs from fixed inputs; they must be bitwise identical run after run with
// two threads and with one thread.
inline void expect_deterministic(const std::function<std::vector<Tensor>()>& run) {
  std::vector<Tensor> first, second, single;
  {
    ScopedThreads threads(2);
    first = run();
    second = run();
  }
  {
    ScopedThreads threads(1);
    single = run();
  }
  for (std::size_t i = 0; i < first.size(); ++i) {
    EXPECT_TRUE(bitwise_equal(first[i], second[i])) << "output " << i << ": run to run";
    EXPECT_TRUE(bitwise_equal(first[i], single[i])) << "output " << i << ": 2 threads vs 1";
  }
}

}  // namespace megatron::testing
