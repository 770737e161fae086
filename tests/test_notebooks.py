"""Every notebook's cells run as tests (cells flagged `notest` or `cuda` are skipped, as settings.ini's `tst_flags` say
and `nbdev_test` does). The notebooks run once per test session, in the `notebook_runs` fixture (tests/conftest.py),
each in a fresh interpreter of its own, so a block one notebook registers never reaches the next; the docs test renders
the same runs."""
from pathlib import Path
import pytest

NBS = Path(__file__).resolve().parents[1] / 'nbs'
NOTEBOOKS = sorted(p for p in NBS.rglob('*.ipynb') if not any(part.startswith(('.', '_')) for part in p.relative_to(NBS).parts))

@pytest.mark.parametrize('nb', NOTEBOOKS, ids=[str(p.relative_to(NBS)) for p in NOTEBOOKS])
def test_notebook(nb, notebook_runs):
    r = notebook_runs[nb]
    assert r['passed'], f"{nb.relative_to(NBS)} failed after {r['seconds']:.0f}s:\n{r['error']}"
