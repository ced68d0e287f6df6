"""Each norm's, placement's and init's settings and their rules, without torch: what the
pre-flight, `--cfg job` and the launchers ask of a variant before any model is built.

    norms/          NORM_SETTINGS: one NormSettings class per norm (eps, momentum, ...), a module each
    placements/     PLACEMENT_SETTINGS: one PlacementSettings class per placement (DeepNorm's α and β, ...),
                    a module each, named as the placement's module in model/placements/
    inits.py        INIT_SETTINGS: the init schemes' one setting, registered under each scheme's name
    base.py         the three contracts: settings checked in the constructor, "auto" worked out
                    by `resolved`, the declarations (`reads`, `normalizes`, `unpackable`)
    rules.py        the pre-flight's and the launchers' questions: check_settings, check_settings_read,
                    resolved_settings, pack_refusal

The variant that computes (an nn.Module, or an init scheme drawing tensors) is the model's
(model/norms/, model/placements/, model/inits.py): it names its settings class as `Settings`,
builds it from the settings it is given (so a bad value is refused there too) and reads its
numbers from it. A variant is registered by the same name on both sides
(tests/config/test_registry.py checks the two registries agree): a new norm or placement is
a module added on each side, its yaml and its test file, no list edited."""

from . import inits, norms, placements  # noqa: F401  (each registers its classes)
from .base import INIT_SETTINGS, NORM_SETTINGS, PLACEMENT_SETTINGS, SETTINGS, InitSettings, NormSettings, PlacementSettings
from .rules import check_settings, check_settings_read, pack_refusal, resolved_settings, settings_of

__all__ = ["INIT_SETTINGS", "NORM_SETTINGS", "PLACEMENT_SETTINGS", "SETTINGS", "InitSettings", "NormSettings",
           "PlacementSettings", "check_settings", "check_settings_read", "pack_refusal", "resolved_settings", "settings_of"]
