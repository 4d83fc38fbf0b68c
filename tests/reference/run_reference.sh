#!/usr/bin/env bash
# Runs one reference comparison: dump initial weights and our outputs, fine-tune 3 iterations
# with megatron-app, then check both against the PyTorch model.
#   run_reference.sh DUMP_TOOL MEGATRON_APP VARIANT WORK_DIR [MODEL]
# MODEL: gpt (default; config gpt_reference_VARIANT.toml) or bert (config bert_reference.toml).
set -euo pipefail
dump_tool=$1 app=$2 variant=$3 work=$4 model=${5:-gpt}
here=$(cd "$(dirname "$0")" && pwd)
data=$here/../../data
case "$model" in
  gpt)
    config=$here/gpt_reference_$variant.toml
    check=("$here/gpt_reference.py" "$work/init/iter_0000000.h5" "$work/trained/iter_0000003.h5"
           "$work/cache" "$data/austen_text_document") ;;
  bert)
    config=$here/bert_reference.toml
    check=("$here/bert_reference.py" "$work/init/iter_0000000.h5" "$work/trained/iter_0000003.h5"
           "$work/cache" "$data/austen_bert_text_sentence" "$data/bert-base-uncased-vocab.txt") ;;
  *) echo "run_reference.sh: unknown model '$model' (gpt or bert)" >&2; exit 2 ;;
esac
rm -rf "$work" && mkdir -p "$work"
"$dump_tool" "$work/init" "$variant" > /dev/null
"$app" --config "$config" --log-level warn \
  --set "checkpoint.load=$work/init" --set "checkpoint.save=$work/trained" \
  --set "data.data_cache_path=$work/cache" > "$work/train.log"
/usr/bin/python3 "${check[@]}"
