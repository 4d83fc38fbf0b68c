#!/usr/bin/env bash
# Installs the Debian packages megatron-app builds and tests with; idempotent, quiet when all is present.
set -euo pipefail

packages=(
  build-essential cmake pkg-config git ninja-build clang-format
  libboost-dev libboost-program-options-dev libboost-filesystem-dev
  libtomlplusplus-dev
  libpcre2-dev nlohmann-json3-dev  # GPT-2 pre-tokenizer regex; JSON for vocab files and loose JSON
  libssl-dev  # MD5 (OpenSSL EVP) naming the dataset index cache files as Megatron does
  libhdf5-openmpi-dev hdf5-tools
  libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenmpi-dev openmpi-bin
  libopenblas-dev libdnnl-dev ocl-icd-opencl-dev  # dnnl-config.cmake needs OpenCL headers
  python3 python3-numpy python3-h5py python3-torch python3-regex
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  sudo_cmd=(sudo)
fi

echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
