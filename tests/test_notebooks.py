"Every notebook's cells run as tests (cells flagged `notest` or `cuda` are skipped here)."
from pathlib import Path
import pytest
import nbdev.test as nbt
from longctx_nb.blocks import base

NBS = Path(__file__).resolve().parents[1] / 'nbs'
NOTEBOOKS = sorted(p for p in NBS.rglob('*.ipynb') if not any(part.startswith(('.', '_')) for part in p.relative_to(NBS).parts))

@pytest.fixture
def fresh_registry():
    "A notebook that defines a block registers its own class: give the next notebook the registry as it was."
    saved = dict(base._BLOCKS), dict(base._ALIASES)
    yield
    base._BLOCKS.clear(); base._BLOCKS.update(saved[0])
    base._ALIASES.clear(); base._ALIASES.update(saved[1])

@pytest.mark.parametrize('nb', NOTEBOOKS, ids=[str(p.relative_to(NBS)) for p in NOTEBOOKS])
def test_notebook(nb, fresh_registry):
    ok, secs = nbt.test_nb(nb, skip_flags=['notest', 'cuda'])
    assert ok, f'{nb.name} failed (its traceback is printed above)'
