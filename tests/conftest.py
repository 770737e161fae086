import errno, os, subprocess, sys
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
