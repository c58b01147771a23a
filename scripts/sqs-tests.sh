#!/usr/bin/env bash
# The SQS API's suites against a real fila-server: pytest with boto3
# (tests/sqs) and, when Node is there, the AWS SDK for JavaScript
# (tests/sqs-js). The boto3 suite then runs again against moto, the
# reference implementation (SQS_BACKEND=moto: tests of what only fila has
# are skipped, and each assertion on which the two differ names the AWS
# documentation that decides it). Installs what they need from the
# registries: a Python venv under target/sqs-venv, npm packages under
# tests/sqs-js/node_modules.
#
#   scripts/sqs-tests.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --locked -p fila-server -p fila-cli
export FILA_BIN_DIR="$PWD/target/debug"

venv=target/sqs-venv
if ! "$venv/bin/python" -c "import boto3, pytest, moto.server" 2>/dev/null; then
    if ! python3 -m venv "$venv" 2>/dev/null; then
        # Debian keeps venv in a package of its own.
        sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
        $sudo apt-get install -y python3-venv
        python3 -m venv "$venv"
    fi
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r tests/sqs/requirements.txt
fi
"$venv/bin/python" -m pytest -q -p no:cacheprovider tests/sqs "$@"
SQS_BACKEND=moto "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/sqs "$@"

if command -v npm >/dev/null && command -v node >/dev/null; then
    (cd tests/sqs-js && { [ -d node_modules/@aws-sdk/client-sqs ] || npm ci --no-audit --no-fund --loglevel=error; } && node --test)
else
    echo "node and npm are not installed: the AWS SDK for JavaScript suite is skipped" >&2
    [ -z "${CI:-}" ] || exit 1
fi
