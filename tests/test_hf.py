"""longctx_export end to end: a tiny run exported for transformers (Llama, Mamba) and read back; refusals exit 2 and write nothing."""
import json, os, subprocess, sys
from pathlib import Path
import numpy as np, pytest, torch
from conftest import one_interpreter

tf = pytest.importorskip('transformers')
from longctx_nb.config import Config, apply_overrides
from longctx_nb.checkpoint import load_model
from longctx_nb.data import ByteTokenizer
from longctx_nb.model import generate
from longctx_nb.hf import create_model_from_hf, load_source, logit_gap
from longctx_nb.export import export_main, hf_tokenizer

tf.logging.set_verbosity_error()

def export(*argv) -> int:
    "Exit code of `longctx_export argv` run in this process."
    with pytest.raises(SystemExit) as e: export_main([str(a) for a in argv])
    return e.value.code

@pytest.fixture(scope='module')
def runs(tmp_path_factory):
    "Tiny runs (3 steps on a local text, byte tokenizer) of vanilla, mamba and longformer: block -> run directory."
    from longctx_nb.train import train
    tmp = tmp_path_factory.mktemp('runs')
    (tmp / 'text').mkdir(); (tmp / 'text' / 'a.txt').write_text(Path(json.__file__).read_text() * 4)
    base = {'model.n_layers': 2, 'model.d_model': 64, 'model.n_heads': 4, 'model.d_ff': 96, 'trainer.enable_progress_bar': False,
            'trainer.tensorboard': False, 'trainer.plot': False, 'trainer.default_root_dir': str(tmp / 'runs'),
            'data.dataset_name': 'local', 'data.data_dir': str(tmp / 'text'), 'data.cache_dir': str(tmp / 'cache'),
            'data.seq_len': 32, 'data.batch_size': 4, 'trainer.max_steps': 3, 'model.window_size': 8}
    return {b: train(apply_overrides(Config(), {**base, 'model.block': b, 'trainer.run_name': b}), quiet=True).run_dir
            for b in ('vanilla', 'mamba', 'longformer')}

@pytest.mark.parametrize('block,cls', [('vanilla', 'LlamaForCausalLM'), ('mamba', 'MambaForCausalLM')])
def test_export_loads_in_transformers(runs, tmp_path, block, cls):
    "The exported folder loads with AutoModelForCausalLM and AutoTokenizer alone: same logits, same greedy tokens, same ids."
    ck = sorted((runs[block] / 'checkpoints').glob('step_*.pt'))[-1]
    assert export(ck, tmp_path / 'hf') == 0
    hf = tf.AutoModelForCausalLM.from_pretrained(tmp_path / 'hf')
    tok = tf.AutoTokenizer.from_pretrained(tmp_path / 'hf')
    ours = load_source(ck)[0]
    assert type(hf).__name__ == cls
    assert logit_gap(ours, hf) < 1e-5
    ids = torch.tensor([tok('def dumps(obj')['input_ids']])
    assert ids[0].tolist() == ByteTokenizer().encode('def dumps(obj').tolist()
    assert torch.equal(generate(ours, ids, 12, temperature=0), hf.generate(ids, max_new_tokens=12, do_sample=False))
    back, t = create_model_from_hf(tmp_path / 'hf')      # and back: the same weights and tokenizer
    torch.testing.assert_close(back.state_dict(), ours.state_dict())
    assert isinstance(t, ByteTokenizer)

def test_module_entry_point(runs, tmp_path):
    "python -m longctx_nb.export is the console script; it imports a transformers folder into our format."
    run = lambda *a: subprocess.run([sys.executable, '-m', 'longctx_nb.export', *map(str, a)], capture_output=True, text=True)
    p = run('--format', 'safetensors', runs['mamba'], tmp_path / 'ours')
    assert p.returncode == 0 and 'wrote' in p.stdout, p.stderr
    assert run('--help').stdout.startswith('usage: longctx_export')
    assert run(runs['mamba'], tmp_path / 'hf').returncode == 0
    assert run('--format', 'safetensors', tmp_path / 'hf', tmp_path / 'back').returncode == 0
    torch.testing.assert_close(load_model(tmp_path / 'back').state_dict(), load_model(tmp_path / 'ours').state_dict())

def test_refusals_exit_2_and_write_nothing(runs, tmp_path, capsys):
    "No transformers class, a folder with no model, weights that disagree with their config, settings we cannot represent."
    assert export(runs['longformer'], tmp_path / 'a') == 2
    assert 'longctx_export --format safetensors' in capsys.readouterr().err
    assert export('--format', 'safetensors', runs['longformer'], tmp_path / 'ours') == 0   # the default export works
    (tmp_path / 'empty').mkdir()
    assert export(tmp_path / 'empty', tmp_path / 'b') == 2
    assert 'holds no checkpoint' in capsys.readouterr().err
    assert export(runs['vanilla'], tmp_path / 'hf') == 0
    cfg = json.loads((tmp_path / 'hf' / 'config.json').read_text())
    for name, change, says in [('c', {'intermediate_size': 80}, 'model.layers.0.mlp.gate_proj.weight has shape (96, 64), the config gives (80, 64)'),
                               ('d', {'num_key_value_heads': 3}, 'num_key_value_heads=3 does not divide'),
                               ('e', {'hidden_act': 'gelu'}, "hidden_act='gelu'"),
                               ('f', {'model_type': 'gpt2', 'architectures': ['GPT2LMHeadModel']}, "model type 'gpt2'")]:
        src = tmp_path / f'src_{name}'; src.mkdir()
        for f in (tmp_path / 'hf').iterdir(): (src / f.name).write_bytes(f.read_bytes())
        (src / 'config.json').write_text(json.dumps({**cfg, **change}))
        capsys.readouterr()
        assert export('--format', 'safetensors', src, tmp_path / name) == 2, name
        assert says in capsys.readouterr().err, name
    assert export(tmp_path / 'hf', tmp_path / 'g') == 2                # already a transformers folder
    assert export(runs['vanilla'], tmp_path / 'hf') == 2                # not empty
    assert not any((tmp_path / n).exists() for n in 'abcdefg')
    assert not [p for p in tmp_path.iterdir() if p.name.startswith('.')]   # no temporary folder left behind

def test_without_transformers(tmp_path):
    "The package imports without transformers; using the export says what to install."
    code = ("import sys; sys.modules['transformers'] = None\n"
            "import longctx_nb, longctx_nb.export as h\n"
            "from longctx_nb.model import create_model\n"
            "try: h.save_pretrained(create_model(256, 'tiny', 'mamba', dict(d_model=32, n_layers=1)), sys.argv[1])\n"
            "except h.UsageError as e: print(e)\n")
    p = subprocess.run([sys.executable, '-c', code, str(tmp_path / 'x')], capture_output=True, text=True)
    assert p.returncode == 0 and "pip install 'longctx_nb[hf]'" in p.stdout, p.stdout + p.stderr
    assert not (tmp_path / 'x').exists()

def test_sharded_mamba_with_bpe_tokenizer(tmp_path):
    "A transformers Mamba saved in shards, with a BPE tokenizer: imported with its tokenizer, same logits and greedy tokens."
    from longctx_nb.data import BPETokenizer
    torch.manual_seed(0)
    bpe = BPETokenizer.train(['import json\ndef dumps(obj): return obj\n' * 30], vocab_size=300)
    hf = tf.AutoModelForCausalLM.from_config(tf.MambaConfig(vocab_size=300, hidden_size=48, num_hidden_layers=3, state_size=8,
                                                            use_bias=True, tie_word_embeddings=False)).eval()
    with torch.no_grad():
        for p in hf.parameters(): p.add_(torch.randn_like(p) * 0.05)
    hf.save_pretrained(tmp_path / 'm', max_shard_size='100KB'); hf_tokenizer(bpe).save_pretrained(tmp_path / 'm')
    assert (tmp_path / 'm' / 'model.safetensors.index.json').is_file()
    m, tok = create_model_from_hf(tmp_path / 'm')
    assert isinstance(tok, BPETokenizer) and tok.encode('def dumps').tolist() == bpe.encode('def dumps').tolist()
    assert (m.cfg.block, m.cfg.d_state, m.cfg.bias, m.cfg.tie_embeddings) == ('mamba', 8, True, False)
    assert logit_gap(m, hf) < 1e-5
    x = torch.tensor([bpe.encode('import json\ndef dumps(obj').tolist()])
    assert x.shape[1] >= 4   # transformers 4.x's Mamba cache mishandles prompts shorter than conv_kernel (its own no-cache run differs)
    assert torch.equal(generate(m, x, 10, temperature=0), hf.generate(x, max_new_tokens=10, do_sample=False, eos_token_id=None))

def train_init_from(src, steps, runs, tmp_path, bindir):
    "`longctx_train --init_from src` for `steps` steps at 32 tokens on the text the runs trained on; the finished process."
    return subprocess.run([bindir / 'longctx_train', '--init_from', src, f'--trainer.max_steps={steps}', '--data.seq_len=32',
                           '--data.batch_size=2', '--trainer.default_root_dir', tmp_path / 'runs', '--trainer.enable_progress_bar=false',
                           '--trainer.tensorboard=false', '--trainer.plot=false', '--trainer.eval_interval=0', '--data.dataset_name=local',
                           '--data.data_dir', runs['vanilla'].parent.parent / 'text', '--data.cache_dir', tmp_path / 'cache'],
                          capture_output=True, text=True)

def test_train_init_from_transformers(runs, tmp_path, bindir):
    "longctx_train --init_from a transformers Mamba folder: the model's settings come from it (each printed) and training starts from its weights."
    assert export(runs['mamba'], tmp_path / 'hf') == 0
    p = train_init_from(tmp_path / 'hf', 2, runs, tmp_path, bindir)
    assert p.returncode == 0, p.stderr
    assert "init_from: model.block 'vanilla' -> 'mamba'" in p.stdout and 'model.d_model 128 -> 64' in p.stdout, p.stdout
    trained = load_model(next((tmp_path / 'runs').iterdir()))
    assert trained.cfg.block == 'mamba' and trained.cfg.n_layers == 2
    p = subprocess.run([bindir / 'longctx_train', '--init_from', tmp_path / 'hf', '--resume'], capture_output=True, text=True)
    assert p.returncode == 2 and 'give one of them' in p.stderr and 'Traceback' not in p.stderr

# Run with `python -I` (no PYTHONPATH, no current folder) and longctx_nb made unimportable: transformers alone loads each folder.
LOADER = r"""
import sys, torch
sys.modules['longctx_nb'] = None   # any import of our package now fails
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline
transformers.logging.set_verbosity_error(); transformers.utils.logging.disable_progress_bar()
out = {}
for d in sys.argv[2:]:
    ours = torch.load(f'{d}/ours.pt')
    m, tok = AutoModelForCausalLM.from_pretrained(d).eval(), AutoTokenizer.from_pretrained(d)
    with torch.no_grad(): logits = m(ours['x']).logits
    gen = pipeline('text-generation', model=m, tokenizer=tok)(ours['prompt'], max_new_tokens=12, do_sample=False)[0]['generated_text']
    out[d] = dict(cls=type(m).__name__, gap=((logits - ours['logits']).abs().max() / ours['logits'].abs().max()).item(),
                  gen=m.generate(ours['ids'], max_new_tokens=12, do_sample=False, eos_token_id=None), text=gen,
                  ids={s: tok(s)['input_ids'] for s in ours['texts']})
torch.save(out, sys.argv[1])
print('longctx_nb' in [k.split('.')[0] for k in sys.modules if sys.modules[k] is not None])
"""
TEXTS = ['héllo wörld\n\t 日本語 🙂\r\n', 'def f(x):\n    return x  # <|endoftext|> stays text\n\n', '<|endoftext|>']

def test_separate_interpreter_loads_with_transformers_alone(runs, tmp_path):
    "Two sizes of each block, byte and BPE tokenizers: loaded by transformers in an interpreter that cannot import longctx_nb, same logits, greedy tokens and ids."
    from longctx_nb.data import BPETokenizer
    from longctx_nb.export import save_pretrained
    from longctx_nb.model import create_model
    bpe = BPETokenizer.train([Path(json.__file__).read_text()], vocab_size=320)
    models = {b: (load_source(runs[b])[0], ByteTokenizer()) for b in ('vanilla', 'mamba')}   # 2 layers, d_model 64, trained
    torch.manual_seed(0)
    models['vanilla_bpe'] = (create_model(320, 'tiny', 'vanilla', dict(n_layers=3, d_model=96, n_heads=3, d_ff=160, bias=True,
                                                                      tie_embeddings=False, rope_theta=5e5)), bpe)
    models['mamba_bpe'] = (create_model(320, 'tiny', 'mamba', dict(n_layers=3, d_model=96, d_state=8, expand=3, d_conv=3, dt_rank=5,
                                                                  conv_bias=False, bias=True, tie_embeddings=False)), bpe)
    want = {}
    for name, (m, tok) in models.items():
        m.eval(); d = save_pretrained(m, tmp_path / name, tok, say=None)
        # transformers 4.x reads rope_theta at the top level and knows no TokenizersBackend class: the folder must say both its way
        assert json.loads((d / 'tokenizer_config.json').read_text())['tokenizer_class'] == 'PreTrainedTokenizerFast', name
        assert json.loads((d / 'config.json').read_text()).get('rope_theta') == (m.cfg.rope_theta if 'vanilla' in name else None), name
        x = torch.randint(0, 256, (2, 40), generator=torch.Generator().manual_seed(1))
        ids = torch.tensor([tok.encode('def dumps(obj, *, skipkeys').tolist()])
        with torch.no_grad(): want[str(d)] = dict(x=x, logits=m(x), ids=ids, gen=generate(m, ids, 12, temperature=0),
                                                  prompt='def dumps(obj, *, skipkeys', texts=TEXTS)
        torch.save(want[str(d)], d / 'ours.pt')
    p = subprocess.run([sys.executable, '-I', '-c', LOADER, tmp_path / 'theirs.pt', *want], capture_output=True, text=True,
                       cwd=tmp_path, env={k: v for k, v in os.environ.items() if k != 'PYTHONPATH'})
    assert p.returncode == 0 and p.stdout.strip() == 'False', p.stdout + p.stderr
    got = torch.load(tmp_path / 'theirs.pt')
    for (name, (m, tok)), (d, w) in zip(models.items(), want.items()):
        g = got[d]
        assert g['cls'] == ('LlamaForCausalLM' if name.startswith('vanilla') else 'MambaForCausalLM'), name
        assert g['gap'] < 1e-5, (name, g['gap'])
        assert torch.equal(g['gen'], w['gen']), name
        new = w['gen'][0, w['ids'].shape[1]:].tolist()   # the pipeline stops at the end-of-text id, and drops it from the text
        if tok.eot_id in new: new = new[:new.index(tok.eot_id)]
        assert g['text'] == tok.decode(w['ids'][0].tolist() + new), name
        assert g['ids'] == {s: tok.encode(s).tolist() for s in TEXTS}, name

def test_import_refusals_name_what_differs(tmp_path, capsys):
    "Settings we cannot represent, broken files and folders that hold no model: exit 2, a message naming it, nothing written."
    from safetensors.torch import load_file, save_file
    L = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, rms_norm_eps=1e-5)
    def folder(name, cfg=None, edit=None):
        d = tmp_path / name
        tf.AutoModelForCausalLM.from_config(cfg or tf.LlamaConfig(**L)).save_pretrained(d)
        if edit: edit(d)
        return d
    def reshape(d):
        sd = load_file(d / 'model.safetensors'); sd['model.layers.1.self_attn.k_proj.weight'] = torch.zeros(32, 64)
        save_file(sd, d / 'model.safetensors', metadata={'format': 'pt'})
    cases = [(folder('rope', tf.LlamaConfig(**L, rope_scaling={'rope_type': 'proportional'})),
              "rope scaling 'proportional' (ours: linear, dynamic, yarn, llama3, longrope)"),
             (folder('bias', tf.LlamaConfig(**L, attention_bias=True)), 'attention_bias=True but mlp_bias=False'),
             (folder('head_dim', tf.LlamaConfig(**L, head_dim=32)), 'head_dim=32 x num_attention_heads=4 != hidden_size=64'),
             (folder('act', tf.MambaConfig(vocab_size=256, hidden_size=32, num_hidden_layers=1, hidden_act='gelu')), "hidden_act='gelu' (ours: 'silu')"),
             (folder('gpt2', tf.GPT2Config(vocab_size=256, n_embd=32, n_layer=1, n_head=2)), "model type 'gpt2'"),
             (folder('shape', edit=reshape), 'model.layers.1.self_attn.k_proj.weight has shape (32, 64), the config gives (64, 64)'),
             (folder('sizes', edit=lambda d: (d / 'config.json').write_text('{"model_type": "llama"}')), 'config.json does not set vocab_size'),
             (folder('trunc', edit=lambda d: (d / 'model.safetensors').write_bytes((d / 'model.safetensors').read_bytes()[:999])), 'cannot be read as weights'),
             (folder('tok', edit=lambda d: (d / 'tokenizer.json').write_text('{not json')), 'is not a tokenizer'),
             (folder('json', edit=lambda d: (d / 'config.json').write_text('{"model_type": ')), 'config.json is not valid JSON'),
             (folder('noweights', edit=lambda d: (d / 'model.safetensors').unlink()), 'holds no weights'),
             (tmp_path / 'missing', 'does not exist')]
    (tmp_path / 'empty').mkdir(); cases.append((tmp_path / 'empty', 'holds no checkpoint'))
    for i, (src, says) in enumerate(cases):
        capsys.readouterr()
        assert export('--format', 'safetensors', src, tmp_path / f'out{i}') == 2, src
        err = capsys.readouterr().err
        assert says in err and 'Traceback' not in err, (src, err)
        assert not (tmp_path / f'out{i}').exists()
    eps = folder('eps', tf.MambaConfig(vocab_size=256, hidden_size=32, num_hidden_layers=1, layer_norm_epsilon=1e-6))
    assert export('--format', 'safetensors', eps, tmp_path / 'eps_out') == 0   # its norms' epsilon is our rms_norm_eps
    assert json.loads((tmp_path / 'eps_out' / 'model_config.json').read_text())['rms_norm_eps'] == 1e-6

def test_init_from_llama_tokenizes_text_with_its_tokenizer(runs, tmp_path, bindir):
    "--init_from a Llama whose tokenizer ends documents with </s>: the text is tokenized with it, and a seq_len past max_position_embeddings is said."
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from longctx_nb.data import load_tokenizer
    t = Tokenizer(models.BPE()); t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.train_from_iterator([Path(json.__file__).read_text()], trainers.BpeTrainer(vocab_size=300, special_tokens=['<s>', '</s>'],
                          initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    tf.AutoModelForCausalLM.from_config(tf.LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, rms_norm_eps=1e-5, max_position_embeddings=16, eos_token_id=1)).save_pretrained(tmp_path / 'llama')
    tf.PreTrainedTokenizerFast(tokenizer_object=t, eos_token='</s>').save_pretrained(tmp_path / 'llama')
    p = train_init_from(tmp_path / 'llama', 1, runs, tmp_path, bindir)
    assert p.returncode == 0, p.stderr
    assert "checked: the imported model's logits equal LlamaForCausalLM's" in p.stdout, p.stdout
    assert 'data.seq_len=32 is longer than the 16 tokens its config.json allows (max_position_embeddings)' in p.stdout, p.stdout
    prepared = next((tmp_path / 'cache').glob('*-tok300-*'))
    assert f"init_from: data.data_dir '{runs['vanilla'].parent.parent / 'text'}' -> '{prepared}'" in p.stdout, p.stdout
    tok = load_tokenizer(prepared)
    assert json.loads(tok.tok.to_str())['model'] == json.loads(t.to_str())['model']
    assert json.loads((prepared / 'meta.json').read_text())['eot_id'] == t.token_to_id('</s>')
    assert export(next((tmp_path / 'runs').iterdir()), tmp_path / 'back') == 0   # the run's export ends text with </s> again
    assert tf.AutoTokenizer.from_pretrained(tmp_path / 'back').eos_token == '</s>'
    assert json.loads((tmp_path / 'back' / 'config.json').read_text())['eos_token_id'] == t.token_to_id('</s>')

@pytest.mark.parametrize('family', ['llama3', 'qwen2'])
def test_init_from_llama3_and_qwen2_and_back(family, runs, tmp_path, bindir):
    "--init_from a Llama 3.x-shaped folder (grouped-query, llama3 RoPE scaling, rms_norm_eps=1e-6) or a Qwen2 (q/k/v biases): trained, exported back, equal logits."
    size = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                rms_norm_eps=1e-6, max_position_embeddings=64)
    rope = dict(rope_type='llama3', factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=8)
    c = tf.LlamaConfig(**size, rope_theta=500000.0, rope_scaling=rope) if family == 'llama3' else tf.Qwen2Config(**size)
    hf = tf.AutoModelForCausalLM.from_config(c)
    with torch.no_grad():
        for q in hf.parameters(): q.add_(torch.randn_like(q) * 0.05)   # the q/k/v biases too
    hf.save_pretrained(tmp_path / family); hf_tokenizer(ByteTokenizer()).save_pretrained(tmp_path / family)
    p = train_init_from(tmp_path / family, 1, runs, tmp_path, bindir)
    assert p.returncode == 0, p.stderr
    assert f"checked: the imported model's logits equal {type(hf).__name__}'s" in p.stdout, p.stdout
    run = next((tmp_path / 'runs').iterdir())
    trained = load_model(run)
    assert (trained.cfg.n_kv_heads, trained.cfg.rms_norm_eps, trained.cfg.qkv_bias) == (2, 1e-6, family == 'qwen2')
    assert trained.cfg.rope_scaling == ('llama3' if family == 'llama3' else 'none')
    assert export(run, tmp_path / 'back') == 0
    back = tf.AutoModelForCausalLM.from_pretrained(tmp_path / 'back')
    assert type(back) is type(hf) and logit_gap(trained, back) < 1e-5
    if family == 'llama3': assert {k: back.config.rope_scaling[k] for k in rope} == rope

@pytest.mark.parametrize('rope', [dict(rope_type='dynamic', factor=2.0, original_max_position_embeddings=8),
                                  dict(rope_type='yarn', factor=4.0, original_max_position_embeddings=8),
                                  dict(rope_type='longrope', short_factor=[1.0, 1.5, 2.0, 1.2], long_factor=[1.0, 3.0, 5.0, 9.0],
                                       original_max_position_embeddings=8)])   # longrope's factor: 16 / 8, as Phi-3's
def test_rope_context_where_transformers_reads_it(rope, tmp_path):
    "A folder whose rope_scaling names a context other than max_position_embeddings imports as transformers reads it, and goes back."
    from longctx_nb.export import save_pretrained
    c = tf.LlamaConfig(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                       max_position_embeddings=16, rope_scaling=rope)
    hf = tf.AutoModelForCausalLM.from_config(c).eval()
    hf.save_pretrained(tmp_path / 'hf')
    ours, _ = create_model_from_hf(tmp_path / 'hf', check=False)   # unchecked: the mapping alone must be right
    back = tf.AutoModelForCausalLM.from_pretrained(save_pretrained(ours, tmp_path / 'back', check=False, say=None)).eval()
    x = torch.randint(0, 256, (1, 40), generator=torch.Generator().manual_seed(0))   # past both contexts
    for n in (8, 40):                                                                 # and within them
        with torch.no_grad(): a, b, w = hf(x[:, :n]).logits, ours.eval()(x[:, :n]), back(x[:, :n]).logits
        assert (a - b).norm() / a.norm() < 1e-5 and (a - w).norm() / a.norm() < 1e-5, n

def test_phi3_both_ways(tmp_path, capsys):
    "A tiny random Phi3ForCausalLM (fused q/k/v and gate/up, grouped-query attention, longrope) imports into ours and exports "
    "back as Phi3ForCausalLM: logits equal to transformers' within and past the original context; what does not map is refused."
    torch.manual_seed(0)
    base = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                max_position_embeddings=64, pad_token_id=None, rms_norm_eps=1e-5, rope_theta=500.0)
    rope = dict(rope_type='longrope', short_factor=(1 + torch.rand(8)).tolist(), long_factor=(1 + 8 * torch.rand(8)).tolist())
    hf = tf.Phi3ForCausalLM(tf.Phi3Config(**base, original_max_position_embeddings=16, rope_scaling=rope)).eval()
    with torch.no_grad():
        for q in hf.parameters(): q.add_(torch.randn_like(q) * 0.05)   # the norms too
    hf.save_pretrained(tmp_path / 'phi3'); hf_tokenizer(ByteTokenizer()).save_pretrained(tmp_path / 'phi3')
    assert export('--format', 'safetensors', tmp_path / 'phi3', tmp_path / 'ours') == 0   # imported, checked at load
    assert "checked: the imported model's logits equal Phi3ForCausalLM's" in capsys.readouterr().out
    ours = load_model(tmp_path / 'ours').eval()
    assert (ours.cfg.n_kv_heads, ours.cfg.rope_scaling, ours.cfg.rope_factor, ours.cfg.rope_original_max_position_embeddings) == \
        (2, 'longrope', 4.0, 16)
    assert export(tmp_path / 'ours', tmp_path / 'back', '--tokenizer', 'byte') == 0
    back = tf.AutoModelForCausalLM.from_pretrained(tmp_path / 'back').eval()
    assert type(back) is tf.Phi3ForCausalLM and (back.config.max_position_embeddings, back.config.original_max_position_embeddings) == (64, 16)
    assert json.loads((tmp_path / 'back' / 'config.json').read_text())['rope_scaling'] == \
        {'type': 'longrope', **{k: getattr(ours.cfg, f'rope_{k}') for k in ('short_factor', 'long_factor')}}   # all 4.x takes
    capsys.readouterr()
    assert export(tmp_path / 'ours', tmp_path / 'b48', '--max_position_embeddings', '48') == 0   # 48 / 16: not 4.x's factor
    assert "4.x refuses it: its Phi-3 takes longrope's factor only as max_position_embeddings / " in capsys.readouterr().out
    assert json.loads((tmp_path / 'b48' / 'config.json').read_text())['rope_scaling']['factor'] == 4.0
    assert {k: v.shape for k, v in back.state_dict().items()} == {k: v.shape for k, v in hf.state_dict().items()}
    x = torch.randint(0, 256, (2, 40), generator=torch.Generator().manual_seed(1))
    for n in (12, 40):   # short factors within the original 16 tokens, long ones past them
        with torch.no_grad(): a, b, w = hf(x[:, :n]).logits, ours(x[:, :n]), back(x[:, :n]).logits
        assert (a - b).abs().max() / a.abs().max() < 1e-5 and (a - w).abs().max() / a.abs().max() < 1e-5, n
    cfg = json.loads((tmp_path / 'phi3' / 'config.json').read_text())
    for name, change, says in [('a', {'sliding_window': 32}, 'sliding_window=32 shorter than max_position_embeddings=64'),
                               ('b', {'partial_rotary_factor': 0.5, 'rope_scaling': None, 'rope_parameters': None}, 'partial_rotary_factor=0.5'),
                               ('c', {'sliding_window': 64}, None)]:   # a window as long as the context: full attention there
        src = tmp_path / f'src_{name}'; src.mkdir()
        for f in (tmp_path / 'phi3').iterdir(): (src / f.name).write_bytes(f.read_bytes())
        (src / 'config.json').write_text(json.dumps({**cfg, **change}))
        capsys.readouterr()
        assert export('--format', 'safetensors', src, tmp_path / name) == (0 if says is None else 2), name
        assert says is None or says in capsys.readouterr().err, name

@pytest.mark.parametrize('shape', [
    dict(hidden_size=72, num_attention_heads=9, num_key_value_heads=3, tie_word_embeddings=True, rope_theta=1e5),  # SmolLM2
    dict(hidden_size=128, num_attention_heads=32, num_key_value_heads=4, tie_word_embeddings=False)])             # TinyLlama
def test_smollm2_and_tinyllama_shapes_go_both_ways(shape, tmp_path):
    "SmolLM2's 9 query heads over 3 key/value heads, tied; TinyLlama's 32 over 4, untied: in and out with equal logits."
    from longctx_nb.export import to_hf
    c = tf.LlamaConfig(vocab_size=256, intermediate_size=96, num_hidden_layers=2, rms_norm_eps=1e-5, **shape)
    hf = tf.AutoModelForCausalLM.from_config(c).eval()
    hf.save_pretrained(tmp_path / 'hf')
    ours, _ = create_model_from_hf(tmp_path / 'hf')   # checked at load
    assert (ours.cfg.n_heads, ours.cfg.n_kv_heads, ours.cfg.tie_embeddings) == \
        (shape['num_attention_heads'], shape['num_key_value_heads'], shape['tie_word_embeddings'])
    back = to_hf(ours)
    assert logit_gap(ours, hf) < 1e-5 and logit_gap(ours, back) < 1e-5
    assert (back.config.num_key_value_heads, back.config.tie_word_embeddings) == \
        (shape['num_key_value_heads'], shape['tie_word_embeddings'])

def test_export_refuses_what_the_run_or_format_does_not_read(runs, tmp_path, capsys):
    "A tokenizer that is not the run's, --max_position_embeddings where no config holds it, --no_check where nothing is checked: exit 2, nothing written."
    from longctx_nb.data import BPETokenizer
    BPETokenizer.train(['import json\ndef dumps(obj): return obj\n' * 30], vocab_size=260).save(tmp_path / 'tokenizer.json')
    v, m = runs['vanilla'], runs['mamba']
    for name, argv, says in [
        ('a', (v, '--tokenizer', tmp_path / 'tokenizer.json'), f"--tokenizer {tmp_path / 'tokenizer.json'} is not the tokenizer of "
         f"{v}: the run used ByteTokenizer(vocab_size=256); leave --tokenizer out (auto: the run's) or give that one."),
        ('b', (m, '--max_position_embeddings', 4096), f"--max_position_embeddings is read only for a vanilla model (Llama's context "
         f"length); {m} is a mamba model, whose MambaConfig has none; leave it out."),
        ('c', ('--format', 'safetensors', v, '--max_position_embeddings', 4096), "--max_position_embeddings is read only by --format "
         "hf (a Llama config's context length); --format safetensors writes our model_config.json, which has none; leave it out."),
        ('d', ('--format', 'safetensors', v, '--no_check'), "--no_check skips comparing the logits with transformers', which "
         "--format safetensors makes only when it imports a transformers folder; leave it out.")]:
        capsys.readouterr()
        assert export(*argv, tmp_path / name) == 2, name
        assert says in capsys.readouterr().err, name
    assert not any((tmp_path / n).exists() for n in 'abcd')
    assert export(v, tmp_path / 'e', '--tokenizer', 'byte') == 0     # the run's own tokenizer, named: accepted

def test_bf16_import_says_it_is_stored_in_float32(runs, tmp_path, capsys):
    "A bf16 transformers folder imported into our format: one line says the weights are written in float32, the same values."
    assert export(runs['vanilla'], tmp_path / 'hf') == 0
    hf = tf.AutoModelForCausalLM.from_pretrained(tmp_path / 'hf', torch_dtype=torch.bfloat16)
    hf.save_pretrained(tmp_path / 'bf16')
    capsys.readouterr()
    assert export('--format', 'safetensors', tmp_path / 'bf16', tmp_path / 'ours') == 0
    assert (f"note: the weights in '{tmp_path / 'bf16'}' are bfloat16; the imported model holds (and writes) them in float32, the "
            "same values") in capsys.readouterr().out
    from safetensors.torch import load_file
    w = load_file(tmp_path / 'ours' / 'model.safetensors')
    assert {t.dtype for t in w.values()} == {torch.float32} and torch.equal(w['embed.weight'], hf.model.embed_tokens.weight.float())

def cli(bindir, script, *args, cwd):
    "`script args` run in `cwd`; the finished process, asserted to exit 0."
    p = subprocess.run([str(bindir / script), *map(str, args)], capture_output=True, text=True, cwd=cwd)
    assert p.returncode == 0, f'{script} exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}'
    return p

def test_bpe_tokenizer_follows_the_model(tmp_path, bindir):
    "longctx_prepare with BPE, then train on --data.data_dir: the run, its resume, its export and a run --init_from that export "
    "all read that BPE. The command lines run in turn in one interpreter (`one_interpreter`)."
    (tmp_path / 'texts').mkdir(); (tmp_path / 'texts' / 'a.txt').write_text(Path(json.__file__).read_text() * 3)
    tiny = ['--model.n_layers=1', '--model.d_model=32', '--model.n_heads=2', '--model.d_ff=64', '--data.seq_len=32', '--data.batch_size=2',
            '--trainer.enable_progress_bar=false', '--trainer.tensorboard=false', '--trainer.plot=false', '--trainer.eval_interval=0']
    init = ['longctx_train', '--init_from', 'hf', '--data.dataset_name=local', '--data.dataset_config=texts', *tiny[4:]]
    cmds = [['longctx_prepare', '--data.dataset_name=local', '--data.dataset_config=texts', '--data.tokenizer=bpe',
             '--data.bpe_vocab_size=300', '--out', 'prepared'],
            ['longctx_train', '--data.data_dir', 'prepared', *tiny, '--trainer.max_steps=1', '--trainer.default_root_dir=runs'],
            ['longctx_train', '--resume', 'runs/version_0', '--trainer.max_steps=2'],
            ['longctx_export', 'runs/version_0', 'hf'],
            ['longctx_export', 'runs/version_0', 'named', '--tokenizer', 'prepared/tokenizer.json'],  # the run's own: taken
            [*init, '--trainer.max_steps=1', '--trainer.default_root_dir=runs2'],
            ['longctx_export', 'runs2/version_0', 'hf2'],
            [*init, '--data.tokenizer=byte'], [*init, '--print_config']]
    ps = one_interpreter(*[[bindir / c[0], *c[1:]] for c in cmds], cwd=tmp_path)
    for c, p in zip(cmds, ps):
        want_code = 2 if '--data.tokenizer=byte' in c else 0
        assert p.returncode == want_code, f'{c}: exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}'
    want = json.loads((tmp_path / 'prepared' / 'tokenizer.json').read_text())['model']
    config = lambda run: json.loads((tmp_path / run / 'config.json').read_text())
    shipped = lambda out: json.loads((tmp_path / out / 'tokenizer.json').read_text())['model']
    assert (config('runs/version_0')['data']['tokenizer'], config('runs/version_0')['model']['vocab_size']) == ('bpe', 300)
    assert shipped('hf') == want and tf.AutoTokenizer.from_pretrained(tmp_path / 'hf').eos_token == '<|endoftext|>'
    # a run from that transformers folder tokenizes the text with its BPE (as many tokens as longctx_prepare made), and ships it again
    n = json.loads((tmp_path / 'prepared' / 'meta.json').read_text())['n_train_tokens']
    assert f'{n:,} train tokens, vocab 300' in ps[5].stdout, ps[5].stdout
    assert config('runs2/version_0')['data']['tokenizer'] == 'bpe'
    assert shipped('hf2') == want
    # a tokenizer named against that folder's is refused, as with a prepared --data.data_dir; --print_config says whose it is
    p = ps[7]
    assert p.stderr.splitlines()[-2] == (
        "longctx_train: error: data.tokenizer is not read by this run: --init_from hf brings its own tokenizer "
        "(BPETokenizer(vocab_size=300)), which tokenizes the text; leave data.tokenizer out."), p.stderr
    p = ps[8]
    assert ['data.tokenizer', '"bpe"', '--init_from', 'hf'] in [l.split() for l in p.stderr.splitlines()], p.stderr

LM_EVAL_TASK = """task: {task}
output_type: {kind}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
doc_to_text: "{{{{context}}}}"
doc_to_target: "{{{{target}}}}"
generation_kwargs:
  until: ["\\n"]
  max_gen_toks: 8
metric_list:
  - metric: {metric}
"""

def test_byte_export_in_lm_evaluation_harness(runs, tmp_path):
    "`lm_eval --model hf --model_args pretrained=OUT` on a byte-tokenizer export, local tasks: its log-likelihoods and greedy text are ours."
    assert export(runs['vanilla'], tmp_path / 'hf') == 0
    docs = [dict(context='def dumps(obj', target=', *, skipkeys'), dict(context='import', target=' json')]
    (tmp_path / 'docs.jsonl').write_text(''.join(json.dumps(d) + '\n' for d in docs))
    for task, kind, metric in (('tiny_ll', 'loglikelihood', 'acc'), ('tiny_gen', 'generate_until', 'exact_match')):
        (tmp_path / f'{task}.yaml').write_text(LM_EVAL_TASK.format(task=task, kind=kind, metric=metric, data=tmp_path / 'docs.jsonl'))
    env = {**os.environ, 'HF_HUB_OFFLINE': '1', 'HF_DATASETS_OFFLINE': '1', 'HF_HOME': str(tmp_path / 'hf_home')}
    p = subprocess.run([sys.executable, '-m', 'lm_eval', '--model', 'hf', '--model_args', f'pretrained={tmp_path / "hf"}',
                        '--tasks', 'tiny_ll,tiny_gen', '--include_path', tmp_path, '--device', 'cpu', '--batch_size', '2',
                        '--log_samples', '--output_path', tmp_path / 'out'], capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    got = lambda task: [json.loads(l) for f in (tmp_path / 'out').rglob(f'samples_{task}_*.jsonl') for l in f.read_text().splitlines()]
    model, tok = load_source(runs['vanilla'])[0], ByteTokenizer()
    for s in got('tiny_ll'):
        ids = torch.tensor([tok.encode(s['doc']['context'] + s['doc']['target']).tolist()])
        with torch.no_grad(): logp = model(ids)[0, :-1].log_softmax(-1).gather(1, ids[0, 1:, None])[:, 0]
        assert abs(float(s['resps'][0][0][0]) - logp[-len(s['doc']['target']):].sum().item()) < 1e-3, s
    for s in got('tiny_gen'):
        ids = torch.tensor([tok.encode(s['doc']['context']).tolist()])
        new = tok.decode(generate(model, ids, 8, temperature=0)[0, ids.shape[1]:])
        assert s['resps'][0][0] == new.split('\x00')[0].split('\n')[0], (s['resps'], new)   # stops at NUL, its eos, or the task's '\n'
    assert len(got('tiny_ll')) == len(got('tiny_gen')) == 2

def test_tokenizer_special_tokens_through_a_run(tmp_path, bindir):
    "A Llama 3-like folder (bos first, eos, pad, two stops, a chat template): a run --init_from it puts bos and eos around each "
    "document; its export gives AutoTokenizer the source's ids, special tokens and chat."
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders, processors, trainers
    special = ['<|begin_of_text|>', '<|end_of_text|>', '<|eot_id|>', '<|pad|>']
    chat = "{{ bos_token }}{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}<|eot_id|>{% endfor %}"
    t = Tokenizer(models.BPE()); t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False); t.decoder = decoders.ByteLevel()
    t.train_from_iterator([Path(json.__file__).read_text()], trainers.BpeTrainer(
        vocab_size=300, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    t.post_processor = processors.TemplateProcessing(single='<|begin_of_text|> $A', special_tokens=[(special[0], 0)])
    src = tmp_path / 'llama3'
    tf.LlamaForCausalLM(tf.LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                       bos_token_id=0, eos_token_id=[1, 2], pad_token_id=3)).save_pretrained(src)
    tf.PreTrainedTokenizerFast(tokenizer_object=t, bos_token=special[0], eos_token=special[1], pad_token=special[3],
                               chat_template=chat).save_pretrained(src)
    (tmp_path / 'texts').mkdir()
    for i, f in enumerate(('__init__.py', 'decoder.py', 'encoder.py')):
        (tmp_path / 'texts' / f'{i}.txt').write_text((Path(json.__file__).parent / f).read_text())
    cli(bindir, 'longctx_train', '--init_from', 'llama3', '--data.dataset_name=local', '--data.dataset_config=texts', '--data.seq_len=32',
        '--data.batch_size=2', '--trainer.max_steps=1', '--trainer.enable_progress_bar=false', '--trainer.tensorboard=false',
        '--trainer.plot=false', '--trainer.eval_interval=0', '--trainer.default_root_dir=runs', cwd=tmp_path)
    data = Path(json.loads((tmp_path / 'runs' / 'version_0' / 'config.json').read_text())['data']['data_dir'])
    meta = json.loads((data / 'meta.json').read_text())
    ids = np.concatenate([np.fromfile(data / f'{s}.bin', dtype=meta['dtype']) for s in ('train', 'val')])
    assert ids[0] == 0 and (ids == 0).sum() == (ids == 1).sum() == 3   # each of the 3 documents: bos ... eos
    assert (np.flatnonzero(ids == 0)[1:] == np.flatnonzero(ids == 1)[:-1] + 1).all()   # bos right after the eos before
    cli(bindir, 'longctx_export', 'runs/version_0', 'out', cwd=tmp_path)
    a, b = tf.AutoTokenizer.from_pretrained(src), tf.AutoTokenizer.from_pretrained(tmp_path / 'out')
    for s in ('def loads(s):', ' a dog\n and 日本 <|eot_id|>'): assert b(s)['input_ids'] == a(s)['input_ids']
    said = lambda t: [(getattr(t, f'{k}_token'), getattr(t, f'{k}_token_id')) for k in ('bos', 'eos', 'pad')]
    assert said(b) == said(a) == [(special[0], 0), (special[1], 1), (special[3], 3)]
    msgs = [{'role': 'user', 'content': 'def f'}, {'role': 'assistant', 'content': 'return'}]
    assert b.apply_chat_template(msgs, tokenize=False) == a.apply_chat_template(msgs, tokenize=False)
    assert b.apply_chat_template(msgs, return_dict=True)['input_ids'] == a.apply_chat_template(msgs, return_dict=True)['input_ids']
    assert tf.GenerationConfig.from_pretrained(tmp_path / 'out').eos_token_id == [1, 2]
