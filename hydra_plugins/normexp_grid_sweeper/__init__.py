"""normexp's default sweeper (hydra/sweeper=grid): see grid_sweeper."""
