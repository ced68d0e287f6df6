"""Which process this is, and whether the one a claim or summary.json names still runs: a
pid with its start time and the machine's boot id names one process (a pid is reused, its
start time is not)."""

from __future__ import annotations

import os
import socket

import psutil


def boot_id() -> str | None:
    """This boot of the machine, as psutil tells it (its boot time, any platform), or None
    where it cannot tell."""
    try:
        return f"{psutil.boot_time():.0f}"
    except Exception:  # noqa: BLE001 - a sandbox that hides the system's counters
        return None


def process_start(pid: int) -> float | None:
    """When process `pid` started (psutil's create_time, to the hundredth of a second), or None
    when there is no telling (no such pid, access denied). With the pid and the boot id it names
    one process: a pid is reused, its start time is not."""
    try:
        return round(psutil.Process(pid).create_time(), 2)
    except Exception:  # noqa: BLE001 - no such process, or access denied
        return None


def process_identity() -> dict:
    """This process as a claim and summary.json record it: pid and host, and (to survive pid
    reuse, e.g. after a reboot) its start time and the machine's boot id."""
    return {"pid": os.getpid(), "host": socket.gethostname(), "pid_start": process_start(os.getpid()),
            "boot_id": boot_id()}


def process_alive(record: dict) -> bool | None:
    """Is the process a claim or summary.json names (process_identity's fields) still running:
    True, False (known gone), or None (no telling: another host, or no pid recorded).

    A record with a start time and boot id is alive only if the pid exists, the machine has not
    restarted since (same boot id) and the pid's process started when the recorded one did: a
    pid that now belongs to another process (after a reboot, or pid reuse) is not the run's.
    Records written before normexp kept a start time (old claims and summaries) are judged by
    the pid alone, as they were: such a run whose pid was reused still looks alive."""
    pid = record.get("pid")
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0 or record.get("host") != socket.gethostname():
        return None
    recorded_boot, recorded_start = record.get("boot_id"), record.get("pid_start")
    if recorded_boot is not None and boot_id() is not None and recorded_boot != boot_id():
        return False  # the machine restarted: nothing of the run's process survives a reboot
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the pid exists
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        pass
    if recorded_start is not None:
        now = process_start(pid)
        if now is not None and now != recorded_start:
            return False  # the pid belongs to another process now
    return True
