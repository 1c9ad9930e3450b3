"""A class-data sharing archive of the driver JVM's classes, so that a Spark session starts sooner.

A Spark driver loads thousands of classes from PySpark's jars before its first job is done.
JDK's application class-data sharing (JEP 350, dynamic archives, JDK 13+) maps the classes one
run loaded, already parsed and verified, into the next: session start-up plus a first job went from 19-24 s to 7-12 s on the
shared 2-core machine at load average 5-16 (benchmarks/README.md).

1. A session with no archive yet asks its JVM to write one when it exits
   (-XX:ArchiveClassesAtExit) to a part file named after this process. The JVM writes the
   file's header last (its regions first, their checksums in the header), so a part file whose
   first four bytes are the dynamic archive's magic number is complete.
2. A later session renames a complete part file to the archive (atomically: two sessions may
   start at once) and maps it (-XX:SharedArchiveFile). The JVM checks that the archive matches
   its own build and class path and, when it does not (another JDK, another PySpark), runs
   without it; its CDS messages are turned off so that nothing reaches the checker's output.

The archive is about 150 MB, in $XDG_CACHE_HOME/kspec (~/.cache/kspec), one per PySpark
version and JDK. Without a writable cache folder the JVM simply starts without one.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import time
from pathlib import Path

import pyspark

DYNAMIC_ARCHIVE_MAGIC = 0xF00BABA8  # HotSpot's CDS_DYNAMIC_ARCHIVE_MAGIC, little-endian in the file header
PART_AGE_S_MAX = 3600.0  # an incomplete part file this old belongs to a JVM that died while writing
QUIET = "-Xlog:cds*=off"  # mismatches and skipped classes are logged to stdout by default


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kspec"


def archive_path(folder: Path) -> Path:
    """One archive per PySpark version and JDK (the java that spark-submit runs)."""
    java_home = os.environ.get("JAVA_HOME")
    java = Path(java_home) / "bin" / "java" if java_home else Path(shutil.which("java") or "java")
    jdk = hashlib.sha256(str(java.resolve()).encode()).hexdigest()[:8]
    return folder / f"spark-{pyspark.__version__}-{jdk}.jsa"


def java_options(folder: Path | None = None) -> str:
    """The driver JVM options that map the archive, or that have this JVM write one at exit."""
    folder = folder or cache_dir()
    archive = archive_path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        _promote_parts(archive)
    except OSError:
        return ""
    if archive.exists():
        return f"-XX:SharedArchiveFile={archive} {QUIET}"
    return f"-XX:ArchiveClassesAtExit={archive}.part-{os.getpid()} {QUIET}"


def _promote_parts(archive: Path) -> None:
    """Rename a complete part file to the archive; remove the others that are complete or stale."""
    for part in sorted(archive.parent.glob(archive.name + ".part-*")):
        try:
            complete = _is_complete(part)
            if complete and not archive.exists():
                os.replace(part, archive)
            elif complete or time.time() - part.stat().st_mtime > PART_AGE_S_MAX:
                part.unlink()
        except FileNotFoundError:
            continue  # another session took it first


def _is_complete(path: Path) -> bool:
    with open(path, "rb") as f:
        return int.from_bytes(f.read(4), "little") == DYNAMIC_ARCHIVE_MAGIC
