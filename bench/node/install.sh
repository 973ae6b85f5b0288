#!/bin/sh
# install.sh: installs the pinned Node packages of bench/node (package-lock.json) into
# bench/node/node_modules (git-ignored), for the OpenAI Node SDK and node-llama-cpp tests.
# Idempotent and fast when already installed: the sha256 of package-lock.json is kept in
# node_modules/.sluice-lock.sha256 after a successful install, and npm runs only when it differs.
# --omit=optional: node-llama-cpp's other-platform and GPU binaries are optional dependencies;
# the CPU one (@node-llama-cpp/linux-x64) is a direct dependency.
# --ignore-scripts: node-llama-cpp's postinstall would try to fetch or build llama.cpp; the
# prebuilt binary needs neither (the server loads it with build: "never").
# The Go tests (bench/testenv.NodeDir) check the same stamp and fail with "run make node-deps".
set -eu
cd "$(dirname "$0")"
want=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ "$(cat node_modules/.sluice-lock.sha256 2>/dev/null || true)" = "$want" ]; then
	exit 0
fi
command -v node >/dev/null 2>&1 || { echo "node-deps: node (>= 20) is not installed" >&2; exit 1; }
command -v npm >/dev/null 2>&1 || { echo "node-deps: npm is not installed" >&2; exit 1; }
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 20 ] || { echo "node-deps: node >= 20 needed, found $(node --version)" >&2; exit 1; }
echo "node-deps: npm ci in bench/node"
npm ci --omit=optional --ignore-scripts --no-audit --no-fund --loglevel=error
echo "$want" > node_modules/.sluice-lock.sha256
