"""End to end: `longctx_eval`, `python -m longctx_nb.evals` and `longctx_compare` as a user runs them, in subprocesses."""
import re, json, subprocess, sys
import pytest

TINY = ['--model.n_layers=2', '--model.d_model=64', '--model.n_heads=4', '--model.d_ff=128', '--trainer.enable_progress_bar=false',
        '--trainer.tensorboard=false', '--trainer.plot=false']

def run(cmd, *args, cwd=None, check=None):
    p = subprocess.run([*map(str, cmd), *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=600)
    if check is not None: assert p.returncode == check, f'exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}'
    return p

@pytest.fixture(scope='module')
def copy_run(bindir, tmp_path_factory):
    "A vanilla model trained on the copy task at seq_len 32 (about 5 s)."
    root = tmp_path_factory.mktemp('runs')
    run([bindir / 'longctx_train'], '--data.dataset_name=synthetic', '--data.task=copy', '--data.copy_len=8', '--data.seq_len=32',
        '--data.batch_size=32', '--trainer.max_steps=150', '--trainer.learning_rate=3e-3', '--trainer.warmup_steps=10',
        '--trainer.eval_interval=0', *TINY, f'--trainer.default_root_dir={root}', '--trainer.run_name=copy', check=0)
    return root / 'copy'

def test_trained_model_beyond_its_length(bindir, copy_run, tmp_path):
    "LightningCLI-style flags: the copy model keeps copying at 4x its training length; JSON and PNG are written."
    out = tmp_path / 'eval'
    p = run([bindir / 'longctx_eval'], '--task', 'copy_recall', '--seq_len', 32, '--max_len', 128, '--block', 'vanilla',
            '--device', 'cpu', f'--checkpoint_path={copy_run}', '--n_samples', 16, '--output_dir', out, check=0)
    r = json.loads((out / 'vanilla_copy_recall.json').read_text())
    assert r['lengths'] == [32, 64, 128] and r['train_seq_len'] == 32 and r['trained_on'] == 'copy'
    assert min(r['tasks']['copy']['accuracy']) > 0.9, r['tasks']
    assert (out / 'vanilla_copy_recall.png').stat().st_size > 5000
    assert 'copy' in p.stdout and 'WARNING' not in p.stderr
    # --pretrained_model (the LightningCLI-style spelling), a checkpoint file, and python -m
    ckpt = sorted((copy_run / 'checkpoints').glob('step_*.pt'))[-1]
    p = run([sys.executable, '-m', 'longctx_nb.evals'], '--task', 'passkey', f'--pretrained_model={ckpt}', '--lengths', 32, 64,
            '--depths', 0, 1, '--n_samples', 4, '--device', 'cpu', check=0)
    assert 'passkey (tokens)' in p.stdout and 'step 150' in p.stdout

def test_untrained_model_warns(bindir, tmp_path):
    "Without a checkpoint: an untrained tiny model, with a warning that the results are chance level."
    p = run([bindir / 'longctx_eval'], '--task', 'passkey', '--seq_len', 128, '--max_len', 256, '--block', 'mamba',
            '--depths', 0.5, '--n_samples', 2, '--device', 'cpu', '--output_dir', tmp_path, check=0)
    assert 'UNTRAINED mamba' in p.stderr and 'chance level' in p.stderr
    r = json.loads((tmp_path / 'mamba_passkey.json').read_text())
    assert (r['lengths'], r['mode'], r['trained']) == ([128, 256], 'text', False)

def test_passkey_picks_the_lengths_that_fit(bindir, tmp_path):
    "A text model trained at 64 tokens: the passkey needs more, so the shortest length that holds it is evaluated, with a note."
    run([bindir / 'longctx_train'], '--data.seq_len=64', '--trainer.max_steps=2', *TINY, f'--trainer.default_root_dir={tmp_path}',
        '--trainer.run_name=text64', check=0)
    p = run([bindir / 'longctx_eval'], '--task', 'passkey', '--checkpoint_path', tmp_path / 'text64', '--depths', 0.5,
            '--n_samples', 2, '--device', 'cpu', '--output_dir', tmp_path / 'ev', check=0)
    r = json.loads((tmp_path / 'ev' / 'vanilla_passkey.json').read_text())
    need = r['lengths'][0]
    assert r['train_seq_len'] == 64 and r['lengths'] == [need] and need > 64 and r['mode'] == 'text'
    assert (f'note: the passkey needs sequences of at least {need} tokens: length 64 is too short for it and left out; it is '
            f'evaluated at {need}, beyond the training length 64 (above the longest length asked, 64). Give --lengths to choose '
            'the lengths.') in p.stdout

def test_every_run_in_one_table(bindir, copy_run, tmp_path):
    "`longctx_eval --checkpoint_path 'runs/*'`: every run directory evaluated, one table, a JSON per run and a summary."
    runs = tmp_path / 'runs'; runs.mkdir()
    for name in ('a', 'b'): (runs / name).symlink_to(copy_run, target_is_directory=True)
    (runs / 'notes.txt').write_text('not a run')
    p = run([bindir / 'longctx_eval'], '--task', 'copy_recall', '--checkpoint_path', 'runs/*', '--lengths', '64,32,64',
            '--n_samples', 4, '--device', 'cpu', '--output_dir', 'out', cwd=tmp_path, check=0)
    assert 'note (a): --lengths 64 32 64: each evaluated once, shortest first\n' in p.stdout, p.stdout
    table = p.stdout[p.stdout.index('copy_recall: answer-token accuracy by length'):].splitlines()
    assert table[1].split() == ['model', 'block', 'params', 'step', 'train_len', '32', '64']
    assert [l.split()[:2] for l in table[2:6]] == [['a', 'associative_recall'], ['a', 'copy'], ['b', 'associative_recall'], ['b', 'copy']]
    assert "left out runs/notes.txt" in p.stdout
    summary = json.loads((tmp_path / 'out' / 'summary_copy_recall.json').read_text())
    assert list(summary) == ['runs/a', 'runs/b'] and summary['runs/a']['tasks'] == summary['runs/b']['tasks']
    assert (tmp_path / 'out' / 'a_copy_recall.png').is_file()

def test_doc_mask_model_is_scored_as_training_validates(bindir, tmp_path):
    "A run trained with data.doc_mask: eval perplexity and the drift curve mask attention at document ends, as training's validation does."
    from longctx_nb.corpus import prepare
    prepare([(f'd{i}.txt', f'Document {i}. ' + 'The quick brown fox jumps over the lazy dog. ' * (1 + i % 3)) for i in range(300)],
            tmp_path / 'docs', val_fraction=0.2)   # short documents: most windows cross a document's end
    run([bindir / 'longctx_train'], f'--data.data_dir={tmp_path / "docs"}', '--data.doc_mask=true', '--data.seq_len=32', '--data.batch_size=2', '--trainer.max_steps=4',
        '--trainer.limit_val_batches=3', *TINY, f'--trainer.default_root_dir={tmp_path}', '--trainer.run_name=dm', check=0)
    val_loss = [json.loads(l) for l in (tmp_path / 'dm' / 'metrics.jsonl').read_text().splitlines() if 'val_loss' in l][-1]['val_loss']
    same = ['--checkpoint_path', tmp_path / 'dm', '--n_samples', 6, '--batch_size', 2, '--device', 'cpu']   # training's 3 batches of 2
    p = run([bindir / 'longctx_eval'], '--task', 'perplexity', *same, '--output_dir', tmp_path / 'ev', check=0)
    assert 'note: the model was trained with data.doc_mask=true: attention stays within each document, as in training' in p.stdout
    (row,) = json.loads((tmp_path / 'ev' / 'vanilla_perplexity.json').read_text())['rows']
    assert (row['windows'], row['tokens']) == (6, 6 * 32) and row['loss'] == pytest.approx(val_loss, abs=1e-5)
    run([bindir / 'longctx_eval'], '--task', 'drift_curve', '--max_len', 32, *same, '--output_dir', tmp_path / 'ev', check=0)
    drift = json.loads((tmp_path / 'ev' / 'vanilla_drift_curve.json').read_text())   # the same 6 windows: mean loss = val loss
    assert drift['n_windows'] == 6 and drift['loss_within'] == pytest.approx(val_loss, abs=1e-4)
    from longctx_nb.evals import load_for_eval, text_data, perplexity
    ev = load_for_eval(tmp_path / 'dm'); tokens = text_data(ev)
    assert tokens.val_docs is not None and abs(perplexity(ev.model, tokens, 32, 2, n_windows=6)['loss'] - val_loss) > 1e-3  # unmasked differs

def test_n_samples_are_scored_exactly(bindir, copy_run, tmp_path):
    "--n_samples that do not fill whole batches: exactly that many sequences are scored, and the text says so."
    p = run([bindir / 'longctx_eval'], '--task', 'copy_recall', '--checkpoint_path', copy_run, '--lengths', 32, '--n_samples', 3,
            '--batch_size', 8, '--device', 'cpu', '--output_dir', tmp_path, check=0)
    r = json.loads((tmp_path / 'vanilla_copy_recall.json').read_text())
    assert r['n_samples'] == 3 and r['tasks']['copy']['scored'] == [3 * 8] and 'over 3 sequences per length' in p.stdout
    p = run([bindir / 'longctx_eval'], '--task', 'perplexity', '--seq_len', 64, '--n_samples', 5, '--batch_size', 4, '--device', 'cpu',
            '--output_dir', tmp_path, check=0)
    (row,) = json.loads((tmp_path / 'vanilla_perplexity.json').read_text())['rows']
    assert (row['windows'], row['tokens']) == (5, 5 * 64)

BAD = {  # args -> phrase the error must contain
    'block_differs': (['--task', 'passkey', '--block', 'mamba', '--checkpoint_path={run}'], '--block=mamba does not match the model'),
    'vocab_differs': (['--task', 'copy_recall', '--vocab_size', '256', '--checkpoint_path={run}'], '--vocab_size=256 does not match'),
    'max_len_below_seq_len': (['--task', 'drift_curve', '--seq_len', '256', '--max_len', '128'], '--max_len=128 is below --seq_len=256'),
    'passkey_does_not_fit': (['--task', 'passkey', '--seq_len', '64', '--lengths', '64'], 'does not fit in a sequence of 64 tokens'),
    'passkey_ids_do_not_fit': (['--task', 'passkey', '--checkpoint_path={run}', '--passkey_len', '20', '--lengths', '32'],
                               'passkey_len=20 digits does not fit'),
    'no_run_matches': (['--checkpoint_path', 'logs/*/checkpoints/*.ckpt'], "matches no model (it matches nothing); give run directories"),
    'one_of_many_missing': (['--checkpoint_path', '{run}', 'nowhere/run'], 'does not exist'),
    'unknown_task': (['--task', 'retrieval'], "unknown --task 'retrieval'; valid choices: passkey, copy_recall, induction_heads, drift_curve, perplexity"),
    'missing_checkpoint': (['--checkpoint_path', 'nowhere/run'], 'does not exist'),
    'unknown_ruler_task': (['--task', 'niah_single_1,niah'], "unknown --task 'niah'; valid choices: passkey, copy_recall, "
                           'induction_heads, drift_curve, perplexity, ruler (every RULER task), or RULER task names separated by commas: '
                           'niah_single_1, niah_single_2'),
    'ruler_does_not_fit': (['--task', 'ruler', '--lengths', '300'], "RULER task 'niah_single_1' does not fit in 300 tokens "
                           'with this tokenizer: its fixed parts (instructions, needles or shortest list, question) take '),
    'ruler_of_a_model_in_ids': (['--task', 'vt', '--checkpoint_path={run}'], "RULER's tasks are text, and the model was "
                                "trained on the synthetic task 'copy' in ids"),
    'ruler_qa_without_file': (['--task', 'qa_2', '--lengths', '600'], 'read questions from a local JSONL file (SQuAD or '
                              'HotpotQA style): give --qa_file.'),
    'synthetic_model_has_no_text': (['--task', 'perplexity', '--checkpoint_path={run}'], "trained on the synthetic task 'copy'"),
    'unknown_flag': (['--tsak', 'passkey'], 'unrecognized arguments: --tsak'),
    'flag_the_task_does_not_read': (['--task', 'copy_recall', '--checkpoint_path={run}', '--n_samples', '1', '--data_dir', 'X',
                                     '--depths', '0.3', '--n_buckets', '3'], '--task copy_recall does not read --depths, --n_buckets, '
                                    '--data_dir: --depths is read only by --task passkey; --n_buckets is read only by --task '
                                    'drift_curve; --data_dir is read only by --task passkey, drift_curve, perplexity or ruler; leave them out.'),
    'depths_for_perplexity': (['--task', 'perplexity', '--depths', '0.3'],
                              '--depths is read only by --task passkey, not by --task perplexity; leave it out.'),
    'n_buckets_for_passkey': (['--task', 'passkey', '--n_buckets', '3'],
                              '--n_buckets is read only by --task drift_curve, not by --task passkey; leave it out.'),
    'task_vocab_size_for_perplexity': (['--task', 'perplexity', '--task_vocab_size', '3'], '--task_vocab_size is read only by '
                                       '--task passkey, copy_recall or induction_heads, not by --task perplexity; leave it out.'),
    'seed_for_perplexity_of_a_checkpoint': (['--task', 'perplexity', '--checkpoint_path={run}', '--seed', '3'], '--seed is read by '
                                            '--task passkey, copy_recall, induction_heads or ruler (the generated sequences) and by an untrained model (its '
                                            'weights); --task perplexity of a checkpoint scores fixed windows of text and reads neither'),
    'data_dir_for_the_passkey_in_ids': (['--task', 'passkey', '--checkpoint_path={run}', '--data_dir', 'X'], '--data_dir is read by '
                                        'the passkey only for a model that reads BPE text (it gives the tokenizer)'),
}

@pytest.mark.parametrize('case', list(BAD))
def test_bad_input(bindir, copy_run, tmp_path, case):
    "One paragraph naming the problem, exit code 2, no traceback, nothing written."
    args, phrase = BAD[case]
    out = tmp_path / 'out'
    p = run([bindir / 'longctx_eval'], *[a.replace('{run}', str(copy_run)) for a in args], '--device', 'cpu',
            '--output_dir', out, cwd=tmp_path, check=2)
    assert phrase in p.stderr, p.stderr
    assert 'Traceback' not in p.stderr and p.stderr.startswith('longctx_eval: error:')
    assert not out.exists()

def test_copy_recall_of_a_text_model_is_refused_as_the_report_leaves_it_out(bindir, tmp_path):
    "One rule: longctx_eval refuses what longctx_report leaves out, in the same words (a text model has no task vocabulary)."
    run([bindir / 'longctx_train'], '--trainer.max_steps=2', '--data.seq_len=32', '--data.batch_size=2', '--trainer.eval_interval=0',
        '--trainer.limit_val_batches=1', *TINY, f'--trainer.default_root_dir={tmp_path}', '--trainer.run_name=text', check=0)
    why = 'a text model has no synthetic vocabulary to recall from; it is run for models trained on a synthetic task'
    p = run([bindir / 'longctx_eval'], '--task', 'copy_recall', f'--checkpoint_path={tmp_path / "text"}', '--device', 'cpu',
            '--output_dir', tmp_path / 'eval', check=2)
    ckpt = sorted((tmp_path / 'text' / 'checkpoints').glob('step_*.pt'))[-1]
    assert p.stderr.splitlines()[0] == (f"longctx_eval: error: --task copy_recall cannot score {ckpt}: {why}. Evaluate it with "
                                        "--task passkey, drift_curve, perplexity or ruler."), p.stderr
    assert not (tmp_path / 'eval').exists()
    run([bindir / 'longctx_report'], f'--checkpoint_path={tmp_path / "text"}', '--output_dir', tmp_path / 'rep', '--max_len', 64,
        '--n_samples', 2, '--device', 'cpu', check=0)
    assert f'* copy_recall: {why}.' in (tmp_path / 'rep' / 'report.md').read_text()

SMALL_MODEL = ['--model.n_layers=2', '--model.d_model=64', '--model.n_heads=4', '--model.d_ff=128', '--data.copy_len=4']

def test_compare_and_report(bindir, tmp_path):
    "longctx_compare: two blocks, the same budget, one report; then longctx_report on one of its runs."
    out = tmp_path / 'cmp'
    p = run([bindir / 'longctx_compare'], '--blocks', 'vanilla', 'mamba', '--task', 'copy', '--max_steps', 5, '--seq_len', 32,
            '--eval_lengths', 32, 64, '--n_samples', 8, '--device', 'cpu', *SMALL_MODEL, '--output_dir', out, check=0)
    md = (out / 'report.md').read_text()
    assert '| block | layers | params | tokens/s | peak MiB | val loss | acc@32 | acc@64 |' in md
    layers = {b: int(n) for b, n in re.findall(r'^\| (vanilla|mamba)(?: \(at chance\))? \| (\d+) \|', md, flags=re.M)}
    assert layers['vanilla'] == 2 and layers['mamba'] > 2, layers   # parameters matched by default: Mamba has no MLP
    settings = json.loads((out / 'report.json').read_text())['settings']
    assert settings['overrides']['model.d_model'] == '64' and settings['max_steps'] == 5
    assert all((out / f).stat().st_size > 5000 for f in ('loss.png', 'lengths.png'))
    assert 'wrote' in p.stdout
    p = run([bindir / 'longctx_report'], f'--checkpoint_path={out / "runs" / "mamba"}', '--output_dir', tmp_path / 'one',
            '--max_len', 64, '--n_samples', 4, '--device', 'cpu', check=0)
    assert '## copy_recall' in (tmp_path / 'one' / 'report.md').read_text()
    assert (tmp_path / 'one' / 'mamba_passkey.png').exists()

@pytest.mark.parametrize('args,phrase', [
    (['--blocks', 'vanilla', 'transformerxl'], "unknown block 'transformerxl'"),
    (['--task', 'retrieval'], "unknown --task 'retrieval'"),
    (['--model.windw_size=3'], "Did you mean 'model.window_size'"),
    (['--eval_lengths', '4', '--task', 'copy'], 'does not fit in seq_len=4'),
])
def test_compare_bad_input(bindir, tmp_path, args, phrase):
    out = tmp_path / 'cmp'
    p = run([bindir / 'longctx_compare'], *args, '--output_dir', out, check=2)
    assert phrase in p.stderr and 'Traceback' not in p.stderr and not out.exists(), p.stderr

def test_ruler_on_a_run_trained_on_a_ruler_task(bindir, tmp_path):
    "A run trained on RULER's niah_single_1 (bytes) is evaluated on RULER's tasks; the threshold decides the effective length."
    run([bindir / 'longctx_train'], '--data.dataset_name=synthetic', '--data.task=niah_single_1', '--data.seq_len=512',
        '--data.batch_size=2', '--trainer.max_steps=2', '--trainer.eval_interval=0', '--trainer.limit_val_batches=1', *TINY,
        f'--trainer.default_root_dir={tmp_path}', '--trainer.run_name=niah', check=0)
    p = run([bindir / 'longctx_eval'], '--task', 'niah_single_1,vt', '--checkpoint_path', tmp_path / 'niah', '--max_len', 1024,
            '--n_samples', 2, '--gen_tokens', 8, '--threshold', 0, '--device', 'cpu', '--output_dir', tmp_path / 'out', check=0)
    r = json.loads((tmp_path / 'out' / 'vanilla_ruler.json').read_text())
    assert (r['trained_on'], r['train_seq_len'], r['tasks'], r['lengths']) == ('niah_single_1', 512, ['niah_single_1', 'vt'],
                                                                                [512, 1024])
    assert r['tokenizer'] == 'ByteTokenizer(vocab_size=256)' and r['gen_tokens'] == {'niah_single_1': 8, 'vt': 8}
    assert r['effective_length'] == 1024 and (tmp_path / 'out' / 'vanilla_ruler.png').stat().st_size > 5000   # every score >= 0
    assert 'effective length (average >= 0.0 there and at every shorter length): 1024' in p.stdout

@pytest.fixture(scope='module')
def bpe_llama(tmp_path_factory):
    "A tiny random transformers Llama folder with a small BPE tokenizer.json and no run config: its corpus is unknown."
    import torch, transformers as tf
    from longctx_nb.data import BPETokenizer
    from longctx_nb.export import hf_tokenizer
    d = tmp_path_factory.mktemp('hf') / 'llama'
    bpe = BPETokenizer.train(['the pass key is hidden in the grass; remember it.\n' * 30], vocab_size=300)
    torch.manual_seed(0)
    tf.AutoModelForCausalLM.from_config(tf.LlamaConfig(vocab_size=bpe.vocab_size, hidden_size=32, intermediate_size=64,
        num_hidden_layers=1, num_attention_heads=2, max_position_embeddings=1024)).save_pretrained(d)
    hf_tokenizer(bpe).save_pretrained(d)
    return d, bpe

def test_a_bpe_folder_is_scored_in_its_own_tokens(bindir, bpe_llama, tmp_path):
    "A transformers folder's BPE writes its RULER samples; perplexity, whose corpus no config names, is refused, not fed bytes."
    d, bpe = bpe_llama
    p = run([bindir / 'longctx_eval'], '--task', 'perplexity', '--checkpoint_path', d, '--device', 'cpu', '--output_dir',
            tmp_path / 'ppl', check=2)
    assert p.stderr.splitlines()[0] == (
        f"longctx_eval: error: --task perplexity cannot score {d}: the model reads {bpe!r}, and no run config.json names its "
        "corpus (the default corpus is bytes); its run or checkpoint names it, and --harness reads the folder's tokenizer. "
        "Evaluate it with --task passkey or ruler, or give --data_dir with text in its vocabulary."), p.stderr
    assert 'Traceback' not in p.stderr and not (tmp_path / 'ppl').exists()
    run([bindir / 'longctx_eval'], '--task', 'niah_single_1', '--checkpoint_path', d, '--lengths', 512, '--n_samples', 2,
        '--gen_tokens', 4, '--device', 'cpu', '--output_dir', tmp_path / 'out', check=0)
    r = json.loads((tmp_path / 'out' / 'vanilla_ruler.json').read_text())
    assert r['tokenizer'] == repr(bpe) != 'ByteTokenizer(vocab_size=256)' and r['lengths'] == [512], r
    run([bindir / 'longctx_eval'], '--task', 'passkey', '--checkpoint_path', d, '--lengths', 256, '--depths', 0.5,
        '--n_samples', 1, '--device', 'cpu', '--output_dir', tmp_path / 'pk', check=0)
    assert json.loads((tmp_path / 'pk' / 'vanilla_passkey.json').read_text())['mode'] == 'text'   # in its BPE, not in ids

def test_report_of_a_bpe_folder(bindir, bpe_llama, tmp_path):
    "longctx_report on a BPE transformers folder: the passkey in its words, the text tasks left out saying why."
    d, bpe = bpe_llama
    run([bindir / 'longctx_report'], '--checkpoint_path', d, '--output_dir', tmp_path, '--max_len', 256, '--n_samples', 1,
        '--device', 'cpu', check=0)
    md = (tmp_path / 'report.md').read_text()
    assert 'parameters, trained at a length not recorded (evaluated from 128 tokens) on unknown data.' in md, md
    assert f"* perplexity: the model reads {bpe!r}, and no run config.json names its corpus" in md, md
    r = json.loads((tmp_path / 'vanilla_passkey.json').read_text())
    assert (r['mode'], r['lengths'], r['train_seq_len']) == ('text', [128, 256], None)

def test_a_bpe_folder_scored_on_a_folder_prepared_with_its_tokenizer(bindir, bpe_llama, tmp_path):
    "--data_dir gives a BPE folder its text: prepared with its tokenizer it is scored; prepared with bytes it is refused."
    from longctx_nb.corpus import prepare
    d, bpe = bpe_llama
    docs = [(f'doc{i}.txt', f'the pass key is {i}; remember it, it is hidden in the grass.\n' * 8) for i in range(40)]
    for name, tok in (('own', bpe), ('bytes', 'byte')): prepare(docs, tmp_path / name, tok, val_fraction=0.25)
    ppl = lambda name, rc: run([bindir / 'longctx_eval'], '--task', 'perplexity', '--checkpoint_path', d, '--data_dir',
                               tmp_path / name, '--seq_len', 32, '--n_samples', 2, '--device', 'cpu', '--output_dir',
                               tmp_path / f'out_{name}', check=rc)
    p = ppl('bytes', 2)
    assert (f"longctx_eval: error: --data_dir {str(tmp_path / 'bytes')!r} was prepared with "
                                        f"ByteTokenizer(vocab_size=256), and the model in {d} reads {bpe!r}; give a folder "
                                        "prepared with its tokenizer.") in p.stderr.splitlines(), p.stderr
    ppl('own', 0)
    (row,) = json.loads((tmp_path / 'out_own' / 'vanilla_perplexity.json').read_text())['rows']
    assert row['windows'] == 2 and row['tokens'] == 64, row
