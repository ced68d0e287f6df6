"""Platform code through the libraries that cover Linux, macOS and Windows (issue 41 item 7):
the token cache's lock is the filelock package's, CPU load and free memory are psutil's."""

import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import SAFETY_NET_S

PACKAGE = Path(__file__).resolve().parents[2] / "normexp"

# one process takes normexp's lock on the token cache's lock file and holds it for a while,
# with the fcntl module missing (as on Windows): the lock must still exclude the other process
HOLD = """
import sys, time
sys.modules["fcntl"] = None  # import fcntl now raises ImportError
from pathlib import Path
from normexp.data.sources import file_lock
lock, log, name = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
with file_lock(lock):
    with open(log, "a") as f:
        f.write(f"{name} in {time.monotonic()}\\n")
    time.sleep(1.0)
    with open(log, "a") as f:
        f.write(f"{name} out {time.monotonic()}\\n")
"""


def test_the_cache_lock_excludes_other_processes_without_fcntl(tmp_path):
    """Two processes that both take the lock: one waits for the other (before, where fcntl was
    missing the lock was a no-op, and both were inside at once)."""
    lock, log = tmp_path / ".lock", tmp_path / "log.txt"
    procs = [subprocess.Popen([sys.executable, "-c", HOLD, str(lock), str(log), name]) for name in ("a", "b")]
    for p in procs:
        assert p.wait(timeout=SAFETY_NET_S) == 0
    events = [line.split()[:2] for line in log.read_text().splitlines()]
    assert len(events) == 4
    # exclusive: each process's "in" is followed by its own "out" before the other one enters
    assert events[0][0] == events[1][0] and events[2][0] == events[3][0] and events[0][0] != events[2][0], events
    assert [e[1] for e in events] == ["in", "out", "in", "out"], events


def test_platform_code_reads_no_linux_only_files():
    """No hand-written /proc reading or fcntl in normexp: psutil and filelock do it per OS (what
    was there before skipped the check silently on macOS and Windows)."""
    # the bench's per-configuration peak RSS resets Linux's high-water mark (/proc/self/clear_refs),
    # which no library offers; elsewhere it falls back to getrusage's peak, and says so
    allowed = {"bench/timing.py: /proc/"}
    offenders = [f"{p.relative_to(PACKAGE)}: {needle}" for p in PACKAGE.rglob("*.py")
                 for needle in ("/proc/", "import fcntl") if needle in p.read_text(encoding="utf-8")]
    assert set(offenders) - allowed == set()


@pytest.mark.skipif(not Path("/proc/meminfo").exists(), reason="compares with Linux's /proc/meminfo")
def test_free_memory_is_what_linux_reports():
    from normexp.launch.validate import available_memory_bytes

    meminfo = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in Path("/proc/meminfo").read_text().splitlines()}
    assert available_memory_bytes() == pytest.approx(meminfo["MemAvailable"], rel=0.1)


def test_an_idle_wait_is_not_counted_as_busy_cores():
    """The measure is the machine's load over the interval: a sleeping process (this one) adds
    nothing, and it can never exceed the machine's cores."""
    import os

    from normexp.train.threads import others_busy_cores

    start = time.monotonic()
    busy = others_busy_cores(0.2)
    assert time.monotonic() - start >= 0.19  # measured over the interval, not a stale reading
    assert 0 <= busy <= (os.cpu_count() or 1) + 1e-9
