#!/usr/bin/env bash
# The calibration runs that need a GPU, as one command on a GPU machine:
#   * DAFL Table 1's DAFL row at DAFL's budget (sweeps/dafl_table1.yaml, scale=paper: 200 epochs of 120
#     iterations of 512), seeds 0-2 of the spec's 0-4, three processes for the whole window. Three alone on an H100 took 0.0214-0.0227 s
#     an iteration (24,000 need up to 545 s; a fourth lease trained their teachers first, about 80 s, and its window
#     ended them at 85-90%), beside four side-by-side processes on an H200 0.0205 s (a third lease: 88%), beside the
#     ResNet-34 ladder 0.063 s (two leases: 30-36%). So they run alone, on the LeNet-5 teachers carried in
#     .gpu/teachers/ (this machine's teacher cache: `cp results/teachers/mnist-lenet5-seed[012]-*.pt .gpu/teachers/`),
#     and the window ends 15 s before LIMIT. Each cell saves its state every 1,200 iterations
#     (checkpoint.every_steps, dpsd/checkpoint.py, under /tmp/dpsd_gpu/results_paper/checkpoints): called again on
#     the same warm machine, the script starts only the cells its stores lack (tools/run_cells.py reads them), and
#     each goes on from its last checkpoint (a cold machine has none: the files are not carried back);
#   * SIDE_BY_SIDE=1: also DAFL beside DAFL's own code for the first 5 epochs, seeds 0 and 1, ours with the
#     official teacher (tools/dafl_side_by_side.py --teacher official), four light processes;
#   * LADDERS=1: also the ladders' cells the archive lacks (ResNet-34, then LeNet-5) in one more process
#     (their teachers are not carried: the ResNet-34's weights alone exceed what a call carries).
# Every process runs one intra-op thread (OMP_NUM_THREADS=1): four side-by-side processes at 16 threads each
# beside 14 others ran about four times slower than one alone.
# Cells run through tools/run_cells.py (the machine has no Ray), each process in its own SQLite store; back here,
# `dpsd sync /tmp/dpsd_gpu/<pool>/w<k> --to sqlite:///<results_dir>/mlflow.db` copies them into the store
# (the stores come back without the model weights and sample grids: the transfer holds 64 MiB). A run is
# recorded when it ends: one the window stops leaves only its lines in the logs.
# Needs, carried from the repository root: .whl/ (the Python packages the machine's image lacks), .gpu/mnist/
# (MNIST's four files, gzipped), .gpu/teachers/ and, for SIDE_BY_SIDE=1, .gpu/DAFL/ (DAFL's folder of
# huawei-noah/Data-Efficient-Model-Compression): `bash tools/prepare_lease.sh` builds them here (about 10 minutes,
# mostly downloads; OFFICIAL=PATH for .gpu/DAFL).
# LIMIT: seconds the whole script may take (default 580); EXTRA: overrides for every run (a local check);
# CHECKPOINT: the DAFL cells' iterations between checkpoints (default 1200).
set -u
LIMIT=${LIMIT:-580}
LADDERS=${LADDERS:-0}
SIDE_BY_SIDE=${SIDE_BY_SIDE:-0}
EXTRA=${EXTRA:-}
CHECKPOINT=${CHECKPOINT:-1200}
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
STOP=$((LIMIT - 15))   # every job ends by then; the rest packs $OUT (a few seconds)
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
mkdir -p /tmp/dpsd_gpu/results_paper/teachers  # the carried teachers: the cells' teacher cache finds them
cp -n .gpu/teachers/*.pt /tmp/dpsd_gpu/results_paper/teachers/ 2> /dev/null && echo "teachers carried: $(ls .gpu/teachers | tr '\n' ' ')"
timeout $STOP $PY tools/run_cells.py dafl_table1 --match 'model/generator=dafl seed=[012]$' --processes 3 --stores /tmp/dpsd_gpu/paper \
  scale=paper $D results_dir=/tmp/dpsd_gpu/results_paper checkpoint.every_steps=$CHECKPOINT $EXTRA > /tmp/logs/cells_paper.log 2>&1 &
PAPER=$!
if [ "$LADDERS" = 1 ]; then
  timeout $STOP $PY tools/run_cells.py ladder_resnet34 ladder_lenet5 --processes 1 --stores /tmp/dpsd_gpu/ladders \
    --deadline $((STOP - 120)) $D results_dir=/tmp/dpsd_gpu/results $EXTRA > /tmp/logs/cells_ladders.log 2>&1 &
fi
for seed in $([ "$SIDE_BY_SIDE" = 1 ] && echo 0 1); do  # both sides' first 5 epochs, ours with the official teacher
  timeout $((STOP - SECONDS)) $PY tools/dafl_side_by_side.py --official $OFFICIAL --sides official --seeds $seed \
    --epochs 5 --json "$OUT/sbs_official_s$seed.json" $D results_dir=/tmp/sbs $EXTRA > /tmp/logs/sbs_official_s$seed.log 2>&1 &
  timeout $((STOP - SECONDS)) $PY tools/dafl_side_by_side.py --official $OFFICIAL --sides ours --teacher official \
    --seeds $seed --epochs 5 --json "$OUT/sbs_crossed_s$seed.json" $D results_dir=/tmp/sbs_crossed $EXTRA \
    > /tmp/logs/sbs_crossed_s$seed.log 2>&1 &
done
while kill -0 $PAPER 2> /dev/null; do  # progress until the DAFL cells end (done, or stopped at STOP)
  sleep 20; echo "$SECONDS s: $(grep -h "dafl: step" /tmp/logs/cells_paper.log | tail -3 | tr '\n' ' ')"
done
wait
grep -h "teacher\|finished\|deadline\|failed" /tmp/logs/cells_*.log | cut -c1-400
tail -n 3 /tmp/logs/sbs_*.log 2>/dev/null
tar czf "$OUT/stores.tgz" --exclude='*.pt' --exclude='*.png' /tmp/dpsd_gpu 2>/dev/null
tar czf "$OUT/logs.tgz" /tmp/logs /tmp/sbs*/dafl_side_by_side/*.log 2>/dev/null
[ -n "${CUDA_MPS_PIPE_DIRECTORY:-}" ] && echo quit | nvidia-cuda-mps-control
ls -la "$OUT"
