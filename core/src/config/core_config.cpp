// Schemas, defaults (Megatron-LM's) and cross-key rules of the core config tables.
#include "megatron/config/core_config.h"

#include "megatron/error.h"
#include "megatron/tensor/device.h"

namespace megatron::config {

namespace {

TableSchema parallel_schema() {
  TableSchema s("parallel",
                "how ranks are split into tensor, pipeline, context, expert and data groups");
  s.integer("tensor_model_parallel_size", 1, "ranks that split each layer's weights",
            Range::at_least(1))
      .integer("pipeline_model_parallel_size", 1, "pipeline stages", Range::at_least(1))
      .integer("context_parallel_size", 1, "ranks that split the sequence in attention",
               Range::at_least(1))
      .integer("expert_model_parallel_size", 1, "ranks that split the experts", Range::at_least(1))
      .integer("expert_tensor_parallel_size", 0,
               "tensor parallelism inside experts; 0 means tensor_model_parallel_size",
               Range::at_least(0))
      .boolean("sequence_parallel", false,
               "shard norms and dropout along the sequence across TP ranks")
      .optional_integer("num_layers_per_virtual_pipeline_stage",
                        "layers per virtual stage (interleaved 1F1B schedule)", Range::at_least(1))
      .integer("microbatch_group_size_per_vp_stage", 0,
               "micro-batches per group of the interleaved schedule; 0 means "
               "pipeline_model_parallel_size",
               Range::at_least(0))
      .integer("decoder_first_pipeline_num_layers", 0,
               "layers on the first pipeline stage; 0 means an even split", Range::at_least(0))
      .integer("decoder_last_pipeline_num_layers", 0,
               "layers on the last pipeline stage; 0 means an even split", Range::at_least(0))
      .boolean("use_tp_pp_dp_mapping", false,
               "order ranks tp-cp-ep-pp-dp instead of tp-cp-ep-dp-pp");
  s.rule([](const ConfigTable& t) {
    if (t.boolean("sequence_parallel") && t.integer("tensor_model_parallel_size") == 1) {
      t.fail("sequence_parallel",
             "sequence parallelism shards activations across tensor-parallel ranks and needs "
             "tensor_model_parallel_size > 1 (it is 1)");
    }
  });
  return s;
}

TableSchema training_schema() {
  TableSchema s("training", "batch sizes, schedule, optimisation and evaluation");
  s.integer("micro_batch_size", 1, "samples per forward/backward on one rank", Range::at_least(1))
      .optional_integer("global_batch_size",
                        "samples per optimizer step over all data-parallel ranks "
                        "(default: micro_batch_size x data-parallel size)",
                        Range::at_least(1))
      .optional_integer_list("rampup_batch_size", "[start, increment, ramp-up samples]",
                             Range::at_least(1))
      .optional_integer("train_iters", "optimizer steps to train for", Range::at_least(0))
      .optional_integer("train_samples", "samples to train for", Range::at_least(0))
      .optional_real("lr", "peak learning rate", Range::at_least(0))
      .real("min_lr", 0.0, "learning rate at the end of decay", Range::at_least(0))
      .string("lr_decay_style", "linear", "learning-rate decay after warm-up",
              {"constant", "linear", "cosine", "inverse-square-root", "WSD"})
      .optional_integer("lr_decay_iters", "iterations to decay over (default: train_iters)",
                        Range::at_least(1))
      .optional_integer("lr_decay_samples", "samples to decay over (default: train_samples)",
                        Range::at_least(1))
      .integer("lr_warmup_iters", 0, "iterations of linear warm-up", Range::at_least(0))
      .integer("lr_warmup_samples", 0, "samples of linear warm-up", Range::at_least(0))
      .optional_real("lr_warmup_fraction", "warm-up as a fraction of the decay span",
                     Range::between(0, 1))
      .real("lr_warmup_init", 0.0, "learning rate warm-up starts from", Range::at_least(0))
      .string("lr_wsd_decay_style", "exponential", "annealing curve at the end of WSD",
              {"exponential", "linear", "cosine", "minus_sqrt"})
      .optional_integer("lr_wsd_decay_iters", "iterations of WSD annealing (with train_iters)",
                        Range::at_least(1))
      .optional_integer("lr_wsd_decay_samples", "samples of WSD annealing (with train_samples)",
                        Range::at_least(1))
      .real("weight_decay", 0.01, "decoupled weight decay", Range::at_least(0))
      .optional_real("start_weight_decay", "weight decay at the start of a linear/cosine increment",
                     Range::at_least(0))
      .optional_real("end_weight_decay", "weight decay at the end of a linear/cosine increment",
                     Range::at_least(0))
      .string("weight_decay_incr_style", "constant",
              "weight decay from start_weight_decay to end_weight_decay over training",
              {"constant", "linear", "cosine"})
      .real("clip_grad", 1.0, "clip gradients to this global L2 norm (0: no clipping)",
            Range::at_least(0))
      .integer("seed", 1234, "random seed for initialisation, data order and dropout",
               Range::at_least(0))
      .integer("eval_interval", 1000, "iterations between validation runs", Range::at_least(1))
      .integer("eval_iters", 100, "iterations per validation run", Range::at_least(0))
      .optional_integer("exit_interval", "save and exit when the iteration is a multiple of this",
                        Range::at_least(1))
      .integer("max_skipped_nan_steps", 10,
               "consecutive steps skipped for NaN/Inf in the loss or gradient norm before the "
               "run saves and stops (0: stop at the first)",
               Range::at_least(0))
      .boolean("bf16", false, "bf16 mixed precision with fp32 master weights")
      .boolean("fp16", false, "fp16 mixed precision with dynamic loss scaling")
      .optional_real("loss_scale", "static loss scale for fp16/bf16 (default: dynamic for fp16)",
                     Range::positive())
      .real("initial_loss_scale", 4294967296.0, "dynamic loss scale to start from",
            Range::positive())
      .real("min_loss_scale", 1.0, "dynamic loss scale floor", Range::positive())
      .integer("loss_scale_window", 1000, "overflow-free iterations before the scale doubles",
               Range::at_least(1))
      .integer("hysteresis", 2, "overflows tolerated before the scale halves", Range::at_least(1));

  s.rule([](const ConfigTable& t) {
    if (t.has("train_iters") && t.has("train_samples")) {
      t.fail("train_samples", "set either train_iters or train_samples, not both");
    }
    if (t.has("lr_decay_iters") && t.has("lr_decay_samples")) {
      t.fail("lr_decay_samples", "set either lr_decay_iters or lr_decay_samples, not both");
    }
    if (t.has("lr_wsd_decay_iters") && t.has("lr_wsd_decay_samples")) {
      t.fail("lr_wsd_decay_samples",
             "set either lr_wsd_decay_iters or lr_wsd_decay_samples, not both");
    }
    int warmups = (t.integer("lr_warmup_iters") > 0) + (t.integer("lr_warmup_samples") > 0) +
                  t.has("lr_warmup_fraction");
    if (warmups > 1) {
      t.fail(t.has("lr_warmup_fraction") ? "lr_warmup_fraction" : "lr_warmup_samples",
             "set at most one of lr_warmup_iters, lr_warmup_samples and lr_warmup_fraction");
    }
    if (t.has("train_iters")) {
      // Megatron-LM: iteration-based training counts every schedule in iterations.
      if (t.has("lr_decay_samples"))
        t.fail("lr_decay_samples", "with train_iters, give the decay span as lr_decay_iters");
      if (t.integer("lr_warmup_samples") > 0)
        t.fail("lr_warmup_samples", "with train_iters, give warm-up as lr_warmup_iters");
      if (t.has("lr_wsd_decay_samples"))
        t.fail("lr_wsd_decay_samples",
               "with train_iters, give the WSD annealing span as lr_wsd_decay_iters");
      if (t.has("rampup_batch_size"))
        t.fail("rampup_batch_size",
               "batch-size ramp-up is only supported with sample-based training (train_samples)");
    }
    if (t.has("train_samples")) {
      if (t.has("lr_decay_iters"))
        t.fail("lr_decay_iters", "with train_samples, give the decay span as lr_decay_samples");
      if (t.integer("lr_warmup_iters") > 0)
        t.fail("lr_warmup_iters", "with train_samples, give warm-up as lr_warmup_samples");
      if (t.has("lr_wsd_decay_iters"))
        t.fail("lr_wsd_decay_iters",
               "with train_samples, give the WSD annealing span as lr_wsd_decay_samples");
    }
    // Megatron asserts the annealing span exists when the scheduler is built; say so up front.
    if (t.string("lr_decay_style") == "WSD" && !t.has("lr_wsd_decay_iters") &&
        !t.has("lr_wsd_decay_samples")) {
      t.fail("lr_decay_style",
             "lr_decay_style \"WSD\" needs its annealing span: set lr_wsd_decay_iters (with "
             "train_iters) or lr_wsd_decay_samples (with train_samples)");
    }
    if (t.has("lr") && t.real("lr_warmup_init") > t.real("lr")) {
      t.fail("lr_warmup_init", "lr_warmup_init (" + format_value(t.real("lr_warmup_init")) +
                                   ") is larger than lr (" + format_value(t.real("lr")) + ")");
    }
    // Megatron's validate_args: the constant style uses weight_decay, the others start/end.
    if (t.string("weight_decay_incr_style") == "constant") {
      for (const char* key : {"start_weight_decay", "end_weight_decay"}) {
        if (t.has(key))
          t.fail(key, std::string(key) +
                          " applies only with weight_decay_incr_style \"linear\" or \"cosine\"; "
                          "with \"constant\" the weight decay is weight_decay");
      }
    } else {
      if (!t.has("start_weight_decay") || !t.has("end_weight_decay")) {
        t.fail("weight_decay_incr_style", "weight_decay_incr_style \"" +
                                              t.string("weight_decay_incr_style") +
                                              "\" needs start_weight_decay and end_weight_decay");
      }
      if (t.real("end_weight_decay") < t.real("start_weight_decay")) {
        t.fail("end_weight_decay", "end_weight_decay (" + format_value(t.real("end_weight_decay")) +
                                       ") is smaller than start_weight_decay (" +
                                       format_value(t.real("start_weight_decay")) + ")");
      }
    }
    if (t.real("min_loss_scale") > t.real("initial_loss_scale")) {
      t.fail("min_loss_scale", "min_loss_scale (" + format_value(t.real("min_loss_scale")) +
                                   ") is larger than initial_loss_scale (" +
                                   format_value(t.real("initial_loss_scale")) + ")");
    }
    if (t.has("lr") && t.real("min_lr") > t.real("lr")) {
      t.fail("min_lr", "min_lr (" + format_value(t.real("min_lr")) + ") is larger than lr (" +
                           format_value(t.real("lr")) + ")");
    }
    if (t.boolean("bf16") && t.boolean("fp16")) {
      t.fail("fp16", "bf16 and fp16 cannot both be enabled");
    }
    const std::int64_t micro = t.integer("micro_batch_size");
    if (t.has("global_batch_size") && t.integer("global_batch_size") % micro != 0) {
      t.fail("global_batch_size",
             "global_batch_size (" + std::to_string(t.integer("global_batch_size")) +
                 ") must be a multiple of micro_batch_size (" + std::to_string(micro) + ")");
    }
    if (t.has("rampup_batch_size")) {
      const auto& r = t.integer_list("rampup_batch_size");
      if (r.size() != 3) {
        t.fail("rampup_batch_size",
               "expected 3 integers [start, increment, ramp-up samples], got " +
                   std::to_string(r.size()));
      }
      if (!t.has("global_batch_size")) {
        t.fail("rampup_batch_size", "batch-size ramp-up needs global_batch_size to ramp up to");
      }
      const std::int64_t global = t.integer("global_batch_size");
      if (r[0] > global || (global - r[0]) % r[1] != 0) {
        t.fail("rampup_batch_size", "global_batch_size (" + std::to_string(global) +
                                        ") minus the start (" + std::to_string(r[0]) +
                                        ") must be a non-negative multiple of the increment (" +
                                        std::to_string(r[1]) + ")");
      }
    }
  });
  return s;
}

TableSchema ddp_schema() {
  TableSchema s("ddp", "data-parallel gradient reduction and the distributed optimizer");
  s.boolean("overlap_grad_reduce", false,
            "reduce each gradient bucket as soon as backward completes it (last micro-batch)")
      .boolean("use_distributed_optimizer", false,
               "shard fp32 master weights and optimizer state over data-parallel ranks (ZeRO-1)")
      .boolean("overlap_param_gather", false,
               "start the distributed optimizer's parameter all-gather after the step and wait "
               "for it only before the next forward")
      .optional_integer("ddp_bucket_size",
                        "elements per gradient bucket with overlap_grad_reduce "
                        "(default: max(40M, 1M x data-parallel size))",
                        Range::at_least(1));
  s.rule([](const ConfigTable& t) {
    if (t.boolean("overlap_param_gather") && !t.boolean("use_distributed_optimizer")) {
      t.fail("overlap_param_gather",
             "overlap_param_gather overlaps the distributed optimizer's parameter all-gather and "
             "needs use_distributed_optimizer = true");
    }
    if (t.has("ddp_bucket_size") && !t.boolean("overlap_grad_reduce")) {
      t.fail("ddp_bucket_size",
             "ddp_bucket_size applies only with overlap_grad_reduce = true; without overlap "
             "the gradients are reduced as one bucket (Megatron's rule)");
    }
  });
  return s;
}

TableSchema checkpoint_schema() {
  TableSchema s("checkpoint", "saving and resuming");
  s.optional_path("save", "directory to save checkpoints into")
      .optional_path("load", "directory to resume from")
      .optional_integer("save_interval", "iterations between saves", Range::at_least(1))
      .boolean("finetune", false, "load weights only and restart iteration count")
      .boolean("no_load_optim", false, "do not load the optimizer state")
      .boolean("no_load_rng", false, "do not load the random-number-generator state")
      .boolean("exit_on_save_failure", false,
               "stop (exit code 4) when a checkpoint cannot be saved, e.g. the disk is full; "
               "otherwise log it and train on")
      .boolean("fallback_to_previous", false,
               "when the latest checkpoint in `load` is damaged (fails its checksums), resume "
               "from the newest intact one instead of stopping (exit code 5)");
  s.rule([](const ConfigTable& t) {
    if (t.has("save_interval") && !t.has("save")) {
      t.fail("save_interval", "save_interval is set but there is no `save` directory to save to");
    }
    if (t.boolean("finetune") && !t.has("load")) {
      t.fail("finetune", "finetune starts from the checkpoint in `load`, which is not set");
    }
  });
  return s;
}

TableSchema logging_schema() {
  TableSchema s("logging", "log lines and metrics");
  s.string("level", "info", "least severe level printed",
           {"trace", "debug", "info", "warn", "error", "critical", "off"})
      .optional_path("file", "also log to this file; {rank} is replaced by the world rank")
      .integer("log_interval", 100, "iterations between training log lines", Range::at_least(1))
      .optional_path("metrics_file", "JSON-lines file receiving the logged figures");
  return s;
}

TableSchema runtime_schema() {
  TableSchema s("runtime", "threads and device");
  s.integer("threads", 0, "compute threads per rank; 0: OMP_NUM_THREADS or every core",
            Range::between(0, 1024))
      .string("device", "cpu", "cpu, cuda (this rank's local GPU) or cuda:N")
      .boolean("skip_memory_check", false,
               "start training without comparing the memory `plan` computes per rank with the "
               "memory this rank can use")
      .real("peak_tflops", 0.0,
            "one rank's peak TFLOP/s at the run's GEMM precision, the MFU's denominator; 0: "
            "measured at start-up with a GEMM on the rank's device",
            Range::at_least(0));
  s.rule([](const ConfigTable& t) {
    const std::string& device = t.string("device");
    bool valid = true;
    try {
      valid = !Device::parse(device).is_meta();
    } catch (const Error&) {
      valid = false;
    }
    if (!valid) {
      t.fail("device", "\"" + t.string("device") + "\" is not a device: use cpu, cuda or cuda:N");
    }
  });
  return s;
}

TableSchema plugins_schema() {
  TableSchema s("plugins", "where to look for plugin shared libraries");
  s.path_list("paths",
              "plugin files or directories, searched before MEGATRON_PLUGIN_PATH and the "
              "installed plugin directory");
  return s;
}

const ConfigTable& find_table(const std::vector<ConfigTable>& tables, const std::string& name) {
  for (const auto& t : tables) {
    if (t.name() == name) return t;
  }
  throw Error("core config table [" + name + "] was not validated");
}

template <typename T>
std::optional<T> optional_int(const ConfigTable& t, const char* key) {
  if (!t.has(key)) return std::nullopt;
  return static_cast<T>(t.integer(key));
}

std::string path_or_empty(const ConfigTable& t, const char* key) {
  return t.has(key) ? t.string(key) : std::string();
}

}  // namespace

const std::vector<TableSchema>& core_schemas() {
  static const std::vector<TableSchema> schemas = {
      parallel_schema(), training_schema(), ddp_schema(),    checkpoint_schema(),
      logging_schema(),  runtime_schema(),  plugins_schema()};
  return schemas;
}

const std::vector<std::string>& plugin_table_names() {
  static const std::vector<std::string> names = {"model", "optimizer", "data", "task"};
  return names;
}

CoreConfig make_core_config(const std::vector<ConfigTable>& tables) {
  CoreConfig c;
  const auto& p = find_table(tables, "parallel");
  c.parallel.tensor_model_parallel_size = static_cast<int>(p.integer("tensor_model_parallel_size"));
  c.parallel.pipeline_model_parallel_size =
      static_cast<int>(p.integer("pipeline_model_parallel_size"));
  c.parallel.context_parallel_size = static_cast<int>(p.integer("context_parallel_size"));
  c.parallel.expert_model_parallel_size = static_cast<int>(p.integer("expert_model_parallel_size"));
  c.parallel.expert_tensor_parallel_size =
      static_cast<int>(p.integer("expert_tensor_parallel_size"));
  c.parallel.sequence_parallel = p.boolean("sequence_parallel");
  c.parallel.num_layers_per_virtual_pipeline_stage =
      optional_int<int>(p, "num_layers_per_virtual_pipeline_stage");
  c.parallel.use_tp_pp_dp_mapping = p.boolean("use_tp_pp_dp_mapping");
  c.parallel.microbatch_group_size_per_vp_stage =
      static_cast<int>(p.integer("microbatch_group_size_per_vp_stage"));
  c.parallel.decoder_first_pipeline_num_layers = p.integer("decoder_first_pipeline_num_layers");
  c.parallel.decoder_last_pipeline_num_layers = p.integer("decoder_last_pipeline_num_layers");

  const auto& t = find_table(tables, "training");
  c.training.micro_batch_size = t.integer("micro_batch_size");
  c.training.global_batch_size = optional_int<std::int64_t>(t, "global_batch_size");
  if (t.has("rampup_batch_size"))
    c.training.rampup_batch_size = t.integer_list("rampup_batch_size");
  c.training.train_iters = optional_int<std::int64_t>(t, "train_iters");
  c.training.train_samples = optional_int<std::int64_t>(t, "train_samples");
  c.training.lr = t.find_real("lr");
  c.training.min_lr = t.real("min_lr");
  c.training.lr_decay_style = t.string("lr_decay_style");
  c.training.lr_decay_iters = optional_int<std::int64_t>(t, "lr_decay_iters");
  c.training.lr_decay_samples = optional_int<std::int64_t>(t, "lr_decay_samples");
  c.training.lr_warmup_iters = t.integer("lr_warmup_iters");
  c.training.lr_warmup_samples = t.integer("lr_warmup_samples");
  c.training.lr_warmup_fraction = t.find_real("lr_warmup_fraction");
  c.training.lr_warmup_init = t.real("lr_warmup_init");
  c.training.lr_wsd_decay_style = t.string("lr_wsd_decay_style");
  c.training.lr_wsd_decay_iters = optional_int<std::int64_t>(t, "lr_wsd_decay_iters");
  c.training.lr_wsd_decay_samples = optional_int<std::int64_t>(t, "lr_wsd_decay_samples");
  c.training.weight_decay = t.real("weight_decay");
  c.training.start_weight_decay = t.find_real("start_weight_decay");
  c.training.end_weight_decay = t.find_real("end_weight_decay");
  c.training.weight_decay_incr_style = t.string("weight_decay_incr_style");
  c.training.clip_grad = t.real("clip_grad");
  c.training.seed = t.integer("seed");
  c.training.eval_interval = t.integer("eval_interval");
  c.training.eval_iters = t.integer("eval_iters");
  c.training.exit_interval = optional_int<std::int64_t>(t, "exit_interval");
  c.training.max_skipped_nan_steps = t.integer("max_skipped_nan_steps");
  c.training.bf16 = t.boolean("bf16");
  c.training.fp16 = t.boolean("fp16");
  c.training.loss_scale = t.find_real("loss_scale");
  c.training.initial_loss_scale = t.real("initial_loss_scale");
  c.training.min_loss_scale = t.real("min_loss_scale");
  c.training.loss_scale_window = t.integer("loss_scale_window");
  c.training.hysteresis = t.integer("hysteresis");

  const auto& d = find_table(tables, "ddp");
  c.ddp.overlap_grad_reduce = d.boolean("overlap_grad_reduce");
  c.ddp.use_distributed_optimizer = d.boolean("use_distributed_optimizer");
  c.ddp.overlap_param_gather = d.boolean("overlap_param_gather");
  c.ddp.ddp_bucket_size = optional_int<std::int64_t>(d, "ddp_bucket_size");

  const auto& k = find_table(tables, "checkpoint");
  c.checkpoint.save = path_or_empty(k, "save");
  c.checkpoint.load = path_or_empty(k, "load");
  c.checkpoint.save_interval = optional_int<std::int64_t>(k, "save_interval");
  c.checkpoint.finetune = k.boolean("finetune");
  c.checkpoint.no_load_optim = k.boolean("no_load_optim");
  c.checkpoint.no_load_rng = k.boolean("no_load_rng");
  c.checkpoint.exit_on_save_failure = k.boolean("exit_on_save_failure");
  c.checkpoint.fallback_to_previous = k.boolean("fallback_to_previous");

  const auto& l = find_table(tables, "logging");
  c.logging.level = l.string("level");
  c.logging.file = path_or_empty(l, "file");
  c.logging.log_interval = l.integer("log_interval");
  c.logging.metrics_file = path_or_empty(l, "metrics_file");

  const auto& r = find_table(tables, "runtime");
  c.runtime.threads = static_cast<int>(r.integer("threads"));
  c.runtime.device = r.string("device");
  c.runtime.skip_memory_check = r.boolean("skip_memory_check");
  c.runtime.peak_tflops = r.real("peak_tflops");

  c.plugins.paths = find_table(tables, "plugins").string_list("paths");
  return c;
}

}  // namespace megatron::config
