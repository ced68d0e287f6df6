"""HParams log a number setting as a number whichever way it was written: `z_loss=0` on the
command line (a whole number) and the shipped default 0.0 land in one column of one type."""

from conftest import Recorder

from normexp.runs.summary import hparams_row
from normexp.train.logbook import write_hparams


def _start_info(writer):
    from tensorboard.plugins.hparams import metadata

    [start] = [metadata.parse_session_start_info_plugin_data(v.metadata.plugin_data.content)
               for s in writer.summaries for v in s.value if v.tag == metadata.SESSION_START_INFO_TAG]
    return start


def test_an_explicit_whole_number_for_a_float_setting_is_logged_as_the_number():
    written, default = Recorder(), Recorder()
    write_hparams(written, hparams_row({"z_loss": 0, "lr": 1, "layers": 4}), "t")  # as the command line gives them
    write_hparams(default, hparams_row({"z_loss": 0.0, "lr": 1.0, "layers": 4}), "t")  # as train.yaml gives them
    for writer in (written, default):
        start = _start_info(writer).hparams
        assert start["z_loss"].WhichOneof("kind") == "number_value" and start["z_loss"].number_value == 0.0
        assert start["lr"].WhichOneof("kind") == "number_value" and start["lr"].number_value == 1.0
        assert start["layers"].string_value == "4"  # a whole-number setting stays text (TensorBoard's 4.0000)
