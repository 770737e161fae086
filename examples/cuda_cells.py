#!/usr/bin/env python3
"""Run the notebooks' `#| cuda` cells on a GPU machine, as `nbdev_test --flags cuda` does, but in parallel and with a
time limit per notebook: each notebook that has such a cell runs whole (its other cells first: a `#| cuda` cell may use
what they define), in its own process. Prints one line per notebook and, for one that failed, the end of its output.

    python examples/cuda_cells.py                      # every notebook with a `#| cuda` cell
    python examples/cuda_cells.py --timeout 240 --jobs 8 nbs/12_scan.ipynb nbs/23_mamba.ipynb

Needs nbdev 2.4.14 with fastcore 1.14.5 and execnb 0.1.18 importable: for a machine without them or without a
network, `make gpu-wheels` (run where a network exists) puts their wheels in .whl/ to carry, and
`bash examples/gpu_check.sh cells` unpacks them there before it runs this script.
Exit codes: 0 every notebook passed, 1 one failed or ran past its time limit, 2 bad arguments or nbdev missing.
"""
import argparse, configparser, json, os, signal, subprocess, sys, threading, time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN = ("import sys; from pathlib import Path; from nbdev.test import test_nb; "
       "ok, _ = test_nb(Path(sys.argv[1]), skip_flags=sys.argv[3].split(), force_flags=['cuda'], basepath=sys.argv[2]); "
       "sys.exit(0 if ok else 1)")


def cuda_notebooks(root: Path = ROOT) -> list[Path]:
    "The notebooks with a code cell flagged `#| cuda`, the largest first (they take longest)."
    found = []
    for p in sorted((root / 'nbs').rglob('*.ipynb')):
        if '.ipynb_checkpoints' in p.parts: continue
        cells = json.loads(p.read_text())['cells']
        if any(c['cell_type'] == 'code' and any(l.strip() == '#| cuda' for l in c['source']) for c in cells): found.append(p)
    return sorted(found, key=lambda p: -p.stat().st_size)


def skip_flags(root: Path = ROOT) -> str:
    "settings.ini's tst_flags but cuda: the cells every test run skips (e.g. notest)."
    cfg = configparser.ConfigParser(); cfg.read(root / 'settings.ini')
    return ' '.join(f for f in cfg['DEFAULT'].get('tst_flags', 'notest').split() if f != 'cuda')


RUNNING: set = set()   # the notebooks' processes now running: stopped with this script (SIGTERM, e.g. from `timeout`)
STOPPING = False       # set by stop_all: no notebook starts after it
LOCK = threading.RLock()   # guards RUNNING and STOPPING: a process is started and added, or not started, whole


def stop_all(signum=None, frame=None):
    "Kill every notebook's process group, and let no worker start another (a handler of SIGTERM and SIGINT)."
    global STOPPING
    signal.signal(signal.SIGTERM, signal.SIG_IGN)   # `timeout` may signal the whole process group as well
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with LOCK: STOPPING = True; running = list(RUNNING)
    for p in running:
        try: os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError: pass
    if signum is not None: print('cells: stopped: the notebooks still running were killed', flush=True); os._exit(128 + signum)


def run_one(nb: Path, timeout: float, threads: int) -> tuple[str, float, str]:
    "('ok' | 'FAILED' | 'TIME LIMIT' | 'NOT RUN' (stopped first), seconds, output) of one notebook run in a process of its own."
    # its share of the cores, for torch and for torch.compile's workers (which count the cores, not OMP_NUM_THREADS):
    # thirteen notebooks compiling FlexAttention at once would otherwise start sixteen workers each
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), TORCHINDUCTOR_COMPILE_THREADS=str(threads))
    t0 = time.monotonic()
    with LOCK:   # stop_all either sees this process or has stopped it from starting
        if STOPPING: return 'NOT RUN', 0.0, 'not started: the run was stopped'
        p = subprocess.Popen([sys.executable, '-c', RUN, str(nb.resolve()), str(ROOT), skip_flags()], cwd=nb.parent, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        RUNNING.add(p)
    try:
        out, _ = p.communicate(timeout=timeout)
        return ('ok' if p.returncode == 0 else 'FAILED'), time.monotonic() - t0, out
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)       # the notebook's own processes (compilers, workers) too
        out, _ = p.communicate()
        return 'TIME LIMIT', time.monotonic() - t0, out
    finally:
        with LOCK: RUNNING.discard(p)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('notebooks', nargs='*', type=Path, help='notebooks to run (default: every one with a `#| cuda` cell)')
    ap.add_argument('--timeout', type=float, default=240, help='seconds each notebook may run (default 240)')
    ap.add_argument('--jobs', type=int, default=None, help='notebooks run at once (default: one per CPU core, at most 16)')
    ap.add_argument('--tail', type=int, default=40, help="lines of a failed notebook's output to print (default 40)")
    a = ap.parse_args(argv)
    try: import nbdev.test  # noqa: F401
    except Exception as e:
        print(f"cuda_cells.py: error: nbdev does not import ({type(e).__name__}: {e}). Install nbdev==2.4.14 fastcore==1.14.5 "
              "execnb==0.1.18, or carry their wheels (make gpu-wheels) and run bash examples/gpu_check.sh cells, which "
              "unpacks them.", file=sys.stderr)
        return 2
    nbs = a.notebooks or cuda_notebooks()
    missing = [str(p) for p in nbs if not p.is_file()]
    if missing: print(f"cuda_cells.py: error: no such notebook: {', '.join(missing)}", file=sys.stderr); return 2
    jobs = max(1, min(a.jobs or min(os.cpu_count() or 1, 16), len(nbs) or 1))
    threads = max(1, (os.cpu_count() or 1) // jobs)
    print(f"cells: {len(nbs)} notebooks, {jobs} at a time, {threads} CPU threads each, at most {a.timeout:.0f} s each", flush=True)
    bad = 0
    signal.signal(signal.SIGTERM, stop_all); signal.signal(signal.SIGINT, stop_all)
    with ThreadPoolExecutor(jobs) as ex:
        futs = {ex.submit(run_one, nb, a.timeout, threads): nb for nb in nbs}
        for f in as_completed(futs):
            nb, (res, secs, out) = futs[f], f.result()
            name = nb.resolve().relative_to(ROOT) if nb.resolve().is_relative_to(ROOT) else nb
            print(f"cells: {res:<10} {name} ({secs:.0f} s)", flush=True)
            if res != 'ok':
                bad += 1
                if out.strip(): print('\n'.join('    | ' + l for l in out.rstrip().splitlines()[-a.tail:]), flush=True)
    print(f"cells: {len(nbs) - bad} of {len(nbs)} notebooks passed", flush=True)
    return 1 if bad else 0


if __name__ == '__main__': sys.exit(main())
