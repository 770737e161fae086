"""The built wheel installs into a clean venv that holds only torch, and works there."""
import subprocess, sys, venv, zipfile
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNTIME_ONLY = ('nbdev', 'fastcore', 'execnb', 'jupyter', 'ipykernel', 'pytest')

def sh(*args, **kw):
    p = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=900, **kw)
    assert p.returncode == 0, f'{args}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}'
    return p.stdout

@pytest.fixture(scope='module')
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp('wheel')
    sh(sys.executable, '-m', 'pip', 'wheel', '-q', '--no-deps', '-w', out, ROOT)
    return next(out.glob('longctx_nb-*.whl'))

def test_wheel_metadata(wheel):
    with zipfile.ZipFile(wheel) as z:
        meta = z.read(next(n for n in z.namelist() if n.endswith('METADATA'))).decode()
        entry = z.read(next(n for n in z.namelist() if n.endswith('entry_points.txt'))).decode()
    reqs = [l.split(':', 1)[1].strip() for l in meta.splitlines() if l.startswith('Requires-Dist:') and 'extra ==' not in l]
    assert any(r.startswith('torch') for r in reqs), reqs
    assert not [r for r in reqs if r.startswith(RUNTIME_ONLY)], reqs
    assert 'longctx_train = longctx_nb.cli:train_main' in entry and 'longctx_prepare' in entry

def test_clean_venv_install_and_train(wheel, tmp_path):
    env_dir = tmp_path / 'venv'
    venv.create(env_dir, with_pip=True)
    bin_ = env_dir / 'bin'
    torch_req = f"torch=={__import__('torch').__version__.split('+')[0]}"
    sh(bin_ / 'python', '-m', 'pip', 'install', '-q', torch_req)
    sh(bin_ / 'python', '-m', 'pip', 'install', '-q', wheel)
    # importing every module pulls in no development tool
    sh(bin_ / 'python', '-c', "import sys, longctx_nb.cli, longctx_nb.train, longctx_nb.data, longctx_nb.model; "
       f"bad = [m for m in sys.modules if m.split('.')[0] in {RUNTIME_ONLY!r}]; assert not bad, bad", cwd=tmp_path)
    out = sh(bin_ / 'longctx_train', '--trainer.max_steps=3', '--data.seq_len=32', '--data.batch_size=2',
             '--trainer.enable_progress_bar=false', '--trainer.limit_val_batches=1', f'--trainer.default_root_dir={tmp_path / "runs"}',
             f'--data.cache_dir={tmp_path / "cache"}', cwd=tmp_path)
    assert 'Training finished' in out and (tmp_path / 'runs' / 'version_0' / 'loss.png').exists()
    assert sh(bin_ / 'longctx_train', '--version').startswith('longctx_train 0.')
