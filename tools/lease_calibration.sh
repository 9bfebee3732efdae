#!/usr/bin/env bash
# The calibration runs that need a GPU, as one command on a lent GPU machine (issues 33 and 34), in two phases:
#   1. DAFL Table 1's DAFL row at DAFL's budget (sweeps/dafl_table1.yaml, scale=paper: 200 epochs of 120
#      iterations of 512), seeds 0-2, three processes with the GPU to themselves (crowded, two leases ended them
#      at 30-36%), beside one process for the ladders' cells the archive lacks (ResNet-34, then LeNet-5);
#   2. DAFL beside DAFL's own code for the first 5 epochs, seeds 0 and 1, ours with the official teacher
#      (tools/dafl_side_by_side.py --teacher official: does the teacher explain why ours runs ahead early?).
# Every process runs one intra-op thread (OMP_NUM_THREADS=1): four side-by-side processes at 16 threads each
# beside 14 others ran about four times slower than one alone.
# Cells run through tools/run_cells.py (the machine has no Ray), each process in its own SQLite store; back here,
# `dpsd sync /tmp/dpsd_gpu/<pool>/w<k> --to sqlite:///<results_dir>/mlflow.db` copies them into the store
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
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
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
PHASE2=150   # seconds left for phase 2 when phase 1 ends
timeout $((STOP - PHASE2)) $PY tools/run_cells.py dafl_table1 --processes 3 --stores /tmp/dpsd_gpu/paper \
  scale=paper $D results_dir=/tmp/dpsd_gpu/results_paper $EXTRA > /tmp/logs/cells_paper.log 2>&1 &
PAPER=$!
timeout $STOP $PY tools/run_cells.py ladder_resnet34 ladder_lenet5 --processes 1 --stores /tmp/dpsd_gpu/ladders \
  --deadline $((STOP - 120)) $D results_dir=/tmp/dpsd_gpu/results $EXTRA > /tmp/logs/cells_ladders.log 2>&1 &
while kill -0 $PAPER 2> /dev/null; do  # phase 1 ends with the DAFL cells (done, or stopped PHASE2 s before STOP)
  sleep 20; grep -h "dafl: step" /tmp/logs/cells_paper.log | tail -3 | tr '\n' ' '; echo
done
for seed in 0 1; do  # phase 2: both sides' first 5 epochs, ours with the official teacher
  timeout $((STOP - SECONDS)) $PY tools/dafl_side_by_side.py --official $OFFICIAL --sides official --seeds $seed \
    --epochs 5 --json "$OUT/sbs_official_s$seed.json" $D results_dir=/tmp/sbs $EXTRA > /tmp/logs/sbs_official_s$seed.log 2>&1 &
  timeout $((STOP - SECONDS)) $PY tools/dafl_side_by_side.py --official $OFFICIAL --sides ours --teacher official \
    --seeds $seed --epochs 5 --json "$OUT/sbs_crossed_s$seed.json" $D results_dir=/tmp/sbs_crossed $EXTRA \
    > /tmp/logs/sbs_crossed_s$seed.log 2>&1 &
done
wait
grep -h "teacher\|finished\|deadline\|failed" /tmp/logs/cells_*.log | cut -c1-400
tail -n 3 /tmp/logs/sbs_*.log
tar czf "$OUT/stores.tgz" --exclude='*.pt' --exclude='*.png' /tmp/dpsd_gpu/paper /tmp/dpsd_gpu/ladders 2>/dev/null
tar czf "$OUT/logs.tgz" /tmp/logs /tmp/sbs/dafl_side_by_side/*.log 2>/dev/null
[ -n "${CUDA_MPS_PIPE_DIRECTORY:-}" ] && echo quit | nvidia-cuda-mps-control
ls -la "$OUT"
