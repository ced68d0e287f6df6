"""The config: composing it from the shipped yaml files (Hydra), the checks of its values,
the one ConfigError and the registries' helpers. Importing this package imports nothing else:
each module is imported by name, so the model can use the checks without Hydra."""
