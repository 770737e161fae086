"""What is saved is verified on every load, and a failing write leaves nothing partial: bit flips in checkpoints and
exports, fallback to the newest good checkpoint, incomplete and foreign checkpoints, and full, read-only, forbidden
or blocked folders (a real tmpfs where this machine allows mounting one)."""
import errno, os, subprocess
from pathlib import Path
from unittest import mock
import pytest, torch
from conftest import fill
from longctx_nb.config import Config, apply_overrides
from longctx_nb.model import LM
from longctx_nb.checkpoint import (CheckpointError, StorageError, save_checkpoint, read_checkpoint, latest_checkpoint,
                                   find_checkpoint, checkpoint_path, check_same_model, export_model, load_model,
                                   sidecar, rng_state, atomic_write, LEGACY_FORMATS)

def cfg(**ov): return apply_overrides(Config(), {'model.vocab_size': 256, **ov})

def train_state(c, step=1):
    "What the trainer saves, for the default tiny model after one AdamW step."
    torch.manual_seed(step)
    m = LM(c.model)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    m(torch.randint(0, 256, (1, 16))).float().mean().backward(); opt.step()
    return m, dict(model=m.state_dict(), optimizer=opt.state_dict(), scaler={}, rng=rng_state(), rng_ranks=[rng_state()],
                   step=step, tokens_seen=16 * step, global_batch=1, config=c.to_dict())

@pytest.fixture(scope='module')
def state(): return train_state(cfg())

def flip(path, offset):
    b = bytearray(Path(path).read_bytes()); b[offset] ^= 0x01; Path(path).write_bytes(bytes(b))

def leftovers(d): return [p.name for p in Path(d).rglob('*') if p.name.endswith('.tmp')]

def offsets(path, needle: bytes):
    "Offsets to flip: the header, inside the tensor data (where `needle` is), a spread across the file, and the end."
    data = Path(path).read_bytes(); n = len(data); inside = data.find(needle)
    assert inside > 0, 'tensor bytes not found'
    return sorted({0, 1, 30, inside, inside + len(needle) // 2, *range(100, n, max(n // 12, 1)), n - 30, n - 1})

# ---- checkpoints ------------------------------------------------------------------------------------------------

def test_sidecar_is_sha256sum_format(tmp_path, state):
    p = save_checkpoint(checkpoint_path(tmp_path, 1), state[1])
    assert sorted(x.name for x in p.parent.iterdir()) == ['step_0000001.pt', 'step_0000001.pt.sha256']
    subprocess.run(['sha256sum', '-c', '--quiet', sidecar(p).name], cwd=p.parent, check=True)
    assert read_checkpoint(p)['step'] == 1

def test_a_flipped_byte_anywhere_in_a_checkpoint_is_refused(tmp_path, state):
    good = save_checkpoint(tmp_path / 'good.pt', state[1]).read_bytes()
    w = state[1]['model']['embed.weight'].contiguous()
    needle = w.numpy().tobytes()[4096:4160]  # 64 bytes from inside the embedding's data
    p = tmp_path / 'step_0000001.pt'
    save_checkpoint(p, state[1])
    for off in offsets(p, needle):
        p.write_bytes(good); flip(p, off)
        with pytest.raises(CheckpointError) as e: read_checkpoint(p)
        assert str(e.value) == (f"{str(p)!r} is damaged: its SHA-256 does not match step_0000001.pt.sha256 "
                                "(the file changed after it was written)."), off
    # without the digest, the flip inside the tensor data loads silently: the digest is what catches it
    p.write_bytes(good); flip(p, good.find(needle) + 3)
    ck = torch.load(p, weights_only=True)
    assert not torch.equal(ck['model']['embed.weight'], w)

def test_missing_sidecar_and_legacy_checkpoints(tmp_path, state, capsys):
    p = save_checkpoint(tmp_path / 'a.pt', state[1]); sidecar(p).unlink()
    with pytest.raises(CheckpointError, match=r"has no a\.pt\.sha256: its SHA-256 sidecar is missing"): read_checkpoint(p)
    sidecar(p).write_text('not a digest\n')
    with pytest.raises(CheckpointError, match='cannot be verified'): read_checkpoint(p)
    old = tmp_path / 'old.pt'   # written by an older version: format /1, no sidecar: loaded, loudly
    torch.save({'format': LEGACY_FORMATS[0], **state[1]}, old)
    assert read_checkpoint(old)['step'] == 1
    assert capsys.readouterr().err == (f"warning: {str(old)!r} was written by an older longctx_nb, without a digest: its content "
                                       "CANNOT be verified and is loaded as is. If you trust it, `sha256sum old.pt > old.pt.sha256` "
                                       "in its folder vouches for it.\n")
    subprocess.run('sha256sum old.pt > old.pt.sha256', shell=True, cwd=tmp_path, check=True)  # vouched for: silent
    read_checkpoint(old); assert capsys.readouterr().err == ''

def test_incomplete_checkpoint_is_a_checkpoint_error(tmp_path, state):
    for drop in ('model', 'optimizer', 'step', 'config'):
        p = save_checkpoint(tmp_path / f'no_{drop}.pt', {k: v for k, v in state[1].items() if k != drop})
        with pytest.raises(CheckpointError, match=f"it lacks {drop}"): read_checkpoint(p)
    p = save_checkpoint(tmp_path / 'no_model_cfg.pt', {**state[1], 'config': {'data': {}}})
    with pytest.raises(CheckpointError, match=r"it lacks config\.model"): read_checkpoint(p)

def test_unreadable_message_has_no_weights_only_advice(tmp_path):
    p = tmp_path / 'evil.pt'
    p.write_bytes(b"cos\nsystem\n(S'touch " + str(tmp_path / 'pwned').encode() + b"'\ntR.")
    with pytest.raises(CheckpointError) as e: read_checkpoint(p)
    assert 'not a readable checkpoint' in str(e.value) and 'weights_only' not in str(e.value), str(e.value)
    assert not (tmp_path / 'pwned').exists()

def test_latest_falls_back_to_the_newest_good_one(tmp_path, state, capsys):
    for s in (2, 4, 6): save_checkpoint(checkpoint_path(tmp_path, s), {**state[1], 'step': s})
    newest = checkpoint_path(tmp_path, 6); flip(newest, newest.stat().st_size // 2)
    path, ck = latest_checkpoint(tmp_path)
    assert (path.name, ck['step']) == ('step_0000004.pt', 4)
    assert capsys.readouterr().err == (f"warning: skipping checkpoint step_0000006.pt: {str(newest)!r} is damaged: its SHA-256 "
                                       "does not match step_0000006.pt.sha256 (the file changed after it was written).\n")
    found, skipped = find_checkpoint(tmp_path)
    assert found[0].name == 'step_0000004.pt' and [(p.name, 'is damaged' in why) for p, why in skipped] == [('step_0000006.pt', True)]
    for s in (2, 4): flip(checkpoint_path(tmp_path, s), 0)
    found, skipped = find_checkpoint(tmp_path)
    assert found is None and [p.name for p, _ in skipped] == ['step_0000006.pt', 'step_0000004.pt', 'step_0000002.pt']

def test_checkpoint_of_another_model_is_skipped_naming_the_fields(tmp_path, state):
    small = cfg(**{'model.d_model': 64, 'model.n_heads': 2})
    save_checkpoint(checkpoint_path(tmp_path, 2), {**state[1], 'step': 2})                       # this run's model
    save_checkpoint(checkpoint_path(tmp_path, 4), {**train_state(small, 4)[1]})                   # another model, newer
    this = cfg()
    found, skipped = find_checkpoint(tmp_path, accept=lambda ck: check_same_model(ck['config'], this.model))
    assert found[0].name == 'step_0000002.pt'
    assert skipped[0][0].name == 'step_0000004.pt' and 'model.d_model: checkpoint 64, this run 128' in skipped[0][1], skipped

# ---- exports ----------------------------------------------------------------------------------------------------

def test_export_verifies_and_refuses_damage(tmp_path, state):
    m = state[0]; d = tmp_path / 'export'
    export_model(m, d)
    assert sorted(x.name for x in d.iterdir()) == ['SHA256SUMS', 'model.safetensors', 'model_config.json']
    subprocess.run(['sha256sum', '-c', '--quiet', 'SHA256SUMS'], cwd=d, check=True)
    x = torch.randint(0, 256, (1, 8))
    with torch.no_grad(): assert torch.equal(load_model(d)(x), m(x))
    st, good = d / 'model.safetensors', (d / 'model.safetensors').read_bytes()
    needle = m.state_dict()['embed.weight'].contiguous().numpy().tobytes()[4096:4160]
    for off in offsets(st, needle):
        st.write_bytes(good); flip(st, off)
        with pytest.raises(CheckpointError) as e: load_model(d)
        assert str(e.value) == f"{str(st)!r} is damaged: its SHA-256 does not match SHA256SUMS.", off
    st.write_bytes(good); load_model(d)
    cj = d / 'model_config.json'; cj.write_text(cj.read_text().replace('"n_layers": ', '"n_layers":'))
    with pytest.raises(CheckpointError, match=r"model_config\.json' is damaged"): load_model(d)
    (d / 'SHA256SUMS').unlink()
    with pytest.raises(CheckpointError, match="has no SHA256SUMS: the export's digests are missing"): load_model(d)

def test_export_covers_tokenizer_and_legacy_export_warns(tmp_path, state, capsys):
    d = tmp_path / 'run'; d.mkdir(); (d / 'tokenizer.json').write_text('{"model": {}}\n')
    export_model(state[0], d)
    assert 'tokenizer.json' in (d / 'SHA256SUMS').read_text()
    (d / 'tokenizer.json').write_text('{"model": {"x": 1}}\n')
    with pytest.raises(CheckpointError, match=r"tokenizer\.json' is damaged"): load_model(d)
    from safetensors.torch import save_model   # an export by an older version: no SHA256SUMS, no format tag
    old = tmp_path / 'old'; old.mkdir(); save_model(state[0], str(old / 'model.safetensors'))
    (old / 'model_config.json').write_text((d / 'model_config.json').read_text())
    load_model(old)
    assert "exported by an older longctx_nb, without SHA256SUMS: its content CANNOT be verified" in capsys.readouterr().err

# ---- errors of the file system ----------------------------------------------------------------------------------

def small_state():
    c = cfg(**{'model.d_model': 32, 'model.n_heads': 2, 'model.n_layers': 1})
    return train_state(c, 1)

def test_disk_full_checkpoint_and_export(tmpfs):
    m, st = small_state()
    run = tmpfs / 'run'
    prev = save_checkpoint(checkpoint_path(run, 1), st)
    export_model(m, run)
    fill(tmpfs)
    with pytest.raises(StorageError) as e: save_checkpoint(checkpoint_path(run, 2), {**st, 'step': 2})
    assert str(e.value).startswith(f"cannot write {str(checkpoint_path(run, 2))!r}: No space left on device [ENOSPC]; "
                                   "the disk is full"), str(e.value)
    assert leftovers(tmpfs) == [] and not checkpoint_path(run, 2).exists() and not sidecar(checkpoint_path(run, 2)).exists()
    assert read_checkpoint(prev)['step'] == 1
    msg = str(e.value.with_checkpoint(prev))
    assert msg.endswith(f"The newest good checkpoint is {prev}; continue with --resume once fixed.") and e.value.checkpoint == prev
    with pytest.raises(StorageError, match='No space left on device'): export_model(LM(cfg(**{'model.d_model': 32, 'model.n_heads': 2, 'model.n_layers': 2}).model), run)
    assert leftovers(tmpfs) == []
    load_model(run)   # the previous export still verifies
    with pytest.raises(StorageError, match='No space left'): atomic_write(run / 'config.json', '{}' * 2_000_000)
    assert leftovers(tmpfs) == [] and not (run / 'config.json').exists()

def test_read_only_file_system(tmpfs):
    m, st = small_state()
    run = tmpfs / 'run'
    prev = save_checkpoint(checkpoint_path(run, 1), st)
    subprocess.run(['mount', '-o', 'remount,ro', str(tmpfs)], check=True)
    with pytest.raises(StorageError) as e: save_checkpoint(checkpoint_path(run, 2), st)
    assert 'Read-only file system [EROFS]; the file system is read-only' in str(e.value)
    with pytest.raises(StorageError, match=r'Read-only file system \[EROFS\]'): export_model(m, run)
    with pytest.raises(StorageError, match='Read-only'): save_checkpoint(tmpfs / 'new' / 'step_0000001.pt', st)  # mkdir
    assert leftovers(tmpfs) == [] and read_checkpoint(prev)['step'] == 1

def test_permission_denied(tmp_path):
    "Root ignores permissions, so the system's answer is simulated where the file is opened."
    _, st = small_state()
    prev = save_checkpoint(checkpoint_path(tmp_path, 1), st)
    real = open
    def deny(p, *a, **k):
        if str(p).endswith('.tmp'): raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(p))
        return real(p, *a, **k)
    with mock.patch('builtins.open', deny):
        with pytest.raises(StorageError) as e: save_checkpoint(checkpoint_path(tmp_path, 2), st)
    assert 'Permission denied [EACCES]; no permission to write there' in str(e.value)
    with mock.patch('os.replace', side_effect=OSError(errno.EACCES, 'Permission denied')):
        with pytest.raises(StorageError, match=r'Permission denied \[EACCES\]'): save_checkpoint(checkpoint_path(tmp_path, 3), st)
    assert leftovers(tmp_path) == [] and not checkpoint_path(tmp_path, 3).exists() and read_checkpoint(prev)['step'] == 1

def test_a_file_where_a_folder_is_expected(tmp_path):
    m, st = small_state()
    (tmp_path / 'runs').write_text('not a folder')
    for path in (tmp_path / 'runs' / 'checkpoints' / 'step_0000001.pt', tmp_path / 'runs' / 'step_0000001.pt'):
        with pytest.raises(StorageError) as e: save_checkpoint(path, st)
        assert f"({str(tmp_path / 'runs')!r} is a file); a file stands where a folder is expected" in str(e.value), str(e.value)
    with pytest.raises(StorageError, match='is a file'): export_model(m, tmp_path / 'runs')
    assert leftovers(tmp_path) == []
