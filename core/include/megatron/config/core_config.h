// The core's own config tables as typed structs: [parallel] [training] [ddp] [checkpoint]
// [logging] [runtime] [plugins]. Key names follow Megatron-LM's arguments in snake_case.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "megatron/config/schema.h"
#include "megatron/config/table.h"

namespace megatron::config {

struct ParallelConfig {
  int tensor_model_parallel_size = 1;
  int pipeline_model_parallel_size = 1;
  int context_parallel_size = 1;
  int expert_model_parallel_size = 1;
  int expert_tensor_parallel_size = 0;  // 0: same as tensor_model_parallel_size (Megatron default)
  bool sequence_parallel = false;
  std::optional<int> num_layers_per_virtual_pipeline_stage;
  int microbatch_group_size_per_vp_stage = 0;          // 0: pipeline_model_parallel_size
  std::int64_t decoder_first_pipeline_num_layers = 0;  // 0: even split
  std::int64_t decoder_last_pipeline_num_layers = 0;
  bool use_tp_pp_dp_mapping = false;  // rank order tp-cp-ep-pp-dp instead of tp-cp-ep-dp-pp

  std::string rank_order() const {
    return use_tp_pp_dp_mapping ? "tp-cp-ep-pp-dp" : "tp-cp-ep-dp-pp";
  }
};

struct TrainingConfig {
  std::int64_t micro_batch_size = 1;
  std::optional<std::int64_t> global_batch_size;  // default: micro_batch_size x data-parallel size
  std::vector<std::int64_t> rampup_batch_size;    // [start, increment, ramp-up samples] or empty
  std::optional<std::int64_t> train_iters;
  std::optional<std::int64_t> train_samples;
  std::optional<double> lr;
  double min_lr = 0.0;
  std::string lr_decay_style = "linear";
  std::optional<std::int64_t> lr_decay_iters;
  std::optional<std::int64_t> lr_decay_samples;
  std::int64_t lr_warmup_iters = 0;
  std::int64_t lr_warmup_samples = 0;
  std::optional<double> lr_warmup_fraction;
  double lr_warmup_init = 0.0;
  std::string lr_wsd_decay_style = "exponential";  // exponential | linear | cosine | minus_sqrt
  std::optional<std::int64_t> lr_wsd_decay_iters;
  std::optional<std::int64_t> lr_wsd_decay_samples;
  double weight_decay = 0.01;
  std::optional<double> start_weight_decay;  // only with a linear or cosine increment
  std::optional<double> end_weight_decay;
  std::string weight_decay_incr_style = "constant";
  double clip_grad = 1.0;
  std::int64_t seed = 1234;
  std::int64_t eval_interval = 1000;
  std::int64_t eval_iters = 100;
  std::optional<std::int64_t> exit_interval;
  // Consecutive NaN/Inf steps skipped before the run saves and stops (0: the first stops it).
  std::int64_t max_skipped_nan_steps = 10;
  bool bf16 = false;
  bool fp16 = false;
  std::optional<double> loss_scale;  // static scale; unset: dynamic with fp16, none with bf16
  double initial_loss_scale = 4294967296.0;
  double min_loss_scale = 1.0;
  std::int64_t loss_scale_window = 1000;
  std::int64_t hysteresis = 2;
};

// [ddp]: Megatron's DistributedDataParallelConfig keys.
struct DdpConfig {
  bool overlap_grad_reduce = false;
  bool use_distributed_optimizer = false;
  bool overlap_param_gather = false;            // needs use_distributed_optimizer
  std::optional<std::int64_t> ddp_bucket_size;  // elements; only with overlap_grad_reduce
};

struct CheckpointConfig {
  std::string save;  // directory; empty: do not save
  std::string load;  // directory; empty: start from scratch
  std::optional<std::int64_t> save_interval;
  bool finetune = false;
  bool no_load_optim = false;
  bool no_load_rng = false;
  // A failed save (disk full, I/O error) stops the run; otherwise it is logged and training goes
  // on (the previous checkpoint is untouched either way).
  bool exit_on_save_failure = false;
  // Resuming from a directory whose latest checkpoint is damaged loads the newest intact one
  // (logged); otherwise the run stops with CheckpointDamagedError.
  bool fallback_to_previous = false;
};

struct LoggingConfig {
  std::string level = "info";
  std::string file;  // per-rank log file; "{rank}" is replaced by the world rank
  std::int64_t log_interval = 100;
  std::string metrics_file;
};

struct RuntimeConfig {
  int threads = 0;  // 0: OMP_NUM_THREADS if set, else every core
  std::string device = "cpu";
  // Training starts without comparing the plan's memory per rank with what the rank may use.
  bool skip_memory_check = false;
  // One rank's peak TFLOP/s for the MFU in the training log; 0: measured at start-up.
  double peak_tflops = 0.0;
};

struct PluginsConfig {
  std::vector<std::string> paths;  // files or directories, searched before MEGATRON_PLUGIN_PATH
};

struct CoreConfig {
  ParallelConfig parallel;
  TrainingConfig training;
  DdpConfig ddp;
  CheckpointConfig checkpoint;
  LoggingConfig logging;
  RuntimeConfig runtime;
  PluginsConfig plugins;
};

// Schemas of the core tables, in the order --print-config writes them.
const std::vector<TableSchema>& core_schemas();
// Tables whose `type` key names a plugin that declares the table's other keys, and the plugin
// kind each one selects: model -> model, optimizer -> optimizer, data -> dataset, task -> task.
const std::vector<std::string>& plugin_table_names();

// Typed view of validated core tables (one per core schema, keyed by table name).
CoreConfig make_core_config(const std::vector<ConfigTable>& tables);

}  // namespace megatron::config
