// The CUDA runtime seen from the outside: without a usable device every CUDA entry point fails
// with an Error that says why; with one, copies round-trip and the Philox fills, fill and cast give
// the CPU backend's values.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend_test_util.h"
#include "megatron/tensor/allocator.h"

namespace megatron::testing {
namespace {

constexpr const char* kNoCudaBuild = "configure with -DMEGATRON_CUDA=ON";

// The text backend_for(cuda:0) must carry on this machine, or "" when the machine is in a state
// the message cannot be predicted for (a device is listed but cannot run our kernels).
std::string expected_reason() {
  const CudaStatus status = cuda_status();
  if (!status.compiled) return kNoCudaBuild;
  if (status.message == "no CUDA devices") return "0 CUDA device(s)";
  if (status.message.find("kernel launch failed") != std::string::npos) return "";
  return status.message;  // the CUDA runtime's error name and text
}

void skip_if_usable() {
  if (cuda_backend_available()) {
    GTEST_SKIP() << "a CUDA device is usable here (" << cuda_status().message
                 << "); this test covers machines without one";
  }
}

TEST(CudaRuntime, AvailabilityMatchesStatus) {
  const CudaStatus status = cuda_status();
  EXPECT_EQ(cuda_backend_available(), status.device_count > 0) << status.message;
  if (!status.compiled) {
    EXPECT_FALSE(cuda_backend_available());
    EXPECT_EQ(status.device_count, 0);
  } else {
    EXPECT_FALSE(status.archs.empty());
  }
  EXPECT_FALSE(status.message.empty());
}

TEST(CudaRuntime, BackendForUnusableDeviceThrowsWithReason) {
  skip_if_usable();
  const std::string reason = expected_reason();
  try {
    backend_for(Device::cuda(0));
    FAIL() << "backend_for(cuda:0) returned although no CUDA device is usable";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("cuda:0"), std::string::npos) << message;
    EXPECT_NE(message.find(reason), std::string::npos)
        << "message: " << message << "\nexpected to contain: " << reason;
  }
  // A second request fails the same way (nothing half-built is cached).
  EXPECT_THROW(backend_for(Device::cuda(0)), Error);
}

TEST(CudaRuntime, OutOfRangeOrdinalThrows) {
  const int past_last = cuda_status().device_count;
  EXPECT_THROW(backend_for(Device::cuda(past_last)), Error);
  EXPECT_THROW(Tensor::empty({4}, DType::f32, Device::cuda(past_last)), Error);
}

TEST(CudaRuntime, CudaTensorsCannotBeAllocatedWithoutDevice) {
  skip_if_usable();
  const std::string reason = expected_reason();
  try {
    Tensor t = Tensor::empty({2, 3}, DType::f32, Device::cuda(0));
    FAIL() << "allocated " << t.describe() << " although no CUDA device is usable";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
  }
  EXPECT_THROW(allocator_for(Device::cuda(0)), Error);
  // Planning on meta tensors still works without a device.
  EXPECT_NO_THROW(Tensor::empty({2, 3}, DType::f32, Device::meta()));
}

// ---- with a device ---------------------------------------------------------------------------

class CudaDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_backend_available()) {
      GTEST_SKIP() << "no usable CUDA device: " << cuda_status().message;
    }
  }
  Backend& gpu() { return backend_for(Device::cuda(0)); }
  Tensor download(const Tensor& t) {
    Tensor h = Tensor::empty(t.shape(), t.dtype());
    gpu().copy(t, h);
    return h;
  }
  Tensor upload(const Tensor& h) {
    Tensor t = Tensor::empty(h.shape(), h.dtype(), Device::cuda(0));
    gpu().copy(h, t);
    return t;
  }
};

// Host data of any dtype with distinct byte patterns.
Tensor patterned(const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  auto* bytes = static_cast<unsigned char*>(t.raw_data());
  for (std::size_t i = 0; i < t.nbytes(); ++i)
    bytes[i] = static_cast<unsigned char>(i * 37 + 11);
  return t;
}

TEST_F(CudaDevice, CopyRoundTripsEveryDtypeAndLayout) {
  for (DType dtype :
       {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64, DType::u8}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    const Tensor host = patterned({3, 5, 7}, dtype);
    EXPECT_TRUE(bitwise_equal(download(upload(host)), host));

    // Strided on both sides: a permuted host view into a sliced device view and back.
    const Tensor host_view = host.permute({2, 0, 1});  // (7, 3, 5)
    Tensor device_big = Tensor::empty({9, 3, 6}, dtype, Device::cuda(0));
    Tensor device_view = device_big.slice(0, 1, 7).slice(2, 1, 5 + 0);
    gpu().copy(host_view, device_view);
    Tensor back = Tensor::empty({5, 7, 3}, dtype).permute({1, 2, 0});  // strided host target
    gpu().copy(device_view, back);
    EXPECT_TRUE(bitwise_equal(back, host_view));

    // Device to device, strided.
    Tensor device_copy = Tensor::empty({7, 3, 5}, dtype, Device::cuda(0));
    gpu().copy(device_view, device_copy);
    EXPECT_TRUE(bitwise_equal(download(device_copy), host_view));
  }
}

TEST_F(CudaDevice, UniformFillEqualsCpuBitForBit) {
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    Tensor expected = Tensor::empty({37, 29}, dtype);
    host().fill_uniform(expected, -3.0f, 5.0f, 1234, 77);
    Tensor device = Tensor::empty({37, 29}, dtype, Device::cuda(0));
    gpu().fill_uniform(device, -3.0f, 5.0f, 1234, 77);
    EXPECT_TRUE(bitwise_equal(download(device), expected));

    // A transposed view draws element i (logical order) from stream index offset + i too.
    Tensor expected_t = Tensor::empty({29, 37}, dtype).transpose(0, 1);
    host().fill_uniform(expected_t, 0.0f, 1.0f, 9, 5);
    Tensor device_t = Tensor::empty({29, 37}, dtype, Device::cuda(0)).transpose(0, 1);
    gpu().fill_uniform(device_t, 0.0f, 1.0f, 9, 5);
    EXPECT_TRUE(bitwise_equal(download(device_t), expected_t));
  }
}

// Box-Muller uses logf and cosf: CUDA's device versions are within 1 and 2 ulp of the exact
// result, glibc's within 1, so a few elements may differ in the last bits; everything else is the
// same arithmetic. Reports how many differ.
TEST_F(CudaDevice, NormalFillMatchesCpuUpToDeviceLibm) {
  Tensor expected = Tensor::empty({1 << 16}, DType::f32);
  host().fill_normal(expected, 0.5f, 2.0f, 42, 1000);
  Tensor device = Tensor::empty({1 << 16}, DType::f32, Device::cuda(0));
  gpu().fill_normal(device, 0.5f, 2.0f, 42, 1000);
  const auto a = download(device).to_vector<float>();
  const auto e = expected.to_vector<float>();
  std::size_t differing = 0;
  double worst_ulps = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i] == e[i]) continue;
    ++differing;
    const double ulp = std::abs(std::nextafter(e[i], INFINITY) - e[i]);
    worst_ulps = std::max(worst_ulps, std::abs(double(a[i]) - e[i]) / ulp);
  }
  RecordProperty("differing_elements", static_cast<int>(differing));
  EXPECT_LE(worst_ulps, 8.0) << differing << " of " << a.size() << " elements differ";
  EXPECT_LT(differing, a.size() / 10) << "far more differences than libm rounding explains";
}

TEST_F(CudaDevice, FillAndCastEqualCpuBitForBit) {
  for (DType dtype :
       {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64, DType::u8}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    Tensor expected = Tensor::empty({5, 6}, dtype);
    host().fill(expected, 3.3);
    Tensor device = Tensor::empty({6, 5}, dtype, Device::cuda(0)).transpose(0, 1);
    gpu().fill(device, 3.3);
    EXPECT_TRUE(bitwise_equal(download(device), expected));
  }
  const Tensor source = random_tensor({33, 17}, DType::f64, 5, -70000.0f, 70000.0f);
  for (DType from : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    Tensor host_from = Tensor::empty(source.shape(), from);
    host().cast(source, host_from);
    const Tensor device_from = upload(host_from);
    for (DType to : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
      SCOPED_TRACE(std::string(dtype_name(from)) + " -> " + std::string(dtype_name(to)));
      Tensor expected = Tensor::empty({17, 33}, to).transpose(0, 1);
      host().cast(host_from, expected);
      Tensor device_to = Tensor::empty({17, 33}, to, Device::cuda(0)).transpose(0, 1);
      gpu().cast(device_from, device_to);
      EXPECT_TRUE(bitwise_equal(download(device_to), expected));
    }
  }
}

TEST_F(CudaDevice, OpsRejectTensorsOnOtherDevices) {
  const Tensor on_host = Tensor::zeros({4}, DType::f32);
  Tensor on_device = Tensor::empty({4}, DType::f32, Device::cuda(0));
  EXPECT_THROW(gpu().add(on_host, on_device, on_device), Error);
  EXPECT_THROW(host().add(on_device, on_host, on_device), Error);
}

}  // namespace
}  // namespace megatron::testing
