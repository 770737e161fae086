"""A model of Mamba-2 layers against transformers' `Mamba2ForCausalLM` with the same weights: logits, gradients and
greedy generation (its torch path, token by token with its cache; ours through `prefill` and `step`); the export as
`Mamba2ForCausalLM` and the import of one, both ways, with what has no counterpart refused."""
import json
import pytest
import torch
import transformers as tf
from transformers import Mamba2Config, Mamba2ForCausalLM
from transformers.utils import logging as hf_logging
from longctx_nb.checkpoint import export_model, load_model
from longctx_nb.config import ModelConfig
from longctx_nb.export import export_main, hf_tokenizer
from longctx_nb.data import ByteTokenizer
from longctx_nb.hf import create_model_from_hf, init_from, logit_gap
from longctx_nb.hf import hf_name as _hf_name
from longctx_nb.model import LM, generate

hf_logging.set_verbosity_error()   # its notes that mamba-ssm is missing and its torch path runs
hf_name = lambda k: _hf_name('mamba2', k)   # the name in `Mamba2ForCausalLM`'s state dict of our parameter `k`

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

def export(*argv) -> int:
    "Exit code of `longctx_export argv` run in this process."
    with pytest.raises(SystemExit) as e: export_main([str(a) for a in argv])
    return e.value.code

def randomized(model):
    "`model` with every parameter moved off its init (norms off 1, biases off 0), in eval mode."
    torch.manual_seed(3)
    with torch.no_grad():
        for p in model.parameters(): p.add_(0.05 * torch.randn_like(p))
    return model.eval()

@pytest.mark.parametrize('kw', [dict(ngroups=2, chunk_size=8), dict(tie_embeddings=False, bias=True, conv_bias=False,
                                                                    d_conv=3, rms_norm_eps=1e-6, chunk_size=16)])
def test_export_as_mamba2_and_back(kw, tmp_path):
    "Ours out as `Mamba2ForCausalLM`: loaded by transformers alone, same logits and greedy tokens; imported back equal."
    ours = randomized(LM(ModelConfig(block='mamba2', vocab_size=256, d_model=32, n_layers=2, d_state=8, headdim=16, **kw)))
    export_model(ours, tmp_path / 'ours')
    assert export(tmp_path / 'ours', tmp_path / 'hf', '--tokenizer', 'byte') == 0
    hf = tf.AutoModelForCausalLM.from_pretrained(tmp_path / 'hf').eval()
    c = hf.config
    assert type(hf).__name__ == 'Mamba2ForCausalLM' and tuple(c.time_step_limit) == (0.0, float('inf'))
    assert (c.num_heads, c.head_dim, c.n_groups, c.chunk_size, c.conv_kernel, c.use_bias, c.use_conv_bias,
            c.layer_norm_epsilon, c.tie_word_embeddings) == (4, 16, ours.cfg.ngroups, ours.cfg.chunk_size,
                                                             ours.cfg.d_conv, ours.cfg.bias, ours.cfg.conv_bias,
                                                             ours.cfg.rms_norm_eps, ours.cfg.tie_embeddings)
    assert logit_gap(ours, hf, seq_len=40) < 1e-5
    x = torch.randint(1, 256, (2, 9), generator=torch.Generator().manual_seed(1))
    assert torch.equal(generate(ours, x, 16, temperature=0),
                       hf.generate(x, max_new_tokens=16, do_sample=False, eos_token_id=None, pad_token_id=0,
                                   attention_mask=torch.ones_like(x)))
    assert export('--format', 'safetensors', tmp_path / 'hf', tmp_path / 'back') == 0   # checked at load
    back = load_model(tmp_path / 'back')
    assert back.cfg.block == 'mamba2'
    torch.testing.assert_close(back.state_dict(), ours.state_dict(), atol=0, rtol=0)

def mamba2_folder(d, tie=True, **kw):
    "A tiny random `Mamba2ForCausalLM` (transformers' init, then moved off it) saved in `d` with the byte tokenizer."
    torch.manual_seed(0)
    hf = randomized(Mamba2ForCausalLM(Mamba2Config(
        vocab_size=256, hidden_size=32, num_hidden_layers=2, state_size=8, expand=2, head_dim=8, num_heads=8,
        n_groups=2, chunk_size=8, tie_word_embeddings=tie, **kw)))
    hf.save_pretrained(d); hf_tokenizer(ByteTokenizer()).save_pretrained(d)
    return hf

@pytest.mark.parametrize('tie', [True, False])
def test_import_random_mamba2_folder(tie, tmp_path, capsys):
    "A tiny random `Mamba2ForCausalLM` folder imports and --init_from's it: equal logits (checked at load), greedy tokens."
    hf = mamba2_folder(tmp_path / 'm', tie)
    m, tok = create_model_from_hf(tmp_path / 'm')
    assert "equal Mamba2ForCausalLM's to" in capsys.readouterr().out
    assert isinstance(tok, ByteTokenizer) and logit_gap(m, hf, seq_len=40) < 1e-5
    assert (m.cfg.headdim, m.cfg.ngroups, m.cfg.chunk_size, m.cfg.tie_embeddings) == (8, 2, 8, tie)
    x = torch.randint(1, 256, (1, 7), generator=torch.Generator().manual_seed(2))
    assert torch.equal(generate(m, x, 12, temperature=0), hf.generate(x, max_new_tokens=12, do_sample=False,
                                                                        eos_token_id=None, pad_token_id=0))
    ov, sd, _ = init_from(tmp_path / 'm', say=lambda s: None)
    assert {k: ov[k] for k in ('model.block', 'model.headdim', 'model.ngroups', 'model.d_state')} == {
        'model.block': 'mamba2', 'model.headdim': 8, 'model.ngroups': 2, 'model.d_state': 8}
    torch.testing.assert_close(sd, m.state_dict(), atol=0, rtol=0)

def test_refusals_name_what_has_no_counterpart(tmp_path, capsys):
    "A step-size clamp, another activation, no gated norm, or a layer pattern: exit 2, named, nothing written."
    mamba2_folder(tmp_path / 'm')
    for name, change, says in [('limit', {'time_step_limit': [0.0, 0.5]}, 'time_step_limit=(0.0, 0.5)'),
                               ('act', {'hidden_act': 'gelu'}, "hidden_act='gelu' (ours: 'silu')"),
                               ('norm', {'rms_norm': False}, 'rms_norm=False')]:
        src = tmp_path / name; src.mkdir()
        for f in (tmp_path / 'm').iterdir(): (src / f.name).write_bytes(f.read_bytes())
        (src / 'config.json').write_text(json.dumps({**json.loads((tmp_path / 'm' / 'config.json').read_text()),
                                                     **change}))
        capsys.readouterr()
        assert export('--format', 'safetensors', src, tmp_path / f'out_{name}') == 2, name
        err = capsys.readouterr().err
        assert f'settings our {"mamba2"!r} block cannot represent: {says}' in err and 'Traceback' not in err, err
        assert not (tmp_path / f'out_{name}').exists()
    hybrid = LM(ModelConfig(block='mamba2,vanilla', vocab_size=256, d_model=32, n_layers=2, n_heads=2, d_ff=48,
                            d_state=8, headdim=16))
    export_model(hybrid, tmp_path / 'hybrid')
    assert export(tmp_path / 'hybrid', tmp_path / 'out_hybrid') == 2
    assert "block 'mamba2,vanilla' has no transformers class" in capsys.readouterr().err
    assert not (tmp_path / 'out_hybrid').exists()
    assert export('--format', 'safetensors', tmp_path / 'hybrid', tmp_path / 'out_hybrid') == 0   # ours takes it
