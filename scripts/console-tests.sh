#!/usr/bin/env bash
# The web console's browser suite (tests/console): pytest driving Debian's
# headless Chromium through Debian's ChromeDriver (selenium) against a real
# fila-server. Installs what it needs: the chromium and chromium-driver
# packages (apt), a Python venv under target/console-venv. Screenshots go
# to target/console-screenshots (FILA_SCREENSHOTS).
#
#   scripts/console-tests.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --locked -p fila-server -p fila-cli
export FILA_BIN_DIR="$PWD/target/debug"

sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
if ! command -v chromedriver >/dev/null || ! { command -v chromium >/dev/null || command -v chromium-browser >/dev/null; }; then
    $sudo apt-get install -y --no-install-recommends chromium chromium-driver \
        || { $sudo apt-get update && $sudo apt-get install -y --no-install-recommends chromium chromium-driver; }
fi

venv=target/console-venv
if ! "$venv/bin/python" -c "import selenium, pytest" 2>/dev/null; then
    if ! python3 -m venv "$venv" 2>/dev/null; then
        # Debian keeps venv in a package of its own.
        $sudo apt-get install -y python3-venv
        python3 -m venv "$venv"
    fi
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r tests/console/requirements.txt
fi
export FILA_SCREENSHOTS="${FILA_SCREENSHOTS:-$PWD/target/console-screenshots}"
(cd tests/console && "../../$venv/bin/python" -m pytest -q -p no:cacheprovider . "$@")
echo "screenshots: $FILA_SCREENSHOTS"
