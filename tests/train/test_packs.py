"""Packs (train/pack.py, model/packed.py, hydra/launcher=packed): each member of a pack is its
solo run, bit for bit on CPU float32; a diverging member touches no other; an interrupted packed
sweep resumes bit-exact. The expectation is always the solo run (or the uninterrupted pack)
computed here by the ordinary code path."""

import json
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch
from conftest import SAFETY_NET_S, TINY, cli_environment, make_corpus, read_scalars, run_cli

from normexp.config.compose import compose_config
from normexp.config.model_config import ModelConfig
from normexp.launch.packs import cannot_pack
from normexp.model import GPT, NORMS, PLACEMENTS
from normexp.config.variants import pack_refusal
from normexp.model.packed import PackedGPT
from normexp.train.alone import train
from normexp.config.run_config import RunConfig
from normexp.train.config import TrainConfig
from normexp.train.pack import train_pack

# tokens/s and the wall time are the only things a member logs that depend on the pack
NOT_COMPARED = {"perf/tokens_per_second"}
SUMMARY_KEYS = ("status", "steps_completed", "final_val_loss", "best_val_loss", "final_train_loss", "initial_loss",
                "loss_trajectory", "diverged_at_step", "outcome", "loss_spikes")

# 8 members spread over lr, seed, warmup and init, all at lrs this shape trains stably at
MEMBERS = [["lr=1e-3", "seed=0"], ["lr=2e-3", "seed=1"], ["lr=3e-3", "seed=2", "warmup=0"],
           ["lr=1e-3", "seed=3", "init=gpt2"], ["lr=2e-3", "seed=0", "init=small"], ["lr=3e-3", "seed=1", "warmup=20"],
           ["lr=2e-3", "seed=2", "init=mitchell"], ["lr=1e-3", "seed=4", "warmup=0", "init=gpt2"]]


# the placements and norms whose settings class says a pack cannot compute them (`unpackable`, the
# reason), as (group, name, reason), from the registries: a new one is refused below, every other one packed
UNPACKABLE = [(group, name, cls.Settings.unpackable) for group, registry in (("placement", PLACEMENTS), ("norm", NORMS))
              for name, cls in sorted(registry.items()) if cls.Settings.unpackable is not None]
PACKABLE_PLACEMENTS = sorted(name for name, cls in PLACEMENTS.items() if cls.Settings.unpackable is None)
PACKABLE_NORMS = sorted(name for name, cls in NORMS.items() if cls.Settings.unpackable is None)


def base(corpus, steps=200):
    return [*TINY, "data=text", f"data.files=[{corpus}]", f"steps={steps}", "eval_every=25", "log_every=10",
            "checkpoint_every=100", "log.progress=off"]


def runs(tmp_path, name, n):
    dirs = [tmp_path / f"{name}{i}" for i in range(n)]
    for d in dirs:
        d.mkdir()
    return dirs


def assert_same_run(solo, packed):
    a, b = read_scalars(solo), read_scalars(packed)
    assert set(a) == set(b), f"tags only in one: {set(a) ^ set(b)}"
    differ = [t for t in a if t not in NOT_COMPARED and a[t] != b[t]]
    assert not differ, f"{packed.name}: {len(differ)} tags differ from its solo run, e.g. {differ[:4]}"
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (solo, packed))
    assert {k: sa.get(k) for k in SUMMARY_KEYS} == {k: sb.get(k) for k in SUMMARY_KEYS}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_corpus(tmp_path_factory.mktemp("corpus") / "corpus.txt")


@pytest.fixture(autouse=True)
def one_thread(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMEXP_CACHE", str(tmp_path / "cache"))
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def members(corpus, member_overrides, steps=200):
    return [compose_config([*base(corpus, steps), *m]) for m in member_overrides]


@pytest.mark.slow
def test_every_member_of_an_8_run_pack_logs_what_its_solo_run_logs_bit_for_bit(tmp_path, corpus):
    configs = members(corpus, MEMBERS)
    solo, packed = runs(tmp_path, "solo", len(configs)), runs(tmp_path, "pack", len(configs))
    for c, d in zip(configs, solo):
        train(c, d)
    summaries = train_pack(configs, packed)
    assert all(s["status"] in ("completed", "stalled") for s in summaries)
    assert len({s["final_val_loss"] for s in summaries}) == len(configs)  # eight different runs
    for s, p in zip(solo, packed):
        assert_same_run(s, p)


def test_a_pack_of_one_is_its_solo_run_bit_for_bit(tmp_path, corpus):
    """A run alone and a pack go through the one loop (loop.train_runs); a pack of one differs from
    its solo run only in its plain steps (one PackedGPT of one member, the optimizer per tensor),
    and logs what the solo run logs, checkpoints and all."""
    [config] = members(corpus, [["lr=2e-3", "seed=1", "warmup=20"]], steps=60)
    solo, packed = runs(tmp_path, "solo", 1)[0], runs(tmp_path, "pack", 1)[0]
    train(config, solo)
    [summary] = train_pack([config], [packed])
    assert summary["status"] in ("completed", "stalled") and summary["steps_completed"] == 60
    assert_same_run(solo, packed)
    a, b = (torch.load(d / "checkpoints" / "step_00000060.pt", weights_only=False)["model"] for d in (solo, packed))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def as_if_on_cuda(monkeypatch):
    """A graph cannot be captured on CPU; what one would record (Pack._device_step) runs eagerly
    through the graph's own path (GraphedPackStep, never past its warm-up) where the device check
    is passed over. Returns the list its calls append to."""
    import normexp.train.pack as pack_module
    import normexp.train.pack_graph as pack_graph

    monkeypatch.setattr(RunConfig, "cuda_graph_refusal", lambda self, device_type=None: None)
    monkeypatch.setattr(pack_module, "graph_step_fits", lambda *a: None)
    monkeypatch.setattr(pack_graph, "WARMUP", 10**9)
    calls = []
    real = pack_module.Pack._device_step
    monkeypatch.setattr(pack_module.Pack, "_device_step", lambda self, xs, ys: calls.append(1) or real(self, xs, ys))
    return calls


@pytest.mark.slow
def test_a_run_alone_where_a_graph_fits_steps_its_plain_steps_as_a_graphed_pack_of_one(tmp_path, corpus, monkeypatch):
    """`train` (cuda_graph=auto) where the graph fits: every plain step goes through the graph's
    step, logging steps eager; the run equals a pack of one with the packed optimizer bit for bit,
    and its eager solo run to float32 rounding. cuda_graph=false: the eager solo run."""
    [config] = members(corpus, [["lr=2e-3", "seed=1", "warmup=20"]], steps=60)
    solo, packed, graphed, refused = runs(tmp_path, "solo", 4)
    train(config, solo)
    train_pack([config], [packed], packed_optimizer=True, cuda_graph=False)
    calls = as_if_on_cuda(monkeypatch)
    summary = train(config, graphed)
    logging_steps = len([*range(0, 60, 10), 59])
    assert summary["cuda_graph"] is True and len(calls) == 60 - logging_steps
    assert_same_run(packed, graphed)
    a, b = (json.loads((d / "summary.json").read_text())["loss_trajectory"] for d in (solo, graphed))
    assert a.keys() == b.keys() and a != b  # not the solo run's path ...
    for part in a:  # ... but its numbers, to float32 rounding over 60 Adam steps
        assert [s for s, _ in a[part]] == [s for s, _ in b[part]]
        assert [v for _, v in b[part]] == pytest.approx([v for _, v in a[part]], rel=1e-4)
    calls.clear()
    off = compose_config([*base(corpus, 60), "lr=2e-3", "seed=1", "warmup=20", "cuda_graph=false"])
    assert train(off, refused)["cuda_graph"] is False and not calls
    assert_same_run(solo, refused)


def test_a_step_that_cannot_be_captured_stops_the_run_naming_cuda_graph_false(tmp_path, corpus, monkeypatch):
    """The capture itself fails (here: CPU torch has no CUDAGraph; on a GPU, out of memory or an op
    a graph cannot record, after which the process may still be mid-capture): the run stops with
    one line that names the way out, not with a traceback or a second try."""
    import normexp.train.pack_graph as pack_graph
    from normexp.config.checks import ConfigError

    [config] = members(corpus, [["lr=2e-3", "seed=1"]], steps=20)
    as_if_on_cuda(monkeypatch)
    monkeypatch.setattr(pack_graph, "WARMUP", 0)  # the first plain step is the capture
    with pytest.raises(ConfigError, match=r"^cuda_graph=auto: the step could not be captured as a CUDA graph "
                                          r"\(Tried to instantiate dummy base class CUDAGraph\); use cuda_graph=false"):
        train(config, runs(tmp_path, "run", 1)[0])


def test_a_packs_graph_follows_its_runs_cuda_graph_where_the_launcher_leaves_it_auto(tmp_path, corpus, monkeypatch):
    """hydra.launcher.cuda_graph=auto (None here) defers to the runs' own cuda_graph: false in one
    run, no graph; the launcher's explicit value wins."""
    from normexp.train.loop import Hooks, JobContext, Trainer
    from normexp.train.pack import Pack

    as_if_on_cuda(monkeypatch)
    configs = [compose_config([*base(corpus, 20), "lr=1e-3", f"seed={k}", *(["cuda_graph=false"] if k else [])])
               for k in range(2)]
    trainers = [Trainer(TrainConfig.from_composed(c), d, Hooks(), JobContext()) for c, d in zip(configs, runs(tmp_path, "m", 2))]
    assert Pack(trainers, packed_optimizer=True, cuda_graph=None).graph is None
    assert Pack(trainers, packed_optimizer=True, cuda_graph=True).graph is not None


def test_cuda_graph_true_stops_a_run_no_graph_can_take_with_the_reason(tmp_path, corpus, monkeypatch):
    """Where the settings pass but the model cannot be packed (BatchNorm), cuda_graph=true stops
    the run before its first step with one line naming why; auto steps it eagerly."""
    from normexp.config.checks import ConfigError

    as_if_on_cuda(monkeypatch)
    batch = ["norm=batch", "lr=2e-3"]
    with pytest.raises(ConfigError, match=r"cuda_graph=true: norm=batch: BatchNorm.*use cuda_graph=auto"):
        train(compose_config([*base(corpus, 20), *batch, "cuda_graph=true"]), runs(tmp_path, "true", 1)[0])
    summary = train(compose_config([*base(corpus, 20), *batch]), runs(tmp_path, "auto", 1)[0])
    assert summary["cuda_graph"] is False and summary["steps_completed"] == 20


def test_a_pack_computes_each_members_loss_and_gradients_for_every_placement_and_norm():
    """One step of the model alone, for every registered placement (under LayerNorm) and norm
    (under Pre-LN) a pack takes, i.e. whose class is not `unpackable`: each member's loss and
    every gradient equal those of its own GPT (float32, CPU)."""
    torch.set_num_threads(1)
    assert "pre" in PACKABLE_PLACEMENTS and "layer" in PACKABLE_NORMS  # the defaults the others are paired with
    settings = [(p, "layer") for p in PACKABLE_PLACEMENTS]
    settings += [("pre", n) for n in PACKABLE_NORMS if n != "layer"]
    for placement, norm in settings:
        cfg = ModelConfig(seq_len=16, layers=2, d_model=32, heads=4, placement=placement, norm=norm, qk_norm=norm == "rms")
        models = []
        for k in range(3):
            torch.manual_seed(k)
            models.append(GPT(cfg))
        g = torch.Generator().manual_seed(0)
        x, y = torch.randint(0, 256, (3, 4, 16), generator=g), torch.randint(0, 256, (3, 4, 16), generator=g)
        expected = []
        for k, m in enumerate(models):
            loss = m(x[k], y[k])[1]
            loss.backward()
            expected.append((loss.detach(), [p.grad.clone() for p in m.parameters()]))
            m.zero_grad(set_to_none=True)
        pack = PackedGPT(models)
        losses = pack(x, y)
        losses.sum().backward()
        pack.member_grads_to_members(range(3))
        for k, m in enumerate(models):
            assert torch.equal(losses[k], expected[k][0]), (placement, norm, k)
            for (name, p), want in zip(m.named_parameters(), expected[k][1]):
                assert torch.equal(p.grad, want), (placement, norm, k, name)


@pytest.mark.parametrize("group, name, reason", UNPACKABLE, ids=[f"{g}={n}" for g, n, _ in UNPACKABLE])
def test_a_pack_refuses_what_it_cannot_compute_in_one_line(group, name, reason):
    """Every placement and norm whose class is marked `unpackable` is refused, with its reason in
    one line, by the launcher (of the job's config) and by the pack (of the built model)."""
    assert reason and "\n" not in reason
    cfg = compose_config([f"{group}={name}", "layers=1", "d_model=32", "heads=2", "seq_len=8"])
    assert cannot_pack(cfg) == f"{group}={name}: {reason}"
    model = GPT(ModelConfig.from_composed(cfg))
    with pytest.raises(ValueError) as e:
        PackedGPT([model, model])
    assert str(e.value) == f"cannot pack {group}={name}: {reason}"


def test_only_what_a_class_marks_unpackable_is_refused():
    """The pairs the gradient test above packs are refused by nothing; the marked ones, the
    nGPT placement and BatchNorm today, are refused whatever they are paired with."""
    assert {(g, n) for g, n, _ in UNPACKABLE} >= {("placement", "ngpt"), ("norm", "batch")}
    for placement in PACKABLE_PLACEMENTS:
        for norm in PACKABLE_NORMS:
            assert pack_refusal(placement, norm, False) is None, (placement, norm)
        assert pack_refusal(placement, "layer", True).startswith("compile=true: ")
    for group, name, reason in UNPACKABLE:
        others = PACKABLE_NORMS if group == "placement" else PACKABLE_PLACEMENTS
        for other in others:
            placement, norm = (name, other) if group == "placement" else (other, name)
            assert pack_refusal(placement, norm, False) == f"{group}={name}: {reason}"


@pytest.mark.slow
def test_a_diverging_member_stops_as_alone_and_leaves_the_others_bit_for_bit(tmp_path, corpus):
    stable = [["lr=1e-3", "seed=0"], ["lr=3e-3", "seed=1"], ["lr=2e-3", "seed=2", "warmup=0"]]
    wild = ["lr=10", "seed=3", "warmup=0"]
    with_it = members(corpus, [stable[0], wild, *stable[1:]], steps=60)
    without = members(corpus, stable, steps=60)
    a, b = runs(tmp_path, "with", 4), runs(tmp_path, "without", 3)
    summaries = train_pack(with_it, a)
    train_pack(without, b)
    alone = runs(tmp_path, "alone", 1)[0]
    solo = train(with_it[1], alone)
    assert solo["status"] == summaries[1]["status"] == "diverged"
    assert summaries[1]["diverged_at_step"] == solo["diverged_at_step"]
    assert_same_run(alone, a[1])
    for packed_with, packed_without in zip([a[0], a[2], a[3]], b):
        assert_same_run(packed_without, packed_with)


def _sweep(tmp_path, corpus, sweep_dir, *extra):
    return ["train", "-m", "hydra/launcher=packed", *TINY, "data=text", f"data.files=[{corpus}]", "steps=120",
            "eval_every=20", "log_every=10", "checkpoint_every=10", "keep_checkpoints=10", "lr=1e-3,3e-3",
            "seed=0,1", "warmup=0", f"hydra.sweep.dir={sweep_dir}", *extra]


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_a_packed_sweep_interrupted_after_three_checkpoints_resumes_bit_exact(tmp_path, corpus, signum):
    env = cli_environment(tmp_path / "cache")
    straight = tmp_path / "straight"
    run_cli(_sweep(tmp_path, corpus, straight), env)
    jobs = sorted(p.name for p in straight.iterdir() if (p / "summary.json").exists())
    assert len(jobs) == 4

    stopped = tmp_path / "stopped"
    proc = subprocess.Popen([sys.executable, "-m", "normexp.cli", *_sweep(tmp_path, corpus, stopped)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    third = [stopped / j / "checkpoints" / "step_00000030.pt" for j in jobs]
    deadline = time.monotonic() + SAFETY_NET_S  # a safety net, not a speed limit
    while not all(p.exists() for p in third):  # the signal comes after each member's third checkpoint
        assert proc.poll() is None, f"the sweep ended before its third checkpoint:\n{proc.stdout.read()[-2000:]}"
        assert time.monotonic() < deadline, f"no third checkpoint within {SAFETY_NET_S} s: the run hung"
        time.sleep(0.01)
    proc.send_signal(signum)
    proc.communicate(timeout=SAFETY_NET_S)
    statuses = [json.loads((stopped / j / "summary.json").read_text())["status"] for j in jobs]
    if signum != signal.SIGKILL:
        assert statuses == ["interrupted"] * 4
    saved = [max(int(p.stem.split("_")[1]) for p in (stopped / j / "checkpoints").glob("step_*.pt")) for j in jobs]
    assert all(30 <= s < 120 for s in saved), saved  # stopped mid-run, each member after its third checkpoint

    run_cli(_sweep(tmp_path, corpus, stopped, "resume=true"), env)
    for j in jobs:
        assert_same_run(straight / j, stopped / j)


def _packed_optimizer_members(corpus, steps, *extra):
    return members(corpus, [["lr=1e-3", "seed=0", *extra], ["lr=3e-3", "seed=1", "warmup=0", "grad_clip=0.5", *extra],
                            ["lr=10", "seed=2", "warmup=0", *extra], ["lr=2e-3", "seed=3", "init=gpt2", *extra]], steps=steps)


@pytest.mark.slow
def test_one_adamw_step_for_the_pack_agrees_with_each_members_own_optimizer(tmp_path, corpus):
    """The packed optimizer (the default on CUDA) against each member's torch AdamW on CPU: the
    same update written out, so losses agree to float rounding, and the diverging member stops
    at the same step."""
    configs = _packed_optimizer_members(corpus, 60)
    own, packed = runs(tmp_path, "own", 4), runs(tmp_path, "packed", 4)
    a = train_pack(configs, own, packed_optimizer=False)
    b = train_pack(configs, packed, packed_optimizer=True)
    assert [s["status"] for s in a] == [s["status"] for s in b] and b[2]["diverged_at_step"] == a[2]["diverged_at_step"]
    for x, y in zip(a, b):
        for (step, u), (step2, w) in zip(x["loss_trajectory"]["train"], y["loss_trajectory"]["train"]):
            assert step == step2 and w == pytest.approx(u, rel=1e-5)
        if x["final_val_loss"] is not None:
            assert y["final_val_loss"] == pytest.approx(x["final_val_loss"], rel=1e-5)
    moments = [t for t in read_scalars(packed[0]) if t.startswith("adam")]
    assert moments, "the instruments read no Adam moments from the packed optimizer's state"


@pytest.mark.slow
def test_a_pack_with_one_adamw_step_resumes_bit_exact_from_its_checkpoints(tmp_path, corpus):
    """Its moments and step counts go into each member's checkpoint in torch's format and come
    back into the pack's rows: stopped after step 30 of 60 and resumed, every member ends as the
    uninterrupted pack."""
    straight, stopped = runs(tmp_path, "straight", 4), runs(tmp_path, "stopped", 4)
    configs = _packed_optimizer_members(corpus, 60, "checkpoint_every=30", "keep_checkpoints=5")
    train_pack(configs, straight, packed_optimizer=True)
    for src, dst in zip(straight, stopped):  # as if killed after the step-30 checkpoint
        shutil.rmtree(dst)
        shutil.copytree(src, dst)
        for late in (dst / "checkpoints").glob("step_00000060.pt"):
            late.unlink()
        for events in dst.glob("events.out.tfevents*"):
            events.unlink()  # the resumed run's events alone: compared from step 30 on below
        summary = json.loads((dst / "summary.json").read_text())
        if summary["status"] != "diverged":
            (dst / "summary.json").write_text(json.dumps({**summary, "status": "interrupted", "steps_completed": 30}))
    resumed = [i for i, d in enumerate(stopped) if json.loads((d / "summary.json").read_text())["status"] == "interrupted"]
    assert len(resumed) == 3
    train_pack([_packed_optimizer_members(corpus, 60, "checkpoint_every=30", "keep_checkpoints=5", "resume=true")[i]
                for i in resumed], [stopped[i] for i in resumed], packed_optimizer=True)
    for i in resumed:
        a, b = read_scalars(straight[i]), read_scalars(stopped[i])
        for tag, points in b.items():
            if tag in NOT_COMPARED or tag.startswith("hparams"):
                continue
            later = {s: v for s, v in a[tag].items() if s >= 30}
            assert {s: v for s, v in points.items() if s >= 30} == later, tag
        sa, sb = (json.loads((d / "summary.json").read_text()) for d in (straight[i], stopped[i]))
        assert sb["final_val_loss"] == sa["final_val_loss"] and sb["loss_trajectory"] == sa["loss_trajectory"]


def test_a_pack_step_is_captured_only_where_it_is_correct():
    from normexp.train.pack_graph import graph_step_fits

    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert graph_step_fits(cuda, True, [0.0, 0.0], False) is None
    assert "CUDA" in graph_step_fits(cpu, True, [0.0], False)
    assert "own optimizer" in graph_step_fits(cuda, False, [0.0], False)
    assert "z_loss" in graph_step_fits(cuda, True, [0.0, 1e-4], False)
    assert "every_step" in graph_step_fits(cuda, True, [0.0], True)


@pytest.mark.slow
def test_the_step_a_cuda_graph_records_trains_as_the_eager_packed_step(tmp_path, corpus, monkeypatch):
    """On CPU the graph cannot be captured, but the step it would record (Pack._device_step:
    forward, backward, clipping, the packed AdamW step from prepare's values) runs eagerly; each
    member ends bit for bit as with the eager packed step, logging steps and evaluations between."""
    import normexp.train.pack as pack_module
    import normexp.train.pack_graph as pack_graph

    configs = members(corpus, [["lr=1e-3", "seed=0"], ["lr=3e-3", "seed=1", "warmup=0", "grad_clip=0.5"],
                               ["lr=2e-3", "seed=3", "init=gpt2"]], steps=40)
    eager, graphed = runs(tmp_path, "eager", 3), runs(tmp_path, "graphed", 3)
    train_pack(configs, eager, packed_optimizer=True, cuda_graph=False)
    monkeypatch.setattr(pack_module, "graph_step_fits", lambda *a: None)
    monkeypatch.setattr(pack_graph, "WARMUP", 10**9)  # never captured: every plain step through the graph's eager side
    calls = []
    real = pack_module.Pack._device_step
    monkeypatch.setattr(pack_module.Pack, "_device_step", lambda self, xs, ys: calls.append(1) or real(self, xs, ys))
    train_pack(configs, graphed, packed_optimizer=True, cuda_graph=True)
    assert len(calls) > 20  # the plain steps went that way
    for a, b in zip(eager, graphed):
        assert_same_run(a, b)


@pytest.mark.slow
def test_a_packed_sweep_runs_the_jobs_a_pack_cannot_take_alone_and_says_so(tmp_path, corpus):
    sweep = tmp_path / "sweep"
    proc = run_cli(["train", "-m", "hydra/launcher=packed", *TINY, "data=text", f"data.files=[{corpus}]", "steps=20",
                    "eval_every=10", "log_every=10", "placement=pre,ngpt", "lr=1e-3,3e-3", f"hydra.sweep.dir={sweep}"],
                   cli_environment(tmp_path / "cache"))
    alone = [line for line in proc.stderr.splitlines() if "runs alone" in line]
    assert len(alone) == 2 and all("it cannot be packed: placement=ngpt" in line for line in alone), proc.stderr
    assert "4 jobs in 1 pack (2 members), 2 alone" in proc.stderr
    assert ("on a CPU a pack trains no faster" in proc.stderr) == (not torch.cuda.is_available()), proc.stderr
    statuses = [json.loads(p.read_text())["status"] for p in sorted(sweep.glob("*/summary.json"))]
    assert len(statuses) == 4 and all(s in ("completed", "stalled") for s in statuses)


def test_jobs_split_into_even_packs_of_what_fits_and_a_size_that_cannot_fit_is_refused(monkeypatch):
    import normexp.launch.packs as packs
    from normexp.config.checks import ConfigError

    cfg = compose_config(["layers=2", "d_model=32", "heads=2"])
    # a SLURM pack's memory is its job's mem_gb (slurm_packed): 90 % of it, in members
    assert packs.members_that_fit(cfg, free_bytes=10 * packs.member_memory_bytes(cfg)) == 9
    assert packs.pack_sizes(20, "auto", cfg, free_bytes=10 * packs.member_memory_bytes(cfg)) == [7, 7, 6]
    monkeypatch.setattr(packs, "members_that_fit", lambda cfg, free_bytes=None: 4)
    assert packs.pack_sizes(10, "auto", cfg) == [4, 3, 3]  # at most 4, as even as they split
    assert packs.pack_sizes(3, "auto", cfg) == [3]
    assert packs.pack_sizes(10, 2, cfg) == [2] * 5
    with pytest.raises(ConfigError, match=r"a pack of 8 members of this shape needs about .* GiB and 4 fit in the free "
                                          r"memory: set hydra.launcher.max_members=4 \(or auto\)"):
        packs.pack_sizes(10, 8, cfg)
    monkeypatch.setattr(packs, "members_that_fit", lambda cfg, free_bytes=None: None)  # free memory unreadable: as asked
    assert packs.pack_sizes(10, "auto", cfg) == [10]


def test_a_pack_key_keeps_apart_what_changes_the_computation():
    from normexp.launch.packs import pack_key

    key = lambda *o: pack_key(compose_config(list(o)))  # noqa: E731
    assert key("lr=1e-3", "seed=0") == key("lr=3e-3", "seed=4", "warmup=0", "init=gpt2", "grad_clip=1", "z_loss=1e-4")
    for other in ("layers=7", "d_model=64", "placement=post", "norm=rms", "steps=11",
                  "init=torchscale", "batch_size=3", "norm.eps=1e-3"):
        assert key(other) != key(), other
    assert key("placement=deepnorm") != key("placement=deepnorm", "placement.alpha=2")  # a placement's constants too
