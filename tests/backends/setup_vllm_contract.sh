#!/usr/bin/env bash
# Put vLLM 0.33.0's Python sources, and the pure packages its protocol modules import, in one folder
# (about 130 MB) for tests/backends/test_vllm_contract.py. Nothing is installed into the project's venv:
# the tests load this folder in a separate process. Prints the folder to export as VLLM_CONTRACT_DIR.
set -euo pipefail
DIR="${VLLM_CONTRACT_DIR:-$HOME/.cache/llm-gateway/vllm-0.33.0}"
PY="${PYTHON:-python}"
STAMP="$(sha256sum "$0" | cut -d' ' -f1)"
if [ "$(cat "$DIR/.complete" 2>/dev/null)" = "$STAMP" ]; then echo "$DIR"; exit 0; fi
mkdir -p "$DIR/wheel"
"$PY" -m pip download --quiet --no-deps --dest "$DIR/wheel" vllm==0.33.0
"$PY" - "$DIR" <<'PYEOF'
import pathlib, sys, zipfile
root = pathlib.Path(sys.argv[1])
wheel = next((root / "wheel").glob("vllm-0.33.0-*.whl"))
with zipfile.ZipFile(wheel) as z:
    z.extractall(root / "src", [n for n in z.namelist() if n.startswith("vllm/") and n.endswith(".py")])
PYEOF
# Pinned to the versions the contract tests last passed with (a new release must not change them unseen).
"$PY" -m pip install --quiet --no-deps --upgrade --target "$DIR/deps" \
    aiohappyeyeballs==2.7.1 aiohttp==3.14.5 aiosignal==1.4.0 cachetools==8.0.2 cbor2==6.3.0 cloudpickle==3.1.3 \
    fastapi==0.165.0 frozenlist==1.8.0 multidict==7.2.1 openai-harmony==0.0.8 opentelemetry-api==1.45.2 \
    opentelemetry-sdk==1.45.2 opentelemetry-semantic-conventions==0.66b2 pillow==13.0.0 prometheus-client==0.26.0 \
    propcache==0.5.4 py-cpuinfo==9.0.0 pybase64==1.5.1 pyzmq==27.3.0 uvloop==0.23.0 yarl==1.25.1 \
    partial-json-parser==0.2.1.1.post7 llguidance==1.9.1 psutil==7.2.2
echo "$STAMP" > "$DIR/.complete"
echo "$DIR"
