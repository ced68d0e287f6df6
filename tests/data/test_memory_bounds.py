"""Issue 50, item 4: memory bounded by the input. Text is tokenized a piece at a time from the
bytes read once (the same tokens as the whole-text path), a file that cannot be read or cached
is refused before it is read, a device is named as one, and a corpus of one repeated byte is
refused. The pieces are made tiny here (CHUNK) so that every boundary case is crossed."""

import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from conftest import SAFETY_NET_S, cli_environment
from omegaconf import OmegaConf

from normexp.config import resources
from normexp.config.checks import ConfigError
from normexp.data import batches, sources
from normexp.data.batches import DataError, load_corpus

BYTE = {"name": "byte", "vocab_size": 256}
TRICKY = ("héllo wörld 🙂\r\nline two\rthree\u2028four\x85five\x0csix\n\n" + "x" * 40 + "\r"
          + "\nend ünï\n" + "no newline at the end ✓")


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("NORMEXP_CACHE", str(root))
    return root


@pytest.fixture
def tiny_pieces(monkeypatch):
    """Pieces of 7 bytes: characters, \\r\\n pairs and files are all cut somewhere."""
    for module in (sources, batches):
        monkeypatch.setattr(module, "CHUNK", 7)


def text_cfg(*files, **extra):
    return OmegaConf.create({"name": "text", "files": [str(f) for f in files], "val_files": None,
                             "val_fraction": 0.1, **extra})


def one_line(excinfo) -> str:
    msg = str(excinfo.value)
    assert msg and "\n" not in msg
    return msg


def test_pieces_give_the_bytes_of_the_files_split_by_characters(tmp_path, tiny_pieces, monkeypatch):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_bytes(("ünïcödé 🙂 text\r\n" * 40).encode())
    b.write_bytes(TRICKY.encode())  # no newline at its end: one is added
    corpus = load_corpus(text_cfg(a, b), BYTE, progress=False)
    text = a.read_bytes().decode() + b.read_bytes().decode() + "\n"
    cut = len(text) - round(len(text) * 0.1)  # the last tenth of the characters, not of the bytes
    assert bytes(corpus.train) == text[:cut].encode() and bytes(corpus.val) == text[cut:].encode()
    assert corpus.train.dtype == np.uint8 and corpus.bytes_per_token == 1.0
    # the same corpus in pieces of the default size, built again in another cache
    monkeypatch.setenv("NORMEXP_CACHE", str(tmp_path / "other"))
    for module in (sources, batches):
        monkeypatch.setattr(module, "CHUNK", 4 << 20)
    again = load_corpus(text_cfg(a, b), BYTE, progress=False)
    assert np.array_equal(again.train, corpus.train) and np.array_equal(again.val, corpus.val)
    assert again.baseline_loss == corpus.baseline_loss


def test_separate_val_files_are_their_bytes(tmp_path, tiny_pieces):
    a, v = tmp_path / "a.txt", tmp_path / "v.txt"
    a.write_bytes(TRICKY.encode())
    v.write_bytes("held out ✓\n".encode())
    corpus = load_corpus(text_cfg(a, val_files=[str(v)]), BYTE, progress=False)
    assert bytes(corpus.train) == TRICKY.encode() + b"\n" and bytes(corpus.val) == v.read_bytes()


@pytest.mark.parametrize("at", [0, 6, 7, 13, 14, 30, 60])
def test_a_bad_byte_is_named_at_its_offset_across_pieces(tmp_path, tiny_pieces, at):
    """The offset is the one a decode of the whole file names (14: inside an é cut by a piece,
    whose first byte is where the text stops being UTF-8; 60: the end)."""
    good = ("aé" * 20).encode()  # pieces of 7 bytes cut some é in two
    data = good[:at] + b"\xff" + good[at:]
    with pytest.raises(UnicodeDecodeError) as whole:
        data.decode("utf-8")
    f = tmp_path / "bad.txt"
    f.write_bytes(data)
    with pytest.raises(DataError) as e:
        load_corpus(text_cfg(f), BYTE, progress=False)
    assert f"{f} is not UTF-8 (bad byte at offset {whole.value.start});" in one_line(e), str(e.value)


def test_lines_from_pieces_are_splitlines(tiny_pieces):
    text = TRICKY * 3 + "a line of its own " * 30
    pieces = [memoryview(text.encode())[:50], memoryview(text.encode())[50:]]
    assert list(sources._text_lines(pieces)) == text.splitlines(keepends=True)
    assert list(sources._text_lines([b"\r", b"\n", b"x"])) == "\r\nx".splitlines(keepends=True)


def test_bpe_tokens_are_those_of_the_whole_text(tmp_path, tiny_pieces):
    """The expectation: tokenizers trained on the list of all lines of the whole training text
    and encoding every line, as normexp did before it tokenized in pieces."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    a = tmp_path / "a.txt"
    a.write_bytes(((TRICKY + "\n") * 30 + "the king and the queen\n" * 50).encode())
    corpus = load_corpus(text_cfg(a), {"name": "bpe", "vocab_size": 300}, progress=False)
    text = a.read_bytes().decode()
    cut = len(text) - round(len(text) * 0.1)
    reference = Tokenizer(models.BPE())
    reference.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    reference.decoder = decoders.ByteLevel()
    reference.train_from_iterator(text[:cut].splitlines(keepends=True), trainers.BpeTrainer(
        vocab_size=300, show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    for tokens, part in ((corpus.train, text[:cut]), (corpus.val, text[cut:])):
        ids = [i for e in reference.encode_batch(part.splitlines(keepends=True), add_special_tokens=False)
               for i in e.ids]
        assert tokens.tolist() == ids and reference.decode(ids) == part
    assert corpus.train.dtype == np.uint16


def test_reading_and_tokenizing_holds_the_file_once(tmp_path, monkeypatch):
    """Python's allocations while a 24 MB file is read, hashed, split and tokenized stay under
    1.5 times the file (the whole-text path held ~5 times it: bytes, text, joined text, its
    halves, their encoding and a uint16 copy)."""
    monkeypatch.setattr(sources, "CHUNK", 1 << 20)
    monkeypatch.setattr(batches, "CHUNK", 1 << 20)
    line = "Où est la café? the king and the queen of the night\n".encode()
    f = tmp_path / "big.txt"
    f.write_bytes(line * (24_000_000 // len(line)))
    n = f.stat().st_size
    tracemalloc.start()
    try:
        corpus = load_corpus(text_cfg(f), BYTE, progress=False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(corpus.train) + len(corpus.val) == n
    assert peak < 1.5 * n, f"peak {peak / 1e6:.1f} MB for a {n / 1e6:.1f} MB file"


# ---------------------------------------------------------------------------------------------
# refused before reading


def test_a_file_that_does_not_fit_in_memory_is_refused_before_it_is_read(tmp_path, cache, monkeypatch):
    f = tmp_path / "big.txt"
    f.write_bytes(b"some text\n" * 100_000)  # 1 MB

    def no_read(*args):
        raise AssertionError("the file was read")

    monkeypatch.setattr(resources, "available_memory_bytes", lambda: 500_000)
    monkeypatch.setattr(sources, "_read_bytes", no_read)
    with pytest.raises(DataError) as e:
        load_corpus(text_cfg(f), BYTE, progress=False)
    msg = one_line(e)
    assert msg.startswith(f"data.files: {f} is 1.0 MB; reading it takes ") and "500.0 kB is free" in msg, msg
    assert "train on a smaller file" in msg
    assert not (cache / "tokens").exists() or not any((cache / "tokens").iterdir())


def test_tokens_that_do_not_fit_on_the_disk_are_refused_before_tokenizing(tmp_path, cache, monkeypatch):
    f = tmp_path / "a.txt"
    f.write_bytes(b"some text, some more\n" * 10_000)  # 210 kB: its byte tokens need as much

    def no_tokens(*args):
        raise AssertionError("tokenized")

    monkeypatch.setattr(resources, "free_disk_bytes", lambda folder: 200_000)
    monkeypatch.setattr(sources.Bytes, "encode", no_tokens)
    with pytest.raises(DataError) as e:
        load_corpus(text_cfg(f), BYTE, progress=False)
    msg = one_line(e)
    assert msg.startswith(f"data.files: {f} is 210.0 kB; its tokens take 210.0 kB in the token cache "
                          f"{cache / 'tokens'} and 200.0 kB is free there;"), msg
    assert "set NORMEXP_CACHE to a folder on a larger disk" in msg
    # once the tokens are cached, a full disk does not matter: the pre-flight looks the key up
    monkeypatch.undo()
    monkeypatch.setenv("NORMEXP_CACHE", str(cache))
    load_corpus(text_cfg(f), BYTE, progress=False)
    from normexp.config.compose import compose_config
    from normexp.launch.preflight import check_data_fits

    job = compose_config(["data=text", f"data.files=[{f}]", "device=cpu"])
    monkeypatch.setattr(resources, "free_disk_bytes", lambda folder: 200_000)
    check_data_fits(job)  # cached: passes
    g = tmp_path / "g.txt"
    g.write_bytes(f.read_bytes() + b"x\n")  # not cached
    with pytest.raises(ConfigError) as e:
        check_data_fits(compose_config(["data=text", f"data.files=[{g}]", "device=cpu"]))
    assert one_line(e).startswith(f"data.files=[{g}]: {g} is 210.0 kB; its tokens take 210.0 kB"), str(e.value)


def test_the_preflight_counts_the_model_beside_the_data(tmp_path, monkeypatch):
    from normexp.config.compose import compose_config
    from normexp.launch.preflight import check_data_fits

    f = tmp_path / "a.txt"
    f.write_bytes(b"some text\n" * 10_000)
    job = compose_config(["data=text", f"data.files=[{f}]", "device=cpu"])
    model = resources.training_memory_bytes(job)
    data = 100_000 + resources.DATA_SLACK
    monkeypatch.setattr(resources, "available_memory_bytes", lambda: model + data)
    check_data_fits(job)
    monkeypatch.setattr(resources, "available_memory_bytes", lambda: model + data - 1)
    with pytest.raises(ConfigError) as e:
        check_data_fits(job)
    assert f"the model {resources.size_text(model)} of memory" in one_line(e)


def test_a_file_larger_than_memory_is_refused_by_the_command_in_one_line(tmp_path):
    """A sparse file (no disk used) twice the machine's memory: exit 2, one line naming the file,
    the sizes and the fix; no run folder is made."""
    import psutil

    f = tmp_path / "huge.txt"
    with open(f, "wb") as out:
        out.truncate(2 * psutil.virtual_memory().total)
    run = tmp_path / "run"
    result = subprocess.run([sys.executable, "-m", "normexp.cli", "train", "data=text", f"data.files=[{f}]",
                             "steps=2", f"hydra.run.dir={run}"], capture_output=True, text=True,
                            env=cli_environment(tmp_path / "cache"), timeout=SAFETY_NET_S)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert f"data.files=[{f}]: {f} is " in lines[0] and "of memory and" in lines[0] and "is free" in lines[0]
    assert "train on a smaller file" in lines[0] and not run.exists()


# ---------------------------------------------------------------------------------------------
# not a regular file; one repeated byte


def test_a_device_or_a_pipe_is_named_for_what_it_is(tmp_path):
    from normexp.launch.validate import check_data

    with pytest.raises(ConfigError) as e:
        check_data(text_cfg("/dev/zero"))
    assert one_line(e) == "data.files=/dev/zero: is a character device, not a regular file; give a text file"
    fifo, a = tmp_path / "pipe", tmp_path / "a.txt"
    os.mkfifo(fifo)
    a.write_text("text\n")
    with pytest.raises(ConfigError, match="is a named pipe \\(FIFO\\), not a regular file"):
        check_data(text_cfg(tmp_path / "a.txt", val_files=[str(fifo)]))


def test_dev_zero_on_the_command_line(tmp_path):
    result = subprocess.run([sys.executable, "-m", "normexp.cli", "train", "data=text", "data.files=[/dev/zero]"],
                            capture_output=True, text=True, env=cli_environment(tmp_path / "cache"), timeout=SAFETY_NET_S,
                            cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        "normexp: error: data.files=/dev/zero: is a character device, not a regular file; give a text file"], \
        result.stderr


@pytest.mark.parametrize("newline", [b"", b"\n"])
def test_one_repeated_byte_is_refused_and_not_cached(tmp_path, cache, newline):
    f = tmp_path / "zeros.txt"
    f.write_bytes(b"\0" * 200_000 + newline)
    with pytest.raises(DataError) as e:
        load_corpus(text_cfg(f), BYTE, progress=False)
    msg = one_line(e)
    assert msg.startswith(f"{f}: the training text is ") and "one byte (0x00;" in msg and "nothing to learn" in msg
    assert not [p for p in (cache / "tokens").iterdir() if not p.name.startswith(".")]
    g = tmp_path / "almost.txt"  # a real text passes: 2 to 5 nats a byte
    g.write_bytes(b"ab\n" * 1000)
    load_corpus(text_cfg(g), BYTE, progress=False)
