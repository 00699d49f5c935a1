#!/bin/sh
# Installs Debian's headless Chromium for the web inbox's browser tests, if
# it is not there yet. `make test` runs this first; the browser tests fail
# (they never skip) without a browser.
set -eu
if [ -n "${COUNTERSIGN_CHROMIUM:-}" ] && [ -x "${COUNTERSIGN_CHROMIUM}" ]; then
	exit 0
fi
if command -v chromium >/dev/null 2>&1; then
	exit 0
fi
run=""
if [ "$(id -u)" -ne 0 ]; then
	if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
		run="sudo -n"
	else
		echo "install-chromium: chromium is missing and this user cannot install packages;" >&2
		echo "install Debian's 'chromium' package, or set COUNTERSIGN_CHROMIUM to a Chromium binary" >&2
		exit 1
	fi
fi
echo "install-chromium: installing Debian's chromium for the browser tests" >&2
export DEBIAN_FRONTEND=noninteractive
if ! $run apt-get install -y --no-install-recommends chromium >/dev/null 2>&1; then
	$run apt-get update >/dev/null
	$run apt-get install -y --no-install-recommends chromium >/dev/null
fi
command -v chromium >/dev/null
