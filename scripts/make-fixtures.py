#!/usr/bin/env python3
"""Make the model-format fixtures in testdata/ with the real reference writers.

airlock's model checks (src/inspect/) are tested against files written by the real
`safetensors`, `gguf` and `numpy` packages, plus a torch.save-style zip written to PyTorch's
documented layout (torch itself is too heavy to install for tests), and against damaged copies
of them: truncated at several offsets, zero-filled, with trailing bytes, replaced by a Git LFS
pointer or an HTML page, a sharded checkpoint missing a shard, and so on.

Everything is deterministic (fixed seeds, fixed zip timestamps), so the output is checked in
and a re-run reproduces it byte for byte; `--check` verifies that.

    python3 scripts/make-fixtures.py              # venv (if needed) + fixtures
    python3 scripts/make-fixtures.py --venv-only  # just the venv the tests use
    python3 scripts/make-fixtures.py --check      # regenerate elsewhere, compare

The venv is $AIRLOCK_VENV (default <repo>/.venv), with the exact versions pinned in
scripts/requirements-test.txt; it is reused when its pins match.
"""

import argparse
import filecmp
import hashlib
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
REQUIREMENTS = REPO / "scripts" / "requirements-test.txt"
VENV = Path(os.environ.get("AIRLOCK_VENV") or REPO / ".venv")
VENV_PYTHON = VENV / "bin" / "python"
MARKER = VENV / ".airlock-requirements"
SEED = 20240601


# ---------------------------------------------------------------------------------------------
# venv


def ensure_venv():
    """Create the venv and install the pinned packages, unless it already has them."""
    wanted = REQUIREMENTS.read_text()
    if VENV_PYTHON.exists() and MARKER.exists() and MARKER.read_text() == wanted:
        return
    if not VENV_PYTHON.exists():
        print(f"creating venv {VENV}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    print(f"installing {REQUIREMENTS.name} into {VENV}", file=sys.stderr)
    pip = [str(VENV_PYTHON), "-m", "pip", "--disable-pip-version-check", "--quiet"]
    subprocess.run(pip + ["install", "-r", str(REQUIREMENTS)], check=True)
    MARKER.write_text(wanted)


def in_venv():
    return Path(sys.prefix).resolve() == VENV.resolve()


# ---------------------------------------------------------------------------------------------
# helpers


def write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def write_json(path, value):
    write(path, (json.dumps(value, indent=2) + "\n").encode())


def safetensors_bytes(header, data):
    """A safetensors file from a header dict and a data buffer, laid out like the writer does
    (JSON without spaces, padded with spaces to a multiple of 8). For headers the writer would
    refuse to write."""
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def lfs_pointer(data):
    oid = hashlib.sha256(data).hexdigest()
    return (
        "version https://git-lfs.github.com/spec/v1\n"
        f"oid sha256:{oid}\n"
        f"size {len(data)}\n"
    ).encode()


HTML_PAGE = (
    b"<!DOCTYPE html>\n<html>\n<head><title>429 Too Many Requests</title></head>\n"
    b"<body><h1>Too Many Requests</h1><p>You have been rate limited.</p></body>\n</html>\n"
)


# ---------------------------------------------------------------------------------------------
# safetensors


def make_safetensors(out):
    import numpy as np
    from safetensors.numpy import save, save_file

    rng = np.random.default_rng(SEED)
    small = {
        "embed.weight": rng.standard_normal((16, 8)).astype(np.float32),
        "norm.weight": np.ones(8, dtype=np.float16),
        "position_ids": np.arange(16, dtype=np.int64),
        "mask": rng.random(12) > 0.5,
    }
    (out / "valid").mkdir(parents=True, exist_ok=True)
    save_file(small, out / "valid" / "small.safetensors", metadata={"format": "pt"})
    good = (out / "valid" / "small.safetensors").read_bytes()
    n = struct.unpack("<Q", good[:8])[0]

    corrupt = out / "corrupt"
    write(corrupt / "truncated-in-length.safetensors", good[:5])
    write(corrupt / "truncated-in-header.safetensors", good[: 8 + n // 2])
    write(corrupt / "truncated-at-data-start.safetensors", good[: 8 + n])
    write(corrupt / "truncated-in-data.safetensors", good[:-37])
    write(corrupt / "zero-filled.safetensors", bytes(len(good)))
    write(corrupt / "trailing-bytes.safetensors", good + b"\x00" * 13)
    write(corrupt / "lfs-pointer.safetensors", lfs_pointer(good))
    write(corrupt / "html-page.safetensors", HTML_PAGE)
    # Headers the writer refuses to produce, laid out exactly as it would.
    gap = {
        "a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
        "b": {"dtype": "F32", "shape": [2], "data_offsets": [24, 32]},
    }
    write(corrupt / "invalid-offset.safetensors", safetensors_bytes(gap, bytes(32)))
    wrong = {"a": {"dtype": "F16", "shape": [3, 3], "data_offsets": [0, 20]}}
    write(corrupt / "tensor-invalid-info.safetensors", safetensors_bytes(wrong, bytes(20)))

    # A 3-shard checkpoint with its index, as transformers writes one.
    layers = {}
    for i in range(3):
        layers[i] = {
            f"model.layers.{i}.self_attn.q_proj.weight": rng.standard_normal((8, 8)).astype(np.float32),
            f"model.layers.{i}.mlp.up_proj.weight": rng.standard_normal((16, 8)).astype(np.float32),
            f"model.layers.{i}.input_layernorm.weight": np.ones(8, dtype=np.float32),
        }
    layers[0]["model.embed_tokens.weight"] = rng.standard_normal((32, 8)).astype(np.float32)
    layers[2]["model.norm.weight"] = np.ones(8, dtype=np.float32)
    shards, weight_map, total = {}, {}, 0
    for i in range(3):
        name = f"model-{i + 1:05d}-of-00003.safetensors"
        shards[name] = save(layers[i], metadata={"format": "pt"})
        for tensor, array in layers[i].items():
            weight_map[tensor] = name
            total += array.nbytes
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    sets = {
        "valid/sharded": (index, shards),
        "corrupt/missing-shard": (
            index,
            {k: v for k, v in shards.items() if "00002" not in k},
        ),
        "corrupt/wrong-total-size": (
            {"metadata": {"total_size": total + 1000}, "weight_map": index["weight_map"]},
            shards,
        ),
    }
    # Shard 2 re-exported without one tensor the index still assigns to it.
    without = dict(layers[1])
    del without["model.layers.1.mlp.up_proj.weight"]
    sets["corrupt/tensor-missing"] = (
        index,
        {**shards, "model-00002-of-00003.safetensors": save(without, metadata={"format": "pt"})},
    )
    for folder, (index_value, files) in sets.items():
        write_json(out / folder / "model.safetensors.index.json", index_value)
        for name, data in files.items():
            write(out / folder / name, data)


# ---------------------------------------------------------------------------------------------
# GGUF


def make_gguf(out):
    import numpy as np
    import gguf
    from gguf import GGMLQuantizationType as Q

    def build(path, endianess):
        rng = np.random.default_rng(SEED)
        writer = gguf.GGUFWriter(str(path), "llama", endianess=endianess)
        writer.add_name("airlock fixture")
        writer.add_context_length(64)
        writer.add_embedding_length(64)
        writer.add_block_count(1)
        writer.add_head_count(4)
        writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
        writer.add_tokenizer_model("llama")
        writer.add_token_list(["<unk>", "<s>", "</s>"] + [f"tok{i}" for i in range(29)])
        embed = rng.standard_normal((32, 64)).astype(np.float32)
        q_proj = rng.standard_normal((64, 64)).astype(np.float32)
        writer.add_tensor("token_embd.weight", gguf.quants.quantize(embed, Q.Q8_0), raw_dtype=Q.Q8_0)
        writer.add_tensor("blk.0.attn_q.weight", gguf.quants.quantize(q_proj, Q.Q4_0), raw_dtype=Q.Q4_0)
        writer.add_tensor("blk.0.attn_norm.weight", np.ones(64, dtype=np.float32))
        writer.add_tensor("output.weight", rng.standard_normal((32, 64)).astype(np.float16))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()

    (out / "valid").mkdir(parents=True, exist_ok=True)
    build(out / "valid" / "model.gguf", gguf.GGUFEndian.LITTLE)
    build(out / "valid" / "model-big-endian.gguf", gguf.GGUFEndian.BIG)
    good = (out / "valid" / "model.gguf").read_bytes()
    reader = gguf.GGUFReader(out / "valid" / "model.gguf")
    data_start = reader.data_offset
    write(out / "corrupt" / "truncated-in-data.gguf", good[: data_start + 1000])
    write(out / "corrupt" / "truncated-in-metadata.gguf", good[: data_start // 2])


# ---------------------------------------------------------------------------------------------
# Values: NaN, Inf, all-zero and constant tensors, zero-filled regions (airlock's value scan)


def bf16_bits(a):
    """float32 values as bfloat16 bit patterns (round to nearest even), uint16: numpy has no
    bfloat16, so BF16 tensors are written from their raw bits."""
    import numpy as np

    u = np.asarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")


def safetensors_raw(path, tensors):
    """Writes `tensors` (name -> (dtype as the Python binding names it, shape, little-endian
    bytes)) with the real writer, `safetensors.serialize`, for the dtypes numpy lacks."""
    import numpy as np
    from safetensors import TensorSpec, serialize

    keep, specs = [], {}
    for name, (dtype, shape, data) in tensors.items():
        buf = np.frombuffer(bytes(data), dtype=np.uint8).copy()
        keep.append(buf)
        specs[name] = TensorSpec(dtype=dtype, shape=tuple(shape), data_ptr=buf.ctypes.data, data_len=buf.nbytes)
    write(path, bytes(serialize(specs, metadata={"format": "pt"})))


def gguf_file(path, tensors):
    """A GGUF v3 file by gguf.GGUFWriter: (name, array, raw ggml type or None) in order."""
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("airlock value fixture")
    writer.add_block_count(1)
    for name, array, raw in tensors:
        if raw is None:
            writer.add_tensor(name, array)
        else:
            writer.add_tensor(name, array, raw_dtype=raw)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def make_values(out):
    import numpy as np
    from gguf import GGMLQuantizationType as Q
    from gguf import quants
    from safetensors.numpy import save_file

    rng = np.random.default_rng(SEED)
    v = out / "values"
    v.mkdir(parents=True, exist_ok=True)

    def normal(shape, scale=0.02):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    def coarse(shape):
        """Weights from a few values (so the large fixtures stay small in git)."""
        return (np.round(rng.standard_normal(shape) * 4) / 64).astype(np.float32)

    # Healthy: zero biases, padding rows of zeros, norms of one, integer zeros. No finding (the
    # zero biases and norms of one are known-benign: counted, not warned about).
    embed = normal((64, 32))
    embed[60:] = 0
    safetensors_raw(
        v / "healthy" / "model.safetensors",
        {
            "model.embed_tokens.weight": ("bfloat16", (64, 32), bf16_bits(embed).tobytes()),
            "model.layers.0.self_attn.q_proj.weight": ("bfloat16", (32, 32), bf16_bits(normal((32, 32))).tobytes()),
            "model.layers.0.self_attn.q_proj.bias": ("bfloat16", (32,), bytes(64)),
            "model.layers.0.self_attn.k_proj.weight": ("float32", (32, 32), normal((32, 32)).tobytes()),
            "model.layers.0.self_attn.k_proj.bias": ("float32", (32,), bytes(128)),
            "model.layers.0.input_layernorm.weight": ("bfloat16", (32,), bf16_bits(np.ones(32)).tobytes()),
            "model.norm.weight": ("float16", (32,), np.ones(32, dtype="<f2").tobytes()),
            "position_ids": ("int64", (64,), bytes(512)),
        },
    )
    gguf_file(
        v / "healthy" / "model.gguf",
        [
            ("token_embd.weight", quants.quantize(normal((32, 64)), Q.Q8_0), Q.Q8_0),
            ("blk.0.attn_q.weight", quants.quantize(normal((64, 64)), Q.Q4_0), Q.Q4_0),
            ("blk.0.attn_q.bias", np.zeros(64, dtype=np.float16), None),
            ("blk.0.attn_norm.weight", np.ones(64, dtype=np.float32), None),
            ("blk.0.layer_ids", np.zeros(16, dtype=np.int32), None),
            ("output.weight", normal((32, 64)).astype(np.float16), None),
        ],
    )

    # NaN and Inf, one file per dtype: NaN at elements 37 and 200, +Inf at 11, -Inf at 12.
    shape = (16, 16)
    name = "model.layers.0.mlp.up_proj.weight"
    for dtype, numpy_dtype in (("f64", "<f8"), ("f32", "<f4"), ("f16", "<f2")):
        w = normal(shape).astype(numpy_dtype)
        w.flat[[37, 200]] = np.nan
        save_file({name: w}, v / f"nan-{dtype}.safetensors", metadata={"format": "pt"})
        w = normal(shape).astype(numpy_dtype)
        w.flat[11], w.flat[12] = np.inf, -np.inf
        save_file({name: w}, v / f"inf-{dtype}.safetensors", metadata={"format": "pt"})
    w = bf16_bits(normal(shape))
    w.flat[[37, 200]] = 0x7FC0
    safetensors_raw(v / "nan-bf16.safetensors", {name: ("bfloat16", shape, w.tobytes())})
    w = bf16_bits(normal(shape))
    w.flat[11], w.flat[12] = 0x7F80, 0xFF80
    safetensors_raw(v / "inf-bf16.safetensors", {name: ("bfloat16", shape, w.tobytes())})
    # FP8: finite codes with random signs; E4M3 has no infinity (S.1111.111 is its NaN),
    # E5M2 is IEEE-like (S.11111.00 Inf, S.11111.xx NaN).
    for dtype, lo, hi, nan, infs in (
        ("f8_e4m3", 0x20, 0x50, 0x7F, None),
        ("f8_e5m2", 0x30, 0x40, 0x7E, (0x7C, 0xFC)),
    ):
        spelled = {"f8_e4m3": "float8_e4m3fn", "f8_e5m2": "float8_e5m2"}[dtype]
        codes = (rng.integers(lo, hi, 256) | (rng.integers(0, 2, 256) << 7)).astype(np.uint8)
        codes[[37, 200]] = nan
        safetensors_raw(v / f"nan-{dtype}.safetensors", {name: (spelled, shape, codes.tobytes())})
        if infs:
            codes = (rng.integers(lo, hi, 256) | (rng.integers(0, 2, 256) << 7)).astype(np.uint8)
            codes[11], codes[12] = infs
            safetensors_raw(v / f"inf-{dtype}.safetensors", {name: (spelled, shape, codes.tobytes())})

    # All-zero and constant tensors (warnings): a shard of an untrained model.
    save_file(
        {"lm_head.weight": np.zeros((64, 64), dtype=np.float32), "model.norm.weight": np.ones(64, dtype=np.float32)},
        v / "untrained.safetensors",
        metadata={"format": "pt"},
    )

    # Zero-filled regions: 1.5 MiB of zeros from the middle of `a` through `b` into `c`, as a
    # file preallocated and never completely written leaves them. BF16, integers, GGUF F16.
    a, b, c = coarse((256, 1024)), coarse((512, 1024)), coarse((256, 1024))
    bits = np.concatenate([bf16_bits(x).ravel() for x in (a, b, c)])
    bits[128 * 1024 : (256 + 512 + 128) * 1024] = 0
    parts = np.split(bits, [256 * 1024, 768 * 1024])
    safetensors_raw(
        v / "zero-region.safetensors",
        {
            f"model.layers.{i}.mlp.down_proj.weight": ("bfloat16", x.shape, part.tobytes())
            for i, (x, part) in enumerate(zip((a, b, c), parts))
        },
    )
    ints = rng.integers(1, 64, 2 * 262144).astype("<i4")
    ints[65536 : 65536 + 2 * 196608] = 0
    save_file(
        {"a.ids": ints[:131072].copy(), "b.ids": ints[131072:393216].copy(), "c.ids": ints[393216:].copy()},
        v / "zero-region-i32.safetensors",
        metadata={"format": "pt"},
    )
    halves = [coarse((256, 1024)).astype(np.float16) for _ in range(3)]
    flat = np.concatenate([h.ravel() for h in halves])
    flat[128 * 1024 : 640 * 1024] = 0
    gguf_file(
        v / "zero-region.gguf",
        [(f"blk.{i}.ffn_down.weight", flat[i * 262144 : (i + 1) * 262144].reshape(256, 1024), None) for i in range(3)],
    )

    # GGUF: float tensors and the fp16 scales of quantized blocks.
    w = normal((16, 64))
    w.flat[[37, 200]] = np.nan
    gguf_file(v / "nan-f32.gguf", [("blk.0.ffn_up.weight", w, None)])
    gguf_file(v / "nan-f16.gguf", [("blk.0.ffn_up.weight", w.astype(np.float16), None)])
    raw = quants.quantize(normal((16, 64)), Q.BF16)
    raw.view("<u2").flat[[37, 200]] = 0x7FC0
    gguf_file(v / "nan-bf16.gguf", [("blk.0.ffn_up.weight", raw, Q.BF16)])
    w = normal((16, 64))
    w.flat[11], w.flat[12] = np.inf, -np.inf
    gguf_file(v / "inf-f32.gguf", [("blk.0.ffn_up.weight", w, None)])
    # Q8_0 (34-byte blocks of 32 values, d first): block 3's d is NaN.
    q = quants.quantize(normal((16, 64)), Q.Q8_0)
    q.reshape(-1, 34)[3, 0:2] = np.frombuffer(np.array([0x7E00], dtype="<u2").tobytes(), dtype=np.uint8)
    gguf_file(v / "nan-scale-q8_0.gguf", [("blk.0.ffn_up.weight", q, Q.Q8_0)])
    # Q4_K (144-byte blocks of 256 values: d, dmin, 12 scale bytes, 128 quant bytes), made by
    # hand (gguf-py does not quantize K types): block 1's d is +Inf.
    blocks = rng.integers(0, 256, (4, 144)).astype(np.uint8)
    halves = np.array([0x2E66, 0x2C00] * 4, dtype="<u2").reshape(4, 2)
    blocks[:, 0:4] = np.frombuffer(halves.tobytes(), dtype=np.uint8).reshape(4, 4)
    blocks[1, 0:2] = np.frombuffer(np.array([0x7C00], dtype="<u2").tobytes(), dtype=np.uint8)
    gguf_file(v / "inf-scale-q4_k.gguf", [("blk.0.ffn_up.weight", blocks.reshape(4, 144), Q.Q4_K)])


# ---------------------------------------------------------------------------------------------
# PyTorch


def pickle_state_dict(tensors, legacy):
    """Pickle opcodes for a state dict of float32 tensors as torch.save writes it (protocol 2,
    tensors rebuilt by torch._utils._rebuild_tensor_v2 from persistent storage ids), assembled
    by hand because torch is not installed."""

    def text(s):
        b = s.encode()
        return b"X" + struct.pack("<I", len(b)) + b

    def integer(n):
        return b"K" + bytes([n]) if n < 256 else b"J" + struct.pack("<i", n)

    def tup(items):
        return b"(" + b"".join(items) + b"t"

    ordered_dict = b"ccollections\nOrderedDict\n)R"
    out = b"\x80\x02" + ordered_dict + b"("
    for key, (name, shape) in enumerate(tensors):
        numel = 1
        for d in shape:
            numel *= d
        stride, acc = [], 1
        for d in reversed(shape):
            stride.insert(0, acc)
            acc *= d
        storage = [text("storage"), b"ctorch\nFloatStorage\n", text(str(key)), text("cpu"), integer(numel)]
        if legacy:
            storage.append(b"N")
        out += text(name)
        out += b"ctorch._utils\n_rebuild_tensor_v2\n"
        out += tup(
            [
                tup(storage) + b"Q",
                integer(0),
                tup([integer(d) for d in shape]),
                tup([integer(s) for s in stride]),
                b"\x89",
                ordered_dict,
            ]
        )
        out += b"R"
    return out + b"u."


def torch_zip(records):
    """A zip laid out like PyTorchStreamWriter's: stored entries under `archive/`, each local
    header padded with an `FB` extra field so its data starts on a 64-byte boundary, fixed
    timestamps, and the ZIP64 end record + locator that miniz always writes for torch.save
    (python's zipfile writes them only for large archives, so they are added here)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as zf:
        for name, data in records:
            full = f"archive/{name}"
            start = buf.tell() + 30 + len(full.encode()) + 4
            pad = -start % 64
            info = zipfile.ZipInfo(full, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_STORED
            info.create_system = 0
            info.extra = b"FB" + struct.pack("<H", pad) + b"Z" * pad
            zf.writestr(info, data)
    raw = buf.getvalue()
    # Replace the plain end record with ZIP64 end record + locator + end record.
    sig, disk, cd_disk, n_disk, n, cd_size, cd_offset, comment = struct.unpack("<IHHHHIIH", raw[-22:])
    assert sig == 0x06054B50 and comment == 0
    body = raw[:-22]
    eocd64_pos = len(body)
    eocd64 = struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, n, n, cd_size, cd_offset)
    locator = struct.pack("<IIQI", 0x07064B50, 0, eocd64_pos, 1)
    eocd = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, n, n, cd_size, cd_offset, 0)
    out = body + eocd64 + locator + eocd
    for zinfo in zipfile.ZipFile(io.BytesIO(out)).infolist():
        assert (zinfo.header_offset + 30 + len(zinfo.filename) + len(zinfo.extra)) % 64 == 0
    return out


def make_torch(out):
    import numpy as np

    rng = np.random.default_rng(SEED)
    tensors = [("linear.weight", (4, 8)), ("linear.bias", (4,))]
    arrays = [rng.standard_normal(shape).astype("<f4") for _, shape in tensors]
    records = [
        ("data.pkl", pickle_state_dict(tensors, legacy=False)),
        (".format_version", b"1"),
        ("byteorder", b"little"),
    ]
    records += [(f"data/{i}", a.tobytes()) for i, a in enumerate(arrays)]
    records += [("version", b"3\n"), (".data/serialization_id", b"0" * 40)]
    good = torch_zip(records)
    write(out / "valid" / "pytorch_model.bin", good)
    write(out / "corrupt" / "truncated-zip.bin", good[: len(good) // 2])
    write(out / "corrupt" / "html-page.bin", HTML_PAGE)

    # The legacy (pre-1.6) format: pickled magic number, protocol version, system info, the
    # state dict, the storage keys, then each storage's element count and raw bytes.
    import pickle

    legacy = pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2)
    legacy += pickle.dumps(1001, protocol=2)
    legacy += pickle.dumps(
        {"protocol_version": 1001, "little_endian": True, "type_sizes": {"short": 2, "int": 4, "long": 4}},
        protocol=2,
    )
    legacy += pickle_state_dict(tensors, legacy=True)
    legacy += pickle.dumps([str(i) for i in range(len(arrays))], protocol=2)
    for a in arrays:
        legacy += struct.pack("<q", a.size) + a.tobytes()
    write(out / "valid" / "pickle-only.bin", legacy)


# ---------------------------------------------------------------------------------------------
# The README demo's tiny model


def make_tiny_model(out):
    import numpy as np
    from safetensors.numpy import save_file

    vocab, hidden, intermediate, heads, kv_heads = 128, 64, 128, 4, 2
    head_dim = hidden // heads
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_hidden_layers": 1,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": 128,
        "rms_norm_eps": 1e-06,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "float32",
    }
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "config.json", config)
    write_json(
        out / "generation_config.json",
        {"_from_model_config": True, "bos_token_id": 1, "eos_token_id": 2},
    )
    specials = ["<unk>", "<s>", "</s>"]
    words = (
        "the of and to in is was he for it with as his on be at by i this had not are but from "
        "or have an they which one you were her all she there would their we him been has when "
        "who will more no if out so said what up its about into than them can only other new "
        "some could time these two may then do first any my now such like our over man me even "
        "most made after also did many before must through back years where much your way well "
        "down should because each just those people how too little state good very make world "
        "still own see men work long get here between both life being under never day same "
        "another know while last"
    ).split()
    vocab_list = specials + words[: vocab - len(specials)]
    assert len(vocab_list) == vocab, len(vocab_list)
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": i,
                "content": t,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
            for i, t in enumerate(specials)
        ],
        "normalizer": {"type": "Lowercase"},
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": None,
        "decoder": None,
        "model": {
            "type": "WordLevel",
            "vocab": {t: i for i, t in enumerate(vocab_list)},
            "unk_token": "<unk>",
        },
    }
    write_json(out / "tokenizer.json", tokenizer)
    write_json(
        out / "tokenizer" / "special_tokens_map.json",
        {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    )

    rng = np.random.default_rng(SEED)

    def weight(*shape):
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    tensors = {
        "model.embed_tokens.weight": weight(vocab, hidden),
        "model.layers.0.self_attn.q_proj.weight": weight(heads * head_dim, hidden),
        "model.layers.0.self_attn.k_proj.weight": weight(kv_heads * head_dim, hidden),
        "model.layers.0.self_attn.v_proj.weight": weight(kv_heads * head_dim, hidden),
        "model.layers.0.self_attn.o_proj.weight": weight(hidden, heads * head_dim),
        "model.layers.0.mlp.gate_proj.weight": weight(intermediate, hidden),
        "model.layers.0.mlp.up_proj.weight": weight(intermediate, hidden),
        "model.layers.0.mlp.down_proj.weight": weight(hidden, intermediate),
        "model.layers.0.input_layernorm.weight": np.ones(hidden, dtype=np.float32),
        "model.layers.0.post_attention_layernorm.weight": np.ones(hidden, dtype=np.float32),
        "model.norm.weight": np.ones(hidden, dtype=np.float32),
        "lm_head.weight": weight(vocab, hidden),
    }
    save_file(tensors, out / "model.safetensors", metadata={"format": "pt"})


# ---------------------------------------------------------------------------------------------

README = """\
# Model-format fixtures

Made by `scripts/make-fixtures.py` with the real `safetensors`, `gguf` and `numpy` packages
(versions pinned in `scripts/requirements-test.txt`); do not edit by hand, re-run the script.
Deterministic: `python3 scripts/make-fixtures.py --check` regenerates and compares.

`valid/` must pass every check of `airlock::inspect` and load with the reference readers:

| file | what |
|---|---|
| `small.safetensors` | F32, F16, I64 and BOOL tensors, written by `safetensors.numpy.save_file` |
| `sharded/` | a 3-shard safetensors checkpoint with `model.safetensors.index.json` |
| `model.gguf` | GGUF v3 with Q8_0, Q4_0, F32 and F16 tensors and a token list, by `gguf.GGUFWriter` |
| `model-big-endian.gguf` | the same, big-endian (a warning: llama.cpp refuses it on x86/ARM) |
| `pytorch_model.bin` | a torch.save-style zip: stored, 64-byte aligned, ZIP64 end records |
| `pickle-only.bin` | the legacy (pre-1.6) pickle checkpoint layout |

`corrupt/`, each with the finding code it must get:

| file | code |
|---|---|
| `truncated-in-length.safetensors` | `safetensors-header-too-small` |
| `truncated-in-header.safetensors` | `safetensors-header-truncated` |
| `truncated-at-data-start.safetensors` | `safetensors-truncated` |
| `truncated-in-data.safetensors` | `safetensors-truncated` |
| `zero-filled.safetensors` | `safetensors-zero-filled` |
| `trailing-bytes.safetensors` | `safetensors-trailing-bytes` |
| `lfs-pointer.safetensors` | `lfs-pointer` |
| `html-page.safetensors` | `safetensors-header-too-large` |
| `invalid-offset.safetensors` | `safetensors-invalid-offset` |
| `tensor-invalid-info.safetensors` | `safetensors-tensor-invalid-info` |
| `missing-shard/` | `shard-missing` (on the index) |
| `tensor-missing/` | `shard-tensor-missing` (on shard 2) |
| `wrong-total-size/` | `shard-total-size-mismatch` (a warning) |
| `truncated-in-data.gguf` | `gguf-tensor-out-of-bounds` |
| `truncated-in-metadata.gguf` | `gguf-truncated` |
| `truncated-zip.bin` | `torch-zip-no-eocd` |
| `html-page.bin` | `torch-not-a-checkpoint` |

`values/`, for the value scan (`airlock::inspect::values`): headers valid, values wrong. BF16 and
FP8 tensors are written from their raw bits through `safetensors.serialize` (numpy has no such
dtypes); GGUF files by `gguf.GGUFWriter`, Q8_0 blocks by `gguf.quants`, Q4_K blocks by hand.

| file | findings |
|---|---|
| `healthy/model.safetensors` | `tensor-all-zero`, `tensor-constant` (warnings only): zero biases (BF16, F32), zero padding rows in the embedding, norms of one (BF16, F16), integer zeros |
| `healthy/model.gguf` | `tensor-all-zero`, `tensor-constant` (warnings only): Q8_0 and Q4_0 weights, an F16 zero bias, an F32 norm of ones, I32 zeros |
| `untrained.safetensors` | `tensor-all-zero`, `tensor-constant` (warnings) |
| `nan-{f64,f32,f16,bf16,f8_e4m3,f8_e5m2}.safetensors` | `tensor-nan`: NaN at elements 37 and 200 |
| `inf-{f64,f32,f16,bf16,f8_e5m2}.safetensors` | `tensor-inf`: +Inf at element 11, -Inf at 12 (FP8 E4M3 has no infinity) |
| `nan-{f32,f16,bf16}.gguf`, `inf-f32.gguf` | `tensor-nan`, `tensor-inf`, as above |
| `nan-scale-q8_0.gguf` | `tensor-nan`: the fp16 `d` of Q8_0 block 3 is NaN |
| `inf-scale-q4_k.gguf` | `tensor-inf`: the fp16 `d` of Q4_K block 1 is +Inf |
| `zero-region.safetensors`, `zero-region.gguf` | `tensor-zero-region` (and `tensor-all-zero` for the tensor wholly inside it): zeros from the middle of one tensor through the next into a third |
| `zero-region-i32.safetensors` | `tensor-zero-region`: the same across integer tensors |
"""


def normalize_modes(root):
    """safetensors writes through a 0600 temp file; check in ordinary 0644 files."""
    for path in root.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)


def generate(testdata):
    fixtures = testdata / "fixtures"
    tiny = testdata / "tiny-model"
    for d in (fixtures, tiny):
        if d.exists():
            shutil.rmtree(d)
    make_safetensors(fixtures)
    make_gguf(fixtures)
    make_torch(fixtures)
    make_values(fixtures)
    (fixtures / "README.md").write_text(README)
    make_tiny_model(tiny)
    normalize_modes(fixtures)
    normalize_modes(tiny)


def same_tree(a, b):
    cmp = filecmp.dircmp(a, b)
    if cmp.left_only or cmp.right_only or cmp.funny_files:
        return False
    _, mismatch, errors = filecmp.cmpfiles(a, b, cmp.common_files, shallow=False)
    if mismatch or errors:
        return False
    return all(same_tree(a / d, b / d) for d in cmp.common_dirs)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv-only", action="store_true", help="only create/refresh the venv")
    parser.add_argument("--check", action="store_true", help="regenerate elsewhere and compare")
    args = parser.parse_args()

    if not in_venv():
        ensure_venv()
        if args.venv_only:
            return 0
        os.execv(str(VENV_PYTHON), [str(VENV_PYTHON), str(Path(__file__).resolve()), *sys.argv[1:]])
    if args.venv_only:
        return 0

    testdata = REPO / "testdata"
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            generate(Path(tmp))
            for name in ("fixtures", "tiny-model"):
                if not same_tree(Path(tmp) / name, testdata / name):
                    print(f"testdata/{name} differs from what the script makes", file=sys.stderr)
                    return 1
        print("fixtures are up to date", file=sys.stderr)
        return 0
    generate(testdata)
    print(f"wrote {testdata / 'fixtures'} and {testdata / 'tiny-model'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
