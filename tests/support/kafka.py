"""Apache Kafka for tests and benchmarks: KRaft nodes started from the jars of ``kafka_dist``.

A :class:`KafkaCluster` is one node (the tests' broker) or three (failover, topology), each
node a JVM that is broker and controller at once, on free loopback ports, its data in a
temporary folder thrown away when it stops. Every node listens in plain text (inter-broker,
controller, and the tests' own clients); with ``secure=True`` also with SASL_SSL: TLS from a
certificate authority made for the cluster, SCRAM-SHA-512 users created through the admin
API, and the standard authorizer. Plain-text clients are ``User:ANONYMOUS``, a super user:
the plain listener is the operator's door, the secure one the roles'.

``kill``/``restart`` (SIGKILL, then the same node again on its data), ``freeze``/``thaw``
(SIGSTOP/SIGCONT: unreachable in between, yet it keeps what it stored).
"""

from __future__ import annotations

import base64
import ctypes
import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # exported without __all__
    AclBinding,
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from tests.support import kafka_dist
from tests.support.kafka_config import SCRAM, node_properties
from tests.support.processes import free_port
from tests.support.tls import Authority
from tests.support.waiting import wait_until_sync

# Bounded heap, serial GC and the C1 compiler only: a broker of the tests starts in a few
# seconds and holds little; throughput is the benches' concern (they pass their own).
TEST_JVM_OPTIONS = (
    "-Xms64m",
    "-Xmx512m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:-UsePerfData",
    "-Djava.awt.headless=true",
)
# The benches measure the broker working, not starting: both JIT tiers, the default GC.
BENCH_JVM_OPTIONS = ("-Xms512m", "-Xmx512m", "-XX:-UsePerfData", "-Djava.awt.headless=true")
START_TIMEOUT = 120.0


@dataclass(frozen=True)
class Principal:
    """A SCRAM user of the secure listener."""

    username: str
    password: str

    @property
    def name(self) -> str:
        return f"User:{self.username}"


@dataclass
class KafkaNode:
    """One JVM: broker and controller of its cluster."""

    node_id: int
    directory: Path
    port: int = field(default_factory=free_port)
    secure_port: int = field(default_factory=free_port)
    controller_port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def log(self) -> Path:
        return self.directory / "server.log"

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def launch(self, classpath: str, jvm_options: Iterable[str]) -> None:
        output = (self.directory / "stdout.log").open("ab")
        self.process = subprocess.Popen(
            [
                "java",
                *jvm_options,
                f"-Dkafka.logs.dir={self.directory}",
                f"-Dlog4j2.configurationFile={kafka_dist.LOG_CONFIG}",
                "-cp",
                classpath,
                "kafka.Kafka",
                str(self.directory / "server.properties"),
            ],
            stdout=output,
            stderr=subprocess.STDOUT,
            # A broker must not outlive the test process that started it (killed or not).
            preexec_fn=_die_with_parent if _on_main_thread() else None,
        )
        output.close()

    def signal(self, signum: signal.Signals) -> None:
        assert self.process is not None
        self.process.send_signal(signum)

    def kill(self) -> None:
        """SIGKILL, as a crashed machine would stop: nothing flushed, nothing handed over."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
            self.process.wait(timeout=30)


class KafkaCluster:
    """``size`` KRaft nodes on loopback; ``start()`` returns once every broker is registered."""

    def __init__(
        self,
        size: int = 1,
        *,
        secure: bool = False,
        jvm_options: Iterable[str] = TEST_JVM_OPTIONS,
        broker_properties: dict[str, str] | None = None,
        share_classes: bool = True,
    ) -> None:
        self.size = size
        self.share_classes = share_classes
        self.secure = secure
        self.jvm_options = tuple(jvm_options)
        self.extra_properties = broker_properties or {}
        self.workdir = Path(tempfile.mkdtemp(prefix="kafka-"))
        self.nodes = [KafkaNode(n, self.workdir / f"node-{n}") for n in range(1, size + 1)]
        self.cluster_id = _random_kafka_uuid()
        self.authority = Authority.create("pin-sessions test CA") if secure else None
        self.ca_location = self.workdir / "ca.pem"
        self.started_in: float | None = None
        self._classpath = ""

    # -- addresses ---------------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        """The plain-text listeners: the tests' own clients, and roles without security."""
        return ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)

    @property
    def secure_bootstrap(self) -> str:
        assert self.secure
        return ",".join(f"127.0.0.1:{node.secure_port}" for node in self.nodes)

    @property
    def replication_factor(self) -> int:
        return min(self.size, 3)

    def env(self) -> dict[str, str]:
        """What a process of ours is given to use this cluster in plain text. No
        PIN_KAFKA__REPLICATION_FACTOR: unset, the relay picks the cluster's (3, or fewer
        brokers' count), which the topology test checks on three."""
        return {"PIN_KAFKA_BOOTSTRAP_SERVERS": self.bootstrap}

    def secure_env(self, principal: Principal) -> dict[str, str]:
        """The ``PIN_KAFKA__*`` of a role connecting as ``principal`` over SASL_SSL."""
        return {
            "PIN_KAFKA_BOOTSTRAP_SERVERS": self.secure_bootstrap,
            "PIN_KAFKA__SECURITY_PROTOCOL": "sasl_ssl",
            "PIN_KAFKA__SASL_MECHANISM": SCRAM,
            "PIN_KAFKA__SASL_USERNAME": principal.username,
            "PIN_KAFKA__SASL_PASSWORD": principal.password,
            "PIN_KAFKA__SSL_CA_LOCATION": str(self.ca_location),
        }

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})

    # -- life --------------------------------------------------------------------------------

    def start(self, timeout: float = START_TIMEOUT) -> str:
        began = time.monotonic()
        self._classpath = kafka_dist.classpath()
        archive = class_archive() if self.share_classes else None
        shared = (f"-XX:SharedArchiveFile={archive}",) if archive is not None else ()
        self.jvm_options = (*self.jvm_options, *shared)
        if self.authority is not None:
            self.authority.write_ca(self.ca_location)
        voters = {node.node_id: node.controller_port for node in self.nodes}
        for node in self.nodes:
            node.directory.mkdir(parents=True)
            if self.authority is not None:
                self.authority.issue_server_pem(node.directory / "server.pem")
            (node.directory / "server.properties").write_text(
                node_properties(node, voters, secure=self.secure, extra=self.extra_properties)
            )
        # `kafka-storage format`, every node at once: each is a JVM start of its own.
        formats = [self._format(node, shared) for node in self.nodes]
        for node, process in zip(self.nodes, formats, strict=True):
            out, _ = process.communicate(timeout=timeout)
            if process.returncode != 0:
                raise RuntimeError(f"formatting node {node.node_id} failed: {out.decode()[-2000:]}")
        for node in self.nodes:
            node.launch(self._classpath, self.jvm_options)
        self.wait_for_brokers({node.node_id for node in self.nodes}, timeout=timeout)
        self.started_in = time.monotonic() - began
        return self.bootstrap

    def wait_for_brokers(self, expected: set[int], *, timeout: float = START_TIMEOUT) -> None:
        """Until the brokers registered (and unfenced) are exactly ``expected``."""

        def registered() -> bool:
            for node in self.nodes:
                if node.process is not None and node.process.poll() is not None:
                    raise RuntimeError(
                        f"kafka node {node.node_id} exited with {node.process.returncode}: "
                        f"{_tail(node.directory / 'stdout.log')}{_tail(node.log)}"
                    )
            try:
                metadata = self.admin().list_topics(timeout=2)
            except Exception:  # not listening yet, or no controller yet
                return False
            return set(metadata.brokers) == expected

        wait_until_sync(registered, timeout=timeout, interval=0.1)

    def node(self, node_id: int) -> KafkaNode:
        return self.nodes[node_id - 1]

    def node_ids(self) -> set[int]:
        return {node.node_id for node in self.nodes}

    def leader_of(self, topic: str, partition: int) -> int:
        metadata = self.admin().list_topics(topic, timeout=10)
        leader: int = metadata.topics[topic].partitions[partition].leader
        return leader

    def kill(self, node_id: int) -> None:
        self.node(node_id).kill()

    def restart(self, node_id: int) -> None:
        """The killed node again, on the data it left; returns at once (see wait_for_brokers)."""
        node = self.node(node_id)
        assert not node.alive()
        node.launch(self._classpath, self.jvm_options)

    def freeze(self) -> None:
        for node in self.nodes:
            node.signal(signal.SIGSTOP)

    def thaw(self) -> None:
        for node in self.nodes:
            node.signal(signal.SIGCONT)

    def processes(self) -> list[psutil.Process]:
        """The nodes' OS processes, for whoever accounts their CPU (the pipeline bench)."""
        return [
            psutil.Process(node.process.pid)
            for node in self.nodes
            if node.process is not None and node.process.poll() is None
        ]

    def stop(self) -> None:
        """SIGKILL every node and remove the data: nothing of a test broker is worth keeping."""
        for node in self.nodes:
            node.kill()
        shutil.rmtree(self.workdir, ignore_errors=True)

    # -- users -------------------------------------------------------------------------------

    def create_user(self, username: str) -> Principal:
        """A SCRAM-SHA-512 user of the secure listener, made through the admin API."""
        principal = Principal(username, uuid.uuid4().hex)
        upsert = UserScramCredentialUpsertion(
            username,
            ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
            principal.password.encode(),
        )
        admin = self.admin()  # kept until the answer: a dropped client cancels its requests
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(timeout=30)
        return principal

    def grant(self, bindings: list[AclBinding]) -> None:
        """Create ACLs through the admin API (as the plain-text super user)."""
        if not bindings:
            return
        admin = self.admin()
        for future in admin.create_acls(bindings).values():
            future.result(timeout=30)

    # -- configuration -----------------------------------------------------------------------

    def _format(self, node: KafkaNode, shared: tuple[str, ...]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [
                "java",
                *shared,
                "-Xmx256m",
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",
                "-XX:-UsePerfData",
                f"-Dlog4j2.configurationFile={kafka_dist.LOG_CONFIG}",
                f"-Dkafka.logs.dir={node.directory}",
                "-cp",
                self._classpath,
                "kafka.tools.StorageTool",
                "format",
                "--cluster-id",
                self.cluster_id,
                "--config",
                str(node.directory / "server.properties"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )


def class_archive() -> Path | None:
    """A class-data archive of a broker's start (JDK AppCDS), made once per distribution: the
    JVMs of later starts map those classes instead of loading them, about a third of a
    node's start-up CPU. None when the JVM could not make one (they start without)."""
    folder = kafka_dist.distribution()
    # One per JVM build as well: the folder outlives a checkout, and a JVM other than the one
    # that wrote an archive does not map it.
    archive = folder / f"broker-{_java_build()}.jsa"
    failed = archive.with_suffix(".failed")
    if archive.exists():
        return archive
    with (folder / "archive.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not archive.exists() and not failed.exists():
            _dump_class_archive(archive, failed)
    return archive if archive.exists() else None


def _java_build() -> str:
    """A digest of the ``java`` on PATH: where it is and its JDK's ``release`` file."""
    java = Path(shutil.which("java") or "java").resolve()
    release = java.parents[1] / "release"
    identity = f"{java}\n{release.read_text() if release.is_file() else ''}"
    return hashlib.sha256(identity.encode()).hexdigest()[:12]


def _dump_class_archive(archive: Path, failed: Path) -> None:
    """Start one node with ``-XX:ArchiveClassesAtExit``, stop it cleanly once it serves."""
    partial = archive.with_suffix(".partial")
    cluster = KafkaCluster(
        jvm_options=(*TEST_JVM_OPTIONS, f"-XX:ArchiveClassesAtExit={partial}"),
        share_classes=False,
    )
    try:
        cluster.start()
        node = cluster.nodes[0]
        assert node.process is not None
        node.process.terminate()  # the archive is written at a normal exit only
        node.process.wait(timeout=60)
    except Exception as exc:  # an optimisation: a node starts without it as well
        failed.write_text(f"{exc}\n")
    finally:
        cluster.stop()
    if partial.exists():
        partial.rename(archive)


def _random_kafka_uuid() -> str:
    """What ``kafka-storage random-uuid`` prints: 16 random bytes, URL-safe base64."""
    while True:
        text = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def _tail(path: Path, size: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-size:]
    except FileNotFoundError:
        return ""


def _on_main_thread() -> bool:
    # PR_SET_PDEATHSIG fires when the *thread* that forked exits; only the main thread lives
    # as long as the process.
    return threading.current_thread() is threading.main_thread()


def _die_with_parent() -> None:
    """In the child, between fork and exec: SIGKILL it when its parent goes."""
    pr_set_pdeathsig = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
