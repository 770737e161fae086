"""`--trainer.profile_steps=A:B` on a real `longctx_train` process: a Chrome trace of those steps that TensorBoard and
Perfetto open, the top operators printed; a malformed or out-of-run value is exit 2 before anything is written."""
import json, os, subprocess
import pytest

TINY = ['--data.seq_len=32', '--data.batch_size=2', '--model.n_layers=1', '--model.d_model=32', '--model.n_heads=2',
        '--trainer.max_steps=4', '--trainer.eval_interval=0', '--trainer.enable_progress_bar=false', '--trainer.plot=false']
ENV = {**os.environ, 'OMP_NUM_THREADS': '1'}

def run(bindir, root, *args):
    return subprocess.run([str(bindir / 'longctx_train'), *TINY, f'--trainer.default_root_dir={root}', *args],
                          capture_output=True, text=True, env=ENV, timeout=300)

def test_profile_steps_write_a_trace_and_print_the_top_operators(bindir, tmp_path):
    p = run(bindir, tmp_path, '--trainer.profile_steps=2:3')
    assert p.returncode == 0, p.stderr
    trace = tmp_path / 'version_0' / 'profile' / 'rank0.steps_2-3.pt.trace.json'
    assert f'profile of steps 2-3: {trace}' in p.stdout and 'top operators by self cpu time total' in p.stdout
    assert 'Self CPU' in p.stdout and 'aten::' in p.stdout   # the profiler's table
    events = json.loads(trace.read_text())['traceEvents']   # valid JSON, Chrome trace format
    steps = sorted(e['name'] for e in events if e.get('name', '').startswith('step '))
    assert steps == ['step 2', 'step 3'], steps
    assert any(e.get('name') == '[memory]' for e in events)   # memory events recorded
    assert not list(trace.parent.glob('.*.tmp'))

@pytest.mark.parametrize('value, message', [
    ('3-5', "trainer.profile_steps='3-5' is not valid: expected A:B"),
    ('5:3', "trainer.profile_steps='5:3' is not valid: expected A:B"),
    ('7:9', 'trainer.profile_steps=7:9: this run takes steps 1 to 4; choose A:B among them.'),
])
def test_bad_profile_steps(bindir, tmp_path, value, message):
    p = run(bindir, tmp_path, f'--trainer.profile_steps={value}')
    assert p.returncode == 2 and message in ' '.join(p.stderr.split()), p.stderr
    assert 'Traceback' not in p.stderr and not (tmp_path / 'version_0').exists()
