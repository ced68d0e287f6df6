"""The lists of options in README.md, docs/model.md and configs/train.yaml are what the registries
hold (scripts/registry_lists.py writes them): stale lists fail here with the command that mends
them, and the writer itself keeps a list's order, drops what is gone and adds what is new."""

import re

import pytest
from conftest import import_script


@pytest.fixture
def lists(monkeypatch):
    return import_script(monkeypatch, "registry_lists")


def test_the_lists_in_the_docs_are_what_the_registries_hold(lists):
    stale = [str(path.relative_to(lists.ROOT)) for path, text in lists.rewritten().items() if path.read_text() != text]
    assert not stale, f"stale lists of options in {', '.join(stale)}: run `python scripts/registry_lists.py`"


def test_a_readme_row_keeps_its_order_drops_the_gone_and_adds_the_new(lists):
    row = "| `norm` | `layer` (default), `gone`, `rms`, `batch` | the normalization type |"
    assert lists.readme_row(row, ["batch", "dyt", "layer", "rms", "abc"], "layer") == (
        "| `norm` | `layer` (default), `rms`, `batch`, `abc`, `dyt` | the normalization type |")


def test_a_train_yaml_comment_is_rewrapped_with_its_tail_kept(lists):
    text = ("defaults:\n  - placement: pre   # post | pre | gone |\n"
            "                    # mix; settings: placement.alpha=2, ...\n  - init: xavier\n")
    out = lists.train_yaml(text, {"placement": ["mix", "post", "pre", "new"]})
    assert out == ("defaults:\n  - placement: pre   # post | pre | mix | new; settings: placement.alpha=2, ...\n"
                   "  - init: xavier\n")


def test_a_new_placement_gets_a_row_from_its_docstring_and_a_gone_one_leaves(lists):
    class Fresh:
        """Fresh-LN (Someone 2030): x ← x + F(x) | y.

        Details that stay in the code."""

        needs_final_norm = False

    rows = ["| `post` | x ← Norm(x + F(x)) | no | Vaswani et al. 2017 |",
            "| `sandwich` / `gone` | x ← x + Norm_out(F(Norm_in(x))) | yes | Ding et al. 2021 |",
            "| `old` | x | yes | nobody |"]
    assert lists.placement_rows(rows, {"post": object, "sandwich": object, "fresh": Fresh}) == [
        rows[0], "| `sandwich` | x ← x + Norm_out(F(Norm_in(x))) | yes | Ding et al. 2021 |",
        "| `fresh` | Fresh-LN (Someone 2030): x ← x + F(x) \\| y. | no | (in the formula's cell) |"]


def test_the_norms_table_has_a_row_per_registered_norm(lists):
    from normexp.model import NORMS

    section = lists.norms_section(NORMS, "layer")
    rows = [line for line in section if line.startswith("| `")]
    assert [r.split("`")[1] for r in rows] == sorted(NORMS)
    assert "| `rms` | RMSNorm (Zhang & Sennrich 2019): y = γ·x·rsqrt(mean(x²)+ε). | `norm.eps=1e-05` |" in rows


def test_the_extra_signals_comment_keeps_its_lead_and_tail(lists):
    text = ("log:\n  extra_signals: true    # per layer: key_norm | gone | query_norm;\n"
            "                         # z-loss apart; false = without them\n  progress: auto\n")
    out = lists.train_yaml(text, {}, ["query_norm", "key_norm", "new_norm"])
    assert out == ("log:\n  extra_signals: true    # per layer: key_norm | query_norm | new_norm;\n"
                   "                         # z-loss apart; false = without them\n  progress: auto\n")


def test_the_signals_table_has_a_row_per_registered_signal_in_chart_order(lists):
    from normexp.train.layer_signals import LAYER_SIGNALS, signals

    rows = [line for line in lists.signals_section(signals()) if line.startswith("| `")]
    by_order = sorted(LAYER_SIGNALS.values(), key=lambda s: (s.order, s.tag))
    assert [r.split("`")[1].split("/")[0] for r in rows] == [s.tag for s in by_order]
    assert [re.split(r"(?<!\\)\|", r)[4].strip() for r in rows] == ["extra" if s.extra else "always" for s in by_order]


def test_a_new_signal_gets_a_row_from_its_class(lists):
    from normexp.train.layer_signals import LayerSignal

    class Fresh(LayerSignal):
        """Why | it matters.

        Details that stay in the code."""

        tag, order, phase, extra, per_head = "fresh", 1, "gradients", True, True
        about, in_report, profile_title = "a value of each head", True, "fresh panel"

    assert lists.signal_row(Fresh()) == ("| `fresh/layer_XX/head_YY` | a value of each head. Why \\| it matters. | "
                                         "after backward, before clipping | extra | report, profile: fresh panel |")


def test_the_tensorboard_prose_names_registered_signals_only(lists):
    from normexp.train.layer_signals import LAYER_SIGNALS

    text = (lists.ROOT / "docs" / "tensorboard.md").read_text()
    assert lists.unregistered_tags(text, LAYER_SIGNALS) == []
    assert lists.unregistered_tags("`act_std/layer_XX`, `gone_std/layer_XX/head_YY`", LAYER_SIGNALS) == ["gone_std"]
