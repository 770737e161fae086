"""`longctx_compare --resume`: a comparison stopped by SIGKILL or SIGTERM continues where it stopped, keeps the runs it
finished, and writes the report an uninterrupted comparison writes."""
import json, os, shlex, signal, subprocess, sys, time
from pathlib import Path
import pytest

TINY = {'model.n_layers': 1, 'model.d_model': 32, 'model.n_heads': 2, 'model.d_ff': 64, 'data.copy_len': 4,
        'model.chunk_size': 16, 'trainer.checkpoint_interval': 20}
ARGS = ['--blocks', 'vanilla', 'blade', '--task', 'copy', '--seq_len', '32', '--max_steps', '150', '--batch_size', '4',
        '--eval_lengths', '32', '64', '--n_samples', '8', '--device', 'cpu', '--no_match_params', *[f'--{k}={v}' for k, v in TINY.items()]]
TIMING = ('train_seconds', 'run_tokens_per_sec', 'tokens_per_sec', 'peak_mib', 'seconds')   # clocks: all else is deterministic

def rows(out: Path) -> list[dict]:
    "The report's rows without the clock readings and the run folders (which name the output folder)."
    rs = json.loads((out / 'report.json').read_text())['rows']
    return [{k: v for k, v in r.items() if k not in TIMING and k not in ('run_dir', 'per_seed')} | {'per_seed': [
        {k: v for k, v in p.items() if k != 'run_dir'} for p in r['per_seed']]} for r in rs]

def same(a: list[dict], b: list[dict]) -> bool:
    "Equal rows; the training-loss curves to the rounding of the sums of a window joined across a stop."
    curves = [(r.pop('curve'), q.pop('curve')) for r, q in zip(a, b)]
    return a == b and all(len(x) == len(y) and all(s == t and l == pytest.approx(m, rel=1e-12) for (s, l), (t, m) in zip(x, y))
                          for x, y in curves)

def table(out: Path) -> list[list[str]]:
    "The report table's cells, without tokens/s, peak MiB and train s."
    lines = [l for l in (out / 'report.md').read_text().splitlines() if l.startswith('| ') and 'block' not in l]
    return [[c for i, c in enumerate(l.split(' | ')) if i not in (3, 4, 9)] for l in lines]

@pytest.fixture(scope='module')
def reference(tmp_path_factory):
    "The same comparison, uninterrupted."
    out = tmp_path_factory.mktemp('ref') / 'cmp'
    p = compare(*ARGS, '--output_dir', out)
    assert p.returncode == 0, p.stderr
    return out

def compare(*args):
    env = {**os.environ, 'OMP_NUM_THREADS': '1'}
    return subprocess.run([Path(sys.executable).parent / 'longctx_compare', *map(str, args)], capture_output=True, text=True,
                          timeout=300, env=env)

def start_and_stop(out: Path, until, sig) -> tuple[int, str]:
    "Start the comparison into `out`, and send `sig` as soon as `until()` holds: (exit status, stderr)."
    p = subprocess.Popen([Path(sys.executable).parent / 'longctx_compare', *ARGS, '--output_dir', str(out)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env={**os.environ, 'OMP_NUM_THREADS': '1'})
    t0 = time.time()
    while not until() and p.poll() is None and time.time() - t0 < 120: time.sleep(0.01)
    assert p.poll() is None, f'the comparison ended before it was to be stopped: {p.communicate()}'
    p.send_signal(sig)
    return p.returncode if p.wait(timeout=120) is None else p.returncode, p.communicate()[1]

def test_resume_after_sigkill(tmp_path, reference):
    "Killed after the first block's row is written: --resume keeps it (not retrained), trains the second, and reports as if never stopped."
    out = tmp_path / 'cmp'
    code, _ = start_and_stop(out, (out / 'results' / 'vanilla.json').exists, signal.SIGKILL)
    assert code == -signal.SIGKILL and not (out / 'results' / 'blade.json').exists() and not (out / 'report.md').exists()
    kept = {f: f.stat().st_mtime_ns for f in [out / 'results' / 'vanilla.json', *(out / 'runs' / 'vanilla').rglob('*')] if f.is_file()}
    refused = compare(*ARGS, '--output_dir', out)                    # without --resume: the folder is taken, and the flag is named
    assert refused.returncode == 2 and 'it holds a comparison: add --resume to continue it' in refused.stderr, refused.stderr
    r = compare(*ARGS, '--resume', out)                                # --resume DIR, as longctx_train --resume RUN_DIR
    assert r.returncode == 0, r.stderr
    line = [l for l in r.stderr.splitlines() if l.startswith('resume:')]
    assert line and line[0].startswith(f'resume: 1 of 2 runs finished in {out}, kept (vanilla); training 1: blade'), r.stderr
    assert 'vanilla: training' not in r.stdout and 'blade: training' in r.stdout, r.stdout
    assert {f: f.stat().st_mtime_ns for f in kept} == kept                # vanilla's row and run untouched
    assert same(rows(out), rows(reference)) and table(out) == table(reference)

def test_resume_after_sigterm_from_checkpoint(tmp_path, reference):
    "SIGTERM while the second block trains: the message gives the resume command, which continues that run from its checkpoint."
    out = tmp_path / 'cmp'
    ck = out / 'runs' / 'blade' / 'checkpoints'
    code, err = start_and_stop(out, lambda: any(ck.glob('step_*.pt')), signal.SIGTERM)
    assert code == 143 and 'Traceback' not in err, err
    cmd = ['longctx_compare', *ARGS, '--output_dir', str(out), '--resume']
    assert err.strip().endswith(f'The finished runs are kept in {out}; continue the comparison with: {shlex.join(cmd)}'), err
    assert (out / 'results' / 'vanilla.json').exists() and not (out / 'results' / 'blade.json').exists()
    step = max(int(c.stem.split('_')[1]) for c in ck.glob('step_*.pt'))
    assert 0 < step < 150, step
    r = compare(*cmd[1:])
    assert r.returncode == 0, r.stderr
    line = [l for l in r.stderr.splitlines() if l.startswith('resume:')]
    assert line == [f'resume: 1 of 2 runs finished in {out}, kept (vanilla); training 1: blade (from its step {step} checkpoint)'], r.stderr
    assert 'blade: training from its step' in r.stdout, r.stdout
    assert same(rows(out), rows(reference)) and table(out) == table(reference)
