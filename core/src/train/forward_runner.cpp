// Forward-only evaluation passes at any layout (megatron/train/forward_runner.h): the pipeline
// executor's forward schedule, then the last stage's results broadcast over the pipeline group.
#include "megatron/train/forward_runner.h"

#include <cstring>
#include <string>

#include "megatron/error.h"
#include "megatron/train/model_setup.h"
#include "pipeline_executor.h"

namespace megatron::train {

namespace {

// A flat byte encoding of a StepResult, so the last stage can broadcast it in two calls (size,
// bytes) whatever terms and outputs the model returns.
class Bytes {
 public:
  std::vector<std::uint8_t> data;
  std::size_t read_at = 0;

  template <typename T>
  void put(const T& v) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(&v);
    data.insert(data.end(), p, p + sizeof(T));
  }
  void put_string(const std::string& s) {
    put<std::uint64_t>(s.size());
    data.insert(data.end(), s.begin(), s.end());
  }
  template <typename T>
  T get() {
    T v;
    std::memcpy(&v, data.data() + read_at, sizeof(T));
    read_at += sizeof(T);
    return v;
  }
  std::string get_string() {
    const auto n = static_cast<std::size_t>(get<std::uint64_t>());
    std::string s(reinterpret_cast<const char*>(data.data() + read_at), n);
    read_at += n;
    return s;
  }
};

Bytes encode(const StepResult& r) {
  Bytes b;
  b.put<std::uint64_t>(r.losses.size());
  for (const LossTerm& t : r.losses) {
    b.put_string(t.name);
    b.put(t.sum);
    b.put(t.count);
    b.put<std::uint8_t>(t.objective);
  }
  b.put<std::uint64_t>(r.outputs.size());
  for (const auto& [name, tensor] : r.outputs) {
    const Tensor t = tensor.contiguous();
    b.put_string(name);
    b.put<std::int32_t>(static_cast<std::int32_t>(t.dtype()));
    b.put<std::uint64_t>(t.shape().size());
    for (std::int64_t d : t.shape())
      b.put(d);
    const auto* p = static_cast<const std::uint8_t*>(t.raw_data());
    b.data.insert(b.data.end(), p, p + static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype()));
  }
  return b;
}

StepResult decode(Bytes& b) {
  StepResult r;
  const auto terms = b.get<std::uint64_t>();
  for (std::uint64_t i = 0; i < terms; ++i) {
    LossTerm t;
    t.name = b.get_string();
    t.sum = b.get<double>();
    t.count = b.get<double>();
    t.objective = b.get<std::uint8_t>() != 0;
    r.losses.push_back(t);
  }
  const auto outputs = b.get<std::uint64_t>();
  for (std::uint64_t i = 0; i < outputs; ++i) {
    const std::string name = b.get_string();
    const auto dtype = static_cast<DType>(b.get<std::int32_t>());
    Shape shape(static_cast<std::size_t>(b.get<std::uint64_t>()));
    for (auto& d : shape)
      d = b.get<std::int64_t>();
    Tensor t = Tensor::empty(shape, dtype);
    const std::size_t bytes = static_cast<std::size_t>(t.numel()) * dtype_size(dtype);
    std::memcpy(t.raw_data(), b.data.data() + b.read_at, bytes);
    b.read_at += bytes;
    r.outputs.emplace_back(name, std::move(t));
  }
  return r;
}

}  // namespace

ForwardRunner::ForwardRunner(Model& model, ParallelState& parallel, const config::CoreConfig& core)
    : model_(model), parallel_(parallel), core_(core) {}

StepResult ForwardRunner::run(const std::vector<Batch>& micro_batches, bool outputs) {
  if (micro_batches.empty()) return {};
  const std::int64_t mbs = micro_batches.front().size();
  for (const Batch& b : micro_batches) {
    if (b.size() != mbs) {
      throw Error("forward pass: micro-batches of " + std::to_string(b.size()) + " and " +
                  std::to_string(mbs) + " samples; every micro-batch must have the same size");
    }
  }
  auto options = [outputs](std::int64_t) {
    StepOptions o;
    o.backward = false;
    o.training = false;
    o.outputs = outputs;
    return o;
  };
  const PipelineLayout layout = model_pipeline_layout(core_, model_);
  const int pp = layout.pipeline_size;
  if (pp == 1) {
    StepResult total;
    for (std::size_t k = 0; k < micro_batches.size(); ++k)
      total.add(model_.step(micro_batches[k], options(static_cast<std::int64_t>(k))));
    return total;
  }
  Communicator& pipeline = parallel_.device_comm(Group::pipeline);
  StepResult last = run_pipeline_step(
      model_,
      {layout, parallel_.pp_rank(), pipeline, static_cast<std::int64_t>(micro_batches.size()), mbs,
       parallel_.device(), false,
       [&](std::int64_t k) { return micro_batches[static_cast<std::size_t>(k)]; }, options});
  // The last stage computed the results; every stage gets them.
  Communicator& host = parallel_.comm(Group::pipeline);
  const int root = pp - 1;
  Bytes bytes;
  if (parallel_.pp_rank() == root) bytes = encode(last);
  std::int64_t size = static_cast<std::int64_t>(bytes.data.size());
  host.broadcast(&size, 1, DType::i64, root);
  bytes.data.resize(static_cast<std::size_t>(size));
  host.broadcast(bytes.data.data(), bytes.data.size(), DType::u8, root);
  return parallel_.pp_rank() == root ? last : decode(bytes);
}

}  // namespace megatron::train
