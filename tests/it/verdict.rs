//! The verify verdict and the bundle readers: bounded reads of the manifest and signature,
//! format versions 1 and 2, the manifest size limit, stray files, recorded findings and the
//! exit code of a bundle path that is not there.

use std::process::Command;

use sha2::{Digest, Sha256};

use crate::support::*;

fn packed(env: &Env) {
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
}

/// Rewrites `b/manifest.json` with `edit` applied and signs it again with `k.key`, as a
/// dishonest or buggy packer holding the trusted key would.
fn resign(env: &Env, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = env.path("b/manifest.json");
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
    std::fs::write(env.path("b/manifest.json.minisig"), sig.to_file_text()).unwrap();
}

/// Turns the bundle into the format version 1 airlock 0.1.0 wrote: the same volumes, each with
/// its whole-volume digest (`wrong` flips one of them).
fn make_version_1(env: &Env, wrong: Option<usize>) {
    let dir = env.path("b");
    resign(env, |v| {
        v["format_version"] = 1.into();
        for (i, vol) in v["volumes"].as_array_mut().unwrap().iter_mut().enumerate() {
            let bytes = std::fs::read(dir.join(vol["name"].as_str().unwrap())).unwrap();
            let mut sha = hex::encode(Sha256::digest(&bytes));
            if wrong == Some(i) {
                sha = hex::encode(Sha256::digest(b"another volume"));
            }
            vol.as_object_mut()
                .unwrap()
                .insert("sha256".into(), sha.into());
        }
    });
}

#[test]
fn pack_writes_format_version_2_without_volume_digests() {
    let env = Env::new();
    packed(&env);
    let m = env.read_json("b/manifest.json");
    assert_eq!(m["format_version"], 2);
    for vol in m["volumes"].as_array().unwrap() {
        assert!(vol.get("sha256").is_none(), "{vol}");
        assert!(!vol["chunks"].as_array().unwrap().is_empty());
    }
    let (code, j) = env.json(&["verify", "b", "--trust", "k.pub", "--deep"]);
    assert_eq!(code, 0, "{j}");
    assert_eq!(j["format_version"], 2);
}

#[test]
fn version_1_bundle_with_its_volume_digests_still_verifies_and_unpacks() {
    let env = Env::new();
    packed(&env);
    make_version_1(&env, None);
    env.ok(&["verify", "b", "--trust", "k.pub"]);
    env.ok(&["verify", "b", "--trust", "k.pub", "--deep"]);
    env.ok(&["unpack", "b", "--trust", "k.pub", "--dest", "out"]);
    assert_eq!(
        std::fs::read(env.path("out/config.json")).unwrap(),
        std::fs::read(env.path("m/config.json")).unwrap()
    );
}

#[test]
fn wrong_whole_volume_digest_with_right_chunk_digests_is_refused() {
    // Before: volumes[].sha256 was never checked, so verify, --deep and unpack all passed.
    let env = Env::new();
    packed(&env);
    make_version_1(&env, Some(2));
    for args in [
        &["verify", "b", "--trust", "k.pub"][..],
        &["verify", "b", "--trust", "k.pub", "--deep"][..],
    ] {
        let text = env.fails(3, args);
        assert!(
            text.contains("volume data.002 of 5 fails its whole-volume sha256"),
            "{args:?}: {text}"
        );
    }
    let text = env.fails(3, &["unpack", "b", "--trust", "k.pub", "--dest", "out"]);
    assert!(text.contains("data.002"), "{text}");
    assert!(!env.path("out").exists());
}

#[test]
fn version_2_manifest_with_a_volume_digest_is_refused() {
    let env = Env::new();
    packed(&env);
    resign(&env, |v| {
        v["volumes"][0]
            .as_object_mut()
            .unwrap()
            .insert("sha256".into(), "0".repeat(64).into());
    });
    let text = env.fails(3, &["verify", "b", "--trust", "k.pub"]);
    assert!(text.contains("format version 2 does not have"), "{text}");
}

#[test]
fn minisig_symlinked_to_dev_zero_is_refused_without_reading_it() {
    // Before: verify read /dev/zero until memory ran out; inspect allocated 24 GB.
    let env = Env::new();
    packed(&env);
    let sig = env.path("b/manifest.json.minisig");
    std::fs::remove_file(&sig).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &sig).unwrap();
    for args in [
        &["verify", "b", "--trust", "k.pub"][..],
        &["inspect", "b"][..],
        &["unpack", "b", "--trust", "k.pub", "--dest", "out"][..],
    ] {
        let text = env.fails(3, args);
        assert!(
            text.contains("manifest.json.minisig: is a character device, not a regular file"),
            "{args:?}: {text}"
        );
    }
    let manifest = env.path("b/manifest.json");
    std::fs::remove_file(&manifest).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &manifest).unwrap();
    let text = env.fails(3, &["inspect", "b"]);
    assert!(
        text.contains("manifest.json: is a character device, not a regular file"),
        "{text}"
    );
}

#[test]
fn fifo_as_manifest_or_signature_is_refused_without_hanging() {
    // Before: a FIFO as manifest.json or .minisig made verify and inspect wait forever.
    for name in ["manifest.json", "manifest.json.minisig"] {
        let env = Env::new();
        packed(&env);
        let p = env.path(&format!("b/{name}"));
        std::fs::remove_file(&p).unwrap();
        let st = Command::new("mkfifo").arg(&p).status().expect("mkfifo");
        assert!(st.success());
        for args in [
            &["verify", "b", "--trust", "k.pub"][..],
            &["inspect", "b"][..],
        ] {
            let text = env.fails(3, args);
            assert!(
                text.contains(&format!("{name}: is a FIFO, not a regular file")),
                "{args:?}: {text}"
            );
        }
    }
}

#[test]
fn oversized_signature_is_refused_after_reading_at_most_the_limit() {
    let env = Env::new();
    packed(&env);
    let sig = env.path("b/manifest.json.minisig");
    std::fs::write(&sig, vec![b'a'; 64 * 1024 + 1]).unwrap();
    let text = env.fails(3, &["verify", "b", "--trust", "k.pub"]);
    assert!(
        text.contains("more than the 65536-byte limit (too large to be a signature)"),
        "{text}"
    );
}

#[test]
fn verify_of_a_missing_bundle_path_is_operational_not_tampering() {
    // Before: `verify nowhere` exited 3, as a failed verification would.
    let env = Env::new();
    let text = env.fails(1, &["verify", "nowhere", "--trust", "k.pub"]);
    assert!(text.contains("nowhere: no such directory"), "{text}");
    let (code, j) = env.json(&["verify", "nowhere", "--trust", "k.pub"]);
    assert_eq!(code, 1);
    assert_eq!(j["error"]["kind"], "io");
    env.write("plain-file", b"x");
    env.fails(1, &["verify", "plain-file", "--trust", "k.pub"]);
    // A directory that exists but holds no manifest is still not a bundle (exit 3).
    std::fs::create_dir(env.path("empty")).unwrap();
    env.write("empty/data.000", b"x");
    let text = env.fails(3, &["verify", "empty", "--trust", "k.pub"]);
    assert!(text.contains("has no manifest.json"), "{text}");
}

#[test]
fn verify_shows_findings_recorded_at_pack_time() {
    // Before: a bundle packed with --no-model-checks that carries an LFS pointer said plain OK.
    let env = Env::new();
    env.model("m");
    env.write(
        "m/model.safetensors",
        b"version https://git-lfs.github.com/spec/v1\noid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 12345\n",
    );
    env.ok(&[
        "pack",
        "m",
        "-o",
        "b",
        "--key",
        "k.key",
        "--no-model-checks",
    ]);
    let out = env.ok(&["verify", "b", "--trust", "k.pub"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout.contains("model-check finding recorded at pack time"),
        "{stdout}"
    );
    assert!(
        stderr.contains("warning: recorded at pack time: model.safetensors:"),
        "{stderr}"
    );
    let (code, j) = env.json(&["verify", "b", "--trust", "k.pub"]);
    assert_eq!(code, 0);
    assert_eq!(j["recorded_findings"][0]["path"], "model.safetensors");
    let out = env.ok(&["unpack", "b", "--trust", "k.pub", "--dest", "out"]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("recorded at pack time: model.safetensors"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn stray_readme_is_not_called_a_volume() {
    // Before: a README.txt beside the volumes was "an extra or duplicated volume".
    let env = Env::new();
    packed(&env);
    env.write("b/README.txt", b"copied on tuesday\n");
    let out = env.ok(&["verify", "b", "--trust", "k.pub"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "README.txt: is not part of the bundle (the manifest does not list it); ignored"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("volume"), "{stderr}");
    env.ok(&["unpack", "b", "--trust", "k.pub", "--dest", "out"]);
    // A stray volume-like name is refused by both, as FORMAT.md section 2 says.
    std::fs::copy(env.path("b/data.004"), env.path("b/data.005")).unwrap();
    let text = env.fails(3, &["verify", "b", "--trust", "k.pub"]);
    assert!(
        text.contains("data.005 is not listed in the manifest (an extra or duplicated volume?)"),
        "{text}"
    );
    let text = env.fails(3, &["unpack", "b", "--trust", "k.pub", "--dest", "out2"]);
    assert!(text.contains("remove data.005"), "{text}");
}

#[test]
fn pack_refuses_a_model_whose_manifest_readers_would_refuse() {
    // Before: 200k files with long names made an 80 MB manifest that no reader accepted. With
    // paths near 3.7 KB, 72 000 empty files need a manifest of about 275 MB, over the 256 MiB
    // limit: pack refuses before writing anything.
    let env = Env::new();
    let component = "c".repeat(250);
    let deep: Vec<&str> = std::iter::repeat_n(component.as_str(), 14).collect();
    let rel = format!("m/{}", deep.join("/"));
    std::fs::create_dir_all(env.path(&rel)).unwrap();
    let dir = std::fs::File::open(env.path(&rel)).unwrap();
    for f in 0..72_000 {
        let name = format!("{f:06}{}", "n".repeat(200));
        let fd = rustix::fs::openat(
            &dir,
            name.as_str(),
            rustix::fs::OFlags::CREATE | rustix::fs::OFlags::WRONLY,
            rustix::fs::Mode::from_raw_mode(0o644),
        )
        .unwrap();
        drop(fd);
    }
    let text = env.fails(
        1,
        &[
            "pack",
            "m",
            "-o",
            "b",
            "--key",
            "k.key",
            "--compress",
            "none",
            "--no-model-checks",
        ],
    );
    assert!(
        text.contains("its manifest would be")
            && text.contains("more than the 268435456-byte limit every reader enforces"),
        "{text}"
    );
    env.assert_nothing_packed("b");
}
