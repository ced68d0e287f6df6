"""Each variant's settings have one home, its yaml: every registry is walked, and a settings
class whose keyword-only parameters (the settings schema) and its configs/<group>/<name>.yaml
disagree, or that writes a default into its signature, fails here (so a new variant cannot
drift); the model's variant registered under a name takes the settings class registered under
it (config/variants/). And a spec's missing settings are filled from that yaml by `variant`."""

import pytest

from normexp.config.checks import ConfigError
from normexp.config.compose import group_options
from normexp.config.defaults import option_default
from normexp.config.registry import build, schema_drift, setting_names, variant
from normexp.config.variants import SETTINGS
from normexp.model import INITS, NORMS, PLACEMENTS

REGISTRIES = {"norm": NORMS, "placement": PLACEMENTS, "init": INITS}


@pytest.mark.parametrize("group", sorted(REGISTRIES))
def test_every_variant_and_its_yaml_declare_the_same_settings(group):
    settings = SETTINGS[group]
    assert set(settings) == set(group_options(group))  # a settings class per yaml, a yaml per class
    problems = [p for name, cls in settings.items() for p in schema_drift(cls, name, option_default(group, name))]
    assert not problems, problems


@pytest.mark.parametrize("group", sorted(REGISTRIES))
def test_each_model_variant_takes_the_settings_class_of_its_name(group):
    """The torch-free registry (what the pre-flight asks) and the model's (what trains) hold the
    same names, and each name's model class builds its settings from that name's class."""
    modules, settings = REGISTRIES[group], SETTINGS[group]
    assert set(modules) == set(settings)
    wrong = {name: (cls.Settings.__name__, settings[name].__name__) for name, cls in modules.items()
             if cls.Settings is not settings[name]}
    assert not wrong, wrong
    if group != "init":  # a norm's or placement's two halves are modules of one name (inits share one class)
        leaf = lambda cls: cls.__module__.rsplit(".", 1)[1]  # noqa: E731
        apart = {name: (leaf(cls), leaf(settings[name])) for name, cls in modules.items() if leaf(cls) != leaf(settings[name])}
        assert not apart, apart


class Drifting:
    """A variant that drifted from its yaml in each way schema_drift names."""

    def __init__(self, d, *, eps=1e-5, momentum):
        pass


def test_the_drift_check_names_each_disagreement():
    problems = schema_drift(Drifting, "drifting", {"name": "other", "momentum": 0.1, "affine": True})
    assert problems == ["drifting: the yaml's key 'affine' is no keyword-only parameter of Drifting.__init__",
                        "drifting: Drifting's setting 'eps' is missing from the yaml",
                        "drifting: Drifting's setting 'eps' has a default in its signature; the yaml holds it",
                        "drifting: the yaml's name is 'other'"]
    assert schema_drift(Drifting, "drifting", {"name": "drifting", "eps": 1e-5, "momentum": 0.1}) == [
        "drifting: Drifting's setting 'eps' has a default in its signature; the yaml holds it"]


def test_variant_fills_what_the_spec_leaves_out_from_the_yaml():
    cls, settings = variant(NORMS, "norm", "batch")
    assert cls is NORMS["batch"] and settings == {"eps": 1e-5, "momentum": 0.1}  # configs/norm/batch.yaml
    assert variant(NORMS, "norm", {"name": "batch", "momentum": 0.5})[1] == {"eps": 1e-5, "momentum": 0.5}
    assert variant(PLACEMENTS, "placement", {"name": "deepnorm", "alpha": 2.0})[1] == {"alpha": 2.0, "beta": "auto"}
    assert variant(INITS, "init", "torchscale")[1] == {"scale_positions": False}
    assert variant(PLACEMENTS, "placement", "post")[1] == {}
    assert setting_names(PLACEMENTS["mix"]) == ["ratio"]  # index and depth are the model's, not settings


def test_build_passes_the_filled_settings_to_the_class():
    norm = build(NORMS, "norm", {"name": "rms", "eps": 1e-3}, 8)
    assert type(norm) is NORMS["rms"] and norm.eps == 1e-3 and norm.weight.shape == (8,)
    assert build(NORMS, "norm", "dyt", 8).init_alpha == 0.5  # configs/norm/dyt.yaml
    with pytest.raises(TypeError):  # no default left in the class itself
        NORMS["layer"](8)


def test_a_setting_the_variant_does_not_take_names_the_key():
    with pytest.raises(ConfigError, match=r"^norm\.alpha=2: norm layer takes eps"):
        variant(NORMS, "norm", {"name": "layer", "alpha": 2})
    with pytest.raises(ConfigError, match=r"^placement=postln: choose from"):
        variant(PLACEMENTS, "placement", "postln")
