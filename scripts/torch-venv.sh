# Sourced by the PyTorch benchmark scripts: sets `venv` to the PyTorch venv
# outside the repo (~/.cache/murmur-bench-torch, or $MURMUR_TORCH_VENV) and
# installs CPU PyTorch from PyPI into it on first use.
venv="${MURMUR_TORCH_VENV:-$HOME/.cache/murmur-bench-torch}"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import torch' >/dev/null 2>&1; then
    echo "installing PyTorch (CPU wheels from PyPI) into $venv ..." >&2
    python3 -m venv "$venv"
    nice -n 10 "$venv/bin/pip" install --quiet --upgrade pip
    nice -n 10 "$venv/bin/pip" install --quiet torch numpy
fi
