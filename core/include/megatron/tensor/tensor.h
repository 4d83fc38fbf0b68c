// Tensor: shape, strides (in elements), dtype and device over reference-counted storage. Views
// (slices, transposes, reshapes of contiguous data) share storage; nothing is copied implicitly.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "megatron/dtype.h"
#include "megatron/error.h"
#include "megatron/tensor/device.h"
#include "megatron/tensor/half.h"

namespace megatron {

using Shape = std::vector<std::int64_t>;

std::int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[2, 3, 4]"
Shape contiguous_strides(const Shape& shape);

// A block of memory on one device; freed through its allocator when the last tensor lets go.
class Storage {
 public:
  Storage(Device device, std::size_t bytes);  // allocates (meta: records the size only)
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  Device device_;
  std::size_t bytes_;
  void* data_ = nullptr;
};

template <>
struct dtype_of<bf16> {
  static constexpr DType value = DType::bf16;
};
template <>
struct dtype_of<f16> {
  static constexpr DType value = DType::f16;
};

class Tensor {
 public:
  Tensor() = default;  // undefined: no storage, no shape

  // Uninitialised memory on `device` (meta: nothing is allocated).
  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu());
  // Host tensors filled with a value, or copied from host data.
  static Tensor zeros(const Shape& shape, DType dtype);
  static Tensor full(const Shape& shape, DType dtype, double value);
  template <typename T>
  static Tensor from(const std::vector<T>& values, const Shape& shape) {
    Tensor t = empty(shape, dtype_of_v<T>);
    if (static_cast<std::int64_t>(values.size()) != t.numel()) {
      throw Error("Tensor::from: " + std::to_string(values.size()) + " values for shape " +
                  shape_str(shape));
    }
    std::copy(values.begin(), values.end(), t.data<T>());
    return t;
  }

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int dim() const { return static_cast<int>(shape_.size()); }
  std::int64_t size(int d) const;  // negative d counts from the end
  std::int64_t stride(int d) const;
  std::int64_t numel() const { return shape_numel(shape_); }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::cpu(); }
  std::int64_t offset() const { return offset_; }  // in elements, into the storage
  std::size_t element_size() const { return dtype_size(dtype_); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * element_size(); }
  bool is_contiguous() const;
  bool shares_storage_with(const Tensor& other) const { return storage_ && storage_ == other.storage_; }
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  // Address of the first element; throws for meta tensors and undefined tensors.
  void* raw_data() const;
  // Typed access; throws when T does not match dtype().
  template <typename T>
  T* data() const {
    check_dtype(dtype_of_v<T>);
    return static_cast<T*>(raw_data());
  }

  // Views sharing storage.
  Tensor view(const Shape& shape) const;  // contiguous tensors only; one -1 is inferred
  Tensor slice(int dim, std::int64_t start, std::int64_t length) const;
  Tensor select(int dim, std::int64_t index) const;  // drops the dimension
  Tensor transpose(int d0, int d1) const;
  Tensor permute(const std::vector<int>& order) const;
  Tensor unsqueeze(int dim) const;
  // Splits dimension `dim` of size outer * inner into (outer, inner); valid for any strides.
  Tensor unflatten(int dim, std::int64_t outer, std::int64_t inner) const;

  // Copies (host tensors; device tensors go through a Backend).
  Tensor contiguous() const;  // this when already contiguous
  Tensor clone() const;       // always a new contiguous copy
  Tensor to(DType dtype) const;  // converted copy (host)
  // All elements in logical (row-major) order, converted to T (host).
  template <typename T>
  std::vector<T> to_vector() const;

  std::string describe() const;  // "float32[2, 3] on cpu"

 private:
  void check_dtype(DType wanted) const;
  int normalize_dim(int d, int rank) const;

  std::shared_ptr<Storage> storage_;
  Shape shape_;
  Shape strides_;
  std::int64_t offset_ = 0;
  DType dtype_ = DType::f32;
};

extern template std::vector<float> Tensor::to_vector<float>() const;
extern template std::vector<double> Tensor::to_vector<double>() const;
extern template std::vector<std::int32_t> Tensor::to_vector<std::int32_t>() const;
extern template std::vector<std::int64_t> Tensor::to_vector<std::int64_t>() const;

// Reads element `index` (a position in the storage, in elements) of a host tensor of any dtype
// as double, and writes one; used by copies, casts and test references.
double load_as_double(const void* base, DType dtype, std::int64_t index);
void store_from_double(void* base, DType dtype, std::int64_t index, double value);

}  // namespace megatron
