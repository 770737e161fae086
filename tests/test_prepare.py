"longctx_prepare as a user runs it: killed with SIGKILL part-way and run again, the same bytes as a run never stopped."
import json, os, random, select, signal, subprocess, sys
from pathlib import Path
import numpy as np
import pytest

FILES = ('train.bin', 'val.bin', 'train.docs.npy', 'val.docs.npy', 'meta.json', 'tokenizer.json')

def _corpus(d: Path, n: int = 800, words: int = 500) -> Path:
    "`n` text files of `words` random words: about 2 MB, a few batches of documents."
    rng, vocab = random.Random(0), 'alpha beta gamma delta lorem ipsum dolor sit amet quick brown fox jumps'.split()
    d.mkdir()
    for i in range(n): (d / f'doc{i:04d}.txt').write_text(' '.join(rng.choice(vocab) for _ in range(words)) + '\n')
    return d

def _cmd(bindir, corpus, out, *more):
    return [str(bindir / 'longctx_prepare'), '--data.dataset_name=local', f'--data.dataset_config={corpus}', '--out', str(out),
            '--data.tokenizer=bpe', '--data.bpe_vocab_size=300', '--resume_every=0.01', '--no_progress', *more]

# longctx_prepare's main, held (`core.hold`) once a resume marker is written: 'prepare N documents' (N done). The corpus
# module has no hold point of its own yet; this adds it, in the test's process only, after `_write_marker`.
HELD_PREPARE = '''import sys
from longctx_nb import core, corpus
from longctx_nb.cli import prepare_main
mark = corpus._write_marker
def _write_marker(d, settings, done, *more): mark(d, settings, done, *more); core.hold(f'prepare {done} documents')
corpus._write_marker = _write_marker
prepare_main(sys.argv[1:])'''

def _same(a: Path, b: Path):
    for f in FILES: assert (a / f).read_bytes() == (b / f).read_bytes(), f

def _alive(pid: str) -> bool:
    "Whether process `pid` runs (a zombie waiting for its new parent to reap it has exited)."
    try: return Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()[0] != 'Z'
    except OSError: return False

def _wait_gone(pids, limit: float = 300):
    "Wait until each of `pids` has ended (an event: its pidfd turns readable); `limit` seconds only bound a hang."
    for pid in map(int, pids):
        try: fd = os.pidfd_open(pid)
        except ProcessLookupError: continue
        try: select.select([fd], [], [], limit)
        finally: os.close(fd)

def test_sigkill_then_rerun_is_byte_identical(bindir, tmp_path, held):
    from longctx_nb.corpus import _BATCH
    work = tmp_path / 'work'; work.mkdir()   # beside the hold's file
    corpus = _corpus(work / 'corpus')
    subprocess.run(_cmd(bindir, corpus, work / 'whole'), check=True, capture_output=True, text=True)
    out, part = work / 'prep', work / '.prep.partial'
    cmd = [sys.executable, '-c', HELD_PREPARE, *_cmd(bindir, corpus, out, '--workers=2')[1:]]
    p = held(cmd, f"prepare {_BATCH['max_docs']} documents", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # held once the first batch is on disk, the others sent to the workers: killed part-way, on a busy machine too
    kids = subprocess.run(['pgrep', '-P', str(p.pid)], capture_output=True, text=True).stdout.split()
    assert len(kids) >= 2   # its workers (and multiprocessing's resource tracker)
    p.send_signal(signal.SIGKILL); p.wait()
    _wait_gone(kids)
    assert not any(map(_alive, kids)), 'workers outlived the killed longctx_prepare'
    done = json.loads((part / 'progress.json').read_text())['documents_done']
    assert not out.exists() and 0 < done < 800
    r = subprocess.run(_cmd(bindir, corpus, out), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert f'{done:,} documents were done' in r.stderr
    _same(out, work / 'whole')
    assert sorted(p.name for p in work.iterdir()) == ['corpus', 'prep', 'whole']   # the partial folder is gone

def test_workers_give_the_same_bytes(bindir, tmp_path):
    corpus = _corpus(tmp_path / 'corpus', n=100, words=60)
    for out, w in (('one', '1'), ('two', '2')):
        subprocess.run(_cmd(bindir, corpus, tmp_path / out, '--workers', w, '--chunk_size', '64', '--dataset', 'local'),
                       check=True, capture_output=True, text=True)
    _same(tmp_path / 'one', tmp_path / 'two')
    meta = json.loads((tmp_path / 'one' / 'meta.json').read_text())
    tr, off = np.fromfile(tmp_path / 'one' / 'train.bin', np.uint16), np.load(tmp_path / 'one' / 'train.docs.npy')
    assert meta['chunk_size'] == 64 and len(tr) % 64 == 0 and off[0] == 0 and off[-1] == len(tr)
    assert (tr[off[1:-1] - 1] == meta['eot_id']).all()   # every document ends with <|endoftext|>

@pytest.mark.parametrize('flag, message', [
    ('--workers=0', '--workers=0 must be from 1 to 256'),
    ('--chunk_size=1', '--chunk_size=1 must be at least 2 tokens'),
    ('--resume_every=0', '--resume_every=0.0 must be a positive number of MB'),
])
def test_bad_prepare_flags(tmp_path, capsys, flag, message):
    from longctx_nb.cli import _prepare
    from longctx_nb.flags import main
    assert main(_prepare, 'longctx_prepare', ['--out', str(tmp_path / 'o'), flag]) == 2
    err = capsys.readouterr().err
    assert message in err and 'Traceback' not in err
    assert list(tmp_path.iterdir()) == []

TRAIN = ['--data.seq_len=64', '--data.batch_size=4', '--model.n_layers=1', '--model.d_model=32', '--model.n_heads=2',
         '--model.d_ff=64', '--trainer.max_steps=2', '--trainer.enable_progress_bar=false', '--trainer.limit_val_batches=2']

def _val_loss(root: Path) -> float:
    rows = [json.loads(l) for l in (root / 'version_0' / 'metrics.jsonl').read_text().splitlines()]
    return [r['val_loss'] for r in rows if 'val_loss' in r][-1]

def test_train_with_doc_mask(bindir, tmp_path):
    "Short documents, so every window crosses a boundary: the mask changes the losses, so the trainer really applies it."
    corpus = tmp_path / 'corpus'; corpus.mkdir()
    for i in range(200): (corpus / f'd{i:03d}.txt').write_text(f'note {i}: ' + 'abc ' * (i % 7 + 3))
    subprocess.run([str(bindir / 'longctx_prepare'), '--dataset=local', f'--data.dataset_config={corpus}', '--out',
                    str(tmp_path / 'prep'), '--no_progress'], check=True, capture_output=True)
    for name, more in (('masked', ['--data.doc_mask=true']), ('plain', [])):
        r = subprocess.run([str(bindir / 'longctx_train'), '--data_dir', str(tmp_path / 'prep'), *TRAIN, *more,
                            f'--trainer.default_root_dir={tmp_path / name}'], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    assert abs(_val_loss(tmp_path / 'masked') - _val_loss(tmp_path / 'plain')) > 1e-4

@pytest.mark.parametrize('more, message', [
    (['--model.block=mamba'], "model.block='mamba' cannot: its recurrent state runs on across document boundaries"),
    (['--data.dataset_name=synthetic', '--data.task=copy', '--data.copy_len=8'], "the synthetic task 'copy' has none"),
])
def test_doc_mask_refused(bindir, tmp_path, more, message):
    r = subprocess.run([str(bindir / 'longctx_train'), '--data.doc_mask=true', *TRAIN[:3], *more,
                        f'--trainer.default_root_dir={tmp_path / "runs"}'], capture_output=True, text=True)
    assert r.returncode == 2 and message in ' '.join(r.stderr.split()) and 'Traceback' not in r.stderr, r.stderr
    assert not (tmp_path / 'runs').exists()

def test_a_split_far_from_val_fraction_is_said(bindir, tmp_path):
    "Three documents: one of them, a third of the tokens, is held out for validation (asked: 5%), and a note says so."
    corpus = tmp_path / 'texts'; corpus.mkdir()
    for name in 'abc': (corpus / f'{name}.txt').write_text(f'word {name} ' * 300 + '\n')
    p = subprocess.run([str(bindir / 'longctx_prepare'), '--data.dataset_name=local', f'--data.dataset_config={corpus}',
                        '--out', str(tmp_path / 'prep')], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert ("note: 1 of the 3 documents (33% of the tokens) is held out for validation, not data.val_fraction=0.05: each document "
            "goes to one split whole, and this corpus has too few documents to come closer\n") in p.stderr, p.stderr
    meta = json.loads((tmp_path / 'prep' / 'meta.json').read_text())
    assert (meta['n_documents'], meta['n_val_documents']) == (3, 1)
    note = next(l for l in p.stderr.splitlines() if 'held out' in l)   # and on every run that reads that split: the prepared folder, the cache twice
    for data in (['--data_dir', tmp_path / 'prep'], *[['--data.dataset_name=local', f'--data.dataset_config={corpus}']] * 2):
        r = subprocess.run([str(bindir / 'longctx_train'), *TRAIN, *map(str, data),
                            f'--trainer.default_root_dir={tmp_path / "runs"}'], capture_output=True, text=True, timeout=600,
                           env={**os.environ, 'LONGCTX_CACHE': str(tmp_path / 'cache')})
        assert r.returncode == 0 and r.stderr.count('held out for validation') == 1 and note in r.stderr.splitlines(), r.stderr
    p = subprocess.run([*_cmd(bindir, _corpus(tmp_path / 'many', n=200, words=50), tmp_path / 'prep2')], capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0 and 'held out for validation' not in p.stderr, p.stderr   # 200 documents: near 5%, nothing to say
