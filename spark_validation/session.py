"""The one place where the checker's Spark session is configured.

Defaults suit local[*] on a laptop: the UI off, few shuffle partitions (adaptive query
execution coalesces them further), driver memory bounded, scratch files in a temporary
directory, warnings only, Python workers reused from task to task (each imports numpy, pyarrow
and the checks once), a driver JVM tuned to start and run briefly (C1, serial GC, a class-data
sharing archive: class_archive.py). A cluster master (`spark://...`) gets the same SQL settings.

A Spark Connect server (`sc://HOST:PORT`, connect_session) gets only the SQL settings: the
server owns its JVM, executors, scratch folders and logging, and a Connect client has no
SparkContext. The checker uses only DataFrame operations Connect serves (range, mapInArrow,
repartition, persist, groupBy, toArrow); the server's Python workers must import kspec
(its PYTHONPATH or spark.pyspark.python) and see the history's folder by the same path.
"""
from __future__ import annotations

import atexit
import os
import shutil
import socket
import sys
import tempfile
from urllib.parse import urlsplit

from pyspark.sql import SparkSession

from spark_validation import class_archive

DEFAULT_MASTER = "local[*]"
SHUFFLE_PARTITIONS = 4
DRIVER_MEMORY = "2g"  # the JVM holds only compressed blobs and results; the data lives in Python workers
MAX_RESULT_SIZE = "1g"
# rows of an Arrow batch into a Python task: the checker's rows are blobs (a row group's mops of one
# topic-partition, a chunk's edges), so a few dozen make megabytes; with 65,536 a task's whole input
# was one batch, held by the JVM and the worker at once beside its decoded copy
ARROW_BATCH_ROWS = 64
CONNECT_PORT = 15002  # Spark Connect's default port
CONNECT_TIMEOUT_S = 10.0  # the client itself retries an unreachable server for minutes
# The driver JVM (and, on local[*], the executors in it) moves Arrow batches and shuffle blocks: little
# code, run briefly. C1 alone compiles it soon enough, and one GC thread leaves the cores to the Python
# workers; on 2 cores this took the JVM's CPU from 38 to 17 s at 1M ops, same results (benchmarks/README.md).
# C1 alone reserves only 48 MB of code cache: a long session (the checker tests' one session ran ~600 stages)
# filled it, the JIT stopped and tasks failed ("Out of space in CodeCache for adapters"); 240 MB is the
# tiered default, reserved and only committed as code is compiled.
DRIVER_JAVA_OPTIONS = ("-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m -XX:+UseSerialGC "
                       "-Dlog4j.rootLogger=ERROR")


SQL_CONF = {  # settings a session may change at run time: the same on a local, cluster or Connect session
    "spark.sql.shuffle.partitions": str(SHUFFLE_PARTITIONS),
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.adaptive.coalescePartitions.enabled": "true",
    "spark.sql.execution.arrow.maxRecordsPerBatch": str(ARROW_BATCH_ROWS),
    "spark.sql.session.timeZone": "UTC",
}


def spark_session(master: str = DEFAULT_MASTER, app_name: str = "kspec-check") -> SparkSession:
    """A Spark session tuned for history checking (reuses one already running)."""
    local_dir = tempfile.mkdtemp(prefix="kspec-spark-")
    atexit.register(shutil.rmtree, local_dir, ignore_errors=True)  # after Spark's own exit handler (last in, first out)
    # The JVM reads driver memory only at launch, so it must be set before the first session.
    os.environ.setdefault("PYSPARK_SUBMIT_ARGS", f"--driver-memory {DRIVER_MEMORY} pyspark-shell")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the checks run in workers: same numpy and pyarrow
    spark = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config(map=SQL_CONF)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.default.parallelism", str(SHUFFLE_PARTITIONS))
        .config("spark.driver.maxResultSize", MAX_RESULT_SIZE)
        .config("spark.local.dir", local_dir)
        .config("spark.driver.extraJavaOptions", f"{DRIVER_JAVA_OPTIONS} {class_archive.java_options()}")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def connect_session(remote: str) -> SparkSession:
    """A Spark Connect session on the server at remote (sc://HOST:PORT), with the checker's SQL settings.
    ConnectionError when nothing listens there."""
    url = urlsplit(remote)
    try:
        socket.create_connection((url.hostname, url.port or CONNECT_PORT), timeout=CONNECT_TIMEOUT_S).close()
    except (OSError, ValueError) as e:
        raise ConnectionError(f"cannot reach the Spark Connect server at {remote} ({e})") from None
    spark = SparkSession.builder.remote(remote).getOrCreate()
    for key, value in SQL_CONF.items():
        spark.conf.set(key, value)
    return spark


def is_connect(spark: SparkSession) -> bool:
    """Whether spark is a Spark Connect client session (it has no SparkContext)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")
