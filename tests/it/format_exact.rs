//! The places where docs/FORMAT.md was made exact for a second implementer (issue 26, item 14),
//! through the real binary: a version 1 manifest cannot be a delta, which stray names count as
//! volumes, the mode of a patch entry, and that `verify --deep` checks patches without decoding
//! them.

use sha2::{Digest, Sha256};

use crate::support::*;

/// Rewrites `BUNDLE/manifest.json` with `edit` applied and signs it again with `k.key`, as a
/// dishonest or buggy packer holding the trusted key would.
fn resign(env: &Env, bundle: &str, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = env.path(&format!("{bundle}/manifest.json"));
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    edit(&mut v);
    let mut bytes = serde_json::to_vec_pretty(&v).unwrap();
    bytes.push(b'\n');
    let key = airlock::keys::SecretKey::load(&env.path("k.key"), None).unwrap();
    let sha = hex::encode(Sha256::digest(&bytes));
    let name = v["name"].as_str().unwrap();
    let version = v["version"].as_u64().unwrap();
    let sig = airlock::keys::sign(
        &key,
        &bytes,
        "signature from airlock secret key",
        &airlock::manifest::trusted_comment(name, version, &sha),
    )
    .unwrap();
    std::fs::write(&path, &bytes).unwrap();
    std::fs::write(
        env.path(&format!("{bundle}/manifest.json.minisig")),
        sig.to_file_text(),
    )
    .unwrap();
}

fn pack_full(env: &Env, model: &str, out: &str, version: &str) {
    env.ok(&[
        "pack",
        model,
        "-o",
        out,
        "--key",
        "k.key",
        "--compress",
        "none",
        "--name",
        "m",
        "--version",
        version,
    ]);
}

#[test]
fn a_version_1_manifest_with_a_base_is_refused() {
    // Before: a version 1 manifest carrying `base` (every file carried) verified and unpacked,
    // though `base` came with version 2 and no airlock ever wrote a version 1 delta.
    let env = Env::new();
    env.model("m");
    pack_full(&env, "m", "b", "2");
    let dir = env.path("b");
    resign(&env, "b", |v| {
        v["format_version"] = 1.into();
        for vol in v["volumes"].as_array_mut().unwrap() {
            let bytes = std::fs::read(dir.join(vol["name"].as_str().unwrap())).unwrap();
            vol.as_object_mut()
                .unwrap()
                .insert("sha256".into(), hex::encode(Sha256::digest(&bytes)).into());
        }
        v["base"] =
            serde_json::json!({"name": "m", "version": 1, "manifest_sha256": "0".repeat(64)});
    });
    for args in [
        &["verify", "b", "--trust", "k.pub"][..],
        &["unpack", "b", "--trust", "k.pub", "--dest", "out"][..],
    ] {
        let text = env.fails(3, args);
        assert!(
            text.contains("has a base, which needs format version 2"),
            "{args:?}: {text}"
        );
    }
    assert!(!env.path("out").exists());
}

#[test]
fn stray_volume_names_count_in_any_case_and_only_without_suffixes() {
    let env = Env::new();
    env.model("m");
    pack_full(&env, "m", "b", "1");
    // Before: `DATA.001` was "not part of the bundle" and unpack installed around it.
    std::fs::copy(env.path("b/data.000"), env.path("b/DATA.001")).unwrap();
    let text = env.fails(3, &["verify", "b", "--trust", "k.pub"]);
    assert!(
        text.contains("DATA.001 is not listed in the manifest (an extra or duplicated volume?)"),
        "{text}"
    );
    let text = env.fails(3, &["unpack", "b", "--trust", "k.pub", "--dest", "out"]);
    assert!(text.contains("remove DATA.001"), "{text}");
    assert!(!env.path("out").exists());
    std::fs::remove_file(env.path("b/DATA.001")).unwrap();

    // Suffixes make another file: reported, ignored.
    env.write("b/data.000.sha256", b"checksum\n");
    env.write("b/data.000 (1)", b"a copy\n");
    let out = env.ok(&["verify", "b", "--trust", "k.pub"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    for name in ["data.000.sha256", "data.000 (1)"] {
        assert!(
            stderr.contains(&format!(
                "{name}: is not part of the bundle (the manifest does not list it); ignored"
            )),
            "{name}: {stderr}"
        );
    }

    // The listed volume's own entry in another spelling (as a case-insensitive filesystem
    // shows it; here a hard link) is the volume: neither refused nor reported.
    std::fs::hard_link(env.path("b/data.000"), env.path("b/Data.000")).unwrap();
    let out = env.ok(&["verify", "b", "--trust", "k.pub"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("Data.000"), "{stderr}");
    env.ok(&["unpack", "b", "--trust", "k.pub", "--dest", "out"]);
}

/// A delta of `m` version 1 (`b1`) to version 2 (`b2`) whose `w.bin` is patched with the
/// `bytes` map and whose `config.json` is copied; uncompressed, one volume.
fn delta(env: &Env) {
    env.write("m1/config.json", b"{\"model_type\": \"test\"}\n");
    let old = pseudo_random(200_000, 7);
    env.write("m1/w.bin", &old);
    pack_full(env, "m1", "b1", "1");
    env.write("m2/config.json", b"{\"model_type\": \"test\"}\n");
    let mut new = old.clone();
    for i in (0..new.len()).step_by(5000) {
        new[i] ^= 0x5a;
    }
    env.write("m2/w.bin", &new);
    env.ok(&[
        "pack",
        "m2",
        "-o",
        "b2",
        "--key",
        "k.key",
        "--compress",
        "none",
        "--name",
        "m",
        "--version",
        "2",
        "--base",
        "b1",
    ]);
    let m = env.read_json("b2/manifest.json");
    assert_eq!(m["files"][0]["from"]["op"], "copy", "{m}");
    assert_eq!(m["files"][1]["from"]["op"], "xor", "{m}");
    assert_eq!(m["files"][1]["from"]["map"], "bytes", "{m}");
    assert_eq!(m["volumes"].as_array().unwrap().len(), 1, "{m}");
    env.ok(&["unpack", "b1", "--trust", "k.pub", "--dest", "out"]);
}

/// The offset of the tar header of stream entry `name` in an uncompressed volume.
fn header_of(volume: &[u8], name: &str) -> usize {
    let mut field = name.as_bytes().to_vec();
    field.push(0);
    (0..volume.len())
        .step_by(512)
        .find(|&at| volume[at..].starts_with(&field))
        .unwrap_or_else(|| panic!("no header for {name}"))
}

/// Edits `b2/data.000` and signs its new chunk digests and whatever `edit` changes, given what
/// `change` returned.
fn rewrite_volume<T>(
    env: &Env,
    change: impl FnOnce(&mut Vec<u8>) -> T,
    edit: impl FnOnce(&mut serde_json::Value, T),
) {
    let path = env.path("b2/data.000");
    let mut bytes = std::fs::read(&path).unwrap();
    let changed = change(&mut bytes);
    std::fs::write(&path, &bytes).unwrap();
    resign(env, "b2", |v| {
        let cs = v["chunk_size"].as_u64().unwrap() as usize;
        v["volumes"][0]["chunks"] = bytes
            .chunks(cs)
            .map(|c| serde_json::Value::from(hex::encode(Sha256::digest(c))))
            .collect();
        edit(v, changed);
    });
}

#[test]
fn a_patch_entry_with_mode_0755_is_refused() {
    // FORMAT.md section 16.2: patch entries have mode 0644. Re-signed with mode 0755 (and a
    // correct header checksum), the stream is refused by verify --deep and unpack.
    let env = Env::new();
    delta(&env);
    rewrite_volume(
        &env,
        |v| {
            let at = header_of(v, ".airlock-delta/1");
            let h = &mut v[at..at + 512];
            assert_eq!(&h[100..108], b"0000644\0");
            h[100..108].copy_from_slice(b"0000755\0");
            h[148..156].copy_from_slice(b"        ");
            let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
            h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
        },
        |_, ()| {},
    );
    env.ok(&["verify", "b2", "--trust", "k.pub"]);
    let text = env.fails(3, &["verify", "b2", "--trust", "k.pub", "--deep"]);
    assert!(
        text.contains("entry \".airlock-delta/1\" has a mode that disagrees with the manifest"),
        "{text}"
    );
    let before = tree(&env.path("out"));
    let text = env.fails(
        3,
        &[
            "unpack",
            "b2",
            "--trust",
            "k.pub",
            "--dest",
            "out",
            "--replace",
        ],
    );
    assert!(text.contains("has a mode that disagrees"), "{text}");
    assert_eq!(tree(&env.path("out")), before);
}

#[test]
fn verify_deep_checks_a_patch_by_its_digest_and_unpack_decodes_it() {
    // FORMAT.md section 16.2: `verify --deep` checks each patch entry's size and SHA-256 and
    // does not decode it (it has no base); the installer decodes it and refuses one that is
    // not a zstd frame, before anything changes.
    let env = Env::new();
    delta(&env);
    rewrite_volume(
        &env,
        |v| {
            let at = header_of(v, ".airlock-delta/1") + 512;
            let size = {
                let field = std::str::from_utf8(&v[at - 512 + 124..at - 512 + 135]).unwrap();
                usize::from_str_radix(field, 8).unwrap()
            };
            for b in &mut v[at..at + size] {
                *b = 0xee;
            }
            hex::encode(Sha256::digest(&v[at..at + size]))
        },
        |m, sha| m["files"][1]["from"]["patch_sha256"] = sha.into(),
    );
    env.ok(&["verify", "b2", "--trust", "k.pub", "--deep"]);
    let before = tree(&env.path("out"));
    let text = env.fails(
        3,
        &[
            "unpack",
            "b2",
            "--trust",
            "k.pub",
            "--dest",
            "out",
            "--replace",
        ],
    );
    assert!(text.contains("w.bin"), "{text}");
    assert_eq!(tree(&env.path("out")), before);
}

fn venv_python() -> std::path::PathBuf {
    let venv = std::env::var_os("AIRLOCK_VENV")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv"));
    let python = venv.join("bin").join("python");
    assert!(
        python.is_file(),
        "the safetensors package is not installed for the tests: {} does not exist. Run \
         `python3 scripts/make-fixtures.py --venv-only`, or point AIRLOCK_VENV at a venv with \
         scripts/requirements-test.txt installed",
        python.display()
    );
    python
}

fn python(args: &[&str]) -> Vec<u8> {
    let out = std::process::Command::new(venv_python())
        .args(args)
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "python: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Two versions of one safetensors file, written by the real writer: version 2 has a longer
/// header (every tensor moves), 2% of `attn` changed, `mlp` unchanged, `gone` removed, `new`
/// added and `reshaped` with the same bytes under another shape.
const TWO_VERSIONS: &str = r#"
import os, sys
import numpy as np
from safetensors.numpy import save_file
root = sys.argv[1]
rng = np.random.default_rng(26)
def finite(a):  # random bits, but no NaN or Inf (the value scan refuses them)
    a[~np.isfinite(a)] = np.float32(0.5)
    return a
attn = finite(rng.integers(0, 1 << 32, (128, 128), dtype=np.uint32).view(np.float32))
mlp = rng.integers(0, 1 << 16, 20000, dtype=np.uint16)
sq = finite(rng.integers(0, 1 << 32, (10, 10), dtype=np.uint32).view(np.float32))
os.makedirs(f"{root}/m1"); os.makedirs(f"{root}/m2")
save_file({"attn": attn, "mlp": mlp, "gone": sq[0].copy(), "reshaped": sq},
          f"{root}/m1/w.safetensors", metadata={"format": "np"})
attn2 = attn.copy().reshape(-1)
idx = rng.choice(attn2.size, attn2.size // 50, replace=False)
attn2[idx] = finite(rng.integers(0, 1 << 32, idx.size, dtype=np.uint32).view(np.float32))
save_file({"attn": attn2.reshape(128, 128), "mlp": mlp, "new": sq[1].copy(),
           "reshaped": sq.reshape(100)},
          f"{root}/m2/w.safetensors",
          metadata={"format": "np", "note": "a longer header moves every tensor"})
"#;

/// Section 16.3's `safetensors` map written from the text alone: D (the decoded patch), the
/// base file, and the rebuilt file out.
const SECTION_16_3: &str = r#"
import json, struct, sys
D = open(sys.argv[1], "rb").read()
base = open(sys.argv[2], "rb").read()

def usable(buf):
    L = len(buf)
    assert L >= 8
    H = struct.unpack("<Q", buf[:8])[0]
    assert H <= 100000000 and H <= L - 8
    obj = json.loads(buf[8:8 + H].decode("utf-8"))
    assert isinstance(obj, dict)
    tensors = {}
    for name, t in obj.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        assert isinstance(t["dtype"], str) and 0 <= b <= e <= L - 8 - H
        tensors[name] = (t["dtype"], list(t["shape"]), b, e)
    return H, tensors

H2, new = usable(D)  # the new prefix and header are D's own first bytes
H, old = usable(base)
A = bytearray(len(D))
ranges = []
for name, (dtype, shape, b2, e2) in new.items():
    if e2 > b2 and name in old:
        odtype, oshape, b, e = old[name]
        if odtype == dtype and oshape == shape and e - b == e2 - b2:
            A[8 + H2 + b2:8 + H2 + e2] = base[8 + H + b:8 + H + e]
            ranges.append((b2, e2))
ranges.sort()
assert all(x[1] <= y[0] for x, y in zip(ranges, ranges[1:]))
N = (int.from_bytes(D, "big") ^ int.from_bytes(bytes(A), "big")).to_bytes(len(D), "big")
sys.stdout.buffer.write(N)
"#;

#[test]
fn the_safetensors_map_rebuilds_a_file_from_section_16_3_alone() {
    // FORMAT.md section 16.3 specifies the map without citing any other document: a rebuild
    // written from its text (Python's json and struct, the zstd command for the frame) turns
    // airlock's patch and the base file into the new file.
    let env = Env::new();
    python(&["-c", TWO_VERSIONS, env.path("").to_str().unwrap()]);
    pack_full(&env, "m1", "b1", "1");
    env.ok(&[
        "pack",
        "m2",
        "-o",
        "b2",
        "--key",
        "k.key",
        "--compress",
        "none",
        "--name",
        "m",
        "--version",
        "2",
        "--base",
        "b1",
    ]);
    let m = env.read_json("b2/manifest.json");
    let from = &m["files"][0]["from"];
    assert_eq!(from["op"], "xor", "{m}");
    assert_eq!(from["map"], "safetensors", "{m}");
    let volume = std::fs::read(env.path("b2/data.000")).unwrap();
    let at = header_of(&volume, ".airlock-delta/0");
    let size = from["patch_size"].as_u64().unwrap() as usize;
    let patch = &volume[at + 512..at + 512 + size];
    assert_eq!(
        hex::encode(Sha256::digest(patch)),
        from["patch_sha256"].as_str().unwrap()
    );
    env.write("patch.zst", patch);
    let out = std::process::Command::new("zstd")
        .args(["-d", "-q", "-c"])
        .arg(env.path("patch.zst"))
        .output()
        .expect("run zstd");
    assert!(out.status.success(), "{out:?}");
    env.write("D", &out.stdout);
    let rebuilt = python(&[
        "-c",
        SECTION_16_3,
        env.path("D").to_str().unwrap(),
        env.path("m1/w.safetensors").to_str().unwrap(),
    ]);
    assert_eq!(
        hex::encode(Sha256::digest(&rebuilt)),
        m["files"][0]["sha256"].as_str().unwrap()
    );
    assert_eq!(
        rebuilt,
        std::fs::read(env.path("m2/w.safetensors")).unwrap()
    );
    // The patch is small because the tensors lined up: 2% of one tensor changed.
    assert!(size < 20_000, "patch of {size} bytes");
}
