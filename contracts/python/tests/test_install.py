"""The package installs with pip on a machine without a package index: the build backend needs nothing
but the standard library (pyproject.toml, _build/countersign_build.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import unittest

from .server import PYROOT


class OfflineInstallTest(unittest.TestCase):
    def test_pip_installs_the_package_into_a_venv_without_network(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            venv = os.path.join(tmp, "venv")
            subprocess.run([sys.executable, "-m", "venv", venv], check=True)  # pip from ensurepip's own wheel
            python = os.path.join(venv, "bin", "python")
            env = dict(os.environ, PIP_NO_INDEX="1", PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1",
                       # Any attempt to reach the network fails.
                       HTTP_PROXY="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9",
                       http_proxy="http://127.0.0.1:9", https_proxy="http://127.0.0.1:9")
            env.pop("PYTHONPATH", None)
            out = subprocess.run([python, "-m", "pip", "install", "--no-index", "--no-cache-dir", PYROOT],
                                 cwd=tmp, env=env, capture_output=True, text=True)
            self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
            probe = ("import countersign, importlib.metadata, os\n"
                     "d = os.path.dirname(countersign.__file__)\n"
                     "print(d)\n"
                     "print(importlib.metadata.version('countersign'))\n"
                     "print(os.path.exists(os.path.join(d, 'py.typed')))\n"
                     "print(countersign.ServerReplayStore.__name__)\n")
            got = subprocess.run([python, "-c", probe], cwd=tmp, env=env, capture_output=True, text=True, check=True)
            where, version, typed, store = got.stdout.split()
            self.assertTrue(where.startswith(venv), where)
            self.assertEqual((version, typed, store), ("0.1.0", "True", "ServerReplayStore"))


if __name__ == "__main__":
    unittest.main()
