"""longctx_export end to end: a tiny run exported for transformers (Llama, Mamba) and read back; refusals exit 2 and write nothing."""
import json, subprocess, sys
from pathlib import Path
import pytest, torch

tf = pytest.importorskip('transformers')
from longctx_nb.config import Config, apply_overrides
from longctx_nb.checkpoint import load_model
from longctx_nb.data import ByteTokenizer
from longctx_nb.model import generate
from longctx_nb.hf import export_main, create_model_from_hf, hf_tokenizer, load_source, logit_gap

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
    ours, _ = load_source(ck)
    assert type(hf).__name__ == cls
    assert logit_gap(ours, hf) < 1e-5
    ids = torch.tensor([tok('def dumps(obj')['input_ids']])
    assert ids[0].tolist() == ByteTokenizer().encode('def dumps(obj').tolist()
    assert torch.equal(generate(ours, ids, 12, temperature=0), hf.generate(ids, max_new_tokens=12, do_sample=False))
    back, t = create_model_from_hf(tmp_path / 'hf')      # and back: the same weights and tokenizer
    torch.testing.assert_close(back.state_dict(), ours.state_dict())
    assert isinstance(t, ByteTokenizer)

def test_module_entry_point(runs, tmp_path):
    "python -m longctx_nb.hf is the console script; it imports a transformers folder into our format."
    run = lambda *a: subprocess.run([sys.executable, '-m', 'longctx_nb.hf', *map(str, a)], capture_output=True, text=True)
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
    for name, change, says in [('c', {'intermediate_size': 80}, "the checkpoint's shape (96, 64)"),
                               ('d', {'num_key_value_heads': 2}, 'num_key_value_heads=2'),
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
            "import longctx_nb, longctx_nb.hf as h\n"
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

def test_train_init_from_transformers(runs, tmp_path, bindir):
    "longctx_train --init_from a transformers Mamba folder: the model's settings come from it (each printed) and training starts from its weights."
    assert export(runs['mamba'], tmp_path / 'hf') == 0
    p = subprocess.run([bindir / 'longctx_train', '--init_from', tmp_path / 'hf', '--trainer.max_steps=2', '--data.seq_len=32',
                        '--data.batch_size=2', '--trainer.default_root_dir', tmp_path / 'runs', '--trainer.enable_progress_bar=false',
                        '--trainer.tensorboard=false', '--trainer.plot=false', '--trainer.eval_interval=0', '--data.dataset_name=local',
                        '--data.data_dir', runs['vanilla'].parent.parent / 'text', '--data.cache_dir', tmp_path / 'cache'],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "init_from: model.block 'vanilla' -> 'mamba'" in p.stdout and 'model.d_model 128 -> 64' in p.stdout, p.stdout
    trained = load_model(next((tmp_path / 'runs').iterdir()))
    assert trained.cfg.block == 'mamba' and trained.cfg.n_layers == 2
    p = subprocess.run([bindir / 'longctx_train', '--init_from', tmp_path / 'hf', '--resume'], capture_output=True, text=True)
    assert p.returncode == 2 and 'give one of them' in p.stderr and 'Traceback' not in p.stderr
