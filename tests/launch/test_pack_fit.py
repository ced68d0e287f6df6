"""A shape of which not one pack member fits in the free memory is refused in one line, for
max_members=auto as for a number (auto used to make packs of one, each needing ~1.5x the memory
of the solo run it replaced)."""

import pytest

from normexp.config.checks import ConfigError
from normexp.config.compose import compose_config
from normexp.launch import packs


@pytest.mark.parametrize("max_members", ["auto", 1, 4])
def test_no_member_fits_is_refused_in_one_line(max_members):
    # 1,000 blocks of width 8192: ~8e11 parameters, terabytes a member: no machine's free memory holds one
    cfg = compose_config(["layers=1000", "d_model=8192", "heads=64", "device=cpu"])
    assert packs.members_that_fit(cfg) == 0
    with pytest.raises(ConfigError) as e:
        packs.pack_sizes(3, max_members, cfg)
    line = str(e.value)
    assert line.startswith(f"hydra.launcher.max_members={max_members}: not one member of this shape fits") and "\n" not in line
    assert "hydra/launcher=basic or joblib" in line
