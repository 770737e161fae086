import errno, os, subprocess, sys, time
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
# Prepared corpora are cached once per checkout and shared by notebooks, tests and CLI subprocesses.
os.environ.setdefault('LONGCTX_CACHE', str(ROOT / '.cache'))
os.environ.setdefault('OMP_NUM_THREADS', '1')
os.environ.setdefault('TOKENIZERS_PARALLELISM', 'false')

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
