// The NCCL communicator: without a usable CUDA device (or without NCCL in the build) creating one
// fails on every member with the reason; with a device, every operation on device buffers of a
// one-member group gives the single-rank results.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "megatron/backend/backend.h"
#include "megatron/backend/cuda_status.h"
#include "megatron/error.h"
#include "megatron/parallel/communicator.h"
#include "megatron/tensor/tensor.h"
#include "parallel/nccl_communicator.h"

namespace megatron {
namespace {

TEST(NcclCommunicator, CreationWithoutUsableDeviceFailsWithReason) {
  if (detail::nccl_available() && cuda_backend_available()) {
    GTEST_SKIP() << "a CUDA device is usable here (" << cuda_status().message
                 << "); this test covers machines without one";
  }
  auto group = make_self_communicator(0, "data");
  try {
    (void)detail::make_nccl_communicator(*group, 0);
    FAIL() << "created an NCCL communicator without a usable CUDA device";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("NCCL communicator for the data group on cuda:0: ", 0), 0u) << msg;
    const std::string reason =
        detail::nccl_available() ? "cudaSetDevice failed: " : "this build has no NCCL";
    EXPECT_NE(msg.find(reason), std::string::npos) << msg;
  }
}

class NcclDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!detail::nccl_available()) GTEST_SKIP() << "this build has no NCCL";
    if (!cuda_backend_available()) {
      GTEST_SKIP() << "no CUDA device (" << cuda_status().message << ")";
    }
    group_ = make_self_communicator(0, "tensor");
    nccl_ = detail::make_nccl_communicator(*group_, 0);
  }
  Backend& gpu() { return backend_for(Device::cuda(0)); }
  Tensor upload(const std::vector<float>& values) {
    Tensor h = Tensor::from<float>(values, {static_cast<std::int64_t>(values.size())});
    Tensor t = Tensor::empty(h.shape(), DType::f32, Device::cuda(0));
    gpu().copy(h, t);
    gpu().synchronize();  // the communicator's stream does not wait for the backend's
    return t;
  }
  std::vector<float> download(const Tensor& t) {
    Tensor h = Tensor::empty(t.shape(), t.dtype());
    gpu().copy(t, h);
    gpu().synchronize();
    return std::vector<float>(h.data<float>(), h.data<float>() + h.numel());
  }
  std::unique_ptr<Communicator> group_;
  std::unique_ptr<Communicator> nccl_;
};

TEST_F(NcclDevice, OneMemberOperationsOnDeviceBuffers) {
  EXPECT_EQ(nccl_->size(), 1);
  EXPECT_EQ(nccl_->name(), "tensor");
  Tensor a = upload({1.5f, -2.0f, 3.0f});
  nccl_->all_reduce(a.raw_data(), 3, DType::f32, ReduceOp::sum);
  EXPECT_EQ(download(a), (std::vector<float>{1.5f, -2.0f, 3.0f}));
  Tensor b = upload({0.0f, 0.0f, 0.0f});
  CommHandle h =
      nccl_->reduce_scatter_async(a.raw_data(), b.raw_data(), 3, DType::f32, ReduceOp::max);
  h.wait();
  EXPECT_EQ(download(b), (std::vector<float>{1.5f, -2.0f, 3.0f}));
  Tensor c = upload({9.0f, 9.0f, 9.0f});
  nccl_->all_gather(a.raw_data(), c.raw_data(), 3, DType::f32);
  EXPECT_EQ(download(c), (std::vector<float>{1.5f, -2.0f, 3.0f}));
  // all_to_all over one member is a copy of its block (a grouped send and recv to itself).
  Tensor d = upload({0.0f, 0.0f, 0.0f});
  nccl_->all_to_all_v(a.raw_data(), {3}, d.raw_data(), {3}, DType::f32);
  EXPECT_EQ(download(d), (std::vector<float>{1.5f, -2.0f, 3.0f}));
  nccl_->barrier();
  // Host memory is refused instead of faulting inside NCCL.
  std::vector<float> host(3, 0.0f);
  EXPECT_THROW(nccl_->all_reduce(host.data(), 3, DType::f32, ReduceOp::sum), Error);
}

}  // namespace
}  // namespace megatron
