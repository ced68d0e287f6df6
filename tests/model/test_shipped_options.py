"""Every shipped norm, placement and init option passes its settings class's checks with the
settings of its yaml (config/variants/ `check_settings`, what the pre-flight asks), and the
model's class built from those settings reports the numbers the settings class works out (what
`--cfg job` shows beside "auto" is what the run uses)."""

import pytest

from normexp.config.compose import group_options
from normexp.config.defaults import option_default
from normexp.config.registry import build
from normexp.config.variants import check_settings, resolved_settings
from normexp.model import INITS, NORMS, PLACEMENTS
from normexp.model.layers import Sublayer


@pytest.mark.parametrize("group", ["norm", "placement", "init"])
def test_every_shipped_option_passes_its_own_checks(group):
    options = group_options(group)
    assert len(options) >= 2
    for name in options:
        shipped = option_default(group, name)
        if group == "norm":
            check_settings(shipped, "pre", "xavier", 6)
            assert build(NORMS, "norm", shipped, 8).resolved() == resolved_settings(shipped, "pre", 6)["norm"]
        elif group == "placement":
            for layers in (1, 6, 48):
                check_settings("layer", shipped, "xavier", layers)
                built = build(PLACEMENTS, "placement", shipped, Sublayer(8), lambda width=8: build(NORMS, "norm", "layer", width),
                              index=0, depth=layers)
                assert built.resolved() == resolved_settings("layer", shipped, layers)["placement"]
        else:
            check_settings("layer", "pre", shipped, 6)
            build(INITS, "init", shipped, 64, 6)
