"""Continuing a model at a longer context: --data.seq_len=Nx and RoPE scaling with --init_from, as processes."""
import json, subprocess
import pytest
import torch

QUIET = ['--trainer.enable_progress_bar=false', '--trainer.tensorboard=false', '--trainer.plot=false',
         '--trainer.limit_val_batches=1']

def run(bindir, script, *args, cwd, check):
    p = subprocess.run([str(bindir / script), *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=600)
    assert p.returncode == check, f'exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}'
    return p

@pytest.fixture(scope='module')
def base(tmp_path_factory, bindir):
    "A tiny vanilla run trained at 32 tokens (byte tokenizer), in its own folder."
    d = tmp_path_factory.mktemp('extend')
    run(bindir, 'longctx_train', '--model.n_layers=2', '--model.d_model=32', '--model.n_heads=2',
        '--data.seq_len=32', '--data.batch_size=2', '--trainer.max_steps=2', '--trainer.run_name=base', *QUIET,
        cwd=d, check=0)
    return d

LONGROPE = {'short_factor': [1.0, 1.0, 1.1, 1.2, 1.5, 2.0, 2.0, 2.5], 'long_factor': [1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 9.0]}

@pytest.mark.parametrize('scaling', ['yarn', 'dynamic', 'longrope'])
def test_nx_resolves_records_and_exports(bindir, base, scaling):
    "4x is 4 x the source's length, printed once; the run records the scaling; transformers computes its logits."
    factors = [f"--model.rope_short_factor={','.join(map(str, LONGROPE['short_factor']))}",   # both spellings of a list
               f"--model.rope_long_factor={LONGROPE['long_factor']}"] if scaling == 'longrope' else []
    p = run(bindir, 'longctx_train', '--init_from', 'runs/base', f'--model.rope_scaling={scaling}',
            '--model.rope_factor=4', *factors, '--data.seq_len=4x', '--data.batch_size=1', '--trainer.max_steps=1',
            f'--trainer.run_name={scaling}', *QUIET, cwd=base, check=0)
    lines = p.stdout.splitlines()
    assert lines[:2] == ['seq_len 4x -> 128 (4 x 32, the length runs/base was trained at)',
                         'init_from: model.rope_original_max_position_embeddings=32 (the length runs/base was trained at; '
                         f'model.rope_scaling={scaling} stretches it)'], p.stdout
    cfg = json.loads((base / 'runs' / scaling / 'config.json').read_text())
    assert cfg['data']['seq_len'] == 128
    assert {k: cfg['model'][k] for k in ('rope_scaling', 'rope_factor', 'rope_original_max_position_embeddings')} == \
        {'rope_scaling': scaling, 'rope_factor': 4.0, 'rope_original_max_position_embeddings': 32}
    if scaling == 'longrope': assert {k: cfg['model'][f'rope_{k}'] for k in LONGROPE} == LONGROPE
    p = run(bindir, 'longctx_export', f'runs/{scaling}', f'hf_{scaling}', cwd=base, check=0)
    n_pos = json.loads((base / f'hf_{scaling}' / 'config.json').read_text())['max_position_embeddings']
    if scaling == 'longrope':   # a Phi-3: the context stretched, its factor max_position_embeddings / the original's
        assert n_pos == 128 and ("max_position_embeddings=128 in config.json: rope_original_max_position_embeddings 32 x "
                                 "rope_factor 4") in p.stdout and 'Phi3ForCausalLM' in p.stdout, p.stdout
    else:   # where transformers reads the context the scaling starts from (yarn: 4.x there, 5.x in rope_scaling as well)
        assert n_pos == 32 and ("max_position_embeddings=32 in config.json: rope_original_max_position_embeddings, where "
                                f"transformers' {scaling} scaling reads the context it starts from") in p.stdout, p.stdout
    transformers = pytest.importorskip('transformers')
    from longctx_nb.checkpoint import load_model
    hf = transformers.AutoModelForCausalLM.from_pretrained(base / f'hf_{scaling}').eval()
    ours = load_model(base / 'runs' / scaling).eval()
    x = torch.randint(0, 256, (2, 128), generator=torch.Generator().manual_seed(0))   # 4 x the trained length
    for n in (32, 128):                                                               # and the trained length
        with torch.no_grad(): a, b = hf(x[:, :n]).logits, ours(x[:, :n])
        assert (a - b).norm() / b.norm() < 1e-5, n

def test_nx_from_a_transformers_folder(bindir, base):
    "A Llama folder's max_position_embeddings is the length multiplied."
    tf = pytest.importorskip('transformers')
    d = base / 'llama'
    tf.LlamaForCausalLM(tf.LlamaConfig(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                       num_attention_heads=2, max_position_embeddings=16)).save_pretrained(d)
    p = run(bindir, 'longctx_train', '--init_from', d, '--data.seq_len=2x', '--print_config', cwd=base, check=0)
    assert p.stdout.splitlines()[0] == f"seq_len 2x -> 32 (2 x 16, {d}'s max_position_embeddings)", p.stdout

BAD = {
    'nx_without_init_from': (['--data.seq_len=4x'], "longctx_train: error: data.seq_len='4x' is not valid: 4x means 4 "
                             "times the length the --init_from source was trained at, and that needs --init_from on the "
                             "command line (a run, a checkpoint, an export or a transformers folder); without one, give "
                             "the length in tokens, e.g. --data.seq_len=1024.\n(see longctx_train --help)\n"),
    'nx_length_unknown': (['--init_from', 'exported', '--data.seq_len=4x'], "longctx_train: error: --data.seq_len=4x means "
                          "4 times the length exported was trained at, and exported does not record it (a run or "
                          "checkpoint records its data.seq_len, a Llama, Mistral or Qwen2 folder its "
                          "max_position_embeddings): give the length in tokens, e.g. --data.seq_len=4096.\n"
                          "(see longctx_train --help)\n"),
    'scaling_length_unknown': (['--init_from', 'exported', '--model.rope_scaling=yarn', '--model.rope_factor=4'],
                               "model.rope_scaling=yarn needs --model.rope_original_max_position_embeddings (the context "
                               "the model was trained at, e.g. its data.seq_len)."),
    'longrope_length': (['--init_from', 'runs/base', '--model.rope_scaling=longrope', '--model.rope_factor=4',
                         '--model.rope_short_factor=1,1,1', f"--model.rope_long_factor={LONGROPE['long_factor']}"],
                        "longctx_train: error: model.rope_short_factor has 3 numbers: longrope divides each of the "
                        "head_dim / 2 = 8 frequencies (d_model 32 / n_heads 2 / 2) by its own number, so it needs 8.\n"
                        "(see longctx_train --help)\n"),
}

@pytest.mark.parametrize('case', list(BAD))
def test_bad_input(bindir, base, case):
    "Exit 2, one paragraph, no traceback, no run directory."
    if not (base / 'exported').exists():
        run(bindir, 'longctx_export', '--format', 'safetensors', 'runs/base', 'exported', cwd=base, check=0)
    args, text = BAD[case]
    p = run(bindir, 'longctx_train', *args, '--trainer.run_name=bad', cwd=base, check=2)
    assert (p.stderr == text) if text.endswith('\n') else (text in p.stderr), p.stderr
    assert 'Traceback' not in p.stderr and not (base / 'runs' / 'bad').exists()
