// Linear layer forward and backward through the backend's GEMM, with Megatron's tensor- and
// sequence-parallel communication at the layer's boundaries.
#include "megatron/nn/linear.h"

#include "megatron/nn/mixed_gemm.h"

namespace megatron::nn {

Linear Linear::declare(ParamFactory& factory, const std::string& prefix, std::int64_t in,
                       std::int64_t out, bool bias, float init_std, TensorParallel parallel,
                       int blocks) {
  Linear l;
  l.parallel = parallel;
  l.tp = factory.tp;
  const Split weight_split = parallel == TensorParallel::column ? Split{0, blocks}
                             : parallel == TensorParallel::row  ? Split{1, 1}
                                                                : Split{};
  l.weight = &factory.declare(prefix + ".weight", {out, in}, ParamInit::normal, init_std, true,
                              weight_split);
  l.weight->narrowable = true;
  if (bias) {
    const Split bias_split = parallel == TensorParallel::column ? Split{0, blocks} : Split{};
    l.bias = &factory.declare(prefix + ".bias", {out}, ParamInit::zeros, 0, false, bias_split);
    // A row-parallel bias is added to the sequence shard under sequence parallelism, so each
    // rank's gradient is a partial sum (Megatron sets the same attribute).
    l.bias->sequence_parallel = parallel == TensorParallel::row && factory.tp.sp();
  }
  return l;
}

Linear Linear::declare_column_blocks(ParamFactory& factory, const std::string& prefix,
                                     std::int64_t in, const std::vector<std::int64_t>& blocks,
                                     bool bias, float init_std) {
  Linear l;
  l.parallel = TensorParallel::column;
  l.tp = factory.tp;
  std::int64_t out = 0;
  for (std::int64_t b : blocks)
    out += b;
  const Split split{0, static_cast<int>(blocks.size()), blocks};
  l.weight =
      &factory.declare(prefix + ".weight", {out, in}, ParamInit::normal, init_std, true, split);
  l.weight->narrowable = true;
  if (bias) l.bias = &factory.declare(prefix + ".bias", {out}, ParamInit::zeros, 0, false, split);
  return l;
}

void Linear::forward(Backend& backend, const Tensor& x, Tensor& y, DType compute) const {
  if (parallel == TensorParallel::column && tp.sp()) {
    Tensor full = backend.empty({x.size(0) * tp.size, x.size(1)}, x.dtype());
    tp_gather_rows(tp, x, full);
    mixed_gemm(backend, full, false, weight->value, true, y, compute);
  } else if (parallel == TensorParallel::row && tp.sp()) {
    Tensor partial = backend.empty({y.size(0) * tp.size, y.size(1)}, y.dtype());
    mixed_gemm(backend, x, false, weight->value, true, partial, compute);
    tp_reduce_scatter_rows(tp, partial, y);
  } else {
    mixed_gemm(backend, x, false, weight->value, true, y, compute);
    if (parallel == TensorParallel::row) tp_all_reduce(tp, y);
  }
  if (bias) backend.bias_add(y, bias->value, y);
}

void Linear::backward(Backend& backend, const Tensor& x, const Tensor& dy, Tensor* dx,
                      DType compute) const {
  if (parallel == TensorParallel::column && tp.sp()) {
    // Megatron re-gathers the input rather than keeping the gathered copy from forward.
    Tensor full = backend.empty({x.size(0) * tp.size, x.size(1)}, x.dtype());
    tp_gather_rows(tp, x, full);
    mixed_gemm(backend, dy, true, full, false, weight->grad, compute, 1.0f, 1.0f);
    if (bias) backend.bias_grad(dy, bias->grad, true);
    if (dx) {
      Tensor partial = backend.empty(full.shape(), x.dtype());
      mixed_gemm(backend, dy, false, weight->value, false, partial, compute);
      tp_reduce_scatter_rows(tp, partial, *dx);
    }
    return;
  }
  if (parallel == TensorParallel::row && tp.sp()) {
    Tensor dy_full = backend.empty({dy.size(0) * tp.size, dy.size(1)}, dy.dtype());
    tp_gather_rows(tp, dy, dy_full);
    mixed_gemm(backend, dy_full, true, x, false, weight->grad, compute, 1.0f, 1.0f);
    if (bias) backend.bias_grad(dy, bias->grad, true);  // the shard's partial sum
    if (dx) mixed_gemm(backend, dy_full, false, weight->value, false, *dx, compute);
    return;
  }
  mixed_gemm(backend, dy, true, x, false, weight->grad, compute, 1.0f, 1.0f);
  if (bias) backend.bias_grad(dy, bias->grad, true);
  if (dx) {
    mixed_gemm(backend, dy, false, weight->value, false, *dx, compute);
    if (parallel == TensorParallel::column) tp_all_reduce(tp, *dx);
  }
}

}  // namespace megatron::nn
