#!/usr/bin/env bash
# Installs the Debian packages megatron-app needs; idempotent, quiet when all is present.
# Usage: install-deps.sh [main|test]
#   main: what building and running megatron-app needs (the README's main command)
#   test: that plus the test suite's tools and Python references (GoogleTest, h5ls, numpy, torch...)
set -euo pipefail
profile=${1:-test}

build_packages=(
  build-essential cmake pkg-config ninja-build
  libboost-dev libboost-program-options-dev libboost-filesystem-dev
  libtomlplusplus-dev
  libpcre2-dev nlohmann-json3-dev  # GPT-2 pre-tokenizer regex; JSON for vocab files and loose JSON
  libicu-dev  # Unicode categories, NFD and sentence boundaries (WordPiece, preprocess --split-sentences)
  libssl-dev  # MD5 (OpenSSL EVP) naming the dataset index cache files as Megatron does
  libsentencepiece-dev  # SentencePieceTokenizer and GPTSentencePieceTokenizer (.model files)
  libhdf5-openmpi-dev
  liburing-dev  # io_uring reads of checkpoint loads on one compute thread
  libspdlog-dev libfmt-dev
  libopenmpi-dev openmpi-bin
  libopenblas-dev libdnnl-dev ocl-icd-opencl-dev  # dnnl-config.cmake needs OpenCL headers
  libcpp-httplib-dev  # `serve`'s HTTP server
  libfaiss-dev  # Retro's retrieval index (a static, PIC library with a CMake config)
)
test_packages=(
  git clang-format hdf5-tools
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-numpy python3-h5py python3-torch python3-regex
  python3-faiss  # reads Retro's index files independently of the C++ side
  sentencepiece  # spm_encode / spm_train: the SentencePiece tokenizer tests' reference
  clang libclang-rt-dev libomp-dev  # libFuzzer targets (fuzz/): clang, its fuzzer runtime, OpenMP
  # `serve`'s clients in tests/serve: curl, Python's requests, Node.js (npm's openai client),
  # headless Chromium driven by Selenium.
  curl python3-requests nodejs chromium chromium-driver python3-selenium
)

case "$profile" in
  main) packages=("${build_packages[@]}") ;;
  test) packages=("${build_packages[@]}" "${test_packages[@]}") ;;
  *) echo "install-deps.sh: unknown profile '$profile' (use main or test)" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# Debian's nodejs comes without npm (NodeSource's, on some machines, brings its own).
if [ "$profile" = test ] && ! command -v npm > /dev/null; then
  missing+=(npm)
fi

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  sudo_cmd=(sudo)
fi

echo "install-deps ($profile): installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
