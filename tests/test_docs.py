"""The docs site: `.ci/docs.py` (what `make docs` runs) builds _docs/, and every page renders in headless Chromium
with its title, its code, its plots and working links between pages. The notebooks run once per test session, in the
`notebook_runs` fixture (tests/conftest.py) that tests/test_notebooks.py asserts on; the site is rendered from those runs."""
import json, os, re, shutil, struct, subprocess, sys, tempfile
from concurrent.futures import ThreadPoolExecutor
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlparse
import pytest

ROOT = Path(__file__).resolve().parents[1]
NBS, DOCS, PROC = ROOT / 'nbs', ROOT / '_docs', ROOT / '_proc'
PLOTTED = ['14_attention', '44_train', '01_first_model', '03_choosing_a_block', '04_profiling']  # notebooks known to draw plots
# Pages that the tutorials link to while their notebooks are written on other branches: a link to one is not
# checked until its notebook exists in nbs/ (then it is, like every link). Remove names once they have landed.
PENDING = set()
BROWSER_FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
                 '--disable-background-networking', '--disable-component-update', '--disable-sync']

def notebooks():
    return sorted(p for p in NBS.rglob('*.ipynb') if not any(s.startswith(('.', '_')) for s in p.relative_to(NBS).parts))

def h1(nb: Path) -> str:
    for cell in json.loads(nb.read_text())['cells']:
        if cell['cell_type'] == 'markdown' and (m := re.search(r'^#\s+(\S.*?)\s*$', ''.join(cell['source']), re.M)):
            return m.group(1)
    raise AssertionError(f'{nb.name} has no H1')

def chromium():
    exe = shutil.which('chromium') or shutil.which('chromium-browser')
    if exe: return exe
    if not shutil.which('apt-get'): pytest.skip('chromium is not installed and apt-get is unavailable to install it')
    sudo = [] if os.geteuid() == 0 else (['sudo', '-n'] if shutil.which('sudo') else None)
    if sudo is None: pytest.skip('chromium is not installed and installing it needs root')
    for cmd in (['apt-get', 'update', '-qq'], ['apt-get', 'install', '-y', '-qq', 'chromium']):
        p = subprocess.run(sudo + cmd, capture_output=True, text=True, env={**os.environ, 'DEBIAN_FRONTEND': 'noninteractive'})
        if p.returncode: pytest.skip(f'could not install chromium ({" ".join(cmd)}): {p.stderr[-500:]}')
    return shutil.which('chromium') or pytest.skip('apt-get installed no chromium executable')

@pytest.fixture(scope='module')
def site(notebook_runs):
    "Build the site from this session's runs of the notebooks in _proc/: the build runs none of them again."
    failed = [str(nb.relative_to(NBS)) for nb, r in notebook_runs.items() if not r['passed']]
    if failed: pytest.fail(f'no site: {len(failed)} notebook(s) failed (tests/test_notebooks.py says why): {failed}')
    p = subprocess.run([sys.executable, str(ROOT / '.ci' / 'docs.py'), '--no-quarto'], cwd=ROOT, capture_output=True,
                       text=True, timeout=1800)
    assert p.returncode == 0, f'docs build failed\nstdout:\n{p.stdout[-3000:]}\nstderr:\n{p.stderr[-6000:]}'
    assert 'executing' not in p.stdout, f'the docs build ran notebooks a second time (changed during the session?):\n{p.stdout}'
    return DOCS

class Page(HTMLParser):
    "What the test checks in a rendered DOM: title, H1s, code blocks, images, links."
    def __init__(self):
        super().__init__(); self.title, self.h1, self.pre, self.imgs, self.hrefs, self.ids = '', [], 0, [], [], set()
        self._in = None
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ('title', 'h1'): self._in = tag; (self.h1.append('') if tag == 'h1' else None)
        if tag == 'pre': self.pre += 1
        if tag == 'img': self.imgs.append(a.get('src', ''))
        if tag == 'a' and a.get('href'): self.hrefs.append(a['href'])
        if a.get('id'): self.ids.add(a['id'])
        if a.get('name'): self.ids.add(a['name'])
    def handle_endtag(self, tag):
        if tag == self._in: self._in = None
    def handle_data(self, data):
        if self._in == 'title': self.title += data
        elif self._in == 'h1': self.h1[-1] += data

def dump_dom(exe, page: Path) -> str:
    with tempfile.TemporaryDirectory() as prof:
        p = subprocess.run([exe, *BROWSER_FLAGS, f'--user-data-dir={prof}', '--dump-dom', page.as_uri()],
                           capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and '<body' in p.stdout, f'chromium failed on {page.name}: {p.stderr[-2000:]}'
    return p.stdout

def n_plots(nb: Path) -> int:
    "Images among the executed notebook's outputs, in cells whose output the page shows (not `#| output: false`)."
    cells = json.loads((PROC / nb.relative_to(NBS)).read_text())['cells']
    hidden = lambda c: re.search(r'^#\|\s*(output|include):\s*false', ''.join(c.get('source', '')), re.M)
    return sum('image/png' in o.get('data', {}) for c in cells if not hidden(c) for o in c.get('outputs', []))

def test_docs_site(site, tmp_path):
    exe = chromium()
    nbs = notebooks()
    pages = {nb: site / nb.relative_to(NBS).with_suffix('.html') for nb in nbs}
    missing = [str(p) for p in pages.values() if not p.exists()]
    assert not missing, f'pages not built: {missing}'
    with ThreadPoolExecutor(4) as ex: doms = dict(zip(nbs, ex.map(lambda nb: dump_dom(exe, pages[nb]), nbs)))
    parsed = {}
    for nb in nbs: parsed[nb] = Page(); parsed[nb].feed(doms[nb])
    ids = {pages[nb].resolve(): parsed[nb].ids for nb in nbs}
    broken_fragments = []
    for nb in nbs:
        page, dom = parsed[nb], doms[nb]
        title = h1(nb)
        assert title in page.title, (nb.name, page.title)
        assert any(title == h.replace('¶', '').strip() for h in page.h1), (nb.name, page.h1)
        assert page.pre >= 1 and 'class="highlight' in dom, f'{nb.name}: no highlighted code blocks'
        assert 'id="lc-sidebar"' in dom and 'Blocks' in dom, f'{nb.name}: no sidebar'
        plots = n_plots(nb)
        if nb.stem in PLOTTED: assert plots >= 1, f'{nb.name} drew no plot when executed'
        pngs = [s for s in page.imgs if s.startswith('data:image/png;base64,')]
        assert len(pngs) >= plots, f'{nb.name}: {plots} plots but {len(pngs)} embedded PNG images'
        for href in page.hrefs:
            u = urlparse(href)
            if u.scheme in ('http', 'https', 'mailto', 'data', 'javascript'): continue
            target = (pages[nb].parent / unquote(u.path)).resolve() if u.scheme != 'file' else Path(unquote(u.path))
            if not u.path: target = pages[nb].resolve()
            if u.fragment and target in ids and unquote(u.fragment) not in ids[target]:
                broken_fragments.append(f'{nb.name}: {href}')
            if not target.exists() and target.suffix == '.html' and target.stem in PENDING and \
                    not any(n.stem == target.stem for n in nbs): continue
            assert target.is_file() and site.resolve() in target.parents, f'{nb.name}: broken link {href!r}'
    # every link to a heading or a symbol of the site lands on it
    assert not broken_fragments, f'{len(broken_fragments)} links to a missing anchor: {broken_fragments[:20]}'
    # the index's sidebar reaches every numbered notebook's page
    index = Page(); index.feed(doms[NBS / 'index.ipynb'])
    numbered = {pages[nb].relative_to(site).as_posix() for nb in nbs if re.match(r'\d+_', nb.name)}
    assert numbered <= set(index.hrefs), numbered - set(index.hrefs)
    # a screenshot of the index, kept next to the site for a human to look at
    shot = site / 'index.png'
    shot.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory() as prof:
        p = subprocess.run([exe, *BROWSER_FLAGS, f'--user-data-dir={prof}', f'--screenshot={shot}', '--window-size=1280,2000',
                            (site / 'index.html').as_uri()], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and shot.exists(), p.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b'\x89PNG\r\n\x1a\n' and len(data) > 10_000
    assert struct.unpack('>II', data[16:24]) == (1280, 2000)

MACHINE_PATH = re.compile(r'/tmp/|/home/|/root/|/Users/|/work/')   # a folder of the machine a notebook ran on

def saved_machine_paths(nb: Path) -> list[str]:
    "Machine paths in `nb`'s saved outputs (text and text/* data), each with a little context."
    hits = []
    for i, cell in enumerate(json.loads(nb.read_text())['cells']):
        for o in cell.get('outputs', []):
            texts = [o.get('text', '')] + [v for k, v in o.get('data', {}).items() if k.startswith('text/')]
            for t in (''.join(t) if isinstance(t, list) else t for t in texts):
                hits += [f'{nb.name} cell {i}: ...{t[max(0, m.start() - 40):m.end() + 40]}...' for m in MACHINE_PATH.finditer(t)]
    return hits

def test_saved_outputs_name_no_machine_paths(tmp_path):
    "Outputs kept in the notebooks are read on the docs site: a temporary folder or a home path there names a machine, not the library."
    assert [h for nb in notebooks() for h in saved_machine_paths(nb)] == []
    bad = tmp_path / 'bad.ipynb'
    bad.write_text(json.dumps({'cells': [{'cell_type': 'code', 'source': [], 'outputs': [
        {'output_type': 'stream', 'name': 'stdout', 'text': ['wrote /tmp/tmpyr2mlhm_/passkey/report.md\n']}]}]}))
    assert saved_machine_paths(bad) == ['bad.ipynb cell 0: ...wrote /tmp/tmpyr2mlhm_/passkey/report.md\n...']
