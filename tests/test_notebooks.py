"Every notebook's cells run as tests (cells flagged `notest` or `cuda` are skipped here)."
from pathlib import Path
import pytest
import nbdev.test as nbt

NBS = Path(__file__).resolve().parents[1] / 'nbs'
NOTEBOOKS = sorted(p for p in NBS.rglob('*.ipynb') if not any(part.startswith(('.', '_')) for part in p.relative_to(NBS).parts))

@pytest.mark.parametrize('nb', NOTEBOOKS, ids=[str(p.relative_to(NBS)) for p in NOTEBOOKS])
def test_notebook(nb):
    ok, secs = nbt.test_nb(nb, skip_flags=['notest', 'cuda'])
    assert ok, f'{nb.name} failed (its traceback is printed above)'
