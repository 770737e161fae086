"""`longctx_compare` compares sparse blocks in their sparse regime, at fair budgets, with its noise; BigBird's random keys act at short lengths."""
import contextlib, io, json, math, subprocess
import torch
from longctx_nb.blocks.base import check_causal
from longctx_nb.blocks.bigbird import BigBirdAttention, random_block_size
from longctx_nb.config import ModelConfig
from longctx_nb.flags import main
from longctx_nb.model import LM
from longctx_nb.compare import COMPARE_FLAGS, _compare, compare_blocks, compare_parser
from longctx_nb.report import at_chance, chance_note, report_table
from longctx_nb.evals import ruler_grid
from longctx_nb.scores import load_for_eval, task_accuracy
from longctx_nb.tokenizer import ByteTokenizer

SMALL = {'model.n_layers': 2, 'model.d_model': 64, 'model.n_heads': 4, 'model.d_ff': 128, 'data.copy_len': 4}
TINY_PK = {'model.n_layers': 1, 'model.d_model': 32, 'model.n_heads': 2, 'model.d_ff': 64}

def run(cmd, *args):
    return subprocess.run([*map(str, cmd), *map(str, args)], capture_output=True, text=True, timeout=600)

def compare_err(argv):
    "Exit status and stderr of `longctx_compare argv`, in process."
    err = io.StringIO()
    with contextlib.redirect_stderr(err): rc = main(_compare, 'longctx_compare', argv, names=COMPARE_FLAGS)
    return rc, err.getvalue()

def test_defaults_are_sparse():
    "The defaults train every block at 256 tokens with window and chunk 64, parameters matched, one run per block."
    ns, extra = compare_parser().parse_known_args([])
    assert (ns.seq_len, ns.match_params, ns.lr_sweep, ns.seeds, ns.allow_dense) == (256, True, None, 1, False) and not extra
    assert ns.max_steps is None and ns.task == 'passkey'   # 600 steps on passkey (a curriculum), 300 on the other tasks
    assert 'default: 600 on passkey, 300 on the other tasks' in ' '.join(compare_parser().format_help().split())
    assert compare_parser().parse_known_args(['--no_match_params'])[0].match_params is False

def test_dense_settings_refused(bindir, tmp_path):
    "The former default (64 tokens, window 128) is refused before anything is written: exit 2, one paragraph naming the settings."
    out = tmp_path / 'cmp'
    p = run([bindir / 'longctx_compare'], '--seq_len', 64, '--model.window_size=128', '--output_dir', out)
    assert p.returncode == 2 and 'Traceback' not in p.stderr and not out.exists(), p.stderr
    msg = p.stderr
    assert msg.startswith('longctx_compare: error: at --seq_len 64 these blocks are not sparse:'), msg
    for s in ('baseline_longformer: --model.window_size=128 with 2 global tokens covers all 64 tokens: full attention',
              'blade: --model.chunk_size=64 is one chunk of 64 tokens', 'dpassm: --model.window_size=128 covers all 64 tokens',
              'Set --model.window_size and --model.chunk_size well below --seq_len', '--allow_dense'):
        assert s in msg, msg
    assert 'vanilla:' not in msg and 'mamba:' not in msg
    rc, err = compare_err(['--blocks', 'bigbird', '--model.n_random_tokens=0', '--output_dir', str(tmp_path / 'b')])
    assert rc == 2 and 'baseline_bigbird: --model.n_random_tokens=0: no random key at 256 tokens, the block is baseline_longformer' in err

def test_dense_rows_are_equal_and_marked(tmp_path):
    "Why dense settings are refused: a dense Longformer trains to vanilla's numbers exactly; with allow_dense its row says so."
    rows = compare_blocks(['vanilla', 'longformer'], 'copy', max_steps=3, seq_len=32, eval_lengths=[32], output_dir=tmp_path / 'c',
                          n_samples=8, device='cpu', overrides=SMALL, verbose=False, match_params=False, allow_dense=True)
    assert rows[0]['val_loss'] == rows[1]['val_loss'] and rows[0]['acc'] == rows[1]['acc']
    assert rows[1]['dense'] and not rows[0]['dense']
    md = (tmp_path / 'c' / 'report.md').read_text()
    assert '| baseline_longformer (dense) (at chance) |' in md and '**Dense rows**' in md   # 3 steps: at chance too

def test_lr_sweep_flags(tmp_path):
    "--lr_sweep and --trainer.learning_rate both set the rate: refused; a bad rate is named."
    rc, err = compare_err(['--lr_sweep', '1e-3', '--trainer.learning_rate=1e-3', '--output_dir', str(tmp_path / 'a')])
    assert rc == 2 and '--lr_sweep and --trainer.learning_rate both set the learning rate' in err
    rc, err = compare_err(['--lr_sweep', '-1', '--output_dir', str(tmp_path / 'b')])
    assert rc == 2 and 'must be positive and finite (-1.0 is not)' in err
    rc, err = compare_err(['--seeds', '0', '--output_dir', str(tmp_path / 'c')])
    assert rc == 2 and '--seeds 0: must be a positive integer' in err
    assert not any(tmp_path.iterdir())

def test_sweep_and_seeds_report(tmp_path):
    "Each block at its best rate of the sweep, mean ± sd over seeds, the sweep table and the noise statement in the report."
    rows = compare_blocks(['vanilla', 'mamba'], 'copy', max_steps=4, seq_len=32, eval_lengths=[32], output_dir=tmp_path / 'c',
                          n_samples=8, device='cpu', overrides=SMALL, verbose=False, lr_sweep=[1e-3, 1e-2], seeds=2)
    rep = json.loads((tmp_path / 'c' / 'report.json').read_text())
    assert rep['settings']['lr_sweep'] == [1e-3, 1e-2] and rep['settings']['match_params'] is True
    for r in rows:
        best = min(r['sweep'], key=r['sweep'].get)
        assert r['lr'] == best and len(r['per_seed']) == 2 and r['val_loss_sd'] is not None
    md = (tmp_path / 'c' / 'report.md').read_text()
    for s in ('## Learning-rate sweep', 'Mean ± standard deviation over 2 seeds', 'parameters matched', '*Figure 2.', 'MFLOP/token'):
        assert s in md, s
    assert ('Within noise of each other: vanilla and mamba.' in md) != ('No two blocks are within noise' in md)

def test_bigbird_random_keys_at_two_blocks(capsys):
    "At 128 tokens (two attention blocks of 64, window 64) BigBird's random keys change the output, and it stays causal."
    torch.manual_seed(0)
    assert random_block_size(128, 64, 64, 2) == 32
    bb = BigBirdAttention(32, 4, window_size=64, n_random_tokens=4, n_global_tokens=2, block_size=64)
    bb0 = BigBirdAttention(32, 4, window_size=64, n_random_tokens=0, n_global_tokens=2, block_size=64)
    bb0.load_state_dict(bb.state_dict())
    x = torch.randn(2, 128, 32)
    with torch.no_grad(): assert (bb(x) - bb0(x)).abs().max() > 1e-3
    assert 'random keys are drawn per query block of 32 tokens' in capsys.readouterr().out
    check_causal(bb, x)
    # in a model: the printed adaptation, once, whatever the number of layers
    m = LM(ModelConfig(block='bigbird', d_model=32, n_layers=3, n_heads=4, d_ff=64, vocab_size=16, window_size=24, attn_block_size=64))
    m(torch.zeros(1, 64, dtype=torch.long))
    out = capsys.readouterr().out
    assert out.count('baseline_bigbird: at seq_len 64') == 1 and 'query block of 32 tokens' in out, out

def test_sigterm_stops_with_a_message(bindir, tmp_path, held):
    "SIGTERM while a block trains: exit 143 and one line naming the checkpoint and the command that continues the comparison; no traceback."
    import signal
    out = tmp_path / 'cmp'
    p = held([bindir / 'longctx_compare', '--blocks', 'vanilla', '--task', 'copy', '--seq_len', '32', '--max_steps', '100000',
              '--trainer.checkpoint_interval=5', '--output_dir', out], 'vanilla step 6',   # held once a checkpoint is written
             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert any((out / 'runs' / 'vanilla' / 'checkpoints').iterdir())
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 143 and 'Traceback' not in err, err
    assert err.startswith('longctx_compare: stopped by SIGTERM after step '), err
    assert f'The finished runs are kept in {out}; continue the comparison with: longctx_compare ' in err and err.strip().endswith(' --resume'), err
    assert 'Continue with' not in err, err

def pk_compare(tmp_path, capsys, **over):
    "A one-block passkey comparison of 4 steps at 32 tokens: (report.json, report.md, what it printed to stderr)."
    compare_blocks(['vanilla'], 'passkey', max_steps=4, seq_len=32, eval_lengths=[32], output_dir=tmp_path / 'c', n_samples=8,
                   device='cpu', overrides={**TINY_PK, **over}, verbose=False, match_params=False)
    return json.loads((tmp_path / 'c' / 'report.json').read_text()), (tmp_path / 'c' / 'report.md').read_text(), capsys.readouterr().err

def test_passkey_default_curriculum(tmp_path, capsys):
    "On passkey the default is a length curriculum: half the steps at a quarter of seq_len (at least a key's 11 tokens), printed, in the budget."
    rep, md, err = pk_compare(tmp_path, capsys)
    assert err.splitlines()[0] == ('note: passkey trains with a length curriculum by default, --trainer.curriculum=11:2,32:2: 2 steps at '
                                   '11 tokens (inside one window and chunk: the copy is learned first), then 2 at 32. --trainer.curriculum=none '
                                   'trains at --seq_len throughout; --trainer.curriculum=SEQ_LEN:STEPS,... sets other stages.'), err
    s = rep['settings']
    assert (s['curriculum'], s['curriculum_default'], s['max_steps'], s['seq_len'], s['overrides']) == ('11:2,32:2', True, 4, 32, TINY_PK)
    assert ('**Budget, the same for every block:** 4 steps of 16 sequences in a length curriculum (the default on passkey): 2 at 11 tokens, '
            'then 2 at 32 tokens (1,376 tokens), in the same order') in md, md
    run_cfg = json.loads((tmp_path / 'c' / 'runs' / 'vanilla' / 'config.json').read_text())
    assert run_cfg['trainer']['curriculum'] == '11:2,32:2' and run_cfg['data']['seq_len'] == 32   # the trainer ran the stages

def test_curriculum_off_and_given(tmp_path, capsys):
    "--trainer.curriculum=none trains at seq_len from the first step; a curriculum the user gives wins, and what it changes is printed."
    rep, md, err = pk_compare(tmp_path / 'off', capsys, **{'trainer.curriculum': 'none'})
    assert 'length curriculum' not in err and rep['settings']['curriculum'] is None, err
    assert '4 steps of 16 x 32 tokens (2,048 tokens)' in md
    rep, md, err = pk_compare(tmp_path / 'mine', capsys, **{'trainer.curriculum': '16:1,32:2'})
    assert err.splitlines()[0] == 'note: --trainer.curriculum=16:1,32:2 sets the steps to 3 (its sum) in place of --max_steps 4.', err
    s = rep['settings']
    assert (s['curriculum'], s['curriculum_default'], s['max_steps'], s['seq_len']) == ('16:1,32:2', False, 3, 32)
    assert '3 steps of 16 sequences in a length curriculum (--trainer.curriculum=16:1,32:2): 1 at 16 tokens, then 2 at 32 tokens (1,280 tokens)' in md

def test_rows_at_chance(tmp_path, capsys):
    "A block within two binomial standard errors of chance is flagged in the table, the JSON and a note naming what to raise; a learned one is not."
    rep, md, _ = pk_compare(tmp_path, capsys)      # 4 steps: nothing learned
    (row,) = rep['rows']
    assert row['at_chance'] is True and row['scored'] == {'32': 40}        # exactly --n_samples 8 sequences x 5 digits
    assert '| vanilla (at chance) | 1 |' in md
    assert ('At chance at 32 tokens: vanilla (accuracy at most 19.5%, chance 10.0% plus two binomial standard errors over 40 scored '
            'answers); at this budget they did not learn the task, and their rows compare nothing about it: give them more steps '
            '(--max_steps; the default curriculum gives half of them to the short stage) or a wider model (--size, --model.d_model).') in md
    st = dict(task='passkey', seq_len=32, eval_lengths=[32, 64])
    learned = dict(block='blade', acc={32: 0.25, 64: 0.1}, chance=0.1, scored={32: 320, 64: 320}, seeds=[0], n_layers=2, params=1,
                   tokens_per_sec=1.0, peak_mib=1.0, val_loss=2.0)
    guessing = dict(learned, block='mamba', acc={32: 0.12, 64: 0.1})
    assert [at_chance(r, st) for r in (learned, guessing)] == [False, True]
    assert '| blade | 2 |' in report_table([learned], st) and chance_note([learned], st) == []
    assert chance_note([learned, guessing], st)[0].startswith('At chance at 32 tokens: mamba (accuracy at most 13.4%,')

def test_text_rows_at_chance(tmp_path):
    "On text the baseline is the unigram loss (each token by its frequency): 3 steps stay above it, and the row says so."
    rows = compare_blocks(['vanilla'], 'text', max_steps=3, seq_len=32, eval_lengths=[32], output_dir=tmp_path / 'c', n_samples=8,
                          device='cpu', overrides=TINY_PK, verbose=False, match_params=False)
    (r,) = rows
    assert 2.0 < r['chance_loss'] < math.log(256) and r['val_loss'] > r['chance_loss'] and r['at_chance'] is True
    md = (tmp_path / 'c' / 'report.md').read_text()
    assert '| vanilla (at chance) |' in md and f"At chance: vanilla (validation loss not 1% below the unigram loss {r['chance_loss']:.3f}" in md

def test_ruler_task_scores_as_ruler(tmp_path):
    "On a RULER task the table is RULER's score (`ruler_grid`, as longctx_eval --task ruler gives it), not answer-token accuracy."
    (r,) = compare_blocks(['vanilla'], 'niah_single_1', max_steps=2, seq_len=512, eval_lengths=[512], output_dir=tmp_path / 'c',
                          n_samples=2, batch_size=2, device='cpu', overrides=TINY_PK, verbose=False, match_params=False)
    model = load_for_eval(r['run_dir'], torch.device('cpu')).model
    g = ruler_grid(model, ByteTokenizer(), ['niah_single_1'], [512], n_samples=2, batch_size=2, seed=0)
    tf = task_accuracy(model, 'niah_single_1', [512], 2, 2)['accuracy'][0]   # teacher-forced: the answer's space and full stop
    assert (r['acc'], r['scored'], r['chance']) == ({512: g['scores']['niah_single_1'][0] / 100}, {512: 2}, None) and tf > 0
    md = (tmp_path / 'c' / 'report.md').read_text()
    assert '| val loss | ruler@512 |' in md and ("ruler@L: RULER's score at length L (greedy generation, RULER's string match, "
                                                 "as `longctx_eval --task ruler` scores it) of 2 fresh samples") in md
