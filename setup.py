"""Packaging for longctx_nb: everything is read from settings.ini (nbdev's single source of truth)."""
from configparser import ConfigParser
from pathlib import Path
import setuptools

cfg = ConfigParser(delimiters=['='])
cfg.read(Path(__file__).parent / 'settings.ini', encoding='utf-8')
cfg = cfg['DEFAULT']

def _split(key): return cfg.get(key, '').split()

licenses = {'apache2': 'Apache-2.0'}  # SPDX expression
statuses = ['1 - Planning', '2 - Pre-Alpha', '3 - Alpha', '4 - Beta', '5 - Production/Stable']
py_versions = ['3.10', '3.11', '3.12', '3.13']
min_python = cfg['min_python']

setuptools.setup(
    name=cfg['lib_name'],
    version=cfg['version'],
    description=cfg['description'],
    long_description=(Path(__file__).parent / 'README.md').read_text(encoding='utf-8'),
    long_description_content_type='text/markdown',
    author=cfg['author'], author_email=cfg['author_email'],
    url=cfg['git_url'], license=licenses[cfg['license']],
    keywords=cfg['keywords'],
    classifiers=[f'Development Status :: {statuses[int(cfg["status"])]}', 'Intended Audience :: Developers',
                 'Natural Language :: English']
                + [f'Programming Language :: Python :: {v}' for v in py_versions[py_versions.index(min_python):]],
    packages=setuptools.find_packages(include=[cfg['lib_path'], cfg['lib_path'] + '.*']),
    include_package_data=True,
    package_data={cfg['lib_path']: ['py.typed']},   # PEP 561: the package ships its type hints
    python_requires=f'>={min_python}',
    install_requires=_split('requirements'),
    # cuda: mamba-ssm and causal-conv1d compile against the installed torch; build them with examples/build_cuda_kernels.sh
    extras_require={'dev': _split('dev_requirements'), 'docs': _split('docs_requirements'),
                    'cuda': _split('cuda_requirements'), 'hf': _split('hf_requirements') or ['datasets', 'transformers>=4.46'],
                    'eval': _split('eval_requirements'), 'tensorboard': ['tensorboard']},
    entry_points={'console_scripts': _split('console_scripts'), 'nbdev': [f'{cfg["lib_path"]}={cfg["lib_path"]}._modidx:d']},
    zip_safe=False,
)
