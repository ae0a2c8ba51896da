#!/bin/bash
# Issue 14 item 5 on a lent GPU machine, from the .gpu/ folder prepare.sh fills: the CUDA
# parity test (crates/learn/tests/cuda.rs), then CPU and CUDA side by side (BENCHMARKS.md,
# "The learner on a GPU"): grid-4x4 training, export of the CUDA run, the update bench.
# Everything it prints is also under $OUT when run as prepare.sh says.
cd "$(dirname "$0")"
for f in *.xz; do xz -d "$f"; done; chmod +x greenwave shared_update_bench cuda-test
export LD_LIBRARY_PATH=$PWD/lib:/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/cuda/lib64
t() { local s=$EPOCHREALTIME; "$@"; local rc=$?; echo "== $(python3 -c "print(round($EPOCHREALTIME-$s,2))") s rc=$rc: $*"; }
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc; ls -d /usr/local/cuda*; ldd ./greenwave | grep -i -E "not found|cuda|cublas"; } 2>&1 | tee $OUT/env.txt
t ./cuda-test --test-threads 1 2>&1 | tee $OUT/test.log
G="--scenario grid-4x4 --policy shared --steps 100000000 --seed 1 --quiet"
for d in cuda cpu; do
  t ./greenwave train $G --stop-after-iterations 3 --device $d --out /tmp/g4-$d 2>&1 | tail -3
  cp /tmp/g4-$d/metrics.csv $OUT/g4-$d.csv
done
t ./greenwave export /tmp/g4-cuda --out /tmp/g4-cuda.onnx 2>&1 | tail -3
for d in cuda cpu cuda cpu; do t ./shared_update_bench 60 2 1024 $d 2>&1 | tail -2; done
for d in cuda cpu; do
  t ./greenwave train $G --hidden 256,256 --envs 32 --minibatch 4096 --stop-after-iterations 2 --device $d --out /tmp/w-$d 2>&1 | tail -3
  cp /tmp/w-$d/metrics.csv $OUT/w-$d.csv
done
