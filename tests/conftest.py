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
