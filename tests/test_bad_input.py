"""Bad input against every console script: exit code 2, one paragraph naming the problem, no traceback, nothing
written, and quick. The table runs in-process through each script's `*_main` (SystemExit caught, stderr captured);
a few cases run the installed console scripts themselves."""
import contextlib, io, json, os, resource, subprocess, time
from pathlib import Path
import numpy as np
import pytest
import torch

def _mains():
    from longctx_nb import cli, compare, evals, report, bench, export
    return {'longctx_train': cli.train_main, 'longctx_prepare': cli.prepare_main, 'longctx_eval': evals.eval_main,
            'longctx_compare': compare.compare_main, 'longctx_report': report.report_main, 'longctx_bench': bench.bench_main,
            'longctx_export': export.export_main}

@pytest.fixture(scope='module')
def data(tmp_path_factory):
    "Bad (and a few good) data files, and a tiny trained run, in a folder of their own."
    d = tmp_path_factory.mktemp('data')
    ids = (np.arange(4000) % 50).astype(np.uint16)
    np.save(d / 'ids.npy', ids)
    np.save(d / 'obj.npy', np.array([1, 'a', None], dtype=object), allow_pickle=True)
    np.save(d / 'two.npy', ids.reshape(40, 100))
    np.save(d / 'huge.npy', np.array([1, 2, 2**31, 3] * 100, np.int64))
    np.save(d / 'float.npy', np.ones(100, np.float32))
    np.save(d / 'empty.npy', np.zeros(0, np.uint16))
    (d / 'garbage.npy').write_bytes(b'this is not numpy at all' * 10)
    (d / 'u32').mkdir(); ids.astype(np.uint32).tofile(d / 'u32' / 'train.bin')
    for name, tok in (('m1', 'byte'), ('m2', 'bpe')):
        (d / name).mkdir(); ids.tofile(d / name / 'tokens.bin')
        (d / name / 'meta.json').write_text(json.dumps({'dtype': 'uint16', 'vocab_size': 300, 'tokenizer': tok}))
    (d / 'afile').write_text('not a folder\n')
    (d / 'emptydir').mkdir()
    (d / 'latin1.json').write_bytes('{"trainer": {"run_name": "caf\xe9"}}'.encode('latin-1'))
    configs = {'bad_json': '{"trainer": {"max_steps": 5', 'list': '[1, 2, 3]', 'ten': '{"trainer": {"max_steps": "ten"}}',
               'nan': '{"trainer": {"learning_rate": NaN}}', 'optimizer': '{"model": {"optimizer": "adam"}}',
               'section': '{"model": 5}', 'unknown': '{"trainer": {"max_step": 3}}', 'dict_value': '{"trainer": {"max_steps": {"a": 1}}}',
               'inf_int': '{"model": {"d_model": Infinity}}', 'string_for_int': '{"data": {"seq_len": "64"}}',
               'int_for_text': '{"trainer": {"run_name": 5}}', 'float_for_int': '{"trainer": {"max_steps": 3.0}}',
               'text_for_bool': '{"model": {"compile": "yes"}}', 'bool_for_number': '{"trainer": {"learning_rate": true}}',
               'twice': '{"trainer": {"max_steps": 3, "max_steps": 5}}'}
    for k, v in configs.items(): (d / f'{k}.json').write_text(v)
    from longctx_nb.config import Config, apply_overrides
    from longctx_nb.train import train
    cfg = apply_overrides(Config(), {'data.dataset_name': 'synthetic', 'data.task': 'copy', 'data.copy_len': 4, 'data.seq_len': 16,
                                     'data.batch_size': 4, 'model.n_layers': 1, 'model.d_model': 32, 'model.n_heads': 2,
                                     'model.d_ff': 64, 'trainer.max_steps': 2, 'trainer.eval_interval': 0, 'trainer.plot': False,
                                     'trainer.tensorboard': False, 'trainer.enable_progress_bar': False,
                                     'trainer.default_root_dir': str(d / 'runs'), 'trainer.run_name': 'tiny'})
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()): train(cfg, quiet=True)
    return d

NO_GPU = not torch.cuda.is_available()

T, P, E, C, R, B, X = 'longctx_train', 'longctx_prepare', 'longctx_eval', 'longctx_compare', 'longctx_report', 'longctx_bench', 'longctx_export'
CASES = [  # (id, script, argv, a phrase the error must hold); {d}: the data folder, {run}: the tiny run
    # values: type, finiteness, range, whichever spelling
    ('nan_steps', T, ['--trainer.max_steps=nan'], 'finite'),
    ('inf_lr', T, ['--trainer.learning_rate=inf'], 'finite'),
    ('nan_lr_flat', T, ['--learning_rate', 'nan'], 'finite'),
    ('nan_lr_lightning', T, ['--model.learning_rate=NaN'], 'finite'),
    ('huge_float_int', T, ['--trainer.max_steps=1e400'], 'finite'),
    ('text_int', T, ['--trainer.max_steps=ten'], 'expected an integer'),
    ('double_minus_int', T, ['--trainer.max_steps=--5'], 'expected an integer'),
    ('hex_int', T, ['--data.seq_len=0x40'], 'expected an integer'),
    ('fraction_int', T, ['--data.batch_size=2.5'], 'expected an integer'),
    ('beta1_one', T, ['--trainer.adam_beta1=1'], 'must be < 1'),
    ('beta2_negative', T, ['--trainer.adam_beta2=-0.1'], 'must be >= 0'),
    ('eps_zero', T, ['--trainer.adam_epsilon=0'], 'must be > 0'),
    ('dropout_one', T, ['--model.dropout=1'], 'must be < 1'),
    ('weight_decay_negative', T, ['--weight_decay', '-1'], 'must be >= 0'),
    ('clip_inf', T, ['--trainer.gradient_clip_val=inf'], 'finite'),
    ('init_std_zero', T, ['--model.init_std=0'], 'must be > 0'),
    ('rope_theta_negative', T, ['--rope_theta', '-5'], 'must be > 0'),
    ('d_model_zero', T, ['--d_model', '0'], 'must be > 0'),
    ('label_smoothing_nan', T, ['--trainer.label_smoothing=nan'], 'finite'),
    ('warmup_fraction_one', T, ['--trainer.warmup_fraction=1'], 'must be < 1'),
    ('min_lr_above_lr', T, ['--trainer.min_lr=1'], 'above trainer.learning_rate'),
    ('dt_min_above_dt_max', T, ['--model.block=mamba', '--model.dt_min=0.5'], 'is above model.dt_max'),
    ('mamba2_headdim_not_dividing', T, ['--model.block=mamba2', '--model.d_model=64', '--model.headdim=48'],
     'mamba2: headdim=48 does not divide the inner width expand * d_model = 128, so the heads cannot split it; '
     'valid choices of headdim: 1, 2, 4, 8, 16, 32, 64, 128.'),
    ('mamba2_ngroups_not_dividing', T, ['--model.block=mamba2', '--model.d_model=64', '--model.headdim=16',
                                        '--model.ngroups=3'],
     'mamba2: ngroups=3 does not divide the 8 heads (inner width 128 / headdim 16), so the heads cannot share B and '
     'C evenly; valid choices of ngroups: 1, 2, 4, 8.'),
    ('seed_negative', T, ['--trainer.seed=-1'], 'must be >= 0'),
    ('workers_absurd', T, ['--data.num_workers=100000'], 'must be <= 256'),
    ('passkey_depth_two', T, ['--data.passkey_depth=2'], 'must be <= 1'),
    ('dist_timeout_absurd', T, ['--trainer.dist_timeout=1000000000000000000000000000000'], 'must be <='),
    ('precision_64', T, ['--trainer.precision=64'], 'unknown precision'),
    ('strategy_unknown', T, ['--trainer.strategy=horovod'], 'valid choices'),
    ('curriculum_text', T, ['--trainer.curriculum=abc'], 'SEQ_LEN:STEPS'),
    ('bool_maybe', T, ['--trainer.plot=maybe'], 'expected true or false'),
    ('val_without_train', T, ['--data.val_data={d}/ids.npy'], 'without data.train_data'),
    ('heads_do_not_divide', T, ['--model.n_heads=3'], 'must be divisible by model.n_heads=3'),
    ('global_batch_indivisible', T, ['--data.global_batch_size=3', '--trainer.max_steps=1'], 'does not divide'),
    ('copy_longer_than_sequence', T, ['--data.dataset_name=synthetic', '--data.task=copy', '--data.copy_len=100', '--data.seq_len=64'], 'copy_len'),
    ('max_epochs_zero', T, ['--trainer.max_epochs=0'], 'must be > 0'),
    ('val_fraction_zero', T, ['--data.val_fraction=0'], 'must be > 0'),
    ('size_unknown', T, ['--model.size=huge'], 'valid choices: tiny'),
    ('tokenizer_unknown', T, ['--data.tokenizer=sentencepiece'], 'valid choices: byte, bpe'),
    ('task_vocab_two', T, ['--data.dataset_name=synthetic', '--data.task_vocab_size=2'], 'must be > 2'),
    ('keep_last_negative', T, ['--keep_last', '-1'], 'must be >= 0'),
    ('data_dir_missing', T, ['--data_dir', '{d}/nowhere'], 'does not exist'),
    ('resume_missing', T, ['--trainer.resume={d}/nowhere'], 'no such run directory'),
    ('devices_absurd', T, ['--trainer.devices=100000'], 'must be <= 1024'),
    # config files
    ('config_folder', T, ['--config', '{d}'], 'is a folder'),
    ('config_missing', T, ['--config', '{d}/nowhere.json'], 'does not exist'),
    ('config_not_utf8', T, ['--config', '{d}/latin1.json'], 'not UTF-8'),
    ('config_bad_json', T, ['--config', '{d}/bad_json.json'], 'not valid JSON'),
    ('config_list', T, ['--config', '{d}/list.json'], 'JSON object'),
    ('config_wrong_type', T, ['--config', '{d}/ten.json'], "key 'trainer.max_steps'"),
    ('config_wrong_type_and_flag', T, ['--config', '{d}/ten.json', '--trainer.max_steps=5'], "key 'trainer.max_steps'"),
    ('config_nan', T, ['--config', '{d}/nan.json'], 'finite'),
    ('config_inf_int', T, ['--config', '{d}/inf_int.json'], 'finite'),
    ('config_lightning_key', T, ['--config', '{d}/optimizer.json'], 'the optimizer is AdamW'),
    ('config_section_scalar', T, ['--config', '{d}/section.json'], "section 'model'"),
    ('config_unknown_key', T, ['--config', '{d}/unknown.json'], "Did you mean 'trainer.max_steps'"),
    ('config_dict_value', T, ['--config', '{d}/dict_value.json'], "key 'trainer.max_steps'"),
    # paths
    ('run_name_escapes', T, ['--trainer.run_name=../escaped'], 'one plain folder name'),
    ('run_name_absolute', T, ['--trainer.run_name=/tmp/abs'], 'one plain folder name'),
    ('run_name_nested', T, ['--trainer.run_name=a/b'], 'one plain folder name'),
    ('run_name_dot', T, ['--trainer.run_name=.'], 'one plain folder name'),
    ('root_is_file', T, ['--trainer.default_root_dir={d}/afile'], 'is a file'),
    ('root_under_file', T, ['--trainer.default_root_dir={d}/afile/runs'], 'cannot be created'),
    ('cache_is_file', T, ['--data.cache_dir={d}/afile'], 'is a file'),
    # nothing silently ignored
    ('window_with_vanilla', T, ['--model.window_size=64'], 'read only by the blocks baseline_longformer, baseline_bigbird, dpassm'),
    ('d_state_with_longformer', T, ['--model.block=baseline_longformer', '--model.d_state=8'], 'read only by the blocks mamba'),
    ('random_tokens_with_mamba', T, ['--model.block=mamba', '--model.n_random_tokens=3'], 'read only by the blocks baseline_bigbird'),
    ('d_ff_with_mamba', T, ['--model.block=mamba', '--d_ff', '64'], 'read only by the blocks vanilla'),
    ('chunk_with_vanilla', T, ['--model.chunk_size=32'], 'read only by the blocks mamba2, blade'),
    # layer patterns: each part a registered block, a depth the pattern divides, settings some block of it reads
    ('pattern_unknown_block', T, ['--model.layers=mamba2*3,hyena'],
     "model.layers='mamba2*3,hyena': unknown block 'hyena'; valid choices: "),
    ('pattern_bad_count', T, ['--model.layers=mamba2*x,vanilla'], "'mamba2*x' repeats a block 'x' times"),
    ('pattern_depth', T, ['--model.layers=mamba2*3,vanilla', '--model.n_layers=6'],
     "model.n_layers=6 is not a multiple of the 4 layers of model.layers='mamba2*3,vanilla'; valid depths: 4, 8, 12"),
    ('pattern_unread', T, ['--model.layers=mamba2*3,vanilla', '--model.window_size=32'],
     "model.window_size is read only by the blocks baseline_longformer, baseline_bigbird, dpassm, and this run's "
     "model.block='mamba2*3,vanilla' would ignore it"),
    ('pattern_heads', T, ['--model.layers=mamba2,vanilla', '--model.n_heads=3'], 'must be divisible by model.n_heads=3'),
    ('pattern_groups', T, ['--model.layers=mamba2,vanilla', '--model.d_model=64', '--model.headdim=16',
                           '--model.ngroups=3'], 'mamba2: ngroups=3 does not divide the 8 heads'),
    ('compare_pattern_unknown', C, ['--blocks', 'vanilla', 'mamba2,hyena'], "unknown block 'hyena'"),
    # LightningCLI keys with no meaning here, and close suggestions only
    ('lightning_optimizer', T, ['--model.optimizer=Adam'], 'the optimizer is AdamW'),
    ('lightning_scheduler', T, ['--lr_scheduler=cosine'], 'the schedule is'),
    ('lightning_callbacks', T, ['--trainer.callbacks=ModelCheckpoint'], 'no callbacks'),
    ('lightning_logger', T, ['--trainer.logger=tensorboard'], 'metrics.jsonl'),
    ('lightning_tpu', T, ['--trainer.accelerator=tpu'], "Lightning's 'tpu' accelerator"),
    ('lightning_devices_auto', T, ['--trainer.devices=auto'], "Lightning's devices='auto', -1 and lists of device indices"),
    ('lightning_devices_list', T, ['--trainer.devices=[0,1]'], 'choose the GPUs with CUDA_VISIBLE_DEVICES'),
    ('lightning_num_nodes', T, ['--trainer.num_nodes=2'], 'torchrun'),
    ('lightning_ckpt_path', T, ['--ckpt_path=x.ckpt'], '--trainer.resume'),
    ('far_name_no_suggestion', T, ['--foo_bar_baz=x'], 'unknown config key'),
    ('empty_key_no_suggestion', T, ['--trainer.=3'], "unknown config key 'trainer.'"),
    ('lightning_seed_everything', T, ['--seed_everything=1'], 'runs are seeded by --trainer.seed'),
    ('lightning_class_path', T, ['--model.class_path=MyModel'], "LightningCLI's way to pick a class"),
    ('lightning_init_args', T, ['--model.init_args.d_model=64'], 'give --model.d_model=VALUE'),
    ('lightning_optimizer_init_args', T, ['--optimizer.init_args.lr=0.1'], 'the optimizer is AdamW'),
    ('lightning_callbacks_append', T, ['--trainer.callbacks+=ModelCheckpoint'], 'no callbacks'),
    ('lightning_model_summary', T, ['--trainer.enable_model_summary=false'], 'nothing to set'),
    ('close_name_suggested', T, ['--trainer.max_step=3'], "Did you mean 'trainer.max_steps'"),
    # data
    ('npy_pickle', T, ['--train_data', '{d}/obj.npy'], 'pickled Python objects'),
    ('npy_2d', T, ['--train_data', '{d}/two.npy'], '2-D array of shape (40, 100)'),
    ('npy_id_2_31', T, ['--train_data', '{d}/huge.npy'], 'go up to 2,147,483,648'),
    ('npy_float', T, ['--train_data', '{d}/float.npy'], 'must be integers'),
    ('npy_empty', T, ['--train_data', '{d}/empty.npy'], 'holds no token ids'),
    ('npy_garbage', T, ['--train_data', '{d}/garbage.npy'], '.npy'),
    ('bin_uint32_without_meta', T, ['--train_data', '{d}/u32/train.bin'], 'looks like uint32 ids'),
    ('train_val_disagree', T, ['--train_data', '{d}/m1/tokens.bin', '--val_data', '{d}/m2/tokens.bin'], 'disagree'),
    ('ids_outside_vocab', T, ['--train_data', '{d}/ids.npy', '--vocab_size', '10'], 'set --model.vocab_size to at least 50'),
    ('train_data_folder', T, ['--train_data', '{d}'], 'is a folder'),
    # longctx_prepare
    ('prepare_out_under_file', P, ['--out', '{d}/afile/prep'], 'cannot be created'),
    ('prepare_val_fraction_one', P, ['--out', 'prep', '--data.val_fraction=1'], 'must be < 1'),
    ('prepare_bpe_vocab_nan', P, ['--out', 'prep', '--data.bpe_vocab_size=nan'], 'finite'),
    ('prepare_local_without_path', P, ['--out', 'prep', '--data.dataset_name=local'], 'needs a path'),
    ('prepare_model_flag', P, ['--out', 'prep', '--model.d_model=64'], 'does not apply to longctx_prepare'),
    ('prepare_bpe_vocab_small', P, ['--out', 'prep', '--data.tokenizer=bpe', '--data.bpe_vocab_size=100'], 'must be > 256'),
    ('prepare_run_flag', P, ['--out', 'prep', '--trainer.max_steps=3'], 'does not apply to longctx_prepare'),
    ('prepare_missing_text', P, ['--out', 'prep', '--data.dataset_name=local', '--data.dataset_config={d}/nowhere'], 'does not exist'),
    # longctx_eval
    ('eval_precision_16_cpu', E, ['--precision', '16', '--device', 'cpu'], '--precision=bf16'),
    ('eval_lengths_zero', E, ['--lengths', '0', '64', '--device', 'cpu'], '--lengths 0 64: must be a positive integer'),
    ('eval_lengths_huge', E, ['--lengths', '100000000', '--device', 'cpu'], 'cannot fit in memory'),
    ('eval_batch_huge', E, ['--batch_size', '100000000', '--device', 'cpu'], 'cannot fit in memory'),
    ('eval_n_samples_negative', E, ['--n_samples', '-1', '--device', 'cpu'], '--n_samples=-1 must be > 0'),
    ('eval_depth_nan', E, ['--depths', 'nan', '--device', 'cpu'], 'each depth must be in [0, 1]'),
    ('eval_output_is_file', E, ['--output_dir', '{d}/afile', '--device', 'cpu'], 'is a file'),
    ('eval_batch_zero', E, ['--batch_size', '0', '--device', 'cpu'], '--batch_size=0 must be > 0'),
    ('eval_buckets_beyond_length', E, ['--task', 'drift_curve', '--seq_len', '16', '--max_len', '32', '--n_buckets', '1000', '--device', 'cpu'], '--n_buckets=1000'),
    ('eval_device_tpu', E, ['--device', 'tpu'], "unknown device 'tpu'"),
    ('eval_max_len_below_seq_len', E, ['--seq_len', '64', '--max_len', '32', '--device', 'cpu'], '--max_len=32 is below --seq_len=64'),
    ('eval_unknown_block', E, ['--block', 'hyena', '--device', 'cpu'], "unknown block 'hyena'"),
    ('eval_unknown_task', E, ['--task', 'retrieval'], "unknown --task 'retrieval'"),
    ('eval_missing_checkpoint', E, ['--checkpoint_path', '{d}/nowhere'], 'does not exist'),
    ('eval_seed_negative', E, ['--seed', '-1', '--device', 'cpu'], '--seed=-1 must be >= 0'),
    ('eval_vocab_zero', E, ['--vocab_size', '0', '--device', 'cpu'], '--vocab_size 0: must be a positive integer'),
    ('eval_passkey_len_zero', E, ['--passkey_len', '0', '--device', 'cpu'], '--passkey_len 0: must be a positive integer'),
    ('eval_block_differs', E, ['--checkpoint_path', '{run}', '--block', 'mamba', '--device', 'cpu'], '--block=mamba does not match'),
    ('eval_run_length_huge', E, ['--checkpoint_path', '{run}', '--task', 'copy_recall', '--max_len', '100000000', '--device', 'cpu'], 'cannot fit in memory'),
    ('eval_harness_unknown_task', E, ['--harness', 'hellaswg', '--checkpoint_path', '{run}'], "no task 'hellaswg'; close matches: hellaswag"),
    ('eval_harness_two_models', E, ['--harness', 'hellaswag', '--checkpoint_path', '{run}', '{run}'], '--harness evaluates one model'),
    ('eval_harness_task_flag', E, ['--harness', 'hellaswag', '--checkpoint_path', '{run}', '--depths', '0.5'], '--harness does not read --depths'),
    ('eval_include_path_alone', E, ['--include_path', '{d}'], '--include_path is read only with --harness TASKS'),
    ('eval_harness_include_file', E, ['--harness', 'x', '--include_path', '{d}/afile', '--checkpoint_path', '{run}'], 'is not a folder'),
    # longctx_compare
    ('compare_eval_below_training', C, ['--eval_lengths', '32', '--seq_len', '64', '--blocks', 'vanilla'], '32 is below 64, --seq_len'),
    ('compare_eval_huge', C, ['--eval_lengths', '100000000', '--blocks', 'vanilla', '--device', 'cpu'], 'cannot fit in memory'),
    ('compare_batch_huge', C, ['--batch_size', '10000000', '--blocks', 'vanilla', '--device', 'cpu'], '--batch_size'),
    ('compare_n_samples_zero', C, ['--n_samples', '0'], '--n_samples 0: must be a positive integer'),
    ('compare_max_steps_zero', C, ['--max_steps', '0'], '--max_steps 0: must be a positive integer'),
    ('compare_output_is_file', C, ['--output_dir', '{d}/afile'], 'is a file'),
    ('compare_lightning_key', C, ['--model.optimizer=adam'], 'the optimizer is AdamW'),
    ('compare_nan_override', C, ['--trainer.learning_rate=nan', '--blocks', 'vanilla'], 'finite'),
    ('compare_unknown_task', C, ['--task', 'retrieval'], "unknown --task 'retrieval'"),
    ('compare_ruler_task_too_long', C, ['--task', 'vt', '--seq_len', '256', '--blocks', 'vanilla'],
     "RULER task 'vt' does not fit in 256 tokens with this tokenizer"),
    ('eval_ruler_unknown_task', E, ['--task', 'niah_single_4'], "unknown --task 'niah_single_4'; valid choices: passkey"),
    ('compare_size_unknown', C, ['--size', 'huge', '--blocks', 'vanilla'], 'valid choices: tiny'),
    ('compare_seq_len_zero', C, ['--seq_len', '0'], '--seq_len 0: must be a positive integer'),
    ('compare_stray_argument', C, ['stray'], 'unrecognized argument'),
    ('compare_unknown_block', C, ['--blocks', 'vanilla', 'transformerxl'], "unknown block 'transformerxl'"),
    # longctx_report
    ('report_n_samples_zero', R, ['--checkpoint_path', '{run}', '--n_samples', '0'], '--n_samples 0: must be a positive integer'),
    ('report_max_len_negative', R, ['--checkpoint_path', '{run}', '--max_len', '-5'], '--max_len -5'),
    ('report_max_len_huge', R, ['--checkpoint_path', '{run}', '--max_len', '100000000', '--device', 'cpu'], 'cannot fit in memory'),
    ('report_output_is_file', R, ['--checkpoint_path', '{run}', '--output_dir', '{d}/afile'], 'is a file'),
    ('report_device_tpu', R, ['--checkpoint_path', '{run}', '--device', 'tpu'], "unknown device 'tpu'"),
    ('report_missing_checkpoint', R, ['--checkpoint_path', '{d}/nowhere'], 'does not exist'),
    ('report_below_training', R, ['--checkpoint_path', '{run}', '--max_len', '8'], 'below the training length 16'),
    # longctx_bench
    ('bench_blocks_L_zero', B, ['blocks', '--L', '0'], '--L 0: must be a positive integer'),
    ('bench_blocks_batch_zero', B, ['blocks', '--batch', '0'], '--batch 0'),
    ('bench_scan_reps_zero', B, ['scan', '--reps', '0'], '--reps 0'),
    ('bench_busy_negative', B, ['scan', '--busy', '-1'], '--busy -1: give 0 to 256 busy processes'),
    ('bench_busy_absurd', B, ['attention', '--busy', '100000'], '--busy 100000: give 0 to 256'),
    ('bench_scan_reps_absurd', B, ['scan', '--reps', '100000000'], 'at most 1000'),
    ('bench_scan_L_huge', B, ['scan', '--L', '1000000000000', '--device', 'cpu'], 'needs about'),
    ('bench_attention_heads_zero', B, ['attention', '--H', '0'], '--H 0'),
    ('bench_blocks_L_huge', B, ['blocks', '--L', '100000000', '--blocks', 'vanilla', '--device', 'cpu'], 'cannot fit in memory'),
    ('bench_csv_under_file', B, ['blocks', '--csv', '{d}/afile/x.csv'], 'is a file'),
    ('bench_unknown', B, ['matmul'], 'unknown benchmark'),
    ('bench_blocks_size_unknown', B, ['blocks', '--size', 'huge', '--L', '64'], 'valid choices: tiny'),
    ('bench_blocks_window_zero', B, ['blocks', '--window_size', '0'], '--window_size 0'),
    ('bench_dtype_unknown', B, ['attention', '--dtype', 'float99'], "invalid dtype value: 'float99'"),
    ('bench_L_text', B, ['scan', '--L', 'long'], "invalid int value: 'long'"),
    ('bench_blocks_unknown_block', B, ['blocks', '--blocks', 'hyena', '--L', '64'], "unknown block 'hyena'"),
    # counts are integers as written, empty values are refused, JSON values have their setting's type
    ('int_exponent', T, ['--trainer.max_steps=1e3'], 'without a decimal point or exponent (1000)'),
    ('int_point_zero_flat', T, ['--batch_size', '8.0'], 'without a decimal point or exponent (8)'),
    ('empty_run_name', T, ['--trainer.run_name='], 'the value is empty'),
    ('empty_root_dir', T, ['--trainer.default_root_dir='], 'the value is empty'),
    ('empty_config', T, ['--config', ''], '--config is empty'),
    ('empty_vram', T, ['--vram', ''], 'the value is empty'),
    ('empty_curriculum', T, ['--trainer.curriculum', ''], 'the value is empty'),
    ('run_name_tilde', T, ['--trainer.run_name=~'], 'one plain folder name'),
    ('config_string_for_int', T, ['--config', '{d}/string_for_int.json'], 'data.seq_len="64" has the wrong JSON type'),
    ('config_int_for_text', T, ['--config', '{d}/int_for_text.json'], 'trainer.run_name=5 has the wrong JSON type'),
    ('config_float_for_int', T, ['--config', '{d}/float_for_int.json'], 'without a decimal point or exponent (3)'),
    ('config_text_for_bool', T, ['--config', '{d}/text_for_bool.json'], 'model.compile="yes" has the wrong JSON type'),
    ('config_key_twice', T, ['--config', '{d}/twice.json'], "gives 'max_steps' twice in one object"),
    ('config_not_a_file', T, ['--config', '/dev/null'], 'is not a regular file'),
    ('config_preset_typo', T, ['--config', 'small_32kk'], 'Did you mean small_32k?'),
    ('config_bool_for_number', T, ['--config', '{d}/bool_for_number.json'], 'expected a number'),
    # settings nothing reads
    ('bpe_vocab_with_byte', T, ['--data.bpe_vocab_size=5000'], 'read only with --data.tokenizer=bpe'),
    ('bpe_vocab_absurd', T, ['--data.tokenizer=bpe', '--data.bpe_vocab_size=1000000000000'], 'must be <= 1000000'),
    ('task_setting_without_synthetic', T, ['--data.copy_len=5'], 'read only by the synthetic tasks'),
    ('task_setting_of_another_task', T, ['--data.dataset_name=synthetic', '--data.task=copy', '--data.num_pairs=4'],
     'data.num_pairs=4 is read only by the synthetic tasks associative_recall'),
    # what a run starts from, checked before any data is prepared
    ('resume_junk_file', T, ['--trainer.resume={d}/garbage.npy'], 'not a readable checkpoint'),
    ('resume_empty_folder', T, ['--trainer.resume={d}/emptydir'], 'holds no run'),
    ('resume_last_of_nothing', T, ['--trainer.resume=last', '--trainer.run_name=nosuch'], 'nothing to resume'),
    ('fork_from_empty_folder', T, ['--trainer.fork_from={d}/emptydir'], 'holds no run'),
    ('run_dir_in_use', T, ['--trainer.default_root_dir={d}/runs', '--trainer.run_name=tiny'], 'already holds a run'),
    ('init_from_empty', T, ['--init_from', ''], '--init_from is empty'),
    ('init_from_missing', T, ['--init_from', '{d}/nowhere'], 'does not exist'),
    ('prepare_out_empty', P, ['--out', ''], '--out is empty'),
    ('prepare_resume_every_inf', P, ['--out', 'prep', '--resume_every', 'inf'], 'must be a positive number of MB'),
    ('prepare_bpe_vocab_with_byte', P, ['--out', 'prep', '--data.bpe_vocab_size=5000'], 'read only with --data.tokenizer=bpe'),
    ('prepare_bpe_vocab_absurd', P, ['--out', 'prep', '--data.tokenizer=bpe', '--data.bpe_vocab_size=1000000000'], 'must be <= 1000000'),
    ('prepare_training_setting', P, ['--out', 'prep', '--data.seq_len=99'], 'flag --data.seq_len does not apply to longctx_prepare'),
    ('prepare_synthetic', P, ['--out', 'prep', '--data.dataset_name=synthetic'], 'there is no text to prepare'),
    ('tokenizer_with_token_files', T, ['--data.train_data={d}/ids.npy', '--data.tokenizer=bpe'],
     'data.tokenizer is not read by this run: it reads token ids already made'),
    ('max_epochs_synthetic', T, ['--data.dataset_name=synthetic', '--trainer.max_epochs=1'], 'there are no epochs'),
    ('global_batch_and_accumulation', T, ['--data.global_batch_size=8', '--trainer.accumulate_grad_batches=4'], 'cannot both be given'),
    ('fast_dev_run_resume', T, ['--trainer.fast_dev_run=true', '--trainer.resume={d}/runs/tiny'],
     'trainer.fast_dev_run trains a new model for 2 steps and writes nothing, so it cannot continue'),
    ('eval_n_samples_huge', E, ['--n_samples', '100000000', '--device', 'cpu'], '--n_samples 100000000: at most 100,000'),
    ('eval_vocab_huge_untrained', E, ['--vocab_size', '1000000000', '--device', 'cpu'], 'cannot fit in memory'),
    ('eval_seed_huge', E, ['--seed', '100000000000000000000', '--device', 'cpu'], 'must be an integer from 0 to 4,294,967,295'),
    ('eval_passkey_len_huge', E, ['--passkey_len', '1000000000', '--device', 'cpu'], 'at most 1000 digits'),
    ('eval_task_vocab_text_passkey', E, ['--task_vocab_size', '1000', '--device', 'cpu'], 'not read by the passkey in text'),
    ('eval_num_pairs_with_passkey', E, ['--num_pairs', '4', '--device', 'cpu'], 'read only by --task copy_recall'),
    ('eval_output_dir_empty', E, ['--output_dir', '', '--device', 'cpu'], '--output_dir is empty'),
    ('eval_checkpoint_empty', E, ['--checkpoint_path=', '--device', 'cpu'], '--checkpoint_path is empty'),
    ('eval_data_dir_empty', E, ['--task', 'perplexity', '--data_dir', '', '--device', 'cpu'], '--data_dir is empty'),
    # longctx_bench: every flag checked before the first case is timed
    ('bench_scan_impl_unknown_after_ref', B, ['scan', '--L', '4096', '--impls', 'ref', 'pscan'], "'pscan' is not one of selective_scan's"),
    ('bench_scan_impl_cuda_on_cpu', B, ['scan', '--impls', 'torch', 'cuda', '--device', 'cpu'], '--impls cuda cannot run on cpu'),
    ('bench_attention_impl_unknown', B, ['attention', '--impls', 'sdpa', 'bogus'], "'bogus' is not one of local_attention's"),
    ('bench_attention_flex_on_cpu', B, ['attention', '--impls', 'ref', 'flex', '--device', 'cpu'], 'FlexAttention has no backward pass on cpu'),
    ('bench_attention_dtype_int', B, ['attention', '--dtype', 'int64'], 'floating-point'),
    ('bench_device_empty', B, ['scan', '--device', ''], "unknown device ''"),
    ('bench_csv_folder', B, ['scan', '--L', '64', '--csv', '{d}'], 'is a folder'),
    ('bench_blocks_csv_empty', B, ['blocks', '--csv', ''], "--csv '' is empty"),
    ('bench_png_folder', B, ['blocks', '--png', '{d}'], 'is a folder'),
    ('bench_threads_absurd', B, ['scan', '--threads', '100000'], 'at most 256'),
    ('bench_window_no_block_reads', B, ['blocks', '--blocks', 'vanilla', 'mamba', '--window_size', '64'], '--window_size is read only by the blocks'),
    ('bench_dpassm_L_huge', B, ['dpassm', '--L', '1000000000', '--device', 'cpu'], 'needs about'),
    ('bench_dpassm_d_model_huge', B, ['dpassm', '--d_model', '1000000000', '--device', 'cpu'], 'needs about'),
    # longctx_compare and longctx_report: the same checks before the first run; what the comparison sets is not overridden
    ('compare_output_dir_empty', C, ['--output_dir', ''], '--output_dir is empty'),
    ('compare_seeds_absurd', C, ['--seeds', '1000000'], '--seeds 1000000: at most 100'),
    ('compare_n_samples_absurd', C, ['--n_samples', '100000000'], 'at most 100,000'),
    ('compare_vocab_override', C, ['--blocks', 'vanilla', '--model.vocab_size=1000'], "the model's vocabulary is the task's"),
    ('compare_window_no_block_reads', C, ['--blocks', 'vanilla', 'mamba', '--model.window_size=32'], 'read by none of --blocks vanilla mamba'),
    ('compare_d_model_huge', C, ['--blocks', 'vanilla', '--model.d_model=1000000000', '--device', 'cpu'], 'cannot fit in memory'),
    ('compare_seq_len_huge', C, ['--blocks', 'vanilla', '--seq_len', '1000000000', '--device', 'cpu'], 'cannot fit in memory'),
    ('compare_task_vocab_huge', C, ['--blocks', 'vanilla', '--data.task_vocab_size=1000000000', '--device', 'cpu'], 'cannot fit in memory'),
    ('compare_empty_setting', C, ['--blocks', 'vanilla', '--trainer.learning_rate='], 'the value is empty'),
    ('compare_resume_empty_folder', C, ['--blocks', 'vanilla', '--resume', '--output_dir', '{d}/emptydir'], 'holds no comparison to continue'),
    ('compare_resume_not_a_comparison', C, ['--blocks', 'vanilla', '--resume', '--output_dir', '{d}'], "--output_dir '{d}' holds no comparison to continue"),
    ('compare_resume_missing_folder', C, ['--blocks', 'vanilla', '--resume', '--output_dir', '{d}/nowhere'], 'holds no comparison to continue'),
    ('compare_not_empty_names_resume', C, ['--blocks', 'vanilla', '--output_dir', '{d}'], '--resume continues a stopped comparison'),
    ('compare_resume_two_folders', C, ['--blocks', 'vanilla', '--output_dir', '{d}/a', '--resume', '{d}/b'], 'name two folders; the comparison continues in one'),
    ('compare_trainer_resume', C, ['--blocks', 'vanilla', '--trainer.resume=last'], 'a comparison continues with --resume and its --output_dir'),
    ('compare_fork_from', C, ['--blocks', 'vanilla', '--trainer.fork_from={d}'], "starts one training run from another's weights"),
    ('compare_checkpoint_dir', C, ['--blocks', 'vanilla', '--trainer.checkpoint_dir={d}/ck'], "checkpoints in its folder under --output_dir/runs"),
    ('compare_checkpoint_path', C, ['--blocks', 'vanilla', '--checkpoint_path={d}/ck.pt'], "sets where one training run's checkpoints go"),
    ('report_n_samples_absurd', R, ['--checkpoint_path', '{run}', '--n_samples', '100000000'], 'at most 100,000'),
    ('report_output_dir_empty', R, ['--checkpoint_path', '{run}', '--output_dir', ''], "leave it out for 'reports'"),
    ('report_checkpoint_empty', R, ['--checkpoint_path', ''], '--checkpoint_path is empty'),
    # longctx_export: SOURCE, OUT_DIR and the flags, before any model is read
    ('export_out_empty', X, ['{run}', ''], 'OUT_DIR is empty'),
    ('export_source_empty', X, ['', 'out'], 'SOURCE is empty'),
    ('export_source_missing', X, ['{d}/nowhere', 'out'], 'does not exist'),
    ('export_out_is_file', X, ['{run}', '{d}/afile'], "OUT_DIR '{d}/afile' is a file"),
    ('export_out_under_file', X, ['{run}', '{d}/afile/sub'], 'cannot be created'),
    ('export_out_in_use', X, ['{run}', '{d}/m1'], 'exists and is not empty'),
    ('export_out_is_source', X, ['{run}', '{run}', '--overwrite'], 'would destroy the source'),
    ('export_out_holds_source', X, ['{run}', '{d}/runs', '--overwrite'], 'would destroy the source'),
    ('export_tokenizer_missing', X, ['{run}', 'out', '--tokenizer', '{d}/nowhere.json'], '--tokenizer'),
    ('export_tokenizer_empty', X, ['{run}', 'out', '--tokenizer', ''], '--tokenizer'),
    ('export_max_positions_zero', X, ['{run}', 'out', '--max_position_embeddings', '0'], 'must be a positive integer'),
    ('export_format_unknown', X, ['{run}', 'out', '--format', 'onnx'], "invalid choice: 'onnx'"),
    ('export_stray_flag', X, ['{run}', 'out', '--trainer.max_steps=3'], 'unrecognized arguments'),
]
if NO_GPU:
    CASES += [('train_cuda_without_gpu', T, ['--device', 'cuda', '--trainer.max_steps=1'], 'no CUDA GPU'),
              ('eval_cuda_without_gpu', E, ['--device', 'cuda'], '--device=cpu'),
              ('bench_cuda_without_gpu', B, ['blocks', '--device', 'cuda', '--L', '64'], '--device=cpu')]
SIZES = [  # refused by the memory estimate as soon as the flags are read (and by the trainer's own check, where it has one)
    ('train_d_model_huge', T, ['--model.d_model=1000000000', '--model.n_heads=8'], 'cannot fit in memory'),
    ('train_vocab_huge', T, ['--model.vocab_size=1000000000'], 'cannot fit in memory'),
    ('train_layers_huge', T, ['--model.n_layers=1000000'], 'cannot fit in memory'),
    ('train_batch_huge', T, ['--data.batch_size=10000000'], 'cannot fit in memory'),
    ('train_seq_len_huge_synthetic', T, ['--data.dataset_name=synthetic', '--data.task=copy', '--data.seq_len=100000000'], 'cannot fit in memory'),
    ('train_task_vocab_huge', T, ['--data.dataset_name=synthetic', '--data.task_vocab_size=1000000000'], 'vocabulary 1,000,000,000'),
    ('train_vocab_2_31', T, ['--vocab_size', '2147483648'], 'cannot fit in memory'),
    ('train_mamba_state_huge', T, ['--model.block=mamba', '--model.d_state=10000000'], 'cannot fit in memory'),
    ('train_accumulate_huge', T, ['--trainer.accumulate_grad_batches=1000000000'], "one training step's batch cannot fit in memory"),
    ('train_global_batch_huge', T, ['--data.global_batch_size=1000000000000'], "one training step's batch cannot fit in memory"),
]

def tree(*dirs) -> set:
    return {(str(p), p.stat().st_size if p.is_file() else -1) for d in dirs for p in Path(d).rglob('*')}

def run_case(script, argv, cwd) -> tuple[int, str, float]:
    "Run `script`'s main in-process in `cwd`: (exit code, stderr, CPU seconds: what it did, however busy the machine)."
    err, t0, old = io.StringIO(), time.process_time(), os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try: code = _mains()[script](argv)
            except SystemExit as e: code = e.code
    finally: os.chdir(old)
    return code, err.getvalue(), time.process_time() - t0

def check(case, data, tmp_path):
    name, script, argv, phrase = case
    argv = [a.replace('{d}', str(data)).replace('{run}', str(data / 'runs' / 'tiny')) for a in argv]
    if script == T: argv = argv + [f'--trainer.default_root_dir={tmp_path / "runs"}'] * (not any('default_root_dir' in a for a in argv))
    before = tree(tmp_path, data)
    code, err, secs = run_case(script, argv, tmp_path)
    assert code == 2, f'{name}: exit {code}\n{err}'
    assert 'Traceback' not in err, err
    errors = [l for l in err.splitlines() if ': error: ' in l]
    assert len(errors) == 1 and errors[0].startswith(f'{script}: error: '), err   # one paragraph, one line
    phrase = phrase.replace('{d}', str(data))
    assert phrase in errors[0], f'{name}: {phrase!r} not in\n{err}'
    assert tree(tmp_path, data) == before, f'{name} wrote files'
    assert secs < 30, f'{name} took {secs:.1f} s'
    return errors[0]

@pytest.mark.parametrize('case', CASES, ids=[c[0] for c in CASES])
def test_bad_input(case, data, tmp_path):
    msg = check(case, data, tmp_path)
    if case[0] in ('far_name_no_suggestion', 'empty_key_no_suggestion'): assert 'Did you mean' not in msg, msg
    if case[0].startswith(('eval_', 'bench_')) and 'cuda' in case[0]: assert '--trainer.accelerator' not in msg, msg
    if case[0] == 'compare_batch_huge': assert '--data.batch_size' not in msg, msg

@pytest.mark.parametrize('case', SIZES, ids=[c[0] for c in SIZES])
def test_absurd_sizes(case, data, tmp_path):
    check(case, data, tmp_path)

def _status(key: str) -> int:
    "A size from /proc/self/status, in bytes."
    return next(int(l.split()[1]) * 1024 for l in open('/proc/self/status') if l.startswith(key + ':'))

HUGE = SIZES + [c for c in CASES if 'huge' in c[0] or 'absurd' in c[0]]

@pytest.mark.parametrize('case', HUGE, ids=[c[0] for c in HUGE])
def test_absurd_sizes_allocate_little(case, data, tmp_path):
    "Each absurd size, in a forked process whose address space may grow by 1 GiB only: exit 2, and under 300 MiB more resident memory."
    out = tmp_path / 'result.json'
    rss, pid = _status('VmRSS'), os.fork()
    if pid == 0:   # the child: cap the address space, run the case, report, and leave without pytest's cleanup
        try:
            cap = _status('VmSize') + 2**30
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
            (tmp_path / 'cwd').mkdir()
            argv = [a.replace('{d}', str(data)).replace('{run}', str(data / 'runs' / 'tiny')) for a in case[2]]
            if case[1] == T: argv += [f'--trainer.default_root_dir={tmp_path / "runs"}']
            code, err, _ = run_case(case[1], argv, tmp_path / 'cwd')
            out.write_text(json.dumps([code, err]))
        except BaseException as e: out.write_text(json.dumps(['raised', repr(e)]))
        os._exit(0)
    _, status, usage = os.wait4(pid, 0)
    code, err = json.loads(out.read_text()) if out.exists() else (f'died ({status})', '')
    assert code == 2 and 'Traceback' not in err, f'{case[0]}: exit {code}\n{err}'
    assert usage.ru_maxrss * 1024 - rss < 300 * 2**20, f'{case[0]}: {(usage.ru_maxrss * 1024 - rss) / 2**20:.0f} MiB more'

def test_the_table_is_large():
    assert len(CASES) + len(SIZES) >= 100, len(CASES) + len(SIZES)

def test_notes_say_which_value_wins(tmp_path):
    "Two sources for one value: the later wins and a note names the one replaced; a deepspeed strategy is noted as fsdp."
    code, err, _ = run_case(T, ['--batch_size', '2', '--data.batch_size', '8', '--vram', '8gb', '--print_config'], tmp_path)
    assert code == 0 and "data.batch_size is set twice: --batch_size='2', then --data.batch_size='8'" in err, err
    assert "replaces 1 from the vram preset '8gb'" in err, err
    code, err, _ = run_case(T, ['--trainer.max_steps=3', '--trainer.max_steps', '5', '--print_config'], tmp_path)
    assert code == 0 and "note: --trainer.max_steps is set twice: --trainer.max_steps '3', then --trainer.max_steps '5'" in err, err
    code, err, _ = run_case(T, ['--trainer.strategy=deepspeed_stage_3', '--print_config'], tmp_path)
    assert code == 0 and 'runs as fsdp' in err, err
    assert list(tmp_path.iterdir()) == []

DATASET_CONFIG = ("data.dataset_config is read only with data.dataset_name=local (the path of its text) or a Hugging Face dataset name "
                     "(its config), and this run reads data.dataset_name='stdlib'; leave data.dataset_config out, or give "
                     "--data.dataset_name=local.")
SUBPROCESS = [('longctx_train', ['--trainer.learning_rate=nan'], 'finite'),
              ('longctx_bench', ['blocks', '--L', '0'], '--L 0'),
              ('longctx_report', ['--checkpoint_path', 'nowhere', '--n_samples', '0'], '--n_samples 0'),
              ('longctx_compare', ['--eval_lengths', '32', '--seq_len', '64'], 'below 64'),
              ('longctx_eval', ['--lengths', '100000000', '--device', 'cpu'], 'cannot fit in memory'),
              ('longctx_prepare', ['--out', 'prep', '--data.val_fraction=nan'], 'finite'),
              ('longctx_train', ['--data.dataset_config=texts/'], DATASET_CONFIG),   # without --data.dataset_name=local
              ('longctx_prepare', ['--out', 'prep', '--data.dataset_config=texts/'], DATASET_CONFIG)]

@pytest.mark.parametrize('script,argv,phrase', SUBPROCESS, ids=[s[0] for s in SUBPROCESS])
def test_console_scripts(bindir, tmp_path, script, argv, phrase):
    p = subprocess.run([str(bindir / script), *argv], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert p.returncode == 2 and phrase in p.stderr and 'Traceback' not in p.stderr, p.stderr
    assert p.stderr.startswith(f'{script}: error: ') and list(tmp_path.iterdir()) == []

@pytest.mark.parametrize('case', SIZES, ids=[c[0] for c in SIZES])
def test_absurd_sizes_refused_by_the_memory_guard(case):
    "The check the command line registers (and the trainer's `check_config_fits`) refuses each, in milliseconds."
    from longctx_nb.cli import parse_cli
    from longctx_nb.memory import check_config_fits, fits_when_parsed
    from longctx_nb.core import UsageError
    with contextlib.redirect_stderr(io.StringIO()): cfg, _ = parse_cli(case[2] + ['--print_config'])   # prints, checks nothing
    t0 = time.process_time()   # CPU time: the work done, not how busy the machine is
    with pytest.raises(UsageError, match='cannot fit in memory'): fits_when_parsed(cfg)
    if cfg.data.dataset_name != 'synthetic':
        with pytest.raises(UsageError, match='cannot fit in memory'): check_config_fits(cfg, 'cpu')
    assert time.process_time() - t0 < 20, time.process_time() - t0

def test_compare_resume_other_settings(data, tmp_path):
    "--resume into a comparison started with other settings: exit 2, one paragraph naming each difference, nothing written."
    from longctx_nb.compare import compare_blocks
    cmp = tmp_path / 'cmp'
    tiny = {'model.n_layers': 1, 'model.d_model': 32, 'model.n_heads': 2, 'model.d_ff': 64, 'data.copy_len': 4}
    with contextlib.redirect_stderr(io.StringIO()):
        compare_blocks(['vanilla'], 'copy', max_steps=2, seq_len=32, eval_lengths=[32], output_dir=cmp, batch_size=4, n_samples=4,
                       device='cpu', overrides=tiny, verbose=False, match_params=False)
    argv = ['--blocks', 'vanilla', '--task', 'copy', '--max_steps', '2', '--eval_lengths', '32', '--output_dir', str(cmp), '--batch_size', '4',
            '--n_samples', '4', '--device', 'cpu', '--no_match_params', *[f'--{k}={v}' for k, v in tiny.items()], '--resume']
    msg = check(('compare_resume_other_settings', C, [*argv, '--seq_len', '16', '--seeds', '2'], 'these differ: '), data, tmp_path)
    assert ("these differ: the seeds (--seed, --seeds) [0, 1] here, [0] there; --seq_len=16 here, 32 there. Give the same settings "
            f"(they are in '{cmp}/compare.json'), or start a new comparison in a new --output_dir.") in msg, msg
    code, err, _ = run_case(C, [*argv, '--seq_len', '32'], tmp_path)   # the same settings: nothing left to train, the report again
    assert code == 0 and 'resume: 1 of 1 runs finished in' in err and 'nothing to train: writing the report' in err, err

def test_compare_resume_other_machine(data, tmp_path):
    """--resume of a comparison whose settings resolved otherwise where it started (device, GPU, precision, kernels): exit 2,
    one paragraph naming each difference, nothing written."""
    from longctx_nb.compare import compare_blocks
    cmp = tmp_path / 'cmp'
    tiny = {'model.n_layers': 1, 'model.d_model': 32, 'model.n_heads': 2, 'model.d_ff': 64, 'data.copy_len': 4}
    with contextlib.redirect_stderr(io.StringIO()):
        compare_blocks(['vanilla'], 'copy', max_steps=2, seq_len=32, eval_lengths=[32], output_dir=cmp, batch_size=4, n_samples=4,
                       device='cpu', overrides=tiny, verbose=False, match_params=False)
    saved = json.loads((cmp / 'compare.json').read_text())
    assert saved['machine']['device'] == 'cpu' and saved['machine']['precision'] == {'vanilla': '32'}, saved['machine']
    saved['machine'].update(device='cuda', gpu='NVIDIA H100 80GB HBM3', precision={'vanilla': 'bf16'}, kernels={'vanilla': 'flex'})
    (cmp / 'compare.json').write_text(json.dumps(saved))
    argv = ['--blocks', 'vanilla', '--task', 'copy', '--max_steps', '2', '--eval_lengths', '32', '--output_dir', str(cmp), '--batch_size', '4',
            '--n_samples', '4', '--device', 'cpu', '--no_match_params', *[f'--{k}={v}' for k, v in tiny.items()], '--seq_len', '32', '--resume']
    msg = check(('compare_resume_other_machine', C, argv, 'was trained with other resolved settings than this machine gives: '), data, tmp_path)
    assert ("device cpu here, cuda there; GPU none here, NVIDIA H100 80GB HBM3 there; precision 32 here, bf16 there; kernels "
            "none of the library's (PyTorch's own operators only) here, flex there. Rows trained here would not compare with "
            "its kept rows: resume it on the machine and versions it started with, or start a new comparison in a new --output_dir.") in msg, msg
