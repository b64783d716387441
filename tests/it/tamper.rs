//! Damaged and tampered bundles: what verify and unpack report, and that nothing is installed.

use crate::support::*;

fn packed() -> Env {
    let env = Env::new();
    env.model("m");
    env.ok(&[
        "pack",
        "m",
        "-o",
        "b",
        "--key",
        "k.key",
        "--compress",
        "none",
        "--volume-size",
        "100000",
    ]);
    env
}

fn assert_unpack_refused(env: &Env, code: i32, needles: &[&str]) {
    let text = env.fails(code, &["unpack", "b", "--trust", "k.pub", "--dest", "out"]);
    for n in needles {
        assert!(text.contains(n), "missing {n:?} in: {text}");
    }
    assert!(!env.path("out").exists(), "destination created");
    assert!(
        staging_leftovers(env.dir.path()).is_empty(),
        "staging left behind"
    );
}

#[test]
fn flipped_bit_in_a_volume_is_named_with_its_byte_range() {
    let env = packed();
    let p = env.path("b/data.002");
    let mut v = std::fs::read(&p).unwrap();
    v[5000] ^= 0x10;
    std::fs::write(&p, v).unwrap();
    let text = env.fails(3, &["verify", "b", "--trust", "k.pub"]);
    assert!(
        text.contains("data.002") && text.contains("fails its sha256"),
        "{text}"
    );
    assert!(
        text.contains("volume data.002 of 5 fails its sha256")
            && text.contains("the other 4 are good")
            && text.contains("copy data.002 again from the staging host"),
        "{text}"
    );
    let (code, j) = env.json(&["verify", "b", "--trust", "k.pub", "--deep"]);
    assert_eq!(code, 3);
    assert_eq!(j["bad_volumes"].as_array().unwrap().len(), 1, "{j}");
    assert_eq!(j["bad_volumes"][0]["volume"], "data.002");
    // The volume is smaller than one 64 MiB chunk, so its one chunk is the whole volume
    // (damaged_chunk_is_named_by_its_byte_range_in_a_multi_chunk_volume covers larger ones).
    let len = std::fs::metadata(&p).unwrap().len();
    assert_eq!(
        j["bad_volumes"][0]["bad_ranges"],
        serde_json::json!([[0, len]])
    );
    assert_eq!(j["error"]["kind"], "bad-volumes");
    assert_unpack_refused(&env, 3, &["data.002"]);
}

/// Chunk digests locate damage to a 64 MiB chunk: on a volume of three chunks (64 MiB, 64 MiB
/// and the rest), a flipped byte in the middle chunk and one in the last, partial chunk are
/// reported as exactly those byte ranges, not as the whole volume.
#[test]
fn damaged_chunk_is_named_by_its_byte_range_in_a_multi_chunk_volume() {
    const MIB: u64 = 1 << 20;
    let env = Env::new();
    env.write("m/config.json", b"{}\n");
    // Sparse zeros: cheap to make, stored as is with --compress none.
    let f = std::fs::File::create(env.path("m/big.bin")).unwrap();
    f.set_len(150 * MIB).unwrap();
    drop(f);
    env.ok(&[
        "pack",
        "m",
        "-o",
        "b",
        "--key",
        "k.key",
        "--compress",
        "none",
        "--volume-size",
        "1G",
        "--no-model-checks",
    ]);
    let p = env.path("b/data.000");
    let size = std::fs::metadata(&p).unwrap().len();
    assert!(size > 128 * MIB && size < 192 * MIB, "{size}");
    let (code, j) = env.json(&["verify", "b", "--trust", "k.pub", "--deep"]);
    assert_eq!(code, 0, "{j}");
    let mut v = std::fs::read(&p).unwrap();
    v[(70 * MIB) as usize] ^= 0x01;
    v[(size - 10) as usize] ^= 0x80;
    std::fs::write(&p, v).unwrap();
    // Two adjacent bad chunks are one range (issue 24: damage named without a list per chunk).
    let ranges = serde_json::json!([[64 * MIB, size]]);
    for deep in [false, true] {
        let mut args = vec!["verify", "b", "--trust", "k.pub"];
        if deep {
            args.push("--deep");
        }
        let (code, j) = env.json(&args);
        assert_eq!(code, 3, "{j}");
        assert_eq!(j["error"]["kind"], "bad-volumes", "{j}");
        assert_eq!(j["bad_volumes"].as_array().unwrap().len(), 1, "{j}");
        assert_eq!(j["bad_volumes"][0]["volume"], "data.000", "{j}");
        assert_eq!(j["bad_volumes"][0]["bad_ranges"], ranges, "{j}");
    }
    let text = env.fails(3, &["verify", "b", "--trust", "k.pub"]);
    let expected = format!("bad byte ranges: {}-{size}", 64 * MIB);
    assert!(text.contains(&expected), "{text}");
    assert_unpack_refused(&env, 3, &["data.000"]);
}

#[test]
fn truncated_and_missing_volumes_are_named() {
    let env = packed();
    let p = env.path("b/data.001");
    let v = std::fs::read(&p).unwrap();
    std::fs::write(&p, &v[..v.len() - 1]).unwrap();
    std::fs::remove_file(env.path("b/data.003")).unwrap();
    let text = env.fails(3, &["verify", "b", "--trust", "k.pub"]);
    assert!(
        text.contains("data.001") && text.contains("truncated"),
        "{text}"
    );
    assert!(
        text.contains("data.003") && text.contains("missing"),
        "{text}"
    );
    // Both causes are reported, each against its own volume, and nothing else.
    let (code, j) = env.json(&["verify", "b", "--trust", "k.pub"]);
    assert_eq!(code, 3, "{j}");
    assert_eq!(j["error"]["kind"], "bad-volumes", "{j}");
    let bad: Vec<(String, String)> = j["bad_volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["volume"].as_str().unwrap().to_string(),
                v["problem"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(bad.len(), 2, "{j}");
    assert_eq!(bad[0].0, "data.001");
    assert!(bad[0].1.ends_with("(truncated)"), "{j}");
    assert_eq!(bad[1].0, "data.003");
    assert!(bad[1].1.contains("missing"), "{j}");
    assert_unpack_refused(&env, 3, &["data.001"]);
}

#[test]
fn edited_manifest_or_signature_is_refused() {
    let env = packed();
    let m = env.path("b/manifest.json");
    let orig = std::fs::read(&m).unwrap();
    let edited =
        String::from_utf8(orig.clone())
            .unwrap()
            .replacen("\"version\": 1", "\"version\": 9", 1);
    std::fs::write(&m, edited).unwrap();
    let text = env.fails(3, &["verify", "b", "--trust", "k.pub"]);
    assert!(
        text.contains("manifest.json") && text.contains("does not match its signature"),
        "{text}"
    );
    let (_, j) = env.json(&["verify", "b", "--trust", "k.pub"]);
    assert_eq!(j["error"]["kind"], "bad-signature", "{j}");
    assert_unpack_refused(&env, 3, &["manifest.json"]);
    std::fs::write(&m, &orig).unwrap();
    let s = env.path("b/manifest.json.minisig");
    let sig = std::fs::read_to_string(&s).unwrap();
    let mut lines: Vec<String> = sig.lines().map(String::from).collect();
    lines[2] = lines[2].replace("version=1", "version=9");
    std::fs::write(&s, lines.join("\n") + "\n").unwrap();
    // The trusted comment carries the version: editing it breaks the global signature, and
    // that (not the manifest's own signature) is the reported cause.
    let text = env.fails(3, &["verify", "b", "--trust", "k.pub"]);
    assert!(
        text.contains("manifest.json: does not match its signature")
            && text.contains("trusted comment signature verification failed"),
        "{text}"
    );
    let (_, j) = env.json(&["verify", "b", "--trust", "k.pub"]);
    assert_eq!(j["error"]["kind"], "bad-signature", "{j}");
    assert_unpack_refused(&env, 3, &["trusted comment signature verification failed"]);
    std::fs::remove_file(&s).unwrap();
    let text = env.fails(3, &["verify", "b", "--trust", "k.pub"]);
    assert!(
        text.contains("manifest.json.minisig") && text.contains("unsigned"),
        "{text}"
    );
    assert_unpack_refused(&env, 3, &["unsigned"]);
}

#[test]
fn untrusted_key_and_missing_trust_are_refused() {
    let env = packed();
    env.ok(&["keygen", "--out", "other", "--unencrypted"]);
    let text = env.fails(3, &["verify", "b", "--trust", "other.pub"]);
    assert!(text.contains("not in the trust set"), "{text}");
    let (_, j) = env.json(&["verify", "b", "--trust", "other.pub"]);
    assert_eq!(j["error"]["kind"], "untrusted-key", "{j}");
    let text = env.fails(2, &["verify", "b"]);
    assert!(text.contains("no trusted keys: pass --trust"), "{text}");
    let (_, j) = env.json(&["verify", "b"]);
    assert_eq!(j["error"]["kind"], "usage", "{j}");
    // A trust directory with both keys accepts it; AIRLOCK_TRUST is honoured.
    std::fs::create_dir(env.path("trust")).unwrap();
    std::fs::copy(env.path("k.pub"), env.path("trust/k.pub")).unwrap();
    std::fs::copy(env.path("other.pub"), env.path("trust/other.pub")).unwrap();
    env.ok(&["verify", "b", "--trust", "trust"]);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(["verify", "b"])
        .env("AIRLOCK_TRUST", env.path("trust"))
        .current_dir(env.dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn bad_file_inside_a_good_volume_set_is_caught_by_receipt_check() {
    let env = packed();
    env.ok(&["unpack", "b", "--trust", "k.pub", "--dest", "out"]);
    let p = env.path("out/weights/part-1.bin");
    let mut v = std::fs::read(&p).unwrap();
    v[100] ^= 1;
    std::fs::write(&p, v).unwrap();
    std::fs::remove_file(env.path("out/empty.txt")).unwrap();
    env.write("out/extra.txt", b"x");
    let (code, j) = env.json(&["check", "out", "--trust", "k.pub"]);
    assert_eq!(code, 3, "{j}");
    assert_eq!(j["error"]["kind"], "receipt-mismatch", "{j}");
    assert_eq!(j["receipt"], true, "{j}");
    let drift = j["drift"].to_string();
    assert!(
        drift.contains("weights/part-1.bin") && drift.contains("modified"),
        "{drift}"
    );
    assert!(
        drift.contains("empty.txt") && drift.contains("missing"),
        "{drift}"
    );
    assert!(
        drift.contains("extra.txt") && drift.contains("extra"),
        "{drift}"
    );
    // --sizes-only misses the flipped bit but not the missing file.
    let (code, j) = env.json(&["check", "out", "--sizes-only"]);
    assert_eq!(code, 3);
    assert_eq!(j["error"]["kind"], "receipt-mismatch", "{j}");
    assert!(!j["drift"].to_string().contains("part-1.bin"));
    assert!(j["drift"].to_string().contains("empty.txt"), "{j}");
}
