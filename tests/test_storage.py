"""What is saved is verified on every load: flipped bits in checkpoints and exports are refused with the reason, `--resume`
falls back past damaged, incomplete or foreign checkpoints, and a file system that refuses a write (full, read-only) stops
the run with one paragraph, no traceback, nothing partial, and the previous checkpoint intact."""
import json, os, subprocess
from pathlib import Path
import pytest
import torch
from longctx_nb.checkpoint import (save_checkpoint, read_checkpoint, sidecar, list_checkpoints, checkpoint_path, load_model,
                                   StorageError, ALIASES)
from conftest import fill

ARGS = ['--data.seq_len=32', '--data.batch_size=2', '--model.n_layers=1', '--model.d_model=32', '--model.n_heads=2',
        '--model.d_ff=64', '--trainer.log_every_n_steps=1', '--trainer.checkpoint_interval=2', '--trainer.eval_interval=0',
        '--trainer.enable_progress_bar=false', '--trainer.plot=false', '--trainer.tensorboard=false']

def run(bindir, root, *extra, prog='longctx_train', cache=None):
    "Run `prog` (the trainer: with ARGS, under `root`); `cache`: its corpus cache folder (default: the usual one)."
    args = [*ARGS, f'--trainer.default_root_dir={root}'] if prog == 'longctx_train' else []
    env = {**os.environ, 'OMP_NUM_THREADS': '1', **({'LONGCTX_CACHE': str(cache)} if cache else {})}
    return subprocess.run([str(bindir / prog), *args, *map(str, extra)], capture_output=True, text=True, env=env, timeout=600)

def flip(path: Path, at: int):
    "Flip one bit of byte `at` (negative: from the end)."
    b = bytearray(path.read_bytes()); b[at] ^= 0x10; path.write_bytes(bytes(b))

def clean(p):
    assert 'Traceback' not in p.stderr and 'weights_only' not in p.stderr, p.stderr

@pytest.fixture(scope='module')
def runs(bindir, tmp_path_factory):
    "A finished run of 6 steps (checkpoints at 2, 4, 6) to copy: its directory."
    root = tmp_path_factory.mktemp('runs')
    p = run(bindir, root, '--trainer.max_steps=6')
    assert p.returncode == 0, p.stderr
    return root / 'version_0'

def copy_run(src: Path, dst: Path) -> Path:
    subprocess.run(['cp', '-r', str(src), str(dst)], check=True)
    return dst

@pytest.mark.parametrize('where', ['header', 'middle', 'tensor data', 'end'])
def test_resume_falls_back_past_a_flipped_bit(bindir, runs, tmp_path, where):
    run_dir = copy_run(runs, tmp_path / 'r')
    newest = list_checkpoints(run_dir)[-1]
    size = newest.stat().st_size
    flip(newest, {'header': 40, 'middle': size // 2, 'tensor data': size - 2000, 'end': -30}[where])
    p = run(bindir, tmp_path, f'--resume={newest}', cache=tmp_path / 'cache')   # named directly, the damaged file is refused
    assert p.returncode == 2 and 'is damaged' in p.stderr, p.stderr
    assert not (tmp_path / 'cache').exists()                   # before any data is prepared: no corpus cache written
    clean(p)
    p = run(bindir, tmp_path, '--resume', run_dir, '--trainer.max_steps=6')   # the run directory: the newest good one
    assert p.returncode == 0, p.stderr
    assert 'skipping checkpoint step_0000006.pt' in p.stderr and 'is damaged' in p.stderr
    assert 'from step_0000004.pt' in p.stdout
    clean(p)

def test_incomplete_and_foreign_checkpoints_are_skipped(bindir, runs, tmp_path):
    run_dir = copy_run(runs, tmp_path / 'r')
    save_checkpoint(checkpoint_path(run_dir, 8), {'step': 8, 'config': {}})       # our format tag, keys missing
    other = run(bindir, tmp_path / 'other', '--trainer.max_steps=2', '--model.d_model=64')
    assert other.returncode == 0, other.stderr
    src = list_checkpoints(tmp_path / 'other' / 'version_0')[-1]
    for f in (src, sidecar(src)):                                                  # another model's checkpoint, as step 10
        (run_dir / 'checkpoints' / f.name.replace('0000002', '0000010')).write_bytes(f.read_bytes())
    (run_dir / 'checkpoints' / 'step_0000010.pt.sha256').write_text(
        (run_dir / 'checkpoints' / 'step_0000010.pt.sha256').read_text().replace('step_0000002', 'step_0000010'))
    p = run(bindir, tmp_path, '--resume', run_dir, '--trainer.max_steps=6')
    assert p.returncode == 0, p.stderr
    assert 'skipping checkpoint step_0000010.pt' in p.stderr and 'model.d_model: checkpoint 64, this run 32' in p.stderr
    assert 'skipping checkpoint step_0000008.pt' in p.stderr and 'lacks model, optimizer' in p.stderr
    assert 'from step_0000006.pt' in p.stdout
    clean(p)

def test_damaged_export_is_refused(bindir, runs, tmp_path):
    run_dir = copy_run(runs, tmp_path / 'r')
    assert (run_dir / 'SHA256SUMS').is_file()
    sums = subprocess.run(['sha256sum', '-c', 'SHA256SUMS'], cwd=run_dir, capture_output=True, text=True)
    assert sums.returncode == 0, sums.stdout                                       # the standard tool agrees
    flip(run_dir / 'model.safetensors', -7)
    with pytest.raises(Exception, match='is damaged'): load_model(run_dir)
    p = run(bindir, tmp_path, '--checkpoint_path', run_dir / 'model.safetensors', '--task', 'perplexity', prog='longctx_eval')
    assert p.returncode == 2 and 'is damaged' in p.stderr, p.stderr
    clean(p)

@pytest.fixture
def small_fs(mount_tmpfs):
    "A 1 MiB tmpfs: the size of a few tiny checkpoints."
    return mount_tmpfs('1m')

def test_disk_full_stops_cleanly_and_keeps_the_last_checkpoint(bindir, small_fs):
    p = run(bindir, small_fs, '--trainer.max_steps=40', '--trainer.keep_last=0')
    assert p.returncode == 1, (p.returncode, p.stderr)
    assert 'No space left on device' in p.stderr and 'The newest good checkpoint' in p.stderr, p.stderr
    clean(p)
    run_dir = small_fs / 'version_0'
    assert not [f for f in run_dir.rglob('.*') if f.name.endswith('.tmp')], 'a temporary file was left'
    kept = list_checkpoints(run_dir)
    assert kept and str(kept[-1]) in p.stderr
    assert read_checkpoint(kept[-1])['step'] == int(kept[-1].stem.split('_')[1])   # intact: its digest matches

def test_read_only_file_system(bindir, small_fs):
    assert run(bindir, small_fs, '--trainer.max_steps=2').returncode == 0
    subprocess.run(['mount', '-o', 'remount,ro', str(small_fs)], check=True)
    p = run(bindir, small_fs, '--resume', '--trainer.max_steps=4')
    assert p.returncode == 1 and 'Read-only file system' in p.stderr, p.stderr
    clean(p)

def test_tensorboard_disk_full_stops_cleanly(bindir, small_fs):
    "The disk fills while TensorBoard's event file grows (one free page: metrics.jsonl's page has room longer)."
    assert run(bindir, small_fs, '--trainer.max_steps=2').returncode == 0
    good = list_checkpoints(small_fs / 'version_0')[-1]
    fill(small_fs, leave=1)
    p = run(bindir, small_fs, '--resume', '--trainer.max_steps=40', '--trainer.checkpoint_interval=100', '--trainer.tensorboard=true')
    assert p.returncode == 1, (p.returncode, p.stderr)
    err = ' '.join(p.stderr.split())
    assert "cannot write '" in err and 'events.out.tfevents.' in err and 'No space left on device [ENOSPC]' in err, err
    assert f'The newest good checkpoint is {good}; continue with --resume once fixed.' in err
    clean(p)
    run_dir = small_fs / 'version_0'
    assert not [f for f in run_dir.rglob('*') if f.name.endswith('.tmp')] and read_checkpoint(good)['step'] == 2
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    events = list(EventFileLoader(str(next(run_dir.glob('events.out.tfevents.*')))).Load())   # whole records only
    assert max(e.step for e in events) >= 3
    [json.loads(l) for l in (run_dir / 'metrics.jsonl').read_text().splitlines()]   # no half line either

def test_loss_plot_and_event_file_on_a_full_disk(small_fs):
    from longctx_nb.metrics import plot_losses, EventFile
    ev = EventFile(small_fs)
    size = ev.path.stat().st_size
    fill(small_fs)
    with pytest.raises(StorageError, match=r"events\.out\.tfevents.*No space left on device \[ENOSPC\]"):
        for step in range(1000): ev.add_scalars(step, {'train/loss': 1.0, 'train/lr': 1e-3}); size = ev.path.stat().st_size
    assert step > 0 and ev.path.stat().st_size == size   # the refused row was cut back off: whole records only
    rows = [{'step': i, 'loss': 5 - i / 10} for i in range(20)]
    with pytest.raises(StorageError, match=r"loss\.png'.*No space left on device"): plot_losses(rows, small_fs / 'loss.png')
    assert sorted(f.name for f in small_fs.iterdir() if f.name != 'filler') == [ev.path.name]   # no loss.png, no .tmp
    subprocess.run(['mount', '-o', 'remount,ro', str(small_fs)], check=True)
    with pytest.raises(StorageError, match=r'Read-only file system \[EROFS\]'): EventFile(small_fs)

def test_export_takes_the_newest_intact_weights_and_says_which(bindir, runs, tmp_path):
    "The newest checkpoint damaged: the run's final export (step 6) is exported; that one damaged too: step 4's checkpoint."
    run_dir = copy_run(runs, tmp_path / 'r')
    newest = list_checkpoints(run_dir)[-1]; flip(newest, newest.stat().st_size // 2)
    skip6 = (f"warning: skipping checkpoint step_0000006.pt: {str(newest)!r} is damaged: its SHA-256 does not match "
             "step_0000006.pt.sha256 (the file changed after it was written).\n")
    p = run(bindir, tmp_path, '--format', 'safetensors', run_dir, tmp_path / 'a', prog='longctx_export')
    assert (p.returncode, p.stderr, p.stdout) == (0, skip6, f"weights: {run_dir / 'model.safetensors'} (step 6)\nwrote {tmp_path / 'a'}\n")
    assert all(torch.equal(a, b) for a, b in zip(load_model(tmp_path / 'a').state_dict().values(), load_model(run_dir).state_dict().values()))
    flip(run_dir / 'model.safetensors', -7)
    p = run(bindir, tmp_path, '--format', 'safetensors', run_dir, tmp_path / 'b', prog='longctx_export')
    assert (p.returncode, p.stderr) == (0, skip6 + f"warning: skipping model.safetensors: {str(run_dir / 'model.safetensors')!r} is "
                                           f"damaged: its SHA-256 does not match SHA256SUMS.\n")
    assert p.stdout.startswith(f"weights: {run_dir / 'checkpoints' / 'step_0000004.pt'} (step 4)\n")

def test_checkpoints_answer_other_trainers_keys(runs):
    "What the guides' snippets read, from a plain torch.load (weights_only, torch's default), each entry stored once."
    import io
    ck = torch.load(list_checkpoints(runs)[-1])
    assert ck['model_state_dict'] is ck['model'] and ck['optimizer_state_dict'] is ck['optimizer']
    assert (ck['iter'], ck['iteration'], ck['step'], ck['config']['model']['d_model']) == (6, 6, 6, 32)
    load_model(runs).load_state_dict(ck['model'])
    sched = torch.optim.lr_scheduler.OneCycleLR(torch.optim.AdamW(load_model(runs).parameters()), max_lr=1e-3, total_steps=100)
    sched.load_state_dict(ck['scheduler_state_dict']); assert sched.last_epoch == 6   # a torch scheduler goes on from the step
    plain = io.BytesIO(); torch.save({k: v for k, v in ck.items() if k not in (*ALIASES, 'scheduler_state_dict')}, plain)
    assert list_checkpoints(runs)[-1].stat().st_size - len(plain.getvalue()) < 400   # the names refer to the same entries

def weights_only_files(runs, tmp_path):
    "A checkpoint of the cs336 helpers, and the two guides' layouts (torch.save'd, no digest), of the run's final weights."
    from longctx_nb import cs336
    model = load_model(runs); opt = torch.optim.AdamW(model.parameters()); cfg = json.loads((runs / 'config.json').read_text())
    files = {'cs336': cs336.save_checkpoint(model, opt, 6, tmp_path / 'cs336.pt'),
             'mamba guide': tmp_path / 'mamba.pt', 'gpu guide': tmp_path / 'gpu.pt'}
    torch.save({'model': model.state_dict(), 'optimizer': opt.state_dict(), 'iter': 6, 'config': vars(model.cfg)}, files['mamba guide'])
    torch.save({'step': 6, 'model_state_dict': model.state_dict(), 'optimizer_state_dict': opt.state_dict(),
                'scheduler_state_dict': {}, 'loss': 4.0, 'config': cfg}, files['gpu guide'])
    return model, files

@pytest.mark.parametrize('kind', ['cs336', 'mamba guide', 'gpu guide'])
def test_weights_only_checkpoints(bindir, runs, tmp_path, kind):
    "Evaluated, exported, forked and started from; --resume says what it lacks and what to run instead."
    model, files = weights_only_files(runs, tmp_path); f = files[kind]
    unverified = '' if kind == 'cs336' else (f"warning: {str(f)!r} was written by another program, without a digest: its content "
                                             f"CANNOT be verified and is loaded as is. If you trust it, `sha256sum {f.name} > "
                                             f"{f.name}.sha256` in its folder vouches for it.\n")
    p = run(bindir, tmp_path, '--format', 'safetensors', f, tmp_path / 'out', prog='longctx_export')
    assert p.returncode == 0 and p.stderr == unverified and p.stdout.startswith(f"weights: {f} (step 6)\n"), (p.stdout, p.stderr)
    assert all(torch.equal(a, b) for a, b in zip(load_model(tmp_path / 'out').state_dict().values(), model.state_dict().values()))
    p = run(bindir, tmp_path, '--checkpoint_path', f, '--task', 'perplexity', '--seq_len', 32, '--n_samples', 2, prog='longctx_eval')
    assert p.returncode == 0 and p.stderr == unverified, p.stderr
    p = run(bindir, tmp_path / 'fork', '--trainer.max_steps=1', f'--trainer.fork_from={f}')
    assert p.returncode == 0 and f"from the weights of {f} (step 6); a fresh optimizer" in p.stdout, p.stderr
    p = run(bindir, tmp_path / 'init', '--trainer.max_steps=1', f'--init_from={f}')
    assert p.returncode == 0, p.stderr
    p = run(bindir, tmp_path / 'resume', '--trainer.max_steps=8', f'--resume={f}')
    assert p.returncode == 2 and p.stderr.endswith(
        f"longctx_train: error: {str(f)!r} holds a model's weights and settings but not the full training state that --resume "
        f"continues (it lacks scaler, rng, tokens_seen): --trainer.fork_from={f} starts a new run from its weights; longctx_eval, "
        "longctx_report and longctx_export read it as it is.\n(see longctx_train --help)\n"), p.stderr

def test_report_of_a_cs336_checkpoint(bindir, runs, tmp_path):
    _, files = weights_only_files(runs, tmp_path)
    p = run(bindir, tmp_path, '--checkpoint_path', files['cs336'], '--output_dir', tmp_path / 'rep', '--n_samples', 2, prog='longctx_report')
    assert p.returncode == 0 and 'Traceback' not in p.stderr, p.stderr

def test_first_checkpoint_on_a_full_disk(bindir, small_fs):
    "The first checkpoint does not fit: torch.save's zip writer fails part-way (a RuntimeError, the OSError behind it)."
    p = run(bindir, small_fs, '--trainer.max_steps=4', '--model.d_model=128', '--model.n_layers=2')
    assert p.returncode == 1 and p.stderr.splitlines()[-1] == (
        f"longctx_train: stopped: cannot write '{small_fs}/version_0/checkpoints/step_0000002.pt': No space left on device [ENOSPC]; "
        "the disk is full: free space there or write elsewhere. Nothing partial was left behind. No checkpoint was written."), p.stderr
    clean(p)
    assert not list((small_fs / 'version_0' / 'checkpoints').iterdir()), 'a temporary or partial file was left'

@pytest.mark.parametrize('leave', [0, 4])
def test_hf_export_onto_a_full_disk(bindir, runs, small_fs, leave):
    "Full from the start (the folder, config.json) or in the weights (safetensors' own writer): one line, nothing left."
    pytest.importorskip('transformers')
    fill(small_fs, leave=leave)
    p = run(bindir, small_fs, runs, small_fs / 'hf', prog='longctx_export')
    assert p.returncode == 1 and p.stderr == (f"longctx_export: stopped: cannot write '{small_fs}/hf': No space left on device "
                                             "[ENOSPC]; the disk is full: free space there or write elsewhere. Nothing partial was "
                                             "left behind.\n"), p.stderr
    assert [f.name for f in small_fs.iterdir()] == ['filler']

def test_export_when_only_the_tokenizer_does_not_fit(bindir, runs, small_fs, tmp_path):
    "The weights fit, the tokenizer.json does not (tokenizers' own writer, a plain Exception 'os error 28'): one line too."
    pytest.importorskip('transformers')
    (tmp_path / 'texts').mkdir(); (tmp_path / 'texts' / 'a.txt').write_text(Path(json.__file__).read_text() * 3)
    p = run(bindir, tmp_path, '--trainer.max_steps=1', '--model.d_model=16', '--data.dataset_name=local',
            f'--data.dataset_config={tmp_path / "texts"}', '--data.tokenizer=bpe', '--data.bpe_vocab_size=1000', cache=tmp_path / 'c')
    assert p.returncode == 0, p.stderr
    for fmt, src in (('hf', runs), ('safetensors', tmp_path / 'version_0')):
        fill(small_fs, leave=23)   # 19 pages of 4 KiB for the weights, a few for the configs: tokenizer.json gets 1 or 2
        p = run(bindir, small_fs, '--format', fmt, *(['--no_check'] if fmt == 'hf' else []), src, small_fs / 'ex',
                prog='longctx_export', cache=tmp_path / 'c')
        assert p.returncode == 1 and p.stderr == (f"longctx_export: stopped: cannot write '{small_fs}/ex': No space left on "
                                                 "device [ENOSPC]; the disk is full: free space there or write elsewhere. "
                                                 "Nothing partial was left behind.\n"), (fmt, p.stderr)
        assert [f.name for f in small_fs.iterdir()] == ['filler']
        (small_fs / 'filler').unlink()

@pytest.mark.parametrize('tokenizer', ['byte', 'bpe'])
def test_prepare_onto_a_full_disk(bindir, small_fs, tmp_path, tokenizer):
    "longctx_prepare, and longctx_train preparing into its corpus cache there: one line, no traceback, nothing left."
    (tmp_path / 'texts').mkdir(); (tmp_path / 'texts' / 'a.txt').write_text(Path(json.__file__).read_text() * 3)
    data = ['--data.dataset_name=local', f'--data.dataset_config={tmp_path / "texts"}', f'--data.tokenizer={tokenizer}',
            *(['--data.bpe_vocab_size=1000'] if tokenizer == 'bpe' else [])]
    fill(small_fs, leave=4)   # 16 KiB: less than the tokens (or the BPE tokenizer's spooled text)
    p = run(bindir, tmp_path, *data, '--out', small_fs / 'prep', prog='longctx_prepare')
    line = "No space left on device [ENOSPC]; the disk is full: free space there or write elsewhere. Nothing partial was left behind."
    assert (p.returncode, p.stderr.splitlines()[-1]) == (1, f"longctx_prepare: stopped: cannot write '{small_fs / 'prep'}': {line}")
    clean(p)
    p = run(bindir, tmp_path, *data, cache=small_fs / 'cache')
    cached = next(iter(l.split(' into ')[1].split(' (once')[0] for l in p.stderr.splitlines() if l.startswith('preparing ')))
    assert (p.returncode, p.stderr.splitlines()[-1]) == (1, f"longctx_train: stopped: cannot write '{cached}': {line}")
    clean(p)
    assert sorted(str(f.relative_to(small_fs)) for f in small_fs.rglob('*')) == ['cache', 'filler']

def test_mamba_guide_checkpoint_config(bindir, tmp_path):
    "The Mamba guide's own layout: its config keys read as --config reads them; a config that does not fit its weights: exit 2."
    from longctx_nb.model import LM
    from longctx_nb.config import ModelConfig
    sd = LM(ModelConfig(block='mamba', vocab_size=256, d_model=32, n_layers=4, d_state=16, expand=2)).state_dict()
    guide = {'d_model': 32, 'n_layers': 4, 'd_state': 16, 'expand_factor': 2, 'dropout': 0.1, 'max_seq_len': 64, 'vocab_size': 256}
    for name, n in (('good', 4), ('bad', 2)):
        torch.save({'model': sd, 'iter': 100, 'config': {'model': {**guide, 'n_layers': n}, 'vram': {}, 'training': {}}},
                   tmp_path / f'{name}.pt')
    p = run(bindir, tmp_path, '--format', 'safetensors', tmp_path / 'good.pt', tmp_path / 'out', prog='longctx_export')
    assert p.returncode == 0 and p.stdout.startswith(f"weights: {tmp_path / 'good.pt'} (step 100)\n"), p.stderr
    m = load_model(tmp_path / 'out')
    assert (m.cfg.block, m.cfg.expand, m.cfg.n_layers) == ('mamba', 2, 4) and all(torch.equal(sd[k], v) for k, v in m.state_dict().items())
    p = run(bindir, tmp_path, '--checkpoint_path', tmp_path / 'good.pt', '--task', 'perplexity', '--seq_len', 32, '--n_samples', 2,
            prog='longctx_eval')
    assert p.returncode == 0, p.stderr
    for prog, args in (('longctx_export', (tmp_path / 'bad.pt', tmp_path / 'out2')),
                       ('longctx_eval', ('--checkpoint_path', tmp_path / 'bad.pt', '--task', 'perplexity'))):
        p = run(bindir, tmp_path, *args, prog=prog)
        assert p.returncode == 2 and p.stderr.splitlines()[-2] == (
            f"{prog}: error: the weights in {str(tmp_path / 'bad.pt')!r} do not fit the model its config describes (model.block=mamba, "
            "model.n_layers=2, model.d_model=32): 4 layers in the weights, 2 by the config. Its config must be the one the weights "
            "were trained with."), p.stderr
        clean(p)

def test_an_unreadable_final_export_is_skipped_with_its_reason(bindir, runs, tmp_path):
    "model.safetensors cut short (its header unreadable) and the newest checkpoint too: both skips are said, step 4 is read."
    run_dir = copy_run(runs, tmp_path / 'r')
    os.truncate(list_checkpoints(run_dir)[-1], 5000); os.truncate(run_dir / 'model.safetensors', 300)
    skips = (f"warning: skipping checkpoint step_0000006.pt: {str(run_dir / 'checkpoints' / 'step_0000006.pt')!r} is damaged: its "
             "SHA-256 does not match step_0000006.pt.sha256 (the file changed after it was written).\n"
             f"warning: skipping model.safetensors: {str(run_dir / 'model.safetensors')!r} is damaged: its SHA-256 does not match "
             "SHA256SUMS.\n")
    p = run(bindir, tmp_path, '--format', 'safetensors', run_dir, tmp_path / 'out', prog='longctx_export')
    assert (p.returncode, p.stderr) == (0, skips) and p.stdout.startswith(f"weights: {run_dir / 'checkpoints' / 'step_0000004.pt'} "
                                                                          "(step 4)\n"), (p.stdout, p.stderr)
    p = run(bindir, tmp_path, '--checkpoint_path', run_dir, '--task', 'perplexity', '--seq_len', 32, '--n_samples', 2, prog='longctx_eval')
    assert p.returncode == 0 and p.stderr == skips, p.stderr
