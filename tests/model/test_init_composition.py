"""Every init composes with every placement's own gain (DeepNorm's β, Sub-LN's √(ln 2N)),
and the mitchell init draws by the block's index: each init × placement is built and the std
of each matrix role, block by block, is held against the formula written out here.

The sample std of n draws has a relative standard error of 1/√(2n) for a normal and less for
the uniform and the truncated normal (lighter tails): 5 of them is the tolerance."""

import math

import pytest
import torch

from normexp.config.compose import compose_config, group_options
from normexp.model import GPT, ModelConfig
from normexp.model.placements import PLACEMENTS, ModelPolicy

D, LAYERS = 64, 3
ROLES = ("query", "key", "value", "attn_out", "mlp_in", "mlp_out")
OUTPUTS = ("attn_out", "mlp_out")  # whose output joins the residual stream

# the gain each placement asks for at LAYERS blocks, by its paper; every other placement: 1
GAINS = {"deepnorm": (8 * LAYERS) ** -0.25,           # DeepNet: β = (8N)^-¼ (decoder-only)
         "subln": math.sqrt(math.log(2 * LAYERS))}    # Magneto: √(ln 2N)


# placements whose model policy acts on the weights once they are drawn (ModelPolicy.after_optimizer_step
# runs then too; nGPT renormalizes every matrix along d_model): each d-long row or column is a unit
# vector, so its entries have std 1/√d whatever the init. From the registry: a new one is picked up.
RENORMALIZED = {name for name, cls in PLACEMENTS.items()
                if cls.model_policy.after_optimizer_step is not ModelPolicy.after_optimizer_step}


def truncated_normal_std(cut: float) -> float:
    """The std of N(0, 1) truncated to ±cut: √(1 − 2·cut·φ(cut)/(2Φ(cut) − 1))."""
    phi = math.exp(-cut * cut / 2) / math.sqrt(2 * math.pi)
    mass = math.erf(cut / math.sqrt(2))  # 2Φ(cut) − 1
    return math.sqrt(1 - 2 * cut * phi / mass)


def base_std(init: str, role: str, block: int, fan_in: int, fan_out: int) -> float:
    """The std an init draws a matrix with at gain 1, from its paper or reference code."""
    if init == "xavier":      # Glorot & Bengio 2010, normal: √(2/(fan_in + fan_out))
        return math.sqrt(2 / (fan_in + fan_out))
    if init == "gpt2":        # Radford et al. 2019: 0.02, the residual outputs 0.02/√(2L)
        return 0.02 / (math.sqrt(2 * LAYERS) if role in OUTPUTS else 1)
    if init == "small":       # Nguyen & Salazar 2019: √(2/(5d))
        return math.sqrt(2 / (5 * D))
    if init == "torchscale":  # nn.Linear's default U(±1/√fan_in): std 1/√(3·fan_in)
        return 1 / math.sqrt(3 * fan_in)
    if init == "mitchell":    # OLMo: 1/√fan_in, the outputs 1/√(2·fan_in·(ℓ+1)); truncated at ±3σ
        std = 1 / math.sqrt(2 * fan_in * (block + 1)) if role in OUTPUTS else 1 / math.sqrt(fan_in)
        return std * truncated_normal_std(3.0)
    raise AssertionError(f"init {init} has no formula here: add it")


def role_matrices(block) -> dict[str, torch.Tensor]:
    attn, mlp = block.attn.sublayer, block.mlp.sublayer
    q, k, v = attn.qkv.weight.detach().split(D)
    return {"query": q, "key": k, "value": v, "attn_out": attn.proj.weight.detach(),
            "mlp_in": mlp.fc_in.weight.detach(), "mlp_out": mlp.fc_out.weight.detach()}


def test_every_init_has_a_formula_here():
    for init in group_options("init"):
        base_std(init, "query", 0, D, D)


@pytest.mark.parametrize("placement", sorted(group_options("placement")))
@pytest.mark.parametrize("init", sorted(group_options("init")))
def test_each_init_times_each_placement_gain_gives_the_formula_std(init, placement):
    torch.manual_seed(0)
    model = GPT(ModelConfig.from_composed(compose_config([f"init={init}", f"placement={placement}", f"d_model={D}", "heads=4",
                                             f"layers={LAYERS}", "seq_len=8"]), 256))
    gain = GAINS.get(placement, 1.0)
    for role in ROLES:
        ratios = []
        for l, block in enumerate(model.blocks):
            w = role_matrices(block)[role]
            role_gain = 1.0 if role in ("query", "key") else gain  # q and k keep gain 1
            std = 1 / math.sqrt(D) if placement in RENORMALIZED else role_gain * base_std(init, role, l, w.shape[1], w.shape[0])
            ratios.append(w.flatten() / std)
        ratios = torch.cat(ratios)
        tolerance = 5 / math.sqrt(2 * ratios.numel())
        assert abs(ratios.std().item() - 1) < tolerance, (init, placement, role, ratios.std().item())


def test_mitchell_output_std_falls_with_the_block_index_and_is_truncated_at_3_sigma():
    """Block ℓ's outputs: 1/√(2·d_in·(ℓ+1)), d_in = d for W_O and 4d for W₂, each matrix alone."""
    torch.manual_seed(0)
    layers = 8
    model = GPT(ModelConfig.from_composed(compose_config(["init=mitchell", "d_model=128", "heads=4", f"layers={layers}",
                                             "seq_len=8"]), 256))
    for l, block in enumerate(model.blocks):
        for w, d_in in ((block.attn.sublayer.proj.weight, 128), (block.mlp.sublayer.fc_out.weight, 512)):
            sigma = 1 / math.sqrt(2 * d_in * (l + 1))
            w = w.detach()
            assert abs(w.std().item() / (sigma * truncated_normal_std(3.0)) - 1) < 5 / math.sqrt(2 * w.numel()), (l, d_in)
            assert w.abs().max().item() <= 3 * sigma * (1 + 1e-6)  # nothing beyond 3σ
            assert w.abs().max().item() > 2.5 * sigma  # but the tails are there
        assert torch.equal(block.attn.sublayer.proj.bias.detach(), torch.zeros(128))
