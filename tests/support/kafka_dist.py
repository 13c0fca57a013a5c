"""The test broker's jars: Apache Kafka from Maven Central, fetched once per build file.

``tests/kafka-broker/pom.xml`` pins the broker (``org.apache.kafka:kafka_2.13``) and the
plugin that copies it; ``mvn dependency:copy-dependencies`` puts the jars in
``pin-sessions/kafka-broker/<version>-<digest of the pom>/libs`` under the user's cache
directory (``$XDG_CACHE_HOME``, else ``~/.cache``), as pip and Maven keep theirs: a fresh
clone on the same machine finds them there (a fetch and a class archive cost 6 s of every
``make test``), and a changed pom is another folder. The folder is complete only once
``complete`` exists in it, so a fetch cut short is made again; a file lock lets two test
processes starting at once fetch it once. After the first fetch nothing reaches the network:
the jars are read from the folder.

``python -m tests.support.kafka_dist`` fetches (``make test`` does it before pytest), prints
the folder, and makes the class archive the nodes start with.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
BUILD_DIR = PROJECT_ROOT / "tests" / "kafka-broker"
POM = BUILD_DIR / "pom.xml"
LOG_CONFIG = BUILD_DIR / "log4j2.properties"
USER_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
CACHE = USER_CACHE / "pin-sessions" / "kafka-broker"
FETCH_TIMEOUT_SECONDS = 600
_MAVEN = "{http://maven.apache.org/POM/4.0.0}"


class KafkaUnavailable(RuntimeError):
    """Java or Maven is missing, or the fetch failed: the message says which and what to do."""


def kafka_version() -> str:
    version = ET.parse(POM).getroot().findtext(f"{_MAVEN}properties/{_MAVEN}kafka.version")
    assert version, f"{POM} names no kafka.version"
    return version


def distribution() -> Path:
    """The folder of this build file's jars (``libs/``), fetched first if need be."""
    pom = POM.read_bytes()
    folder = CACHE / f"{kafka_version()}-{hashlib.sha256(pom).hexdigest()[:12]}"
    if (folder / "complete").exists():
        return folder
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / "fetch.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not (folder / "complete").exists():
            _fetch(folder)
    return folder


def classpath() -> str:
    return str(distribution() / "libs" / "*")


def _fetch(folder: Path) -> None:
    for tool in ("java", "mvn"):
        if shutil.which(tool) is None:
            raise KafkaUnavailable(
                f"`{tool}` is not on PATH: the Kafka tests run Apache Kafka, which needs "
                "Java 17+ and Maven 3.8+ (Debian: apt-get install openjdk-17-jdk-headless maven)"
            )
    shutil.rmtree(folder, ignore_errors=True)
    libs = folder / "libs"
    command = [
        "mvn",
        "--batch-mode",
        "--quiet",
        "-Dstyle.color=never",
        "--file",
        str(POM),
        "dependency:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={libs}",
    ]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=FETCH_TIMEOUT_SECONDS, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise KafkaUnavailable(f"fetching Kafka took over {exc.timeout} s") from None
    if done.returncode != 0 or not any(libs.glob("kafka_2.13-*.jar")):
        tail = (done.stdout + done.stderr).strip()[-2000:]
        raise KafkaUnavailable(f"`{' '.join(command)}` failed ({done.returncode}): {tail}")
    (folder / "complete").write_text(kafka_version() + "\n")


if __name__ == "__main__":
    try:
        print(distribution())
        # The class archive a broker's start maps (tests/support/kafka.py), made here once
        # too, so the first test process does not make it while the other waits.
        from tests.support.kafka import class_archive

        class_archive()
    except KafkaUnavailable as exc:
        print(f"kafka_dist: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
