#!/usr/bin/env bash
# The GPU kit's test without a GPU (docs/gpu-runs.md): `scripts/gpu-check.sh run PACK` in a clean
# Debian 12 minbase chroot holding a fresh clone of main and CUDA's toolkit (bind-mounted, as the
# GPU machine has it) and nothing else of Debian's: no development packages, no OpenMPI, HDF5,
# oneDNN or OpenBLAS; xz-utils is the one package added (to unpack). Every CUDA check must say
# SKIP, the CPU parts pass. Needs root; not part of ctest (it needs a CUDA build and debootstrap).
#   tests/gpu_check/clean_chroot_run.sh PACK      (from the project root)
set -euo pipefail
pack=$(realpath "$1")
base=/tmp/fresh-base.tar  # ../shared/tools/fresh-machine.sh's cached Debian 12 minbase root
[ -f $base ] || PROJECT=. ../shared/tools/fresh-machine.sh true > /dev/null
root=$(mktemp -d /tmp/gpu-chroot.XXXX)
tar -C "$root" -xf $base
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
mount --rbind /sys "$root/sys"
mkdir -p "$root/usr/local/cuda"
mount --bind /usr/local/cuda "$root/usr/local/cuda"
cleanup() {
  umount -R "$root/dev" "$root/sys" "$root/proc" "$root/usr/local/cuda" 2> /dev/null || true
  rm -rf --one-file-system "$root"
}
trap cleanup EXIT
cp /etc/resolv.conf "$root/etc/resolv.conf"
git clone -q . "$root/root/project"
cp "$pack" "$root/root/project/gpu-check.tar.xz"
chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  TERM=dumb bash -c '
    cd /root/project
    apt-get update -qq 2> /dev/null && apt-get install -y -qq xz-utils > /dev/null 2>&1
    echo "Debian packages like ours installed: $(dpkg -l | awk "/^ii/ {print \$2}" |
      grep -E "dev|openmpi|hdf5|dnnl|openblas|boost|icu" | tr "\n" " ")"
    bash scripts/gpu-check.sh run gpu-check.tar.xz
    status=$?
    grep -q "^FAIL" gpu-check-summary.txt && exit 1
    grep "^SKIP" gpu-check-summary.txt | grep -vq "CUDA device\|needs two" && { echo "a SKIP without a missing device"; exit 1; }
    exit $status'
