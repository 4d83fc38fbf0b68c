#!/usr/bin/env bash
# Checks that `h5ls -r` (a standard HDF5 tool) lists exactly the datasets a checkpoint was saved
# with. Usage: h5ls_names.sh H5LS CHECKPOINT_FILE NAMES_FILE (one tensor path per line)
set -euo pipefail
h5ls=$1 file=$2 names=$3
listed=$("$h5ls" -r "$file" | awk '$2 == "Dataset" { print substr($1, 2) }' | LC_ALL=C sort)
expected=$(LC_ALL=C sort "$names")
if [ "$listed" != "$expected" ]; then
  echo "h5ls -r $file lists other datasets than the checkpoint holds" >&2
  diff <(echo "$expected") <(echo "$listed") >&2 || true
  exit 1
fi
echo "h5ls lists the $(wc -l <<< "$listed") datasets of $file"
