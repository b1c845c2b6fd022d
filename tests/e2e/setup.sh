#!/usr/bin/env bash
# Set up the end-to-end test's environment in .e2e/ (idempotent; `make e2e` runs it):
#   .e2e/owui/           Open WebUI 0.12.4 in its own venv (torch pinned first: CPU wheel)
#   .e2e/node_modules/   playwright-core, which drives Debian's /usr/bin/chromium
# and installs Debian's chromium with apt-get when /usr/bin/chromium is missing.
# Fails loudly: any step that fails stops the script with its error.
set -euo pipefail
cd "$(dirname "$0")/../.."

PYTHON=${PYTHON:-python3}
E2E=.e2e
OWUI=$E2E/owui
TORCH=torch==2.13.0
OPEN_WEBUI=open-webui==0.12.4
STAMP=$OWUI/.installed-$OPEN_WEBUI
mkdir -p "$E2E"

if [ ! -f "$STAMP" ]; then
    echo "== e2e: Open WebUI venv in $OWUI (about 2-3 minutes)"
    if [ ! -x "$OWUI/bin/python" ]; then
        "$PYTHON" -c 'import sys; sys.exit(not (3, 11) <= sys.version_info[:2] < (3, 13))' \
            || { echo "== e2e: $OPEN_WEBUI needs Python 3.11 or 3.12 (PYTHON=...)" >&2; exit 1; }
        "$PYTHON" -m venv "$OWUI"
    fi
    "$OWUI/bin/python" -m pip install -q --upgrade pip
    # torch first and pinned: open-webui's dependencies would otherwise pull a multi-GB CUDA build
    "$OWUI/bin/python" -m pip install -q "$TORCH"
    "$OWUI/bin/python" -m pip install -q "$OPEN_WEBUI"
    "$OWUI/bin/open-webui" --help >/dev/null
    touch "$STAMP"
fi

if [ ! -x /usr/bin/chromium ]; then
    echo "== e2e: installing Debian's chromium (log: $E2E/apt.log)"
    if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
    if ! { $SUDO apt-get update -qq \
        && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
            chromium; } >"$E2E/apt.log" 2>&1; then
        cat "$E2E/apt.log" >&2
        echo "== e2e: apt-get could not install chromium" >&2
        exit 1
    fi
fi
# (Debian's wrapper script may print a harmless shell warning before the version)
version=$(/usr/bin/chromium --version 2>&1) || { echo "$version" >&2; exit 1; }
echo "== e2e: ${version##*$'\n'}"

command -v npm >/dev/null || { echo "== e2e: node and npm (Node.js 20+) are needed" >&2; exit 1; }

if ! cmp -s tests/e2e/package.json "$E2E/package.json" \
    || ! cmp -s tests/e2e/package-lock.json "$E2E/package-lock.json" \
    || [ ! -f "$E2E/node_modules/playwright-core/package.json" ]; then
    echo "== e2e: playwright-core in $E2E/node_modules"
    cp tests/e2e/package.json "$E2E/package.json"
    cp tests/e2e/package-lock.json "$E2E/package-lock.json"
    (cd "$E2E" && npm ci --no-audit --no-fund --loglevel=error)
fi
echo "== e2e: environment ready in $E2E"
