"""The run folder: its schema (schema.py: tags, summary fields, the Status enum), writing and
claiming it (folder.py), resume checks, checkpoints, outcomes, and reading runs back
(reading.py, whose Python API is handed on here: `from normexp import runs; runs.load(path)`)."""

from .reading import Run, load, read_runs, scalars  # noqa: F401
