"Benchmarks that a shared machine cannot fool, the peak FLOP/s cache, and the GPU check's refusal without CUDA."
import json, os, re, subprocess, sys
from pathlib import Path
import pytest, torch

from longctx_nb.core import UsageError
from longctx_nb.measure import Timing, time_reps, device_peak_flops, peak_key, mfu, format_mfu, REMEASURE_ENV
from longctx_nb.measure import timing_table
from longctx_nb.bench import run_bench
from longctx_nb.gpu import largest_fitting, compare_paths, gpu_table

ROOT = Path(__file__).resolve().parents[1]
NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason='tests the refusal on a machine without CUDA')


def fake_clock(durations):
    "A clock whose k-th timed call lasts durations[k] seconds."
    ticks = iter([x for d in durations for x in (0.0, d)])
    return lambda: next(ticks)


def test_injected_slow_repetitions_mark_a_timing_disturbed():
    calls = []
    t = time_reps(lambda: calls.append(1), reps=5, warmup=1, timer=fake_clock([0.010, 0.016, 0.015, 0.010, 0.017]))
    assert len(calls) == 6 and (t.min, t.median, t.disturbed) == (0.010, 0.015, True)
    assert 'DISTURBED (median/min > 1.3)' in str(t)


def test_one_slow_repetition_changes_neither_min_nor_median():
    t = time_reps(lambda: None, reps=5, timer=fake_clock([0.010, 0.0105, 0.5, 0.010, 0.0102]))
    assert (t.min, t.median, t.disturbed) == (0.010, 0.0102, False)
    assert Timing([1.0, 2.0]).disturbed is None     # too few calls to judge


def test_timing_table_gives_ratios_to_the_reference_and_marks_disturbed_rows():
    rows = [dict(block='vanilla', L=64, ms=10.0, ms_median=10.0, disturbed=False),
            dict(block='mamba', L=64, ms=20.0, ms_median=30.0, disturbed=True)]
    lines = timing_table(rows, 'block', 'vanilla').splitlines()
    assert lines[3].split()[-4:] == ['0.50x', '0.33x', '-', '!'] and lines[-1].startswith('1 disturbed timing(s)')


def test_longctx_bench_pins_and_prints_its_threads(capsys):
    old = torch.get_num_threads()
    rows = run_bench(['scan', '--L', '64', '--impls', 'ref', 'torch', '--dim', '4', '--N', '2', '--batch', '1',
                      '--device', 'cpu', '--threads', '1'])
    out = capsys.readouterr().out
    assert 'threads: 1 (pinned with torch.set_num_threads' in out and 'min and median of 5 timed calls' in out
    assert 'ratio = ref\'s time / this one\'s at the same L' in out and torch.get_num_threads() == old
    assert all(r['ms_median'] >= r['ms'] > 0 and r['disturbed'] in (True, False) for r in rows)
    assert "note: 'torch' ran on one thread" not in out   # one thread was asked for: nothing to say


def test_bench_scan_says_when_the_chunked_scan_keeps_to_one_thread(capsys):
    "Pinned at two threads, the chunked scan's small operations still run on one, and the benchmark says so and where."
    run_bench(['scan', '--L', '64', '--impls', 'torch', '--dim', '4', '--N', '2', '--batch', '1', '--device', 'cpu', '--threads', '2'])
    assert ("note: 'torch' ran on one thread of 2 at L = 64: each of its operations there touches fewer than 1,048,576 numbers, "
            "too few to share between threads beside other work") in capsys.readouterr().out


def test_longctx_bench_busy_runs_the_benchmark_beside_busy_processes(capsys, monkeypatch):
    "--busy N: N busy processes run while the benchmark times, and are gone after it (a load it can measure under)."
    import longctx_nb.bench as bench
    seen = []
    real = bench.busy_cores
    def spy(n):
        cm = real(n)
        class Wrap:
            def __enter__(self):
                procs = cm.__enter__(); seen.append([p.poll() for p in procs]); self.procs = procs; return procs
            def __exit__(self, *a): r = cm.__exit__(*a); seen.append([p.returncode is not None for p in self.procs]); return r
        return Wrap()
    monkeypatch.setattr(bench, 'busy_cores', spy)
    run_bench(['scan', '--L', '64', '--impls', 'ref', '--dim', '4', '--N', '2', '--batch', '1', '--device', 'cpu', '--busy', '2'])
    assert 'load: 2 busy processes (a Python loop each) beside this run' in capsys.readouterr().out
    assert seen == [[None, None], [True, True]]      # running while it timed, gone after
    with pytest.raises(Exception, match=r'--busy -1: give 0 to 256 busy processes'):
        run_bench(['scan', '--L', '64', '--busy', '-1'])

def test_peak_flops_is_cached_per_machine_and_remeasured_on_demand(tmp_path, monkeypatch):
    "The cache is what is used; measured again on demand, the best measurement stays (a busy machine measures less)."
    from longctx_nb import measure
    key = peak_key(torch.device('cpu'), torch.float32)
    (tmp_path / 'peak_flops.json').write_text(json.dumps({key: dict(flops=123.0, measured='then')}))
    said, measured = [], iter([456.0, 99.0])
    monkeypatch.setattr(measure, 'measure_peak_flops', lambda device, dtype: next(measured))
    assert device_peak_flops('cpu', cache_dir=tmp_path, say=said.append) == 123.0 and 'measured then' in said[0]
    monkeypatch.setenv(REMEASURE_ENV, '1')
    assert device_peak_flops('cpu', cache_dir=tmp_path, say=said.append) == 456.0 and 'measured now' in said[1]
    assert device_peak_flops('cpu', cache_dir=tmp_path, say=said.append) == 456.0 and 'is kept: measured again now' in said[2]
    assert json.loads((tmp_path / 'peak_flops.json').read_text())[key]['flops'] == 456.0

def test_a_run_that_comes_close_to_the_peak_measures_it_again(bindir, tmp_path):
    "longctx_train with a cached peak that the run beats (measured on a busy machine): measured again once, the best kept."
    env = {**os.environ, 'LONGCTX_CACHE': str(tmp_path)}
    key = subprocess.run([sys.executable, '-c', 'import torch; from longctx_nb.measure import peak_key; '
                          'print(peak_key(torch.device("cpu"), torch.float32))'], env=env, capture_output=True, text=True).stdout.strip()
    (tmp_path / 'peak_flops.json').write_text(json.dumps({key: dict(flops=1e3, measured='then')}))   # 1 kFLOP/s: every run beats it
    p = subprocess.run([str(bindir / 'longctx_train'), '--data.dataset_name=synthetic', '--data.task=copy', '--data.copy_len=4',
                        '--data.seq_len=16', '--data.batch_size=4', '--trainer.max_steps=4', '--trainer.log_every_n_steps=2',
                        '--trainer.eval_interval=0', '--model.n_layers=1', '--model.d_model=32', '--model.n_heads=2', '--model.d_ff=64',
                        '--trainer.enable_progress_bar=false', '--trainer.tensorboard=false', '--trainer.plot=false',
                        f'--trainer.default_root_dir={tmp_path / "runs"}'], env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    again = [l for l in p.stdout.splitlines() if 'measuring the peak again' in l]
    assert len(again) == 1 and re.fullmatch(r"peak: this run reaches [\d,]+% of the peak FLOP/s, and no training step comes within "
                                            r"80% of a matmul's best: measuring the peak again", again[0]), p.stdout
    steps = [l for l in p.stdout.splitlines() if l.startswith('step ') and 'tok/s' in l]
    assert len(steps) == 2 and all(re.search(r' \| MFU \d+\.\d%', l) for l in steps), steps   # the peak measured now: a real MFU
    assert json.loads((tmp_path / 'peak_flops.json').read_text())[key]['flops'] > 1e3   # the better measurement is kept


def test_mfu_above_100_percent_is_a_measurement_error():
    assert mfu(0.5e12, 1e12) == 0.5 and mfu(1.2e12, 1e12) is None
    assert format_mfu(1.2e12, 1e12).startswith('MFU n/a (measurement error: 120% of the measured peak')


def test_gpu_check_pieces_run_on_cpu_tensors():
    rows = compare_paths('cpu', {'selective_scan': 'torch', 'local_attention': 'blocked'}, L=64)
    assert [r['ok'] for r in rows] == [True, True]
    assert largest_fitting(lambda L: L <= 5000, start=1024, step=512) == (4608, '', '')
    md = gpu_table(dict(device='x'), rows, [], [dict(block='mamba', largest=4608, note='', bound='')])
    assert '| selective_scan | torch |' in md and '| mamba | 4,608 |' in md


def test_gpu_blocks_and_fits_run_on_cpu_within_a_time_budget(tmp_path):
    """The blocks and fits parts of `longctx_bench gpu` on a CPU: a fit search longer than its budget ends as a lower bound.
    Its clock ticks once per look (12 ticks of budget) and its steps' timer 10 ms per look: the machine's speed decides nothing."""
    import itertools
    from longctx_nb.gpu import _gpu_parts
    paths = {'selective_scan': 'torch'}
    ticks, steps = itertools.count(), itertools.count(0, 0.01)
    rows = _gpu_parts(torch.device('cpu'), paths, (64,), ('vanilla',), 'tiny', ('blocks', 'fits'), 1, '32', 2, 64, 2**20, 30.0,
                      32, 32, str(tmp_path), False, peak=1e15, fit_seconds=12, clock=lambda: next(ticks),
                      timer=lambda: next(steps))
    assert next(ticks) <= 13          # the search stopped at its budget, far short of 2**20
    step, fit = rows
    assert step['block'] == 'vanilla' and step['tokens_per_sec'] > 0 and step['peak_mib'] > step['step_mib'] > 0, step
    assert fit['block'] == 'vanilla' and fit['bound'] == 'time limit' and 128 <= fit['largest'] < 2**20, fit
    assert fit['note'].startswith('time limit: '), fit
    saved = json.loads((tmp_path / 'gpu_rows.json').read_text())
    assert saved['blocks'] == [step] and saved['fits'] == [fit] and saved['compare'] == []
    assert 'selective_scan' in saved['info']['kernels']
    md = (tmp_path / 'gpu_table.md').read_text()
    assert f"| vanilla | ≥ {fit['largest']:,} (time limit) | {fit['note']} |" in md, md
    assert '| vanilla | 64 |' in md and 'peak memory: the whole step at its peak' in md, md


@NO_CUDA
def test_gpu_check_refuses_without_cuda(tmp_path):
    env = dict(os.environ, PYTHON=sys.executable, OUT=str(tmp_path / 'out'), PYTHONPATH=str(ROOT))
    p = subprocess.run(['bash', str(ROOT / 'examples' / 'gpu_check.sh')], capture_output=True, text=True, env=env)
    assert p.returncode == 2 and p.stdout == '', (p.returncode, p.stdout, p.stderr)
    assert p.stderr.startswith('gpu_check.sh: error: this check needs a CUDA GPU, and torch') and len(p.stderr.splitlines()) == 1
    assert not (tmp_path / 'out').exists()       # nothing written
    p = subprocess.run(['bash', str(ROOT / 'examples' / 'gpu_check.sh'), 'speed'], capture_output=True, text=True, env=env)
    assert p.returncode == 2 and p.stdout == '' and p.stderr == ("gpu_check.sh: error: unknown step 'speed'; valid choices: quick kernels compare "
                                                        "blocks fits context cells (none: quick, which is kernels compare blocks fits context cells in "
                                                        "this order).\n")


@NO_CUDA
def test_longctx_bench_gpu_refuses_without_cuda(tmp_path):
    p = subprocess.run([sys.executable, '-c', 'from longctx_nb.bench import bench_main; bench_main()', 'gpu',
                        '--out', str(tmp_path / 'out')], capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert p.returncode == 2 and 'Traceback' not in p.stderr, p.stderr
    assert p.stderr.startswith('longctx_bench: error: longctx_bench gpu needs a CUDA GPU') and not (tmp_path / 'out').exists()


def test_longctx_bench_dpassm_prints_the_block_against_both_of_its_paths(capsys):
    rows = run_bench(['dpassm', '--L', '64', '--d_model', '32', '--ssm_state_dim', '8', '--window_size', '16', '--reps', '3',
                      '--device', 'cpu'])
    assert [r['impl'] for r in rows] == ['dpassm', 'attention path', 'SSM path', 'both paths'] and all(r['ms_median'] >= r['ms'] > 0 for r in rows), rows
    out = capsys.readouterr().out
    assert 'L=64: dpassm / (attention path then SSM path, one timed call) = ' in out and "ratio = both paths's time / this one's" in out
    assert 'timing: min and median of 3 timed calls per case, after warm-up, wall-clock time (note: fewer than 5, so the median says little)' in out


def _bench_cli(*argv, pre=''):
    "Run `longctx_bench` in a fresh process (after the Python statements `pre`): (exit code, stdout, stderr)."
    code = f"import sys\n{pre}\nfrom longctx_nb.bench import bench_main\nbench_main(sys.argv[1:])"
    p = subprocess.run([sys.executable, '-c', code, *argv], capture_output=True, text=True, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    return p.returncode, p.stdout, p.stderr


def test_bench_blocks_refuses_bad_transformers_names_before_it_starts():
    rc, out, err = _bench_cli('blocks', '--blocks', 'vanilla', 'hf-gpt2', '--L', '64')
    assert (rc, out) == (2, ''), (rc, out, err)
    assert "longctx_bench: error: --blocks: unknown block 'hf-gpt2'; valid choices: vanilla, mamba" in err
    assert "and transformers' models at the size of ours: hf-llama (vanilla), hf-longformer (baseline_longformer), hf-mamba (mamba)." in err
    rc, out, err = _bench_cli('blocks', '--blocks', 'longformer', 'hf-longformer', '--L', '512', '600')
    assert (rc, out) == (2, '') and '--window_size 256 is transformers\' attention_window, which must be even and divide every --L' in err
    assert '--L 600 is not a multiple of it. For example: --window_size 256 --L 512 1024.' in err, err
    rc, out, err = _bench_cli('blocks', '--blocks', 'vanilla', 'hf-llama', '--L', '64', pre="sys.modules['transformers'] = None")
    assert (rc, out) == (2, ''), (rc, out, err)
    assert "--blocks hf-llama: these are transformers' models, and transformers is not installed: pip install" in err, err


def test_bench_blocks_times_transformers_models_beside_ours(capsys):
    pytest.importorskip('transformers')
    rows = run_bench(['blocks', '--blocks', 'vanilla', 'hf-llama', 'longformer', 'hf-longformer', '--L', '64', '128',
                      '--window_size', '32', '--reps', '1', '--device', 'cpu'])
    out = capsys.readouterr().out
    assert [(r['block'], r['L']) for r in rows] == [(b, L) for b in ('vanilla', 'hf-llama', 'longformer', 'hf-longformer') for L in (64, 128)]
    assert all(r['ms'] > 0 and r['peak_mib'] > 0 for r in rows)
    p = {r['block']: r['params'] for r in rows}
    assert p['hf-llama'] == p['vanilla'] == 885_888          # our weights, copied: the same size by construction
    d, f, L = 128, 576, 128   # width, Longformer's MLP (our SwiGLU's weights in two matrices), the longest length
    beyond = (4 * (3 * d * d + 3 * d + 4 * d + 2 * d + f + d)   # per layer: global q/k/v, q/k/v/o biases, LayerNorm biases, MLP biases
              + (d * d + d + 2 * d + 256) + 2 * d - d)          # the masked-LM head's dense layer, norm and bias; embeddings' LayerNorm; our final RMSNorm
    assert p['hf-longformer'] - d * (256 + L + 2 + 1) - (p['longformer'] - d * 256) == beyond == 221_184
    assert '(+221,184 besides embeddings: global q/k/v, biases, the masked-LM head' in out
    pairs = [l.split() for l in out.splitlines() if l.split()[1:3] in (['vanilla', 'hf-llama'], ['longformer', 'hf-longformer'])]
    assert [(l[0], l[1], l[2]) for l in pairs] == [('64', 'vanilla', 'hf-llama'), ('128', 'vanilla', 'hf-llama'),
                                                   ('64', 'longformer', 'hf-longformer'), ('128', 'longformer', 'hf-longformer')]
    assert "ratio = transformers' time / ours" in out
    assert "note: hf-llama: transformers' LlamaForCausalLM with our vanilla's weights (885,888 parameters, ours 885,888" in out
    assert "attention 'sdpa' (torch's SDPA, causal, as our vanilla)" in out
    assert ("note: hf-longformer: transformers' LongformerForMaskedLM at our longformer's size; it attends both ways: each query "
            "sees 33 keys around it (attention_window=32) and 2 global tokens, ours 32 keys up to itself and 2.") in out
    assert 'Loss: next-token cross-entropy on its masked-LM logits' in out


def _cuda_cells():
    "examples/cuda_cells.py, imported as a module."
    sys.path.insert(0, str(ROOT / 'examples'))
    try: import cuda_cells
    finally: sys.path.remove(str(ROOT / 'examples'))
    return cuda_cells


def test_gpu_scripts_parse_and_the_cells_runner_finds_the_cuda_notebooks(tmp_path):
    for script in ('gpu_check.sh', 'build_cuda_kernels.sh'):
        p = subprocess.run(['bash', '-n', str(ROOT / 'examples' / script)], capture_output=True, text=True)
        assert p.returncode == 0, (script, p.stderr)
    cuda_cells = _cuda_cells()
    found = {p.relative_to(ROOT).as_posix() for p in cuda_cells.cuda_notebooks()}
    assert {'nbs/12_scan.ipynb', 'nbs/51_gpu.ipynb', 'nbs/tutorials/02_gpu_and_cluster.ipynb'} <= found, found
    assert 'nbs/00_core.ipynb' not in found and cuda_cells.skip_flags() == 'notest'
    p = subprocess.run([sys.executable, str(ROOT / 'examples' / 'cuda_cells.py'), str(tmp_path / 'none.ipynb')],
                       capture_output=True, text=True)
    assert p.returncode == 2 and 'no such notebook' in p.stderr and p.stdout == '', p


def test_longctx_bench_gpu_takes_its_own_defaults(tmp_path, monkeypatch, capsys):
    "On a CPU, with the CUDA check stubbed: the default flags (--blocks_seconds 0: no limit) reach the benchmark."
    import longctx_nb.bench as bench, longctx_nb.gpu as gpu
    calls = []
    for m in (bench, gpu): monkeypatch.setattr(m, 'require_cuda', lambda *a, **k: None)
    monkeypatch.setattr(gpu, '_gpu_parts', lambda *a, **k: calls.append((a, k)) or [])
    assert run_bench(['gpu', '--parts', 'compare', '--out', str(tmp_path / 'out')]) == []
    run_bench(['gpu', '--parts', 'compare', '--max_seconds', '0.5', '--blocks_seconds', '60', '--out', str(tmp_path / 'out')])
    (a, k), (a2, k2) = calls
    assert a[5] == ['compare'] and k['blocks_seconds'] == 0.0 and k['fit_seconds'] == 150.0 and a[11] == 10.0, (a, k)
    assert a2[11] == 0.5 and k2['blocks_seconds'] == 60.0, (a2, k2)
    for flag, v, msg in (('--blocks_seconds', '-1', '--blocks_seconds -1.0: must be 0 (no limit) or more.'),
                         ('--blocks_seconds', 'nan', "--blocks_seconds: invalid finite float value: 'nan'"),
                         ('--fit_seconds', '0', '--fit_seconds=0.0 must be a positive finite number.')):
        with pytest.raises(SystemExit) as e: bench.bench_main(['gpu', '--parts', 'compare', flag, v, '--out', str(tmp_path / 'out')])
        err = capsys.readouterr().err
        assert e.value.code == 2 and msg in err, (flag, v, err)
    assert len(calls) == 2
    with pytest.raises(Exception, match='must be a finite number'): bench.check_args(gpu.bench_gpu, dict(blocks_seconds=float('inf')))


def test_gpu_table_shows_only_rows_of_this_runs_settings(tmp_path, monkeypatch, capsys):
    "Earlier rows for other settings are dropped (one line says so); a part's old rows go as soon as it starts again."
    import longctx_nb.gpu as gpu
    paths = {'selective_scan': 'torch', 'local_attention': 'blocked'}
    def run(parts, batch):
        return gpu._gpu_parts(torch.device('cpu'), paths, (64,), ('vanilla',), 'tiny', parts, batch, '32', 1, 64, 2**20, 30.0,
                                32, 32, str(tmp_path), False, peak=1e15)
    saved = lambda: json.loads((tmp_path / 'gpu_rows.json').read_text())
    assert len(run(('compare',), 1)) == 2 and len(saved()['compare']) == 2
    capsys.readouterr()
    run(('blocks',), 2)                    # another batch: the compare rows were measured for other settings
    out = capsys.readouterr().out
    assert out.count('\n') == 1 and f'the earlier rows in {tmp_path} were for other settings (batch 1, now 2) and are not shown' in out, out
    assert saved()['compare'] == [] and len(saved()['blocks']) == 1 and saved()['info']['batch'] == 2
    md = (tmp_path / 'gpu_table.md').read_text()
    assert '| selective_scan |' not in md and '| vanilla | 64 |' in md, md
    run(('compare',), 2)
    assert len(saved()['compare']) == 2 and len(saved()['blocks']) == 1 and capsys.readouterr().out == ''   # same settings: kept
    def killed(*a, **k):                   # a compare step stopped by its time limit, with its first rows unsaved
        assert saved()['compare'] == [] and '| selective_scan |' not in (tmp_path / 'gpu_table.md').read_text()
        raise KeyboardInterrupt
    monkeypatch.setattr(gpu, 'compare_paths', killed)
    with pytest.raises(KeyboardInterrupt): run(('compare',), 2)
    assert saved()['compare'] == [] and len(saved()['blocks']) == 1
    assert not [p.name for p in tmp_path.iterdir() if p.name not in ('gpu_rows.json', 'gpu_table.md')]   # no temporary files left


def test_gpu_check_context_step_is_skipped_with_one_gpu(tmp_path):
    "gpu_check.sh's context step (its bash function, run here) with fewer than two GPUs visible: one line, and it passes."
    import re
    script = (ROOT / 'examples' / 'gpu_check.sh').read_text()
    fn = re.search(r"\ncontext\(\) \{.*?\n\}\n", script, re.S).group(0)
    for n in (0, 1):   # torch's GPU count, as this machine's python would print it
        py = tmp_path / 'py'; py.write_text(f'#!/bin/sh\necho {n}\n'); py.chmod(0o755)
        p = subprocess.run(['bash', '-c', f'set -uo pipefail\npy() {{ {py} "$@"; }}\n{fn}\ncontext'], capture_output=True,
                           text=True)
        assert (p.returncode, p.stderr) == (0, ''), p
        assert p.stdout == f'context: skipped: {n} GPU visible, and splitting a sequence over GPUs needs two or more\n'


def test_gpu_check_fails_a_step_on_its_failed_rows(tmp_path):
    "gpu_check.sh's row check (its Python, run here on rows written by hand): a fit search stopped by an error fails the step."
    import re
    script = (ROOT / 'examples' / 'gpu_check.sh').read_text()
    code = re.search(r"failed_rows\(\) \{.*?<<'EOF'\n(.*?)\nEOF\n", script, re.S).group(1)
    assert re.search(r'bench fits [^\n]*\n\s*failed_rows fits \|\| rc=1', script), 'the fits step checks its rows'
    f = tmp_path / 'gpu_rows.json'
    def check(part, **rows):
        f.write_text(json.dumps(rows))
        p = subprocess.run([sys.executable, '-', str(f), part], input=code, capture_output=True, text=True)
        return p.returncode, p.stdout
    fit = dict(block='mamba', largest=4096, note='', bound='')
    assert check('fits', fits=[fit, fit | dict(block='vanilla', bound='time limit', note='time limit: 8192 not tried')]) == (0, '')
    stopped = fit | dict(bound='error', note='stopped: 8192: RuntimeError: CUDA error: an illegal memory access')
    assert check('fits', fits=[fit, stopped]) == (1, f"fits: FAILED mamba: {stopped['note']}\n")
    assert check('compare', compare=[dict(kernel='selective_scan', impl='cuda', ok=False, note='off by 1.0e-01')]) == (
        1, 'compare: FAILED selective_scan cuda: off by 1.0e-01\n')
    assert check('blocks', blocks=[dict(block='blade', L=2048, note='error: ValueError: x')]) == (1, 'blocks: FAILED blade 2048: error: ValueError: x\n')
    f.unlink()
    p = subprocess.run([sys.executable, '-', str(f), 'fits'], input=code, capture_output=True, text=True)
    assert p.returncode == 1 and p.stdout.startswith('fits: FAILED: no rows to check (FileNotFoundError') and not p.stderr, p


def test_cells_runner_starts_no_notebook_once_stopped(tmp_path, monkeypatch):
    "After stop_all (SIGTERM), a worker thread about to start a notebook starts none: no process left holding the GPU."
    cuda_cells = _cuda_cells()
    started = []
    monkeypatch.setattr(cuda_cells.subprocess, 'Popen', lambda *a, **k: started.append(a) or pytest.fail('a notebook was started'))
    monkeypatch.setattr(cuda_cells.signal, 'signal', lambda *a: None)   # leave this process's handlers alone
    monkeypatch.setattr(cuda_cells, 'RUNNING', set())
    monkeypatch.setattr(cuda_cells, 'STOPPING', False, raising=False)
    cuda_cells.stop_all()
    res, secs, out = cuda_cells.run_one(tmp_path / 'a.ipynb', 10, 1)
    assert (res, started, cuda_cells.RUNNING) == ('NOT RUN', [], set()) and 'stopped' in out, (res, out)


def test_default_impls_that_cannot_run_here_are_left_to_the_table(monkeypatch):
    """`longctx_bench scan` with its default --impls runs on a device the CPU kernel cannot take (a GPU; here the meta device
    stands in for it): the table skips that one with the reason. Named with --impls, it is refused before anything runs."""
    import longctx_nb.bench as bench
    from longctx_nb.kernels.scan import bench_scan
    monkeypatch.setattr(bench, 'get_device', lambda d: torch.device('meta'))
    ns = dict(Ls=[64], impls=('ref', 'torch', 'cpu', 'mambapy'), batch=1, dim=4, N=2, device=None, reps=1, max_ref_len=None)
    bench.check_args(bench_scan, dict(ns))
    with pytest.raises(UsageError, match='--impls cpu cannot run on meta: it needs CPU tensors; valid here: ref, torch, mambapy.'):
        bench.check_args(bench_scan, dict(ns), given={'impls'})


def test_gpu_wheels_checks_the_tools_closure_not_the_kernel_wheels_beside_it(tmp_path):
    "`make gpu-wheels`' check: a tool's unmet requirement is named; mamba-ssm's (built for the GPU, in the same folder) are not its business."
    import importlib.util, zipfile
    spec = importlib.util.spec_from_file_location('gpu_wheels', ROOT / '.ci' / 'gpu_wheels.py')
    gw = importlib.util.module_from_spec(spec); spec.loader.exec_module(gw)
    def wheel(fname, name, version, *reqs, vendored=False):
        with zipfile.ZipFile(tmp_path / fname, 'w') as z:
            if vendored: z.writestr('pkg/_vendor/other-9.dist-info/METADATA', 'Name: other\nVersion: 9\n')
            z.writestr(f'{name}-{version}.dist-info/METADATA', '\n'.join([f'Name: {name}', f'Version: {version}', *(f'Requires-Dist: {r}' for r in reqs)]) + '\n')
    wheel('fastcore-1.14.5-py3-none-any.whl', 'fastcore', '1.14.5', 'packaging', 'numpy', vendored=True)
    wheel('mamba_ssm-2.2.4-cp312-cp312-linux_x86_64.whl', 'mamba_ssm', '2.2.4', 'einops', 'transformers')
    assert gw.metadata(tmp_path / 'fastcore-1.14.5-py3-none-any.whl')[0] == 'fastcore'
    assert gw.unmet(tmp_path, '3.12') == ['fastcore 1.14.5 needs packaging (no wheel)']
