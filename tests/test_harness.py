"""lm-evaluation-harness end to end, offline: `lm_eval --model hf` on an exported folder against our `HarnessLM` through
lm_eval's own command line (`python -m longctx_nb.harness --model longctx`) and `longctx_eval --harness`, on local tasks.
The command lines of one test run in one interpreter (`one_interpreter`); each command also runs in a process of its
own (here or in tests/test_hf.py)."""
import json, math, os, subprocess, sys
from pathlib import Path
import pytest
from conftest import one_interpreter

pytest.importorskip('lm_eval')
TINY = ['--model.n_layers=2', '--model.d_model=64', '--data.seq_len=64',
        '--trainer.max_steps=2', '--trainer.enable_progress_bar=false', '--trainer.tensorboard=false', '--trainer.plot=false']
TASKS = 'example_mc,example_ppl,example_gen'
TOL = 1e-4   # relative, on log-likelihoods and perplexities; accuracy, greedy flags and generated text exactly

@pytest.fixture(scope='module')
def env(tmp_path_factory):
    d = tmp_path_factory.mktemp('hf_cache')   # offline, and a datasets cache of its own
    return {**os.environ, 'HF_DATASETS_OFFLINE': '1', 'HF_HUB_OFFLINE': '1', 'HF_DATASETS_CACHE': str(d / 'datasets'),
            'HF_HOME': str(d)}

def done(p, check=0):
    "`p`, asserted to have exited with `check`."
    assert p.returncode == check, f'{p.args}: exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr[-4000:]}'
    return p

def run(cmd, *args, env=None, check=None):
    p = subprocess.run([*map(str, cmd), *map(str, args)], capture_output=True, text=True, timeout=900, env=env)
    return p if check is None else done(p, check)

def run_in_one(*cmds, env, check=0):
    "The command lines run in one interpreter, each asserted to exit with `check`."
    return [done(p, check) for p in one_interpreter(*cmds, env=env)]

@pytest.fixture(scope='module')
def tasks(tmp_path_factory):
    from longctx_nb.harness import write_example_tasks
    return write_example_tasks(tmp_path_factory.mktemp('tasks'))

@pytest.fixture(scope='module')
def runs(bindir, tmp_path_factory, env):
    "Tiny byte-level text runs of two steps: vanilla, mamba and blade."
    root = tmp_path_factory.mktemp('runs')
    own = {'vanilla': ['--model.n_heads=4', '--model.d_ff=128'], 'mamba': [], 'blade': []}
    run_in_one(*[[bindir / 'longctx_train', f'--model.block={b}', *TINY, *own[b], f'--trainer.default_root_dir={root}',
                  f'--trainer.run_name={b}'] for b in own], env=env)
    return root

def lm_eval_out(folder: Path):
    "(results, {task: samples}) that lm_eval wrote under `folder` with --log_samples."
    res = json.loads(next(folder.rglob('results_*.json')).read_text())
    samples = {f.name.split('_', 1)[1].rsplit('_', 1)[0]: [json.loads(l) for l in f.read_text().splitlines()]
               for f in folder.rglob('samples_*.jsonl')}
    return res['results'], samples

def same(a, b, text=False):
    "Equal: numbers (lm_eval's samples write them as strings, unless `text`) to TOL (relative), the rest exactly."
    if isinstance(a, (list, tuple)): return len(a) == len(b) and all(same(x, y, text) for x, y in zip(a, b))
    try: x, y = (float(a), float(b)) if isinstance(a, float) or (isinstance(a, str) and not text) else (a, b)
    except ValueError: x, y = a, b   # a name or a flag ('acc,none', 'False')
    return math.isclose(x, y, rel_tol=TOL, abs_tol=TOL) if isinstance(x, float) else x == y

def metrics(r: dict) -> dict: return {k: v for k, v in r.items() if ',none' in k and 'stderr' not in k}

@pytest.mark.parametrize('block', ['vanilla', 'mamba'])
def test_equals_lm_eval_hf(bindir, runs, tasks, env, tmp_path, block):
    "Our class through lm_eval's command line and through longctx_eval equals `lm_eval --model hf` on the export."
    common, out = ['--tasks', TASKS, '--include_path', tasks, '--device', 'cpu', '--log_samples'], tmp_path / 'cli'
    _, _, p, _ = run_in_one(
        [bindir / 'longctx_export', runs / block, tmp_path / 'hf'],
        [bindir / 'lm_eval', '--model', 'hf', '--model_args', f'pretrained={tmp_path / "hf"}', *common, '--batch_size', 1,
         '--output_path', tmp_path / 'ref'],
        [sys.executable, '-m', 'longctx_nb.harness', '--model', 'longctx', '--model_args', f'path={runs / block}', *common,
         '--batch_size', 4, '--output_path', tmp_path / 'ours'],
        [bindir / 'longctx_eval', '--harness', TASKS, '--include_path', tasks, f'--checkpoint_path={runs / block}',
         '--device', 'cpu', '--batch_size', 3, '--output_dir', out], env=env)
    (ref, ref_s), (ours, ours_s) = lm_eval_out(tmp_path / 'ref'), lm_eval_out(tmp_path / 'ours')
    assert 'example_mc' in p.stdout and set(ref) == set(ours) == set(TASKS.split(','))
    for t in ref:
        assert metrics(ref[t]) and same(sorted(metrics(ours[t]).items()), sorted(metrics(ref[t]).items())), (t, ours[t], ref[t])
        a, b = sorted(ours_s[t], key=lambda s: s['doc_id']), sorted(ref_s[t], key=lambda s: s['doc_id'])
        assert [s['doc_id'] for s in a] == [s['doc_id'] for s in b] and len(a) > 2
        for x, y in zip(a, b): assert same(x['resps'], y['resps'], t == 'example_gen'), (t, x['resps'], y['resps'])
    assert any(s['resps'][0][0] for s in ref_s['example_gen']), 'the generated text is empty: nothing compared'
    r = json.loads((out / f'{block}_harness.json').read_text())
    for t in ref: assert same(sorted(metrics(r['results'][t]).items()), sorted(metrics(ref[t]).items())), t

def test_blade_without_a_transformers_class(bindir, runs, tasks, env, tmp_path):
    "A blade run (no transformers class): every task runs, and the numbers do not depend on the batch size."
    res = {}
    for bs in (1, 4):
        p = run([bindir / 'longctx_eval'], '--harness', 'example_*', '--include_path', tasks, '--checkpoint_path',
                runs / 'blade', '--device', 'cpu', '--batch_size', bs, '--output_dir', tmp_path / str(bs), env=env, check=0)
        res[bs] = json.loads((tmp_path / str(bs) / 'blade_harness.json').read_text())['results']
    assert 'bits_per_byte' in p.stdout and set(res[1]) == set(TASKS.split(','))
    for t in res[1]: assert same(sorted(metrics(res[4][t]).items()), sorted(metrics(res[1][t]).items())), t
    assert 3 < res[1]['example_ppl']['bits_per_byte,none'] < 10   # a barely trained byte model: a few bits per byte

def test_bad_input_refused_before_the_model(bindir, runs, tasks, env):
    "Exit 2 and one paragraph, before any weights are read (the first case in a process of its own)."
    cases = [(['--harness', 'example_mcc', '--include_path', tasks],
              "--harness: lm-evaluation-harness has no task 'example_mcc'; close matches: example_mc"),
             (['--harness', 'arc_easy'], "--harness arc_easy: task 'arc_easy' reads the Hugging Face Hub dataset "
              "'allenai/ai2_arc', which is not in the local cache, and this machine has no network."),
             (['--harness', 'example_mc', '--include_path', tasks, '--lengths', 64],
              '--harness does not read --lengths'),
             (['--include_path', tasks], '--include_path is read only with --harness TASKS'),
             (['--harness', 'example_mc', '--include_path', tasks / 'nope'], 'is not a folder'),
             (['--tokenizer', 'byte'], '--tokenizer is read only with --harness TASKS'),
             (['--apply_chat_template'], '--apply_chat_template is read only with --harness TASKS'),
             (['--harness', 'example_mc', '--include_path', tasks, '--tokenizer', tasks / 'nope.json'],
              f"--tokenizer '{tasks / 'nope.json'}' does not exist; give byte, a tokenizer.json or a prepared folder")]
    cmds = [[bindir / 'longctx_eval', *args, '--checkpoint_path', runs / 'vanilla'] for args, _ in cases]
    for (args, msg), p in zip(cases, [run(cmds[0], env=env, check=2), *run_in_one(*cmds[1:], env=env, check=2)]):
        assert msg in p.stderr and 'Traceback' not in p.stderr and 'weights' not in p.stdout + p.stderr, (args, p.stderr)

def test_tokenizer_for_an_export_without_one(bindir, runs, tasks, env, tmp_path):
    "Our export of a byte run carries no tokenizer: refused without --tokenizer; with --tokenizer byte, the run's numbers."
    run([bindir / 'longctx_export'], runs / 'vanilla', tmp_path / 'ours', '--format', 'safetensors', env=env, check=0)
    common = ['--harness', 'example_mc', '--include_path', tasks, '--device', 'cpu', '--n_samples', 2]
    srcs = {'run': (runs / 'vanilla', []), 'export': (tmp_path / 'ours', ['--tokenizer', 'byte'])}
    ev = [bindir / 'longctx_eval', *common, '--checkpoint_path']
    p, *ran = one_interpreter([*ev, tmp_path / 'ours'],
                              *[[*ev, src, *tok, '--output_dir', tmp_path / name] for name, (src, tok) in srcs.items()], env=env)
    assert done(p, 2) and 'has no known tokenizer' in p.stderr and 'Traceback' not in p.stderr, p.stderr
    for q in ran: done(q)
    res = {}
    for name in srcs:
        res[name] = json.loads((tmp_path / name / 'vanilla_harness.json').read_text())['results']['example_mc']
    assert metrics(res['run']) and same(sorted(metrics(res['export']).items()), sorted(metrics(res['run']).items()))

CHAT = ("{% for m in messages %}{{ '<|' + m['role'] + '|>\\n' + m['content'] + '<|end|>\\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}")   # Phi-3's shape

@pytest.fixture(scope='module')
def chat_folders(tmp_path_factory):
    "A tiny random vanilla model exported for transformers with a BPE tokenizer whose chat template's turn markers are "
    "special tokens (read as their ids, as in a transformers folder), and again with the byte tokenizer, which has no template."
    import torch
    from longctx_nb.config import ModelConfig
    from longctx_nb.export import save_pretrained
    from longctx_nb.model import LM
    from longctx_nb.tokenizer import BPETokenizer, ByteTokenizer
    t = BPETokenizer.train(['The sky is blue. Grass is green. Snow is white. The sun is yellow. ' * 20], vocab_size=300).tok
    t.add_special_tokens(['<|user|>', '<|assistant|>', '<|end|>'])
    torch.manual_seed(0)
    model, d = LM(ModelConfig(vocab_size=320, d_model=64, n_layers=2, n_heads=4, d_ff=128)), tmp_path_factory.mktemp('chat')
    save_pretrained(model, d / 'chat', BPETokenizer(t, chat_template=CHAT, split_special_tokens=False), say=None)
    save_pretrained(model, d / 'byte', ByteTokenizer(), say=None)
    return d / 'chat', d / 'byte'

def hf_parity(bindir, folder, tasks, env, out, *flags, model_args='', then=()):
    "Our class through lm_eval's command line on the transformers `folder` sends the requests of `lm_eval --model hf` and "
    "gets its responses and metrics; lm_eval's (results, samples) of `hf`. The command lines `then` run after them, in "
    "the same interpreter."
    common = ['--tasks', TASKS, '--include_path', tasks, '--device', 'cpu', '--log_samples', *flags]
    run_in_one([bindir / 'lm_eval', '--model', 'hf', '--model_args', f'pretrained={folder}{model_args}', *common,
                '--batch_size', 1, '--output_path', out / 'ref'],
               [sys.executable, '-m', 'longctx_nb.harness', '--model', 'longctx', '--model_args', f'path={folder}{model_args}',
                *common, '--batch_size', 4, '--output_path', out / 'ours'], *then, env=env)
    (ref, ref_s), (ours, ours_s) = lm_eval_out(out / 'ref'), lm_eval_out(out / 'ours')
    assert set(ref) == set(ours) == set(TASKS.split(','))
    for t in ref:
        assert metrics(ref[t]) and same(sorted(metrics(ours[t]).items()), sorted(metrics(ref[t]).items())), (t, ours[t], ref[t])
        a, b = sorted(ours_s[t], key=lambda s: s['doc_id']), sorted(ref_s[t], key=lambda s: s['doc_id'])
        assert [s['doc_id'] for s in a] == [s['doc_id'] for s in b] and len(a) > 2
        for x, y in zip(a, b):
            assert x['arguments'] == y['arguments'], (t, x['arguments'], y['arguments'])
            assert same(x['resps'], y['resps'], t == 'example_gen'), (t, x['resps'], y['resps'])
    return ref, ref_s

def test_chat_template_equals_lm_eval_hf(bindir, chat_folders, tasks, env, tmp_path):
    "--apply_chat_template: our class through lm_eval's command line and through longctx_eval sends the requests of "
    "`lm_eval --model hf` (the prompts in the template, its markers as special ids) and gets its numbers."
    chat = chat_folders[0]
    ref, ref_s = hf_parity(bindir, chat, tasks, env, tmp_path, '--apply_chat_template', then=[[
        bindir / 'longctx_eval', '--harness', TASKS, '--include_path', tasks, f'--checkpoint_path={chat}', '--device', 'cpu',
        '--apply_chat_template', '--output_dir', tmp_path / 'cli']])
    assert ref_s['example_mc'][0]['arguments']['gen_args_0']['arg_0'].startswith('<|user|>\n')   # the template was applied
    r = json.loads((tmp_path / 'cli' / 'vanilla_harness.json').read_text())
    assert r['model']['apply_chat_template'] is True
    for t in ref: assert same(sorted(metrics(r['results'][t]).items()), sorted(metrics(ref[t]).items())), t

@pytest.fixture(scope='module')
def bos_folder(tmp_path_factory):
    "A tiny random vanilla model exported for transformers with a BPE tokenizer that puts a bos first, as Llama's does, "
    "and a chat template that writes the bos itself."
    import torch
    from tokenizers import processors
    from longctx_nb.config import ModelConfig
    from longctx_nb.export import save_pretrained
    from longctx_nb.model import LM
    from longctx_nb.tokenizer import BPETokenizer
    t = BPETokenizer.train(['The sky is blue. Grass is green. Snow is white. The sun is yellow. ' * 20], vocab_size=300).tok
    t.add_special_tokens(['<s>'])
    t.post_processor = processors.TemplateProcessing(single='<s> $A', special_tokens=[('<s>', t.token_to_id('<s>'))])
    torch.manual_seed(0)
    model, d = LM(ModelConfig(vocab_size=320, d_model=64, n_layers=2, n_heads=4, d_ff=128)), tmp_path_factory.mktemp('bos')
    tok = BPETokenizer(t, bos='<s>', chat_template='{{ bos_token }}' + CHAT, split_special_tokens=False)
    assert tok.start_ids == [tok.bos_id]
    save_pretrained(model, d, tok, say=None)
    return d

@pytest.mark.parametrize('flags,model_args', [((), ''), (('--apply_chat_template',), ',add_bos_token=True,prefix_token_id=0')])
def test_bos_first_equals_lm_eval_hf(bindir, bos_folder, tasks, env, tmp_path, flags, model_args):
    "A tokenizer that puts a bos first: our class encodes as `lm_eval --model hf` (a bos before each context, none added "
    "where the text starts with it, the bos as an empty context's; lm_eval's add_bos_token and prefix_token_id honoured)."
    ref, ref_s = hf_parity(bindir, bos_folder, tasks, env, tmp_path, *flags, model_args=model_args)
    prompt = ref_s['example_gen'][0]['arguments']['gen_args_0']['arg_0']
    assert prompt.startswith('<s>') == bool(flags) and (flags or any(s['resps'][0][0] for s in ref_s['example_gen']))

def test_chat_template_refused_where_there_is_none(bindir, chat_folders, tasks, env):
    "A byte tokenizer has no chat template, and ours hold no named ones: exit 2 and one paragraph, from both command lines "
    "(the last in a process of its own)."
    chat, byte = chat_folders
    none = "--apply_chat_template: the model's tokenizer (ByteTokenizer(vocab_size=256)) has no chat template"
    cli = lambda path: [sys.executable, '-m', 'longctx_nb.harness', '--model', 'longctx', '--model_args', f'path={path}',
                        '--tasks', 'example_mc', '--include_path', tasks, '--device', 'cpu', '--apply_chat_template']
    cases = [([bindir / 'longctx_eval', '--harness', 'example_mc', '--include_path', tasks, '--checkpoint_path', byte,
               '--device', 'cpu', '--apply_chat_template'], none),
             (cli(byte), none),
             ([*cli(chat), 'chatml'], '--apply_chat_template chatml: the tokenizer holds one chat template, not named ones')]
    procs = [*run_in_one(*[c for c, _ in cases[:-1]], env=env, check=2), run(cases[-1][0], env=env, check=2)]
    for (cmd, msg), p in zip(cases, procs):
        assert msg in p.stderr and 'Traceback' not in p.stderr, (cmd, p.stderr[-3000:])
