"""compile=true (GPT.compile_blocks): a regional compile that computes what the eager model
computes (to float tolerance: inductor fuses and rounds differently), traces the blocks'
shared code once for all blocks, keeps the parameter names, and leaves the instruments'
recording forwards eager (bit for bit the eager model's trace)."""

import copy
import os
import subprocess
import sys

import pytest
import torch
import yaml
from conftest import RAN_TO_THE_END, SAFETY_NET_S, TINY, read_summary, run_cli
from torch._dynamo.utils import counters

from normexp.model import GPT, ModelConfig
from normexp.train.instruments import recording

LAYERS, T = 4, 16


def eager_and_compiled(placement: str) -> tuple[GPT, GPT]:
    torch.manual_seed(0)
    eager = GPT(ModelConfig(layers=LAYERS, d_model=32, heads=2, seq_len=T, placement=placement))
    compiled = copy.deepcopy(eager)
    compiled.compile_blocks()
    return eager, compiled


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, 256, (4, T), generator=g), torch.randint(0, 256, (4, T), generator=g)


# deepnorm: the same constants in every block, one graph; lns: a different 1/√ℓ in each, one
# recompile at block 1, after which dynamo makes the float an input of the graph (not a graph per block)
@pytest.mark.parametrize(("placement", "graphs"), [("deepnorm", 1), ("lns", 2)])
def test_compiled_blocks_give_the_eager_loss_and_gradients_from_one_graph(placement, graphs):
    torch._dynamo.reset()
    counters.clear()
    eager, compiled = eager_and_compiled(placement)
    x, y = batch()
    losses = []
    for model in (eager, compiled):
        _, loss = model(x, y)
        loss.backward()
        losses.append(loss.item())
    assert losses[1] == pytest.approx(losses[0], rel=1e-5)
    assert compiled.state_dict().keys() == eager.state_dict().keys()
    for (name, p), (_, q) in zip(eager.named_parameters(), compiled.named_parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-6, msg=lambda m: f"{name}: {m}")
    assert counters["stats"]["unique_graphs"] == graphs, f"{LAYERS} blocks traced into {counters['stats']['unique_graphs']} graphs"


def test_the_instruments_forward_runs_the_eager_blocks_under_compile():
    eager, compiled = eager_and_compiled("pre")
    x, y = batch()
    with recording(eager) as expected:
        eager(x, y)
    with recording(compiled) as trace:
        _, loss = compiled(x, y)
    assert len(trace["block"]) == LAYERS
    for a, b in zip(expected["block"], trace["block"]):
        assert torch.equal(a, b)  # bit for bit: the same eager code on the same weights
    assert loss.item() == eager(x, y)[1].item()
    assert compiled.compiled_blocks is not None  # back to the compiled blocks after recording


@pytest.mark.slow
def test_a_compiled_run_logs_every_step_and_ends_as_the_eager_run(tmp_path, corpus, cli_env):
    # both modes in one sweep (one process start-up), each job in its own folder: False, True
    run_cli(["train", "-m", *TINY, "data=text", f"data.files=[{corpus}]", "steps=6", "log_every=2", "eval_every=3",
             "compile=false,true", f"hydra.sweep.dir={tmp_path}", "hydra.sweep.subdir=${compile}"], cli_env)
    runs = {mode: read_summary(tmp_path / mode.capitalize()) for mode in ("false", "true")}
    for mode in runs:  # each folder holds the job it is named after
        config = (tmp_path / mode.capitalize() / ".hydra" / "config.yaml").read_text()
        assert yaml.safe_load(config)["compile"] is (mode == "true")
    assert runs["true"]["status"] in RAN_TO_THE_END
    assert runs["true"]["final_val_loss"] == pytest.approx(runs["false"]["final_val_loss"], rel=1e-4)
    logged = {mode: [loss for _, loss in run["loss_trajectory"]["train"]] for mode, run in runs.items()}
    assert len(logged["true"]) == len(logged["false"]) > 0
    assert logged["true"] == pytest.approx(logged["false"], rel=1e-4)


COMPILE_ONE_BLOCK = """
import torch
from normexp.model import GPT, ModelConfig
torch.manual_seed(0)
model = GPT(ModelConfig(layers=2, d_model=32, heads=2, seq_len=16, placement="deepnorm"))
x = torch.randint(0, 256, (4, 16)); y = torch.randint(0, 256, (4, 16))
eager = model(x, y)[1].item()
model.compile_blocks()
print(abs(model(x, y)[1].item() - eager))
"""


def test_compile_under_aten_cpu_capability_default_after_vectorized_kernels_were_cached(tmp_path):
    """Inductor's cache key leaves out ATEN_CPU_CAPABILITY: a block compiled first with the CPU's
    own vector width, then under ATEN_CPU_CAPABILITY=default from the same cache, failed to
    compile ("'at::vec' has not been declared") until compile_blocks named the width."""
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    env.pop("ATEN_CPU_CAPABILITY", None)
    for capability in (None, "default"):
        if capability:
            env["ATEN_CPU_CAPABILITY"] = capability
        proc = subprocess.run([sys.executable, "-c", COMPILE_ONE_BLOCK], env=env, capture_output=True, text=True,
                              timeout=SAFETY_NET_S)
        assert proc.returncode == 0, f"ATEN_CPU_CAPABILITY={capability}: {proc.stderr[-1500:]}"
        assert float(proc.stdout.split()[-1]) < 1e-4  # the compiled loss is the eager one
