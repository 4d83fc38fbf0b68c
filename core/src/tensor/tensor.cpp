// Tensor metadata, views and host-side copies.
#include "megatron/tensor/tensor.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <numeric>

#include "megatron/tensor/allocator.h"

namespace megatron {

std::int64_t shape_numel(const Shape& shape) {
  std::int64_t n = 1;
  for (auto d : shape)
    n *= d;
  return n;
}

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  std::int64_t s = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= std::max<std::int64_t>(shape[i], 1);
  }
  return strides;
}

Storage::Storage(Device device, std::size_t bytes) : device_(device), bytes_(bytes) {
  if (!device.is_meta()) data_ = allocator_for(device).allocate(bytes);
}

Storage::~Storage() {
  if (data_) allocator_for(device_).deallocate(data_, bytes_);
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (auto d : shape) {
    if (d < 0) throw Error("Tensor::empty: negative dimension in shape " + shape_str(shape));
  }
  Tensor t;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(
      device, static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype));
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype) {
  return full(shape, dtype, 0.0);
}

Tensor Tensor::full(const Shape& shape, DType dtype, double value) {
  Tensor t = empty(shape, dtype);
  void* base = t.raw_data();
  for (std::int64_t i = 0; i < t.numel(); ++i)
    store_from_double(base, dtype, i, value);
  return t;
}

int Tensor::normalize_dim(int d, int rank) const {
  const int n = d < 0 ? d + rank : d;
  if (n < 0 || n >= rank) {
    throw Error("dimension " + std::to_string(d) + " is out of range for " + describe());
  }
  return n;
}

std::int64_t Tensor::size(int d) const {
  return shape_[normalize_dim(d, dim())];
}
std::int64_t Tensor::stride(int d) const {
  return strides_[normalize_dim(d, dim())];
}

bool Tensor::is_contiguous() const {
  std::int64_t expected = 1;
  for (int i = dim() - 1; i >= 0; --i) {
    if (shape_[i] != 1 && strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

void* Tensor::raw_data() const {
  if (!storage_) throw Error("the tensor is undefined (it was never allocated)");
  if (storage_->device().is_meta()) {
    throw Error("a meta tensor " + describe() + " has no data; it exists for planning only");
  }
  return static_cast<char*>(storage_->data()) + offset_ * static_cast<std::int64_t>(element_size());
}

void Tensor::check_dtype(DType wanted) const {
  if (wanted != dtype_) {
    throw Error("tensor " + describe() + " read as " + std::string(dtype_name(wanted)));
  }
}

Tensor Tensor::view(const Shape& shape) const {
  if (!is_contiguous())
    throw Error("view() of non-contiguous tensor " + describe() + "; call contiguous() first");
  Shape resolved = shape;
  std::int64_t known = 1;
  int infer = -1;
  for (std::size_t i = 0; i < resolved.size(); ++i) {
    if (resolved[i] == -1) {
      if (infer >= 0) throw Error("view(): more than one -1 in " + shape_str(shape));
      infer = static_cast<int>(i);
    } else {
      known *= resolved[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel() % known != 0) {
      throw Error("view(): cannot infer -1 in " + shape_str(shape) + " for " + describe());
    }
    resolved[infer] = numel() / known;
  }
  if (shape_numel(resolved) != numel()) {
    throw Error("view(): shape " + shape_str(shape) + " does not match " + describe());
  }
  Tensor t = *this;
  t.shape_ = resolved;
  t.strides_ = contiguous_strides(resolved);
  return t;
}

Tensor Tensor::slice(int d, std::int64_t start, std::int64_t length) const {
  const int n = normalize_dim(d, dim());
  if (start < 0 || length < 0 || start + length > shape_[n]) {
    throw Error("slice(dim " + std::to_string(d) + ", start " + std::to_string(start) +
                ", length " + std::to_string(length) + ") is out of range for " + describe());
  }
  Tensor t = *this;
  t.shape_[n] = length;
  t.offset_ += start * strides_[n];
  return t;
}

Tensor Tensor::unflatten(int d, std::int64_t outer, std::int64_t inner) const {
  const int n = normalize_dim(d, dim());
  if (outer < 0 || inner < 0 || outer * inner != shape_[n]) {
    throw Error("unflatten(dim " + std::to_string(d) + ", " + std::to_string(outer) + " x " +
                std::to_string(inner) + ") does not match " + describe());
  }
  Tensor t = *this;
  const std::int64_t stride = strides_[n];
  t.shape_[n] = inner;
  t.strides_[n] = stride;
  t.shape_.insert(t.shape_.begin() + n, outer);
  t.strides_.insert(t.strides_.begin() + n, stride * inner);
  return t;
}

Tensor Tensor::select(int d, std::int64_t index) const {
  const int n = normalize_dim(d, dim());
  Tensor t = slice(n, index, 1);
  t.shape_.erase(t.shape_.begin() + n);
  t.strides_.erase(t.strides_.begin() + n);
  return t;
}

Tensor Tensor::transpose(int d0, int d1) const {
  const int a = normalize_dim(d0, dim()), b = normalize_dim(d1, dim());
  Tensor t = *this;
  std::swap(t.shape_[a], t.shape_[b]);
  std::swap(t.strides_[a], t.strides_[b]);
  return t;
}

Tensor Tensor::permute(const std::vector<int>& order) const {
  if (static_cast<int>(order.size()) != dim()) {
    throw Error("permute(): " + std::to_string(order.size()) + " dimensions given for " +
                describe());
  }
  std::vector<bool> seen(order.size());
  Tensor t = *this;
  for (std::size_t i = 0; i < order.size(); ++i) {
    const int src = normalize_dim(order[i], dim());
    if (seen[src]) throw Error("permute(): dimension " + std::to_string(src) + " repeated");
    seen[src] = true;
    t.shape_[i] = shape_[src];
    t.strides_[i] = strides_[src];
  }
  return t;
}

Tensor Tensor::unsqueeze(int d) const {
  const int n = normalize_dim(d, dim() + 1);
  Tensor t = *this;
  const std::int64_t stride = n < dim() ? strides_[n] * shape_[n] : 1;
  t.shape_.insert(t.shape_.begin() + n, 1);
  t.strides_.insert(t.strides_.begin() + n, stride);
  return t;
}

namespace {

// Calls fn(storage_index) for every element of `t` in logical row-major order.
template <typename Fn>
void for_each_index(const Tensor& t, Fn&& fn) {
  const int rank = t.dim();
  const std::int64_t n = t.numel();
  if (n == 0) return;
  std::vector<std::int64_t> counter(rank, 0);
  std::int64_t index = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    fn(index);
    for (int d = rank - 1; d >= 0; --d) {
      if (++counter[d] < t.shape()[d]) {
        index += t.strides()[d];
        break;
      }
      index -= t.strides()[d] * (t.shape()[d] - 1);
      counter[d] = 0;
    }
  }
}

void require_host(const Tensor& t, const char* what) {
  if (!t.device().is_cpu()) {
    throw Error(std::string(what) + " works on host tensors; " + t.describe() +
                " needs a Backend copy");
  }
}

}  // namespace

Tensor Tensor::clone() const {
  require_host(*this, "clone()");
  return to(dtype_);
}

Tensor Tensor::contiguous() const {
  return is_contiguous() ? *this : clone();
}

Tensor Tensor::to(DType dtype) const {
  require_host(*this, "to()");
  Tensor out = empty(shape_, dtype);
  const void* src = raw_data();
  void* dst = out.raw_data();
  std::int64_t i = 0;
  if (dtype == dtype_) {
    // Same dtype: copy bytes, exact for every type (a trip through double would round int64
    // values beyond 2^53).
    const std::size_t size = element_size();
    const auto* from = static_cast<const std::byte*>(src);
    auto* to_bytes = static_cast<std::byte*>(dst);
    if (is_contiguous()) {
      std::memcpy(to_bytes, from, nbytes());
    } else {
      for_each_index(*this, [&](std::int64_t index) {
        std::memcpy(to_bytes + static_cast<std::size_t>(i++) * size,
                    from + static_cast<std::size_t>(index) * size, size);
      });
    }
    return out;
  }
  for_each_index(*this, [&](std::int64_t index) {
    store_from_double(dst, dtype, i++, load_as_double(src, dtype_, index));
  });
  return out;
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  require_host(*this, "to_vector()");
  std::vector<T> out;
  out.reserve(static_cast<std::size_t>(numel()));
  const void* src = raw_data();
  if (dtype_ == dtype_of_v<T>) {  // exact, as in to()
    for_each_index(*this,
                   [&](std::int64_t index) { out.push_back(static_cast<const T*>(src)[index]); });
    return out;
  }
  for_each_index(*this, [&](std::int64_t index) {
    out.push_back(static_cast<T>(load_as_double(src, dtype_, index)));
  });
  return out;
}

template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<std::int32_t> Tensor::to_vector<std::int32_t>() const;
template std::vector<std::int64_t> Tensor::to_vector<std::int64_t>() const;

std::string Tensor::describe() const {
  if (!storage_) return "undefined tensor";
  return std::string(dtype_name(dtype_)) + shape_str(shape_) + " on " + device().str();
}

double load_as_double(const void* base, DType dtype, std::int64_t i) {
  switch (dtype) {
    case DType::f32:
      return static_cast<const float*>(base)[i];
    case DType::f64:
      return static_cast<const double*>(base)[i];
    case DType::bf16:
      return static_cast<float>(static_cast<const bf16*>(base)[i]);
    case DType::f16:
      return static_cast<float>(static_cast<const f16*>(base)[i]);
    case DType::i32:
      return static_cast<const std::int32_t*>(base)[i];
    case DType::i64:
      return static_cast<double>(static_cast<const std::int64_t*>(base)[i]);
    case DType::u8:
      return static_cast<const std::uint8_t*>(base)[i];
  }
  return 0;
}

void store_from_double(void* base, DType dtype, std::int64_t i, double v) {
  switch (dtype) {
    case DType::f32:
      static_cast<float*>(base)[i] = static_cast<float>(v);
      return;
    case DType::f64:
      static_cast<double*>(base)[i] = v;
      return;
    case DType::bf16:
      static_cast<bf16*>(base)[i] = bf16(static_cast<float>(v));
      return;
    case DType::f16:
      static_cast<f16*>(base)[i] = f16(static_cast<float>(v));
      return;
    case DType::i32:
      static_cast<std::int32_t*>(base)[i] = static_cast<std::int32_t>(v);
      return;
    case DType::i64:
      static_cast<std::int64_t*>(base)[i] = static_cast<std::int64_t>(v);
      return;
    case DType::u8:
      static_cast<std::uint8_t*>(base)[i] = static_cast<std::uint8_t>(v);
      return;
  }
}

}  // namespace megatron
