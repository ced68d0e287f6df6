"""The per-layer instruments, read back from the event files a real run writes, against
values computed by hand from the same initial weights and batch."""

import math

import numpy as np
import pytest
import torch
from conftest import RAN_TO_THE_END, TINY, cli_environment, make_corpus, read_scalars, read_summary, run_cli

from normexp.data.batches import get_batch
from normexp.model import GPT, ModelConfig

FAMILIES = ("act_std", "attn_out_std", "mlp_out_std", "grad_norm", "grad_norm_mlp_out", "update_ratio",
            "update_rms", "attn_logit_max", "attn_entropy", "query_norm", "key_norm", "adam_m_norm", "adam_v_norm")


@pytest.mark.slow
def test_every_tag_for_every_block_at_every_logged_step(tmp_path, corpus, cli_env):
    run = tmp_path / "run"
    run_cli(["train", f"data.files=[{corpus}]", "data=text", *TINY, "layers=4", "steps=30", "log_every=10",
             "eval_every=10", "loss_spike.min_points=2", f"hydra.run.dir={run}"], cli_env)
    scalars = read_scalars(run)
    logged = [0, 10, 20, 29]
    for family in FAMILIES:
        for i in range(4):
            assert sorted(scalars[f"{family}/layer_{i:02d}"]) == logged, family
        assert f"{family}/layer_04" not in scalars
    for i in range(4):
        for head in range(2):  # TINY has 2 heads
            assert sorted(scalars[f"attn_entropy_head/layer_{i:02d}/head_{head:02d}"]) == logged
    for tag in ("act_std/embedding", "grad_norm/embedding", "grad_norm/final_norm", "update_ratio/embedding",
                "update_ratio/final_norm", "stability/act_std_max", "stability/grad_norm_max",
                "stability/grad_norm_top_over_bottom", "stability/model_update", "train/loss", "output/log_z",
                "output/z_loss", "train/grad_norm", "train/lr"):
        assert sorted(scalars[tag]) == logged, tag
    # the spike rule writes its flag once it can judge: with min_points=2 losses before the step
    assert sorted(scalars["train/loss_spike"]) == logged[2:]
    assert sorted(scalars["val/loss"]) == [0, 10, 20, 30]  # a step-0 evaluation, then every eval_every
    assert sorted(scalars["perf/tokens_per_second"]) == [10, 20, 29]
    # the summaries are what their names say
    for s in logged:
        per_layer = [scalars[f"grad_norm/layer_{i:02d}"][s] for i in range(4)]
        assert scalars["stability/grad_norm_max"][s] == pytest.approx(max(per_layer))
        assert scalars["stability/grad_norm_top_over_bottom"][s] == pytest.approx(per_layer[-1] / per_layer[0], rel=1e-5)
    assert scalars["stability/model_update"][0] == pytest.approx(0.0, abs=1e-6)  # at step 0, θ_0 itself
    assert scalars["stability/model_update"][29] > 0


@pytest.mark.slow
def test_model_update_cadence_at_log_every_1(tmp_path, corpus, cli_env):
    """At log_every=1 every step logs the per-layer scalars, but the model update only on
    steps 0, 10, 20 (log.model_update_every=10) and the last; log_every=3 puts it on the
    first logging step of each 10-step window: 0, 12, 21 and the last."""
    sweep = tmp_path / "sweep"  # both cadences in one sweep: one process start-up
    run_cli(["train", "-m", f"data.files=[{corpus}]", "data=text", *TINY, "layers=2", "steps=25",
             "log_every=1,3", "eval_every=25", f"hydra.sweep.dir={sweep}", "hydra.sweep.subdir=log${log_every}"],
            cli_env)
    for log_every, expected in ((1, [0, 10, 20, 24]), (3, [0, 12, 21, 24])):
        scalars = read_scalars(sweep / f"log{log_every}")
        assert sorted(scalars["stability/model_update"]) == expected
        assert sorted(scalars["act_std/layer_01"]) == sorted({*range(0, 25, log_every), 24})


HAND_L, HAND_D, HAND_T, HAND_B, HAND_SEED = 3, 32, 32, 4, 7  # the runs rebuilt by hand below


@pytest.fixture(scope="module")
def hand_runs(tmp_path_factory):
    """The three placements' runs of the hand computation: one sweep through the real command
    line (its jobs share one process start-up), a folder per placement."""
    root = tmp_path_factory.mktemp("hand")
    corpus = make_corpus(root / "corpus.txt")
    sweep = root / "sweep"
    run_cli(["train", "-m", f"data.files=[{corpus}]", "data=text", f"layers={HAND_L}", f"d_model={HAND_D}",
             "heads=2", f"seq_len={HAND_T}", f"batch_size={HAND_B}", f"seed={HAND_SEED}", "steps=2", "warmup=0",
             "schedule=constant", "log_every=1", "eval_batches=1", "threads=1", "log.progress=off",
             "placement=post,pre,deepnorm", "checkpoint_every=1", "keep_checkpoints=2",
             "device=cpu",  # the hand computation is float32 on the CPU; a GPU's bf16 autocast is ~1e-4 off
             f"hydra.sweep.dir={sweep}", "hydra.sweep.subdir=${placement.name}"], cli_environment(root / "cache"))
    return corpus, sweep


@pytest.mark.parametrize("placement", ["post", "pre", "deepnorm"])
def test_logged_values_equal_a_hand_computation(hand_runs, placement):
    """Step 0 of a real run against the same model rebuilt here, measured with forward hooks."""
    corpus, sweep = hand_runs
    run = sweep / placement
    assert read_summary(run)["placement"] == placement
    L, d, T, B, seed = HAND_L, HAND_D, HAND_T, HAND_B, HAND_SEED
    scalars = read_scalars(run)

    # rebuild: the trainer seeds the global RNG with `seed`, then builds the model;
    # the first batch comes from a generator seeded with `seed`
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    model = GPT(ModelConfig(vocab_size=256, seq_len=T, layers=L, d_model=d, heads=2, placement=placement))
    theta0 = {k: v.detach().clone().double() for k, v in model.state_dict().items()}
    text = corpus.read_text()
    text += "" if text.endswith("\n") else "\n"  # files are joined as lines
    train_text = text[: len(text) - round(0.1 * len(text))]  # data=text: the last 10% is validation
    train_tokens = np.frombuffer(train_text.encode(), dtype=np.uint8)
    x, y = get_batch(train_tokens, B, T, torch.Generator().manual_seed(seed))

    outputs = {"block": [], "attn": [], "mlp": [], "qkv": []}
    for block in model.blocks:
        block.attn.sublayer.qkv.register_forward_hook(lambda m, i, o: outputs["qkv"].append(o.detach().double()))
        block.register_forward_hook(lambda m, i, o: outputs["block"].append(o.detach().double()))
        block.attn.register_forward_hook(lambda m, i, o: outputs["attn"].append(o[1].detach().double()))
        block.mlp.register_forward_hook(lambda m, i, o: outputs["mlp"].append(o[1].detach().double()))
    logits = model(x)[0]
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 256), y.reshape(-1))
    loss.backward()

    def pop_std(t):
        a = t.numpy().ravel()
        return math.sqrt(((a - a.mean()) ** 2).mean())

    assert scalars["train/loss"][0] == pytest.approx(loss.item(), rel=1e-5)
    for i, block in enumerate(model.blocks):
        tag = f"layer_{i:02d}"
        assert scalars[f"act_std/{tag}"][0] == pytest.approx(pop_std(outputs["block"][i]), rel=1e-5)
        assert scalars[f"attn_out_std/{tag}"][0] == pytest.approx(pop_std(outputs["attn"][i]), rel=1e-5)
        assert scalars[f"mlp_out_std/{tag}"][0] == pytest.approx(pop_std(outputs["mlp"][i]), rel=1e-5)
        grad_sq = sum((p.grad.double() ** 2).sum().item() for p in block.parameters())
        assert scalars[f"grad_norm/{tag}"][0] == pytest.approx(math.sqrt(grad_sq), rel=1e-5)
        w = block.mlp.sublayer.fc_out.weight.grad.double()
        assert scalars[f"grad_norm_mlp_out/{tag}"][0] == pytest.approx(w.pow(2).sum().sqrt().item(), rel=1e-5)
    total_sq = sum((p.grad.double() ** 2).sum().item() for p in model.parameters())
    assert scalars["train/grad_norm"][0] == pytest.approx(math.sqrt(total_sq), rel=1e-5)

    # warning signals at step 0: attention logits and entropy of the first row (sequence) of the
    # batch, written out as softmax(q·kᵀ/√d_head) under the causal mask, and the mean
    # log-partition of the logits
    rows, heads = 1, 2
    causal = torch.ones(T, T).tril().bool()
    for i in range(L):
        q, k, _ = outputs["qkv"][i][:rows].split(d, dim=-1)
        q, k = (t.reshape(rows, T, heads, d // heads).transpose(1, 2) for t in (q, k))
        scores = q @ k.transpose(-1, -2) / math.sqrt(d // heads)
        valid = scores[..., causal]  # (rows, heads, T(T+1)/2)
        assert scalars[f"attn_logit_max/layer_{i:02d}"][0] == pytest.approx(valid.abs().max().item(), rel=1e-5)
        attention = torch.softmax(scores.masked_fill(~causal, float("-inf")), -1)
        per_query = -(attention * torch.log(attention.clamp_min(1e-300))).sum(-1)  # (rows, heads, T)
        assert scalars[f"attn_entropy/layer_{i:02d}"][0] == pytest.approx(per_query.mean().item(), rel=1e-5)
        for head in range(heads):
            assert scalars[f"attn_entropy_head/layer_{i:02d}/head_{head:02d}"][0] == pytest.approx(
                per_query[:, head].mean().item(), rel=1e-5)
        assert scalars[f"query_norm/layer_{i:02d}"][0] == pytest.approx(q.norm(dim=-1).mean().item(), rel=1e-5)
        assert scalars[f"key_norm/layer_{i:02d}"][0] == pytest.approx(k.norm(dim=-1).mean().item(), rel=1e-5)
    log_z = torch.log(torch.exp(logits.double()).sum(-1))
    assert scalars["output/log_z"][0] == pytest.approx(log_z.mean().item(), rel=1e-5)
    assert scalars["output/z_loss"][0] == pytest.approx(log_z.pow(2).mean().item(), rel=1e-5)

    # AdamW's moments after its first step (betas 0.9, 0.98): m = 0.1·g and v = 0.02·g², per block
    for i, block in enumerate(model.blocks):
        grads = [p.grad.double() for p in block.parameters()]
        m = 0.1 * math.sqrt(sum(g.pow(2).sum().item() for g in grads))
        v = 0.02 * math.sqrt(sum(g.pow(4).sum().item() for g in grads))
        assert scalars[f"adam_m_norm/layer_{i:02d}"][0] == pytest.approx(m, rel=1e-5)
        assert scalars[f"adam_v_norm/layer_{i:02d}"][0] == pytest.approx(v, rel=1e-5)

    # update_ratio: ‖θ_1 − θ_0‖/‖θ_0‖ per block, θ_1 from the run's checkpoint after step 1
    states = [torch.load(f, weights_only=False) for f in (run / "checkpoints").glob("*.pt")]
    state = next(st for st in states if st["step"] == 1)
    theta1 = {k: v.double() for k, v in state["model"].items()}
    for i in range(L):
        keys = [k for k in theta0 if k.startswith(f"blocks.{i}.") and "running" not in k and "num_batches" not in k]
        delta = math.sqrt(sum(((theta1[k] - theta0[k]) ** 2).sum().item() for k in keys))
        base = math.sqrt(sum((theta0[k] ** 2).sum().item() for k in keys))
        assert scalars[f"update_ratio/layer_{i:02d}"][0] == pytest.approx(delta / base, rel=1e-4)
        matrices = [k for k in keys if theta0[k].dim() >= 2]  # the block's weight matrices only
        rms = math.sqrt(sum(((theta1[k] - theta0[k]) ** 2).sum().item() for k in matrices)
                        / sum(theta0[k].numel() for k in matrices))
        assert scalars[f"update_rms/layer_{i:02d}"][0] == pytest.approx(rms, rel=1e-4)

    # model update at step 1 (logged before that step's update, i.e. at θ_1): ‖h(θ_1) − h(θ_0)‖/‖h(θ_0)‖
    # of the final hidden state on the reference batch, one sequence of validation text (seed + 1)
    val_tokens = np.frombuffer(text[len(train_text):].encode(), dtype=np.uint8)
    probe, _ = get_batch(val_tokens, 1, T, torch.Generator().manual_seed(seed + 1))
    model.load_state_dict({k: v.float() for k, v in theta0.items()})
    with torch.no_grad():
        h0 = model.hidden(probe).double()
        model.load_state_dict(state["model"])
        h1 = model.hidden(probe).double()
    assert scalars["stability/model_update"][1] == pytest.approx(((h1 - h0).norm() / h0.norm()).item(), rel=1e-4)
    assert scalars["stability/model_update"][0] == pytest.approx(0.0, abs=1e-6)


@pytest.mark.slow
def test_divergence_inside_a_multirun_ends_only_that_job(tmp_path, corpus, cli_env):
    sweep = tmp_path / "sweep"
    proc = run_cli(["train", "-m", f"data.files=[{corpus}]", "data=text", *TINY, "steps=15", "log_every=5",
                    "eval_every=5", "warmup=0", "lr=0.001,10000.0,0.002", f"hydra.sweep.dir={sweep}"], cli_env)
    assert proc.returncode == 0
    summaries = {read_summary(p)["lr"]: (p, read_summary(p))
                 for p in sweep.iterdir() if (p / "summary.json").exists()}
    assert sorted(summaries) == [0.001, 0.002, 10000.0]
    for lr in (0.001, 0.002):
        assert summaries[lr][1]["status"] in RAN_TO_THE_END and summaries[lr][1]["steps_completed"] == 15
    run_dir, diverged = summaries[10000.0]
    assert diverged["status"] == "diverged"
    step = diverged["diverged_at_step"]
    assert isinstance(step, int) and 0 < step < 15
    # the per-layer scalars of the diverging step are in TensorBoard, so the user sees which layer blew up
    scalars = read_scalars(run_dir)
    assert all(step in scalars[f"act_std/layer_{i:02d}"] for i in range(2))
    assert all(step in scalars[f"grad_norm/layer_{i:02d}"] for i in range(2))


def test_where_plain_steps_go_unchecked_the_step_that_finds_the_divergence_logs_every_layer(tmp_path, corpus, cli_env):
    """On a GPU only logging steps and evaluations read the loss (divergence.every_step=auto):
    found there, on an H100, the evaluation at step 5 ended the run with no per-layer scalars
    at that step (every plain step before it was unchecked). divergence.every_step=false gives
    a CPU the GPU's path."""
    run = tmp_path / "run"
    proc = run_cli(["train", f"data.files=[{corpus}]", "data=text", *TINY, "steps=15", "log_every=5", "eval_every=5",
                    "warmup=0", "lr=10000.0", "divergence.every_step=false", f"hydra.run.dir={run}"], cli_env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = read_summary(run)
    assert summary["status"] == "diverged"
    step = summary["diverged_at_step"]
    assert step in (5, 10, 15)  # a logging step's or an evaluation's, never a plain step's
    scalars = read_scalars(run)
    assert all(step in scalars[f"act_std/layer_{i:02d}"] for i in range(2))
    assert all(step in scalars[f"grad_norm/layer_{i:02d}"] for i in range(2))


@pytest.mark.parametrize("norm", ["layer", "batch"])
def test_model_update_and_std_against_direct_computation(norm):
    """stability/model_update is ‖h_t − h_0‖/‖h_0‖ of the final hidden state on the reference
    batch, computed in eval mode (BatchNorm on its running statistics), and measuring it leaves
    the model as it found it: train mode, running statistics untouched."""
    from normexp.train.instruments import Instruments, _std

    torch.manual_seed(0)
    model = GPT(ModelConfig(vocab_size=64, seq_len=16, layers=3, d_model=32, heads=2, norm=norm, placement="post"))
    model.train()
    probe = torch.randint(0, 64, (2, 16))
    instruments = Instruments(model)
    instruments.set_reference_batch(probe, _nullcontext)
    model.eval()
    with torch.no_grad():
        h0 = model.hidden(probe).clone()
    model.train()
    with torch.no_grad():  # a stand-in for training: perturb every weight, move the running statistics
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
        model(torch.randint(0, 64, (4, 16)))
    buffers = {k: v.clone() for k, v in model.named_buffers()}
    update = instruments.model_update_size(_nullcontext)["model_update"].item()
    model.eval()
    with torch.no_grad():
        h1 = model.hidden(probe)
    model.train()
    assert update == pytest.approx(((h1 - h0).norm() / h0.norm()).item(), rel=1e-5)
    assert update > 0.01
    assert all(m.training for m in model.modules())
    for k, v in model.named_buffers():
        assert torch.equal(v, buffers[k]), f"the model update's forward changed {k}"

    # the one-pass std against torch's two-pass std, up to a mean of 10 standard deviations
    tensors = [torch.randn(4, 16, 32) * s + m for s, m in [(1.0, 0.0), (0.3, 3.0), (50.0, -2.0), (1e-3, -1e-2)]]
    expected = torch.stack([t.std(correction=0) for t in tensors])
    assert torch.allclose(_std(tensors), expected, rtol=1e-5)


def _nullcontext():
    import contextlib

    return contextlib.nullcontext()


@pytest.mark.parametrize("qk_norm", [False, True])
def test_recording_reads_what_the_model_declares_and_then_detaches(qk_norm):
    """`recording` fills the trace from forward hooks: the stream entering and leaving each
    block, each sublayer's contribution, the queries and keys as the dot product sees them
    (after QK-norm) for the first SIGNAL_ROWS rows, the final hidden state and the logits,
    each against the same quantity computed here by hand. Outside the block no hook is left
    and the forward returns (logits, loss) either way."""
    from normexp.train.instruments import SIGNAL_ROWS, recording

    torch.manual_seed(0)
    model = GPT(ModelConfig(vocab_size=64, seq_len=8, layers=2, d_model=16, heads=2, qk_norm=qk_norm))
    x, y = torch.randint(0, 64, (3, 8)), torch.randint(0, 64, (3, 8))
    with torch.no_grad():
        plain = model(x, y)
        with recording(model) as trace:
            watched = model(x, y)
    assert torch.equal(plain[0], watched[0]) and torch.equal(plain[1], watched[1])
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())

    with torch.no_grad():  # by hand, block by block
        h = (model.tok_emb(x) + model.pos_emb(torch.arange(8))) * math.sqrt(16)
        torch.testing.assert_close(trace["embed"][0], h)
        for i, block in enumerate(model.blocks):
            attn = block.attn.sublayer
            a = block.attn.norm(h)
            q, k, _ = (a @ attn.qkv.weight.t() + attn.qkv.bias).view(3, 8, 3, 2, 8).permute(2, 0, 3, 1, 4)
            if qk_norm:
                q, k = attn.q_norm(q), attn.k_norm(k)
            torch.testing.assert_close(trace["queries"][i], q[:SIGNAL_ROWS])
            torch.testing.assert_close(trace["keys"][i], k[:SIGNAL_ROWS])
            attn_out = attn(a)
            torch.testing.assert_close(trace["attn_out"][i], attn_out)
            h = h + attn_out
            mlp_out = block.mlp.sublayer(block.mlp.norm(h))
            torch.testing.assert_close(trace["mlp_out"][i], mlp_out)
            h = h + mlp_out
            torch.testing.assert_close(trace["block"][i], h)
        torch.testing.assert_close(trace["final"][0], model.final_norm(h))
        torch.testing.assert_close(trace["logits"][0], model.final_norm(h) @ model.tok_emb.weight.t())
    assert model.residual_output_weights()["mlp_out"] == [b.mlp.sublayer.fc_out.weight for b in model.blocks]


def test_the_loop_parts_logging_rule_divergence_guard_and_seed_streams():
    """The logging-step rule, the divergence guard's verdicts and ceiling, and the seed
    streams, each against the rule written out by hand."""
    from normexp.train.loop import SEED_STREAMS, DivergenceGuard, generator, is_logging_step

    assert [s for s in range(25) if is_logging_step(s, 10, 25)] == [0, 10, 20, 24]
    assert [s for s in range(7) if is_logging_step(s, 3, 7)] == [0, 3, 6]
    assert [s for s in range(4) if is_logging_step(s, 1, 4)] == [0, 1, 2, 3]

    guard = DivergenceGuard(max_loss=10.0, every_step=True)
    assert guard.problem(9.0, True) is None
    assert "above the ceiling 10" in guard.problem(11.0, True)
    assert guard.problem(float("nan"), True) == "loss nan" and guard.problem(float("inf"), False) == "loss inf"
    assert guard.problem(9.0, False) == "non-finite gradient"
    assert guard.problem(11.0, True) is not None and guard.max_loss == 10.0  # checking changes nothing
    guard.set_initial_loss(8.0)  # a model that starts high: the ceiling is twice its initial loss
    assert guard.max_loss == 16.0 and guard.problem(11.0, True) is None
    assert DivergenceGuard(10.0, False, initial_loss=3.0).max_loss == 10.0  # never lowered

    # each stream is the run's seed plus its fixed offset (checkpoints and the numerics fixture depend on them)
    assert sorted(SEED_STREAMS.values()) == list(range(len(SEED_STREAMS)))
    for name, offset in SEED_STREAMS.items():
        assert torch.equal(torch.randint(0, 10**6, (4,), generator=generator(5, name)),
                           torch.randint(0, 10**6, (4,), generator=torch.Generator().manual_seed(5 + offset)))
