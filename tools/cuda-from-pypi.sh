#!/usr/bin/env bash
# Sets up what `cargo build --features cuda` needs on a machine without the CUDA toolkit (the
# 2-core dev machine, say), from NVIDIA's PyPI wheels, so that the binary can be copied to a
# GPU machine that has the driver and CUDA libraries but no Rust toolchain.
#
#   bash tools/cuda-from-pypi.sh DIR          # once: ~1 GB of wheels into DIR
#   source DIR/env.sh
#   cargo build --release -p greenwave-tools --features cuda
#
# Why each step (tools/README.md, "--device cpu|cuda"):
# - candle's kernels are compiled to PTX by nvcc at build time, and the GPU's driver compiles
#   that PTX when the program starts. A driver only reads PTX of its own CUDA version or
#   older, so the toolkit is pinned to 13.0 (driver 580). The nvcc wheel alone pulls the
#   newest nvvm, whose PTX (ISA 9.5) ptxas 13.0 and a 580 driver refuse: nvvm and crt are
#   pinned with it. For an older driver, pin the wheels of its CUDA version instead.
# - cudarc links the CUDA libraries by their plain names (libcublas.so, libcuda.so), which
#   the wheels do not ship: DIR/tk/lib64 holds those links, and a stub libcuda.so (soname
#   libcuda.so.1) made from the driver API names cudarc declares; the real driver library is
#   loaded on the GPU machine.
# - CUDA_COMPUTE_CAP (default 90, the H100/H200) replaces nvidia-smi, which is absent here.
set -euo pipefail
dir=$(realpath -m "${1:?usage: bash tools/cuda-from-pypi.sh DIR}")
cap=${CUDA_COMPUTE_CAP:-90}
python3 -m pip install -q --target "$dir/site" \
  nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88 \
  nvidia-cuda-runtime==13.0.96 nvidia-cuda-nvrtc==13.0.88 nvidia-cuda-cccl==13.0.85 \
  nvidia-cublas==13.0.2.14 nvidia-curand==10.4.0.35
cu=$dir/site/nvidia/cu13
"$cu/bin/nvcc" --version | tail -1
mkdir -p "$dir/tk/lib64"
for d in bin include nvvm; do ln -sfn "$cu/$d" "$dir/tk/$d"; done
for l in cublas cublasLt cudart nvrtc; do ln -sf "$cu/lib/lib$l.so.13" "$dir/tk/lib64/lib$l.so"; done
ln -sf "$cu/lib/libcurand.so.10" "$dir/tk/lib64/libcurand.so"

# The driver API names cudarc declares, from its source in cargo's registry.
root=$(cd "$(dirname "$0")/.." && pwd)
(cd "$root" && cargo fetch -q)
ver=$(awk '/^name = "cudarc"$/ {getline; gsub(/"/, "", $3); print $3}' "$root/Cargo.lock")
[ -n "$ver" ] || { echo "cudarc is not in $root/Cargo.lock" >&2; exit 1; }
sys=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/cudarc-"$ver"/src/driver/sys | head -1)
grep -ohE "fn cu[A-Za-z0-9_]+\(" "$sys/mod.rs" | sed 's/^fn //; s/($//' | sort -u |
  sed 's/.*/void &(void) {}/' >"$dir/libcuda-stub.c"
cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$dir/tk/lib64/libcuda.so" "$dir/libcuda-stub.c"
echo "libcuda stub: $(wc -l <"$dir/libcuda-stub.c") names from cudarc $ver"

cat >"$dir/env.sh" <<EOF
export CUDA_HOME="$dir/tk" CUDA_PATH="$dir/tk" CUDA_COMPUTE_CAP=$cap
export PATH="$dir/tk/bin:\$PATH" LIBRARY_PATH="$dir/tk/lib64\${LIBRARY_PATH:+:\$LIBRARY_PATH}"
EOF
echo "now: source $dir/env.sh && cargo build --release -p greenwave-tools --features cuda"
