"""`longctx_compare --resume`: a comparison stopped by SIGKILL or SIGTERM continues where it stopped, keeps the runs it
finished, and writes the report an uninterrupted comparison writes."""
import json, os, shlex, signal, subprocess, sys
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

def start_and_stop(held, out: Path, points, *sigs, args=ARGS) -> tuple[int, str]:
    """Start the comparison `args` into `out`, held at each of `points` (one, or one per signal: `core.hold`), and send
    `sigs` there, one after the other: (exit status, stderr)."""
    points = [points] if isinstance(points, str) else points
    p = held([Path(sys.executable).parent / 'longctx_compare', *args, '--output_dir', out], *points, stdout=subprocess.PIPE,
             stderr=subprocess.PIPE, text=True, env={**os.environ, 'OMP_NUM_THREADS': '1'})
    for i, s in enumerate(sigs):
        if 0 < i < len(points): p.reached(points[i])
        p.send_signal(s)
    _, err = p.communicate(timeout=120)
    return p.returncode, err

def steps(ck: Path) -> list[int]:
    "The steps of the checkpoints in `ck`."
    return sorted(int(c.stem.split('_')[1]) for c in ck.glob('step_*.pt'))

def resume_line(err: str) -> list[str]:
    return [l for l in err.splitlines() if l.startswith('resume:')]

def test_resume_after_sigkill(tmp_path, reference, held):
    """Killed when blade's step 20 checkpoint is written (inside a logging window of 7 steps): --resume keeps vanilla's row (not
    retrained), continues blade from that checkpoint (which holds the window's steps so far), and reports as if never stopped."""
    out = tmp_path / 'cmp'
    ck = out / 'runs' / 'blade' / 'checkpoints'
    code, _ = start_and_stop(held, out, 'blade step 21', signal.SIGKILL)
    assert code == -signal.SIGKILL and not (out / 'results' / 'blade.json').exists() and not (out / 'report.md').exists()
    step = steps(ck)[-1]
    assert step % 7 and step < 140, step   # a periodic checkpoint (every 20 steps) off the log rows (every 7)
    kept = {f: f.stat().st_mtime_ns for f in [out / 'results' / 'vanilla.json', *(out / 'runs' / 'vanilla').rglob('*')] if f.is_file()}
    refused = compare(*ARGS, '--output_dir', out)                    # without --resume: the folder is taken, and the flag is named
    assert refused.returncode == 2 and 'it holds a comparison: add --resume to continue it' in refused.stderr, refused.stderr
    r = compare(*ARGS, '--resume', out)                                # --resume DIR, as longctx_train --resume RUN_DIR
    assert r.returncode == 0, r.stderr
    assert resume_line(r.stderr) == [f'resume: 1 of 2 runs finished in {out}, kept (vanilla); training 1: blade (from its step {step} '
                                     'checkpoint)'], r.stderr
    assert 'vanilla: training' not in r.stdout and f'blade: training from its step {step} checkpoint' in r.stdout, r.stdout
    assert {f: f.stat().st_mtime_ns for f in kept} == kept                # vanilla's row and run untouched
    assert same(rows(out), rows(reference)) and table(out) == table(reference)

def window_seconds(run_dir: Path) -> tuple[float, int]:
    "(seconds, tokens) of the training windows logged in the run's metrics.jsonl: each window's tokens over its tokens/s."
    loss_rows = [r for r in map(json.loads, (run_dir / 'metrics.jsonl').read_text().splitlines()) if 'loss' in r]
    prev = [0] + [r['tokens'] for r in loss_rows[:-1]]
    return sum((r['tokens'] - p) / r['tokens_per_sec'] for r, p in zip(loss_rows, prev)), loss_rows[-1]['tokens']

def test_resume_after_sigterm_from_checkpoint(tmp_path, reference, held):
    """SIGTERM while the second block trains, past two thirds of its steps: the message gives the resume command, which continues
    that run from its checkpoint; its training time and tokens/s cover the whole run, not the part after the stop."""
    out = tmp_path / 'cmp'
    ck = out / 'runs' / 'blade' / 'checkpoints'
    code, err = start_and_stop(held, out, 'blade step 101', signal.SIGTERM)
    assert code == 143 and 'Traceback' not in err, err
    cmd = ['longctx_compare', *ARGS, '--output_dir', str(out), '--resume']
    assert err.strip().endswith(f'The finished runs are kept in {out}; continue the comparison with: {shlex.join(cmd)}'), err
    assert (out / 'results' / 'vanilla.json').exists() and not (out / 'results' / 'blade.json').exists()
    step = steps(ck)[-1]
    assert 100 < step < 150, step
    r = compare(*cmd[1:])
    assert r.returncode == 0, r.stderr
    assert resume_line(r.stderr) == [f'resume: 1 of 2 runs finished in {out}, kept (vanilla); training 1: blade (from its step {step} checkpoint)'], r.stderr
    assert 'blade: training from its step' in r.stdout, r.stdout
    assert same(rows(out), rows(reference)) and table(out) == table(reference)
    row = json.loads((out / 'results' / 'blade.json').read_text())
    secs, tokens = window_seconds(out / 'runs' / 'blade')            # every logged window, before the stop and after
    assert tokens == 150 * 4 * 32 and row['train_seconds'] == pytest.approx(secs, rel=0.02, abs=0.15), (row, secs)
    assert row['run_tokens_per_sec'] == pytest.approx(tokens / secs, rel=0.02), (row, tokens / secs)
    # (the windows summed span all 150 steps, before the stop and after, so the time is the whole run's, not a third of it;
    #  a ratio to the reference's time would compare two processes' clocks, which a loaded machine skews)

def test_second_signal_gives_the_comparisons_command(tmp_path, held):
    "Two SIGTERMs at once while a block trains: the run aborts, and the message gives the comparison's resume command, not the trainer's."
    out = tmp_path / 'cmp'
    code, err = start_and_stop(held, out, ['vanilla step 21', 'vanilla step 22'], signal.SIGTERM, signal.SIGTERM)   # the second once
    # the first is seen: two sent at once may arrive as one
    assert code == 143 and 'Traceback' not in err, err
    cmd = shlex.join(['longctx_compare', *ARGS, '--output_dir', str(out), '--resume'])
    assert err.startswith('longctx_compare: ') and err.strip().endswith(f'continue the comparison with: {cmd}'), err
    assert 'longctx_train' not in err and '--resume=' not in err and err.count('continue') == 1, err

@pytest.mark.parametrize('sig, code, at', [(signal.SIGTERM, 143, 'evaluation'), (signal.SIGINT, 130, 'evaluation'),
                                          (signal.SIGTERM, 143, 'export')])
def test_signal_outside_training(tmp_path, sig, code, at, held):
    "A signal while the first block is evaluated, or exports its model and draws its loss plot (its steps done): the comparison stops with the resume command."
    out = tmp_path / 'cmp'
    got, err = start_and_stop(held, out, f'vanilla {at}', sig)   # held after its model is written, or before its evaluation
    assert got == code and 'Traceback' not in err, err
    cmd = shlex.join(['longctx_compare', *ARGS, '--output_dir', str(out), '--resume'])
    assert err.strip() == (f'longctx_compare: stopped by {signal.Signals(sig).name}. The finished runs are kept in {out}; continue the '
                           f'comparison with: {cmd}'), err
    assert not (out / 'results' / 'vanilla.json').exists() and not (out / 'runs' / 'blade').exists()

def test_resume_after_stop_in_export(tmp_path, reference, held):
    """SIGTERM while the first block exports its model (all its steps done, its final checkpoint written, no result row): --resume
    trains no step of it, evaluates it from that checkpoint, and its row's training loss, time and tokens/s are the ones stored."""
    from longctx_nb.checkpoint import read_checkpoint
    out = tmp_path / 'cmp'
    run = out / 'runs' / 'vanilla'
    code, _ = start_and_stop(held, out, 'vanilla export', signal.SIGTERM)
    assert code == 143 and not (out / 'results' / 'vanilla.json').exists()
    ck = run / 'checkpoints' / 'step_0000150.pt'
    files = {f: (f.stat().st_mtime_ns, f.read_bytes()) for f in [*(run / 'checkpoints').iterdir(), run / 'metrics.jsonl']}
    r = compare(*ARGS, '--output_dir', out, '--resume')
    assert r.returncode == 0, r.stderr
    assert resume_line(r.stderr) == [f'resume: 0 of 2 runs finished in {out}, kept; evaluating 1 whose steps were all done, without '
                                     'training (the model and its training results from its final checkpoint): vanilla (its step 150 '
                                     'checkpoint); training 1: blade'], r.stderr
    assert 'vanilla: all its steps done, no training: evaluating it from its step 150 checkpoint' in r.stdout, r.stdout
    assert 'vanilla: training' not in r.stdout and 'blade: training' in r.stdout, r.stdout
    assert {f: (f.stat().st_mtime_ns, f.read_bytes()) for f in [*(run / 'checkpoints').iterdir(), run / 'metrics.jsonl']} == files
    stored, row = read_checkpoint(ck), json.loads((out / 'results' / 'vanilla.json').read_text())   # no step trained: nothing rewritten
    assert (row['train_loss'], row['train_seconds'], row['run_tokens_per_sec']) == (
        round(stored['last_loss'], 4), round(stored['train_time'], 1), round(stored['train_tokens'] / stored['train_time'], 1)), row
    assert stored['train_tokens'] == 150 * 4 * 32 and row['val_loss'] == round(stored['val_loss'], 4)
    assert same(rows(out), rows(reference)) and table(out) == table(reference)
