"""A model of Mamba-2 layers against transformers' `Mamba2ForCausalLM` with the same weights: logits, gradients and
greedy generation (its torch path, token by token with its cache; ours through `prefill` and `step`)."""
import pytest
import torch
from transformers import Mamba2Config, Mamba2ForCausalLM
from transformers.utils import logging as hf_logging
from longctx_nb.config import ModelConfig
from longctx_nb.model import LM, generate

hf_logging.set_verbosity_error()   # its notes that mamba-ssm is missing and its torch path runs

def hf_name(k: str) -> str:
    "The name in `Mamba2ForCausalLM`'s state dict of our `LM` parameter `k`."
    if k.startswith('blocks.'):
        _, i, rest = k.split('.', 2)
        return f'backbone.layers.{i}.' + ('norm.weight' if rest == 'norm1.weight' else rest)
    return {'embed.weight': 'backbone.embeddings.weight', 'norm.weight': 'backbone.norm_f.weight',
            'head.weight': 'lm_head.weight'}[k]

@pytest.fixture(scope='module', params=[dict(ngroups=1, chunk_size=8), dict(ngroups=2, chunk_size=16)])
def pair(request):
    "Our mamba2 `LM` and transformers' `Mamba2ForCausalLM` with the same random weights (2 layers, width 32)."
    kw = request.param
    torch.manual_seed(0)
    cfg = ModelConfig(block='mamba2', vocab_size=64, d_model=32, n_layers=2, d_state=8, headdim=16, **kw)
    ours = LM(cfg)
    with torch.no_grad():
        for n, p in ours.named_parameters():
            if n.endswith('norm.weight') or n.endswith('norm1.weight'): p.uniform_(0.5, 1.5)
            elif not n.endswith('A_log'): p.add_(0.05 * torch.randn_like(p))
    hf = Mamba2ForCausalLM(Mamba2Config(
        vocab_size=64, hidden_size=32, num_hidden_layers=2, state_size=8, expand=2, head_dim=16, num_heads=4,
        n_groups=kw['ngroups'], chunk_size=kw['chunk_size'], conv_kernel=4, use_bias=False, use_conv_bias=True,
        layer_norm_epsilon=cfg.rms_norm_eps, tie_word_embeddings=True))
    hf.generation_config.eos_token_id = None   # no token ends a sequence: every position is compared
    sd = {hf_name(k): v for k, v in ours.state_dict().items()}
    missing, unexpected = hf.load_state_dict(sd, strict=False)
    assert not unexpected and set(missing) <= {'lm_head.weight'}, (missing, unexpected)   # tied to the embedding
    return ours, hf

def test_logits_and_gradients(pair):
    ours, hf = pair
    idx = torch.randint(0, 64, (2, 37), generator=torch.Generator().manual_seed(1))
    for m in (ours, hf): m.zero_grad(); m.train()
    a = ours(idx); b = hf(idx).logits
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    torch.nn.functional.cross_entropy(a.flatten(0, 1), idx.roll(-1, 1).flatten()).backward()
    torch.nn.functional.cross_entropy(b.flatten(0, 1), idx.roll(-1, 1).flatten()).backward()
    theirs = dict(hf.named_parameters())
    for n, p in ours.named_parameters():
        g = theirs[hf_name(n) if hf_name(n) in theirs else 'backbone.embeddings.weight'].grad
        torch.testing.assert_close(p.grad, g, atol=1e-5, rtol=1e-4, msg=f'gradient of {n}')

def test_greedy_generation(pair):
    ours, hf = pair
    prompt = torch.randint(3, 64, (2, 11), generator=torch.Generator().manual_seed(2))
    want = hf.generate(prompt, max_new_tokens=20, do_sample=False, attention_mask=torch.ones_like(prompt),
                       pad_token_id=0)
    got = generate(ours, prompt, 20, temperature=0)
    assert torch.equal(got, want), (got, want)
