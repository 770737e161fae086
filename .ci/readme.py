"""Write README.md from nbs/index.ipynb without Quarto: hidden cells dropped, directives stripped,
code cells as Python blocks followed by their text output."""
import json, re, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

def cell_text(cell):
    src = cell['source']
    return ''.join(src) if isinstance(src, list) else src

def outputs(cell):
    out = []
    for o in cell.get('outputs', []):
        if o.get('output_type') == 'stream' and o.get('name') == 'stdout': out.append(''.join(o['text']))
        elif o.get('output_type') in ('execute_result', 'display_data') and 'text/plain' in o.get('data', {}):
            if 'image/png' in o['data']: continue
            out.append(''.join(o['data']['text/plain']))
    return ''.join(out).rstrip('\n')

def render(nb: dict) -> str:
    parts = []
    for cell in nb['cells']:
        text = cell_text(cell)
        directives = re.findall(r'^#\|\s*(\S+)', text, flags=re.M)
        if cell['cell_type'] == 'code':
            if 'hide' in directives or 'default_exp' in directives: continue
            code = '\n'.join(l for l in text.splitlines() if not l.startswith('#|')).strip('\n')
            if 'hide_input' not in directives and code: parts.append(f'```python\n{code}\n```')
            out = outputs(cell)
            if out: parts.append(f'```\n{out}\n```')
        elif cell['cell_type'] == 'markdown':
            parts.append(text.strip('\n'))
    return '\n\n'.join(parts) + '\n'

if __name__ == '__main__':
    nb = json.loads((ROOT / 'nbs' / 'index.ipynb').read_text())
    readme = '<!-- generated from nbs/index.ipynb by .ci/readme.py: edit the notebook, then run `make readme` -->\n\n' + render(nb)
    dst = ROOT / 'README.md'
    if not dst.exists() or dst.read_text() != readme: dst.write_text(readme)
    sys.exit(0)
