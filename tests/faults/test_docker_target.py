"""The Docker target against a real engine: the reference image built locally, containers on a
network of the run's own, partitions inside the containers' namespaces, kills, pauses and
restarts, a history the checker reads, and nothing left behind.

The engine: the one at DOCKER_HOST or /var/run/docker.sock when it answers, else a dockerd
this module starts (as root, overlay2, as a default installation starts it: its firewall
rules included) and stops at the end; skipped, with the reason, where none can run."""
from __future__ import annotations

import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tarfile
import textwrap
import time
from pathlib import Path

import pytest

from broker_helpers import TOPIC, produce, read_all
from faults import clock
from faults import image as reference_image
from faults import net
from faults.disk import NodeDisk
from faults.nemesis import Nemesis
from faults.recorder import Recorder
from faults.targets import TargetError
from faults_helpers import wait_until

docker = pytest.importorskip("docker", reason="the docker SDK is not installed (pip install 'kspec[docker]')")
from faults import docker_target  # noqa: E402  (needs the docker SDK)

REPOSITORY = Path(__file__).resolve().parents[2]
DOCKERD_START_TIMEOUT_S = 60.0
DOCKERD_STOP_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 1.0
RUN_TIMEOUT_S = 420  # a loaded machine stretches the run and its check several times over
VALUE_BYTES_WHOLE_PAGES = 2000  # a full tmpfs refuses these (a partial page would take small records)
CLOCK_SEED = 5                  # its clock flip moves node 0 by +3 h
CLOCK_SLACK_S = 30              # the broker's LogAppendTime against this test's clock, after the offset


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    """A docker SDK client of a running engine; a dockerd of our own when none answers."""
    try:
        yield docker_target.engine()
        return
    except TargetError as e:
        absent = str(e)
    if shutil.which("dockerd") is None:
        pytest.skip(f"{absent}; and dockerd is not installed (Debian: docker.io, make setup installs it)")
    if os.geteuid() != 0:
        pytest.skip(f"{absent}; and starting dockerd needs root")
    log = tmp_path_factory.mktemp("dockerd") / "dockerd.log"
    with open(log, "wb") as out:
        dockerd = subprocess.Popen(["dockerd", "--storage-driver", "overlay2"], stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        client = None
        deadline = time.monotonic() + DOCKERD_START_TIMEOUT_S
        while client is None and time.monotonic() < deadline and dockerd.poll() is None:
            try:
                client = docker_target.engine()
            except TargetError:
                time.sleep(0.5)
        if client is None:
            pytest.skip(f"dockerd did not start within {DOCKERD_START_TIMEOUT_S:.0f} s: "
                        f"{log.read_text(errors='replace')[-500:]}")
        yield client
    finally:
        dockerd.send_signal(signal.SIGTERM)
        try:
            dockerd.wait(DOCKERD_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            dockerd.kill()
            dockerd.wait()


@pytest.fixture(scope="module")
def reference_image_name(engine) -> str:
    return reference_image.ensure(engine)


def leftovers(client) -> list[str]:
    """Containers and networks left by this test process or by runs that have ended: another run
    still going on the same engine (another checkout's tests, say) is not this test's business."""
    def ours(labels: dict) -> bool:
        owner = labels.get(docker_target.OWNER_LABEL, "")
        return owner.startswith(f"{os.getpid()}:") or not docker_target._owner_alive(labels)
    return [c.name for c in client.containers.list(all=True, filters={"label": docker_target.LABEL})
            if ours(c.labels)] + \
        [n.name for n in client.networks.list(filters={"label": docker_target.LABEL})
         if ours(n.attrs.get("Labels") or {})]


def host_connects(address: str, port: int) -> bool:
    import socket
    try:
        socket.create_connection((address, port), timeout=CONNECT_TIMEOUT_S).close()
        return True
    except OSError:
        return False


def test_the_reference_image_is_reused_when_its_sources_have_not_changed(engine, reference_image_name):
    started_s = time.monotonic()
    assert reference_image.ensure(engine) == reference_image_name
    assert time.monotonic() - started_s < 30, "an image that exists is not built again"
    found = engine.images.get(reference_image_name)
    assert found.labels[reference_image.LABEL] == "reference"


@pytest.mark.timeout(180)
def test_a_toml_described_image_partitions_in_the_containers_namespaces_and_a_restart_keeps_its_grudge(
        engine, reference_image_name, tmp_path):
    """Partitions are DROP rules inside a container's own namespace: the host loses node 0 and
    keeps node 1; a node killed and started again (a new namespace) gets its grudge back."""
    description = tmp_path / "reference-in-containers.toml"
    description.write_text(textwrap.dedent(f"""\
        name = "reference-in-containers"
        image = "{reference_image_name}"
        port = 9092
        command = ["broker", "--listen", "{{host}}:{{port}}", "--data-dir", "{{data_dir}}", "--node-id", "{{node_id}}",
                   "--set", "advertised.host.name={{host}}", "--set", "controller.quorum.voters={{voters}}"]
        data_dir = "/data"
        """))
    spec = docker_target.spec_from_toml(description, None)
    run_name = f"ktd{os.getpid() % 100000}"
    try:
        target = docker_target.docker_target(spec, 2, tmp_path, run_name, engine)
        target.start()
        network = target.network
        assert all(host_connects(node.address, node.port) for node in target.nodes)
        target.partition({0: {net.HOST}, 1: {0}})
        assert network.drop_rules(0) == [f"{network.host_address}/32"]
        assert network.drop_rules(1) == [f"{network.node_address(0)}/32"]
        assert not host_connects(target.nodes[0].address, 9092) and host_connects(target.nodes[1].address, 9092)
        target.kill(0)
        assert not target.nodes[0].running
        target.restart(0)
        assert network.drop_rules(0) == [f"{network.host_address}/32"], "the grudge survives a restart"
        target.pause(1)
        assert engine.containers.get(target.nodes[1].container.id).status == "paused"
        target.resume(1)
        target.heal()
        assert network.drop_rules(0) == [] and host_connects(target.nodes[0].address, 9092)
        target.stop()
        target.save_logs()
        assert "ready" in (tmp_path / "node-0.log").read_text()
        assert any((tmp_path / "node-1").iterdir()), "the data directory is the run folder's node-1/"
    finally:
        docker_target.clean_run(engine, run_name)
    assert leftovers(engine) == []


class OnNodeDisk:
    """One reference container whose data dir is a NodeDisk, mounted on the host before the
    container starts: the container's bind mount of node-0/ is that mount."""

    def __init__(self, engine, image: str, tmp_path: Path, node_disk: NodeDisk) -> None:
        self.engine, self.node_disk, self.run_name = engine, node_disk, f"kts{os.getpid() % 100000}"
        self.target = docker_target.docker_target(docker_target.reference_spec(1, image), 1, tmp_path, self.run_name,
                                                  engine)

    def __enter__(self):
        self.node_disk.mount()
        self.target.start()
        self.target.wait_until_serving()
        from confluent_kafka.admin import AdminClient, NewTopic
        admin = AdminClient({"bootstrap.servers": self.target.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
        return self.target

    def __exit__(self, *exc_info) -> None:
        docker_target.clean_run(self.engine, self.run_name)
        self.node_disk.unmount()
        assert leftovers(self.engine) == [] and not os.path.ismount(self.node_disk.data_dir)


@pytest.mark.timeout(180)
@pytest.mark.skipif(shutil.which("fusermount3") is None or not os.path.exists("/dev/fuse"),
                    reason="the FUSE layer needs /dev/fuse and fusermount3 (Debian: fuse3)")
def test_a_power_cut_of_a_container_drops_what_its_broker_did_not_fsync(engine, reference_image_name, tmp_path):
    """Kafka's defaults fsync nothing per record: a cut takes acked records with it."""
    node_disk = NodeDisk(tmp_path, 0, lazy=True, tmpfs_bytes=None, state_path=tmp_path / "disks.json")
    with OnNodeDisk(engine, reference_image_name, tmp_path, node_disk) as target:
        bootstrap = target.nodes[0].bootstrap
        acked, _ = produce(bootstrap, range(200))
        assert len(acked) == 200
        target.kill(0)
        cut = node_disk.command(op="cut")
        assert cut["dropped_bytes"] > 0, cut
        target.restart(0)
        target.wait_until_serving()
        values, errors = read_all(bootstrap)
    assert not errors and len(values) < 200, "acked records went with what was never fsynced"


@pytest.mark.timeout(180)
def test_a_container_whose_disk_fills_stops_with_one_line_and_serves_again_once_freed(engine, reference_image_name,
                                                                                       tmp_path):
    node_disk = NodeDisk(tmp_path, 0, lazy=False, tmpfs_bytes=16 << 20, state_path=tmp_path / "disks.json")
    with OnNodeDisk(engine, reference_image_name, tmp_path, node_disk) as target:
        bootstrap = target.nodes[0].bootstrap
        before, _ = produce(bootstrap, range(0, 20), VALUE_BYTES_WHOLE_PAGES)
        assert node_disk.fill()["filled_bytes"] > 0
        _, failed = produce(bootstrap, range(20, 40), VALUE_BYTES_WHOLE_PAGES)
        assert failed
        assert wait_until(lambda: target.nodes[0].exit_code is not None, 60), "the broker stops on a full disk"
        assert target.nodes[0].exit_code != 0
        node_disk.free()
        target.restart(0)
        target.wait_until_serving()
        after, failed = produce(bootstrap, range(40, 60), VALUE_BYTES_WHOLE_PAGES)
        values, errors = read_all(bootstrap)
        target.stop()
        target.save_logs()
    assert len(before) == 20 and len(after) == 20 and not failed
    assert not errors and set(before + after) <= set(values)
    assert "every log dir has failed" in (tmp_path / "node-0.log").read_text()


def test_kspec_faults_clean_removes_the_containers_and_network_of_a_crashed_run_and_spares_a_live_one(
        engine, reference_image_name, tmp_path):
    """A run whose process died (here: a child that makes its containers, pauses one and exits)
    is cleaned up; the containers of a run whose process lives (this test's) are not touched."""
    crashed, live = f"ktc{os.getpid() % 100000}", f"ktl{os.getpid() % 100000}"
    crash = textwrap.dedent(f"""\
        from pathlib import Path
        from faults import docker_target
        client = docker_target.engine()
        spec = docker_target.reference_spec(2, {reference_image_name!r})
        target = docker_target.docker_target(spec, 2, Path({str(tmp_path / "crashed")!r}), {crashed!r}, client)
        target.nodes[0].start()
        target.pause(0)
        """)
    try:
        made = subprocess.run([sys.executable, "-c", crash], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(REPOSITORY)})
        assert made.returncode == 0, made.stderr[-2000:]
        docker_target.docker_target(docker_target.reference_spec(1, reference_image_name), 1, tmp_path / "live",
                                    live, engine)
        assert len(leftovers(engine)) == 3 + 2
        # a state dir of its own: the host's namespaces and mounts belong to other runs
        done = subprocess.run([sys.executable, "-m", "kspec.cli", "faults", "clean"], capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(REPOSITORY),
                                   "KSPEC_FAULTS_STATE_DIR": str(tmp_path / "state")}, timeout=120)
        assert done.returncode == 0, done.stderr
        assert f"removed container {crashed}-n0" in done.stdout and f"removed network {crashed}-net" in done.stdout
        assert sorted(leftovers(engine)) == [f"{live}-n0", f"{live}-net"]
    finally:
        docker_target.clean_run(engine, crashed)
        docker_target.clean_run(engine, live)
    assert leftovers(engine) == []


def test_an_image_the_engine_does_not_have_is_one_line_and_exit_1(engine, tmp_path):
    done = subprocess.run([sys.executable, "-m", "kspec.cli", "faults", "run", "--target", "docker", "--image",
                           "no-such-image:1", "--time-limit", "1", "--out", str(tmp_path / "run")],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPOSITORY)}, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "no-such-image:1 is not in the engine" in done.stderr
    assert leftovers(engine) == []


@pytest.mark.timeout(2 * RUN_TIMEOUT_S)
def test_a_docker_run_with_partitions_kills_and_pauses_is_checked_and_leaves_nothing(
        engine, reference_image_name, tmp_path):
    """kspec check reads the whole history and every guarantee holds. (One ORD-3
    nonmonotonic-poll in about 1 of 8 runs was once tolerated here: it came from runs that
    shared a host and picked the same subnet at the same moment, so clients were served by
    another run's brokers; subnets are now claimed under a host-wide lock, faults/net.py.)"""
    out_dir = tmp_path / "docker-run"
    environment = {**os.environ, "PYTHONPATH": str(REPOSITORY)}
    done = subprocess.run([sys.executable, "-m", "kspec.cli", "faults", "run", "--target", "docker", "--nodes", "3",
                           "--nemesis", "partition,kill,pause", "--time-limit", "20", "--interval", "3",
                           "--quiet", "2", "--concurrency", "4", "--rate", "150", "--seed", "5",
                           "--out", str(out_dir)], capture_output=True, text=True, env=environment,
                          timeout=RUN_TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((out_dir / "results.json").read_text())
    assert results["network_mode"] == "docker" and results["final_reads_complete"]
    assert results["completions"]["ok"] > 500
    timeline = [json.loads(line) for line in (out_dir / "nemesis.jsonl").read_text().splitlines()]
    started = {flip["package"] for flip in timeline if flip["action"] == "start"}
    assert started == {"partition", "kill", "pause"}, timeline
    assert all("error" not in flip["value"] for flip in timeline), timeline
    assert all("ready" in (out_dir / f"node-{i}.log").read_text() for i in range(3))
    assert leftovers(engine) == []
    checked = subprocess.run([sys.executable, "-m", "kspec.cli", "check", str(out_dir)], capture_output=True,
                             text=True, env=environment, timeout=RUN_TIMEOUT_S)
    assert checked.returncode in (0, 1), checked.stderr[-3000:]  # 0 VALID, 1 INVALID; 2 would be unreadable
    verdict = json.loads((out_dir / "check" / "verdict.json").read_text())
    assert verdict["ops"] >= results["completions"]["ok"]
    broken = {guarantee: found for guarantee, found in verdict["guarantees"].items() if found["status"] != "held"}
    assert checked.returncode == 0 and not broken, checked.stdout[-3000:]


def log_append_skew_s(producer) -> float:
    """How far the broker's LogAppendTime of one record (its produce response) is from this host's clock."""
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME
    stamps = []
    producer.produce(TOPIC, b"tick", on_delivery=lambda error, message: stamps.append((error, message.timestamp())))
    producer.flush(10)
    assert stamps and stamps[0][0] is None, stamps
    kind, stamp_ms = stamps[0][1]
    assert kind == TIMESTAMP_LOG_APPEND_TIME
    return stamp_ms / 1000 - time.time()


@pytest.mark.timeout(120)
def test_the_clock_nemesis_moves_a_containers_broker_clock_and_heals_it(engine, reference_image_name, tmp_path):
    """The reference image carries libfaketime; the flip rewrites the node's offset file in the
    run folder and the broker in the container stamps LogAppendTime 3 h ahead, then true again."""
    if reference_image.FAKETIME_LABEL not in engine.images.get(reference_image_name).labels:
        pytest.skip("the reference image was built on a host without libfaketime (apt-get install faketime)")
    run_name = f"ktk{os.getpid() % 100000}"
    spec = docker_target.reference_spec(1, reference_image_name, {"log.message.timestamp.type": "LogAppendTime"})
    try:
        target = docker_target.docker_target(spec, 1, tmp_path, run_name, engine, clock_skew=True)
        target.start()
        target.wait_until_serving()
        from confluent_kafka import Producer
        from confluent_kafka.admin import AdminClient, NewTopic
        admin = AdminClient({"bootstrap.servers": target.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
        producer = Producer({"bootstrap.servers": target.bootstrap, "log_level": 0})
        assert abs(log_append_skew_s(producer)) < CLOCK_SLACK_S
        nemesis = Nemesis(target, Recorder(tmp_path / "history"), tmp_path / "nemesis.jsonl",
                          random.Random(CLOCK_SEED), clocks=target.clocks)
        skewed = nemesis.apply("start", "clock")
        assert skewed == {"node": 0, "offset_s": 3 * 3600}
        assert (tmp_path / clock.STATE_SUBDIR / f"{run_name}-node0").read_text() == "+10800\n"
        assert wait_until(lambda: abs(log_append_skew_s(producer) - 3 * 3600) < CLOCK_SLACK_S, 10 * clock.REREAD_S)
        assert nemesis.apply("stop", "clock") == {"reset": [0]}
        assert wait_until(lambda: abs(log_append_skew_s(producer)) < CLOCK_SLACK_S, 10 * clock.REREAD_S)
        nemesis.close()
        assert target.nodes[0].running
    finally:
        docker_target.clean_run(engine, run_name)
    assert leftovers(engine) == []


def test_the_clock_nemesis_on_an_image_without_libfaketime_is_one_line_and_exit_1(engine, tmp_path):
    plain = f"kspec-test-plain:{os.getpid()}"
    archive = io.BytesIO()
    tarfile.open(fileobj=archive, mode="w").close()
    engine.api.import_image_from_data(archive.getvalue(), repository=plain.split(":")[0], tag=plain.split(":")[1])
    description = tmp_path / "plain.toml"
    description.write_text(f'image = "{plain}"\nport = 9092\n')
    try:
        done = subprocess.run([sys.executable, "-m", "kspec.cli", "faults", "run", "--target", str(description),
                               "--nemesis", "clock", "--time-limit", "1", "--out", str(tmp_path / "run")],
                              capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPOSITORY)},
                              timeout=120)
    finally:
        engine.images.remove(plain)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert f"image {plain} does not carry" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert leftovers(engine) == []
