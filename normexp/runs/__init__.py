"""The run folder, what a training run leaves behind and how it is read back:

    <run>/.hydra/config.yaml     the resolved config (Hydra)
    <run>/events.out.tfevents.*  TensorBoard scalars
    <run>/summary.json           status and final numbers (summary.py; its fields and the Status enum: schema.py)
    <run>/checkpoints/step_XXXXXXXX.pt  (checkpoint.py)
    <run>/.normexp_claim         which process owns the folder (claims.py; process.py tells whether it runs)
    <run>/normexp_run.json       normexp's own record of the settings and data (record.py)

settings.py is the one identity of a run's settings; resume.py checks a resume, outcomes.py
classifies how runs ended, and reading.py reads runs back (its Python API is handed on here:
`from normexp import runs; runs.load(path)`)."""

from .reading import Run, load, read_runs, scalars  # noqa: F401
