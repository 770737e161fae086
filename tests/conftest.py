import os, sys
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
