#!/usr/bin/env bash
# The Azure Queue Storage API's suites against a real fila-server: pytest
# with the Azure SDK for Python (tests/azure, azure-storage-queue) and the
# Azure SDK for JavaScript (tests/azure-js, @azure/storage-queue). Installs
# what they need from the registries: a Python venv under
# target/azure-venv, npm packages under tests/azure-js/node_modules.
#
#   scripts/azure-tests.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --locked -p fila-server -p fila-cli
export FILA_BIN_DIR="$PWD/target/debug"

venv=target/azure-venv
if ! "$venv/bin/python" -c "import azure.storage.queue, boto3, pytest" 2>/dev/null; then
    if ! python3 -m venv "$venv" 2>/dev/null; then
        # Debian keeps venv in a package of its own.
        sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
        $sudo apt-get install -y python3-venv
        python3 -m venv "$venv"
    fi
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r tests/azure/requirements.txt
fi
"$venv/bin/python" -m pytest -q -p no:cacheprovider tests/azure "$@"

if command -v npm >/dev/null && command -v node >/dev/null; then
    (cd tests/azure-js && { [ -d node_modules/@azure/storage-queue ] || npm ci --no-audit --no-fund --loglevel=error; } && node --test)
else
    echo "node and npm are not installed: the Azure SDK for JavaScript suite is skipped" >&2
    [ -z "${CI:-}" ] || exit 1
fi
