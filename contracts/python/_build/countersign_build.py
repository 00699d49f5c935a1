"""The package's build backend (PEP 517, with PEP 660 editable installs), on the standard library alone.

``pip install ./contracts/python`` needs nothing from a package index: the build requires no package, so
an isolated build environment is empty, and this module writes the wheel (``py3-none-any``: the package is
pure Python) and the sdist itself. Metadata comes from ``pyproject.toml``'s ``[project]`` table.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile
from typing import Any, Dict, List, Mapping, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "countersign"
# Zip entries get this time (1980-01-01, the earliest a zip holds): the same sources give the same wheel.
EPOCH = (1980, 1, 1, 0, 0, 0)


def _project() -> Dict[str, Any]:
    """The [project] table of pyproject.toml: with tomllib where there is one; else (Python 3.10) its
    string values, which is all the metadata needs."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        data = f.read()
    try:
        import tomllib
    except ImportError:  # Python 3.10
        project: Dict[str, Any] = {}
        section = ""
        for line in data.decode("utf-8").splitlines():
            m = re.match(r"^\s*\[([^\]]+)\]\s*$", line)
            if m:
                section = m.group(1).strip()
                continue
            m = re.match(r'^\s*([A-Za-z0-9_-]+)\s*=\s*"((?:[^"\\]|\\.)*)"\s*$', line)
            if section == "project" and m:
                project[m.group(1)] = m.group(2)
        return project
    return dict(tomllib.loads(data.decode("utf-8"))["project"])


def _metadata() -> Tuple[str, str, str]:
    """The distribution's name, version and METADATA text."""
    p = _project()
    name, version = str(p["name"]), str(p["version"])
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    if p.get("description"):
        lines.append(f"Summary: {p['description']}")
    if p.get("requires-python"):
        lines.append(f"Requires-Python: {p['requires-python']}")
    for c in p.get("classifiers", []) if isinstance(p.get("classifiers"), list) else []:
        lines.append(f"Classifier: {c}")
    for d in p.get("dependencies", []) if isinstance(p.get("dependencies"), list) else []:
        lines.append(f"Requires-Dist: {d}")
    readme = p.get("readme")
    body = ""
    if isinstance(readme, str):
        lines.append("Description-Content-Type: text/markdown")
        with open(os.path.join(ROOT, readme), encoding="utf-8") as f:
            body = f.read()
    return name, version, "\n".join(lines) + "\n\n" + body


def _package_files() -> List[Tuple[str, str]]:
    """(path in the wheel, path on disk) of every file of the package: its modules and py.typed."""
    out = []
    src = os.path.join(ROOT, "src", PACKAGE)
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for fn in sorted(filenames):
            if fn.endswith(".py") or fn == "py.typed":
                full = os.path.join(dirpath, fn)
                out.append((os.path.relpath(full, os.path.join(ROOT, "src")).replace(os.sep, "/"), full))
    return out


def _dist_name(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _write_wheel(directory: str, files: List[Tuple[str, bytes]]) -> str:
    name, version, metadata = _metadata()
    info = f"{_dist_name(name)}-{version}.dist-info"
    wheel = "Wheel-Version: 1.0\nGenerator: countersign_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    entries = files + [(f"{info}/METADATA", metadata.encode("utf-8")), (f"{info}/WHEEL", wheel.encode())]
    record = []
    for path, data in entries:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    entries.append((f"{info}/RECORD", ("\n".join(record) + "\n").encode()))
    filename = f"{_dist_name(name)}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(directory, filename), "w", zipfile.ZIP_DEFLATED) as zf:
        for path, data in entries:
            zi = zipfile.ZipInfo(path, EPOCH)
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(zi, data)
    return filename


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


# --- PEP 517 -----------------------------------------------------------------


def get_requires_for_build_wheel(config_settings: Optional[Mapping[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[Mapping[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_editable(config_settings: Optional[Mapping[str, Any]] = None) -> List[str]:
    return []


def build_wheel(wheel_directory: str, config_settings: Optional[Mapping[str, Any]] = None,
                metadata_directory: Optional[str] = None) -> str:
    return _write_wheel(wheel_directory, [(arc, _read(full)) for arc, full in _package_files()])


def build_editable(wheel_directory: str, config_settings: Optional[Mapping[str, Any]] = None,
                   metadata_directory: Optional[str] = None) -> str:
    """A wheel whose .pth file puts this checkout's src on the path (PEP 660)."""
    pth = os.path.join(ROOT, "src") + "\n"
    return _write_wheel(wheel_directory, [(f"__editable__.{PACKAGE}.pth", pth.encode("utf-8"))])


def build_sdist(sdist_directory: str, config_settings: Optional[Mapping[str, Any]] = None) -> str:
    name, version, metadata = _metadata()
    base = f"{_dist_name(name)}-{version}"
    members = [("pyproject.toml", os.path.join(ROOT, "pyproject.toml")),
               ("README.md", os.path.join(ROOT, "README.md")),
               ("_build/countersign_build.py", os.path.abspath(__file__))]
    members += [("src/" + arc, full) for arc, full in _package_files()]
    filename = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz", format=tarfile.PAX_FORMAT) as tf:
        for arc, data in [(arc, _read(full)) for arc, full in members] + [("PKG-INFO", metadata.encode("utf-8"))]:
            ti = tarfile.TarInfo(f"{base}/{arc}")
            ti.size, ti.mode, ti.mtime = len(data), 0o644, 0
            tf.addfile(ti, io.BytesIO(data))
    return filename
