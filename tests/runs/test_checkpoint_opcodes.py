"""A checkpoint whose pickle calls code through an opcode torch.save never writes (STACK_GLOBAL
with its names from the memo, which torch's scan for globals cannot read) is refused in one line
naming it, never loaded and never skipped for an older one with only a warning."""

import struct
import zipfile

import pytest
import torch

from normexp.config.checks import ConfigError
from normexp.runs import checkpoint as ckpt


def _unicode(text: str) -> bytes:
    data = text.encode()
    return b"X" + struct.pack("<I", len(data)) + data  # BINUNICODE


def _planted(good: dict, path) -> None:
    """A torch.save zip of `good` whose data.pkl is replaced: builtins.print('planted'), the names
    memoized (BINPUT) and read back (BINGET) for STACK_GLOBAL; never run here."""
    torch.save(good, path.with_suffix(".src"))
    payload = (b"\x80\x02" + _unicode("builtins") + b"q\x00" + _unicode("print") + b"q\x01"
               + b"h\x00h\x01\x93" + _unicode("planted") + b"\x85R.")
    with zipfile.ZipFile(path.with_suffix(".src")) as src, zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as out:
        for item in src.infolist():
            out.writestr(item, payload if item.filename.endswith("data.pkl") else src.read(item.filename))
    path.with_suffix(".src").unlink()


def test_a_checkpoint_that_calls_code_through_memoized_stack_global_is_refused(tmp_path, capsys):
    model = torch.nn.Linear(2, 2)
    ckpt.save(tmp_path, {"step": 2, "model": model.state_dict(), "optimizer": {}}, keep=5)
    newest = ckpt.checkpoint_dir(tmp_path) / "step_00000004.pt"
    _planted({"step": 4, "model": model.state_dict()}, newest)
    with pytest.raises(ConfigError) as e:
        ckpt.load_latest(tmp_path)
    line = str(e.value)
    assert line.startswith(f"resume=true: {newest} is not a checkpoint normexp wrote: its pickle uses an opcode")
    assert "remove it" in line and "\n" not in line
    assert "planted" not in capsys.readouterr().out  # nothing of it ran
    newest.unlink()  # removed, as the line says: the checkpoint before it loads
    assert ckpt.load_latest(tmp_path)["step"] == 2
