"""`make gpu-wheels`: download the wheels a GPU machine without a network needs to run the notebooks' `#| cuda` cells
(examples/gpu_check.sh cells): nbdev, fastcore and execnb at the versions of settings.ini's dev_requirements, and what
they require, for CPython 3.12 on manylinux x86_64. Then check that every requirement of every wheel is met by a wheel in
the folder or by a package the GPU image has (torch and longctx_nb's own requirements), and list them.

    python .ci/gpu_wheels.py [--dest .whl] [--python 3.12]

Carry .whl/ along with the repository: `bash examples/gpu_check.sh` unpacks the wheels there (no pip, no network).
The mamba-ssm and causal-conv1d wheels (examples/build_cuda_kernels.sh --wheels .whl) can lie in the same folder.
"""
import argparse, configparser, re, subprocess, sys, zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ('nbdev', 'fastcore', 'execnb', 'ghapi', 'fastgit')   # what nbdev.test needs, pinned as in dev_requirements
# On the GPU image already (torch's own requirements and longctx_nb's): a copy in the folder would shadow them.
IMAGE = {'torch', 'triton', 'numpy', 'tokenizers', 'tqdm', 'matplotlib', 'safetensors', 'ninja', 'setuptools',
         'typing-extensions', 'sympy', 'mpmath', 'networkx', 'jinja2', 'markupsafe', 'filelock', 'fsspec', 'pillow',
         'contourpy', 'cycler', 'fonttools', 'kiwisolver', 'pyparsing', 'python-dateutil', 'huggingface-hub'}
DROP = {'setuptools', 'typing-extensions'}   # never carried: torch needs the image's own
KERNELS = {'mamba-ssm', 'causal-conv1d'}     # wheels built for the GPU (build_cuda_kernels.sh): they may lie here too


def norm(name: str) -> str: return re.sub(r'[-_.]+', '-', name).lower()


def pins() -> list[str]:
    cfg = configparser.ConfigParser(); cfg.read(ROOT / 'settings.ini')
    reqs = cfg['DEFAULT']['dev_requirements'].split()
    got = [r for r in reqs if norm(re.split(r'[<>=!~ ;\[]', r)[0]) in TOOLS]
    missing = set(TOOLS) - {norm(re.split(r'[<>=!~ ;\[]', r)[0]) for r in got}
    if missing: sys.exit(f"gpu_wheels.py: settings.ini's dev_requirements do not pin {', '.join(sorted(missing))}")
    return got


def metadata(whl: Path) -> tuple[str, str, list[str]]:
    "(name, version, Requires-Dist lines) of a wheel."
    with zipfile.ZipFile(whl) as z:
        meta = next(n for n in z.namelist() if n.endswith('.dist-info/METADATA') and n.count('/') == 1)   # the wheel's own, not a vendored one
        lines = z.read(meta).decode().split('\n\n')[0].splitlines()
    get = lambda k: [l.split(':', 1)[1].strip() for l in lines if l.startswith(k + ':')]
    return get('Name')[0], get('Version')[0], get('Requires-Dist')


def unmet(folder: Path, python: str) -> list[str]:
    "Requirements (outside extras, for CPython `python` on Linux) that no wheel in `folder` and no IMAGE package meets."
    try: from packaging.requirements import Requirement
    except ImportError: from pip._vendor.packaging.requirements import Requirement
    env = dict(python_version=python, python_full_version=python + '.0', sys_platform='linux', platform_system='Linux',
               os_name='posix', platform_machine='x86_64', implementation_name='cpython',
               platform_python_implementation='CPython', extra='')
    have, out = {}, []
    wheels = [w for w in sorted(folder.glob('*.whl')) if norm(w.name.split('-')[0]) not in KERNELS]   # the tools' closure only
    for w in wheels:
        name, version, _ = metadata(w); have[norm(name)] = version
    for w in wheels:
        name, version, reqs = metadata(w)
        for r in map(Requirement, reqs):
            if r.marker and not r.marker.evaluate(env): continue
            n = norm(r.name)
            if n in IMAGE: continue
            if n not in have: out.append(f'{name} {version} needs {r} (no wheel)')
            elif r.specifier and not r.specifier.contains(have[n], prereleases=True):
                out.append(f'{name} {version} needs {r}, the wheel is {have[n]}')
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--dest', type=Path, default=ROOT / '.whl')
    ap.add_argument('--python', default='3.12', help="the GPU machine's Python (default 3.12)")
    a = ap.parse_args()
    a.dest.mkdir(parents=True, exist_ok=True)
    plat = [x for p in ('manylinux2014_x86_64', 'manylinux_2_17_x86_64', 'manylinux_2_28_x86_64', 'any') for x in ('--platform', p)]
    cmd = [sys.executable, '-m', 'pip', 'download', '-q', '-d', str(a.dest), '--only-binary', ':all:', '--implementation', 'cp',
           '--python-version', a.python, *plat, *pins()]
    print(' '.join(cmd[2:]), flush=True)
    subprocess.run(cmd, check=True)
    for w in a.dest.glob('*.whl'):
        if norm(metadata(w)[0]) in DROP: w.unlink(); print(f'left out {w.name}: the GPU image has its own')
    total = 0
    for w in sorted(a.dest.glob('*.whl')):
        total += w.stat().st_size; print(f'{w.stat().st_size / 2**10:>8,.0f} KiB  {w.name}')
    print(f'{total / 2**20:,.1f} MiB in {a.dest}')
    if (bad := unmet(a.dest, a.python)):
        sys.exit('gpu_wheels.py: unmet requirements:\n  ' + '\n  '.join(bad))
    print(f'every requirement is met by these wheels or by the GPU image. Carry {a.dest.name}/ along with the repository; '
          'on the GPU machine, bash examples/gpu_check.sh unpacks them.')


if __name__ == '__main__': main()
