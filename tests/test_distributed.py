"""Multi-process training with real torchrun, 2 CPU processes and gloo: kill and resume, resume on another number of
ranks, a dead rank, bad input. (2 ranks against 1, for DDP and FSDP2, is shown and checked in nbs/41_distributed.ipynb.)"""
import json, os, shutil, signal, subprocess
from pathlib import Path
import pytest, torch
from safetensors.torch import load_file

ARGS = ['--data.seq_len=64', '--model.n_layers=2', '--model.d_model=64', '--trainer.max_steps=10', '--trainer.log_every_n_steps=1',
        '--trainer.eval_interval=0', '--trainer.checkpoint_interval=2', '--trainer.keep_last=0', '--data.global_batch_size=4',
        '--data.batch_size=2', '--trainer.enable_progress_bar=false', '--trainer.plot=false', '--trainer.tensorboard=false']
ENV = {**os.environ, 'OMP_NUM_THREADS': '1'}

def command(bindir, nproc, root, *extra):
    launcher = [str(bindir / 'torchrun'), '--standalone', f'--nproc_per_node={nproc}', '--no-python'] if nproc > 1 else []
    return [*launcher, str(bindir / 'longctx_train'), *ARGS, f'--trainer.default_root_dir={root}', *extra]

def run(bindir, nproc, root, *extra, ok=True):
    p = subprocess.run(command(bindir, nproc, root, *extra), capture_output=True, text=True, env=ENV, timeout=300)
    if ok: assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    return p

def losses(run_dir):
    rows = [json.loads(l) for l in (Path(run_dir) / 'metrics.jsonl').read_text().splitlines()]
    return {r['step']: r['loss'] for r in rows if 'loss' in r}

def workers(proc) -> dict[int, int]:
    "{rank: pid} of the workers torchrun `proc` started (each runs in a session of its own)."
    found = {}
    for pid in map(int, subprocess.run(['pgrep', '-P', str(proc.pid)], capture_output=True, text=True).stdout.split()):
        try: env = Path(f'/proc/{pid}/environ').read_bytes().decode(errors='replace').split('\0')
        except OSError: continue  # a helper process that has already exited
        found.update({int(v[5:]): pid for v in env if v.startswith('RANK=')})
    return found

def weights(run_dir): return load_file(str(Path(run_dir) / 'model.safetensors'))

@pytest.fixture(scope='module', params=['ddp', 'fsdp'])
def reference(request, bindir, tmp_path_factory):
    "An uninterrupted 2-rank run of each strategy, with a checkpoint every 2 steps."
    root = tmp_path_factory.mktemp(request.param)
    out = run(bindir, 2, root, f'--trainer.strategy={request.param}').stdout
    assert 'global batch 4 sequences = 2 per micro-batch x 1 accumulation x 2 ranks' in out
    assert out.count('Training finished') == 1  # rank 0 alone reports
    return request.param, root / 'version_0'

def test_sigkill_two_ranks_then_resume_is_exact(bindir, tmp_path, reference, held):
    strategy, ref = reference
    if strategy != 'ddp': pytest.skip('one strategy is enough here; the other is resumed on one rank below')
    proc = held(command(bindir, 2, tmp_path), 'version_0 step 3', stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                env=ENV)   # the ranks held after step 3, step 2's checkpoint written
    for pid in [proc.pid, *workers(proc).values()]: os.kill(pid, signal.SIGKILL)  # the whole job, as a preempted allocation
    proc.wait()
    run(bindir, 2, tmp_path, '--resume')
    got = losses(tmp_path / 'version_0')
    assert sorted(got) == list(range(1, 11)) and got == losses(ref)  # every step, bitwise
    w, wr = weights(tmp_path / 'version_0'), weights(ref)
    assert all(torch.equal(w[k], wr[k]) for k in wr)

def test_two_rank_checkpoint_resumes_on_one_rank(bindir, tmp_path, reference):
    strategy, ref = reference
    run_dir = tmp_path / 'run'
    shutil.copytree(ref, run_dir)
    for p in (run_dir / 'checkpoints').glob('*.pt'):
        if int(p.stem.split('_')[1]) > 4: p.unlink()  # as if the run had stopped after step 4
    out = run(bindir, 1, tmp_path, '--trainer.run_name=run', '--resume').stdout
    assert 'from step_0000004.pt' in out and '2 per micro-batch x 2 accumulation x 1 rank ' in out
    got, want = losses(run_dir), losses(ref)
    assert sorted(got) == list(range(1, 11))
    assert all(abs(got[s] - want[s]) < 1e-5 for s in want), (got, want)  # the same trajectory, to fp32 rounding
    w, wr = weights(run_dir), weights(ref)
    assert all(torch.allclose(w[k], wr[k], atol=1e-5) for k in wr)

def test_a_dead_rank_stops_the_run_cleanly(bindir, tmp_path, held):
    """Rank 1 killed while held after step 5 (steps 2 and 4 checkpointed), rank 0 waiting for it in step 6: rank 0 stops
    with a message, and no hang: it ends inside `communicate`'s bound, far below the collectives' own timeout."""
    proc = held(command(bindir, 2, tmp_path, '--trainer.max_steps=1000', '--trainer.dist_timeout=3600'),
                'version_0 step 5 on rank 1', stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV)
    try:
        ckdir = tmp_path / 'version_0' / 'checkpoints'
        os.kill(workers(proc)[1], signal.SIGKILL)
        out, _ = proc.communicate(timeout=300)   # a hang would wait out dist_timeout (3600 s): it raises here
    finally:
        if proc.poll() is None:
            for pid in [proc.pid, *workers(proc).values()]: os.kill(pid, signal.SIGKILL)
    assert proc.returncode != 0  # no hang
    assert 'longctx_train [rank 0]: stopped: ' in out and 'is intact; continue with --resume' in out, out[-3000:]
    newest = sorted(ckdir.glob('*.pt'))[-1]
    assert str(newest.name) in out and newest.name == 'step_0000004.pt'
    torch.load(newest, weights_only=True)  # intact

@pytest.mark.parametrize('extra, nproc, message', [
    (['--data.global_batch_size=3'], 2, 'data.global_batch_size=3 cannot be split over 2 ranks'),
    (['--data.global_batch_size=6', '--data.batch_size=2'], 2, 'data.batch_size=2 does not divide'),
    (['--trainer.dist_backend=nccl', '--trainer.accelerator=cpu'], 2, 'trainer.dist_backend=nccl needs CUDA GPUs'),
    (['--trainer.strategy=horovod'], 1, "trainer.strategy='horovod' is not valid: valid choices: auto, ddp, fsdp"),
    (['--data.global_batch_size=3', '--trainer.devices=2'], 1, 'cannot be split over 2 ranks'),  # devices=2 starts torchrun itself
    (['--trainer.context_parallel=4'], 2, 'trainer.context_parallel=4 splits each sequence over more ranks than the run'),
    (['--trainer.context_parallel=2', '--data.seq_len=63'], 2, 'use a multiple of 2, e.g. 62 or 64'),
    (['--trainer.context_parallel=2', '--model.block=blade', '--model.chunk_size=48'], 2,
     'a data.seq_len that is a multiple of 96 (e.g. 96), or --model.chunk_size=32.'),
    (['--trainer.context_parallel=2', '--model.block=dpassm', '--model.window_size=64'], 2,
     'model.block=dpassm reads 63 tokens before each part, more than the 32 of a part'),
    (['--trainer.context_parallel=2', '--model.block=bigbird', '--model.n_random_tokens=0', '--model.window_size=64'],
     2, 'model.block=baseline_bigbird reads 63 tokens before each part'),   # no random keys: Longformer's halo
    (['--trainer.context_parallel=2', '--model.layers=mamba2,dpassm', '--model.window_size=64'], 2,
     'model.block=dpassm reads 63 tokens before each part'),   # each block of a layer pattern
    (['--trainer.context_parallel=2', '--model.dropout=0.1'], 2, "model.dropout=0.1 drops vanilla's attention weights"),
])
def test_bad_input(bindir, tmp_path, extra, nproc, message):
    p = run(bindir, nproc, tmp_path, *extra, ok=False)
    # our launcher (nproc 1: devices=2 starts torchrun after the checks) exits 2; torchrun exits 1 whatever its workers'
    # codes (its main re-raises ChildFailedError), and reports the first worker's 2 as the root cause
    assert p.returncode == (2 if nproc == 1 else 1) and ('exitcode  : 2 (pid' in p.stderr) == (nproc > 1), p.stderr
    assert (p.stdout + p.stderr).count(message) == 1, p.stderr[:3000]  # said once, by rank 0
    assert 'longctx_nb/' not in p.stdout + p.stderr  # no traceback of ours (torchrun adds its own report)
    assert not (tmp_path / 'version_0').exists()

def test_a_block_note_is_printed_once(bindir, tmp_path):
    "BigBird's note on its random-key blocks (every rank builds the same model) comes from rank 0 alone."
    p = run(bindir, 2, tmp_path, '--model.block=bigbird', '--model.window_size=32', '--trainer.max_steps=1')
    assert (p.stdout + p.stderr).count('baseline_bigbird: at seq_len 64 no query block of attn_block_size=64') == 1, p.stdout

def test_fsdp_keeps_no_decay_parameters(bindir, tmp_path):
    "Mamba's A_log and D take no weight decay; FSDP2's sharded parameters must keep that flag (weights match 1 rank)."
    args = ['--model.block=mamba', '--trainer.max_steps=4', '--trainer.checkpoint_interval=0']
    run(bindir, 2, tmp_path / 'two', *args, '--trainer.strategy=fsdp')
    run(bindir, 1, tmp_path / 'one', *args)
    w2, w1 = weights(tmp_path / 'two' / 'version_0'), weights(tmp_path / 'one' / 'version_0')
    assert all(torch.allclose(w2[k], w1[k], atol=1e-6) for k in w1), max((w2[k] - w1[k]).abs().max().item() for k in w1)

def test_sigterm_two_ranks_checkpoints_and_resumes_exactly(bindir, tmp_path, reference, held):
    """`longctx_train --trainer.devices=2` starts torchrun and passes SIGTERM on: every rank stops after the same step.
    Rank 0 is held after step 3, rank 1 waits for it in step 4: the signal reaches the two at different places."""
    strategy, ref = reference
    if strategy != 'ddp': pytest.skip('one strategy is enough here')
    proc = held(command(bindir, 1, tmp_path, '--trainer.devices=2'), 'version_0 step 3 on rank 0',
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-3000:]
    assert 'Unable to shutdown process' not in err   # the workers exited by themselves; torchrun killed none
    stopped = max(losses(tmp_path / 'version_0'))
    assert f'Checkpoint: {tmp_path / "version_0" / "checkpoints" / f"step_{stopped:07d}.pt"}' in err, err[-3000:]
    cmd = err.split('Continue with: ')[1].split('\n')[0].split()
    assert cmd[:3] == ['torchrun', '--nproc_per_node=2', '--no-python'] and cmd[3] == 'longctx_train', cmd
    p = subprocess.run([str(bindir / 'torchrun'), '--standalone', *cmd[1:3], str(bindir / 'longctx_train'), *cmd[4:]],
                       capture_output=True, text=True, env=ENV, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    got = losses(tmp_path / 'version_0')
    assert sorted(got) == list(range(1, 11)) and got == losses(ref)   # no step lost, bitwise
    w, wr = weights(tmp_path / 'version_0'), weights(ref)
    assert all(torch.equal(w[k], wr[k]) for k in wr)


BLOCK_ARGS = {'longformer': ['--model.window_size=12', '--model.n_global_tokens=8'],   # in 4 parts, part 1's halo: globals
              'bigbird': ['--model.window_size=8', '--model.n_random_tokens=2', '--model.attn_block_size=8'],
              'blade': ['--model.chunk_size=8', '--model.state_dim=16'],   # whole chunks in a part of 16
              'dpassm': ['--model.window_size=8', '--model.ssm_state_dim=16'],
              'mamba2': ['--model.headdim=32', '--model.ngroups=2']}   # 4 heads in 2 groups

@pytest.fixture(scope='module', params=['vanilla', 'mamba', 'longformer', 'bigbird', 'blade', 'dpassm', 'mamba2'])
def one_process(request, bindir, tmp_path_factory):
    "A one-process run of each block that context parallelism splits, the reference of the splits."
    root = tmp_path_factory.mktemp(request.param)
    run(bindir, 1, root, f'--model.block={request.param}', *BLOCK_ARGS.get(request.param, ()), '--trainer.max_steps=3')
    return request.param, root / 'version_0'

def steps(run_dir):
    rows = [json.loads(l) for l in (Path(run_dir) / 'metrics.jsonl').read_text().splitlines()]
    return [(r['loss'], r['grad_norm']) for r in rows if 'loss' in r]

@pytest.mark.parametrize('nproc, split', [(2, 2), (4, 2), (4, 4)])   # context x data: 2x1, 2x2, 4x1
def test_context_parallel_equals_one_process(bindir, tmp_path, one_process, nproc, split):
    """Each sequence split over `split` ranks (the rest split the batch): every step's loss and gradient norm equal one
    process's to 1e-5, and so do the weights after three steps, in root mean square per tensor: Adam divides each
    gradient element by its own RMS, so an element whose gradient is near Adam's eps (1e-8) steps by its rounding."""
    block, ref = one_process
    p = run(bindir, nproc, tmp_path, f'--model.block={block}', *BLOCK_ARGS.get(block, ()), '--trainer.max_steps=3',
            f'--trainer.context_parallel={split}')
    assert f'each sequence split over {split}' in p.stdout
    got, want = steps(tmp_path / 'version_0'), steps(ref)
    assert len(got) == len(want) == 3
    assert max(abs(a - b) for g, w in zip(got, want) for a, b in zip(g, w)) < 1e-5, (got, want)
    w, wr = weights(tmp_path / 'version_0'), weights(ref)
    assert max((w[k] - wr[k]).square().mean().sqrt().item() for k in wr) < 1e-6

def test_one_process_checkpoint_resumes_split_over_two_ranks(bindir, tmp_path, one_process):
    "A one-process run stopped after step 2 continues with each sequence split over 2 ranks, on the same trajectory."
    block, ref = one_process
    if block != 'mamba': pytest.skip('one block is enough here')
    run_dir = tmp_path / 'run'
    shutil.copytree(ref, run_dir)
    for p in (run_dir / 'checkpoints').glob('*.pt'):
        if int(p.stem.split('_')[1]) > 2: p.unlink()  # as if the run had stopped after step 2
    out = run(bindir, 2, tmp_path, '--trainer.run_name=run', '--resume', '--trainer.max_steps=3',
              '--trainer.context_parallel=2').stdout
    assert 'from step_0000002.pt' in out and 'each sequence split over 2' in out
    got, want = steps(run_dir), steps(ref)
    assert len(got) == 3 and max(abs(a - b) for g, w in zip(got, want) for a, b in zip(g, w)) < 1e-5, (got, want)
    w, wr = weights(run_dir), weights(ref)
    assert max((w[k] - wr[k]).abs().max().item() for k in wr) < 1e-5
