"""The norms of issue 29 and Gemma's embedding scale against hand computations: Gemma's
RMSNorm (weight as 1 + w, w from 0), Derf (γ·erf(α·x + s) + β) and `scale_embeddings`
(√d on the embedded input, or none)."""

import math

import pytest
import torch

from normexp.config.checks import ConfigError
from normexp.config.compose import compose_config
from normexp.launch.preflight import check_job
from normexp.model import GPT, NORMS, ModelConfig

D = 16


def build(*overrides: str) -> GPT:
    torch.manual_seed(0)
    return GPT(ModelConfig.from_composed(compose_config(["d_model=16", "heads=2", "seq_len=8", "layers=2", *overrides]), 256))


def norms_of(model: GPT) -> list[torch.nn.Module]:
    return [m for m in model.modules() if type(m) in NORMS.values()]


# ------------------------------------------------------------------------ rms_gemma

def test_gemma_rmsnorm_starts_as_plain_rmsnorm_with_eps_1e_6():
    model = build("norm=rms_gemma")
    found = norms_of(model)
    assert len(found) == 5 and {type(m).__name__ for m in found} == {"GemmaRMSNorm"}
    x = torch.randn(3, 4, D, generator=torch.Generator().manual_seed(0)) * 0.01  # mean(x²) ≈ 1e-4: ε = 1e-6 shows
    for norm in found:
        assert torch.equal(norm.weight.detach(), torch.zeros(D))  # w from 0: the scale 1 + w starts at 1
        by_hand = x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-6)
        torch.testing.assert_close(norm(x), by_hand, atol=1e-6, rtol=1e-5)
    assert model.settings()["norm"] == {"eps": 1e-6}


def test_gemma_rmsnorm_multiplies_by_one_plus_w():
    norm = NORMS["rms_gemma"](D, eps=1e-6)
    w = torch.linspace(-0.5, 0.7, D)
    with torch.no_grad():
        norm.weight.copy_(w)
    x = torch.randn(2, 3, D, generator=torch.Generator().manual_seed(1)) * 3
    rms = torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(norm(x), x / rms * (1 + w), atol=1e-6, rtol=1e-5)
    # a weight of −1 zeroes its feature (the 1 + w form; a plain γ = −1 would flip it)
    with torch.no_grad():
        norm.weight[3] = -1.0
    assert norm(x)[..., 3].abs().max() == 0


def test_gemma_rmsnorm_computes_in_float32_and_casts_back():
    norm = NORMS["rms_gemma"](D, eps=1e-6)
    with torch.no_grad():
        norm.weight.fill_(0.3)
    x = (torch.randn(2, 3, D, generator=torch.Generator().manual_seed(2)) * 50).bfloat16()
    y = norm(x)
    assert y.dtype == torch.bfloat16
    x32 = x.float()
    want = (x32 / torch.sqrt((x32 * x32).mean(-1, keepdim=True) + 1e-6) * 1.3).bfloat16()
    assert torch.equal(y, want)


# ------------------------------------------------------------------------------ derf

def test_derf_starts_as_erf_of_half_x():
    model = build("norm=derf")
    found = norms_of(model)
    assert len(found) == 5 and {type(m).__name__ for m in found} == {"DynamicErf"}
    x = torch.randn(2, 3, D, generator=torch.Generator().manual_seed(3)) * 2
    for norm in found:
        want = torch.tensor([math.erf(0.5 * v) for v in x.flatten().tolist()]).view_as(x)
        torch.testing.assert_close(norm(x), want, atol=1e-6, rtol=1e-5)
    assert model.settings()["norm"] == {"init_alpha": 0.5, "init_shift": 0.0}


def test_derf_is_gamma_erf_alpha_x_plus_s_plus_beta_elementwise():
    """Every element by math.erf: γ_j·erf(α·x_ij + s) + β_j, α and s scalars."""
    norm = NORMS["derf"](D, init_alpha=0.8, init_shift=-0.3)
    assert norm.alpha.item() == pytest.approx(0.8) and norm.shift.item() == pytest.approx(-0.3)
    gamma, beta = torch.linspace(0.5, 2.0, D), torch.linspace(-1.0, 1.0, D)
    with torch.no_grad():
        norm.weight.copy_(gamma)
        norm.bias.copy_(beta)
    x = torch.randn(4, D, generator=torch.Generator().manual_seed(4)) * 3
    y = norm(x)
    for i in range(4):
        for j in range(D):
            want = gamma[j].item() * math.erf(0.8 * x[i, j].item() - 0.3) + beta[j].item()
            assert y[i, j].item() == pytest.approx(want, abs=1e-5)


def test_derf_settings_from_the_command_line_are_the_initial_alpha_and_shift():
    model = build("norm=derf", "norm.init_alpha=1.5", "norm.init_shift=0.25")
    x = torch.randn(2, 3, D, generator=torch.Generator().manual_seed(5))
    for norm in norms_of(model):
        torch.testing.assert_close(norm(x), torch.erf(1.5 * x + 0.25))
    assert model.settings()["norm"] == {"init_alpha": 1.5, "init_shift": 0.25}


# ------------------------------------------------------------------ scale_embeddings

@pytest.mark.parametrize("init, scale_positions", [("xavier", True), ("torchscale", False)])
@pytest.mark.parametrize("scale", [True, False])
def test_scale_embeddings_multiplies_the_embedded_input_by_root_d_or_not(init, scale_positions, scale):
    model = build(f"init={init}", f"scale_embeddings={str(scale).lower()}")
    idx = torch.randint(0, 256, (2, 8), generator=torch.Generator().manual_seed(6))
    tok, pos = model.tok_emb.weight[idx], model.pos_emb.weight[:8]
    root_d = math.sqrt(D) if scale else 1.0
    want = (tok + pos) * root_d if scale_positions else tok * root_d + pos
    with torch.no_grad():
        torch.testing.assert_close(model.embed(idx), want)


def test_scale_embeddings_must_be_true_or_false():
    check_job(compose_config(["scale_embeddings=false"]), {"scale_embeddings"})
    with pytest.raises(ConfigError, match=r"^scale_embeddings=2"):
        check_job(compose_config(["scale_embeddings=2"]), {"scale_embeddings"})
