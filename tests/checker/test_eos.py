"""The EOS checker (spark_validation/eos.py) on a stream processor's run folder: a clean run
holds EOS-1 and EOS-2; each way an exactly-once processor can go wrong is named, with the
input and output offset that show it."""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from faults.streams import EOS_FILE, OUTPUTS_FILE, OUTPUT_SCHEMA
from spark_validation.eos import check_eos
from spec.history import Op, Poll, Record, Send, ops_table, write_history

INPUTS_PER_KEY = 5


def run_folder(tmp_path: Path, outputs: list[dict], acked_inputs: dict[int, list[int]], caught_up: bool = True,
               stored_twice: tuple[tuple[int, int], ...] = ()) -> Path:
    """A folder as faults/streams.py leaves it: input sends in history.parquet, outputs, eos.json.
    The final read polls each key's inputs back; each (key, input) of stored_twice is read at two
    offsets (one send, stored twice by the client's resend)."""
    tmp_path.mkdir(exist_ok=True)
    ops, index = [], 0
    for key, values in acked_inputs.items():
        for value in values:
            record = Record(f"t{key // 2}", key % 2, key, value)
            ops += [Op(index, index, "invoke", "send", index, index, (Send(record),)),
                    Op(index + 1, index, "ok", "send", index + 1, index, (Send(record),))]
            index += 2
        copies = [value for value in values for _ in range(2 if (key, value) in stored_twice else 1)]
        read = Poll(tuple(Record(f"t{key // 2}", key % 2, key, value, offset) for offset, value in enumerate(copies)))
        ops += [Op(index, 1000, "invoke", "poll", index, index, (read,)),
                Op(index + 1, 1000, "ok", "poll", index + 1, index, (read,))]
        index += 2
    write_history(ops_table(ops), tmp_path / "history.parquet")
    pq.write_table(pa.Table.from_pylist(outputs, schema=OUTPUT_SCHEMA), tmp_path / OUTPUTS_FILE)
    (tmp_path / EOS_FILE).write_text(json.dumps({
        "workload": "quixstreams", "input_topics": sorted({f"t{key // 2}" for key in acked_inputs}),
        "output_topic": "eos-output", "caught_up": caught_up,
        "outputs_complete": True, "outputs": len(outputs), "instances": [{"instance": 0}, {"instance": 1}]}))
    return tmp_path


def key_outputs(key: int, restart_after: int = 3) -> list[dict]:
    """Inputs 1..5 of one key counted 1..5; instance 1 takes over after restart_after inputs."""
    return [{"partition": key % 2, "offset": key * 100 + n, "key": key, "count": n, "input": n,
             "instance": 0 if n <= restart_after else 1} for n in range(1, INPUTS_PER_KEY + 1)]


def acked(*keys: int) -> dict[int, list[int]]:
    return {key: list(range(1, INPUTS_PER_KEY + 1)) for key in keys}


def test_a_clean_run_holds_both_and_checks_the_restored_counts(spark, tmp_path):
    rows, summary = check_eos(spark, run_folder(tmp_path, key_outputs(0) + key_outputs(1), acked(0, 1)))
    assert rows == []
    assert summary["restores_checked"] == 2  # each key's first output by instance 1
    assert summary["keys"]["0"] == {"final_count": 5, "outputs": 5, "acked_inputs": 5, "sent_inputs": 5}


def test_each_way_of_breaking_exactly_once_is_named_on_its_key(spark, tmp_path):
    clean = key_outputs(0)
    # key 1: its third input's effect committed twice (a replay the transaction did not fence)
    first = key_outputs(1, restart_after=5)
    replayed = first[:3] + [dict(first[2], offset=first[2]["offset"] + 10, count=4)] + \
        [dict(o, offset=o["offset"] + 20, count=o["count"] + 1) for o in first[3:]]
    # key 2: the restarted process restored the count of one input earlier than the committed one
    stale = [dict(o, count=o["count"] - 1) if o["instance"] == 1 else o for o in key_outputs(2)]
    # key 3: its last acknowledged input has no output
    lost = key_outputs(3)[:-1]
    # key 4: an output of an input nobody sent, counted two past the last
    invented = key_outputs(4, restart_after=5) + [
        {"partition": 0, "offset": 499, "key": 4, "count": 7, "input": 42, "instance": 0}]
    rows, summary = check_eos(spark, run_folder(tmp_path, clean + replayed + stale + lost + invented,
                                                 acked(0, 1, 2, 3, 4)))
    found = sorted((r["anomaly"], r["guarantee"], r["violation"], r["values"]) for r in rows)
    assert found == [("eos-count-skip", "EOS-1", True, [42]), ("eos-duplicate", "EOS-1", True, [3]),
                     ("eos-lost", "EOS-1", True, [5]), ("eos-phantom", "EOS-1", True, [42]),
                     ("eos-state-restore", "EOS-2", True, [4])]
    assert summary["anomalies"] == {"eos-count-skip": 1, "eos-duplicate": 1, "eos-lost": 1, "eos-phantom": 1,
                                    "eos-state-restore": 1}


def test_a_missing_output_is_not_a_violation_while_the_application_had_not_caught_up(spark, tmp_path):
    rows, _ = check_eos(spark, run_folder(tmp_path, key_outputs(0)[:-1], acked(0), caught_up=False))
    assert [(r["anomaly"], r["violation"]) for r in rows] == [("eos-lost", False)]


def test_an_input_stored_twice_is_two_input_records_each_processed_once(spark, tmp_path):
    # key 0's third input was sent once and stored twice (a client's resend after a producer epoch
    # bump); the application rightly counted both stored records
    first = key_outputs(0, restart_after=5)
    twice = first[:3] + [dict(first[2], offset=first[2]["offset"] + 10, count=4)] + \
        [dict(o, offset=o["offset"] + 20, count=o["count"] + 1) for o in first[3:]]
    rows, _ = check_eos(spark, run_folder(tmp_path / "two", twice, acked(0), stored_twice=((0, 3),)))
    assert rows == []
    # a third output of that input is one more than the input topic stores
    thrice = twice[:4] + [dict(twice[2], offset=twice[2]["offset"] + 15, count=5)] + \
        [dict(o, count=o["count"] + 1) for o in twice[4:]]
    rows, _ = check_eos(spark, run_folder(tmp_path / "three", thrice, acked(0), stored_twice=((0, 3),)))
    assert [(r["anomaly"], r["violation"], r["values"], r["delta"]) for r in rows] == [("eos-duplicate", True, [3], 1)]
    assert "counted 3 times, stored 2 times" in rows[0]["detail"]
