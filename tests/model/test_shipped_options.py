"""Every shipped norm, placement and init option passes its class's own checks with the settings
of its yaml: what lets the pre-flight skip those checks (and torch) for settings left as shipped
(launch/preflight.py, model_settings_as_shipped)."""

import pytest

from normexp.config.compose import group_options
from normexp.config.defaults import option_default
from normexp.config.registry import build
from normexp.model import INITS, check_settings


@pytest.mark.parametrize("group", ["norm", "placement", "init"])
def test_every_shipped_option_passes_its_own_checks(group):
    options = group_options(group)
    assert len(options) >= 2
    for name in options:
        shipped = option_default(group, name)
        if group == "norm":
            check_settings(shipped, "pre", 6)
        elif group == "placement":
            for layers in (1, 6, 48):
                check_settings("layer", shipped, layers)
        else:
            build(INITS, "init", shipped, 64, 6)
