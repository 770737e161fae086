"""Run the tutorials (nbs/tutorials/*.ipynb) in a Jupyter kernel, as a reader's Jupyter would, and keep their outputs
in the notebooks, so that the plots and tables that teach show on the repository's page too. Cells flagged with
settings.ini's `tst_flags` (`notest`, `cuda`) or `#| eval: false` are not run and keep what they had; `#| hide` and
`#| output: false` cells (setup, an interactive widget) keep no output. Then `nbdev_clean` (settings.ini has
`clear_all = False`, so the outputs stay); commit the notebooks.
Usage: `python .ci/tutorials.py [NOTEBOOK...]` (`make tutorials`, `make tutorials ARGS=nbs/tutorials/01_first_model.ipynb`)."""
import os, re, subprocess, sys, time
from configparser import ConfigParser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

def skip_flags() -> set:
    cfg = ConfigParser(delimiters=['=']); cfg.read(ROOT / 'settings.ini')
    return set(cfg['DEFAULT'].get('tst_flags', '').split())

def directives(src: str) -> dict:
    "A cell's leading `#|` lines: {'hide': '', 'output': 'false', ...}."
    out = {}
    for line in src.splitlines():
        if not (m := re.match(r'^\s*#\|\s*([\w-]+):?[ \t]*(.*?)\s*$', line)): break
        out[m.group(1)] = m.group(2)
    return out

def local_paths(text: str) -> str:
    "`text` with the repository's folder written relative to it and the home folder as `~`."
    text = re.sub(re.escape(str(ROOT)) + r'(?:/|(?![\w.-]))', lambda m: '' if m.group().endswith('/') else '.', text)
    return re.sub(re.escape(str(Path.home())) + r'(?![\w.-])', '~', text)

def run(path: Path, flags: set, timeout: int = 900):
    "Execute `path` in a Jupyter kernel in its own folder, writing the outputs back into it (see the module's docstring)."
    import nbformat
    from nbclient import NotebookClient
    nb = nbformat.read(path, as_version=4)
    kept = {}
    for cell in nb.cells:
        if cell.cell_type != 'code': continue
        d = directives(cell.source)
        if flags & d.keys() or d.get('eval', '').lower() == 'false':
            kept[cell.id] = cell.outputs
            cell.metadata.setdefault('tags', []).append('skip-execution')
    NotebookClient(nb, timeout=timeout, kernel_name='python3', skip_cells_with_tag='skip-execution',
                   resources={'metadata': {'path': str(path.parent)}}).execute()
    for cell in nb.cells:
        if cell.cell_type != 'code': continue
        if cell.id in kept:
            cell.outputs = kept[cell.id]; cell.metadata.tags.remove('skip-execution')
            if not cell.metadata.tags: del cell.metadata['tags']
        d = directives(cell.source)
        if 'hide' in d or d.get('output', '').lower() == 'false': cell.outputs = []
        merged = []                # one stream output where the kernel sent several in a row
        for out in cell.outputs:
            if merged and out.output_type == 'stream' == merged[-1].output_type and out.name == merged[-1].name:
                merged[-1].text += out.text
            else: merged.append(out)
        cell.outputs = merged
        for out in cell.outputs:   # no path of the machine that ran them: the repository's own paths become relative
            if 'text' in out: out.text = local_paths(out.text)
            if 'text/plain' in out.get('data', {}): out.data['text/plain'] = local_paths(out.data['text/plain'])
    nb.metadata.pop('widgets', None)  # the state of widgets whose output is not kept
    nbformat.write(nb, path)

def main(args):
    os.environ.setdefault('OMP_NUM_THREADS', '1'); os.environ.setdefault('TOKENIZERS_PARALLELISM', 'false')
    os.environ.setdefault('LONGCTX_CACHE', str(ROOT / '.cache'))
    os.chdir(ROOT)
    nbs = [Path(a).resolve() for a in args] or sorted((ROOT / 'nbs' / 'tutorials').glob('*.ipynb'))
    for nb in nbs:
        t0 = time.time(); run(nb, skip_flags())
        print(f'{os.path.relpath(nb, ROOT)}: {time.time() - t0:.0f}s', flush=True)
    clean = Path(sys.executable).parent / 'nbdev_clean'
    for nb in nbs: subprocess.run([str(clean) if clean.exists() else 'nbdev_clean', '--fname', str(nb)], check=True)

if __name__ == '__main__':
    main(sys.argv[1:])
