// NCCL implementation of Communicator: collectives on CUDA device buffers, ordered on its own
// stream. Compiled only when the CUDA backend is enabled and libnccl was found.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "megatron/error.h"
#include "parallel/nccl_communicator.h"

namespace megatron::detail {
namespace {

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return ncclFloat32;
    case DType::f64:
      return ncclFloat64;
    case DType::bf16:
      return ncclBfloat16;
    case DType::f16:
      return ncclFloat16;
    case DType::i32:
      return ncclInt32;
    case DType::i64:
      return ncclInt64;
    case DType::u8:
      return ncclUint8;
  }
  throw Error("NCCL: unknown dtype value " + std::to_string(static_cast<int>(dtype)));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::max:
      return ncclMax;
    case ReduceOp::min:
      return ncclMin;
  }
  throw Error("NCCL: unknown reduce op value " + std::to_string(static_cast<int>(op)));
}

void check_cuda(cudaError_t rc, const std::string& what) {
  if (rc == cudaSuccess) return;
  throw Error(what + " failed: " + cudaGetErrorName(rc) + ": " + cudaGetErrorString(rc));
}

// Completion of work enqueued on the communicator's stream, marked by an event recorded after it.
class CudaEventRequest final : public CommRequest {
 public:
  CudaEventRequest(cudaEvent_t event, const char* operation, const std::string& group)
      : event_(event), operation_(operation), group_(group) {}
  CudaEventRequest(const CudaEventRequest&) = delete;
  CudaEventRequest& operator=(const CudaEventRequest&) = delete;
  ~CudaEventRequest() override { cudaEventDestroy(event_); }

  void wait() override { check_cuda(cudaEventSynchronize(event_), context()); }
  bool test() override {
    const cudaError_t rc = cudaEventQuery(event_);
    if (rc == cudaErrorNotReady) return false;
    check_cuda(rc, context());
    return true;
  }

 private:
  std::string context() const {
    return std::string(operation_) + " on the " + group_ + " group (NCCL)";
  }

  cudaEvent_t event_;
  const char* operation_;
  const std::string& group_;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(Communicator& group, int device, std::function<void()> before_start)
      : rank_(group.rank()),
        size_(group.size()),
        global_ranks_(group.global_ranks()),
        name_(group.name()),
        device_(device),
        before_start_(std::move(before_start)) {
    try {
      init(group);
    } catch (...) {
      release();
      throw;
    }
  }
  ~NcclCommunicator() override { release(); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::vector<int>& global_ranks() const override { return global_ranks_; }
  const std::string& name() const override { return name_; }

 protected:
  void all_reduce_impl(void* buf, std::size_t count, DType dtype, ReduceOp op) override {
    all_reduce_async_impl(buf, count, dtype, op).wait();
  }
  void broadcast_impl(void* buf, std::size_t count, DType dtype, int root) override {
    producers_done();
    check_device_buffer("broadcast", buf);
    check_nccl(ncclBroadcast(buf, buf, count, nccl_type(dtype), root, comm_, stream_),
               "ncclBroadcast");
    check_cuda(cudaStreamSynchronize(stream_), where("broadcast") + "cudaStreamSynchronize");
  }
  void barrier_impl() override {
    // NCCL has no barrier; a one-element all-reduce needs every member to take part.
    check_nccl(ncclAllReduce(barrier_word_, barrier_word_, 1, ncclInt32, ncclSum, comm_, stream_),
               "ncclAllReduce (barrier)");
    check_cuda(cudaStreamSynchronize(stream_), where("barrier") + "cudaStreamSynchronize");
  }
  CommHandle all_reduce_async_impl(void* buf, std::size_t count, DType dtype,
                                   ReduceOp op) override {
    producers_done();
    check_device_buffer("all_reduce", buf);
    check_nccl(ncclAllReduce(buf, buf, count, nccl_type(dtype), nccl_op(op), comm_, stream_),
               "ncclAllReduce");
    return record("all_reduce");
  }
  CommHandle reduce_scatter_impl(const void* send, void* recv, std::size_t recv_count, DType dtype,
                                 ReduceOp op) override {
    producers_done();
    check_device_buffer("reduce_scatter", send);
    check_device_buffer("reduce_scatter", recv);
    // NCCL's in-place form is the one the base class allows (recv at block rank of send).
    check_nccl(
        ncclReduceScatter(send, recv, recv_count, nccl_type(dtype), nccl_op(op), comm_, stream_),
        "ncclReduceScatter");
    return record("reduce_scatter");
  }
  CommHandle all_gather_impl(const void* send, void* recv, std::size_t send_count,
                             DType dtype) override {
    producers_done();
    check_device_buffer("all_gather", send);
    check_device_buffer("all_gather", recv);
    check_nccl(ncclAllGather(send, recv, send_count, nccl_type(dtype), comm_, stream_),
               "ncclAllGather");
    return record("all_gather");
  }
  // NCCL has no all-to-all of its own: one grouped send and recv per peer, as NCCL's guide and
  // Megatron's dispatcher (torch.distributed.all_to_all_single over NCCL) do it.
  CommHandle all_to_all_v_impl(const void* send, const std::vector<std::size_t>& send_counts,
                               void* recv, const std::vector<std::size_t>& recv_counts,
                               DType dtype) override {
    producers_done();
    const std::size_t elem = dtype_size(dtype);
    const auto* send_bytes = static_cast<const std::uint8_t*>(send);
    auto* recv_bytes = static_cast<std::uint8_t*>(recv);
    if (send) check_device_buffer("all_to_all", send);
    if (recv) check_device_buffer("all_to_all", recv);
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    std::size_t sent = 0, received = 0;
    for (int r = 0; r < size(); ++r) {
      const auto i = static_cast<std::size_t>(r);
      if (send_counts[i] > 0) {
        check_nccl(
            ncclSend(send_bytes + sent * elem, send_counts[i], nccl_type(dtype), r, comm_, stream_),
            "ncclSend");
      }
      if (recv_counts[i] > 0) {
        check_nccl(ncclRecv(recv_bytes + received * elem, recv_counts[i], nccl_type(dtype), r,
                            comm_, stream_),
                   "ncclRecv");
      }
      sent += send_counts[i];
      received += recv_counts[i];
    }
    check_nccl(ncclGroupEnd(), "ncclGroupEnd");
    return record("all_to_all");
  }
  CommHandle send_impl(const void* buf, std::size_t count, DType dtype, int peer,
                       int /*tag*/) override {
    producers_done();
    check_device_buffer("send", buf);
    check_nccl(ncclSend(buf, count, nccl_type(dtype), peer, comm_, stream_), "ncclSend");
    return record("send");
  }
  CommHandle recv_impl(void* buf, std::size_t count, DType dtype, int peer, int /*tag*/) override {
    producers_done();
    check_device_buffer("recv", buf);
    check_nccl(ncclRecv(buf, count, nccl_type(dtype), peer, comm_, stream_), "ncclRecv");
    return record("recv");
  }

 private:
  void init(Communicator& group) {
    // Every member reports whether it can go on before any enters ncclCommInitRank, which would
    // otherwise wait forever for a member that failed.
    std::string local_error;
    const cudaError_t set = cudaSetDevice(device_);
    if (set != cudaSuccess) {
      local_error = std::string("cudaSetDevice failed: ") + cudaGetErrorName(set) + ": " +
                    cudaGetErrorString(set);
      cudaGetLastError();  // clear the sticky error so later queries start clean
    }
    ncclUniqueId id{};
    if (local_error.empty() && rank_ == 0) {
      const ncclResult_t rc = ncclGetUniqueId(&id);
      if (rc != ncclSuccess)
        local_error = std::string("ncclGetUniqueId failed: ") + ncclGetErrorString(rc);
    }
    const std::int32_t all_ok =
        group.all_reduce_value<std::int32_t>(local_error.empty() ? 1 : 0, ReduceOp::min);
    if (!all_ok) {
      throw Error(prefix() + (local_error.empty()
                                  ? "another member could not bind its device or create the NCCL id"
                                  : local_error));
    }
    group.broadcast(&id, sizeof id, DType::u8, 0);
    check_nccl(ncclCommInitRank(&comm_, size_, id, rank_), "ncclCommInitRank");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
               prefix() + "cudaStreamCreateWithFlags");
    check_cuda(cudaMalloc(&barrier_word_, sizeof(std::int32_t)), prefix() + "cudaMalloc");
    check_cuda(cudaMemset(barrier_word_, 0, sizeof(std::int32_t)), prefix() + "cudaMemset");
  }

  void release() {
    if (barrier_word_ != nullptr) cudaFree(barrier_word_);
    if (comm_ != nullptr) {
      ncclCommFinalize(comm_);
      ncclCommDestroy(comm_);
    }
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    barrier_word_ = nullptr;
    comm_ = nullptr;
    stream_ = nullptr;
  }

  std::string prefix() const {
    return "NCCL communicator for the " + name_ + " group on cuda:" + std::to_string(device_) +
           ": ";
  }
  std::string where(const char* operation) const {
    return std::string(operation) + " on the " + name_ + " group (NCCL): ";
  }

  void check_nccl(ncclResult_t rc, const char* call) const {
    if (rc == ncclSuccess || rc == ncclInProgress) return;
    std::string msg = prefix() + call + " failed: " + ncclGetErrorString(rc);
    const char* last = comm_ != nullptr ? ncclGetLastError(comm_) : nullptr;
    if (last != nullptr && *last != '\0') msg += std::string(" (") + last + ")";
    throw Error(msg);
  }

  // NCCL reads host pointers as device addresses; refuse them with a message instead of a fault.
  void check_device_buffer(const char* operation, const void* buf) const {
    cudaPointerAttributes attr{};
    const cudaError_t rc = cudaPointerGetAttributes(&attr, buf);
    if (rc != cudaSuccess) cudaGetLastError();
    if (rc != cudaSuccess ||
        (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged)) {
      throw Error(where(operation) + "the buffer is not CUDA device memory");
    }
    if (attr.device != device_) {
      throw Error(where(operation) + "the buffer is on cuda:" + std::to_string(attr.device) +
                  ", this communicator on cuda:" + std::to_string(device_));
    }
  }

  // The buffers may be written by compute on another stream: let that finish first.
  void producers_done() {
    if (before_start_) before_start_();
  }

  CommHandle record(const char* operation) {
    cudaEvent_t event = nullptr;
    check_cuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
               where(operation) + "cudaEventCreateWithFlags");
    const cudaError_t rc = cudaEventRecord(event, stream_);
    if (rc != cudaSuccess) cudaEventDestroy(event);
    check_cuda(rc, where(operation) + "cudaEventRecord");
    return CommHandle(std::make_unique<CudaEventRequest>(event, operation, name_));
  }

  int rank_;
  int size_;
  std::vector<int> global_ranks_;
  std::string name_;
  int device_;
  std::function<void()> before_start_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  std::int32_t* barrier_word_ = nullptr;
};

}  // namespace

bool nccl_available() {
  return true;
}

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& mpi_group, int cuda_device,
                                                     std::function<void()> before_start) {
  return std::make_unique<NcclCommunicator>(mpi_group, cuda_device, std::move(before_start));
}

}  // namespace megatron::detail
