#!/bin/sh
# Installs Debian's nodejs and npm for the TypeScript client's tests if node
# is not there yet (`make test-ts` runs this first), and checks the version:
# the tests need Node 20 or newer (Debian 12's nodejs is 18; use a newer
# Debian or NodeSource's packages there). The AI SDK (ai 7) declares Node 22
# or newer; its adapter's tests run on Node 20 too, where npm warns.
set -eu
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
	run=""
	if [ "$(id -u)" -ne 0 ]; then
		if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
			run="sudo -n"
		else
			echo "install-node: node or npm is missing and this user cannot install packages;" >&2
			echo "install Debian's 'nodejs' and 'npm' packages (Node 20 or newer)" >&2
			exit 1
		fi
	fi
	echo "install-node: installing Debian's nodejs and npm for the TypeScript tests" >&2
	export DEBIAN_FRONTEND=noninteractive
	if ! $run apt-get install -y --no-install-recommends nodejs npm >/dev/null 2>&1; then
		$run apt-get update >/dev/null
		$run apt-get install -y --no-install-recommends nodejs npm >/dev/null
	fi
fi
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 20 ]; then
	echo "install-node: node $(node --version) is too old; the TypeScript tests need Node 20 or newer" >&2
	exit 1
fi
