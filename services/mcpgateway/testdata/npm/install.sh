#!/bin/sh
# Installs the npm packages of the gateway's tests (the filesystem MCP
# server and the TypeScript SDK client) from the committed lockfile, after
# making sure node and npm are there (the TypeScript client's installer).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
sh "$here/../../../../contracts/typescript/scripts/install-node.sh"
cd "$here"
if [ ! -f node_modules/.package-lock.json ] || ! cmp -s package-lock.json node_modules/.countersign-lock; then
	npm ci --no-audit --no-fund --loglevel=error >&2
	cp package-lock.json node_modules/.countersign-lock
fi
