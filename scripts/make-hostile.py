#!/usr/bin/env python3
"""Regenerates testdata/hostile/: one complete, validly signed bundle per hostile case.

Why this exists: a signature only says who wrote a manifest, not that they were honest (THREATS.md,
"the signer's machine was compromised"). Every bundle made here carries a manifest that is signed
with testdata/keys/test.key and, unless the case is about the manifest itself, passes
`Manifest::validate` and matches its volumes byte for byte. The one defect in each bundle is the
hostile one, so `airlock verify --deep` and `airlock unpack` have to find it in the stream.

Tar entries are built here at the byte level (512-byte ustar headers, checksums, PAX records),
never with Python's tarfile, so that the bytes are exactly the ones each case needs. The rules
the honest writer follows are copied from src/tar.rs and src/manifest.rs (`entry_stream_size`);
if those change, change them here too and regenerate.

Usage: scripts/make-hostile.py [--out DIR] [--only CASE...]
  --out   where to write (default: testdata/hostile beside this script); old case directories
          there are removed first unless --only is given
  --only  regenerate just these cases (README.md is always rewritten)
Needs: python3 (stdlib only), `zstd` and `minisign` on PATH. The output is deterministic: the same
inputs, zstd and minisign produce the same bytes (Ed25519 signatures are deterministic).

Cases are in CASES below; testdata/hostile/README.md is written from the same table, and
tests/it/hostile.rs holds one #[test] per case.
"""

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KEY = ROOT / "testdata" / "keys" / "test.key"

BLOCK = 512
USTAR_MAX_SIZE = 0o77777777777
CHUNK_SIZE = 4096  # the smallest chunk_size the validator accepts: several digests per volume
CREATED = "2026-01-01T00:00:00Z"  # SOURCE_DATE_EPOCH=1767225600
TOOL = "airlock 0.1.0 (scripts/make-hostile.py)"
NAME = "hostile-fixture"
VERSION = 1

# ---------------------------------------------------------------------------------------------
# tar, byte by byte


def b(s):
    return s.encode("utf-8") if isinstance(s, str) else s


def octal(value, width):
    """`width` bytes: zero-padded octal digits and a NUL, as the writer emits them."""
    return b"%0*o" % (width - 1, value) + b"\0"


def header(
    name=b"",
    *,
    prefix=b"",
    mode=0o644,
    uid=0,
    gid=0,
    size=0,
    mtime=0,
    typeflag=b"0",
    linkname=b"",
    magic=b"ustar\0",
    version=b"00",
    uname=b"",
    gname=b"",
    devmajor=0,
    devminor=0,
    size_field=None,
    tail=b"",
    checksum_delta=0,
):
    """One 512-byte header with every field as given and a correct checksum (plus
    `checksum_delta`, for the case that wants a wrong one)."""
    name, prefix, linkname, uname, gname = b(name), b(prefix), b(linkname), b(uname), b(gname)
    assert len(name) <= 100 and len(prefix) <= 155 and len(linkname) <= 100
    h = bytearray(BLOCK)
    h[0 : len(name)] = name
    h[100:108] = octal(mode, 8)
    h[108:116] = octal(uid, 8)
    h[116:124] = octal(gid, 8)
    h[124:136] = size_field if size_field is not None else octal(size, 12)
    h[136:148] = octal(mtime, 12)
    h[156:157] = typeflag
    h[157 : 157 + len(linkname)] = linkname
    h[257:263] = magic
    h[263:265] = version
    h[265 : 265 + len(uname)] = uname
    h[297 : 297 + len(gname)] = gname
    h[329:337] = octal(devmajor, 8)
    h[337:345] = octal(devminor, 8)
    h[345 : 345 + len(prefix)] = prefix
    h[500 : 500 + len(tail)] = tail
    h[148:156] = b" " * 8
    h[148:156] = b"%06o\0 " % (sum(h) + checksum_delta)
    return bytes(h)


def pad(data):
    return data + b"\0" * ((-len(data)) % BLOCK)


def pax_record(key, value):
    """`"<len> <key>=<value>\\n"` where <len> counts the whole record, itself included."""
    body = b" " + b(key) + b"=" + b(value) + b"\n"
    length = len(body) + 1
    while len(str(length)) + len(body) != length:
        length = len(str(length)) + len(body)
    return str(length).encode() + body


def pax_header(records, *, typeflag=b"x", size=None):
    """A PAX extended header entry carrying `records` (bytes)."""
    n = len(records) if size is None else size
    return header("././@PaxHeader", size=n, typeflag=typeflag) + pad(records)


def split_ustar(path):
    """src/tar.rs `split_ustar`: (prefix, name) if the path fits the ustar fields."""
    if len(path) <= 100:
        return b"", path
    start = max(len(path) - 101, 0)
    for i in range(start, min(len(path), 156)):
        if path[i : i + 1] == b"/" and i <= 155 and len(path) - i - 1 <= 100 and i > 0:
            return path[:i], path[i + 1 :]
    return None


def pax_record_len(key, value_len):
    body = 3 + len(key) + value_len
    length = body + 1
    while len(str(length)) + body != length:
        length = len(str(length)) + body
    return length


def entry_stream_size(path, is_dir, size):
    """src/manifest.rs `entry_stream_size`: bytes the honest writer emits for one entry."""
    stored = b(path) + (b"/" if is_dir else b"")
    pax_len = 0
    if split_ustar(stored) is None:
        pax_len += pax_record_len("path", len(stored))
    if size > USTAR_MAX_SIZE:
        pax_len += pax_record_len("size", len(str(size)))
    total = BLOCK + -(-size // BLOCK) * BLOCK
    if pax_len:
        total += BLOCK + -(-pax_len // BLOCK) * BLOCK
    return total


def honest_headers(path, is_dir, size, executable, **overrides):
    """The headers the writer emits for one entry (PAX `path` only when it must), with any
    header field overridden."""
    stored = b(path) + (b"/" if is_dir else b"")
    out = b""
    split = split_ustar(stored)
    if split is None:
        out += pax_header(pax_record("path", stored))
        cut = len(stored) - 100
        while cut < len(stored) and (stored[cut] & 0xC0) == 0x80:
            cut += 1
        prefix, name = b"", stored[cut:]
    else:
        prefix, name = split
    fields = dict(
        name=name,
        prefix=prefix,
        mode=0o755 if (is_dir or executable) else 0o644,
        size=size,
        typeflag=b"5" if is_dir else b"0",
    )
    fields.update(overrides)
    return out + header(**fields)


def tar_dir(path, **overrides):
    return honest_headers(path, True, 0, False, **overrides)


def tar_file(path, data, executable=False, **overrides):
    return honest_headers(path, False, len(data), executable, **overrides) + pad(data)


END = b"\0" * (2 * BLOCK)

# ---------------------------------------------------------------------------------------------
# the model every case starts from


def weights(n=5000, seed=1):
    out = bytearray()
    x = seed
    while len(out) < n:
        x = (x * 6364136223846793005 + 1442695040888963407) % 2**64
        out += (x >> 33).to_bytes(4, "little")
    return bytes(out[:n])


CONFIG = b'{\n  "model_type": "hostile-fixture",\n  "hidden_size": 8\n}\n'
WEIGHTS = weights()
TOKENIZER = b'{"version": "1.0", "vocab": {"a": 0, "b": 1}}\n'


@dataclass
class Ent:
    kind: str  # "dir" or "file"
    path: str
    data: bytes = b""
    executable: bool = False

    def tar(self, **overrides):
        if self.kind == "dir":
            return tar_dir(self.path, **overrides)
        return tar_file(self.path, self.data, self.executable, **overrides)


def D(path):
    return Ent("dir", path)


def F(path, data=b"", executable=False):
    return Ent("file", path, data, executable)


BASE = [F("config.json", CONFIG), D("sub"), F("sub/weights.bin", WEIGHTS), F("tokenizer.json", TOKENIZER)]


def order_key(e):
    """src/paths.rs `bundle_order`: component by component, as bytes."""
    return tuple(b(e.path).split(b"/"))


def ordered(entries):
    return sorted(entries, key=order_key)


def honest_tar(entries):
    return b"".join(e.tar() for e in ordered(entries)) + END


# ---------------------------------------------------------------------------------------------
# a bundle


@dataclass
class Bundle:
    manifest: list  # Ent list: what the manifest lists
    tar: object  # bytes, or a callable yielding chunks (for streams too large to hold)
    compression: str = "zstd"
    after_compress: object = None  # bytes -> bytes, applied to the compressed stream
    volume_size: int = 0  # 0: one volume
    sha_override: dict = field(default_factory=dict)  # path -> sha256 hex in the manifest
    keep_order: bool = False  # list the manifest entries as given, not sorted


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def compress(chunks, algorithm):
    """Returns (compressed bytes, uncompressed length). Goes through temp files so that a
    gigabyte-sized bomb never sits in memory."""
    with tempfile.TemporaryFile() as raw, tempfile.TemporaryFile() as out:
        n = 0
        for c in chunks:
            raw.write(c)
            n += len(c)
        raw.seek(0)
        if algorithm == "none":
            return raw.read(), n
        subprocess.run(["zstd", "-q", "-c", "-3", "--no-progress"], stdin=raw, stdout=out, check=True)
        out.seek(0)
        return out.read(), n


def write_bundle(dest, bundle):
    entries = bundle.manifest if bundle.keep_order else ordered(bundle.manifest)
    dirs = [e.path for e in entries if e.kind == "dir"]
    files = [e for e in entries if e.kind == "file"]
    stream_size = 2 * BLOCK + sum(entry_stream_size(e.path, e.kind == "dir", len(e.data)) for e in entries)
    tar = bundle.tar
    chunks = tar() if callable(tar) else [tar]
    data, tar_len = compress(chunks, bundle.compression)
    if bundle.after_compress:
        data = bundle.after_compress(data)
    vsize = bundle.volume_size or len(data)
    pieces = [data[i : i + vsize] for i in range(0, len(data), vsize)]
    width = max(3, len(str(len(pieces) - 1)))
    volumes = []
    dest.mkdir(parents=True)
    for i, piece in enumerate(pieces):
        vname = "data.%0*d" % (width, i)
        (dest / vname).write_bytes(piece)
        volumes.append(
            {
                "name": vname,
                "size": len(piece),
                "sha256": sha256(piece),
                "chunks": [sha256(piece[j : j + CHUNK_SIZE]) for j in range(0, len(piece), CHUNK_SIZE)],
            }
        )
    compression = {"algorithm": bundle.compression}
    if bundle.compression == "zstd":
        compression["level"] = 3
    manifest = {
        "format": "airlock-bundle",
        "format_version": 1,
        "name": NAME,
        "version": VERSION,
        "created": CREATED,
        "tool": TOOL,
        "compression": compression,
        "stream": {"size": stream_size},
        "chunk_size": CHUNK_SIZE,
        "volumes": volumes,
        "directories": dirs,
        "files": [
            {
                "path": f.path,
                "size": len(f.data),
                "sha256": bundle.sha_override.get(f.path, sha256(f.data)),
                "executable": f.executable,
            }
            for f in files
        ],
        "totals": {
            "files": len(files),
            "directories": len(dirs),
            "file_bytes": sum(len(f.data) for f in files),
            "volume_bytes": len(data),
        },
    }
    mbytes = (json.dumps(manifest, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    (dest / "manifest.json").write_bytes(mbytes)
    comment = "airlock manifest_sha256=%s version=%d name=%s" % (sha256(mbytes), VERSION, NAME)
    subprocess.run(
        [
            "minisign", "-S", "-s", str(KEY), "-m", str(dest / "manifest.json"),
            "-x", str(dest / "manifest.json.minisig"),
            "-c", "signature from airlock secret key", "-t", comment,
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        check=True,
        timeout=30,
    )
    for p in dest.iterdir():
        os.chmod(p, 0o644)
    return stream_size, tar_len


# ---------------------------------------------------------------------------------------------
# the cases

CASES = []  # (name, layer, what, unpack exit code, message fragment, builder)


def case(name, layer, what, fragment, code=3):
    """Registers a case. layer: "control" (must pass), "manifest" (the signed manifest itself is
    hostile; `Manifest::validate` refuses it) or "stream" (manifest clean, stream hostile:
    plain `verify` passes, `verify --deep` and `unpack` refuse)."""

    def register(fn):
        CASES.append((name, layer, what, code, fragment, fn))
        return fn

    return register


def with_entry(extra, base=BASE):
    return base + [extra]


def tar_with(entries, replace=None, insert_before=None, drop=None, end=END):
    """The honest stream of `entries` (sorted), with the entry at path `replace[0]` replaced by
    the bytes `replace[1]`, `insert_before=(path, bytes)` inserted, `drop` left out."""
    out = b""
    for e in ordered(entries):
        if insert_before and e.path == insert_before[0]:
            out += insert_before[1]
        if drop and e.path == drop:
            continue
        if replace and e.path == replace[0]:
            out += replace[1]
        else:
            out += e.tar()
    return out + end


@case("control-good", "control", "an honest bundle made by this script (zstd): must verify and unpack", "")
def _():
    return Bundle(BASE, honest_tar(BASE))


@case("control-good-uncompressed", "control", "an honest bundle, compression none", "")
def _():
    return Bundle(BASE, honest_tar(BASE), compression="none")


@case("control-good-multivolume", "control", "an honest bundle, uncompressed, cut into 7400-byte volumes", "")
def _():
    return Bundle(BASE, honest_tar(BASE), compression="none", volume_size=7400)


@case("control-good-long-names", "control", "an honest bundle with a prefix-split name and a PAX path", "")
def _():
    ents = BASE + [F("sub/" + "x" * 100, b"split"), F("sub/" + "y" * 198, b"pax")]
    return Bundle(ents, honest_tar(ents))


# Paths. Each gets two bundles: `<case>` whose signed manifest lists the hostile path (the
# validator must refuse it before any volume is read), and `<case>-tar-only` whose manifest lists
# a clean placeholder of the same kind and stream size while the tar entry carries the hostile
# path (the stream reader must refuse it). The hostile entry comes second in the stream, after
# config.json has already been written to the staging tree.
PATHS = [
    # name, hostile path, kind, what, fragment (tar-only), placeholder
    ("dotdot", "../evil.txt", "file", "'..' as the first component", "'..' component"),
    ("dotdot-deep", "sub/../../evil.txt", "file", "'..' climbing out through a real directory", "'..' component"),
    ("dotdot-dir", "../evil", "dir", "a directory entry '../evil/'", "'..' component"),
    ("absolute", "/tmp/airlock-hostile/absolute.txt", "file", "an absolute path", "absolute path"),
    ("double-slash", "sub//evil.txt", "file", "'//' inside a path", "empty component"),
    ("leading-double-slash", "//tmp/airlock-hostile/evil.txt", "file", "'//' at the start (POSIX-implementation-defined root)", "absolute path"),
    ("backslash-unc", "\\\\?\\C:\\evil.txt", "file", "a Windows \\\\?\\ long path", "backslash"),
    ("backslash-dotdot", "..\\evil.txt", "file", "'..\\' (a Windows separator)", "backslash"),
    ("drive-letter", "C:/evil.txt", "file", "a Windows drive letter", "':'"),
    ("device-com1", "COM1", "file", "the Windows device name COM1", "Windows device name"),
    ("device-nul", "sub/NUL.txt", "file", "the Windows device name NUL (with an extension, still the device)", "Windows device name"),
    ("empty-name", "", "file", "a file entry with an empty name", "empty name"),
    ("dot-alone", ".", "dir", "a directory entry '.' ('./' in the tar)", "'.' component"),
    ("cr-in-name", "evil\r.txt", "file", "a CR inside a name", "control character"),
    ("lf-in-name", "evil\n.txt", "file", "an LF inside a name", "control character"),
    ("trailing-dot", "evil.txt.", "file", "a name ending in '.', which Windows strips", "ending in a space or dot"),
    ("receipt-name", ".airlock", "dir", "the reserved receipt directory '.airlock' (would forge the receipt)", "reserved"),
]


def path_case(name, hostile, kind, what, fragment):
    placeholder = "evil" if kind == "dir" else "evil.txt"
    mk = D if kind == "dir" else F
    data = b"" if kind == "dir" else b"evil\n"

    @case(name, "manifest", "signed manifest lists %s: %r" % (what, hostile), "unsafe path")
    def _():
        ents = with_entry(mk(hostile, data) if kind == "file" else mk(hostile))
        return Bundle(ents, honest_tar(ents))

    @case(name + "-tar-only", "stream", "manifest clean (%r); the tar entry is %s: %r" % (placeholder, what, hostile), fragment)
    def _():
        ents = with_entry(mk(placeholder, data) if kind == "file" else mk(placeholder))
        evil = mk(hostile, data) if kind == "file" else mk(hostile)
        return Bundle(ents, tar_with(ents, replace=(placeholder, evil.tar())))


for p in PATHS:
    path_case(*p)

LONG = "sub/" + "y" * 198  # unsplittable (last component > 100 bytes): the writer uses PAX path


@case("nul-in-name", "manifest", "signed manifest lists a path with a NUL byte: 'evil\\0.txt'", "unsafe path")
def _():
    ents = with_entry(F("evil\0.txt", b"evil\n"))
    return Bundle(ents, honest_tar(ents))


@case(
    "nul-in-name-tar-only",
    "stream",
    "manifest clean; a PAX path carries a NUL byte (ustar cannot), same length as the listed long name",
    "control character",
)
def _():
    ents = with_entry(F(LONG, b"evil\n"))
    hostile = "sub/" + "y" * 97 + "\0" + "y" * 100
    assert len(hostile) == len(LONG)
    evil = pax_header(pax_record("path", hostile)) + header("y" * 100, size=5) + pad(b"evil\n")
    return Bundle(ents, tar_with(ents, replace=(LONG, evil)))


@case("dotdot-in-pax-path", "manifest", "signed manifest lists '../yyy…' (202 bytes, needs a PAX path)", "unsafe path")
def _():
    ents = with_entry(F("../" + "y" * 199, b"evil\n"))
    return Bundle(ents, honest_tar(ents))


@case(
    "dotdot-in-pax-path-tar-only",
    "stream",
    "manifest clean ('sub/yyy…', 202 bytes); the PAX path is '../yyy…' of the same length and its ustar name is the honest 100-byte tail",
    "'..' component",
)
def _():
    ents = with_entry(F(LONG, b"evil\n"))
    hostile = "../" + "y" * 199
    evil = pax_header(pax_record("path", hostile)) + header("y" * 100, size=5) + pad(b"evil\n")
    return Bundle(ents, tar_with(ents, replace=(LONG, evil)))


@case("dotdot-in-ustar-prefix", "manifest", "signed manifest lists '../xxx…' (103 bytes, split into ustar prefix '..' and a full 100-byte name)", "unsafe path")
def _():
    ents = with_entry(F("../" + "x" * 100, b"evil\n"))
    return Bundle(ents, honest_tar(ents))


@case(
    "dotdot-in-ustar-prefix-tar-only",
    "stream",
    "manifest clean ('sub/xxx…'); the ustar prefix field is '..' and the name field is 100 bytes with no NUL",
    "'..' component",
)
def _():
    placeholder = "sub/" + "x" * 100
    ents = with_entry(F(placeholder, b"evil\n"))
    evil = header("x" * 100, prefix="..", size=5) + pad(b"evil\n")
    return Bundle(ents, tar_with(ents, replace=(placeholder, evil)))


@case(
    "dotdot-across-prefix-split",
    "stream",
    "manifest clean ('sub/zzz…'); prefix 'sub' is innocent, the 100-byte name field (no NUL) starts with '../'",
    "'..' component",
)
def _():
    placeholder = "sub/" + "z" * 100
    ents = with_entry(F(placeholder, b"evil\n"))
    evil = header("../" + "z" * 97, prefix="sub", size=5) + pad(b"evil\n")
    return Bundle(ents, tar_with(ents, replace=(placeholder, evil)))


@case(
    "dotdot-at-name-boundary",
    "stream",
    "manifest clean; the 100-byte name field (no NUL terminator) ends in '/..' right where the mode field starts",
    "'..' component",
)
def _():
    placeholder = "sub/" + "w" * 96
    ents = with_entry(F(placeholder, b"evil\n"))
    evil = header("sub/" + "w" * 93 + "/..", size=5) + pad(b"evil\n")
    assert len("sub/" + "w" * 93 + "/..") == 100
    return Bundle(ents, tar_with(ents, replace=(placeholder, evil)))


@case(
    "dotdot-across-volume-boundary",
    "stream",
    "manifest clean, uncompressed, 7400-byte volumes; the '../tokenizer.json' header straddles data.000/data.001",
    "'..' component",
)
def _():
    evil = F("../tokenizer.json", TOKENIZER).tar()
    return Bundle(BASE, tar_with(BASE, replace=("tokenizer.json", evil)), compression="none", volume_size=7400)


@case("dotdot-tar-only-uncompressed", "stream", "as dotdot-tar-only, compression none (the stream reader without zstd)", "'..' component")
def _():
    ents = with_entry(F("evil.txt", b"evil\n"))
    return Bundle(ents, tar_with(ents, replace=("evil.txt", F("../evil.txt", b"evil\n").tar())), compression="none")


# GNU long names: bundles use PAX, so any GNU 'L'/'K' record is refused.
def gnu_record(flag, value):
    value = b(value) + b"\0"
    return header("././@LongLink", size=len(value), typeflag=flag) + pad(value)


@case("gnu-longname", "stream", "manifest clean ('sub/yyy…'); the stream names it with a GNU 'L' long-name record instead of PAX", "GNU long-name")
def _():
    ents = with_entry(F(LONG, b"long\n"))
    evil = gnu_record(b"L", LONG) + header("y" * 100, size=5) + pad(b"long\n")
    return Bundle(ents, tar_with(ents, replace=(LONG, evil)))


@case("gnu-longname-dotdot", "stream", "manifest clean; a GNU 'L' record says '../yyy…' (traversal hidden in a GNU long name)", "GNU long-name")
def _():
    ents = with_entry(F(LONG, b"evil\n"))
    evil = gnu_record(b"L", "../" + "y" * 199) + header("y" * 100, size=5) + pad(b"evil\n")
    return Bundle(ents, tar_with(ents, replace=(LONG, evil)))


@case(
    "gnu-longname-orphan",
    "stream",
    "manifest clean; a GNU 'L' record followed by another 'L' record and then the end of the archive (never a real entry: TARmageddon desync)",
    "GNU long-name",
)
def _():
    evil = gnu_record(b"L", "../evil.txt") + gnu_record(b"L", "../evil2.txt")
    return Bundle(BASE, tar_with(BASE, replace=("tokenizer.json", evil)))


@case("gnu-longlink", "stream", "manifest clean; a GNU 'K' long-link record before a file entry", "GNU long-name")
def _():
    evil = gnu_record(b"K", "/etc/passwd") + F("tokenizer.json", TOKENIZER).tar()
    return Bundle(BASE, tar_with(BASE, replace=("tokenizer.json", evil)))


# Links, devices, FIFOs, sparse files, odd modes. The manifest can only say "file" or
# "directory", so these are stream cases: the manifest lists the name as what it should be.
@case("symlink", "stream", "manifest lists tokenizer.json as a file; the tar has a symlink tokenizer.json -> /etc/passwd", "symbolic link")
def _():
    evil = header("tokenizer.json", typeflag=b"2", mode=0o777, linkname="/etc/passwd")
    return Bundle(BASE, tar_with(BASE, replace=("tokenizer.json", evil)))


@case(
    "symlink-then-file",
    "stream",
    "manifest clean; the tar has sub as a symlink to ../outside, then sub/weights.bin written through it",
    "symbolic link",
)
def _():
    evil = header("sub", typeflag=b"2", mode=0o777, linkname="../outside")
    return Bundle(BASE, tar_with(BASE, replace=("sub", evil)))


@case(
    "symlink-then-file-uncompressed",
    "stream",
    "as symlink-then-file, compression none",
    "symbolic link",
)
def _():
    evil = header("sub", typeflag=b"2", mode=0o777, linkname="../outside")
    return Bundle(BASE, tar_with(BASE, replace=("sub", evil)), compression="none")


@case(
    "symlink-then-dir",
    "stream",
    "manifest clean; the tar has sub as a symlink to ../outside, then a directory entry sub/ (a naive extractor chmods ../outside)",
    "symbolic link",
)
def _():
    evil = header("sub", typeflag=b"2", mode=0o777, linkname="../outside") + D("sub").tar()
    return Bundle(BASE, tar_with(BASE, replace=("sub", evil)))


@case("hardlink-outside", "stream", "manifest clean; tokenizer.json is a hard link to ../outside/secret", "hard link")
def _():
    evil = header("tokenizer.json", typeflag=b"1", linkname="../outside/secret")
    return Bundle(BASE, tar_with(BASE, replace=("tokenizer.json", evil)))


@case("hardlink-inside", "stream", "manifest clean; tokenizer.json is a hard link to config.json (inside, still refused)", "hard link")
def _():
    evil = header("tokenizer.json", typeflag=b"1", linkname="config.json")
    return Bundle(BASE, tar_with(BASE, replace=("tokenizer.json", evil)))


@case("char-device", "stream", "manifest clean; tokenizer.json is a character device 1,3 (/dev/null)", "device entry")
def _():
    evil = header("tokenizer.json", typeflag=b"3", devmajor=1, devminor=3)
    return Bundle(BASE, tar_with(BASE, replace=("tokenizer.json", evil)))


@case("block-device", "stream", "manifest clean; tokenizer.json is a block device 8,0 (/dev/sda)", "device entry")
def _():
    evil = header("tokenizer.json", typeflag=b"4", mode=0o660, devmajor=8, devminor=0)
    return Bundle(BASE, tar_with(BASE, replace=("tokenizer.json", evil)))


@case("fifo", "stream", "manifest clean; tokenizer.json is a FIFO", "FIFO entry")
def _():
    evil = header("tokenizer.json", typeflag=b"6")
    return Bundle(BASE, tar_with(BASE, replace=("tokenizer.json", evil)))


def gnu_sparse_header(name, realsize, data_len, magic):
    # GNU sparse ('S'): sparse map at 386 (offset, numbytes pairs), realsize at 483.
    h = bytearray(
        header(name, size=data_len, typeflag=b"S", magic=magic[:6], version=magic[6:])
    )
    h[386:398] = octal(0, 12)
    h[398:410] = octal(data_len, 12)
    h[483:495] = octal(realsize, 12)
    h[148:156] = b" " * 8
    h[148:156] = b"%06o\0 " % sum(h)
    return bytes(h)


@case("gnu-sparse", "stream", "manifest clean; sub/weights.bin is a GNU sparse entry (GNU magic, realsize 1 GiB)", "not a POSIX ustar header")
def _():
    evil = gnu_sparse_header("sub/weights.bin", 1 << 30, len(WEIGHTS), b"ustar  \0") + pad(WEIGHTS)
    return Bundle(BASE, tar_with(BASE, replace=("sub/weights.bin", evil)))


@case("gnu-sparse-posix-magic", "stream", "manifest clean; sub/weights.bin has typeflag 'S' in an otherwise POSIX header", "GNU sparse entry")
def _():
    evil = gnu_sparse_header("sub/weights.bin", 1 << 30, len(WEIGHTS), b"ustar\x0000") + pad(WEIGHTS)
    return Bundle(BASE, tar_with(BASE, replace=("sub/weights.bin", evil)))


@case("pax-sparse", "stream", "manifest clean; PAX GNU.sparse.* records (PAX sparse format 1.0) before sub/weights.bin", "GNU.sparse")
def _():
    recs = pax_record("GNU.sparse.major", "1") + pax_record("GNU.sparse.minor", "0") + pax_record(
        "GNU.sparse.realsize", str(1 << 30)
    )
    evil = pax_header(recs) + F("sub/weights.bin", WEIGHTS).tar()
    return Bundle(BASE, tar_with(BASE, replace=("sub/weights.bin", evil)))


@case("setuid-file", "stream", "manifest lists tokenizer.json executable; the tar mode is 4755 (setuid)", "setuid")
def _():
    ents = BASE[:3] + [F("tokenizer.json", TOKENIZER, executable=True)]
    evil = F("tokenizer.json", TOKENIZER, True).tar(mode=0o4755)
    return Bundle(ents, tar_with(ents, replace=("tokenizer.json", evil)))


@case("setgid-file", "stream", "manifest lists tokenizer.json executable; the tar mode is 2755 (setgid)", "setgid")
def _():
    ents = BASE[:3] + [F("tokenizer.json", TOKENIZER, executable=True)]
    evil = F("tokenizer.json", TOKENIZER, True).tar(mode=0o2755)
    return Bundle(ents, tar_with(ents, replace=("tokenizer.json", evil)))


@case("sticky-world-writable-dir", "stream", "manifest clean; directory sub/ has mode 1777", "directory mode 1777")
def _():
    return Bundle(BASE, tar_with(BASE, replace=("sub", D("sub").tar(mode=0o1777))))


@case("mode-disagrees-with-manifest", "stream", "manifest lists tokenizer.json as not executable; the tar mode is 755", "mode that disagrees")
def _():
    return Bundle(BASE, tar_with(BASE, replace=("tokenizer.json", F("tokenizer.json", TOKENIZER, True).tar())))


# Duplicates and collisions.
@case("duplicate-entry", "manifest", "signed manifest lists config.json twice", "out of order or twice")
def _():
    ents = [BASE[0], F("config.json", b"{}\n")] + BASE[1:]
    return Bundle(ents, honest_tar(ents), keep_order=True)


@case("duplicate-entry-tar-only", "stream", "manifest clean; the tar has config.json twice, the second with other content", "appears twice")
def _():
    second = F("config.json", b'{"model_type": "evil"}\n').tar()
    return Bundle(BASE, tar_with(BASE, insert_before=("sub", second)))


@case("duplicate-dir-tar-only", "stream", "manifest clean; the tar has the directory sub/ twice", "appears twice")
def _():
    return Bundle(BASE, tar_with(BASE, insert_before=("sub/weights.bin", D("sub").tar())))


@case("case-fold-collision", "manifest", "signed manifest lists Config.json and config.json (one file on macOS/Windows/exFAT)", "case-insensitive")
def _():
    ents = with_entry(F("Config.json", b'{"model_type": "evil"}\n'))
    return Bundle(ents, honest_tar(ents))


@case("case-fold-collision-tar-only", "stream", "manifest clean; the tar adds Config.json before config.json", "not in the manifest")
def _():
    return Bundle(BASE, tar_with(BASE, insert_before=("config.json", F("Config.json", b"{}\n").tar())))


NFC = "caf\u00e9.txt"
NFD = "cafe\u0301.txt"


@case("unicode-normalisation-collision", "manifest", "signed manifest lists caf\\u00e9.txt (NFC) and cafe\\u0301.txt (NFD): one file on macOS", "normalising filesystem")
def _():
    ents = BASE + [F(NFC, b"nfc\n"), F(NFD, b"nfd\n")]
    return Bundle(ents, honest_tar(ents))


@case("unicode-normalisation-collision-tar-only", "stream", "manifest lists only the NFC name; the tar adds the NFD name first", "not in the manifest")
def _():
    ents = with_entry(F(NFC, b"nfc\n"))
    return Bundle(ents, tar_with(ents, insert_before=(NFC, F(NFD, b"nfd\n").tar())))


@case("file-and-dir-same-name", "manifest", "signed manifest lists sub as both a directory and a file", "both a file and a directory")
def _():
    ents = BASE + [F("sub", b"x\n")]
    return Bundle(ents, honest_tar(ents))


@case("file-for-dir-tar-only", "stream", "manifest lists sub as a directory; the tar has a file sub", "the manifest says it is a directory")
def _():
    return Bundle(BASE, tar_with(BASE, replace=("sub", F("sub", b"").tar())))


# The stream against the manifest.
@case("size-differs-from-manifest", "stream", "sub/weights.bin is 6000 bytes in the tar, 5000 in the manifest", "6000 bytes in the stream, the manifest says 5000")
def _():
    return Bundle(BASE, tar_with(BASE, replace=("sub/weights.bin", F("sub/weights.bin", weights(6000)).tar())))


@case("size-smaller-than-manifest", "stream", "sub/weights.bin is 10 bytes in the tar, 5000 in the manifest", "10 bytes in the stream, the manifest says 5000")
def _():
    return Bundle(BASE, tar_with(BASE, replace=("sub/weights.bin", F("sub/weights.bin", WEIGHTS[:10]).tar())))


@case("entry-not-in-manifest", "stream", "the tar has extra.txt between config.json and sub", "not in the manifest")
def _():
    return Bundle(BASE, tar_with(BASE, insert_before=("sub", F("extra.txt", b"extra\n").tar())))


@case("entry-after-last", "stream", "the tar has extra.txt after the last manifest entry", "extra entry after the last one")
def _():
    return Bundle(BASE, tar_with(BASE, end=F("zz-extra.txt", b"extra\n").tar() + END))


@case("manifest-file-missing-from-tar", "stream", "the tar ends without tokenizer.json (listed last in the manifest)", "missing from the stream")
def _():
    return Bundle(BASE, tar_with(BASE, drop="tokenizer.json"))


@case("manifest-file-missing-mid-stream", "stream", "the tar leaves out sub/weights.bin", "out of manifest order")
def _():
    return Bundle(BASE, tar_with(BASE, drop="sub/weights.bin"))


@case("out-of-order", "manifest", "signed manifest lists tokenizer.json before config.json", "out of order")
def _():
    ents = [BASE[3]] + BASE[:3]
    return Bundle(ents, b"".join(e.tar() for e in ents) + END, keep_order=True)


@case("out-of-order-tar-only", "stream", "manifest clean; the tar has tokenizer.json first", "out of manifest order")
def _():
    ents = [BASE[3]] + BASE[:3]
    return Bundle(BASE, b"".join(e.tar() for e in ents) + END)


@case("content-sha256-mismatch", "stream", "sub/weights.bin's bytes differ from the manifest's sha256 (same size)", "sha256")
def _():
    bad = bytearray(WEIGHTS)
    bad[2500] ^= 1
    return Bundle(BASE, tar_with(BASE, replace=("sub/weights.bin", F("sub/weights.bin", bytes(bad)).tar())))


@case("content-sha256-mismatch-uncompressed", "stream", "as content-sha256-mismatch, compression none", "sha256")
def _():
    bad = bytearray(WEIGHTS)
    bad[2500] ^= 1
    return Bundle(
        BASE, tar_with(BASE, replace=("sub/weights.bin", F("sub/weights.bin", bytes(bad)).tar())), compression="none"
    )


# PAX against ustar.
@case("pax-size-disagrees-with-ustar", "stream", "PAX size=9000000000 before a ustar header that says 5000 (sub/weights.bin)", "disagrees with the ustar size")
def _():
    evil = pax_header(pax_record("size", "9000000000")) + F("sub/weights.bin", WEIGHTS).tar()
    return Bundle(BASE, tar_with(BASE, replace=("sub/weights.bin", evil)))


@case(
    "pax-size-hides-entry",
    "stream",
    "ustar size 0 but PAX size 1536 for sub/weights.bin: a PAX-ignoring reader would see an empty file and then a smuggled '../evil.txt' header",
    "PAX size used for a size that fits",
)
def _():
    smuggled = F("../evil.txt", b"evil\n").tar()
    data = smuggled + b"\0" * (1536 - len(smuggled))
    ents = BASE[:2] + [F("sub/weights.bin", data)] + BASE[3:]
    evil = pax_header(pax_record("size", str(len(data)))) + header("sub/weights.bin", size=0) + data
    return Bundle(ents, tar_with(ents, replace=("sub/weights.bin", evil)))


@case(
    "pax-path-disagrees-with-ustar",
    "stream",
    "manifest clean ('sub/yyy…'); the PAX path is that name but the ustar name is 'innocent.txt'",
    "PAX path disagrees with the ustar name",
)
def _():
    ents = with_entry(F(LONG, b"long\n"))
    evil = pax_header(pax_record("path", LONG)) + header("innocent.txt", size=5) + pad(b"long\n")
    return Bundle(ents, tar_with(ents, replace=(LONG, evil)))


@case(
    "pax-path-for-short-name",
    "stream",
    "PAX path 'tokenizer.json' before a ustar header of the same name (PAX where ustar fits)",
    "PAX path used for a name that fits",
)
def _():
    evil = pax_header(pax_record("path", "tokenizer.json")) + F("tokenizer.json", TOKENIZER).tar()
    return Bundle(BASE, tar_with(BASE, replace=("tokenizer.json", evil)))


@case(
    "pax-path-renames-entry",
    "stream",
    "PAX path 'sub/…/evil.txt' (unsplittable) whose ustar name 'tokenizer.json' is not its tail",
    "PAX path disagrees with the ustar name",
)
def _():
    evil = pax_header(pax_record("path", "sub/" + "q" * 150 + "/evil.txt")) + F("tokenizer.json", TOKENIZER).tar()
    return Bundle(BASE, tar_with(BASE, replace=("tokenizer.json", evil)))


def malformed_pax(name, what, records, fragment, typeflag=b"x", size=None):
    @case(name, "stream", what, fragment)
    def _():
        evil = pax_header(records, typeflag=typeflag, size=size) + F("sub/weights.bin", WEIGHTS).tar()
        return Bundle(BASE, tar_with(BASE, replace=("sub/weights.bin", evil)))


malformed_pax("pax-length-too-long", "a PAX record whose length (99) runs past the header's data", b"99 path=x\n", "out of bounds")
malformed_pax("pax-length-too-short", "a PAX record whose length (5) cuts the record", b"5 path=x\n", "does not end with a newline")
malformed_pax("pax-length-leading-zero", "a PAX record length with a leading zero ('09 path=ab')", b"09 path=ab\n", "not a decimal number")
malformed_pax("pax-no-length", "a PAX record without a length", b"path=x\n", "without a length")
malformed_pax("pax-no-equals", "a PAX record without '='", b"8 pathx\n", "without '='")
malformed_pax("pax-no-newline", "a PAX record not ending with a newline", b"12 path=abcX", "does not end with a newline")
malformed_pax("pax-value-not-utf8", "a PAX path value that is not UTF-8", pax_record("path", b"\xff\xfe" * 60), "not UTF-8")
malformed_pax("pax-unknown-key-linkpath", "a PAX linkpath record (links are not part of the format)", pax_record("linkpath", "/etc/passwd"), "\"linkpath\" is not part of the bundle format")
malformed_pax("pax-repeated-path", "a PAX header with 'path' twice", pax_record("path", "sub/" + "a" * 150) + pax_record("path", "../" + "b" * 150), "repeats 'path'")
malformed_pax("pax-size-not-decimal", "a PAX size of '-1'", pax_record("size", "-1"), "is not a decimal number")
malformed_pax("pax-empty", "a PAX header with no records", b"", "empty PAX header")
malformed_pax("pax-global-header", "a PAX global header ('g')", pax_record("path", "evil"), "global header", typeflag=b"g")
malformed_pax("pax-too-large", "a PAX header claiming 70000 bytes (over the 64 KiB cap)", b"", "too large", size=70000)


@case("pax-two-headers", "stream", "two PAX headers in a row before sub/weights.bin", "two PAX headers in a row")
def _():
    evil = pax_header(pax_record("size", "9000000000")) + pax_header(pax_record("size", "9000000000")) + F("sub/weights.bin", WEIGHTS).tar()
    return Bundle(BASE, tar_with(BASE, replace=("sub/weights.bin", evil)))


@case("pax-orphan-at-end", "stream", "a PAX header followed by the end-of-archive marker instead of an entry (tokenizer.json missing)", "PAX header not followed by an entry")
def _():
    return Bundle(BASE, tar_with(BASE, replace=("tokenizer.json", pax_header(pax_record("path", "../" + "e" * 150)))))


# Header fields the dialect fixes.
@case("bad-header-checksum", "stream", "the tokenizer.json header's checksum is off by one", "checksum")
def _():
    return Bundle(BASE, tar_with(BASE, replace=("tokenizer.json", F("tokenizer.json", TOKENIZER).tar(checksum_delta=1))))


@case("base256-size", "stream", "sub/weights.bin's size field in GNU base-256 form", "size field")
def _():
    field = b"\x80" + b"\0" * 7 + (5000).to_bytes(4, "big")
    return Bundle(BASE, tar_with(BASE, replace=("sub/weights.bin", F("sub/weights.bin", WEIGHTS).tar(size_field=field))))


@case("nonzero-owner", "stream", "tokenizer.json owned by uid 1000 with uname 'mallory'", "uid is not 0")
def _():
    return Bundle(BASE, tar_with(BASE, replace=("tokenizer.json", F("tokenizer.json", TOKENIZER).tar(uid=1000, uname="mallory"))))


@case("linkname-on-file", "stream", "a regular file entry with a link name set ('/etc/passwd')", "link name set")
def _():
    return Bundle(BASE, tar_with(BASE, replace=("tokenizer.json", F("tokenizer.json", TOKENIZER).tar(linkname="/etc/passwd"))))


@case("nonzero-padding", "stream", "bytes smuggled in the padding after config.json's data", "non-zero bytes in the padding")
def _():
    evil = header("config.json", size=len(CONFIG)) + CONFIG + b"SMUGGLED" + b"\0" * ((-len(CONFIG)) % BLOCK - 8)
    return Bundle(BASE, tar_with(BASE, replace=("config.json", evil)))


@case("lone-zero-block", "stream", "one zero block between entries (a reader that stops there misses the rest)", "lone zero block")
def _():
    return Bundle(BASE, tar_with(BASE, insert_before=("tokenizer.json", b"\0" * BLOCK)))


# Streams.
@case("stream-ends-early", "stream", "the tar stream stops 1000 bytes into sub/weights.bin's data (a complete zstd frame)", "ends inside the entry's data")
def _():
    full = honest_tar(BASE)
    cut = 1024 + 512 + 512 + 1000
    assert full[cut - 1000 - 512 : cut - 1000 - 512 + 15] == b"sub/weights.bin"
    return Bundle(BASE, full[:cut])


@case("stream-ends-before-end-marker", "stream", "every entry present but no end-of-archive marker", "ends inside a header")
def _():
    return Bundle(BASE, honest_tar(BASE)[: -2 * BLOCK])


@case("zstd-frame-truncated", "stream", "the compressed stream is cut 64 bytes before the end of its zstd frame", "cannot be decoded")
def _():
    # Incompressible content so that the cut lands in file data, not in the end marker.
    ents = BASE[:2] + [F("sub/weights.bin", weights(20000))] + BASE[3:]
    return Bundle(ents, honest_tar(ents), after_compress=lambda d: d[:-64])


@case("trailing-garbage-after-tar", "stream", "8 bytes of garbage after the end-of-archive marker, inside the signed zstd frame", "past the size the manifest declares")
def _():
    return Bundle(BASE, honest_tar(BASE) + b"GARBAGE!")


@case("trailing-zero-blocks", "stream", "GNU-style record padding: 18 more zero blocks after the end-of-archive marker", "past the size the manifest declares")
def _():
    return Bundle(BASE, honest_tar(BASE) + b"\0" * (18 * BLOCK))


@case("trailing-garbage-after-zstd-frame", "stream", "8 bytes of garbage after the zstd frame (volumes hashed with them)", "trailing data after the end of the compressed stream")
def _():
    return Bundle(BASE, honest_tar(BASE), after_compress=lambda d: d + b"GARBAGE!")


def skippable_frame(payload):
    return (0x184D2A50).to_bytes(4, "little") + len(payload).to_bytes(4, "little") + payload


@case(
    "zstd-skippable-frame-after-end",
    "stream",
    "a zstd skippable frame (magic 0x184D2A50) with 64 KiB of hidden data after the real frame",
    "trailing",
)
def _():
    return Bundle(BASE, honest_tar(BASE), after_compress=lambda d: d + skippable_frame(b"HIDDEN" * 10923))


@case(
    "zstd-empty-second-frame",
    "stream",
    "a second, empty zstd frame after the real one (decodes to nothing)",
    "trailing",
)
def _():
    empty, _ = compress([b""], "zstd")
    return Bundle(BASE, honest_tar(BASE), after_compress=lambda d: d + empty)


def huge_window(frame):
    # Frame header: magic (4), descriptor (1), then the window descriptor when the frame is not
    # single-segment (zstd writes it so for input of unknown size, such as a pipe).
    fhd = frame[4]
    assert not fhd & 0x20, "single-segment frame: no window descriptor to patch"
    return frame[:5] + bytes([(31 - 10) << 3]) + frame[6:]


@case(
    "zstd-huge-window",
    "stream",
    "the zstd frame header asks for a 2 GiB window (over the 128 MiB the reader allows)",
    "cannot be decoded",
)
def _():
    return Bundle(BASE, honest_tar(BASE), after_compress=huge_window)


@case(
    "zstd-second-frame-with-data",
    "stream",
    "a second zstd frame after the first, decoding to 1 MiB of 'A' past the declared stream size",
    "trailing data after the end of the compressed stream",
)
def _():
    second, _ = compress([b"A" * (1 << 20)], "zstd")
    return Bundle(BASE, honest_tar(BASE), after_compress=lambda d: d + second)


@case(
    "decompression-bomb",
    "stream",
    "1 GiB of zeros after the end-of-archive marker in the same zstd frame (a few KiB compressed); must stop at the declared size",
    "past the size the manifest declares",
)
def _():
    def chunks():
        yield honest_tar(BASE)
        zeros = b"\0" * (1 << 24)
        for _ in range(64):
            yield zeros

    return Bundle(BASE, chunks)


@case(
    "decompression-bomb-in-entry",
    "stream",
    "sub/weights.bin's header claims 1 GiB (zeros follow) while the manifest says 5000 bytes",
    "1073741824 bytes in the stream, the manifest says 5000",
)
def _():
    def chunks():
        yield tar_with(BASE, replace=("sub/weights.bin", b""), end=b"")[: 1024 + 512]
        yield header("sub/weights.bin", size=1 << 30)
        zeros = b"\0" * (1 << 24)
        for _ in range(64):
            yield zeros
        yield F("tokenizer.json", TOKENIZER).tar() + END

    return Bundle(BASE, chunks)


# ---------------------------------------------------------------------------------------------


def readme(rows):
    out = [
        "# Hostile bundles",
        "",
        "Generated by `scripts/make-hostile.py`; do not edit by hand (run the script, commit the",
        "result). Every bundle's `manifest.json` is validly signed with `testdata/keys/test.key`",
        "(trust `testdata/keys/test.pub`), its volumes match the manifest's sizes and digests, and,",
        "except in `manifest` cases, the manifest passes `Manifest::validate`: the one defect is the",
        "hostile one. `tests/it/hostile.rs` has one test per directory.",
        "",
        "Layers:",
        "",
        "- `control`: honest bundles from the same generator. `verify --deep` and `unpack` succeed.",
        "- `manifest`: the signed manifest itself is hostile. `verify`, `verify --deep` and `unpack`",
        "  all exit 3 before reading any volume; the message names `manifest.json`.",
        "- `stream`: the manifest is clean and plain `verify` exits 0 (signature and volumes are",
        "  good); `verify --deep` and `unpack` exit 3 and name the entry and the problem. The",
        "  destination must not exist afterwards and no `.airlock-staging-*` may be left.",
        "",
        "The message fragment is the least the message must say about the problem; the test also",
        "requires the entry's name (or, where no trustworthy name exists yet, the header's byte",
        "offset), and checks the JSON `error.message` as well as stderr.",
        "",
        "Placeholders: a `-tar-only` case lists `evil.txt` (or directory `evil`, or a name of the",
        "same length when the hostile name needs a PAX record) in its manifest where the tar holds",
        "the hostile name, so the manifest's `stream.size` matches the stream wherever it can.",
        "Symlink chains point at `../outside`, a directory the test creates beside the destination.",
        "",
        "Fixed inputs: created %s, chunk_size %d, zstd level 3 (zstd CLI), bundle name `%s` version %d."
        % (CREATED, CHUNK_SIZE, NAME, VERSION),
        "",
        "| case | layer | what it does | exit (verify / --deep / unpack) | message fragment |",
        "|---|---|---|---|---|",
    ]
    for name, layer, what, code, fragment in rows:
        codes = {"control": "0 / 0 / 0", "manifest": "%d / %d / %d" % (code, code, code), "stream": "0 / %d / %d" % (code, code)}[layer]
        esc = lambda s: s.replace("|", "\\|").replace("\r", "\\r").replace("\n", "\\n")
        out.append("| `%s` | %s | %s | %s | %s |" % (name, layer, esc(what), codes, "`%s`" % esc(fragment) if fragment else ""))
    out.append("")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "testdata" / "hostile")
    ap.add_argument("--only", nargs="*", help="regenerate only these cases")
    args = ap.parse_args()
    for tool in ("zstd", "minisign"):
        if shutil.which(tool) is None:
            sys.exit("make-hostile.py: `%s` is not on PATH" % tool)
    if not KEY.exists():
        sys.exit("make-hostile.py: %s is missing (airlock keygen --unencrypted -o testdata/keys/test)" % KEY)
    names = [c[0] for c in CASES]
    assert len(names) == len(set(names)), "duplicate case names"
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    if not args.only:
        for old in out.iterdir():
            if old.is_dir():
                shutil.rmtree(old)
    rows = []
    for name, layer, what, code, fragment, build in CASES:
        rows.append((name, layer, what, code, fragment))
        if args.only and name not in args.only:
            continue
        if (out / name).exists():
            shutil.rmtree(out / name)
        declared, actual = write_bundle(out / name, build())
        note = "" if declared == actual else "  (tar stream %d bytes, manifest declares %d)" % (actual, declared)
        print("%-45s %s%s" % (name, layer, note))
    (out / "README.md").write_text(readme(rows))
    print("%d cases in %s" % (len(CASES), out))


if __name__ == "__main__":
    main()
