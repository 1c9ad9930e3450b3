"""The reference broker's container image, built locally with no registry.

    kspec faults image build        # prints the image's name, kspec-reference:<content hash>

No registry is needed, and no package is downloaded: the image's root filesystem is
assembled from what already runs the tests here, and imported with the docker SDK
(`docker import` of a tarball, with the image's ENV and ENTRYPOINT as import changes):

- this Python interpreter's installation (sys.base_prefix: the binary, libpython, the
  standard library without its tests, IDLE, Tk and ensurepip, no site-packages);
- the distributions the project declares it needs at run time ([project] dependencies in
  pyproject.toml, with what they require in turn), copied from this environment's
  site-packages by their installed-files lists;
- the project's own packages (sources and package data, no caches);
- Debian's libfaketime, when the host has it (faults/clock.py), at FAKETIME_LIBRARY, for the
  clock nemesis: the image then carries FAKETIME_LABEL, naming it;
- the shared libraries all of that loads, found with ldd, and the dynamic loader.

Debootstrap from Debian's packages would make a truer Debian, but downloads and unpacks
a hundred packages (minutes on a loaded CI machine, more with a Python on top); copying
the interpreter that passes the tests takes seconds and runs exactly the same code. The
tag is a hash of everything copied (the project's sources included), so a changed source
makes a new image and an unchanged one is reused.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import io
import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import tomllib
from pathlib import Path

from faults import clock

REPOSITORY = "kspec-reference"
LABEL = "org.kspec.faults.image"
FAKETIME_LABEL = "org.kspec.faults.libfaketime"   # the library's path in an image that carries it
FAKETIME_LIBRARY = "/opt/kspec/faketime/libfaketime.so.1"
PYTHON_HOME = "/opt/kspec/python"      # the interpreter's installation, as under sys.base_prefix
APP_DIR = "/opt/kspec/app"              # the project's packages and their dependencies (PYTHONPATH)
DATA_DIR = "/data"                      # each node's data directory (a bind mount of the run folder's node-<i>/)
PROJECT_ROOT = Path(__file__).resolve().parents[1]
PROJECT_PACKAGES = ("kspec", "reference", "spec", "conformance", "faults", "spark_validation", "reports")
STDLIB_LEFT_OUT = {"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "site-packages",
                   "__pycache__", "config-3.11-x86_64-linux-gnu"}
SKIPPED_SUFFIXES = (".pyc", ".a")
LDD_TIMEOUT_S = 10.0


class ImageError(RuntimeError):
    pass


def files(with_shared_libraries: bool = True) -> dict[str, Path]:
    """Every file of the root filesystem: its path in the image -> the host file it copies."""
    chosen: dict[str, Path] = {}
    base = Path(sys.base_prefix)
    python = Path(sysconfig.get_config_var("BINDIR") or base / "bin") / f"python{sys.version_info.major}.{sys.version_info.minor}"
    chosen[f"{PYTHON_HOME}/bin/python3"] = python.resolve()
    for library in (base / "lib").glob("libpython*.so*"):
        chosen[f"{PYTHON_HOME}/lib/{library.name}"] = library.resolve()
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    _add_tree(chosen, stdlib, f"{PYTHON_HOME}/lib/{stdlib.name}", STDLIB_LEFT_OUT)
    for distribution in _runtime_distributions():
        for entry in distribution.files or ():
            source = Path(distribution.locate_file(entry))
            if source.is_file() and "__pycache__" not in entry.parts and not str(entry).startswith(".."):
                chosen[f"{APP_DIR}/{entry}"] = source
    for package in PROJECT_PACKAGES:
        _add_tree(chosen, PROJECT_ROOT / package, f"{APP_DIR}/{package}", {"__pycache__", "node_modules"})
    try:
        chosen[FAKETIME_LIBRARY] = Path(clock.libfaketime()).resolve()
    except clock.ClockUnavailable:
        pass  # an image without it runs every nemesis but clock
    if with_shared_libraries:
        for path in _shared_libraries([source for source in chosen.values() if _is_elf(source)]):
            chosen[path] = Path(path).resolve()
    return chosen


def image_name() -> str:
    """kspec-reference:<hash>, of the project's sources by content and of the interpreter and
    dependencies by path, size and modification time (the shared libraries follow from them):
    the same sources give the same name, in about a second."""
    digest = hashlib.sha256()
    for path, source in sorted(files(with_shared_libraries=False).items()):
        stat = source.stat()
        identity = source.read_bytes() if source.is_relative_to(PROJECT_ROOT) else f"{stat.st_size} {stat.st_mtime_ns}".encode()
        digest.update(path.encode() + b"\0" + identity)
    return f"{REPOSITORY}:{digest.hexdigest()[:12]}"


def ensure(client, name: str | None = None) -> str:
    """The image's name; built first when absent (name None: the reference image of these sources)."""
    import docker.errors
    name = name or image_name()
    try:
        client.images.get(name)
        return name
    except docker.errors.ImageNotFound:
        if not name.startswith(f"{REPOSITORY}:"):
            raise ImageError(f"image {name} is not in the engine and no registry is reachable; "
                             "build or load it first (the reference image: kspec faults image build)") from None
    return build(client)


def build(client) -> str:
    """Assemble the root filesystem, import it into the engine, return the image's name."""
    name = image_name()
    chosen = files()
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        for directory in ("tmp", DATA_DIR.lstrip("/")):
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777
            tar.addfile(info)
        for path, source in sorted(chosen.items()):
            info = tar.gettarinfo(str(source), arcname=path.lstrip("/"))
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            with open(source, "rb") as f:
                tar.addfile(info, f)
    repository, tag = name.split(":")
    changes = [f"ENV PATH={PYTHON_HOME}/bin:/usr/bin:/bin", f"ENV PYTHONPATH={APP_DIR}",
               f"ENV LD_LIBRARY_PATH={PYTHON_HOME}/lib", "ENV PYTHONDONTWRITEBYTECODE=1", f"WORKDIR {DATA_DIR}",
               f'ENTRYPOINT ["{PYTHON_HOME}/bin/python3", "-m", "kspec.cli"]', f"LABEL {LABEL}=reference"]
    if FAKETIME_LIBRARY in chosen:
        changes.append(f"LABEL {FAKETIME_LABEL}={FAKETIME_LIBRARY}")
    client.api.import_image_from_data(archive.getvalue(), repository=repository, tag=tag, changes=changes)
    return name


def _add_tree(chosen: dict[str, Path], root: Path, target: str, left_out: set[str]) -> None:
    """Every regular file under root, but in folders named in left_out, and no symlinks or SKIPPED_SUFFIXES."""
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = [name for name in subfolders if name not in left_out]
        relative = Path(folder).relative_to(root)
        for name in names:
            source = Path(folder, name)
            if not name.endswith(SKIPPED_SUFFIXES) and not source.is_symlink():
                chosen[f"{target}/{relative / name}".replace("/./", "/")] = source


def _runtime_distributions() -> list[importlib.metadata.Distribution]:
    """The project's [project] dependencies and what they require, without extras, as installed here."""
    with open(PROJECT_ROOT / "pyproject.toml", "rb") as f:
        wanted = [_requirement_name(r) for r in tomllib.load(f)["project"]["dependencies"]]
    found: dict[str, importlib.metadata.Distribution] = {}
    while wanted:
        name = wanted.pop()
        if name in found:
            continue
        try:
            found[name] = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            raise ImageError(f"{name} is not installed in this environment (make setup installs it)") from None
        wanted += [_requirement_name(r) for r in found[name].requires or () if "extra ==" not in r]
    return list(found.values())


def _requirement_name(requirement: str) -> str:
    return re.split(r"[ ;<>=!~\[(]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _is_elf(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def _shared_libraries(binaries: list[Path]) -> set[str]:
    """The absolute paths ldd resolves for these binaries (the loader included), outside PYTHON_HOME's copies."""
    paths: set[str] = set()
    for binary in binaries:
        listing = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, timeout=LDD_TIMEOUT_S).stdout
        for line in listing.splitlines():
            match = re.search(r"(/\S+) \(0x", line)
            if match and not match.group(1).startswith(sys.base_prefix):
                paths.add(match.group(1))
    return paths
