"""The VRAM-preset interface and the GPU-native trainer's presets, as their users type them: the model built,
where each value came from, the precision that runs, and the example launch scripts."""
import contextlib, io, json, os, re, subprocess
from pathlib import Path
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
GUIDE = {"model": {"d_model": 64, "n_layers": 2, "d_state": 8, "expand_factor": 3, "d_conv": 3, "dt_rank": 5,
                   "dropout": 0.1, "max_seq_len": 32, "vocab_size": 256},
         "vram": {"batch_size": 2, "gradient_accumulation_steps": 2, "max_seq_len": 32, "use_fp16": True,
                  "use_gradient_checkpointing": True, "use_cpu_offload": False},
         "training": {"learning_rate": 0.001, "weight_decay": 0.1, "max_steps": 100000, "warmup_steps": 2000,
                      "eval_interval": 1000, "save_interval": 5000, "logging_steps": 10}}

def run(bindir, *args, cwd=None, env=None):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, cwd=cwd, timeout=600,
                          env={**os.environ, 'PATH': f"{bindir}:{os.environ['PATH']}", **(env or {})})

def parse(argv):
    "parse_cli in-process: (config, namespace, the notes on stderr)."
    from longctx_nb.cli import parse_cli
    err = io.StringIO()
    with contextlib.redirect_stderr(err): cfg, ns = parse_cli(argv)
    return cfg, ns, err.getvalue()

@pytest.fixture
def guide(tmp_path):
    p = tmp_path / 'config_16gb_safe.json'; p.write_text(json.dumps(GUIDE)); return p

def test_guide_config_builds_mamba_with_its_settings(guide):
    "No block given: a VRAM-preset JSON config builds Mamba layers with its d_state, expand_factor, d_conv and dt_rank."
    from longctx_nb.model import LM
    from longctx_nb.blocks.mamba import Mamba
    cfg, _, err = parse(['--config', str(guide)])
    assert cfg.model.block == 'mamba' and 'model.block=mamba' in err, err
    model = LM(cfg.model)
    mixers = [b.mixer for b in model.blocks]
    assert len(mixers) == 2 and all(isinstance(m, Mamba) for m in mixers)
    for m in mixers:
        assert (m.d_state, m.expand, m.d_conv, m.dt_rank, m.d_inner) == (8, 3, 3, 5, 192)
        assert m.A_log.shape == (192, 8) and m.conv1d.kernel_size == (3,) and m.dt_proj.in_features == 5
    # VRAM-preset flags too; a block given explicitly wins
    assert parse(['--model_size', 'small', '--vram', '8gb'])[0].model.block == 'mamba'
    assert parse(['--training_preset', 'fast'])[0].model.block == 'mamba'
    assert parse(['--model_size', 'small', '--model.block=vanilla'])[0].model.block == 'vanilla'
    assert parse(['--model.size=small'])[0].model.block == 'vanilla'   # our own flag: the default block

def test_d_ff_follows_d_model():
    "d_model without d_ff: d_ff keeps the size preset's ratio, and the derived value is noted."
    cfg, ns, err = parse(['--d_model', '512'])
    assert cfg.model.d_ff == 1536, cfg.model        # tiny's 384/128, not tiny's 384
    assert 'note: model.d_ff=1536 is derived from model.d_model=512' in err, err
    assert parse(['--d_model', '512', '--d_ff', '1000'])[0].model.d_ff == 1000
    cfg, _, err = parse(['--model_size', 'small', '--d_model', '256'])   # Mamba reads no d_ff: set, not noted
    assert cfg.model.d_ff == 768 and 'd_ff' not in err, err

def test_use_fp16_on_cpu_says_fp32_runs(bindir, guide, tmp_path):
    "use_fp16 on a CPU trains in fp32 and says so; --trainer.precision=16 there is refused (the same rule)."
    p = run(bindir, 'longctx_train', '--config', guide, '--trainer.max_steps=1',
            '--trainer.enable_progress_bar=false', '--trainer.limit_val_batches=1', '--trainer.accelerator=cpu',
            f'--trainer.default_root_dir={tmp_path / "runs"}')
    assert p.returncode == 0, p.stderr
    assert 'trainer.use_fp16=true asks for fp16 autocast, which the CPU does not run' in p.stderr, p.stderr
    assert 'this run computes in fp32' in p.stderr and 'precision 32' in p.stdout
    p = run(bindir, 'longctx_train', '--trainer.precision=16', '--trainer.accelerator=cpu', '--trainer.max_steps=1',
            f'--trainer.default_root_dir={tmp_path / "runs16"}')
    assert p.returncode == 2 and 'not supported on the CPU' in p.stderr, p.stderr

def test_precision_auto_is_the_default():
    from longctx_nb.config import Config, TrainerConfig
    from longctx_nb.core import pick_precision
    assert Config().trainer.precision == 'auto' and parse(['--trainer.precision=auto'])[0].trainer.precision == 'auto'
    assert pick_precision(TrainerConfig(), 'cpu')[0] == '32'
    assert [pick_precision(TrainerConfig(), 'cuda', bf16=b)[0] for b in (True, False)] == ['bf16', '16']
    if torch.cuda.is_available():
        assert pick_precision(TrainerConfig(), 'cuda')[0] == ('bf16' if torch.cuda.is_bf16_supported() else '16')

def test_print_config_says_where_each_value_came_from(bindir, guide, tmp_path):
    "One rule: defaults < config file < command line, presets first within each; --print_config shows each source."
    p = run(bindir, 'longctx_train', '--config', guide, '--training_preset', 'fast', '--batch_size', '3', '--print_config',
            cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)                       # stdout stays a config file
    assert (d['model']['block'], d['trainer']['max_steps'], d['data']['batch_size']) == ('mamba', 100, 3)
    lines = p.stderr.split('where each value came from', 1)[1].splitlines()[1:]
    src = {l.split()[0]: l.split(None, 2)[2] for l in lines if l.startswith('  ')}
    assert len(src) == len(d['model']) + len(d['data']) + len(d['trainer']) + 2, len(src)   # every value, vram and training_preset
    assert src['model.d_state'] == f'model.d_state in config {guide}'
    assert src['model.expand'] == f'model.expand_factor in config {guide}'
    assert src['trainer.max_steps'] == "the training preset 'fast'"   # the command line's preset beats the file
    assert src['trainer.learning_rate'] == f'training.learning_rate in config {guide}'
    assert src['data.batch_size'] == 'flag --batch_size'
    assert src['trainer.seed'] == 'default'
    assert src['model.block'].startswith('VRAM-preset settings')
    assert "trainer.max_steps=100 from the training preset 'fast' replaces 100000" in p.stderr
    assert list(tmp_path.iterdir()) == [guide]   # nothing written

def test_size_names_are_the_blocks_own(bindir, tmp_path):
    "For mamba, 130m is Mamba's published 130m (24 layers of width 768), also after --config 130m; --print_config counts it."
    say = lambda block, layers, n, vocab: (f"model: {block} 130m, {layers} layers of width 768, {n} parameters with " + (
        f"model.vocab_size={vocab}" if vocab else "a 50,257-token vocabulary (as the size names count; a run's vocabulary "
                                                  "is its tokenizer's)"))
    for args, block, layers, n, vocab in ((['--model.block=mamba', '--model.size=130m'], 'mamba', 24, '129,117,696', None),
                                          (['--config', '130m', '--model.block=mamba', '--model.vocab_size=50280'], 'mamba', 24,
                                           '129,135,360', '50,280'),   # the published mamba-130m's count
                                          (['--model.size=130m'], 'vanilla', 12, '130,629,120', None)):
        p = run(bindir, 'longctx_train', *args, '--print_config', cwd=tmp_path)
        assert p.returncode == 0 and json.loads(p.stdout)['model']['n_layers'] == layers, p.stderr
        summary = next(l for l in p.stderr.splitlines() if l.startswith('model: '))   # the fit line follows it
        assert summary == say(block, layers, n, vocab), summary
        assert re.search(rf"^  model\.n_layers +{layers} +the model\.size preset '130m'$", p.stderr, re.M), p.stderr   # columns: the longest key's
    assert list(tmp_path.iterdir()) == []

def test_synthetic_data_dir_names_the_flag(bindir, tmp_path):
    "A VRAM-preset config's second step (`--data_dir synthetic_data`) says exactly which flag selects the synthetic data sets."
    p = run(bindir, 'longctx_train', '--model_size', 'small', '--vram', '8gb', '--data_dir', 'synthetic_data', cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    assert "data.data_dir='synthetic_data' does not exist" in p.stderr and 'use --data.dataset_name=synthetic with --data.task=' in p.stderr
    assert list(tmp_path.iterdir()) == []

@pytest.mark.parametrize('name,batch,accum,d_model', [('small', 4, 4, 1024), ('medium', 2, 8, 1536), ('large', 1, 16, 2048)])
def test_32k_presets_and_scripts(bindir, tmp_path, name, batch, accum, d_model):
    "--config NAME_32k names the preset; examples/train_NAME_32k.sh runs longctx_train with it."
    cfg, _, _ = parse(['--config', f'{name}_32k'])
    assert (cfg.data.seq_len, cfg.data.batch_size, cfg.trainer.accumulate_grad_batches) == (32768, batch, accum)
    assert cfg.model.chunk_size == 256 and cfg.model.gradient_checkpointing and batch * accum == 16
    script = ROOT / 'examples' / f'train_{name}_32k.sh'
    assert os.access(script, os.X_OK)
    p = run(bindir, script, '--print_config', cwd=tmp_path, env={'DATA_DIR': 'my_prepared'})
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert (d['model']['size'], d['model']['d_model'], d['data']['seq_len'], d['data']['data_dir']) == (f'{name}_32k', d_model, 32768, 'my_prepared')
    assert (d['data']['batch_size'], d['trainer']['accumulate_grad_batches'], d['trainer']['precision']) == (batch, accum, 'auto')

def test_config_that_is_neither_file_nor_preset(bindir, tmp_path):
    p = run(bindir, 'longctx_train', '--config', 'small_23k', cwd=tmp_path)
    assert p.returncode == 2 and "does not exist, and 'small_23k' is not a preset" in p.stderr
    assert 'small_32k, medium_32k, large_32k' in p.stderr, p.stderr
