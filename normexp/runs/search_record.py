"""A boundary search's record, <sweep>/boundary_record.jsonl: what a search has finished, enough
to continue it on another machine without its run folders (issue 60).

The boundary sweeper appends one line per finished run (its setting, the searched value, the
seed, the steps factor of a budget check, and the summary fields an outcome is read from); its
decisions depend on those outcomes only, so a search continued from its record probes exactly
the points the uninterrupted search would have, and trains none of the recorded runs again.
The file is small (about 1 KB a run, no checkpoints or event files): a study commits it, and
another machine continues the search by copying it into a sweep folder and running the same
command with resume=true (or `normexp resume FOLDER`, which reads the command from it).

Lines, each a JSON object:
    {"normexp_search_record": 1, "key": "lr", "search": {...}, "seeds": [...],
     "overrides": {"hydra": [...], "task": [...]}, "data_files": [...]}     the header, first
    {"setting": 0, "settings": {...}}             a setting's run settings (result_settings without
                                                  the searched key and seed); later settings give
                                                  only what differs from setting 0 ("differs",
                                                  "absent")
    {"run": 0, "x": "0.00139", "seed": "0", "steps_factor": 1, "summary": {...}}

A record belongs to a command when every setting they share has the same run settings, on the
keys both know (a key a newer normexp added is not a difference), and the data files hold the
same bytes. The pre-flight refuses a record that shares no setting with the command, or that
differs in a shared one, in one line naming the key. The search's own bounds (lower, upper,
ratio, initial points) may differ: a recorded run is reused wherever the new search probes it.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from ..config.checks import ConfigError
from .schema import FINISHED
from .settings import result_settings

RECORD = "boundary_record.jsonl"
FORMAT = 1
MAX_BYTES = 64 << 20  # a record of ~50,000 runs; a larger file is not one normexp wrote

# what outcome_of (analysis/boundary.py) and the report read from a finished run's summary
SUMMARY_FIELDS = ("status", "outcome", "steps_completed", "final_val_loss", "best_val_loss", "final_train_loss",
                  "diverged_at_step", "initial_loss", "baseline_loss", "stall_margin", "learned_margin",
                  "wall_seconds", "tokens_per_second", "parameters", "loss_trajectory")


def run_settings(cfg, key: str) -> dict:
    """The settings that decide a setting's runs: result_settings without the searched key and
    the seed (what a record's setting line holds)."""
    return {k: v for k, v in result_settings(cfg).items() if k not in (key, "seed")}


def _jsonable(settings: dict) -> dict:
    """Settings as JSON gives them back (tuples become lists), so a read record compares equal."""
    return json.loads(json.dumps(settings, default=str))


def _data_identity(files: list[dict]) -> list[dict]:
    return [{"sha256": f.get("sha256"), "bytes": f.get("bytes")} for f in files]


@dataclass
class SearchRecord:
    """A record read from (or being written to) `path`."""

    path: Path
    header: dict
    settings: list[dict] = field(default_factory=list)   # setting id -> its full run settings
    runs: dict = field(default_factory=dict)              # (setting id, x, seed, steps factor) -> summary
    whole_bytes: int | None = None                        # read: where its last whole line ends

    # ------------------------------------------------------------------ reading

    @classmethod
    def read(cls, path: Path) -> "SearchRecord":
        """Parse a record; ConfigError (one line) for a file that is not one."""
        path = Path(path)

        def refuse(why: str):
            return ConfigError("hydra.sweep.dir", path.parent, f"its {RECORD} {why}")

        try:
            info = os.lstat(path)
        except OSError as e:
            raise refuse(f"cannot be read ({e.strerror})") from None
        if stat.S_ISLNK(info.st_mode) or not stat.S_ISREG(info.st_mode):
            raise refuse("is not a plain file (a link, a pipe or a device); copy the record itself there")
        if info.st_size > MAX_BYTES:
            raise refuse(f"holds {info.st_size} bytes, more than a record of {MAX_BYTES >> 20} MB; it is not one "
                         "normexp wrote")
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
        whole = data[:data.rfind(b"\n") + 1]  # a last line cut short by a kill is dropped: its run runs again
        lines = [line for line in whole.decode("utf-8", errors="replace").splitlines() if line.strip()]
        objects = []
        for number, line in enumerate(lines, 1):
            try:
                obj = json.loads(line)
            except ValueError:
                raise refuse(f"line {number} is not JSON; restore the file from where it was copied") from None
            if not isinstance(obj, dict):
                raise refuse(f"line {number} is not a JSON object")
            objects.append(obj)
        if not objects or objects[0].get("normexp_search_record") != FORMAT:
            raise refuse(f"does not start with a normexp search record header (format {FORMAT})")
        record = cls(path, objects[0])
        record.whole_bytes = len(whole)
        for number, obj in enumerate(objects[1:], 2):
            try:
                if "setting" in obj:
                    record._add_setting_line(obj)
                elif "run" in obj:
                    sid = int(obj["run"])
                    if not 0 <= sid < len(record.settings) or not isinstance(obj.get("summary"), dict):
                        raise ValueError
                    record.runs[(sid, str(obj["x"]), str(obj["seed"]), int(obj.get("steps_factor", 1)))] = obj["summary"]
                else:
                    raise ValueError
            except (KeyError, TypeError, ValueError):
                raise refuse(f"line {number} is neither a setting nor a run of this record") from None
        return record

    def _add_setting_line(self, obj: dict) -> None:
        if int(obj["setting"]) != len(self.settings):
            raise ValueError
        if "settings" in obj:
            settings = dict(obj["settings"])
        else:
            if not self.settings:
                raise ValueError
            settings = {**self.settings[0], **obj.get("differs", {})}
            for k in obj.get("absent", []):
                settings.pop(k, None)
        self.settings.append(settings)

    # ------------------------------------------------------------------ matching

    @staticmethod
    def _differences(recorded: dict, now: dict) -> list[str]:
        return sorted(k for k in set(recorded) & set(now) if recorded[k] != now[k])

    def setting_of(self, settings: dict) -> int | None:
        """The id of the recorded setting whose run settings are these (on the keys both know)."""
        now = _jsonable(settings)
        return next((sid for sid, recorded in enumerate(self.settings) if not self._differences(recorded, now)), None)

    def check_command(self, key: str, settings: list[dict], data_files: list[dict]) -> None:
        """Refuse (ConfigError, one line) a command this record does not belong to: another
        searched key, other data, or settings none of which the record holds."""
        where, fix = self.path.parent, f"continue it with its own command (normexp resume {self.path.parent}), or " \
                                       "give this search another hydra.sweep.dir"
        if self.header.get("key") != key:
            raise ConfigError("hydra.sweeper.key", key, f"the search record in {where} searched "
                              f"{self.header.get('key')}; {fix}")
        if _data_identity(self.header.get("data_files", [])) != _data_identity(data_files):
            raise ConfigError("data", "(the data files)", f"do not hold the bytes the search record in {where} was "
                              f"trained on; {fix}")
        if not settings or not self.settings or any(self.setting_of(s) is not None for s in settings):
            return
        now = _jsonable(settings[0])
        closest = min(self.settings, key=lambda r: len(self._differences(r, now)))
        k = self._differences(closest, now)[0]
        raise ConfigError(k, _shown(now[k]), f"differs from every setting of the search record in {where} "
                          f"({k}={_shown(closest[k])}): it is another search's; {fix}")

    def get(self, sid: int | None, x: str, seed: str, steps_factor: int = 1) -> dict | None:
        return None if sid is None else self.runs.get((sid, x, seed, steps_factor))

    # ------------------------------------------------------------------ writing

    @classmethod
    def start(cls, path: Path, header: dict) -> "SearchRecord":
        """A new record with its header written."""
        record = cls(Path(path), {"normexp_search_record": FORMAT, **header})
        record._append(record.header, new=True)
        return record

    def continue_writing(self) -> None:
        """Before appending to a record read from disk: drop a last line a kill cut short."""
        if self.whole_bytes is not None and self.path.stat().st_size != self.whole_bytes:
            os.truncate(self.path, self.whole_bytes)
        self.whole_bytes = None

    def add_setting(self, settings: dict) -> int:
        settings = _jsonable(settings)
        sid = len(self.settings)
        if sid == 0:
            line = {"setting": 0, "settings": settings}
        else:
            base = self.settings[0]
            line = {"setting": sid, "differs": {k: v for k, v in settings.items() if base.get(k, object()) != v},
                    "absent": sorted(set(base) - set(settings))}
        self._append(line)
        self.settings.append(settings)
        return sid

    def add_run(self, sid: int, x: str, seed: str, steps_factor: int, summary: dict) -> None:
        """Record a finished run (a failed or unfinished one is not an outcome: it runs again)."""
        if not isinstance(summary, dict) or summary.get("status") not in FINISHED:
            return
        run_key = (sid, x, seed, steps_factor)
        if run_key in self.runs:
            return
        kept = {k: summary[k] for k in SUMMARY_FIELDS if k in summary}
        self._append({"run": sid, "x": x, "seed": seed, "steps_factor": steps_factor, "summary": kept})
        self.runs[run_key] = kept

    def _append(self, obj: dict, new: bool = False) -> None:
        """One line, flushed to disk: a kill loses at most the line being written."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_TRUNC if new else os.O_APPEND)
        fd = os.open(self.path, flags, 0o644)
        try:
            os.write(fd, (json.dumps(obj, separators=(",", ":"), default=str) + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)


def _shown(value) -> str:
    return json.dumps(value) if not isinstance(value, str) else value
