#!/usr/bin/env bash
# Build, on this machine, what tools/lease_calibration.sh needs carried to a lent GPU machine (which reaches no
# package registry), so that a session drawn for one spends its minutes on the runs:
#   .whl/           the Python packages this checkout's .venv holds and the GPU image lacks, at the .venv's versions,
#                   as CPython 3.12 x86-64 wheels (the image's python3 is 3.12). The image's packages are IMAGE below,
#                   as the device library's KINDS.md listed them on 2026-11-17; left out as well: what the runs never
#                   import there (Ray: tools/run_cells.py runs without it; the dev tools; dpsd itself, read from
#                   the tree through PYTHONPATH).
#   .gpu/mnist/     MNIST's four raw files, gzipped, from DATA (default ../shared/data)
#   .gpu/teachers/  the LeNet-5 teachers of seeds 0-2 (sweeps/dafl_table1.yaml's), from RESULTS/teachers, trained
#                   there first (`dpsd teacher`, about a minute each on 2 CPU cores) where the cache lacks one
#   .gpu/DAFL/      with OFFICIAL=PATH only (SIDE_BY_SIDE=1 runs need it): DAFL's folder of
#                   huawei-noah/Data-Efficient-Model-Compression, copied from PATH
# Then: run(command="LIMIT=595 bash tools/lease_calibration.sh 2>&1 | tail -c 11000", carry=[".whl", ".gpu"],
# timeout_s=600). Prints what it built and its size (a call carries at most 64 MiB with the tree).
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${DATA:-../shared/data}
RESULTS=${RESULTS:-/work/results}
PY=${PY:-.venv/bin/python}
IMAGE="absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core cuda-pathfinder
cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools
formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna
imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver
lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe
matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals
networkx ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime
nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13
nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript
opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft
pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments
pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist
python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image
scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six sortedcontainers
statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm
tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope
triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp"
NOT_THERE="dpsd ray mutmut import-linter grimp libcst textual setproctitle tensorboardx linkify-it-py mdit-py-plugins"
normalise() { tr 'A-Z_.' 'a-z--'; }
skip=" $(echo $IMAGE $NOT_THERE | normalise) "
wanted=()
while IFS== read -r name version; do
  [ -n "$version" ] || continue
  key=$(echo "${name%=}" | normalise)
  case "$skip" in *" $key "*) ;; *) wanted+=("$key==${version#=}") ;; esac
done < <($PY -m pip list --format=freeze 2> /dev/null)
rm -rf .whl && mkdir -p .whl
for requirement in "${wanted[@]}"; do  # a package published only as source (antlr4 4.9.3) is built here: pure Python
  $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --dest .whl "$requirement" 2> /dev/null || $PY -m pip wheel -q --no-deps --wheel-dir .whl "$requirement"
done
echo "wheels: ${#wanted[@]} packages, $(du -sh .whl | cut -f1)"
mkdir -p .gpu/mnist .gpu/teachers
for f in "$DATA"/MNIST/raw/*-ubyte; do gzip -c "$f" > ".gpu/mnist/$(basename "$f").gz"; done
for seed in 0 1 2; do
  if ! ls "$RESULTS"/teachers/mnist-lenet5-seed$seed-*.pt > /dev/null 2>&1; then
    $PY -m dpsd.cli teacher dataset=mnist model/teacher=lenet5 model.teacher.arch=lenet5 seed=$seed \
      data.root="$DATA" results_dir="$RESULTS"
  fi
  cp "$RESULTS"/teachers/mnist-lenet5-seed$seed-*.pt .gpu/teachers/
done
if [ -n "${OFFICIAL:-}" ]; then rm -rf .gpu/DAFL && cp -r "$OFFICIAL" .gpu/DAFL; fi
echo "carry: .whl $(du -sh .whl | cut -f1), .gpu $(du -sh .gpu | cut -f1) ($(ls .gpu/teachers | tr '\n' ' '))"
tree=$(git ls-files -z | du -cb --files0-from=- | tail -1 | cut -f1)
total=$(( (tree + $(du -sb .whl | cut -f1) + $(du -sb .gpu | cut -f1)) / 1048576 ))
echo "the call sends about $total MiB with the tree (at most 64)$([ $total -lt 64 ] || echo ': too much; a
tracked carry/ (a CPU run carried across sessions, tools/carry_run.py) can be moved aside for the call')"
