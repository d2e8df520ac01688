#!/usr/bin/env bash
# Creates .venv with Python 3.10 and installs the pinned, tested stack (requirements.lock)
# plus this project (editable). Idempotent: a second call only re-checks the pins.
set -euo pipefail
cd "$(dirname "$0")"

find_python310() {
  if command -v python3.10 >/dev/null 2>&1 && python3.10 -c 'import sys' >/dev/null 2>&1; then
    command -v python3.10; return
  fi
  if command -v pyenv >/dev/null 2>&1; then
    local root; root=$(pyenv root)
    for candidate in "$root"/versions/3.10*/bin/python3.10; do
      [ -x "$candidate" ] && { echo "$candidate"; return; }
    done
  fi
  echo "setup.sh: Python 3.10 is required (TFX 1.16 supports 3.9-3.10); install python3.10" >&2
  exit 1
}

VENV=${VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  PY=$(find_python310)
  echo "setup.sh: creating $VENV with $PY"
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade "pip==24.2"
echo "setup.sh: installing the pinned stack from requirements.lock (first time: a few minutes)"
"$VENV/bin/python" -m pip install --quiet -r requirements.lock
"$VENV/bin/python" -m pip install --quiet --no-deps --no-build-isolation -e .
"$VENV/bin/python" -m pip check
echo "setup.sh: ready. Activate with: source $VENV/bin/activate"
