// Tensor metadata, views sharing storage, copies and conversions, meta tensors and the allocator.
#include <gtest/gtest.h>

#include "megatron/tensor/allocator.h"
#include "megatron/tensor/tensor.h"

namespace megatron {
namespace {

Tensor iota(const Shape& shape) {
  std::vector<float> v(static_cast<std::size_t>(shape_numel(shape)));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  return Tensor::from(v, shape);
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Tensor, EmptyHasContiguousStridesAndAlignedData) {
  const Tensor t = Tensor::empty({2, 3, 5}, DType::f32);
  EXPECT_EQ(t.strides(), (Shape{15, 5, 1}));
  EXPECT_EQ(t.numel(), 30);
  EXPECT_EQ(t.nbytes(), 120u);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.raw_data()) % kCpuAlignment, 0u);
  EXPECT_EQ(t.describe(), "float32[2, 3, 5] on cpu");
}

TEST(Tensor, SliceSharesStorageAndOffsets) {
  const Tensor t = iota({4, 6});
  const Tensor s = t.slice(1, 2, 3);  // columns 2..4
  EXPECT_TRUE(s.shares_storage_with(t));
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{2, 3, 4, 8, 9, 10, 14, 15, 16, 20, 21, 22}));
  const Tensor rows = t.slice(0, 1, 2);
  EXPECT_TRUE(rows.is_contiguous());
  EXPECT_EQ(rows.offset(), 6);
  EXPECT_EQ(rows.select(0, 1).to_vector<float>(), (std::vector<float>{12, 13, 14, 15, 16, 17}));
}

TEST(Tensor, TransposeAndPermuteAreViews) {
  const Tensor t = iota({2, 3});
  const Tensor tt = t.transpose(0, 1);
  EXPECT_EQ(tt.shape(), (Shape{3, 2}));
  EXPECT_EQ(tt.to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  const Tensor p = iota({2, 3, 4}).permute({2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.strides(), (Shape{1, 12, 4}));
  EXPECT_EQ(p.contiguous().to_vector<float>()[1], 4.0f);  // element (0, 0, 1) = source (0, 1, 0)
  EXPECT_EQ(p.unsqueeze(0).shape(), (Shape{1, 4, 2, 3}));
}

TEST(Tensor, ViewInfersOneDimensionAndRefusesStridedData) {
  const Tensor t = iota({4, 6});
  EXPECT_EQ(t.view({-1, 3}).shape(), (Shape{8, 3}));
  EXPECT_NE(error_of([&] { t.view({5, -1}); }).find("cannot infer -1"), std::string::npos);
  EXPECT_NE(error_of([&] { t.view({5, 5}); }).find("does not match"), std::string::npos);
  EXPECT_NE(error_of([&] { t.transpose(0, 1).view({24}); }).find("non-contiguous"),
            std::string::npos);
  EXPECT_EQ(t.transpose(0, 1).contiguous().view({24}).to_vector<float>()[1], 6.0f);
}

TEST(Tensor, CloneIsIndependent) {
  Tensor t = iota({3});
  Tensor c = t.clone();
  c.data<float>()[0] = 100;
  EXPECT_EQ(t.data<float>()[0], 0.0f);
  EXPECT_FALSE(c.shares_storage_with(t));
}

// Same-dtype copies are exact: int64 values beyond 2^53 (token counts, offsets) survive clone,
// contiguous() of a strided view, and to_vector.
TEST(Tensor, SameDtypeCopiesAreExactForLargeIntegers) {
  const std::int64_t big = (std::int64_t{1} << 53) + 1, bigger = (std::int64_t{1} << 62) + 7;
  const Tensor t = Tensor::from(std::vector<std::int64_t>{big, 2, 3, bigger}, {2, 2});
  EXPECT_EQ(t.clone().to_vector<std::int64_t>(), (std::vector<std::int64_t>{big, 2, 3, bigger}));
  EXPECT_EQ(t.transpose(0, 1).contiguous().to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{big, 3, 2, bigger}));
  EXPECT_EQ(t.transpose(0, 1).to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{big, 3, 2, bigger}));
}

TEST(Tensor, ConversionsRoundThroughEachDtype) {
  const Tensor t = Tensor::from(std::vector<float>{1.0f, 1.0f + 0x1p-9f, -3.25f}, {3});
  EXPECT_EQ(t.to(DType::bf16).to_vector<float>(), (std::vector<float>{1.0f, 1.0f, -3.25f}));
  EXPECT_EQ(t.to(DType::f16).to_vector<float>(), (std::vector<float>{1.0f, 1.0f + 0x1p-9f, -3.25f}));
  EXPECT_EQ(t.to(DType::i32).to_vector<std::int32_t>(), (std::vector<std::int32_t>{1, 1, -3}));
  EXPECT_EQ(t.to(DType::f64).to_vector<double>()[1], 1.0 + 0x1p-9);
}

TEST(Tensor, WrongTypedAccessAndOutOfRangeViewsAreRefused) {
  const Tensor t = iota({2, 3});
  EXPECT_NE(error_of([&] { t.data<double>(); }).find("float32[2, 3] on cpu read as float64"),
            std::string::npos);
  EXPECT_NE(error_of([&] { t.slice(1, 2, 2); }).find("out of range"), std::string::npos);
  EXPECT_NE(error_of([&] { t.transpose(0, 2); }).find("dimension 2 is out of range"),
            std::string::npos);
  EXPECT_NE(error_of([&] { Tensor().raw_data(); }).find("undefined"), std::string::npos);
}

TEST(Tensor, MetaTensorsAllocateNothing) {
  Allocator& host = allocator_for(Device::cpu());
  const std::size_t before = host.bytes_in_use();
  // GPT-3's embedding table: 50304 x 12288 floats, 2.3 GiB if it were allocated.
  const Tensor big = Tensor::empty({50304, 12288}, DType::f32, Device::meta());
  EXPECT_EQ(host.bytes_in_use(), before);
  EXPECT_EQ(big.nbytes(), 50304ull * 12288 * 4);
  EXPECT_TRUE(big.device().is_meta());
  const Tensor shard = big.slice(0, 0, 6288);  // views work on meta tensors
  EXPECT_EQ(shard.shape(), (Shape{6288, 12288}));
  EXPECT_NE(error_of([&] { big.raw_data(); }).find("has no data"), std::string::npos);
}

TEST(Allocator, ReusesFreedBlocksOfTheSameSize) {
  Allocator& host = allocator_for(Device::cpu());
  void* first = nullptr;
  {
    const Tensor t = Tensor::empty({1000}, DType::f32);
    first = t.raw_data();
  }
  EXPECT_GE(host.bytes_cached(), 4000u);
  const Tensor again = Tensor::empty({1000}, DType::f32);
  EXPECT_EQ(again.raw_data(), first);
}

TEST(Device, ParsesNamesAndRefusesOthers) {
  EXPECT_EQ(Device::parse("cpu"), Device::cpu());
  EXPECT_EQ(Device::parse("cuda"), Device::cuda(0));
  EXPECT_EQ(Device::parse("cuda:3"), Device::cuda(3));
  EXPECT_EQ(Device::parse("meta"), Device::meta());
  EXPECT_EQ(Device::cuda(2).str(), "cuda:2");
  EXPECT_NE(error_of([] { Device::parse("cuda:x"); }).find("is not a device"), std::string::npos);
  EXPECT_NE(error_of([] { Device::parse("gpu"); }).find("is not a device"), std::string::npos);
}

}  // namespace
}  // namespace megatron
