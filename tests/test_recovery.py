"""Recovery, tried on real `longctx_train` processes: divergence, stop signals, dropout, a run killed before its first checkpoint."""
import json, math, os, random, resource, shutil, signal, subprocess
from pathlib import Path
import pytest, torch

TINY = ['--data.seq_len=64', '--data.batch_size=4', '--model.n_layers=2', '--model.d_model=64', '--trainer.log_every_n_steps=1',
        '--trainer.eval_interval=0', '--trainer.enable_progress_bar=false', '--trainer.plot=false', '--trainer.tensorboard=false']
ENV = {**os.environ, 'OMP_NUM_THREADS': '1'}

def run(bindir, root, *args, check=True):
    p = subprocess.run([str(bindir / 'longctx_train'), *TINY, f'--trainer.default_root_dir={root}', *args],
                       capture_output=True, text=True, env=ENV, timeout=300)
    if check: assert p.returncode == 0, p.stderr
    return p

def rows(run_dir):
    return [json.loads(l) for l in (Path(run_dir) / 'metrics.jsonl').read_text().splitlines()]  # strict: json.loads

def losses(run_dir): return {r['step']: r['loss'] for r in rows(run_dir) if 'lr' in r}

def cpu_seconds(pid=None) -> float:
    """CPU seconds (user + system) used so far by process `pid`, or (None) by this process's children that have ended:
    the work done, the same on a busy machine."""
    if pid is None: u = resource.getrusage(resource.RUSAGE_CHILDREN); return u.ru_utime + u.ru_stime
    f = Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf('SC_CLK_TCK')

def strict(path):
    for l in Path(path).read_text().splitlines():
        json.loads(l, parse_constant=lambda c: pytest.fail(f'bare {c} in {path}'))

DIVERGE = ['--trainer.max_steps=16', '--trainer.checkpoint_interval=1', '--trainer.learning_rate=3000',
           '--trainer.warmup_steps=8', '--trainer.max_bad_steps=3']

def test_divergence_names_a_healthy_checkpoint(bindir, tmp_path):
    p = run(bindir, tmp_path, *DIVERGE, check=False)
    assert p.returncode == 1, p.stderr
    err = ' '.join(p.stderr.split())
    assert 'the run diverged at step' in err and '--trainer.learning_rate' in err and '--trainer.warmup_steps' in err
    assert '--trainer.gradient_clip_val' in err
    named = Path(err.split('The newest healthy checkpoint is ')[1].split(' ')[0])
    ck = torch.load(named, weights_only=True)
    assert all(torch.isfinite(v).all() for v in ck['model'].values())
    first_bad = int(err.split('diverged at step ')[1].split('.')[0])
    assert ck['step'] < first_bad - 1   # not the checkpoint that fed the first bad step
    run_dir = tmp_path / 'version_0'
    strict(run_dir / 'metrics.jsonl')
    last = rows(run_dir)[-1]
    assert last['grad_norm'] is None and 'grad_norm' in last['nonfinite']   # the last bad step is logged
    # resuming from it: its first step is finite (the checkpoint itself is sound)
    p = run(bindir, tmp_path, *DIVERGE, f'--resume={named}', check=False)
    after = [r for r in rows(run_dir) if r['step'] == ck['step'] + 1]
    assert after and after[0]['loss'] is not None and math.isfinite(after[0]['loss']) and after[0]['grad_norm'] is not None

ARGS = ['--trainer.max_steps=14', '--trainer.checkpoint_interval=5', '--trainer.keep_last=2']

@pytest.fixture(scope='module')
def reference(bindir, tmp_path_factory):
    root = tmp_path_factory.mktemp('full')
    run(bindir, root, *ARGS)
    return losses(root / 'version_0'), torch.load(root / 'version_0' / 'checkpoints' / 'step_0000014.pt', weights_only=True)['model']

@pytest.mark.parametrize('sig,code', [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGUSR1, 75)])
def test_signal_stops_with_checkpoint_and_resumes_exactly(bindir, tmp_path, reference, sig, code, held):
    stop_after = random.Random(int(sig)).randint(3, 10)
    proc = held([bindir / 'longctx_train', *TINY, *ARGS, f'--trainer.default_root_dir={tmp_path}'], f'version_0 step {stop_after}',
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    assert 'Continue with: ' in err and '--resume=' in err
    stopped = max(losses(tmp_path / 'version_0'))
    assert f'step_{stopped:07d}.pt' in err
    cmd = err.split('Continue with: ')[1].strip().split()
    assert cmd[0] == 'longctx_train'
    p = subprocess.run([str(bindir / 'longctx_train'), *cmd[1:]], capture_output=True, text=True, env=ENV, timeout=300)
    assert p.returncode == 0, p.stderr
    got = losses(tmp_path / 'version_0')
    assert sorted(got) == list(range(1, 15)) and got == reference[0]   # no step lost, bitwise
    w = torch.load(tmp_path / 'version_0' / 'checkpoints' / 'step_0000014.pt', weights_only=True)['model']
    assert all(torch.equal(w[k], reference[1][k]) for k in w)

def test_dropout_resume_is_bitwise_exact(bindir, tmp_path):
    args = ['--trainer.max_steps=8', '--trainer.checkpoint_interval=4', '--trainer.keep_last=0', '--model.dropout=0.1']
    run(bindir, tmp_path / 'a', *args)
    shutil.copytree(tmp_path / 'a', tmp_path / 'b')
    (tmp_path / 'b' / 'version_0' / 'checkpoints' / 'step_0000008.pt').unlink()   # resume steps 5..8 from step 4's checkpoint
    run(bindir, tmp_path / 'b', *args, '--resume')
    a, b = losses(tmp_path / 'a' / 'version_0'), losses(tmp_path / 'b' / 'version_0')
    assert sorted(b) == list(range(1, 9)) and a == b

def test_killed_before_first_checkpoint_restarts(bindir, tmp_path, held):
    d = tmp_path / 'exp1'
    proc = held([bindir / 'longctx_train', *TINY, f'--trainer.default_root_dir={tmp_path}', '--trainer.max_steps=50',
                 '--trainer.run_name=exp1'], 'exp1 step 1', stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    assert (d / 'metrics.jsonl').read_text()   # its first step logged
    proc.send_signal(signal.SIGKILL); proc.wait()   # killed before its first checkpoint (every 1000 steps)
    assert not (d / 'checkpoints').exists()
    p = run(bindir, tmp_path, '--trainer.max_steps=3', '--trainer.run_name=exp1', check=False)
    assert p.returncode == 2 and '--resume=' in p.stderr and 'To continue it, run: longctx_train' in ' '.join(p.stderr.split())
    p = run(bindir, tmp_path, '--trainer.max_steps=3', '--trainer.run_name=exp1', '--resume')
    assert 'no checkpoint yet; starting it again from step 0' in p.stdout
    assert sorted(losses(d)) == [1, 2, 3] and (d / 'checkpoints' / 'step_0000003.pt').exists()

def test_resume_restores_the_runs_config(bindir, tmp_path):
    def run(bindir, root, *args, check=True):   # without TINY's sequence length and batch size
        p = subprocess.run([str(bindir / 'longctx_train'), *TINY[2:], f'--trainer.default_root_dir={root}', *args],
                           capture_output=True, text=True, env=ENV, timeout=300)
        if check: assert p.returncode == 0, p.stderr
        return p
    run(bindir, tmp_path, '--trainer.max_steps=3', '--trainer.run_name=exp1', '--data.seq_len=32', '--data.batch_size=2')
    p = run(bindir, tmp_path, '--trainer.run_name=exp1', '--resume', '--trainer.max_steps=5')   # no seq_len, no batch_size
    assert 'resume: trainer.max_steps 3 -> 5' in p.stdout and 'batch 2 x 32' in p.stdout
    r = rows(tmp_path / 'exp1')
    assert max(x['step'] for x in r) == 5 and {x['seq_len'] for x in r if 'seq_len' in x} == {32}
    p = run(bindir, tmp_path, '--trainer.run_name=exp1', '--resume', '--trainer.learning_rate=1e-2', check=False)
    assert p.returncode == 2 and 'trainer.learning_rate: checkpoint' in p.stderr and '--trainer.fork_from=' in p.stderr
    p = run(bindir, tmp_path, '--trainer.run_name=fork', f'--trainer.fork_from={tmp_path / "exp1"}', '--trainer.learning_rate=1e-2',
            '--trainer.max_steps=2')
    assert 'fork: trainer.learning_rate' in p.stdout and 'batch 2 x 32' in p.stdout and sorted(losses(tmp_path / 'fork')) == [1, 2]
    # the GPU-native trainer's spelling and the cs336-style one
    p = run(bindir, tmp_path, f'--checkpoint_dir={tmp_path / "exp1"}', '--resume', '--save_steps=1', '--trainer.max_steps=6')
    assert 'from step_0000005.pt' in p.stdout
    ck = sorted((tmp_path / 'exp1' / 'checkpoints').glob('*.pt'))[-1]
    p = run(bindir, tmp_path, f'--checkpoint_path={ck}', '--resume', '--trainer.max_steps=7')
    assert f'from {ck.name}' in p.stdout and max(losses(tmp_path / 'exp1')) == 7

def test_second_signal_during_the_checkpoint_write_aborts_at_once(bindir, tmp_path, held):
    "The first SIGTERM after step 3, the second inside the write of the stop's checkpoint (step 4's; the run is held there)."
    big = ['--model.d_model=512', '--model.n_layers=4', '--model.n_heads=8', '--data.seq_len=32', '--data.batch_size=1',
           '--trainer.max_steps=50', '--trainer.checkpoint_interval=2', '--trainer.keep_last=0']
    proc = held([bindir / 'longctx_train', *TINY, *big, f'--trainer.default_root_dir={tmp_path}'], 'version_0 step 3',
                'write step_0000004.pt', stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    ckdir = tmp_path / 'version_0' / 'checkpoints'
    first = ckdir / 'step_0000002.pt'
    assert first.exists()
    proc.send_signal(signal.SIGTERM)
    proc.reached('write step_0000004.pt')   # the stop's checkpoint: its temporary file is written, not yet renamed
    writing = next((f for f in os.listdir(ckdir) if f.endswith('.pt.tmp') and 'step_0000002' not in f), None)
    assert writing, 'the run ended before its checkpoint was caught being written'
    t0 = cpu_seconds() + cpu_seconds(proc.pid); proc.send_signal(signal.SIGTERM)   # t0: the CPU time it had used
    out, err = proc.communicate(timeout=300)   # bounds a hang
    assert proc.returncode == 143 and cpu_seconds() - t0 < 30, err   # at once: under 30 CPU seconds after the signal
    msg = ' '.join(err.split())
    assert 'aborted by a second SIGTERM' in msg and 'nothing partial is left' in msg, msg
    assert f'The newest checkpoint is {first}' in msg and 'Traceback' not in err
    assert sorted(os.listdir(ckdir)) == ['step_0000002.pt', 'step_0000002.pt.sha256']   # no .tmp, no half checkpoint
    torch.load(first, weights_only=True)
