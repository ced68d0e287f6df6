"""The lists of options in README.md, docs/model.md, docs/tensorboard.md and configs/train.yaml,
written from what the registries hold, so that a new norm, placement, preset or per-layer signal is
its own files and this command:

    python scripts/registry_lists.py           # rewrite the lists in place
    python scripts/registry_lists.py --check   # exit 1, naming each stale file (tests/test_registry_lists.py)

Each list keeps the order it is written in; a name no longer registered leaves it and a new one
is added at its end. README's options table: the rows of every config group. configs/train.yaml:
the comments on the `norm` and `placement` defaults and on `log.extra_signals` (the extra
per-layer signals). docs/model.md: the norms table (each row from the norm's class docstring,
its formula and paper) and the placements table (a new row from the placement's class
docstring, written by hand after that). docs/tensorboard.md: the per-layer signals' table (a row
a registered signal, from its class); a `<tag>/layer_XX` its prose names that no signal is
registered under fails the check."""

from __future__ import annotations

import inspect
import re
import sys
import textwrap
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
README_GROUPS = ("norm", "placement", "init", "schedule", "data", "tokenizer", "experiment")
YAML_GROUPS = ("norm", "placement")
YAML_WIDTH = 110


def registered(group: str) -> list[str]:
    """What `group=` accepts: its option files in this checkout's configs/ (tests/test_bad_input.py
    holds them to the registries)."""
    return sorted(p.stem for p in (ROOT / "configs" / group).glob("*.yaml"))


def defaults() -> dict[str, str]:
    """The default option of each group, from configs/train.yaml's defaults list."""
    entries = yaml.safe_load((ROOT / "configs" / "train.yaml").read_text())["defaults"]
    return {k: v for e in entries if isinstance(e, dict) for k, v in e.items() if isinstance(v, str)}


def synced(listed: list[str], names: list[str]) -> list[str]:
    """`listed` in its order, less what `names` lacks, then the rest of `names` in sorted order."""
    kept = [n for n in listed if n in names]
    return kept + sorted(set(names) - set(kept))


def doc_summary(cls) -> str:
    """A class docstring's first paragraph on one line, `|` escaped for a markdown table."""
    first = inspect.cleandoc(cls.__doc__ or cls.__name__).split("\n\n")[0]
    return " ".join(first.split()).replace("|", "\\|")


# ------------------------------------------------------------------ README.md

def readme_row(line: str, names: list[str], default: str | None) -> str:
    cells = line.split("|")
    order = synced(re.findall(r"`(\w+)`", cells[2]), names)
    cells[2] = " " + ", ".join(f"`{n}`" + (" (default)" if n == default else "") for n in order) + " "
    return "|".join(cells)


def readme(text: str, options: dict[str, list[str]], default: dict[str, str]) -> str:
    lines = text.split("\n")
    for i, line in enumerate(lines):
        group = next((g for g in options if line.startswith(f"| `{g}` |")), None)
        if group is not None:
            lines[i] = readme_row(line, options[group], default.get(group))
    return "\n".join(lines)


# ------------------------------------------------------------------ configs/train.yaml

def yaml_comment(lines: list[str], key: str, names: list[str]) -> None:
    """The `key: value  # [lead: ]a | b | c; the rest` comment (continued on `#` lines) on the first
    line that starts with `key`, its list synced with `names`, rewrapped in place."""
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(key))
    end, comment = start, lines[start].split("#", 1)[1]
    while ";" not in comment:
        end += 1
        comment += " " + lines[end].split("#", 1)[1]
    listed, rest = comment.split(";", 1)
    lead, listed = listed.rsplit(":", 1) if ":" in listed else ("", listed)
    order = synced([n.strip() for n in listed.split("|") if n.strip()], names)
    head = lines[start].split("#", 1)[0]
    body = (lead.strip() + ": " if lead.strip() else "") + " | ".join(order) + ";" + " ".join(rest.split(" ")).rstrip()
    wrapped = textwrap.wrap(body, YAML_WIDTH - len(head) - 2, break_on_hyphens=False)
    lines[start: end + 1] = [head + "# " + wrapped[0]] + [" " * len(head) + "# " + w for w in wrapped[1:]]


def train_yaml(text: str, options: dict[str, list[str]], extra_signals: list[str] | None = None) -> str:
    """Each `- group: default  # a | b | c; the rest` comment rewritten, and (given the extra
    per-layer signals' tags) the `extra_signals:` one."""
    lines = text.split("\n")
    for group, names in options.items():
        yaml_comment(lines, f"- {group}:", names)
    if extra_signals is not None:
        yaml_comment(lines, "extra_signals:", extra_signals)
    return "\n".join(lines)


# ------------------------------------------------------------------ docs/model.md

def section_bounds(lines: list[str], title: str) -> tuple[int, int]:
    start = lines.index(title)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return start, end


def norms_section(norms: dict, default: str) -> list[str]:
    shipped = {name: {k: v for k, v in yaml.safe_load((ROOT / "configs" / "norm" / f"{name}.yaml").read_text()).items()
                      if k != "name"} for name in norms}
    rows = [f"| `{name}`{' (default)' if name == default else ''} | {doc_summary(cls)} | "
            + (", ".join(f"`norm.{k}={v}`" for k, v in shipped[name].items()) or "none") + " |"
            for name, cls in sorted(norms.items())]
    return ["## Norms (`norm=`)", "",
            "Each norm is one module of `normexp/model/norms/`; a row here is its class docstring's first",
            "paragraph (`python scripts/registry_lists.py` writes this table).", "",
            "| norm | what it computes, and its paper | settings (shipped values) |", "|---|---|---|", *rows, ""]


def placement_rows(rows: list[str], placements: dict) -> list[str]:
    """The table's rows, each naming registered placements only; a row per new placement."""
    kept, named = [], set()
    for row in rows:
        cells = row.split("|")
        names = [n for n in re.findall(r"`(\w+)`", cells[1]) if n in placements]
        if names:
            cells[1] = " " + " / ".join(f"`{n}`" for n in names) + " "
            kept.append("|".join(cells))
            named |= set(names)
    for name in sorted(set(placements) - named):
        final = "yes" if placements[name].needs_final_norm else "no"
        kept.append(f"| `{name}` | {doc_summary(placements[name])} | {final} | (in the formula's cell) |")
    return kept


def model_md(text: str, norms: dict, placements: dict) -> str:
    lines = text.split("\n")
    start, end = section_bounds(lines, "## Norms (`norm=`)")
    lines[start:end] = norms_section(norms, defaults()["norm"])
    start, end = section_bounds(lines, "## Placements (`placement=`)")
    rows = [i for i in range(start, end) if lines[i].startswith("| `")]
    lines[rows[0]: rows[-1] + 1] = placement_rows(lines[rows[0]: rows[-1] + 1], placements)
    return "\n".join(lines)


# ------------------------------------------------------------------ docs/tensorboard.md

SIGNALS_TITLE = "### Per-layer signals"
MEASURED = {"forward": "the logging step's forward", "gradients": "after backward, before clipping",
            "update": "after the optimizer step", "moments": "AdamW's state after the step"}


def signal_row(signal) -> str:
    tag = f"`{signal.tag}/layer_XX" + ("/head_YY`" if signal.per_head else "`")
    what = signal.about.replace("|", "\\|") + (f". {doc_summary(type(signal))}" if type(signal).__doc__ else "")
    shown = [s for s, on in (("report", signal.in_report), (f"profile: {signal.profile_title}", signal.profile_title))
             if on]
    return (f"| {tag} | {what} | {MEASURED.get(signal.phase, signal.phase)} | "
            f"{'extra' if signal.extra else 'always'} | {', '.join(shown) or '—'} |")


def signals_section(layer_signals: list) -> list[str]:
    return [SIGNALS_TITLE, "",
            "Each a class of `normexp/train/layer_signals/`, in chart order (`python scripts/registry_lists.py`",
            "writes this table). *extra*: only with `log.extra_signals` (on by default); *report*: `normexp report`",
            "draws it over depth; *profile*: a panel of the depth-profile image.", "",
            "| tag | each block's value | measured | logged | also shown |", "|---|---|---|---|---|",
            *map(signal_row, layer_signals), ""]


def tensorboard_md(text: str, layer_signals: list) -> str:
    lines = text.split("\n")
    start = lines.index(SIGNALS_TITLE)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("#")), len(lines))
    lines[start:end] = signals_section(layer_signals)
    return "\n".join(lines)


def unregistered_tags(text: str, tags) -> list[str]:
    """The `<tag>/layer_XX` the text names that no signal is registered under."""
    return sorted(set(re.findall(r"`(\w+)/layer_XX", text)) - set(tags))


# ------------------------------------------------------------------ all four

def rewritten() -> dict[Path, str]:
    """{file: its text with the lists written from the registries}."""
    from normexp.model import NORMS, PLACEMENTS
    from normexp.train.layer_signals import signals

    options = {g: registered(g) for g in README_GROUPS}
    extra = [s.tag for s in signals() if s.extra]
    files = {ROOT / "README.md": lambda t: readme(t, options, defaults()),
             ROOT / "configs" / "train.yaml": lambda t: train_yaml(t, {g: options[g] for g in YAML_GROUPS}, extra),
             ROOT / "docs" / "model.md": lambda t: model_md(t, NORMS, PLACEMENTS),
             ROOT / "docs" / "tensorboard.md": lambda t: tensorboard_md(t, signals())}
    return {path: write(path.read_text()) for path, write in files.items()}


def main(argv: list[str]) -> int:
    from normexp.train.layer_signals import LAYER_SIGNALS

    gone = unregistered_tags((ROOT / "docs" / "tensorboard.md").read_text(), LAYER_SIGNALS)
    if gone:
        print(f"docs/tensorboard.md names per-layer signals no class registers: {', '.join(gone)}; "
              "rename or drop them in its prose")
        return 1
    stale = []
    for path, text in rewritten().items():
        if path.read_text() != text:
            stale.append(path.relative_to(ROOT))
            if "--check" not in argv:
                path.write_text(text)
    if stale and "--check" in argv:
        print(f"stale lists of options in {', '.join(map(str, stale))}: run `python scripts/registry_lists.py`")
        return 1
    print(f"rewrote {', '.join(map(str, stale))}" if stale else "the lists of options are up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
