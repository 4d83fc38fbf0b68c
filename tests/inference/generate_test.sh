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
# hybrid give one rank's greedy tokens, the tasks' GPT one rank's seeded samples.
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
tp2_generate() {  # config json [more arguments]
  local config=$1 json=$2
  shift 2
  # Open MPI's start-up leaks are not ours (tests/CMakeLists.txt: mpi tests run without LSan).
  ASAN_OPTIONS=detect_leaks=0 "$mpiexec" --oversubscribe --allow-run-as-root --bind-to none \
    -np 2 "$app" generate \
    --config "$config" --log-level warn --output-json "$json" "${tp2[@]}" "$@" > /dev/null
}
tp2_generate "$configs/gpt_tiny.toml" "$work/modern_tp2.json" "${modern[@]}" --load "$work/modern" \
  "${prompts[@]}" --top-k 1 --tokens-to-generate 16
same_tokens "$work/modern.json" "$work/modern_tp2.json" || fail "TP2 differs from one rank (rope GPT)"
tp2_generate "$configs/hybrid_tiny.toml" "$work/hybrid_tp2.json" "${hybrid[@]}" \
  --load "$work/hybrid" "${prompts[@]}" --top-k 1 --tokens-to-generate 16
same_tokens "$work/hybrid.json" "$work/hybrid_tp2.json" || fail "TP2 differs from one rank (hybrid)"
echo "ok   tensor parallelism (2 ranks) gives one rank's tokens (rope GPT, hybrid)"

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
