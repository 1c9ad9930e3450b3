"""The op lines of the common shapes, read a range at a time with numpy (jepsen_lines.py), give the
rows the general reader (edn.py + HistoryRows) gives, line for line, also when they are mixed with
lines only the general reader takes."""
from __future__ import annotations

from pathlib import Path

import pytest

from spark_validation.frames import history_files
from spark_validation.jepsen import read_edn_rows, read_range
from spark_validation.jepsen_import import import_edn
from spark_validation.jepsen_lines import LINE

from .test_jepsen_import import _imported_table

FIXTURES = Path(__file__).parent / "fixtures"

# every shape LINE takes, and beside them lines it leaves to the general reader
MIXED = """\
; a comment, then ops of every shape
{:index 0, :time 10, :type :invoke, :process 0, :f :assign, :value [0 1 2 3]}
{:index 1, :time 11, :type :ok, :process 0, :f :assign, :value [0 1 2 3]}
{:index 2, :time 12, :type :invoke, :process 1, :f :subscribe, :value []}
{:index 3, :time 13, :type :invoke, :process 0, :f :send, :value [[:send 0 5]]}
{:index 4, :time 14, :type :invoke, :process 2, :f :txn, :value [[:send 1 6] [:poll] [:send 3 7]]}
{:index 5, :time 15, :type :ok, :process 0, :f :send, :value [[:send 0 [0 5]]]}
{:index 6, :time 16, :type :info, :process :nemesis, :f :start-partition, :value :majority}
{:index 7, :time 17, :type :ok, :process 2, :f :txn, :value [[:send 1 [0 6]] [:poll {0 [[0 5]], 2 []}] [:send 3 [4 7]]]}
{:index 8, :time 18, :type :ok, :process 1, :f :subscribe, :value []}
{:index 9, :time 19, :type :invoke, :process 1, :f :poll, :value [[:poll]], :poll-ms 100}
{:index 10, :time 20, :type :ok, :process 1, :f :poll, :value [[:poll {}]], :poll-ms 100, :x-y -3}

{:index 11, :time 21, :type :invoke, :process 3, :f :poll, :value [[:poll]]}
{:index 12, :time 22, :type :fail, :process 3, :f :poll, :value [[:poll]], :error [:timeout "t"]}
{:index 13, :time 23, :process 4, :type :invoke, :f :send, :value [[:send 2 8]]}
{:index 14, :time 24, :type :info, :process 4, :f :send, :value [[:send 2 8]], :error :unknown}
{:index 15, :time 25, :type :invoke, :process 5, :f :crash, :value nil}
{:index 16, :time 26, :type :info, :process 5, :f :crash, :value nil}
{:index 17,
 :time 27, :type :invoke, :process 6, :f :poll, :value [[:poll]]}
{:index 18, :time 28, :type :ok, :process 6, :f :poll, :value [[:poll {1 [[0 6] [1 9]], 3 [[4 7]]}] [:poll nil]]}
{:index 19, :time 29, :type :ok, :process 1, :f :poll, :value [[:poll {2 [[0 8]]}]], :rebalance-log [{:keys [2]}]}
{:index 20, :time 30, :type :invoke, :process 7, :f :debug-topic-partitions, :value nil}
{:index 21, :time 31, :type :ok, :process 7, :f :debug-topic-partitions, :value {:t0 [0]}}
{:index 22, :time 32, :type :invoke, :process 0, :f :poll, :value [[:poll]], :index 99}
"""


def test_most_lines_of_the_mixed_history_take_the_vectorised_path():
    matched = [LINE.fullmatch(line.encode()) is not None for line in MIXED.splitlines()]
    assert 10 < sum(matched) < len(matched) - 8


@pytest.mark.parametrize("text", [MIXED, "[" + MIXED.split("\n", 1)[1].rstrip("\n") + "]\n",
                                  (FIXTURES / "jepsen-anomalies.edn").read_text(),
                                  (FIXTURES / "jepsen-clean.edn").read_text()],
                         ids=["mixed", "in-a-vector", "anomalies", "clean"])
def test_vectorised_lines_give_the_general_readers_rows(tmp_path, text):
    edn = tmp_path / "history.edn"
    edn.write_text(text)
    assert read_edn_rows(edn).equals(read_edn_rows(edn, vectorised=False))


def test_a_bad_line_after_vectorised_lines_is_named_the_same_way(tmp_path):
    edn = tmp_path / "history.edn"
    edn.write_text(MIXED + "{:index 23, :time 33, :type :ok, :process 0, :f :fly, :value nil}\n")
    with pytest.raises(ValueError) as vectorised:
        read_edn_rows(edn)
    with pytest.raises(ValueError) as general:
        read_edn_rows(edn, vectorised=False)
    assert str(vectorised.value) == str(general.value) and "line 27" in str(vectorised.value)


@pytest.mark.soak  # 30 s of Spark; the in-process comparisons above run in make test
def test_ranges_of_mixed_lines_imported_in_spark_give_the_in_process_table(spark, tmp_path):
    edn = tmp_path / "history.edn"
    edn.write_text(MIXED * 40)  # indices repeat: the import does not need them in order
    history_dir = import_edn(spark, edn, tmp_path / "out" / "history.parquet", range_bytes=900)
    assert _imported_table(history_dir).equals(read_edn_rows(edn, vectorised=False))


def test_a_range_of_one_map_a_line_finds_the_invocations_before_it_by_reading_back(spark, tmp_path):
    edn = tmp_path / "history.edn"
    edn.write_text("".join(line + "\n" for line in MIXED.splitlines() if LINE.fullmatch(line.encode())) * 20)
    summaries = [read_range(edn, start, start + 700)[1] for start in range(0, edn.stat().st_size, 700)]
    assert all(not s.unresolved for s in summaries)  # nothing left for the import's second job
    history_dir = import_edn(spark, edn, tmp_path / "out" / "history.parquet", range_bytes=700)
    assert len(history_files(history_dir)) > 5
    assert _imported_table(history_dir).equals(read_edn_rows(edn, vectorised=False))
