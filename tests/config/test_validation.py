"""Every numeric setting, wherever it is declared (train.yaml, a group option, a norm's or
placement's constructor), refuses nan and inf with a ConfigError naming it: the list of
settings is read from the declarations, so a setting added later is covered too."""

import pytest
from omegaconf import OmegaConf

from normexp.launch.preflight import check_job
from normexp.config.compose import compose_config, group_options, top_level_keys
from normexp.model import NORMS, PLACEMENTS
from normexp.config.checks import ConfigError
from normexp.config.registry import setting_names

TEXT_FILES = {name: [f"data.files=[{__file__}]"] for name in ("text", "jsonl")}  # local sources need a real, non-empty file


def top_level_numbers() -> list[str]:
    """train.yaml's keys that hold a number (or "auto", or null for grad_clip) by default."""
    cfg = compose_config([])
    keys = [k for k in top_level_keys()
            if (isinstance(v := OmegaConf.select(cfg, k), (int, float)) and not isinstance(v, bool)) or v == "auto"]
    return [*keys, "grad_clip", "attn_softcap", "logit_softcap"]  # null (off) by default


def group_numbers() -> list[list[str]]:
    """[group=option, key=] for every numeric setting a group option file declares."""
    out = []
    for group in ("schedule", "data", "tokenizer"):
        for option in group_options(group):
            declared = OmegaConf.to_container(compose_config([f"{group}={option}"])[group], resolve=False)
            for key, value in declared.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    out.append([f"{group}={option}", *TEXT_FILES.get(option, []), f"{group}.{key}"])
    return out


def variant_settings() -> list[list[str]]:
    """[group=name, key] for every setting a norm or placement class takes (its keyword-only parameters)."""
    out = []
    for group, registry in (("norm", NORMS), ("placement", PLACEMENTS)):
        for name, cls in registry.items():
            out += [[f"{group}={name}", f"{group}.{key}"] for key in setting_names(cls)]
    return out


CASES = [*([k] for k in top_level_numbers()), *group_numbers(), *variant_settings()]


def test_the_declarations_were_found():
    keys = {case[-1] for case in CASES}
    assert {"lr", "grad_clip", "z_loss", "optim.weight_decay", "divergence.max_loss", "schedule.min_lr_ratio",
            "norm.eps", "placement.alpha", "placement.init_scale", "attn_softcap", "logit_softcap",
            "placement.gate_bias"} <= keys


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: " ".join(x for x in c if not x.startswith("data.files")))
def test_non_finite_numbers_are_refused_naming_the_key(case, value):
    *choose, key = case
    prefix = "" if OmegaConf.select(compose_config(choose), key, default="<absent>") != "<absent>" else "+"
    check_job(compose_config(choose), set())  # the default passes: only the value makes it fail
    with pytest.raises(ConfigError) as e:
        check_job(compose_config([*choose, f"{prefix}{key}={value}"]), {key})
    assert str(e.value).startswith(f"{key}={value}:"), str(e.value)


@pytest.mark.parametrize("case", variant_settings(), ids=" ".join)
def test_variant_settings_beyond_float32_are_refused(case):
    """1e308 is finite in Python but inf in the model's float32 parameters."""
    choose, key = case
    with pytest.raises(ConfigError, match=rf"^{key}=1e\+308:"):
        check_job(compose_config([choose, f"++{key}=1e308"]), {key})


def test_the_memory_estimate_follows_its_formula_and_refuses_with_the_number():
    """validate.training_memory_bytes against its documented formula, computed by hand for one
    shape; check_memory refuses with the estimate in GiB when it exceeds what is free."""
    from normexp.launch.validate import check_memory, training_memory_bytes

    cfg = compose_config(["layers=3", "d_model=64", "heads=4", "seq_len=128", "batch_size=16", "device=cpu"])
    V, d, T, L, r, B = 256, 64, 128, 3, 4, 16
    params = 2 * V * d + T * d + L * (4 + 2 * r) * d * d          # 32,768 + 8,192 + 147,456 = 188,416
    by_hand = 16 * params + 4 * L * B * T * (16 + 2 * r) * d + 12 * B * T * V
    assert training_memory_bytes(cfg) == by_hand == 3_014_656 + 37_748_736 + 6_291_456
    capped = compose_config(["layers=3", "d_model=64", "heads=4", "seq_len=128", "batch_size=16", "attn_softcap=50"])
    assert training_memory_bytes(capped) - by_hand == 4 * L * B * 4 * T * T  # the written-out scores
    check_memory(cfg, available=by_hand + 1)
    with pytest.raises(ConfigError, match=r"batch_size=16: one training step needs about 0\.0 GiB .* and 0\.0 GiB is free"):
        check_memory(cfg, available=by_hand - 1)
