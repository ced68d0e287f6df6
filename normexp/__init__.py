"""normexp: an experiment command line for studying where and how Transformers normalize."""

__version__ = "0.1.0"
