"""The data: sources and tokenizers (sources.py, registries picked by name), the token cache
and the batches training draws (batches.py)."""
