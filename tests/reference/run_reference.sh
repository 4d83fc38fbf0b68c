#!/usr/bin/env bash
# Runs one reference comparison: dump initial weights and our outputs, fine-tune 3 iterations
# with megatron-app, then check both against the PyTorch model.
#   run_reference.sh DUMP_TOOL MEGATRON_APP VARIANT WORK_DIR
set -euo pipefail
dump_tool=$1 app=$2 variant=$3 work=$4
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
"$dump_tool" "$work/init" "$variant" > /dev/null
"$app" --config "$here/gpt_reference_$variant.toml" --log-level warn \
  --set "checkpoint.load=$work/init" --set "checkpoint.save=$work/trained" \
  --set "data.data_cache_path=$work/cache" > "$work/train.log"
/usr/bin/python3 "$here/gpt_reference.py" "$work/init/iter_0000000.h5" \
  "$work/trained/iter_0000003.h5" "$work/cache" "$here/../../data/austen_text_document"
