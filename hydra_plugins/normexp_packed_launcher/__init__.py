"""normexp's packed launcher (hydra/launcher=packed)."""
