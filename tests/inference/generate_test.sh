#!/usr/bin/env bash
# `megatron-app generate` against an independent PyTorch greedy decode (generate_reference.py:
# every token the argmax after its prefix, the end of document where it stopped) on four
# checkpoints: the tasks' GPT (learned positions, tied output layer), a GPT with rope, grouped
# queries, SwiGLU and RMSNorm, a Mixture-of-Experts GPT and a hybrid Mamba model, the last three
# trained here for 10 iterations; the KV cache's tokens those of
# --recompute; sampling reproducible from its seed
# and different for another seed; greedy whatever the temperature; refusals with exit 2 naming
# the reason (a BERT, a prompt as long as the sequence, top-k with top-p, no prompt). On the
# three trained here, the five most likely tokens' log-probabilities at each step equal the
# reference's too (--top-logprobs 5).
# With tensor parallelism (mpirun -np 2, rank 0 leading, rank 1 following) the rope GPT and the
# hybrid give one rank's greedy tokens, the tasks' GPT one rank's seeded samples; with pipeline
# parallelism (PP2, and TP2 x PP2 interleaved on 4 ranks) one rank's tokens and log-probabilities,
# and PP2 one rank's seeded samples. bf16 weights hold about half the memory.
#   generate_test.sh MEGATRON_APP WORK_DIR TASKS_GPT_CHECKPOINT_DIR MPIEXEC
set -euo pipefail
app=$1 work=$2 tasks_dir=$3 mpiexec=$4
tasks_ckpt=$(printf '%s/iter_%07d.h5' "$tasks_dir" "$(cat "$tasks_dir/latest_checkpointed_iteration.txt")")
here=$(cd "$(dirname "$0")" && pwd)
data=$here/../../data
configs=$here/../../configs
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
fail() { echo "FAIL: $*" >&2; exit 1; }
same_tokens() {  # a.json b.json: the same ids and stop reasons (log-probabilities aside)
  /usr/bin/python3 -c 'import json, sys
pick = lambda f: [(x["prompt_tokens"], x["tokens"], x["stopped_by"]) for x in json.load(open(f))]
sys.exit(pick(sys.argv[1]) != pick(sys.argv[2]))' "$1" "$2"
}
prompts=(--prompt "It is a truth universally acknowledged" --prompt "" --prompt "Mr. Darcy said")
reference() {  # checkpoint.h5 generated.json
  /usr/bin/python3 "$here/../reference/generate_reference.py" --checkpoint "$1" \
    --vocab-file "$data/encoder.json" --merge-file "$data/vocab.bpe" --compare "$2"
}
generate() {  # config json [more arguments]
  local config=$1 json=$2
  shift 2
  "$app" generate --config "$config" --log-level warn --output-json "$json" "$@" > /dev/null
}
refused() {  # expected-message arguments...
  local message=$1
  shift
  set +e
  "$app" generate --log-level warn "$@" > /dev/null 2> "$work/refused.log"
  local code=$?
  set -e
  [ "$code" = 2 ] || fail "exit $code, expected 2: $(cat "$work/refused.log")"
  grep -q -- "$message" "$work/refused.log" || fail "expected '$message': $(cat "$work/refused.log")"
}

# The tasks' GPT (configs/gpt_tiny.toml's main job).
tasks=(--load "$tasks_ckpt" --set "data.data_cache_path=$work/cache")
generate "$configs/gpt_tiny.toml" "$work/tasks.json" "${tasks[@]}" "${prompts[@]}" --top-k 1 \
  --tokens-to-generate 16
reference "$tasks_ckpt" "$work/tasks.json"

# Rope with grouped queries, SwiGLU and RMSNorm.
modern=(--set model.num_layers=2 --set 'model.position_embedding_type="rope"'
  --set model.num_query_groups=2 --set model.swiglu=true --set 'model.normalization="RMSNorm"'
  --set "data.data_cache_path=$work/cache")
"$app" --config "$configs/gpt_tiny.toml" "${modern[@]}" --log-level warn \
  --set training.train_iters=10 --set training.lr_warmup_iters=2 --set training.eval_iters=0 \
  --set "checkpoint.save=$work/modern" --set checkpoint.save_interval=10 > /dev/null
generate "$configs/gpt_tiny.toml" "$work/modern.json" "${modern[@]}" --load "$work/modern" \
  "${prompts[@]}" --top-k 1 --tokens-to-generate 16 --top-logprobs 5
reference "$work/modern/iter_0000010.h5" "$work/modern.json"

# The KV cache gives the tokens recomputing the whole sequence gives (greedy), on both.
generate "$configs/gpt_tiny.toml" "$work/tasks_recomputed.json" "${tasks[@]}" "${prompts[@]}" \
  --top-k 1 --tokens-to-generate 16 --recompute
cmp "$work/tasks.json" "$work/tasks_recomputed.json" || fail "KV cache and recompute differ"
generate "$configs/gpt_tiny.toml" "$work/modern_recomputed.json" "${modern[@]}" \
  --load "$work/modern" "${prompts[@]}" --top-k 1 --tokens-to-generate 16 --recompute
same_tokens "$work/modern.json" "$work/modern_recomputed.json" || fail "KV cache and recompute differ (rope)"

# A Mixture-of-Experts GPT (configs/moe_tiny.toml: 8 experts top-2 in every layer, SwiGLU) trained
# here for 10 iterations: greedy equals moe_reference.py's model decoded whole each step.
moe=(--set model.num_layers=2 --set "data.data_cache_path=$work/cache")
"$app" --config "$configs/moe_tiny.toml" "${moe[@]}" --log-level warn \
  --set training.train_iters=10 --set training.lr_warmup_iters=2 --set training.eval_iters=0 \
  --set "checkpoint.save=$work/moe" --set checkpoint.save_interval=10 > /dev/null
generate "$configs/moe_tiny.toml" "$work/moe.json" "${moe[@]}" --load "$work/moe" \
  "${prompts[@]}" --top-k 1 --tokens-to-generate 16 --top-logprobs 5
/usr/bin/python3 "$here/../reference/generate_reference.py" --model moe \
  --checkpoint "$work/moe/iter_0000010.h5" --vocab-file "$data/encoder.json" \
  --merge-file "$data/vocab.bpe" --compare "$work/moe.json"

# A hybrid Mamba model (Mamba, attention and MLP layers) trained here for 10 iterations: greedy
# equals mamba_reference.py's model decoded whole each step, and its decoding state (conv
# window, SSM state, KV cache) gives the tokens of recomputing; several prompts decode together.
hybrid=(--set "data.data_cache_path=$work/cache_spm")
"$app" --config "$configs/hybrid_tiny.toml" "${hybrid[@]}" --log-level warn \
  --set training.train_iters=10 --set training.lr_warmup_iters=2 --set training.eval_iters=0 \
  --set "checkpoint.save=$work/hybrid" --set checkpoint.save_interval=10 > /dev/null
generate "$configs/hybrid_tiny.toml" "$work/hybrid.json" "${hybrid[@]}" --load "$work/hybrid" \
  "${prompts[@]}" --top-k 1 --tokens-to-generate 16 --top-logprobs 5
/usr/bin/python3 "$here/../reference/generate_reference.py" --model mamba \
  --checkpoint "$work/hybrid/iter_0000010.h5" --compare "$work/hybrid.json"
generate "$configs/hybrid_tiny.toml" "$work/hybrid_recomputed.json" "${hybrid[@]}" \
  --load "$work/hybrid" "${prompts[@]}" --top-k 1 --tokens-to-generate 16 --recompute
same_tokens "$work/hybrid.json" "$work/hybrid_recomputed.json" || fail "decoding state and recompute differ (hybrid)"
generate "$configs/hybrid_tiny.toml" "$work/hybrid_one.json" "${hybrid[@]}" \
  --load "$work/hybrid" "${prompts[@]}" --top-k 1 --tokens-to-generate 16 --max-batch 1
same_tokens "$work/hybrid.json" "$work/hybrid_one.json" || fail "prompts decoded together differ from one at a time"

# Tensor parallelism: two ranks decode the rope GPT and the hybrid as one rank does (the padded
# vocabulary kept by make_vocab_size_divisible_by 64 x 2).
tp2=(--set parallel.tensor_model_parallel_size=2 --set model.make_vocab_size_divisible_by=64)
mpi_generate() {  # ranks config json [more arguments]
  local ranks=$1 config=$2 json=$3
  shift 3
  # Open MPI's start-up leaks are not ours (tests/CMakeLists.txt: mpi tests run without LSan).
  ASAN_OPTIONS=detect_leaks=0 "$mpiexec" --oversubscribe --allow-run-as-root --bind-to none \
    -np "$ranks" "$app" generate \
    --config "$config" --log-level warn --output-json "$json" "$@" > /dev/null
}
tp2_generate() {  # config json [more arguments]
  local config=$1 json=$2
  shift 2
  mpi_generate 2 "$config" "$json" "${tp2[@]}" "$@"
}
tp2_generate "$configs/gpt_tiny.toml" "$work/modern_tp2.json" "${modern[@]}" --load "$work/modern" \
  "${prompts[@]}" --top-k 1 --tokens-to-generate 16
same_tokens "$work/modern.json" "$work/modern_tp2.json" || fail "TP2 differs from one rank (rope GPT)"
tp2_generate "$configs/hybrid_tiny.toml" "$work/hybrid_tp2.json" "${hybrid[@]}" \
  --load "$work/hybrid" "${prompts[@]}" --top-k 1 --tokens-to-generate 16
same_tokens "$work/hybrid.json" "$work/hybrid_tp2.json" || fail "TP2 differs from one rank (hybrid)"
echo "ok   tensor parallelism (2 ranks) gives one rank's tokens (rope GPT, hybrid)"

# Pipeline parallelism: each stage decodes its layers and passes the activations on, the last
# stage's logits reach every stage. Two stages (the rope GPT's layers one a stage, the MoE GPT's
# and the hybrid's split too), and the tasks' GPT on TP2 x PP2 with two virtual stages a rank
# (4 ranks: the ring of virtual stages goes round twice): one rank's tokens, and the five most
# likely tokens' log-probabilities at each step within 1e-5.
same_logprobs() {  # a.json b.json
  same_tokens "$1" "$2" || return 1
  /usr/bin/python3 -c 'import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
worst = max((abs(p - q) for x, y in zip(a, b) for s, t in zip(x["top_logprobs"], y["top_logprobs"])
             for (i, p), (j, q) in zip(s, t) if i == j), default=0.0)
same_ids = all([i for i, _ in s] == [j for j, _ in t] for x, y in zip(a, b)
               for s, t in zip(x["top_logprobs"], y["top_logprobs"]))
sys.exit(not (same_ids and worst <= 1e-5))' "$1" "$2"
}
pp2=(--set parallel.pipeline_model_parallel_size=2)
mpi_generate 2 "$configs/gpt_tiny.toml" "$work/modern_pp2.json" "${modern[@]}" "${pp2[@]}" \
  --load "$work/modern" "${prompts[@]}" --top-k 1 --tokens-to-generate 16 --top-logprobs 5
same_logprobs "$work/modern.json" "$work/modern_pp2.json" || fail "PP2 differs from one rank (rope GPT)"
mpi_generate 2 "$configs/moe_tiny.toml" "$work/moe_pp2.json" "${moe[@]}" "${pp2[@]}" \
  --load "$work/moe" "${prompts[@]}" --top-k 1 --tokens-to-generate 16 --top-logprobs 5
same_logprobs "$work/moe.json" "$work/moe_pp2.json" || fail "PP2 differs from one rank (MoE GPT)"
mpi_generate 2 "$configs/hybrid_tiny.toml" "$work/hybrid_pp2.json" "${hybrid[@]}" "${pp2[@]}" \
  --load "$work/hybrid" "${prompts[@]}" --top-k 1 --tokens-to-generate 16 --top-logprobs 5
same_logprobs "$work/hybrid.json" "$work/hybrid_pp2.json" || fail "PP2 differs from one rank (hybrid)"
interleaved=(4 "${tp2[@]}")
generate "$configs/gpt_tiny.toml" "$work/tasks_top.json" "${tasks[@]}" "${prompts[@]}" --top-k 1 \
  --tokens-to-generate 16 --top-logprobs 5
mpi_generate "${interleaved[@]:0:1}" "$configs/gpt_tiny.toml" "$work/tasks_interleaved.json" \
  "${tasks[@]}" "${interleaved[@]:1}" "${pp2[@]}" \
  --set parallel.num_layers_per_virtual_pipeline_stage=1 "${prompts[@]}" --top-k 1 \
  --tokens-to-generate 16 --top-logprobs 5
same_logprobs "$work/tasks_top.json" "$work/tasks_interleaved.json" || fail "interleaved pipeline (${interleaved[0]} ranks) differs from one rank"
echo "ok   pipeline parallelism (PP2; TP2 x PP2 interleaved) gives one rank's tokens and log-probabilities"

# bf16: the weights of the linear layers and the word embeddings held in bf16 alone (decode_test
# checks the logits bit for bit against f32 masters cast at each GEMM): at most 55% of the f32
# run's memory (norms and biases stay f32), and the first step's five most likely tokens within 0.05 of f32's log-probabilities.
held_mib() { sed -n 's/.*weights: \([0-9.]*\) MiB held.*/\1/p' "$1"; }
"$app" generate --config "$configs/gpt_tiny.toml" --output-json "$work/modern_bf16.json" \
  "${modern[@]}" --load "$work/modern" "${prompts[@]}" --top-k 1 --tokens-to-generate 16 \
  --top-logprobs 5 --set training.bf16=true > "$work/bf16.log" 2>&1
"$app" generate --config "$configs/gpt_tiny.toml" --output-json "$work/modern_f32.json" \
  "${modern[@]}" --load "$work/modern" --prompt "x" --tokens-to-generate 1 > "$work/f32.log" 2>&1
grep -q "weights in bfloat16" "$work/bf16.log" || fail "bf16 weights not held: $(cat "$work/bf16.log")"
/usr/bin/python3 -c 'import sys; bf16, f32 = map(float, sys.argv[1:3]); sys.exit(not bf16 <= 0.55 * f32)' \
  "$(held_mib "$work/bf16.log")" "$(held_mib "$work/f32.log")" || fail "bf16 weights hold $(held_mib "$work/bf16.log") MiB, f32 $(held_mib "$work/f32.log")"
/usr/bin/python3 -c 'import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
for x, y in zip(a, b):
    f32 = dict(x["top_logprobs"][0])
    close = [abs(p - f32[i]) <= 0.05 for i, p in y["top_logprobs"][0] if i in f32]
    sys.exit(len(close) < 3 or not all(close))' "$work/modern.json" "$work/modern_bf16.json" \
  || fail "bf16 log-probabilities far from f32's"
echo "ok   bf16 weights: 55% of the memory at most, log-probabilities close to f32's"

# Sampling: the same seed gives the same text, another seed another; top-k 1 is greedy at any
# temperature.
sample=("${tasks[@]}" --prompt "Elizabeth" --tokens-to-generate 12)
generate "$configs/gpt_tiny.toml" "$work/seed1.json" "${sample[@]}" --seed 1
generate "$configs/gpt_tiny.toml" "$work/seed1_again.json" "${sample[@]}" --seed 1
generate "$configs/gpt_tiny.toml" "$work/seed2.json" "${sample[@]}" --seed 2
cmp "$work/seed1.json" "$work/seed1_again.json" || fail "the same seed sampled differently"
! cmp -s "$work/seed1.json" "$work/seed2.json" || fail "seeds 1 and 2 sampled the same text"
tp2_generate "$configs/gpt_tiny.toml" "$work/seed1_tp2.json" "${sample[@]}" --seed 1
same_tokens "$work/seed1.json" "$work/seed1_tp2.json" || fail "TP2 sampled differently from one rank"
mpi_generate 2 "$configs/gpt_tiny.toml" "$work/seed1_pp2.json" "${sample[@]}" "${pp2[@]}" --seed 1
same_tokens "$work/seed1.json" "$work/seed1_pp2.json" || fail "PP2 sampled differently from one rank"
generate "$configs/gpt_tiny.toml" "$work/greedy_hot.json" "${tasks[@]}" "${prompts[@]}" \
  --top-k 1 --tokens-to-generate 16 --temperature 7
cmp "$work/tasks.json" "$work/greedy_hot.json" || fail "greedy depends on the temperature"

refused "is not a decoder-only language model" --config "$configs/bert_tiny.toml" \
  --load "$tasks_ckpt" --prompt "x" --set "data.data_cache_path=$work/cache"
long=$(printf 'word %.0s' $(seq 200))
refused "prompt 1 has 201 tokens; the model reads at most 128" --config "$configs/gpt_tiny.toml" \
  "${tasks[@]}" --prompt "$long"
refused "cannot set both top-k and top-p samplings." --config "$configs/gpt_tiny.toml" \
  "${tasks[@]}" --prompt "x" --top-k 5 --top-p 0.5
refused "give a --prompt or a --prompts-file" --config "$configs/gpt_tiny.toml" "${tasks[@]}"
echo "generate: greedy equals the reference on the four checkpoints; sampling and refusals OK"
