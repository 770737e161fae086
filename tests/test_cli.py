"""End to end: the console scripts as a user runs them, in subprocesses."""
import json, os, re, subprocess, sys
from pathlib import Path
import numpy as np
import pytest
from conftest import one_interpreter

SMALL = ['--data.seq_len=64', '--data.batch_size=4', '--model.n_layers=2', '--trainer.enable_progress_bar=false',
         '--trainer.limit_val_batches=2']

def run(bindir, script, *args, cwd=None, check=None):
    p = subprocess.run([str(bindir / script), *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=600)
    if check is not None: assert p.returncode == check, f'exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}'
    return p

def metrics(run_dir):
    return [json.loads(l) for l in (Path(run_dir) / 'metrics.jsonl').read_text().splitlines()]

def test_default_corpus_loss_falls(bindir, tmp_path):
    "40 steps of the tiny preset on the default corpus visibly lower the loss."
    p = run(bindir, 'longctx_train', '--trainer.max_steps=40', '--data.seq_len=128', '--data.batch_size=8',
            '--trainer.enable_progress_bar=false', '--trainer.limit_val_batches=4', '--trainer.log_every_n_steps=1',
            f'--trainer.default_root_dir={tmp_path}', check=0)
    rows = metrics(tmp_path / 'version_0')
    losses = [r['loss'] for r in rows if 'loss' in r]
    assert losses[0] > 5.0 and losses[-1] < losses[0] - 2.0, losses
    assert 'Training finished' in p.stdout and 'tokens/s' in p.stdout and 'loss.png' in p.stdout
    run_dir = tmp_path / 'version_0'
    assert (run_dir / 'loss.png').stat().st_size > 1000
    assert json.loads((run_dir / 'config.json').read_text())['trainer']['max_steps'] == 40
    assert any('val_loss' in r for r in rows)
    # a second run never overwrites the first
    run(bindir, 'longctx_train', '--trainer.fast_dev_run=false', '--trainer.max_steps=1', *SMALL,
        f'--trainer.default_root_dir={tmp_path}', check=0)
    assert (tmp_path / 'version_1' / 'config.json').exists() and len(metrics(run_dir)) == len(rows)

def test_pretokenized_npy_flat_flags(bindir, tmp_path):
    "cs336-style flat flags on pre-tokenized .npy files."
    rng = np.random.default_rng(0)
    pattern = rng.integers(0, 50, 97)
    tokens = np.tile(pattern, 200).astype(np.uint16)  # a learnable periodic sequence
    np.save(tmp_path / 'train.npy', tokens); np.save(tmp_path / 'val.npy', tokens[:3000])
    run(bindir, 'longctx_train', '--train_data', tmp_path / 'train.npy', '--val_data', tmp_path / 'val.npy',
        '--vocab_size', 50, '--context_length', 64, '--batch_size', 8, '--max_iters', 30, '--device', 'cpu',
        '--log_interval', 5, '--learning_rate', 3e-3, '--d_model', 64, '--num_layers', 2, '--num_heads', 4,
        '--trainer.enable_progress_bar=false', f'--trainer.default_root_dir={tmp_path / "runs"}', check=0)
    rows = metrics(tmp_path / 'runs' / 'version_0')
    assert [r['step'] for r in rows if 'loss' in r] == [5, 10, 15, 20, 25, 30]
    cfg = json.loads((tmp_path / 'runs' / 'version_0' / 'config.json').read_text())
    assert (cfg['model']['vocab_size'], cfg['data']['seq_len'], cfg['model']['d_model']) == (50, 64, 64)
    assert rows[-1]['val_loss'] < 2.0  # the periodic sequence is learnt

def test_mamba_guide_config_and_presets(bindir, tmp_path):
    "A JSON config in the VRAM-preset format (model / vram / training sections) with --training_preset and overrides."
    conf = {"model": {"d_model": 64, "n_layers": 2, "d_state": 16, "expand_factor": 2, "dropout": 0.1,
                      "max_seq_len": 64, "vocab_size": 256},
            "vram": {"batch_size": 2, "gradient_accumulation_steps": 2, "max_seq_len": 64, "use_fp16": True,
                     "use_gradient_checkpointing": True, "use_cpu_offload": False},
            "training": {"learning_rate": 0.001, "weight_decay": 0.1, "max_steps": 100000, "warmup_steps": 2000,
                         "eval_interval": 1000, "save_interval": 5000, "logging_steps": 2, "adam_beta1": 0.9,
                         "adam_beta2": 0.95, "adam_epsilon": 1e-08, "max_grad_norm": 1.0, "label_smoothing": 0.0}}
    (tmp_path / 'config_16gb_safe.json').write_text(json.dumps(conf))
    p = run(bindir, 'longctx_train', '--config', tmp_path / 'config_16gb_safe.json', '--training_preset', 'fast',
            '--trainer.max_steps=6', '--trainer.enable_progress_bar=false', '--trainer.limit_val_batches=1',
            f'--trainer.default_root_dir={tmp_path / "runs"}', check=0)
    cfg = json.loads((tmp_path / 'runs' / 'version_0' / 'config.json').read_text())
    assert cfg['training_preset'] == 'fast' and cfg['trainer']['max_steps'] == 6
    assert cfg['data']['seq_len'] == 64 and cfg['trainer']['accumulate_grad_batches'] == 2
    assert cfg['model']['gradient_checkpointing'] is True and cfg['trainer']['use_fp16'] is True
    assert 'precision 32' in p.stdout  # use_fp16 means fp16 where the device has it: fp32 on the CPU
    # --print_config shows the resolved config and writes nothing
    p = run(bindir, 'longctx_train', '--model_size', 'small', '--vram', '8gb', '--print_config', check=0)
    d = json.loads(p.stdout)
    assert (d['model']['d_model'], d['data']['batch_size'], d['trainer']['accumulate_grad_batches'], d['vram']) == (512, 1, 16, '8gb')

def test_config_vocab_size_the_tokenizer_contradicts(bindir, tmp_path):
    "A config file's vocab_size of 50257 with the byte or a BPE tokenizer: the model has the tokenizer's ids, and the note says so."
    (tmp_path / 'texts').mkdir(); (tmp_path / 'texts' / 'a.txt').write_text(Path(json.__file__).read_text())
    (tmp_path / 'c.json').write_text(json.dumps({'model': {'d_model': 32, 'vocab_size': 50257}}))
    for tok, n in (('byte', 256), ('bpe', 300)):
        p = run(bindir, 'longctx_train', '--config', tmp_path / 'c.json', '--data.dataset_name=local', f'--data.dataset_config={tmp_path / "texts"}',
                f'--data.tokenizer={tok}', *(['--data.bpe_vocab_size=300'] if tok == 'bpe' else []), *SMALL, '--trainer.max_steps=1',
                f'--data.cache_dir={tmp_path / "cache"}', f'--trainer.default_root_dir={tmp_path / tok}', check=0)
        assert (f"note: the model is built with the {n} ids of the {tok} tokenizer, not model.vocab_size=50257 (rows no token id "
                "reaches)") in p.stderr, p.stderr
        assert json.loads((tmp_path / tok / 'version_0' / 'config.json').read_text())['model']['vocab_size'] == n
        assert f'vocab {n} |' in p.stdout

def test_lightning_dotted_flags(bindir, tmp_path):
    "LightningCLI-style dotted flags, with its `fit` subcommand."
    p = run(bindir, 'longctx_train', 'fit', '--model.block=vanilla', '--model.num_params=tiny', '--data.max_seq_len=64',
            '--data.batch_size=2', '--trainer.max_steps=3', '--trainer.accelerator=cpu', '--trainer.precision=bf16',
            '--trainer.enable_progress_bar=False', f'--trainer.default_root_dir={tmp_path}',
            '--trainer.checkpoint_interval=2', '--trainer.log_every_n_steps=1', '--trainer.eval_interval=0',
            '--trainer.limit_val_batches=1', check=0)
    ckpts = sorted(p.name for p in (tmp_path / 'version_0' / 'checkpoints').glob('*.pt'))
    assert ckpts == ['step_0000002.pt', 'step_0000003.pt'], ckpts
    assert 'precision bf16' in p.stdout
    p = run(bindir, 'longctx_train', '--trainer.fast_dev_run=True', *SMALL, f'--trainer.default_root_dir={tmp_path / "dev"}', check=0)
    assert not (tmp_path / 'dev').exists()

def test_prepare_then_train(bindir, tmp_path):
    corpus = tmp_path / 'corpus'; corpus.mkdir()
    for i in range(6): (corpus / f'doc{i}.txt').write_text(f'document {i}: ' + 'the quick brown fox jumps over the lazy dog. ' * 60)
    run(bindir, 'longctx_prepare', '--data.dataset_name=local', f'--data.dataset_config={corpus}', '--out', tmp_path / 'prep', check=0)
    meta = json.loads((tmp_path / 'prep' / 'meta.json').read_text())
    assert meta['vocab_size'] == 256 and meta['n_train_tokens'] > 0
    run(bindir, 'longctx_train', '--data_dir', tmp_path / 'prep', *SMALL, '--trainer.max_steps=2',
        f'--trainer.default_root_dir={tmp_path / "runs"}', check=0)
    # never writes into a folder that is not empty
    p = run(bindir, 'longctx_prepare', '--data.dataset_name=local', f'--data.dataset_config={corpus}', '--out', tmp_path / 'prep', check=2)
    assert 'not empty' in p.stderr

def test_help_and_version(bindir):
    p = run(bindir, 'longctx_train', '--help', check=0)
    for s in ('--trainer.max_steps', '--model.block', '--context_length', '--vram', '(default: 400)', 'examples:'):
        assert s in p.stdout, s
    assert run(bindir, 'longctx_train', '--version', check=0).stdout.startswith('longctx_train ')
    assert '(default: None)' not in p.stdout and 'cs336-style flat flags: --context_length (data.seq_len)' in p.stdout

COMMANDS = ('longctx_train', 'longctx_prepare', 'longctx_eval', 'longctx_compare', 'longctx_report', 'longctx_bench', 'longctx_export')

def test_every_command_has_version_and_help(bindir):
    "--version and --help on every console script (its own file, as its process runs it, all in one interpreter); "
    "python -m longctx_nb lists them, as settings.ini declares them."
    import longctx_nb
    *procs, p = one_interpreter(*[[bindir / cmd, flag] for cmd in COMMANDS for flag in ('--version', '--help')],
                                [sys.executable, '-m', 'longctx_nb'])
    assert all(q.returncode == 0 for q in [*procs, p]), [(q.args, q.returncode, q.stderr[-2000:]) for q in [*procs, p]]
    for cmd, version, help_ in zip(COMMANDS, procs[::2], procs[1::2]):
        assert version.stdout.strip() == f'{cmd} {longctx_nb.__version__}', (cmd, version.stdout)
        assert help_.stdout.startswith('usage: ' + cmd), (cmd, help_.stdout[:300])
    listed = [l.split()[0] for l in p.stdout.splitlines()[1:]]
    assert listed == list(COMMANDS), p.stdout
    ini = (Path(__file__).resolve().parents[1] / 'settings.ini').read_text()
    scripts = next(l for l in ini.splitlines() if l.startswith('console_scripts')).split('=', 1)[1].split()
    assert sorted(s.split('=')[0] for s in scripts) == sorted(COMMANDS)

def parsers():
    "The parsers of the console scripts (and of each benchmark)."
    from longctx_nb import cli, compare, evals, report, bench, export
    ps = [cli.build_parser(), cli.prepare_parser(), evals.eval_parser(), compare.compare_parser(), report.report_parser(),
          bench.bench_parser(), export.export_parser()]
    return ps + [bench.bench_parser(n) for n in bench.BENCHES]

def test_every_flag_has_help_and_its_default_once():
    import argparse
    for p in parsers():
        h = p.format_help()
        assert '(default: None)' not in h, p.prog
        for a in p._actions:
            assert a.help, (p.prog, a.option_strings)
            if a.help == argparse.SUPPRESS:  # another spelling: listed with the setting it names
                assert f'{a.option_strings[0]} (' in h, (p.prog, a.option_strings)
            else: assert a.help.count('(default') <= 1, (p.prog, a.help)

def test_usage_errors_of_every_command(bindir, tmp_path):
    "A misspelt flag: exit code 2, one paragraph starting with `prog: error:`, the valid flag suggested, no traceback."
    for cmd in COMMANDS:
        args = ['blocks', '--rpes', '1'] if cmd == 'longctx_bench' else ['--n_sampels', '1', '--checkpoint_path', 'x'] \
            if cmd in ('longctx_eval', 'longctx_report') else ['--out', tmp_path / 'o', '--data.seq_lne=3']
        if cmd == 'longctx_compare': args = ['--max_stpes', '3', '--output_dir', tmp_path / 'c']
        if cmd == 'longctx_export': args = ['--formt=hf', tmp_path / 'run', tmp_path / 'o']
        if cmd == 'longctx_train': args = ['--data.seq_lne=3', f'--trainer.default_root_dir={tmp_path / "runs"}']
        p = run(bindir, cmd, *args, check=2)
        assert p.stderr.startswith(f'{cmd}') and ': error: ' in p.stderr and 'Traceback' not in p.stderr, p.stderr
        assert 'did you mean' in p.stderr.lower() or 'unrecognized argument' in p.stderr, p.stderr

def test_synthetic_task(bindir, tmp_path):
    "The LightningCLI-style spelling --data.dataset_name=synthetic: an associative-recall run logs val_acc beside val_loss."
    p = run(bindir, 'longctx_train', '--data.dataset_name=synthetic', '--data.task=associative_recall', '--data.num_pairs=4',
            '--data.seq_len=64', '--data.batch_size=8', '--model.n_layers=2', '--trainer.max_steps=6', '--trainer.eval_interval=3',
            '--trainer.limit_val_batches=2', '--trainer.log_every_n_steps=3', '--trainer.enable_progress_bar=false',
            '--trainer.plot=false', f'--trainer.default_root_dir={tmp_path}', check=0)
    assert 'synthetic:associative_recall' in p.stdout and 'val acc' in p.stdout
    rows = metrics(tmp_path / 'version_0')
    val = [r for r in rows if 'val_loss' in r]
    assert [r['step'] for r in val] == [3, 6] and all(0 <= r['val_acc'] <= 1 for r in val)
    cfg = json.loads((tmp_path / 'version_0' / 'config.json').read_text())
    assert (cfg['data']['task'], cfg['model']['vocab_size']) == ('associative_recall', 64)

def _tokens(tmp_path, n=1000, hi=300):
    np.save(tmp_path / 'big_ids.npy', (np.arange(n) % hi).astype(np.uint16))
    np.save(tmp_path / 'short.npy', (np.arange(50) % 10).astype(np.uint16))

BAD = {  # args -> a phrase the error must contain
    'unknown_flag': (['--trainer.max_step=3'], "Did you mean 'trainer.max_steps'"),
    'unknown_flat_flag': (['--context_len', '5'], 'unknown flag --context_len'),
    'negative_steps': (['--trainer.max_steps=-5'], 'must be > 0'),
    'unknown_block': (['--model.block=transformerxl'], 'valid choices: vanilla'),
    'unknown_preset': (['--model_size', 'huge'], 'valid choices: tiny, small'),
    'unknown_vram': (['--vram', '6gb'], 'valid choices: 8gb'),
    'bad_bool': (['--trainer.enable_progress_bar=maybe'], 'expected true or false'),
    'missing_data': (['--train_data', 'nowhere/train.npy'], 'nowhere/train.npy'),
    'missing_config': (['--config', 'nowhere.json'], 'does not exist'),
    'ids_outside_vocab': (['--train_data', '{tmp}/big_ids.npy', '--vocab_size', '256'], 'vocab'),
    'seq_longer_than_data': (['--train_data', '{tmp}/short.npy', '--context_length', '64'], 'seq_len'),
    'cuda_without_gpu': (['--device', 'cuda'], 'no CUDA GPU'),
    'fp16_on_cpu': (['--trainer.precision=16', '--device', 'cpu'], 'not supported on the CPU'),
    'unknown_task': (['--data.dataset_name=synthetic', '--data.task=recall'],
                     'valid choices: passkey, associative_recall, copy, induction_heads, selective_copy'),
    'task_too_long': (['--data.dataset_name=synthetic', '--data.task=associative_recall', '--data.num_pairs=30',
                       '--data.seq_len=64'], 'num_pairs <= 21'),
    'kernel_not_built': (['--model.block=mamba', '--model.scan_impl=cuda'], 'needs mamba-ssm'),  # found before the run dir is made
    'curriculum_and_steps': (['--trainer.curriculum=32:2,64:2', '--trainer.max_steps=1000', '--data.seq_len=512'],
                             "trainer.max_steps is not read by this run: trainer.curriculum='32:2,64:2' sets the training "
                             "length (64, its longest stage's) and the steps (4, the sum of its stages'); leave "
                             "trainer.max_steps out."),
    'warmup_fraction_unread': (['--warmup_iters', '10', '--trainer.warmup_fraction=0.5'], "trainer.warmup_fraction is not "
                               "read by this run: trainer.warmup_steps=10 sets the warmup; leave trainer.warmup_fraction out."),
    'kv_heads_not_dividing': (['--model.n_kv_heads=3'], 'so n_kv_heads divides n_heads: one of 1, 2, 4'),
    'kv_heads_unread': (['--model.block=mamba', '--model.n_kv_heads=2'], 'model.n_kv_heads is read only by the blocks vanilla'),
    'rope_without_factor': (['--model.rope_scaling=yarn'], 'model.rope_scaling=yarn needs --model.rope_factor (how many '
                            'times longer the context grows, e.g. 4) and --model.rope_original_max_position_embeddings'),
    'rope_setting_unread': (['--model.rope_scaling=linear', '--model.rope_factor=2', '--model.rope_beta_fast=8'],
                            "model.rope_beta_fast is not read by this run: model.rope_scaling='linear' reads rope_factor"),
    'rope_unknown_type': (['--model.rope_scaling=su'], 'valid choices: none, linear, dynamic, yarn, llama3, longrope'),
    'norm_eps_zero': (['--model.rms_norm_eps=0'], "model.rms_norm_eps='0' is not valid: must be > 0"),
}

@pytest.mark.parametrize('case', list(BAD))
def test_bad_input(bindir, tmp_path, case):
    "One paragraph naming the problem, exit code 2, no traceback, nothing written."
    if case in ('cuda_without_gpu', 'kernel_not_built'):
        import torch
        if torch.cuda.is_available(): pytest.skip('this machine has a GPU')
    _tokens(tmp_path)
    args, phrase = BAD[case]
    args = [a.replace('{tmp}', str(tmp_path)) for a in args]
    root = tmp_path / 'runs'
    p = run(bindir, 'longctx_train', *args, f'--trainer.default_root_dir={root}', cwd=tmp_path, check=2)
    assert phrase in p.stderr, p.stderr
    assert 'Traceback' not in p.stderr and p.stderr.startswith('longctx_train: error:')
    assert not root.exists()

def test_existing_run_dir_is_not_overwritten(bindir, tmp_path):
    d = tmp_path / 'runs' / 'mine'; d.mkdir(parents=True); (d / 'metrics.jsonl').write_text('precious\n')
    p = run(bindir, 'longctx_train', '--trainer.run_name=mine', f'--trainer.default_root_dir={tmp_path / "runs"}', *SMALL, check=2)
    assert 'already holds a run' in p.stderr and (d / 'metrics.jsonl').read_text() == 'precious\n'

TINY = ['--data.seq_len=32', '--data.batch_size=2', '--model.n_layers=1', '--model.d_model=32',
        '--trainer.enable_progress_bar=false', '--trainer.limit_val_batches=1', '--trainer.plot=false']

def test_warmup_as_given(bindir, tmp_path):
    "nanoGPT's --warmup_iters 10 --max_iters 20: the learning rate rises for 10 steps, as --print_config says."
    args = ['--warmup_iters', '10', '--max_iters', '20', '--trainer.learning_rate=1e-3', '--trainer.log_every_n_steps=1', *TINY]
    shown = json.loads(run(bindir, 'longctx_train', *args, '--print_config', check=0).stdout)['trainer']
    assert (shown['warmup_steps'], shown['max_steps']) == (10, 20)
    run(bindir, 'longctx_train', *args, f'--trainer.default_root_dir={tmp_path}', check=0)
    lrs = [r['lr'] for r in metrics(tmp_path / 'version_0') if 'lr' in r]
    assert lrs[:10] == pytest.approx([1e-3 * s / 10 for s in range(1, 11)]) and max(lrs) == lrs[9] and lrs[-1] < lrs[10]
    p = run(bindir, 'longctx_train', '--trainer.warmup_steps=30', *args[4:], '--trainer.fast_dev_run=true', check=0)
    assert ("note: --trainer.warmup_steps=30 is longer than the run's 2 steps: the learning rate rises to 6.67e-05 of "
            "--trainer.learning_rate=0.001") in p.stdout, p.stdout

def test_curriculum_sets_length_and_steps(bindir, tmp_path):
    "A curriculum alone trains its stages: 2 steps at 32 tokens, then 2 at 64; --print_config names it as their source."
    args = ['--trainer.curriculum=32:2,64:2', '--trainer.log_every_n_steps=1', *TINY[1:]]
    err = run(bindir, 'longctx_train', *args, '--print_config', check=0).stderr
    assert re.search(r"trainer\.max_steps +4 +trainer\.curriculum '32:2,64:2'", err), err
    run(bindir, 'longctx_train', *args, f'--trainer.default_root_dir={tmp_path}', check=0)
    assert [(r['step'], r['seq_len']) for r in metrics(tmp_path / 'version_0') if 'loss' in r] == \
        [(1, 32), (2, 32), (3, 64), (4, 64)]
    for flag in ('--trainer.fork_from', '--resume'):   # a run that continues the curriculum's run is held to it too
        p = run(bindir, 'longctx_train', f'{flag}={tmp_path}/version_0', '--trainer.max_steps=1000',
                f'--trainer.default_root_dir={tmp_path}/more', check=2)
        assert p.stderr.startswith("longctx_train: error: trainer.max_steps is not read by this run: trainer.curriculum='32:2,64:2' "
                                   "sets the training length (64, its longest stage's) and the steps (4, the sum of its stages'); "
                                   "leave trainer.max_steps out."), p.stderr
    assert not (tmp_path / 'more').exists()

def test_dense_block_is_said(bindir, tmp_path):
    "Longformer's window of 128 over 64 tokens is full attention: training and evaluating it say so, in the block's words."
    why = 'baseline_longformer: --model.window_size=128 with 2 global tokens covers all 64 tokens: full attention'
    p = run(bindir, 'longctx_train', '--model.block=baseline_longformer', '--trainer.max_steps=1', *TINY[1:],
            '--data.seq_len=64', f'--trainer.default_root_dir={tmp_path}', check=0)
    assert f'note: {why}\n' in p.stdout, p.stdout
    p = run(bindir, 'longctx_eval', '--task', 'perplexity', '--checkpoint_path', tmp_path / 'version_0', '--n_samples', 2,
            '--output_dir', tmp_path / 'ev', check=0)
    said = 'baseline_longformer is dense at 64 tokens: ' + why.split(': ', 1)[1]
    assert f'note: {said}\n' in p.stdout, p.stdout
    assert said in json.loads(next((tmp_path / 'ev').glob('*.json')).read_text())['notes']

def test_keep_last_takes_the_sidecars_along(bindir, tmp_path):
    "--trainer.keep_last=1 leaves one checkpoint and its own .sha256, nothing of the older ones."
    run(bindir, 'longctx_train', '--trainer.max_steps=6', '--trainer.checkpoint_interval=2', '--trainer.keep_last=1', *TINY,
        f'--trainer.default_root_dir={tmp_path}', check=0)
    assert sorted(p.name for p in (tmp_path / 'version_0' / 'checkpoints').iterdir()) == \
        ['step_0000006.pt', 'step_0000006.pt.sha256']

def test_no_tensorboard_package_is_said(bindir, tmp_path):
    "Without the tensorboard package a run says that it writes no event files (and trains)."
    (tmp_path / 'hide').mkdir()
    (tmp_path / 'hide' / 'sitecustomize.py').write_text("import sys\nsys.modules['tensorboard'] = None   # not installed\n")
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join([str(tmp_path / 'hide'), os.environ.get('PYTHONPATH', '')])}
    p = subprocess.run([str(bindir / 'longctx_train'), '--trainer.max_steps=1', *TINY, f'--trainer.default_root_dir={tmp_path}'],
                       capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr
    assert ("note: trainer.tensorboard: the tensorboard package is not installed, so this run writes no TensorBoard event files "
            "(metrics.jsonl holds every row); pip install tensorboard, or give --trainer.tensorboard=false.\n") in p.stderr
    assert not list((tmp_path / 'version_0').glob('events.out.tfevents.*')) and metrics(tmp_path / 'version_0')
