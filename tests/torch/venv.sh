#!/usr/bin/env bash
# Makes, once, the virtual environment the pytorch suite (tests/torch/test_pytorch.py) runs real
# PyTorch from, and reuses it afterwards: PyTorch from PyPI (about 3 GB to download, 5.3 GB
# installed), pinned to the version the suite's figures are for. scripts/test.sh calls it.
# The venv is ${SP_TORCH_VENV:-${XDG_CACHE_HOME:-~/.cache}/streampool/torch-venv}; its stamp file
# (.streampool-torch, the requirement) is written last, so a venv without it is half made and
# is made again. Debian's python3 with python3-venv (scripts/setup.sh installs both).
# Under CI=true a failure is fatal; elsewhere it is a warning and the pytorch suite skips.
set -uo pipefail
requirement="torch==2.15.0"
venv=${SP_TORCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/streampool/torch-venv}
stamp="$venv/.streampool-torch"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$requirement" ] && [ -x "$venv/bin/python" ]; then
    exit 0
fi
python=/usr/bin/python3
[ -x "$python" ] || python=$(command -v python3)
fail() {
    echo "tests/torch/venv.sh: $*" >&2
    if [ "${CI:-}" = true ]; then
        exit 1
    fi
    echo "tests/torch/venv.sh: the pytorch suite will skip" >&2
    exit 0
}
mkdir -p "$(dirname "$venv")" || fail "cannot make $(dirname "$venv")"
# One maker at a time (two builds testing at once): the second waits, then finds the stamp.
exec 9>"$venv.lock" || fail "cannot lock $venv.lock"
flock 9
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$requirement" ]; then
    exit 0
fi
start=$(date +%s)
echo "tests/torch/venv.sh: installing $requirement from PyPI into $venv (once; about 3 GB)" >&2
rm -rf "$venv"
"$python" -m venv "$venv" || fail "python3 -m venv failed (Debian: apt-get install python3-venv)"
"$venv/bin/python" -m pip install --quiet --no-input --no-cache-dir --progress-bar off \
    "$requirement" || fail "pip install $requirement failed"
echo "$requirement" > "$stamp"
echo "tests/torch/venv.sh: $requirement installed in $(( $(date +%s) - start )) s" >&2
