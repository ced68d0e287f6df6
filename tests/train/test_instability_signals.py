"""The signals of issue 29 for studying instability, each against an independent computation:
per-head attention entropy of hand-made attention, query/key norms, Adam's moment norms
against torch.optim.AdamW's own state, the z-loss and the cross-entropy against torch's
logsumexp and cross_entropy, and the loss-spike rule on synthetic loss sequences."""

import math
import statistics

import pytest
import torch
import torch.nn.functional as F
from conftest import TINY, read_scalars, read_summary, run_cli

from normexp.model import GPT, ModelConfig
from normexp.train.flat_adamw import FlatAdamW
from normexp.train.instruments import Instruments, attention_signals, recording
from normexp.train.spikes import HampelSpikeRule


# ------------------------------------------------------------ attention, by hand

def test_per_head_entropy_and_qk_norms_of_hand_made_attention():
    """T = 4, d_head = 4, two heads. Head 0: q = 0, so every query attends uniformly to its
    t+1 visible keys: entropy log(t+1), mean over t = (log 1 + log 2 + log 3 + log 4)/4.
    Head 1: q_t = s·e_t and k_j = s·e_j, so query t sees logit a = s²/√d_head on key t and 0
    on the t keys before it: p = eᵃ/(eᵃ+t) on itself, 1/(eᵃ+t) on each other key.
    Norms: ‖q‖ is 0 (head 0) and s (head 1); ‖k‖ is c·√d_head (head 0, k all c) and s."""
    T, d, s, c = 4, 4, 3.0, 0.5
    q = torch.zeros(1, 2, T, d)  # (rows, heads, T, d_head)
    k = torch.full((1, 2, T, d), c)
    q[0, 1], k[0, 1] = s * torch.eye(T), s * torch.eye(T)
    # a second block: the two heads swapped
    out = attention_signals([(q, k), (q.flip(1), k.flip(1))])

    uniform = sum(math.log(t + 1) for t in range(T)) / T
    a = s * s / math.sqrt(d)

    def peaked(t):
        p, other = math.exp(a) / (math.exp(a) + t), 1 / (math.exp(a) + t)
        return -p * math.log(p) - t * other * math.log(other)

    sharp = sum(peaked(t) for t in range(T)) / T
    expected = torch.tensor([[uniform, sharp], [sharp, uniform]])
    torch.testing.assert_close(out["attn_entropy_head"], expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out["attn_entropy"], expected.mean(1), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out["query_norm"], torch.full((2,), (0 + s) / 2))
    torch.testing.assert_close(out["key_norm"], torch.full((2,), (c * math.sqrt(d) + s) / 2))
    # off: only the per-block signals of before, with the same values
    plain = attention_signals([(q, k), (q.flip(1), k.flip(1))], extra=False)
    assert set(plain) == {"attn_logit_max", "attn_entropy"}
    torch.testing.assert_close(plain["attn_entropy"], out["attn_entropy"])


def test_qk_norms_and_head_entropy_recomputed_from_the_weights():
    """A tiny model's logged query/key norms and per-head entropies against q and k computed
    here from the QKV weights of block 0 and 1 (the same rows the instruments read)."""
    from normexp.train.instruments import SIGNAL_ROWS

    torch.manual_seed(0)
    T, d, heads = 8, 16, 2
    model = GPT(ModelConfig(vocab_size=64, seq_len=T, layers=2, d_model=d, heads=heads))
    x, y = torch.randint(0, 64, (3, T)), torch.randint(0, 64, (3, T))
    instruments = Instruments(model)
    with torch.no_grad(), recording(model) as trace:
        _, loss = model(x, y)
    values = instruments.read(instruments.activations(trace))
    with torch.no_grad():
        h = model.embed(x)
        for i, block in enumerate(model.blocks):
            attn = block.attn.sublayer
            a = block.attn.norm(h)[:SIGNAL_ROWS].double()
            q, k, _ = (a @ attn.qkv.weight.double().t() + attn.qkv.bias.double()).split(d, dim=-1)
            q, k = (t.reshape(SIGNAL_ROWS, T, heads, d // heads) for t in (q, k))  # (rows, T, heads, d_head)
            assert values["query_norm"][i] == pytest.approx(q.norm(dim=-1).mean().item(), rel=1e-5)
            assert values["key_norm"][i] == pytest.approx(k.norm(dim=-1).mean().item(), rel=1e-5)
            for head in range(heads):
                entropies = []
                for t in range(T):
                    logits = [(q[0, t, head] @ k[0, j, head]).item() / math.sqrt(d // heads) for j in range(t + 1)]
                    z = math.log(sum(math.exp(v) for v in logits))
                    entropies.append(-sum(math.exp(v - z) * (v - z) for v in logits))
                assert values["attn_entropy_head"][i][head] == pytest.approx(statistics.fmean(entropies), rel=1e-5)
            h = block(h)


# ------------------------------------------------------------ z-loss and cross-entropy

@pytest.mark.parametrize("z_loss", [0.0, 1e-2])
def test_z_loss_and_cross_entropy_against_torch(z_loss):
    """output_z_loss = mean (logsumexp of the logits)² from torch.logsumexp; with z_loss = c > 0,
    cross_entropy = F.cross_entropy, and the objective = cross_entropy + c·output_z_loss."""
    torch.manual_seed(1)
    model = GPT(ModelConfig(vocab_size=64, seq_len=8, layers=1, d_model=16, heads=2))
    x, y = torch.randint(0, 64, (3, 8)), torch.randint(0, 64, (3, 8))
    instruments = Instruments(model)
    with torch.no_grad(), recording(model) as trace:
        logits, loss = model(x, y, z_loss=z_loss)
    values = instruments.read(instruments.activations(trace, targets=y, z_loss=z_loss))
    logits = logits.double()
    z = torch.logsumexp(logits, dim=-1).pow(2).mean().item()
    assert values["output_z_loss"] == pytest.approx(z, rel=1e-5)
    if z_loss:
        ce = F.cross_entropy(logits.flatten(0, 1), y.flatten()).item()
        assert values["cross_entropy"] == pytest.approx(ce, rel=1e-5)
        assert loss.item() == pytest.approx(values["cross_entropy"] + z_loss * values["output_z_loss"], rel=1e-5)
    else:
        assert "cross_entropy" not in values  # the loss is the cross-entropy itself


# ------------------------------------------------------------ Adam moments

def _block_norms(model, optimizer, key):
    """Per block, √(Σ ‖state[p][key]‖²) over its parameters, in float64."""
    return [math.sqrt(sum(optimizer.state[p][key].double().pow(2).sum().item() for p in block.parameters()))
            for block in model.blocks]


@pytest.mark.parametrize("flat", [False, True])
def test_adam_moment_norms_against_torch_adamw_state(flat):
    """Three steps of torch.optim.AdamW and of FlatAdamW on the same model and gradients: the
    instruments' per-block ‖m‖ and ‖v‖ of either optimizer equal the norms of torch AdamW's
    own exp_avg and exp_avg_sq; after one step, by hand: m = (1−β₁)·g, v = (1−β₂)·g²."""
    torch.manual_seed(2)
    cfg = ModelConfig(vocab_size=64, seq_len=8, layers=3, d_model=16, heads=2)
    reference, model = GPT(cfg), GPT(cfg)
    model.load_state_dict(reference.state_dict())
    betas = (0.9, 0.98)
    torch_adamw = torch.optim.AdamW(reference.parameters(), lr=1e-2, betas=betas)
    make = FlatAdamW if flat else torch.optim.AdamW
    optimizer = make(model.parameters(), lr=1e-2, betas=betas)
    assert not getattr(optimizer, "per_tensor", False)  # the flat path itself, where flat
    instruments = Instruments(model)
    for step in range(3):
        x, y = torch.randint(0, 64, (2, 8)), torch.randint(0, 64, (2, 8))
        for m, opt in ((reference, torch_adamw), (model, optimizer)):
            opt.zero_grad()
            m(x, y)[1].backward()
        grads = [[p.grad.double().clone() for p in b.parameters()] for b in reference.blocks]
        torch_adamw.step()
        optimizer.step()
        values = instruments.read(instruments.adam_moments(optimizer))
        for key, name in (("exp_avg", "adam_m_norm"), ("exp_avg_sq", "adam_v_norm")):
            assert values[name] == pytest.approx(_block_norms(reference, torch_adamw, key), rel=1e-5)
        if step == 0:
            m_hand = [(1 - betas[0]) * math.sqrt(sum(g.pow(2).sum().item() for g in gs)) for gs in grads]
            v_hand = [(1 - betas[1]) * math.sqrt(sum(g.pow(4).sum().item() for g in gs)) for gs in grads]
            assert values["adam_m_norm"] == pytest.approx(m_hand, rel=1e-5)
            assert values["adam_v_norm"] == pytest.approx(v_hand, rel=1e-5)


def test_extra_signals_off_leaves_the_instruments_as_before():
    torch.manual_seed(3)
    model = GPT(ModelConfig(vocab_size=64, seq_len=8, layers=2, d_model=16, heads=2))
    optimizer = torch.optim.AdamW(model.parameters())
    x, y = torch.randint(0, 64, (2, 8)), torch.randint(0, 64, (2, 8))
    instruments = Instruments(model, extra_signals=False)
    with recording(model) as trace:
        loss = model(x, y, z_loss=1e-3)[1]
    loss.backward()
    values = instruments.collect(loss, trace, targets=y, z_loss=1e-3)
    instruments.before_step()
    optimizer.step()
    values.update(instruments.after_step(optimizer))
    new = {"attn_entropy_head", "query_norm", "key_norm", "output_z_loss", "cross_entropy", "adam_m_norm",
           "adam_v_norm"}
    assert not new & set(values) and {"attn_entropy", "output_log_z", "update_rms"} <= set(values)


# ------------------------------------------------------------ the loss-spike rule

RULE = HampelSpikeRule(window=20, k=5.0, floor=0.01, min_points=5)


def test_the_threshold_by_hand():
    """previous 1..5: median 3, |x − 3| = 2,1,0,1,2 so MAD 1, s = max(1.4826·1, 0.01·3):
    threshold 3 + 5·1.4826 = 10.413. A flat 2.0: MAD 0, s = floor·median = 0.02: 2.1."""
    assert RULE.threshold([1, 2, 3, 4, 5]) == pytest.approx(10.413)
    assert RULE.threshold([2.0] * 8) == pytest.approx(2.1)
    assert RULE.threshold([2.0] * 4) is None  # fewer than min_points: no verdict
    # only the last `window` points count: 30 old points at 9.0 are out of a window of 20
    assert RULE.threshold([9.0] * 30 + [2.0] * 20) == pytest.approx(2.1)


def test_a_flat_sequence_has_no_spike():
    assert RULE.onsets([3.0] * 100) == []
    wobble = [3.0 + 0.001 * (-1) ** i for i in range(100)]  # below the 1 % floor
    assert RULE.onsets(wobble) == []


def test_one_injected_jump_is_one_spike_at_its_step():
    losses = [3.0 + 0.01 * math.sin(i) for i in range(60)]
    losses[37] = 4.0
    assert RULE.onsets(losses) == [37]


def test_a_jump_that_stays_up_a_while_counts_once():
    losses = [3.0] * 40 + [4.5] * 3 + [3.0] * 20
    assert RULE.onsets(losses) == [40]


def test_a_smooth_decline_has_no_spike():
    decline = [5.0 * math.exp(-i / 30) + 1.5 for i in range(200)]
    assert RULE.onsets(decline) == []
    # with batch noise of ±1 % (fixed pattern) as well
    noisy = [v * (1 + 0.01 * math.sin(7 * i)) for i, v in enumerate(decline)]
    assert RULE.onsets(noisy) == []


def test_a_run_counts_and_marks_its_spikes(tmp_path, corpus, cli_env):
    """A real run with loss_spike.window=1, min_points=1, floor=0: the threshold is the logged
    loss before (MAD 0), so a logged loss above the one before it is above the rule, and an
    onset when the one before was not above its own predecessor. The run's summary and its
    TensorBoard flags against that rule applied here to its logged train/loss."""
    run = tmp_path / "run"
    run_cli(["train", f"data.files=[{corpus}]", "data=text", *TINY, "steps=40", "log_every=2", "eval_every=40",
             "lr=1e-2", "warmup=0", "loss_spike.window=1", "loss_spike.min_points=1", "loss_spike.floor=0",
             f"hydra.run.dir={run}"], cli_env)
    scalars = read_scalars(run)
    steps = sorted(scalars["train/loss"])
    loss = [scalars["train/loss"][s] for s in steps]
    up = [i > 0 and loss[i] > loss[i - 1] for i in range(len(loss))]
    onsets = [steps[i] for i in range(len(loss)) if up[i] and not up[i - 1]]
    assert onsets, "the loss never rose between two logging steps: the test shows nothing"
    summary = read_summary(run)
    assert summary["loss_spike_steps"] == onsets and summary["loss_spikes"] == len(onsets)
    assert sorted(scalars["train/loss_spike"]) == steps[1:]  # step 0 has no loss before it: not judged
    assert summary["loss_spikes_judged_from"] == steps[1]
    assert [s for s in steps if scalars["train/loss_spike"].get(s) == 1.0] == onsets
    assert all(scalars["train/loss_spike_threshold"][s] == pytest.approx(loss[i - 1]) for i, s in enumerate(steps) if i)


def test_the_loops_spike_count_continues_across_a_resume():
    """The run log's bookkeeping (RunLog.check_spike) over 40 logged losses with jumps at the
    logging steps 120 and 300-310 (one spike of two points): two spikes, flagged at 120 and 300.
    Stopped at step 190 and resumed from the summary a checkpoint keeps, it counts the same."""
    import copy
    from types import SimpleNamespace

    from normexp.runs.schema import LOSS_TRAJECTORY, TRAIN_LOSS_SPIKE
    from normexp.train.run_log import RunLog

    losses = [3.0 + 0.01 * math.sin(i) for i in range(40)]
    losses[12], losses[30], losses[31] = 4.0, 4.5, 4.4
    points = [(10 * i, v) for i, v in enumerate(losses)]

    def log(points, summary):
        trainer = SimpleNamespace(spike_rule=RULE, summary=summary)
        flags = []
        for step, loss in points:
            summary[LOSS_TRAJECTORY]["train"].append([step, loss])
            flags.append(RunLog.check_spike(trainer, summary[LOSS_TRAJECTORY]["train"]).get(TRAIN_LOSS_SPIKE))
        return flags

    fresh = lambda: {LOSS_TRAJECTORY: {"train": []}, "loss_spikes": None, "loss_spikes_judged_from": "never",  # noqa: E731
                     "loss_spike_steps": []}
    whole = fresh()
    flags = log(points, whole)
    assert whole["loss_spikes"] == 2 and whole["loss_spike_steps"] == [120, 300]
    # RULE.min_points losses before it: the first judged is the (min_points + 1)-th, at step 10·min_points
    assert whole["loss_spikes_judged_from"] == 10 * RULE.min_points
    assert flags[:RULE.min_points] == [None] * RULE.min_points and flags[RULE.min_points] == 0.0
    assert [step for (step, _), f in zip(points, flags) if f] == [120, 300]
    first = fresh()
    log(points[:20], first)
    resumed = copy.deepcopy(first)  # what the checkpoint's summary holds
    log(points[20:], resumed)
    assert resumed == whole


def test_a_rule_that_never_judged_says_so_not_zero():
    """RunLog.check_spike on fewer losses than the rule needs (min_points before one): no flag
    and no threshold tag at any step, loss_spikes stays null and judged_from "never"; one more
    loss and it judges: 0 spikes from that step, both tags written there."""
    from types import SimpleNamespace

    from normexp.runs.schema import LOSS_TRAJECTORY, TRAIN_LOSS_SPIKE, TRAIN_LOSS_SPIKE_THRESHOLD
    from normexp.train.run_log import RunLog

    summary = {LOSS_TRAJECTORY: {"train": []}, "loss_spikes": None, "loss_spikes_judged_from": "never",
               "loss_spike_steps": []}
    trainer = SimpleNamespace(spike_rule=RULE, summary=summary)
    for i in range(RULE.min_points):  # 200 steps at log_every=50 log exactly this many (0, 50, ..., 199)
        summary[LOSS_TRAJECTORY]["train"].append([50 * i, 3.0 - 0.1 * i])
        assert RunLog.check_spike(trainer, summary[LOSS_TRAJECTORY]["train"]) == {}
    assert summary["loss_spikes"] is None and summary["loss_spikes_judged_from"] == "never"
    summary[LOSS_TRAJECTORY]["train"].append([250, 2.4])
    tags = RunLog.check_spike(trainer, summary[LOSS_TRAJECTORY]["train"])
    assert tags[TRAIN_LOSS_SPIKE] == 0.0 and tags[TRAIN_LOSS_SPIKE_THRESHOLD] > 2.4
    assert summary["loss_spikes"] == 0 and summary["loss_spikes_judged_from"] == 250


def test_a_run_too_short_to_judge_records_null(tmp_path, corpus, cli_env):
    """A real 20-step run at log_every=5 logs 5 losses (0, 5, 10, 15, 19): the default rule
    (min_points 5) never judges. summary.json: loss_spikes null, judged_from "never"; TensorBoard:
    no train/loss_spike, no threshold, no hparams/loss_spikes (HParams shows it blank)."""
    run = tmp_path / "run"
    run_cli(["train", f"data.files=[{corpus}]", "data=text", *TINY, "steps=20", "log_every=5", "eval_every=20",
             f"hydra.run.dir={run}"], cli_env)
    summary = read_summary(run)
    assert summary["loss_spikes"] is None and summary["loss_spikes_judged_from"] == "never"
    scalars = read_scalars(run)
    assert sorted(scalars["train/loss"]) == [0, 5, 10, 15, 19]
    assert not {"train/loss_spike", "train/loss_spike_threshold"} & set(scalars)
    metrics = read_scalars(run / "hparams")  # the HParams sub-run: its metrics
    assert "hparams/final_val_loss" in metrics and "hparams/loss_spikes" not in metrics
