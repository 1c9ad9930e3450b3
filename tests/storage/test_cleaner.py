"""Log compaction (RET-1): the latest value of every key survives at its original offset,
offsets never change or get reused, tombstones go after delete.retention.ms, a crash in the
middle of a segment swap reopens to a consistent log."""
from __future__ import annotations

import os
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reference.protocol.errors import ErrorCode, KafkaError
from reference.protocol.records import Record, build_batch, iter_batches
from reference.storage import Log, LogConfig
from reference.storage.cleaner import CHECKPOINT_FILE, CleanerCheckpoint, clean
from reference.storage.log_loader import CLEANED_SUFFIX, SWAP_SUFFIX

DELETE_RETENTION_MS = 10_000
COMPACTED = LogConfig(cleanup_policy="compact", segment_bytes=400, delete_retention_ms=DELETE_RETENTION_MS)


def append(log: Log, key: bytes | None, value: bytes | None, now_ms: int = 1_000, **producer) -> int:
    return log.append_as_leader(build_batch([Record(0, now_ms, key, value)], **producer), 0, now_ms).first_offset


def read_all(log: Log) -> list[Record]:
    """Every record from the log start by repeated reads, as a consumer would: a read stops
    only at the log end or where nothing is left (compaction removed the records up to it)."""
    offset, records = log.log_start_offset, []
    while offset < log.log_end_offset:
        batches = list(iter_batches(log.read(offset, 64 * 1024).records))
        if not batches:
            break
        for batch in batches:
            assert batch.crc_is_valid()
            records.extend(record for record in batch.records() if record.offset >= offset)
        offset = batches[-1].next_offset
    return records


def as_tuples(records) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for r in records]


def test_latest_value_per_key_stays_at_its_original_offset(open_log):
    log = open_log(COMPACTED)
    latest = {}
    for i in range(300):
        key = b"key-%d" % (i % 10)
        latest[key] = (append(log, key, b"value-%d" % i), key, b"value-%d" % i)
    before_end = log.log_end_offset
    stats = clean(log, 2_000, force=True)
    assert stats is not None and stats.records_kept < stats.records_read
    records = as_tuples(read_all(log))
    offsets = [offset for offset, _, _ in records]
    assert offsets == sorted(set(offsets)), "offsets stay strictly increasing"
    cleaned = [r for r in records if r[0] < stats.first_uncleanable_offset]
    assert {key for _, key, _ in cleaned} <= set(latest)
    assert len(cleaned) == len({key for _, key, _ in cleaned}), "one record per key below the dirty end"
    for offset, key, value in records:
        assert value == b"value-%d" % offset, "every record is the one first written at its offset"
    assert set(latest.values()) <= set(records)
    assert log.log_end_offset == before_end
    assert append(log, b"key-0", b"next") == before_end, "offsets are never reused"


def test_a_fetch_at_a_removed_offset_returns_the_next_batch(open_log):
    log = open_log(COMPACTED)
    for i in range(40):
        append(log, b"a" if i < 39 else b"b", b"%d" % i, now_ms=1_000 + i)
    log.roll(2_000)
    clean(log, 2_000, force=True)
    info = log.read(5, 1 << 20)
    first = next(iter_batches(info.records))
    assert first.base_offset == 38 and as_tuples(first.records()) == [(38, b"a", b"38")]
    assert log.offset_for_timestamp(1_005) == (38, 1_038), "ListOffsets by time skips the gap too"


def test_tombstones_are_kept_until_delete_retention_ms_after_the_first_pass(open_log):
    log = open_log(COMPACTED)
    append(log, b"gone", b"value")
    tombstone_offset = append(log, b"gone", None)
    append(log, b"kept", b"value")
    log.roll(1_000)
    clean(log, 5_000, force=True)
    batches = [batch for segment in log.segments for _, batch in segment.batches_from(0)]
    (holder,) = [b for b in batches if any(r.value is None for r in b.records())]
    assert holder.delete_horizon_ms == 5_000 + DELETE_RETENTION_MS
    assert CleanerCheckpoint.read(log.dir_path).delete_horizon_ms == 5_000 + DELETE_RETENTION_MS
    assert (tombstone_offset, b"gone", None) in as_tuples(read_all(log))
    assert as_tuples(holder.records())[0][0] == tombstone_offset and holder.records()[0].timestamp == 1_000
    assert clean(log, 5_000 + DELETE_RETENTION_MS - 1) is None, "not due yet, nothing dirty"
    assert clean(log, 5_000 + DELETE_RETENTION_MS) is not None, "the horizon alone makes the log cleanable"
    assert as_tuples(read_all(log)) == [(2, b"kept", b"value")]


def test_the_last_batch_of_an_idempotent_producer_survives_as_an_empty_batch(open_log):
    log = open_log(COMPACTED)
    producer = {"producer_id": 7, "producer_epoch": 0}
    for sequence in range(3):
        log.append_as_leader(build_batch([Record(0, 1_000, b"k", b"idempotent")], base_sequence=sequence,
                                         **producer), 0, 1_000)
    append(log, b"k", b"newer")
    log.roll(1_000)
    clean(log, 2_000, force=True)
    batches = [batch for segment in log.segments for _, batch in segment.batches_from(0)]
    empty = [b for b in batches if b.records_count == 0]
    assert [(b.producer_id, b.base_sequence, b.last_offset) for b in empty] == [(7, 2, 2)]
    log.close()
    reopened = open_log(COMPACTED)
    assert reopened.producer_state.producers[7].last_seq == 2
    info = reopened.append_as_leader(build_batch([Record(0, 3_000, b"k", b"again")], base_sequence=3, **producer),
                                     0, 3_000)
    assert info.first_offset == 4


def test_min_compaction_lag_and_the_active_segment_are_not_cleaned(open_log):
    log = open_log(LogConfig(cleanup_policy="compact", min_compaction_lag_ms=60_000))
    for i in range(5):
        append(log, b"k", b"%d" % i, now_ms=1_000)
    log.roll(1_000)
    append(log, b"k", b"active", now_ms=1_000)
    assert clean(log, 30_000, force=True) is None, "every closed record is younger than the lag"
    assert len(read_all(log)) == 6
    stats = clean(log, 61_000, force=True)
    assert stats.first_uncleanable_offset == 5
    assert as_tuples(read_all(log)) == [(4, b"k", b"4"), (5, b"k", b"active")]


def test_the_dirty_ratio_decides_when_a_pass_runs(open_log):
    log = open_log(LogConfig(cleanup_policy="compact", min_cleanable_dirty_ratio=0.9))
    for i in range(10):
        append(log, b"k%d" % i, b"v")
    log.roll(1_000)
    assert clean(log, 2_000) is not None, "a never cleaned log is all dirty"
    append(log, b"k0", b"w")
    log.roll(1_000)
    assert clean(log, 2_000) is None, "one dirty record against ten clean ones is below 0.9"
    assert clean(log, 2_000, force=True) is not None


def test_a_dirty_record_older_than_max_compaction_lag_is_cleaned_whatever_the_ratio(open_log):
    """KIP-354: max.compaction.lag.ms bounds how long a superseded value stays readable; the
    active segment rolls by then, and a pass runs below min.cleanable.dirty.ratio."""
    log = open_log(LogConfig(cleanup_policy="compact", min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=5_000))
    for i in range(10):
        append(log, b"k%d" % i, b"v", now_ms=1_000)
    log.roll(1_000)
    assert clean(log, 2_000) is not None
    append(log, b"k0", b"w", now_ms=3_000)
    append(log, b"k1", b"w", now_ms=9_000)  # the active segment outlived max.compaction.lag.ms: rolled
    assert log.active_segment.base_offset == 11
    assert clean(log, 5_000) is None, "one dirty record of eleven, younger than the lag"
    stats = clean(log, 9_000)
    assert stats is not None and stats.first_uncleanable_offset == 11
    assert [r.offset for r in read_all(log) if r.key == b"k0"] == [10]


def test_min_compaction_lag_above_max_compaction_lag_is_an_invalid_config():
    with pytest.raises(KafkaError) as refused:
        LogConfig.from_properties({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})
    assert refused.value.code == ErrorCode.INVALID_CONFIG and "conflict" in refused.value.message


def test_a_compacted_topic_refuses_records_without_a_key(open_log):
    log = open_log(COMPACTED)
    with pytest.raises(KafkaError) as refused:
        append(log, None, b"value")
    assert refused.value.code == ErrorCode.INVALID_RECORD and log.log_end_offset == 0


# ------------------------------------------------------------------ crash in the middle of a swap


def rename_suffix(directory: str, base_offset: int, old: str, new: str, extensions=("log", "index", "timeindex")):
    for extension in extensions:
        path = os.path.join(directory, f"{base_offset:020d}.{extension}{old}")
        os.replace(path, path[: len(path) - len(old)] + new)


@pytest.mark.parametrize("crash_point", ["cleaned-written", "renaming-to-swap", "swap-committed",
                                         "old-segments-half-deleted", "renaming-to-final"])
def test_a_crash_mid_swap_reopens_to_the_log_before_or_after(tmp_path, crash_point):
    """The `.log.swap` rename is the commit point: before it the old segments stay, after it
    the cleaned segment replaces them; either way every offset reads as it did."""
    config = LogConfig(cleanup_policy="compact", segment_bytes=1 << 20)
    original_dir, cleaned_dir, crashed_dir = (str(tmp_path / name / "t-0") for name in ("original", "cleaned", "crash"))
    log = Log(original_dir, config, now_ms=0)
    for i in range(60):
        append(log, b"k%d" % (i % 4), b"%d" % i)
        if i % 15 == 14:
            log.roll(1_000)
    log.close()
    shutil.copytree(original_dir, cleaned_dir)
    cleaned_log = Log(cleaned_dir, config, now_ms=0)
    clean(cleaned_log, 2_000, force=True)
    cleaned_log.close()
    before, after = as_tuples(read_all(Log(original_dir, config, now_ms=0))), as_tuples(read_all(Log(cleaned_dir, config, now_ms=0)))
    assert len(after) < len(before)

    # Rebuild the files as they stood at the crash: the original log plus the cleaned segment (base 0).
    shutil.copytree(original_dir, crashed_dir)
    for extension in ("log", "index", "timeindex"):
        shutil.copy(os.path.join(cleaned_dir, f"{0:020d}.{extension}"),
                    os.path.join(crashed_dir, f"{0:020d}.{extension}{CLEANED_SUFFIX}"))
    old_bases = [int(name[:20]) for name in sorted(os.listdir(original_dir)) if name.endswith(".log")][:-1]
    if crash_point == "renaming-to-swap":
        rename_suffix(crashed_dir, 0, CLEANED_SUFFIX, SWAP_SUFFIX, extensions=("index", "timeindex"))
    if crash_point in ("swap-committed", "old-segments-half-deleted", "renaming-to-final"):
        rename_suffix(crashed_dir, 0, CLEANED_SUFFIX, SWAP_SUFFIX)
    if crash_point in ("old-segments-half-deleted", "renaming-to-final"):
        doomed = old_bases if crash_point == "renaming-to-final" else old_bases[: len(old_bases) // 2]
        for base in doomed:
            for extension in ("log", "index", "timeindex"):
                os.remove(os.path.join(crashed_dir, f"{base:020d}.{extension}"))
    if crash_point == "renaming-to-final":
        rename_suffix(crashed_dir, 0, SWAP_SUFFIX, "", extensions=("index",))
    assert not os.path.exists(os.path.join(crashed_dir, ".kafka_cleanshutdown")), "opened as after a crash"

    reopened = Log(crashed_dir, config, now_ms=3_000)
    expected = before if crash_point in ("cleaned-written", "renaming-to-swap") else after
    assert as_tuples(read_all(reopened)) == expected
    assert not [name for name in os.listdir(crashed_dir) if name.endswith((CLEANED_SUFFIX, SWAP_SUFFIX))]
    assert append(reopened, b"k0", b"after the crash") == 60


# ------------------------------------------------------------------ property against a dict model


operation = st.one_of(
    st.tuples(st.just("append"), st.lists(st.tuples(st.integers(0, 5), st.booleans()), min_size=1, max_size=4)),
    st.tuples(st.just("roll")),
    st.tuples(st.just("clean"), st.integers(0, 2 * DELETE_RETENTION_MS)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(operation, min_size=1, max_size=40))
def test_compaction_matches_a_model_of_latest_values(tmp_path_factory, operations):
    """After any sequence of appends, rolls and passes: what is read is a subsequence of what
    was written, at the same offsets; below the cleaned boundary each key keeps only its latest
    record; a tombstone lives until delete.retention.ms after the pass that first kept it."""
    log = Log(str(tmp_path_factory.mktemp("model") / "t-0"),
              LogConfig(cleanup_policy="compact", segment_bytes=300, delete_retention_ms=DELETE_RETENTION_MS), now_ms=0)
    written: dict[int, tuple[bytes, bytes | None]] = {}  # offset -> (key, value), as appended
    present: set[int] = set()
    horizon_ms: dict[int, int] = {}  # tombstone offset -> its delete horizon
    now_ms = 1_000
    for op in operations:
        if op[0] == "append":
            records = [Record(0, now_ms, b"k%d" % key, None if tombstone else b"v%d" % len(written))
                       for key, tombstone in op[1]]
            first = log.append_as_leader(build_batch(records), 0, now_ms).first_offset
            for i, record in enumerate(records):
                written[first + i] = (record.key, record.value)
                present.add(first + i)
        elif op[0] == "roll":
            log.roll(now_ms)
        else:
            now_ms += op[1]
            stats = clean(log, now_ms, force=True)
            if stats is None:
                continue
            boundary = stats.first_uncleanable_offset
            latest = {}
            for offset in sorted(o for o in written if o < boundary):
                latest[written[offset][0]] = offset
            for offset in sorted(o for o in present if o < boundary):
                key, value = written[offset]
                if latest[key] != offset:
                    present.discard(offset)
                elif value is None and offset in horizon_ms and now_ms >= horizon_ms[offset]:
                    present.discard(offset)
                elif value is None:
                    horizon_ms.setdefault(offset, now_ms + DELETE_RETENTION_MS)
        read = as_tuples(read_all(log))
        assert read == [(offset, *written[offset]) for offset in sorted(present)]
    assert log.log_end_offset == len(written)
    for segment in log.segments:
        segment.close()


def test_the_checkpoint_moves_to_the_first_uncleanable_offset(open_log):
    log = open_log(COMPACTED)
    for i in range(30):
        append(log, b"k", b"%d" % i)
    stats = clean(log, 2_000, force=True)
    assert CleanerCheckpoint.read(log.dir_path).first_dirty_offset == stats.first_uncleanable_offset
    assert os.path.exists(os.path.join(log.dir_path, CHECKPOINT_FILE))
    assert clean(log, 2_000, force=True) is None, "nothing dirty until new segments close"
