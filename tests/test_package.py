"""The package as users get it: the wheel, `pip install .` from a clone and the sdist each install into a clean venv
that holds only torch, with every module and the console scripts, and the version comes from settings.ini alone."""
import configparser, re, subprocess, sys, tarfile, venv, zipfile
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNTIME_ONLY = ('nbdev', 'fastcore', 'execnb', 'jupyter', 'ipykernel', 'pytest', 'ipywidgets')

def sh(*args, **kw):
    p = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=900, **kw)
    assert p.returncode == 0, f'{args}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}'
    return p.stdout

def settings_version() -> str:
    cfg = configparser.ConfigParser(delimiters=['=']); cfg.read(ROOT / 'settings.ini')
    return cfg['DEFAULT']['version']

def source_modules() -> set[str]:
    "Dotted names of every module in the source tree's package."
    lib = ROOT / 'longctx_nb'
    return {'.'.join(p.relative_to(ROOT).with_suffix('').parts).removesuffix('.__init__') for p in lib.rglob('*.py')
            if '__pycache__' not in p.parts}

@pytest.fixture(scope='module')
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp('wheel')
    sh(sys.executable, '-m', 'pip', 'wheel', '-q', '--no-deps', '-w', out, ROOT)
    return next(out.glob('longctx_nb-*.whl'))

@pytest.fixture(scope='module')
def sdist(tmp_path_factory):
    "The source distribution, built with `python -m build --sdist` (or `setup.py sdist` where `build` is missing)."
    out = tmp_path_factory.mktemp('sdist')
    try: import build  # noqa: F401
    except ImportError: sh(sys.executable, 'setup.py', '-q', 'sdist', '-d', out, cwd=ROOT)
    else: sh(sys.executable, '-m', 'build', '--sdist', '--no-isolation', '--outdir', out, ROOT)
    return next(out.glob('longctx_nb-*.tar.gz'))

@pytest.fixture(scope='module')
def clean_bin(tmp_path_factory):
    "The bin/ folder of one clean venv holding only torch (this torch's version); each test installs longctx_nb into it."
    env_dir = tmp_path_factory.mktemp('clean') / 'venv'
    venv.create(env_dir, with_pip=True)
    bin_ = env_dir / 'bin'
    sh(bin_ / 'python', '-m', 'pip', 'install', '-q', f"torch=={__import__('torch').__version__.split('+')[0]}")
    return bin_

# Imports every module of the installed package, then checks it came from the venv and pulled in no development tool.
CHECK_INSTALLED = """
import importlib, json, pkgutil, sys, longctx_nb
mods = ['longctx_nb'] + [m.name for m in pkgutil.walk_packages(longctx_nb.__path__, 'longctx_nb.')]
for m in mods: importlib.import_module(m)
dev = sorted({m.split('.')[0] for m in sys.modules} & set(sys.argv[1].split(',')))
print(json.dumps(dict(file=longctx_nb.__file__, version=longctx_nb.__version__, modules=mods, dev=dev)))
"""

def install(bin_: Path, target, cwd: Path) -> dict:
    "Replace the venv's longctx_nb by `target` (a wheel, an sdist or a source folder); import all of it from outside the source tree."
    sh(bin_ / 'python', '-m', 'pip', 'uninstall', '-y', '-q', 'longctx_nb')   # a no-op when none is installed
    sh(bin_ / 'python', '-m', 'pip', 'install', '-q', target)
    import json
    got = json.loads(sh(bin_ / 'python', '-c', CHECK_INSTALLED, ','.join(RUNTIME_ONLY), cwd=cwd).splitlines()[-1])
    assert Path(got['file']).resolve().is_relative_to(bin_.parent.resolve()), f"imported {got['file']}, not the installed copy"
    assert not got['dev'], f"importing longctx_nb pulled in development tools: {got['dev']}"
    assert set(got['modules']) == source_modules(), set(got['modules']) ^ source_modules()
    assert got['version'] == settings_version()
    assert sh(bin_ / 'pip', 'show', 'longctx_nb').count(f"Version: {settings_version()}") == 1
    for exe in ('longctx_train', 'longctx_prepare', 'longctx_bench'): assert (bin_ / exe).exists(), exe
    assert sh(bin_ / 'longctx_train', '--version', cwd=cwd).strip() == f'longctx_train {settings_version()}'
    return got

def test_version_single_source(wheel, sdist):
    "settings.ini holds the version; nbdev writes it into __init__.py and setup.py reads it: nothing else spells it."
    v = settings_version()
    init = (ROOT / 'longctx_nb' / '__init__.py').read_text()
    found = re.findall(r'^__version__\s*=\s*[\'"]([^\'"]+)[\'"]', init, re.M)
    assert found == [v], f"longctx_nb/__init__.py says {found}, settings.ini says {v}: run nbdev_export"
    assert v not in (ROOT / 'setup.py').read_text(), 'setup.py must read the version from settings.ini'
    assert not (ROOT / 'pyproject.toml').exists() or v not in (ROOT / 'pyproject.toml').read_text()
    assert wheel.name.startswith(f'longctx_nb-{v}-') and sdist.name == f'longctx_nb-{v}.tar.gz'

def test_wheel_metadata(wheel):
    with zipfile.ZipFile(wheel) as z:
        meta = z.read(next(n for n in z.namelist() if n.endswith('METADATA'))).decode()
        entry = z.read(next(n for n in z.namelist() if n.endswith('entry_points.txt'))).decode()
    reqs = [l.split(':', 1)[1].strip() for l in meta.splitlines() if l.startswith('Requires-Dist:') and 'extra ==' not in l]
    assert any(r.startswith('torch') for r in reqs), reqs
    assert not [r for r in reqs if r.startswith(RUNTIME_ONLY)], reqs
    assert f'\nVersion: {settings_version()}\n' in meta
    assert 'longctx_train = longctx_nb.cli:train_main' in entry and 'longctx_prepare' in entry and 'longctx_bench' in entry

def test_sdist_contents(sdist):
    "The sdist holds what building and installing need: settings.ini (setup.py reads it), the README, the license, every module."
    top = sdist.name.removesuffix('.tar.gz')
    with tarfile.open(sdist) as t: names = {n.removeprefix(top + '/') for n in t.getnames()}
    need = {'setup.py', 'settings.ini', 'README.md', 'MANIFEST.in'} | ({'LICENSE'} if (ROOT / 'LICENSE').exists() else set())
    assert need <= names, need - names
    mods = {p.relative_to(ROOT).as_posix() for p in (ROOT / 'longctx_nb').rglob('*.py') if '__pycache__' not in p.parts}
    assert mods <= names, mods - names
    assert not [n for n in names if n.startswith(('nbs/', 'tests/', '.venv/', '_docs/', '_proc/')) or '__pycache__' in n]

def test_clean_venv_install_and_train(wheel, clean_bin, tmp_path):
    install(clean_bin, wheel, tmp_path)
    out = sh(clean_bin / 'longctx_train', '--trainer.max_steps=3', '--data.seq_len=32', '--data.batch_size=2',
             '--trainer.enable_progress_bar=false', '--trainer.limit_val_batches=1', f'--trainer.default_root_dir={tmp_path / "runs"}',
             f'--data.cache_dir={tmp_path / "cache"}', cwd=tmp_path)
    assert 'Training finished' in out and (tmp_path / 'runs' / 'version_0' / 'loss.png').exists()

def test_install_from_source_tree(clean_bin, tmp_path):
    "`pip install .` from a clone (not editable): the package is copied into the venv."
    got = install(clean_bin, ROOT, tmp_path)
    assert not Path(got['file']).resolve().is_relative_to(ROOT)

def test_install_from_sdist(sdist, clean_bin, tmp_path):
    install(clean_bin, sdist, tmp_path)
    assert 'usage: longctx_prepare' in sh(clean_bin / 'longctx_prepare', '--help', cwd=tmp_path)
