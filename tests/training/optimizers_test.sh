#!/usr/bin/env bash
# Each optimizer plugin trains the tiny GPT: the lm loss of the last iterations is well below the
# first (dropout off so the comparison is about the updates only).
#   optimizers_test.sh MEGATRON_APP WORK_DIR
source "$(dirname "$0")/common.sh"
for opt in "adam --set training.lr=0.01" "sgd --set optimizer.sgd_momentum=0.9 --set training.lr=0.5"; do
  name=${opt%% *}
  # shellcheck disable=SC2086
  run_tiny --set model.hidden_dropout=0.0 --set model.attention_dropout=0.0 --set training.train_iters=16 \
    --set training.eval_iters=0 --set training.lr_decay_style=constant --set "logging.metrics_file=$work/$name.jsonl" \
    --set optimizer.type=$opt > /dev/null
  /usr/bin/python3 - "$work/$name.jsonl" "$name" <<'PY'
import json, sys
losses = [json.loads(l)["lm loss"] for l in open(sys.argv[1]) if '"train"' in l]
first, last = sum(losses[:3]) / 3, sum(losses[-3:]) / 3
print(f"{sys.argv[2]}: lm loss {first:.4f} -> {last:.4f}")
assert len(losses) == 16 and last < first - 0.5, "loss did not fall"
PY
done
