"""`normexp train` held at a chosen point, so that a test signals it there whatever the machine's
speed (a test that waits for "step 35" and then signals an 80-step run loses the race on a GPU).

    python held_run.py FOLDER STEP ARGS...

runs the real command line (`normexp.cli.main`) with ARGS, and:

* STEP a number: once step STEP is done (its evaluation and checkpoint, if any, written), the
  run touches FOLDER/held and waits, at that step boundary, until FOLDER/release exists;
* STEP "begin": the run touches FOLDER/held as step 0 begins, and goes on (a test that must
  signal a run in the middle of a long step);
* STEP "pack:N": a pack's (hydra/launcher=packed) first member to begin step N touches
  FOLDER/held and waits there until FOLDER/release exists (the pack's members take their logging
  steps one by one: with log_every=1 every step; a pack does not call the solo run's hooks).

Only the wait is added: the run trains exactly as without it (tests compare it bit for bit).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

HELD, RELEASE = "held", "release"


def command(folder: Path, at: int | str, args: list[str]) -> list[str]:
    """The argv that runs `normexp ARGS` held at `at` (see the module's docstring)."""
    return [sys.executable, __file__, str(folder), str(at), *args]


def release(folder: Path) -> None:
    (Path(folder) / RELEASE).touch()


# How long a run may take to reach its hold: a safety net against a hung run only. Reaching it
# takes seconds idle but minutes on a busy or slow machine (the scalar CPU path, load 6-9), and a
# run that fails first is seen at once (its process ends), so no speed is assumed.
HELD_WITHIN_S = 3600


def wait_until_held(folder: Path, proc, timeout: float = HELD_WITHIN_S) -> None:
    """Block until the run touched FOLDER/held; fail if its process ends first."""
    deadline = time.monotonic() + timeout
    while not (Path(folder) / HELD).exists():
        if proc.poll() is not None:
            raise AssertionError(f"the run ended (exit {proc.returncode}) before it was held")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"the run was not held within {timeout} s: it hung (a safety net, far beyond "
                                 "any machine's speed)")
        time.sleep(0.01)


def _main(folder: Path, at: str, args: list[str]) -> None:
    import normexp.cli as cli  # first: it sets the OpenMP environment before torch loads
    import normexp.launch.hydra_job as hydra_job

    folder.mkdir(parents=True, exist_ok=True)
    original = hydra_job.run_train

    def run_train(argv, hooks=None):
        from normexp.train import loop

        if at.startswith("pack:"):
            pack_step = loop.Trainer.train_step

            def held_train_step(self):
                if self.step == int(at.split(":")[1]) and not (folder / HELD).exists():
                    (folder / HELD).touch()
                    while not (folder / RELEASE).exists():
                        time.sleep(0.01)
                return pack_step(self)

            loop.Trainer.train_step = held_train_step
            return original(argv, hooks)

        if at == "begin":
            step = loop.Trainer.train_step

            def train_step(self):
                if self.step == 0:
                    (folder / HELD).touch()
                return step(self)

            loop.Trainer.train_step = train_step
            return original(argv, hooks)

        def hold(index: int) -> None:  # on_step gets the index of the step just done
            if index + 1 == int(at):
                (folder / HELD).touch()
                while not (folder / RELEASE).exists():
                    time.sleep(0.01)

        return original(argv, loop.Hooks(on_step=hold))

    hydra_job.run_train = run_train  # cli.train imports it when called: this one
    sys.argv = ["normexp", *args]
    cli.main()


if __name__ == "__main__":
    _main(Path(sys.argv[1]), sys.argv[2], sys.argv[3:])
