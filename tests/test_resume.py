"""Exact resume after a real SIGKILL of a real `longctx_train`, and resume past damaged checkpoints."""
import json, os, random, signal, subprocess, time
from types import SimpleNamespace
from pathlib import Path
import pytest

ARGS = ['--trainer.max_steps=14', '--data.seq_len=64', '--data.batch_size=4', '--model.n_layers=2', '--trainer.log_every_n_steps=1',
        '--trainer.checkpoint_interval=2', '--trainer.keep_last=2', '--trainer.eval_interval=0', '--trainer.enable_progress_bar=false',
        '--trainer.plot=false', '--trainer.tensorboard=false']

def losses(run_dir):
    rows = [json.loads(l) for l in (Path(run_dir) / 'metrics.jsonl').read_text().splitlines()]
    return {r['step']: r['loss'] for r in rows if 'loss' in r}

def train(bindir, root, *extra, check=True):
    p = subprocess.run([str(bindir / 'longctx_train'), *ARGS, f'--trainer.default_root_dir={root}', *extra],
                       capture_output=True, text=True, env={**os.environ, 'OMP_NUM_THREADS': '1'}, timeout=600)
    if check: assert p.returncode == 0, p.stderr
    return p

@pytest.fixture(scope='module')
def reference(bindir, tmp_path_factory):
    root = tmp_path_factory.mktemp('full')
    train(bindir, root)
    return losses(root / 'version_0'), (root / 'version_0' / 'SHA256SUMS').read_text()

@pytest.mark.parametrize('seed', [0, 1])
def test_sigkill_then_resume_is_bitwise_exact(bindir, tmp_path, reference, seed, held):
    kill_after = random.Random(seed).randint(3, 11)  # an arbitrary step
    proc = held([bindir / 'longctx_train', *ARGS, f'--trainer.default_root_dir={tmp_path}'], f'version_0 step {kill_after}',
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, 'OMP_NUM_THREADS': '1'})
    metrics = tmp_path / 'version_0' / 'metrics.jsonl'
    assert len(metrics.read_text().splitlines()) >= kill_after   # held after that step's line: killed part-way
    proc.send_signal(signal.SIGKILL); proc.wait()
    train(bindir, tmp_path, '--resume')
    got = losses(tmp_path / 'version_0')
    assert sorted(got) == list(range(1, 15))
    assert got == reference[0]  # every step, bitwise
    assert (tmp_path / 'version_0' / 'SHA256SUMS').read_text() == reference[1]   # and its export byte for byte: checksums compare runs

def test_resume_skips_damaged_and_refuses_foreign(bindir, tmp_path):
    train(bindir, tmp_path, '--trainer.max_steps=8')
    first = losses(tmp_path / 'version_0')
    ckpts = sorted((tmp_path / 'version_0' / 'checkpoints').glob('step_*.pt'))
    assert [c.name for c in ckpts] == ['step_0000006.pt', 'step_0000008.pt']  # keep_last=2
    ckpts[-1].write_bytes(ckpts[-1].read_bytes()[:1000])  # truncate the newest
    p = train(bindir, tmp_path, '--resume', '--trainer.max_steps=8')
    assert 'skipping checkpoint' in p.stderr and 'step_0000008.pt' in p.stderr
    assert 'from step_0000006.pt' in p.stdout
    assert losses(tmp_path / 'version_0') == first  # steps 7 and 8 again, exactly
    # a malicious pickle named as the checkpoint to resume is refused and never executed
    evil = tmp_path / 'evil.pt'
    evil.write_bytes(b"cos\nsystem\n(S'touch " + str(tmp_path / 'pwned').encode() + b"'\ntR.")
    p = train(bindir, tmp_path, f'--resume={evil}', check=False)
    assert p.returncode == 2 and 'not a readable checkpoint' in p.stderr and not (tmp_path / 'pwned').exists()
    # a different model
    p = train(bindir, tmp_path, '--resume', '--model.d_model=64', '--trainer.max_steps=20', check=False)
    assert p.returncode == 2 and 'model.d_model: checkpoint 128, this run 64' in p.stderr

def test_tensorboard_keeps_the_checkpoint_step(bindir, tmp_path):
    "Resumed from step 4's checkpoint, TensorBoard (its own reader) still shows steps 1-6 and validation at 2, 4, 6."
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    args = ['--trainer.max_steps=6', '--trainer.eval_interval=2', '--trainer.limit_val_batches=1', '--trainer.tensorboard=true',
            '--trainer.keep_last=3']
    train(bindir, tmp_path, *args)
    run = tmp_path / 'version_0'
    for f in run.glob('checkpoints/step_0000006.pt*'): f.unlink()   # as if killed before it
    train(bindir, tmp_path, '--resume', *args)
    acc = EventAccumulator(str(run)); acc.Reload()
    rows = [json.loads(l) for l in (run / 'metrics.jsonl').read_text().splitlines()]
    for tag, key in (('train/loss', 'loss'), ('val/loss', 'val_loss')):
        assert [(e.step, e.value) for e in acc.Scalars(tag)] == \
            [(r['step'], pytest.approx(r[key])) for r in rows if key in r], tag
    assert [e.step for e in acc.Scalars('val/loss')] == [2, 4, 6]

class _Killed(Exception): "Stands for a SIGKILL between two steps."

def fake_clock_run(monkeypatch, root, max_steps=8, kill_at=None, quiet=True):
    """An in-process run of `max_steps` on a fake clock: 0-based step s takes s + 1 seconds and nothing else takes any time;
    `kill_at` (0-based) ends the process before that step. (its result or None, the steps it trained)."""
    import longctx_nb.train as T
    from longctx_nb.config import Config, apply_overrides
    clock, trained = [0.0], []
    monkeypatch.setattr(T, 'time', SimpleNamespace(perf_counter=lambda: clock[0], time=time.time))
    real = getattr(T.train_step, 'real', T.train_step)   # the trainer's own, under an earlier call's stand-in
    def step(r, s, *a):
        if s == kill_at: raise _Killed()
        trained.append(s); out = real(r, s, *a); clock[0] += s + 1; return out
    step.real = real; monkeypatch.setattr(T, 'train_step', step)
    cfg = apply_overrides(Config(), {'data.seq_len': 32, 'data.batch_size': 2, 'model.n_layers': 1, 'trainer.max_steps': max_steps,
                                     'trainer.log_every_n_steps': 4, 'trainer.checkpoint_interval': 6, 'trainer.keep_last': 0,
                                     'trainer.eval_interval': 0, 'trainer.limit_val_batches': 1, 'trainer.enable_progress_bar': False,
                                     'trainer.plot': False, 'trainer.tensorboard': False, 'trainer.run_name': 'run',
                                     'trainer.default_root_dir': str(root), **({'trainer.resume': 'last'} if kill_at is None and
                                                                               (root / 'run').exists() else {})})
    try: return T.train(cfg, quiet=quiet), trained
    except _Killed: return None, trained

def test_resume_mid_window_logs_the_whole_window(monkeypatch, tmp_path):
    """Killed after its step-6 checkpoint, between the log rows of steps 4 and 8, and resumed: the row of step 8 covers steps 5 to
    8, their 4 x 64 tokens over their 5 + 6 + 7 + 8 seconds, and the run's time and tokens/s cover all 8 steps, as uninterrupted."""
    from longctx_nb.checkpoint import read_checkpoint, checkpoint_path
    ref, _ = fake_clock_run(monkeypatch, tmp_path / 'ref')
    rows = lambda res: {r['step']: r for r in res.metrics if 'loss' in r}
    tok = 2 * 32                                                          # tokens per step
    test_rows = rows(ref)
    assert sorted(test_rows) == [4, 8] and test_rows[8]['tokens_per_sec'] == round(4 * tok / 26, 1)
    assert (ref.train_seconds, ref.tokens_per_sec) == (36.0, 8 * tok / 36)
    assert fake_clock_run(monkeypatch, tmp_path / 'cut', kill_at=6) == (None, [0, 1, 2, 3, 4, 5])
    ck = read_checkpoint(checkpoint_path(tmp_path / 'cut' / 'run', 6))
    assert (ck['train_time'], ck['train_tokens']) == (10.0, 4 * tok)    # the logged window: steps 1-4
    assert {k: ck['window'][k] for k in ('steps', 'tokens', 'seconds')} == {'steps': 2, 'tokens': 2 * tok, 'seconds': 11.0}
    res, trained = fake_clock_run(monkeypatch, tmp_path / 'cut')
    assert trained == [6, 7]
    got = rows(res)
    assert sorted(got) == [4, 8] and got[8]['tokens_per_sec'] == round(4 * tok / 26, 1), got[8]   # not 2 x 64 tokens / 15 s
    assert got[8]['loss'] == test_rows[8]['loss'] and got[8]['tokens'] == 8 * tok                  # the mean of steps 5-8, bitwise
    assert (res.train_seconds, res.tokens_per_sec, res.train_loss) == (36.0, 8 * tok / 36, ref.train_loss)

def test_resume_of_a_finished_run_trains_nothing(monkeypatch, tmp_path):
    "Resumed from its final checkpoint, a run takes no step and reports the losses, time and tokens/s of the run that wrote it."
    ref, _ = fake_clock_run(monkeypatch, tmp_path)
    (tmp_path / 'run' / 'model.safetensors').unlink()
    res, trained = fake_clock_run(monkeypatch, tmp_path)
    assert trained == [] and (tmp_path / 'run' / 'model.safetensors').is_file()   # exported again, from the checkpoint
    assert ref.val_loss is not None and ref.train_loss == ref.train_loss        # both measured (not NaN)
    assert ((res.train_loss, res.val_loss, res.train_seconds, res.tokens_per_sec, res.steps) ==
            (ref.train_loss, ref.val_loss, ref.train_seconds, ref.tokens_per_sec, ref.steps))
    assert res.metrics == ref.metrics

def test_resume_from_an_older_checkpoint_says_what_its_row_covers(monkeypatch, tmp_path, capsys):
    "A mid-window checkpoint without its window (written before checkpoints held it): the resumed run says which steps its next row covers."
    from longctx_nb.checkpoint import read_checkpoint, checkpoint_path, save_checkpoint
    fake_clock_run(monkeypatch, tmp_path, kill_at=6)
    path = checkpoint_path(tmp_path / 'run', 6)
    old = {k: v for k, v in read_checkpoint(path).items() if k not in ('format', 'window', 'last_loss', 'val_loss', 'val_acc', 'skipped')}
    save_checkpoint(path, old)
    res, trained = fake_clock_run(monkeypatch, tmp_path, quiet=False)
    assert trained == [6, 7]
    assert ('note: step_0000006.pt was written by an older longctx_nb, without its open log window: the row at step 8 covers only '
            'the steps from 7 on') in capsys.readouterr().out
    assert [r['tokens_per_sec'] for r in res.metrics if r['step'] == 8 and 'loss' in r] == [round(2 * 64 / 15, 1)]   # steps 7-8: 7 + 8 s
