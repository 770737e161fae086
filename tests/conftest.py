import errno, os, subprocess, sys, time
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
# Prepared corpora are cached once per checkout and shared by notebooks, tests and CLI subprocesses.
os.environ.setdefault('LONGCTX_CACHE', str(ROOT / '.cache'))
os.environ.setdefault('OMP_NUM_THREADS', '1')
os.environ.setdefault('TOKENIZERS_PARALLELISM', 'false')

NOTEBOOK_TESTS = ('test_notebooks.py', 'test_docs.py')   # the tests of `notebook_runs`

@pytest.hookimpl(optionalhook=True)   # pytest-xdist's hook: none without it
def pytest_xdist_make_scheduler(config, log):
    """With pytest-xdist (`make test` runs `-n 2`) each test file runs in one worker, so that its module-scoped fixtures
    (trained runs, exports, a clean venv) are made once, and the notebooks' runs and the docs site rendered from them
    share one worker (xdist hands out the files with the most tests first: the notebooks, the longest piece of work)."""
    from xdist.scheduler import LoadFileScheduling
    class Scheduling(LoadFileScheduling):
        def _split_scope(self, nodeid):
            f = super()._split_scope(nodeid)
            return 'notebooks' if Path(f).name in NOTEBOOK_TESTS else f
    return Scheduling(config, log)

@pytest.fixture(scope="session")
def bindir():
    "Folder of the running interpreter's console scripts (longctx_train, longctx_prepare)."
    return Path(sys.executable).parent

@pytest.fixture(scope='session')
def notebook_runs(request):
    """Each notebook executed once per test session, by the docs build's runner (`.ci/docs.py`: one fresh interpreter
    per notebook, cells flagged `notest`/`cuda` skipped, as `nbdev_test`) into _proc/: {notebook: its record ('passed',
    'error', 'seconds')}. tests/test_notebooks.py asserts on the records, tests/test_docs.py renders the same _proc/.
    It runs the notebooks of the selected `test_notebook` cases, or all of them when another test (the docs) needs it."""
    import importlib.util
    spec = importlib.util.spec_from_file_location('longctx_docs_build', ROOT / '.ci' / 'docs.py')
    docs = importlib.util.module_from_spec(spec); spec.loader.exec_module(docs)
    users = [it for it in request.session.items if 'notebook_runs' in getattr(it, 'fixturenames', ())]
    wanted = {Path(it.callspec.params['nb']) for it in users if 'nb' in getattr(getattr(it, 'callspec', None), 'params', {})}
    nbs = docs.notebooks()
    if any('nb' not in getattr(getattr(it, 'callspec', None), 'params', {}) for it in users): wanted = set(nbs)
    return docs.execute([nb for nb in nbs if nb in wanted], force=True, log=lambda *a: None)

@pytest.fixture
def held(tmp_path):
    """held(cmd, *points, **popen) -> the process of `cmd`, started so that it waits at each of `points` (`core.hold`),
    once it is at the first; `p.reached(point)` waits until it is at another. A test signals it at a known place, on a
    busy machine too, instead of polling a file and racing the process."""
    def start(cmd, *points, env=None, **kw):
        files = {pt: tmp_path / f'held_{i}' for i, pt in enumerate(points)}
        hold = ';'.join(f'{pt}={f}' for pt, f in files.items())
        p = subprocess.Popen([str(c) for c in cmd], env={**(env or os.environ), 'LONGCTX_HOLD': hold}, **kw)
        def reached(point):
            while not files[point].exists() and p.poll() is None: time.sleep(0.01)   # an event (the file), no time window
            assert p.poll() is None, f'the process ended before it reached {point!r}: {p.returncode}, {p.communicate()}'
        p.reached = reached
        reached(points[0])
        return p
    return start

@pytest.fixture
def mount_tmpfs(tmp_path):
    "mount_tmpfs(size) -> a fresh tmpfs of `size` ('1m', '2m', ...), unmounted after the test; skipped where mounting is not allowed."
    mounted = []
    def mount(size='2m'):
        d = tmp_path / f'fs{len(mounted)}'; d.mkdir()
        p = subprocess.run(['mount', '-t', 'tmpfs', '-o', f'size={size}', 'tmpfs', str(d)], capture_output=True, text=True)
        if p.returncode: pytest.skip(f"cannot mount a tmpfs here ({p.stderr.strip() or p.returncode}): needs root and mount rights")
        mounted.append(d)
        return d
    yield mount
    for d in mounted: subprocess.run(['umount', '-l', str(d)], capture_output=True)

@pytest.fixture
def tmpfs(mount_tmpfs):
    "A 2 MiB tmpfs (skipped where this machine does not allow mounting)."
    return mount_tmpfs('2m')

def fill(d, leave: int = 0):
    "Fill the file system holding `d`, then free `leave` pages of 4 KiB again (a tmpfs allocates whole pages)."
    fd = os.open(d / 'filler', os.O_WRONLY | os.O_CREAT)
    try:
        while True: os.write(fd, b'\0' * 4096)
    except OSError as e: assert e.errno == errno.ENOSPC
    if leave: os.ftruncate(fd, max(0, os.fstat(fd).st_size // 4096 - leave) * 4096)
    os.close(fd)

# the driver of `one_interpreter`: runs each command line as `python SCRIPT` or `python -m MODULE` would, its own
# stdout and stderr captured at the file descriptors (so streams bound at import time land in the right command's)
ONE_INTERPRETER = r'''
import json, os, runpy, sys, tempfile, traceback, warnings
cmds, cwd, out, base = json.loads(sys.argv[1]), os.getcwd(), [], warnings.filters[:]
for cmd in cmds:   # each warns as on its own: a filter added bumps the filters' version, which empties the registries
    warnings.filterwarnings('ignore', message='\\x00'); warnings.filters[:] = base; warnings.onceregistry.clear()
    fds = [tempfile.TemporaryFile('w+', encoding='utf-8', errors='replace') for _ in (1, 2)]
    sys.stdout.flush(); sys.stderr.flush(); saved = [os.dup(1), os.dup(2)]
    for f, fd in zip(fds, (1, 2)): os.dup2(f.fileno(), fd)
    try:
        os.chdir(cwd)
        if cmd[1:2] == ['-m']: sys.argv = cmd[2:]; runpy.run_module(cmd[2], run_name='__main__', alter_sys=True)
        else: sys.argv = cmd[1:]; runpy.run_path(cmd[1], run_name='__main__')
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) or e.code is None else 1
        if not isinstance(e.code, int) and e.code is not None: print(e.code, file=sys.stderr)
    except BaseException: traceback.print_exc(); code = 1
    sys.stdout.flush(); sys.stderr.flush()
    for fd, s in zip((1, 2), saved): os.dup2(s, fd); os.close(s)
    out.append([code or 0] + [(f.seek(0), f.read())[1] for f in fds])
with open(os.environ['ONE_INTERPRETER_OUT'], 'w') as f: json.dump(out, f)
'''

def one_interpreter(*cmds, env=None, cwd=None, timeout=900) -> list[subprocess.CompletedProcess]:
    """Several command lines run one after the other in one fresh interpreter, each as it would run on its own (a
    console script `[bindir / NAME, *args]`, or `[sys.executable, '-m', MODULE, *args]`): their finished processes
    (exit code, stdout, stderr). A test of a command's results pays for the imports of torch, transformers and lm_eval once, not per
    command. Each command (script or module) is also run in a process of its own by some test."""
    import json, tempfile
    with tempfile.NamedTemporaryFile(suffix='.json') as f:
        cmds = [[str(c) for c in cmd] for cmd in cmds]
        cmds = [[sys.executable, *cmd] if cmd[0] != sys.executable else cmd for cmd in cmds]
        p = subprocess.run([sys.executable, '-c', ONE_INTERPRETER, json.dumps(cmds)], capture_output=True, text=True,
                           timeout=timeout, cwd=cwd, env={**(env or os.environ), 'ONE_INTERPRETER_OUT': f.name})
        assert p.returncode == 0, f'the interpreter of {cmds} died: {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}'
        got = json.loads(Path(f.name).read_text())
    return [subprocess.CompletedProcess(cmd, code, o, e) for cmd, (code, o, e) in zip(cmds, got)]
