#!/usr/bin/env bash
# The calibration and readings runs that need a GPU, as one command on a lent GPU machine (issues 33 and 34):
#   1. DAFL beside DAFL's own code for 200 epochs, two seeds, each side and seed its own process
#      (tools/dafl_side_by_side.py; per-epoch JSON, so a run stopped by the lease keeps its epochs);
#   2. DAFL Table 1 at DAFL's budget (sweeps/dafl_table1.yaml, scale=paper: KD on noise = R2 at 24,000
#      iterations of 512, DAFL at 200 epochs), seeds 0-2;
#   3. the second seeds of the readings search, then the ladders with three seeds (ResNet-34, DKD before/after,
#      LeNet-5, the small CNN without FedDPSD and DGD), in that priority, as long as the lease allows.
# Cells run through tools/run_cells.py (the machine has no Ray), each process in its own SQLite store; back here,
# `dpsd sync /tmp/dpsd_gpu/<scale>/w<k> --to sqlite:///<results_dir>/mlflow.db` copies them into the store
# (the stores come back without the model weights and sample grids: the transfer holds 64 MiB).
# Needs, carried from the repository root: .whl/ (the Python packages the machine's image lacks), .gpu/mnist/
# (MNIST's four files, gzipped) and .gpu/DAFL/ (DAFL's folder of huawei-noah/Data-Efficient-Model-Compression).
# LIMIT: seconds the whole script may take (default 540); EXTRA: overrides for every run (a local check).
set -u
LIMIT=${LIMIT:-540}
EXTRA=${EXTRA:-}
OUT=${OUT:-/tmp/lease_out}
PY=${PY:-python3}
OFFICIAL=${OFFICIAL:-.gpu/DAFL}
mkdir -p "$OUT" /tmp/logs /tmp/data/MNIST/raw
export PYTHONUNBUFFERED=1
if [ -d .whl ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
fi
for f in .gpu/mnist/*.gz; do gunzip -c "$f" > "/tmp/data/MNIST/raw/$(basename "$f" .gz)"; done
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
$PY -c "import torch, dpsd.experiment, mlflow, opacus, dp_accounting; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())" \
  | tee -a "$OUT/gpu.txt" || exit 1
STOP=$((LIMIT - 45))   # every job ends by then; the rest packs $OUT
# CUDA MPS lets the many small processes' kernels share the GPU at once; kept only if a CUDA process runs under it.
if command -v nvidia-cuda-mps-control > /dev/null; then
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log
  mkdir -p /tmp/mps /tmp/mps_log
  if nvidia-cuda-mps-control -d && timeout 60 $PY -c "import torch; print(torch.ones(1).cuda().sum().item())"; then
    echo "MPS on" >> "$OUT/gpu.txt"
  else
    echo quit | nvidia-cuda-mps-control; unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    echo "MPS off" >> "$OUT/gpu.txt"
  fi
fi
D="data.root=/tmp/data"
for seed in 0 1; do  # DAFL's own code to its 200 epochs; ours to 50 (its 200 are dafl_table1's tracked runs)
  timeout $STOP $PY tools/dafl_side_by_side.py --official $OFFICIAL --sides official --seeds $seed --epochs 200 \
    --json "$OUT/sbs_official_s$seed.json" $D results_dir=/tmp/sbs $EXTRA > /tmp/logs/sbs_official_s$seed.log 2>&1 &
  timeout $STOP $PY tools/dafl_side_by_side.py --official $OFFICIAL --sides ours --seeds $seed --epochs 50 \
    --json "$OUT/sbs_ours_s$seed.json" $D results_dir=/tmp/sbs $EXTRA > /tmp/logs/sbs_ours_s$seed.log 2>&1 &
done
timeout $STOP $PY tools/run_cells.py dafl_table1 --processes 6 --stores /tmp/dpsd_gpu/paper --deadline 150 \
  scale=paper $D results_dir=/tmp/dpsd_gpu/results_paper $EXTRA > /tmp/logs/cells_paper.log 2>&1 &
timeout $STOP $PY tools/run_cells.py readings_r3 readings_r3_around_best@2 ladder_dpsd_repair@2 ladder_resnet34 \
  dkd_before_after ladder_lenet5@3 ladder@3 --rerun-stale --skip "method=(fed_dpsd|dgd) " --processes 8 \
  --stores /tmp/dpsd_gpu/smoke --deadline $((STOP - 90)) $D results_dir=/tmp/dpsd_gpu/results $EXTRA \
  > /tmp/logs/cells_smoke.log 2>&1 &
while [ -n "$(jobs -r)" ]; do sleep 20; grep -h "run_cells: {" /tmp/logs/cells_*.log | wc -l | xargs echo "cells done:"; done
wait
grep -h "teacher\|finished\|deadline\|failed" /tmp/logs/cells_*.log | cut -c1-400
tail -n 3 /tmp/logs/sbs_*.log
tar czf "$OUT/stores.tgz" --exclude='*.pt' --exclude='*.png' /tmp/dpsd_gpu/paper /tmp/dpsd_gpu/smoke 2>/dev/null
tar czf "$OUT/logs.tgz" /tmp/logs /tmp/sbs/dafl_side_by_side/*.log 2>/dev/null
[ -n "${CUDA_MPS_PIPE_DIRECTORY:-}" ] && echo quit | nvidia-cuda-mps-control
ls -la "$OUT"
