#!/usr/bin/env bash
# Builds what run.sh needs on a lent GPU machine (which has CUDA 13 libraries but no Rust
# toolchain and no network) into the repository's `.gpu/` folder, ignored through
# `.git/info/exclude`, to be carried by the device tool:
#
#   bash tools/diagnostics/issue14/gpu/prepare.sh /work/cuda   # ~30 min on 2 cores
#   device run: `set -o pipefail; bash .gpu/run.sh 2>&1 | tee $OUT/log.txt`, carry [".gpu"]
#
# The CUDA toolkit comes from PyPI (tools/cuda-from-pypi.sh, run into the folder given);
# the build has its own target folder so the CPU build's binaries are left alone. The three
# binaries are stripped and xz-compressed (86 MB of greenwave, mostly candle's PTX, becomes
# 12 MB) to fit the 64 MiB the tool carries; the PNG curves' font libraries go beside them.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../../.." && pwd)
cuda=$(realpath -m "${1:?usage: prepare.sh CUDA_DIR}")
[ -f "$cuda/env.sh" ] || bash "$root/tools/cuda-from-pypi.sh" "$cuda"
# shellcheck disable=SC1091
source "$cuda/env.sh"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/../target-cuda} CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-2}
cd "$root"
cargo build --release -p greenwave-tools -p greenwave-learn \
  --features greenwave-tools/cuda,greenwave-learn/cuda --bin greenwave --example shared_update_bench
test_bin=$(cargo test --release -p greenwave-learn --features cuda --test cuda --no-run 2>&1 |
  tee /dev/stderr | sed -n 's/.*Executable tests\/cuda.rs (\(.*\))$/\1/p')
[ -x "$test_bin" ] || { echo "no CUDA test binary was built" >&2; exit 1; }
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qx '/.gpu/' "$exclude" 2>/dev/null || echo '/.gpu/' >>"$exclude"
rm -rf .gpu && mkdir -p .gpu/lib
strip -o .gpu/greenwave "$CARGO_TARGET_DIR/release/greenwave"
strip -o .gpu/shared_update_bench "$CARGO_TARGET_DIR/release/examples/shared_update_bench"
strip -o .gpu/cuda-test "$test_bin"
xz -6 -T2 .gpu/greenwave .gpu/shared_update_bench .gpu/cuda-test
for l in libfontconfig.so.1 libfreetype.so.6 libexpat.so.1 libpng16.so.16 libbrotlidec.so.1 \
  libbrotlicommon.so.1; do cp -L "/lib/x86_64-linux-gnu/$l" .gpu/lib/; done
cp tools/diagnostics/issue14/gpu/run.sh .gpu/
du -sh .gpu
