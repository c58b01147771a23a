#!/usr/bin/env bash
# The Python client's type check (mypy) and suite (tests/python) against
# real fila-server processes: the package installed from clients/python into a fresh
# virtual environment under target/python-venv (pip, from the registry:
# the build backend, pytest and mypy), as a user installs it.
#
#   scripts/python-tests.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --locked -p fila-server -p fila-cli
export FILA_BIN_DIR="$PWD/target/debug"

venv=target/python-venv
if ! "$venv/bin/python" -c "import pytest, mypy" 2>/dev/null; then
    if ! python3 -m venv "$venv" 2>/dev/null; then
        # Debian keeps venv in a package of its own.
        sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
        $sudo apt-get install -y python3-venv
        python3 -m venv "$venv"
    fi
    "$venv/bin/pip" install --quiet --disable-pip-version-check pytest mypy
fi
# The package says it is typed (py.typed): its hints must check.
"$venv/bin/mypy" --no-error-summary clients/python/src/fila
# Installed afresh each run (not editable): the suite tests what pip
# installs, py.typed and all.
"$venv/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps ./clients/python
rm -rf clients/python/build clients/python/src/fila.egg-info
(cd tests/python && "../../$venv/bin/python" -m pytest -q -p no:cacheprovider . "$@")
