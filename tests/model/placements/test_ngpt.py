"""The ngpt placement (normexp/model/placements/ngpt.py, configs/placement/ngpt.yaml): its
formulas against hand computations. SHAPE and SETTINGS, worked out by hand, are read by the
tests every placement passes (tests/model/test_placements.py, test_wiring, test_presets) through
tests/conftest.py's `placement_expectations`.

nGPT (Loshchilov et al. 2024; NVIDIA/ngpt): h ← n(h + α⊙(n(F(h)) − h)), n = L2-normalize;
q, k per head s_qk⊙n(·) with softmax scale √d_head; the MLP's pre-activation ×s_v·√d;
logits ×s_z; every matrix unit-norm along d_model after each optimizer step; no weight decay."""

import math

import torch
import torch.nn.functional as F

from model_helpers import D, StandIn, make_ln
from normexp.config.compose import compose_config
from normexp.model import GPT, NORMS, PLACEMENTS, ModelConfig
from normexp.model.layers import MLP, CausalSelfAttention
from normexp.config.run_config import OptimizerConfig
from normexp.train.config import TrainConfig
from normexp.train.loop import Trainer, make_optimizer


# (norms per block, whether the model adds a final norm): no norm layers at all
SHAPE = (0, False)
# its resolved settings at 2 blocks (summary.json's placement_settings): α's start
SETTINGS = {"alpha_init": 0.05}


def n(x, dim=-1):
    """L2-normalize, written out."""
    return x / torch.sqrt((x * x).sum(dim, keepdim=True))


def make_ln(width=D):
    return NORMS["layer"](width, eps=1e-5)


def test_ngpt_sublayer_moves_the_unit_stream_towards_the_unit_output():
    f = StandIn()
    layer = PLACEMENTS["ngpt"](f, make_ln, index=0, depth=4, alpha_init=0.05)
    h = n(torch.randn(2, 5, D, generator=torch.Generator().manual_seed(0)))
    new, out = layer(h)
    want = n(h + 0.05 * (n(f(h)) - h))
    torch.testing.assert_close(new, want, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(out, want - h, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(new.norm(dim=-1), torch.ones(2, 5))
    # α per feature, learned: the parameter is used as |param|·α_init·√d (it starts at 1/√d)
    alpha = torch.linspace(-0.3, 0.5, D)
    with torch.no_grad():
        layer.alpha.param.copy_(alpha / (0.05 * math.sqrt(D)))
    torch.testing.assert_close(layer(h)[0], n(h + alpha.abs() * (n(f(h)) - h)), atol=1e-6, rtol=1e-5)


def test_ngpt_attention_is_scaled_cosines_with_softmax_scale_root_d_head():
    torch.manual_seed(0)
    attn = CausalSelfAttention(ModelConfig(d_model=D, heads=2))
    layer = PLACEMENTS["ngpt"](attn, make_ln, index=0, depth=4, alpha_init=0.05)
    s_qk = torch.linspace(0.5, 1.5, D).view(2, 1, D // 2)  # per head and feature
    with torch.no_grad():
        for m in (attn.q_norm, attn.k_norm):
            m.s.param.copy_(s_qk / math.sqrt(D))  # used as param·1·√d
        attn.qkv.bias.normal_()
    x = torch.randn(2, 6, D)
    q, k, v = (x @ attn.qkv.weight.t() + attn.qkv.bias).split(D, dim=-1)
    q, k, v = (t.view(2, 6, 2, D // 2).transpose(1, 2) for t in (q, k, v))
    q, k = s_qk * n(q), s_qk * n(k)
    scores = (q @ k.transpose(-1, -2)) * math.sqrt(D // 2)  # √d_head, not 1/√d_head
    scores = scores.masked_fill(torch.ones(6, 6, dtype=torch.bool).triu(1), float("-inf"))
    y = (torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(2, 6, D)
    torch.testing.assert_close(attn(x), y @ attn.proj.weight.t() + attn.proj.bias, atol=1e-5, rtol=1e-5)


def test_ngpt_mlp_scales_its_pre_activation_by_s_v_root_d():
    torch.manual_seed(0)
    mlp = MLP(ModelConfig(d_model=D, heads=2))
    PLACEMENTS["ngpt"](mlp, make_ln, index=0, depth=4, alpha_init=0.05)
    s_v = torch.linspace(0.5, 2.0, 4 * D)
    with torch.no_grad():
        mlp.act_scale.s.param.copy_(s_v)
    x = torch.randn(3, 4, D)
    hidden = F.gelu((x @ mlp.fc_in.weight.t() + mlp.fc_in.bias) * s_v * math.sqrt(D))
    torch.testing.assert_close(mlp(x), hidden @ mlp.fc_out.weight.t() + mlp.fc_out.bias, atol=1e-5, rtol=1e-5)


def unit_along_d_model(model: GPT) -> bool:
    outputs = {id(w) for ws in model.residual_output_weights().values() for w in ws}
    for name, p in model.named_parameters():
        if p.dim() == 2:
            norms = p.detach().norm(dim=0 if id(p) in outputs else 1)
            if not torch.allclose(norms, torch.ones_like(norms), atol=1e-5):
                return False
    return True


def test_ngpt_model_is_unit_norm_throughout_and_scales_the_logits():
    torch.manual_seed(0)
    model = GPT(ModelConfig(layers=2, d_model=D, heads=2, seq_len=8, placement="ngpt"))
    assert unit_along_d_model(model)  # from the start: embeddings' and inputs' rows, outputs' columns
    assert model.blocks[0].mlp.sublayer.fc_out.weight.shape == (D, 4 * D)  # columns along d_model there
    idx = torch.randint(0, 256, (2, 8))
    with torch.no_grad():
        h = n(model.embed(idx))  # the embedded input, normalized as it enters
        for block in model.blocks:
            for wrapper in (block.attn, block.mlp):
                h = n(h + 0.05 * (n(wrapper.sublayer(h)) - h))
        torch.testing.assert_close(model.hidden(idx), h, atol=1e-5, rtol=1e-5)  # no final norm
        s_z = torch.linspace(1, 3, 256)
        model.logit_scale.s.param.copy_(s_z / math.sqrt(D))
        torch.testing.assert_close(model(idx)[0], (h @ model.tok_emb.weight.t()) * s_z, atol=1e-5, rtol=1e-5)


def test_ngpt_optimizer_has_no_weight_decay_and_the_step_hook_renormalizes():
    cfg = compose_config(["placement=ngpt", "layers=2", "d_model=16", "heads=2", "seq_len=8", "lr=0.05",
                          "optim.weight_decay=0.1"])
    torch.manual_seed(0)
    model = GPT(ModelConfig.from_composed(cfg, 256))
    opt = make_optimizer(model, OptimizerConfig.from_composed(cfg))
    assert all(g["weight_decay"] == 0.0 for g in opt.param_groups)
    idx = torch.randint(0, 256, (2, 8))
    model(idx, idx)[1].backward()
    opt.step()
    stepped = {name: p.detach().clone() for name, p in model.named_parameters()}
    assert not unit_along_d_model(model)  # AdamW moved the matrices off the sphere
    model.after_optimizer_step()
    assert unit_along_d_model(model)
    outputs = {id(w) for ws in model.residual_output_weights().values() for w in ws}
    for name, p in model.named_parameters():  # each matrix divided by its own norms, nothing else
        want = n(stepped[name], dim=0 if id(p) in outputs else 1) if p.dim() == 2 else stepped[name]
        torch.testing.assert_close(p.detach(), want, atol=1e-6, rtol=1e-5, msg=name)


def test_the_trainer_renormalizes_after_its_optimizer_step(tmp_path, monkeypatch):
    from conftest import TINY, make_corpus

    from normexp.train.loop import Hooks, Trainer

    monkeypatch.setenv("NORMEXP_CACHE", str(tmp_path / "cache"))
    corpus = make_corpus(tmp_path / "corpus.txt", n_bytes=20_000)
    cfg = compose_config([*TINY, "placement=ngpt", "data=text", f"data.files=[{corpus}]", "steps=3", "warmup=0",
                          "lr=0.05", "log.model_update=false", "log.progress=off", "checkpoint_every=0"])
    threads = torch.get_num_threads()
    (tmp_path / "run").mkdir()
    trainer = Trainer(TrainConfig.from_composed(cfg), tmp_path / "run", Hooks())
    try:
        before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
        trainer.train_step()
        moved = any(not torch.equal(before[name], p.detach()) for name, p in trainer.model.named_parameters())
        assert moved and unit_along_d_model(trainer.model)
    finally:
        trainer.writer.close()
        trainer.progress.close()
        torch.set_num_threads(threads)
