#!/bin/sh
# Type-checks the package with mypy --strict for Python 3.10. mypy comes
# from Debian's python3-mypy (installed if missing; no package index needed).
set -eu
cd "$(dirname "$0")"
mypy_python=""
for py in python3 /usr/bin/python3; do
	if command -v "$py" >/dev/null 2>&1 && "$py" -m mypy --version >/dev/null 2>&1; then
		mypy_python="$py"
		break
	fi
done
if [ -z "$mypy_python" ]; then
	run=""
	if [ "$(id -u)" -ne 0 ]; then
		if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
			run="sudo -n"
		else
			echo "typecheck: mypy is missing and this user cannot install packages; install Debian's python3-mypy" >&2
			exit 1
		fi
	fi
	echo "typecheck: installing Debian's python3-mypy" >&2
	export DEBIAN_FRONTEND=noninteractive
	if ! $run apt-get install -y --no-install-recommends python3-mypy >/dev/null 2>&1; then
		$run apt-get update >/dev/null
		$run apt-get install -y --no-install-recommends python3-mypy >/dev/null
	fi
	mypy_python=/usr/bin/python3
fi
exec "$mypy_python" -m mypy --strict --python-version 3.10 src
