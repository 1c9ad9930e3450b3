"""The driver JVM's class-data sharing archive: written at exit to a part file, taken into use only once complete."""
import os
import time

from spark_validation import class_archive
from spark_validation.class_archive import DYNAMIC_ARCHIVE_MAGIC, PART_AGE_S_MAX, archive_path, java_options


def _part(folder, pid, complete):
    path = folder / f"{archive_path(folder).name}.part-{pid}"
    # the JVM writes the regions first and the header (magic number first) last
    path.write_bytes((DYNAMIC_ARCHIVE_MAGIC.to_bytes(4, "little") if complete else bytes(4)) + b"regions")
    return path


def test_without_an_archive_the_jvm_writes_one_at_exit_to_a_part_file_of_its_own(tmp_path):
    options = java_options(tmp_path)
    assert options == f"-XX:ArchiveClassesAtExit={archive_path(tmp_path)}.part-{os.getpid()} {class_archive.QUIET}"


def test_a_complete_part_becomes_the_archive_and_the_next_jvm_maps_it(tmp_path):
    _part(tmp_path, 11, complete=True)
    options = java_options(tmp_path)
    assert options == f"-XX:SharedArchiveFile={archive_path(tmp_path)} {class_archive.QUIET}"
    assert [p.name for p in tmp_path.iterdir()] == [archive_path(tmp_path).name]


def test_a_part_still_being_written_is_left_alone_and_a_stale_one_removed(tmp_path):
    writing = _part(tmp_path, 12, complete=False)
    stale = _part(tmp_path, 13, complete=False)
    old = time.time() - PART_AGE_S_MAX - 60
    os.utime(stale, (old, old))
    assert java_options(tmp_path).startswith("-XX:ArchiveClassesAtExit=")
    assert writing.exists() and not stale.exists() and not archive_path(tmp_path).exists()


def test_an_unwritable_cache_folder_means_no_archive(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    assert java_options(blocked / "kspec") == ""
