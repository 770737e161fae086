"""Exact resume after a real SIGKILL of a real `longctx_train`, and resume past damaged checkpoints."""
import json, os, random, signal, subprocess, time
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
    return losses(root / 'version_0')

@pytest.mark.parametrize('seed', [0, 1])
def test_sigkill_then_resume_is_bitwise_exact(bindir, tmp_path, reference, seed):
    kill_after = random.Random(seed).randint(3, 11)  # an arbitrary step
    proc = subprocess.Popen([str(bindir / 'longctx_train'), *ARGS, f'--trainer.default_root_dir={tmp_path}'],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, 'OMP_NUM_THREADS': '1'})
    metrics = tmp_path / 'version_0' / 'metrics.jsonl'
    while proc.poll() is None and not (metrics.exists() and len(metrics.read_text().splitlines()) >= kill_after): time.sleep(0.01)
    assert proc.poll() is None, 'the run finished before it could be killed'
    proc.send_signal(signal.SIGKILL); proc.wait()
    train(bindir, tmp_path, '--resume')
    got = losses(tmp_path / 'version_0')
    assert sorted(got) == list(range(1, 15))
    assert got == reference  # every step, bitwise

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
