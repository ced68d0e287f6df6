"""A model setting that the chosen placement or norm does not read is refused, from what the
settings classes declare (a placement's `reads`, a norm's `normalizes`: config/variants/), not a hand list: checked here against
what the models compute. For every placement and every setting other than its default (each
other norm, qk_norm=true, scale_embeddings=false), the model built with it gives the same logits
as the default model exactly when the pre-flight refuses it."""

import pytest
import torch

from normexp.config.checks import ConfigError
from normexp.config.defaults import group_default, train_default
from normexp.config.variants import check_settings_read
from normexp.model import GPT, NORMS, PLACEMENTS, ModelConfig

DEFAULT_NORM = group_default("norm")
ALTERNATIVES = ([{"norm": n} for n in sorted(NORMS) if n != DEFAULT_NORM]
                + [{"qk_norm": not train_default("qk_norm")}, {"scale_embeddings": not train_default("scale_embeddings")},
                   # the norm type through QK-norm only: read by a placement that builds no norm of its own
                   {"norm": "rms", "qk_norm": True}])
TOKENS = torch.randint(0, 256, (2, 8), generator=torch.Generator().manual_seed(3))


def logits(placement: str, **settings) -> torch.Tensor:
    shape = dict(layers=2, d_model=16, heads=2, seq_len=8, placement=placement)
    defaults = dict(norm=DEFAULT_NORM, qk_norm=train_default("qk_norm"), scale_embeddings=train_default("scale_embeddings"))
    torch.manual_seed(0)
    model = GPT(ModelConfig(**shape, **{**defaults, **settings}))
    # one SGD step first: at initialisation some placements are the identity (ReZero's α = 0),
    # whatever their sublayers compute; after a step the sublayers count
    loss = model(TOKENS, TOKENS)[1]
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p -= 0.1 * p.grad
    model.eval()
    with torch.no_grad():
        out = model(TOKENS)
    return out[0] if isinstance(out, tuple) else out


def refused(placement: str, settings: dict) -> bool:
    merged = {**dict(norm=DEFAULT_NORM, qk_norm=train_default("qk_norm"),
                     scale_embeddings=train_default("scale_embeddings")), **settings}
    if merged["qk_norm"] is True and merged["norm"] == "none":  # ModelConfig.check's own rule, before this one
        return True
    try:
        check_settings_read(merged["norm"], placement, merged["qk_norm"], merged["scale_embeddings"])
    except ConfigError:
        return True
    return False


@pytest.mark.parametrize("placement", sorted(PLACEMENTS))
def test_a_setting_is_refused_exactly_when_it_changes_nothing(placement):
    default = logits(placement)
    for settings in ALTERNATIVES:
        same = torch.allclose(logits(placement, **settings), default, rtol=1e-5, atol=1e-6)
        assert refused(placement, settings) == same, (placement, settings, "refused" if not same else "accepted")


def test_the_refusal_is_one_line_naming_the_setting_and_the_fix():
    with pytest.raises(ConfigError) as e:
        check_settings_read("rms", "rezero", False, True)
    assert str(e.value).startswith("norm=rms: placement=rezero builds no norm") and "leave norm out" in str(e.value)
    with pytest.raises(ConfigError) as e:
        check_settings_read({"name": "layer", "eps": 1e-3}, "rezero", False, True)
    assert str(e.value).startswith("norm.eps=0.001: ")
    with pytest.raises(ConfigError) as e:
        check_settings_read("layer", "ngpt", True, True)
    assert str(e.value).startswith("qk_norm=true: placement=ngpt does not read it") and "\n" not in str(e.value)
