# Sourced by the training tests with the script's arguments (MEGATRON_APP WORK_DIR): starts from an
# empty work directory and defines `tiny` (the command array that trains tiny_gpt.toml, or
# $TINY_CONFIG, with the data index cache inside the work directory, so tests running side by
# side never share one) and `run_tiny ARGS...`, which runs it.
set -euo pipefail
app=$1 work=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
rm -rf "$work" && mkdir -p "$work"
# TINY_CONFIG: another tiny model's config (the BERT resume test uses tiny_bert.toml).
tiny=("$app" --config "${TINY_CONFIG:-$here/tiny_gpt.toml}" --log-level warn
      --set "data.data_cache_path=$work/cache")
run_tiny() { "${tiny[@]}" "$@"; }
