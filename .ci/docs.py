"""Build the docs site into _docs/ without Quarto (Quarto has no wheel, Debian or npm package here).

Where `quarto` is on PATH this just runs nbdev's own `nbdev_docs` (pass --no-quarto to force this path).
Otherwise, for every notebook in nbs/ (recursively, skipping names that start with `_` or `.`):

1. execute it with execnb's `CaptureShell.run_all`, as `nbdev_test` does, in a fresh interpreter of its own,
   skipping cells flagged with settings.ini's `tst_flags` (`notest`, `cuda`), which keep the outputs saved in the
   notebook, and record whether it ran to the end and, if not, the failing cell's traceback;
2. process it with nbdev's `FilterDefaults` (the processors `nbdev_docs` runs before Quarto: frontmatter,
   `#| hide`, show_doc cells, `#| exports`, doc links, ...) and write it to _proc/;
3. do what Quarto would do with the cell options left for it (`echo`, `output`, `include`, `eval`, fenced
   divs) and convert it to HTML with nbconvert's `HTMLExporter` (lab template, images embedded as PNG),
   adding a left sidebar with the notebooks grouped by number range (the tutorials in nbs/tutorials/ first) and
   rewriting links to notebooks.

Executed notebooks in _proc/ are reused while their notebook and the package are unchanged (compared by content, a
record beside each: `_proc/NB.ipynb.run.json`; `--force` runs all again, e.g. after changing this script). The test
suite runs each notebook once per session through `execute` here: tests/test_notebooks.py asserts on the records
and tests/test_docs.py renders the site from the same _proc/.
Usage: `python .ci/docs.py [--force] [--no-quarto] [--workers N] [NAMES...]`.
"""
import argparse, ast, copy, html, json, os, posixpath, re, shutil, subprocess, sys, time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NBS, PROC, DOCS, LIB = ROOT / 'nbs', ROOT / '_proc', ROOT / '_docs', ROOT / 'longctx_nb'

TUTORIALS = 'tutorials'  # nbs/tutorials/: the tutorials, listed first in the sidebar
SECTIONS = [(None, 'Tutorials'), (0, 'Foundation & data'), (10, 'Kernels'), (20, 'Blocks'), (30, 'Model'), (40, 'Training'),
            (44, 'Interoperability'), (50, 'Benchmarks'), (55, 'Evaluation'), (70, 'CLI')]

def notebooks(names=()):
    nbs = sorted(p for p in NBS.rglob('*.ipynb')
                 if not any(part.startswith(('.', '_')) for part in p.relative_to(NBS).parts))
    if names: nbs = [p for p in nbs if p.stem in names or p.name in names]
    return nbs

def section(nb: Path):
    "The sidebar section of a notebook: 'Tutorials' for those in nbs/tutorials/, else by its number."
    parts = nb.relative_to(NBS).parts
    if len(parts) > 1 and parts[0] == TUTORIALS: return 'Tutorials'
    m = re.match(r'(\d+)_', nb.name)
    if not m: return None
    n = int(m.group(1))
    return next((name for lo, name in reversed(SECTIONS) if lo is not None and n >= lo), None)

def html_name(nb: Path) -> str: return nb.relative_to(NBS).with_suffix('.html').as_posix()

# ---------------------------------------------------------------- 1+2: execute and process (one process per notebook)
def _directives(cell):  # nbdev's parsed `#|` directives, keys without the trailing ':'
    return {k.rstrip(':'): v for k, v in (getattr(cell, 'directives_', None) or {}).items()}

def _mixed(src: str) -> bool:
    "Whether a cell imports and also does other work (nbdev warns about these and runs them again for show_doc)."
    try: tree = ast.parse('\n'.join(l for l in src.splitlines() if not l.lstrip().startswith(('%', '!'))))
    except SyntaxError: return False
    nodes = list(ast.walk(tree))
    return any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in nodes) and any(isinstance(n, (ast.Expr, ast.Assign)) for n in nodes)

def execute_and_process(src: str, dst: str, skip_flags: list, timeout: float = 600):
    "Run notebook `src`, process it as nbdev_docs does, write it to `dst`. Returns (seconds, error or None)."
    os.environ.setdefault('OMP_NUM_THREADS', '1'); os.environ.setdefault('MPLBACKEND', 'Agg')
    os.environ['IN_TEST'] = '1'  # as nbdev_test / nbdev's docs processing do
    os.chdir(ROOT)  # nbdev reads settings.ini from the working directory
    from fastcore.xtras import working_directory
    from execnb.nbio import write_nb
    from execnb.shell import CaptureShell
    from nbdev.process import NBProcessor
    from nbdev.frontmatter import FrontmatterProc
    from nbdev.processors import FilterDefaults, exec_show_docs
    flags = set(skip_flags)
    class ShowDocs(exec_show_docs):
        """nbdev's `exec_show_docs` (it re-runs exports, imports and show_doc cells in a fresh shell to render the API
        docs), without the cells the first pass skipped (notest, cuda) or already ran that mix imports with other work:
        those hold the slow experiments, and no show_doc needs them"""
        def __call__(self, cell):
            d = _directives(cell)
            if cell.cell_type == 'code' and (flags & d.keys() or not d.keys() & {'export', 'exports', 'exporti', 'exec_doc'}
                                             and _mixed(cell.source)): return
            super().__call__(cell)
    class TolerantShowDocs(ShowDocs):
        "`ShowDocs`, carrying on past a cell that fails out of context"
        def __call__(self, cell):
            try: super().__call__(cell)
            except Exception: self.k.exc = None
    class Filter(FilterDefaults):
        def base_procs(self): return [ShowDocs if p is exec_show_docs else p for p in super().base_procs()]
    src, dst, t0, err = Path(src), Path(dst), time.time(), None
    # as nbdev.test.test_nb runs it, but keeping the `#|` lines for nbdev's docs processors below
    nb = NBProcessor(src, procs=FrontmatterProc, rm_directives=False, process=True).nb
    def no_eval(cell):
        if cell.cell_type != 'code': return True
        if 'nbdev_export' + '(' in cell.source: return True
        d = _directives(cell)
        if d.get('eval', [''])[0].lower() == 'false': return True
        return bool(flags & d.keys())
    shell = CaptureShell(src)
    from fastcore.basics import str2bool
    if not str2bool(getattr(nb, 'frontmatter_', {}).get('skip_exec', False)):   # nbdev_test skips these notebooks too
        try:
            with working_directory(src.parent): shell.run_all(nb, exc_stop=True, preproc=no_eval)
        except Exception:
            err = shell.prettytb(fname=src).rstrip('\n')
            if shell._cell_idx: err += '\n\nThe cell:\n' + nb.cells[shell._cell_idx - 1].source
    # cells that were skipped (notest, cuda) keep the outputs saved in the notebook from a real run
    nb0 = copy.deepcopy(nb)
    try: Filter()(nb)  # nbdev_docs' processors (they read the frontmatter cell the first pass wrote)
    except Exception as e:  # nbdev_docs itself would stop here: a failure of this notebook, but build the page anyway
        err = err or (f'nbdev_docs would fail on {src.name} ({e.__cause__!r}): {e}\nnbdev runs the exported cells and '
                      'the cells that mix imports and other code on their own to build show_doc: a name they use must be '
                      "defined by such a cell above (an annotation of a class defined later needs quotes: r: 'Run')")
        nb = nb0
        class Tolerant(Filter):
            def base_procs(self):
                return [TolerantShowDocs if p is ShowDocs else p for p in super().base_procs()]
        Tolerant()(nb)
    dst.parent.mkdir(parents=True, exist_ok=True)
    write_nb(nb, dst)
    return time.time() - t0, err

# ---------------------------------------------------------------- 3: what Quarto does with what nbdev leaves it
_re_dir = re.compile(r'^\s*#\|\s*([\w-]+)\s*:?\s*(.*?)\s*$')

def quarto_cell_opts(cell):
    "Split `#|` lines off the top of a code cell: returns (options, code)."
    lines, opts = cell['source'].splitlines(), {}
    while lines and (m := _re_dir.match(lines[0])):
        opts[m.group(1)] = m.group(2).strip('"\'') or 'true'; lines.pop(0)
    return opts, '\n'.join(lines).strip('\n')

def frontmatter(nb):
    import yaml
    for cell in nb['cells']:
        src = ''.join(cell['source']) if isinstance(cell['source'], list) else cell['source'] or ''
        if cell['cell_type'] == 'raw' and src.strip().startswith('---'):
            return yaml.safe_load(src.strip().strip('-')) or {}
    return {}

SITE = None  # the published site's address (doc_host + doc_baseurl from settings.ini)

def link_target(url: str, here: Path, outmap: dict):
    """Rewrite links to notebooks (`30_model.ipynb` or `../30_model.ipynb`, relative to the notebook `here`;
    `nbs/30_model.ipynb` from the repository root, as the README has them) and nbdev's doc links to the published
    site (`{doc_host}{doc_baseurl}/model.html#x`, Quarto's `output-file` names) to the local pages."""
    rooted = url.startswith(SITE)   # a path from the site's root, not from this notebook's folder
    if rooted: url = url[len(SITE):]
    elif re.match(r'^[a-z]+:|^#|^/', url): return url
    path, _, frag = url.partition('#')
    if path.startswith('nbs/'): path, rooted = path[4:], True
    if path.endswith('.ipynb'): path = path[:-6] + '.html'
    folder = here.parent.relative_to(NBS).as_posix()   # '.' for a notebook at the top of nbs/
    if path:
        from_root = path if rooted else posixpath.normpath(posixpath.join(folder, path))
        path = posixpath.relpath(outmap.get(from_root, from_root), folder)
    return path + ('#' + frag if frag else '')

_re_link = re.compile(r'\]\(([^)\s]+)\)(\{[^}\n]*\})?')  # markdown link, with Quarto's `{target=...}` attributes

def fix_links(md: str, src: Path, outmap: dict) -> str:
    return _re_link.sub(lambda m: '](' + link_target(m.group(1), src, outmap) + ')', md)

def for_html(nb: dict, src: Path, outmap: dict) -> dict:
    "The processed notebook as Quarto would render it: H1 + summary from the frontmatter, cell options applied."
    nb = copy.deepcopy(nb)
    fm = frontmatter(nb)
    cells = []
    if fm.get('title'):
        head = f"# {fm['title']}"
        if fm.get('description'): head += f"\n\n> {fm['description']}"
        cells.append({'cell_type': 'markdown', 'metadata': {}, 'source': head})
    for cell in nb['cells']:
        if isinstance(cell.get('source'), list): cell['source'] = ''.join(cell['source'])
        cell['source'] = cell.get('source') or ''
        if cell['cell_type'] == 'raw': continue  # frontmatter
        if cell['cell_type'] == 'markdown':
            s = cell['source']
            if re.fullmatch(r'\s*:::.*', s, flags=re.S) and s.count('\n') == 0: continue  # Quarto fenced div
            cell['source'] = fix_links(s, src, outmap)
            if cell['source'].strip(): cells.append(cell)
            continue
        if cell['cell_type'] != 'code': continue
        opts, code = quarto_cell_opts(cell)
        if opts.get('include') == 'false': continue
        if opts.get('output') == 'false': cell['outputs'] = []
        for o in cell.get('outputs', []):  # execnb keeps multi-line text as lists; nbconvert wants strings
            if isinstance(o.get('text'), list): o['text'] = ''.join(o['text'])
            for k, v in o.get('data', {}).items():
                if isinstance(v, list): o['data'][k] = ''.join(v)
            md = o.get('data', {}).get('text/markdown')
            if md is not None:  # show_doc output: drop Quarto-only markup, keep it readable
                md = ''.join(md) if isinstance(md, list) else md
                md = re.sub(r'^:::.*$', '', md, flags=re.M)
                o['data']['text/markdown'] = fix_links(md, src, outmap)
        cell['source'] = code
        hide_in = opts.get('echo') == 'false' or not code
        cell.setdefault('metadata', {})['transient'] = {'remove_source': hide_in}
        if hide_in: cell['metadata']['jupyter'] = {'source_hidden': True}
        if hide_in and not cell.get('outputs'): continue
        cells.append(cell)
    for i, cell in enumerate(cells): cell.setdefault('id', f'cell-{i}')
    nb['cells'] = cells
    return nb

CSS = """
body { margin: 0; }
#lc-sidebar { position: fixed; top: 0; left: 0; bottom: 0; width: 250px; overflow-y: auto; background: #f7f7f9;
  border-right: 1px solid #ddd; padding: 16px 14px; font: 14px/1.45 system-ui, -apple-system, 'Segoe UI', sans-serif;
  box-sizing: border-box; }
#lc-sidebar .lc-brand { font-size: 18px; font-weight: 700; display: block; margin-bottom: 12px; color: #2c3e50; text-decoration: none; }
#lc-q { width: 100%; box-sizing: border-box; margin: 0 0 6px; padding: 4px 6px; border: 1px solid #ccc; border-radius: 4px; }
#lc-hits li a { font-size: 13px; }
#lc-sidebar h3 { font-size: 12px; text-transform: uppercase; letter-spacing: .05em; color: #777; margin: 14px 0 4px; }
#lc-sidebar ul { list-style: none; margin: 0; padding: 0; }
#lc-sidebar li a { display: block; padding: 2px 6px; border-radius: 4px; color: #2780e3; text-decoration: none; }
#lc-sidebar li a:hover { background: #e8eef7; }
#lc-sidebar li a.active { background: #2780e3; color: #fff; }
#lc-content { margin-left: 250px; max-width: 1100px; padding: 8px 24px 40px; }
#lc-content .jp-Cell { padding-left: 0; padding-right: 0; }
#lc-content blockquote { border-left: 4px solid #ccc; margin-left: 0; padding-left: 12px; color: #555; }
#lc-content .jp-RenderedHTMLCommon table { font-size: 13px; }
"""

def sidebar(pages, current: str) -> str:
    depth = current.count('/')
    up = '../' * depth
    out = [f'<nav id="lc-sidebar"><a class="lc-brand" href="{up}index.html">longctx_nb</a>',
           f'<input id="lc-q" type="search" placeholder="Search" aria-label="Search the docs" data-up="{up}">'
           '<ul id="lc-hits"></ul>']
    groups = {}
    for p in pages:
        if p['section']: groups.setdefault(p['section'], []).append(p)
    for _, name in SECTIONS:
        if name not in groups: continue
        out.append(f'<h3>{html.escape(name)}</h3><ul>')
        for p in groups[name]:
            cls = ' class="active"' if p['href'] == current else ''
            out.append(f'<li><a{cls} href="{up}{p["href"]}">{html.escape(p["title"])}</a></li>')
        out.append('</ul>')
    out.append('</nav>')
    return '\n'.join(out)

def anchors(body: str) -> str:
    """Lower-case heading ids and the fragments of links within the site, as Quarto does: nbdev writes its doc links
    (`model.html#lm`, `#modelconfig`) lower-case, while nbconvert keeps a heading's case (`id="LM"`)."""
    body = re.sub(r'(<h[1-6][^>]*\bid=")([^"]+)"', lambda m: m.group(1) + m.group(2).lower() + '"', body)
    site = lambda url: not re.match(r'^[a-z]+:', url)   # relative: a page of this site, or this page
    return re.sub(r'(href=")([^"#]*)#([^"]+)"', lambda m: m.group(0) if not site(m.group(2)) else
                  f'{m.group(1)}{m.group(2)}#{m.group(3).lower()}"', body)

MATHJAX = 'mathjax@3.2.2'   # the npm package; its es5/tex-chtml-full.js renders TeX with no other file but its fonts

def local_mathjax(log=print) -> bool:
    """Copy MathJax into _docs/mathjax/ (from .cache/, filled once from the npm registry), so maths renders with no
    network when the site is read; False (pages then load MathJax from its CDN, as nbconvert does) if npm is missing."""
    import tarfile, tempfile
    cache = ROOT / '.cache' / 'mathjax'
    if not (cache / 'tex-chtml-full.js').exists():
        if not shutil.which('npm'): log('note: npm not found: pages load MathJax from its CDN'); return False
        with tempfile.TemporaryDirectory() as d:
            p = subprocess.run(['npm', 'pack', '--silent', MATHJAX], cwd=d, capture_output=True, text=True)
            tgz = next(Path(d).glob('*.tgz'), None)
            if p.returncode or tgz is None: log(f'note: npm pack {MATHJAX} failed: pages load MathJax from its CDN'); return False
            with tarfile.open(tgz) as t:
                for m in t.getmembers():
                    rel = m.name.removeprefix('package/es5/')
                    if m.isfile() and (rel == 'tex-chtml-full.js' or rel.startswith('output/chtml/fonts/woff-v2/')):
                        out = cache / rel; out.parent.mkdir(parents=True, exist_ok=True)
                        out.write_bytes(t.extractfile(m).read())
    shutil.copytree(cache, DOCS / 'mathjax', dirs_exist_ok=True)
    return True

_re_mathjax = re.compile(r'<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->', re.S)
def mathjax(body: str, up: str) -> str:
    "nbconvert's MathJax 2 from a CDN -> the local MathJax 3, with the same delimiters."
    cfg = ("<script>window.MathJax = {tex: {inlineMath: [['$', '$'], ['\\\\(', '\\\\)']], displayMath: [['$$', '$$'], "
           "['\\\\[', '\\\\]']], processEscapes: true}};</script>")
    return _re_mathjax.sub(lambda m: f'{cfg}\n<script src="{up}mathjax/tex-chtml-full.js"></script>', body, count=1)

SEARCH_JS = r'''(function () {
  var q = document.getElementById('lc-q'), hits = document.getElementById('lc-hits');
  if (!q || !window.LC_SEARCH) return;
  var up = q.dataset.up || '';
  q.addEventListener('input', function () {
    var terms = q.value.toLowerCase().split(/\s+/).filter(Boolean);
    hits.innerHTML = '';
    if (!terms.length) return;
    window.LC_SEARCH.filter(function (p) {
      return terms.every(function (t) { return p.text.indexOf(t) >= 0 || p.title.toLowerCase().indexOf(t) >= 0; });
    }).slice(0, 12).forEach(function (p) {
      var li = document.createElement('li'), a = document.createElement('a');
      a.href = up + p.href; a.textContent = p.title; li.appendChild(a); hits.appendChild(li);
    });
  });
})();'''

def search_index(pages: list) -> str:
    "`search.js`: each page's title, address and words, for the search box (a script, so it also works from file://)."
    docs = []
    for p in pages:
        text = re.sub(r'<(script|style)\b.*?</\1>|<[^>]+>', ' ', (DOCS / p['href']).read_text(), flags=re.S)
        text = re.sub(r'\s+', ' ', html.unescape(text)).lower()
        docs.append({'title': p['title'], 'href': p['href'], 'text': text[:60_000]})
    return 'window.LC_SEARCH = ' + json.dumps(docs) + ';\n' + SEARCH_JS

def to_html(nb: dict, title: str, nav: str, up: str = '', local_math: bool = False) -> str:
    import nbformat
    from nbconvert import HTMLExporter
    exp = HTMLExporter(template_name='lab', exclude_input_prompt=True, exclude_output_prompt=True)
    exp.register_preprocessor('nbconvert.preprocessors.TagRemovePreprocessor', enabled=False)
    body, _ = exp.from_notebook_node(nbformat.from_dict(nb))
    body = re.sub(r'<title>.*?</title>', f'<title>{html.escape(title if title == "longctx_nb" else title + " – longctx_nb")}</title>', body, count=1, flags=re.S)
    body = anchors(body)
    if local_math: body = mathjax(body, up)
    body = body.replace('</body>', f'<script src="{up}search.js" defer></script>\n</body>', 1)
    body = body.replace('</head>', f'<style>{CSS}</style>\n</head>', 1)
    body = re.sub(r'(<body[^>]*>)', lambda m: m.group(1) + '\n' + nav + '\n<div id="lc-content">', body, count=1)
    return body.replace('</body>', '</div>\n</body>', 1)

_re_frag_link = re.compile(r'<a\b[^>]*?\bhref="([^"#:]*)#([^"]+)"')

def land_links(bodies: dict) -> dict:
    """Make every link to a fragment of the site land. nbdev links each name in backticks to `page.html#name`, but a
    page has that anchor only where show_doc documents the name: not for a private helper (`_vocab`) or a method added
    with `patch_to`, whose `#| export` cell the page does not show. Such a link lands on the first place its own page
    names it (the prose that introduces it, where the code was); a link from another page to a name its page never
    mentions lands on the class (`#blade` for `#blade.reset_parameters`) or on the page."""
    ids = {h: set(re.findall(r'\bid="([^"]+)"', b)) for h, b in bodies.items()}
    target = lambda here, path: posixpath.normpath(posixpath.join(posixpath.dirname(here), path)) if path else here
    out = {}
    for h, b in bodies.items():   # anchor a name at its page's first mention of it
        for m in list(_re_frag_link.finditer(b)):
            frag = m.group(2)
            if target(h, m.group(1)) == h and frag not in ids[h]:
                b = b.replace(m.group(0), f'<span id="{frag}"></span>' + m.group(0), 1); ids[h].add(frag)
        out[h] = b
    def land(m):
        t, frag = target(h, m.group(1)), m.group(2)
        if t not in ids or frag in ids[t]: return m.group(0)
        cls = frag.split('.')[0]
        return m.group(0).replace('#' + frag + '"', ('#' + cls if cls in ids[t] else '') + '"')
    for h in out: out[h] = _re_frag_link.sub(land, out[h])
    return out

# ---------------------------------------------------------------- main
def settings():
    from configparser import ConfigParser
    cfg = ConfigParser(delimiters=['=']); cfg.read(ROOT / 'settings.ini')
    return cfg['DEFAULT']

def skip_flags(): return settings().get('tst_flags', '').split()

ERROR_MARK = '\n--- notebook error ---\n'   # what the child process prints before the failing cell's traceback

def source_digest() -> str:
    "A digest of what every notebook runs against: the package's files and settings.ini (contents, not times)."
    import hashlib
    h = hashlib.sha256()
    for p in sorted([*LIB.rglob('*.py'), ROOT / 'settings.ini']):
        if '__pycache__' not in p.parts: h.update(p.relative_to(ROOT).as_posix().encode() + b'\0' + p.read_bytes() + b'\0')
    return h.hexdigest()

def run_digest(nb: Path, sources: str) -> str:
    "What an executed notebook was made from: the notebook and the package (`sources`, from `source_digest`)."
    import hashlib
    return hashlib.sha256(nb.read_bytes() + sources.encode()).hexdigest()

def proc_path(nb: Path) -> Path: return PROC / nb.relative_to(NBS)
def record_path(nb: Path) -> Path: return proc_path(nb).with_name(nb.name + '.run.json')

def read_record(nb: Path) -> dict | None:
    "The record of `nb`'s last run: {'digest', 'passed', 'error', 'seconds'}; None if it never ran."
    try: return json.loads(record_path(nb).read_text())
    except (OSError, ValueError): return None

def run_one(nb: Path, timeout: float = 900, sources: str | None = None) -> dict:
    """Execute and process one notebook in a fresh interpreter (as isolated as `nbdev_test`'s: nothing one notebook
    registers or patches reaches another), writing it to _proc/ and its record beside it; returns the record. A notebook
    that fails leaves no executed copy, so no page that looks current."""
    t0, dst = time.time(), proc_path(nb)
    digest = run_digest(nb, sources or source_digest())  # taken before the run: a change during it makes it stale
    dst.unlink(missing_ok=True); record_path(nb).unlink(missing_ok=True)
    cmd = [sys.executable, __file__, '--exec-one', str(nb), str(dst)]
    try:
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        if p.returncode == 0: err = None
        elif ERROR_MARK in p.stderr: err = p.stderr.split(ERROR_MARK)[-1].strip('\n')   # the failing cell's traceback
        else: err = f'exit code {p.returncode}\n' + p.stdout[-4000:] + p.stderr[-8000:]   # it died before or after the cells
    except subprocess.TimeoutExpired: p, err = None, f'timed out after {timeout:.0f}s'
    if err: dst.unlink(missing_ok=True)
    else:
        warned = re.findall(r'^WARNING .*?(?=^\(nbdev runs)', p.stderr, flags=re.M | re.S)
        for w in warned: sys.stderr.write(w.split('\n')[0] + '\n')
    rec = {'digest': digest, 'passed': err is None, 'error': err, 'seconds': round(time.time() - t0, 1)}
    record_path(nb).parent.mkdir(parents=True, exist_ok=True)
    record_path(nb).write_text(json.dumps(rec, indent=1) + '\n')
    return rec

def stale(nb: Path, sources: str) -> bool:
    """Whether `nb` must run again: it never ran to the end, or it ran from another notebook or package (compared by
    content, so `nbdev_export` rewriting unchanged modules keeps it)."""
    r = read_record(nb)
    return not (r and r['passed'] and r['digest'] == run_digest(nb, sources) and proc_path(nb).exists())

def execute(nbs, force=False, workers=None, log=print) -> dict:
    """Run each of `nbs` that is stale (every one if `force`), `workers` at a time, each in its own interpreter, the
    longest (by its last record) first; returns {notebook: its record}, for the ones reused too."""
    sources = source_digest()
    todo = [nb for nb in nbs if force or stale(nb, sources)]
    todo.sort(key=lambda nb: -((read_record(nb) or {}).get('seconds') or 0))
    recs = {nb: read_record(nb) for nb in nbs if nb not in todo}
    if todo:
        workers = workers or max(1, min(len(todo), os.cpu_count() or 1))
        log(f'executing {len(todo)} notebook(s) with {workers} worker(s) (skipping cells flagged {skip_flags()})')
        with ThreadPoolExecutor(workers) as ex:
            for nb, rec in zip(todo, ex.map(lambda nb: run_one(nb, sources=sources), todo)):
                log(f'  {nb.relative_to(NBS)}: {rec["seconds"]:.1f}s' + ('' if rec['passed'] else ' FAILED'))
                recs[nb] = rec
    return {nb: recs[nb] for nb in nbs}

def build(names=(), force=False, workers=None, quiet=False):
    log = (lambda *a: None) if quiet else (lambda *a: print(*a, flush=True))
    t0 = time.time()
    errors = {nb: r['error'] for nb, r in execute(notebooks(names), force, workers, log).items() if not r['passed']}
    if errors:
        for nb, err in errors.items(): sys.stderr.write(f'{nb}:\n{err}\n')
        raise SystemExit(f'{len(errors)} notebook(s) failed: ' + ', '.join(p.name for p in errors))
    pages = []
    for nb in notebooks():  # the sidebar lists every page built so far
        pn = proc_path(nb)
        if not pn.exists(): continue
        proc = json.loads(pn.read_text())
        title = frontmatter(proc).get('title') or nb.stem
        pages.append({'nb': nb, 'proc': proc, 'title': title, 'href': html_name(nb), 'section': section(nb)})
    global SITE
    SITE = settings().get('doc_host', '').rstrip('/') + '/' + settings().get('doc_baseurl', '').strip('/') + '/'
    outmap = {frontmatter(p['proc']).get('output-file', p['href']): p['href'] for p in pages}
    DOCS.mkdir(exist_ok=True)
    local_math = local_mathjax(log)
    bodies = {p['href']: to_html(for_html(p['proc'], p['nb'], outmap), p['title'], sidebar(pages, p['href']),
                                 '../' * p['href'].count('/'), local_math) for p in pages}
    for href, body in land_links(bodies).items():
        out = DOCS / href; out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(body)
    (DOCS / 'search.js').write_text(search_index(pages))
    for extra in ('styles.css',):
        if (NBS / extra).exists(): shutil.copy2(NBS / extra, DOCS / extra)
    (DOCS / '.nojekyll').touch()
    log(f'wrote {len(pages)} page(s) to {DOCS.relative_to(ROOT)}/ in {time.time() - t0:.1f}s')
    return [DOCS / p['href'] for p in pages]

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('names', nargs='*', help='only these notebooks (stem or file name)')
    ap.add_argument('--force', action='store_true', help='execute every notebook again')
    ap.add_argument('--no-quarto', action='store_true', help='never use nbdev_docs, even where quarto is installed')
    ap.add_argument('--workers', type=int, default=None)
    ap.add_argument('--exec-one', nargs=2, metavar=('NOTEBOOK', 'DEST'), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.exec_one:
        secs, err = execute_and_process(*a.exec_one, skip_flags())
        if err: sys.stderr.write(ERROR_MARK + err + '\n')
        return 1 if err else 0
    if shutil.which('quarto') and not a.no_quarto and not a.names:
        nbdev_docs = Path(sys.executable).parent / 'nbdev_docs'
        return subprocess.run([str(nbdev_docs) if nbdev_docs.exists() else 'nbdev_docs'], cwd=ROOT).returncode
    os.environ.setdefault('OMP_NUM_THREADS', '1'); os.environ.setdefault('TOKENIZERS_PARALLELISM', 'false')
    os.environ.setdefault('LONGCTX_CACHE', str(ROOT / '.cache'))
    build(a.names, a.force, a.workers)
    return 0

if __name__ == '__main__':
    sys.exit(main())
