//! Pack → verify → unpack round trips, volumes, replacement, rollback and recovery by hand.

use crate::support::*;
use std::process::Command;

fn round_trip(compress: &str, volume_size: Option<&str>) {
    let env = Env::new();
    let model = env.model("m");
    let mut args = vec![
        "pack",
        "m",
        "-o",
        "b",
        "--key",
        "k.key",
        "--compress",
        compress,
    ];
    if let Some(v) = volume_size {
        args.extend(["--volume-size", v]);
    }
    env.ok(&args);
    env.ok(&["verify", "b", "--trust", "k.pub"]);
    env.ok(&["verify", "b", "--trust", "k.pub", "--deep"]);
    env.ok(&["unpack", "b", "--trust", "k.pub", "--dest", "out"]);
    assert_eq!(
        tree_without_receipt(&env.path("out")),
        tree(&model),
        "{compress} {volume_size:?}"
    );
    assert!(env.path("out/.airlock/manifest.json").is_file());
    assert!(env.path("out/.airlock/manifest.json.minisig").is_file());
    assert!(staging_leftovers(env.dir.path()).is_empty());
    env.ok(&["check", "out", "--trust", "k.pub"]);
}

#[test]
fn round_trip_zstd_single_volume() {
    round_trip("zstd", None);
}

#[test]
fn round_trip_uncompressed_single_volume() {
    round_trip("none", None);
}

#[test]
fn round_trip_tiny_volumes() {
    round_trip("none", Some("4096"));
    round_trip("zstd", Some("4K"));
}

#[test]
fn round_trip_volume_sizes_across_entry_boundaries() {
    for size in ["100000", "131072", "1M"] {
        round_trip("none", Some(size));
    }
}

#[test]
fn volumes_are_cut_at_the_size_and_named_in_order() {
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
    let (_, j) = env.json(&["inspect", "b"]);
    let vols = j["volumes"].as_array().unwrap();
    assert_eq!(vols.len(), 5, "{j}");
    for (i, v) in vols.iter().enumerate() {
        assert_eq!(v["name"], format!("data.{i:03}"));
        let size = v["size"].as_u64().unwrap();
        assert_eq!(
            std::fs::metadata(env.path(&format!("b/data.{i:03}")))
                .unwrap()
                .len(),
            size
        );
        if i + 1 < vols.len() {
            assert_eq!(size, 100000);
        } else {
            assert!(size <= 100000);
        }
    }
}

#[test]
fn pack_is_deterministic() {
    let env = Env::new();
    env.model("m");
    env.ok(&[
        "pack",
        "m",
        "-o",
        "b1",
        "--key",
        "k.key",
        "--volume-size",
        "64K",
    ]);
    env.ok(&[
        "pack",
        "m",
        "-o",
        "b2",
        "--key",
        "k.key",
        "--volume-size",
        "64K",
    ]);
    let list = |b: &str| tree(&env.path(b));
    assert_eq!(list("b1"), list("b2"));
}

#[test]
fn zstd_and_tar_recover_the_model_without_airlock() {
    let env = Env::new();
    let model = env.model("m");
    env.ok(&[
        "pack",
        "m",
        "-o",
        "b",
        "--key",
        "k.key",
        "--volume-size",
        "50K",
    ]);
    std::fs::create_dir(env.path("manual")).unwrap();
    let st = Command::new("sh")
        .arg("-c")
        .arg("cat b/data.* | zstd -dc | tar -xf - -C manual")
        .current_dir(env.dir.path())
        .status()
        .unwrap();
    assert!(st.success());
    assert_eq!(tree(&env.path("manual")), tree(&model));
    // minisign checks the manifest, sha256sum checks the files.
    let st = Command::new("minisign")
        .args(["-Vm", "b/manifest.json", "-p", "k.pub"])
        .current_dir(env.dir.path())
        .output()
        .expect("minisign must be installed (apt-get install minisign)");
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let sums = env.ok(&["inspect", "b", "--sha256sums"]).stdout;
    std::fs::write(env.path("SHA256SUMS"), &sums).unwrap();
    let st = Command::new("sha256sum")
        .args(["-c", "--strict", "../SHA256SUMS"])
        .current_dir(env.path("manual"))
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stdout)
    );
    assert_eq!(
        String::from_utf8_lossy(&st.stdout).matches(": OK").count(),
        6
    );
}

#[test]
fn replace_swaps_atomically_and_rollback_is_refused() {
    let env = Env::new();
    env.model("m");
    env.ok(&[
        "pack",
        "m",
        "-o",
        "v1",
        "--key",
        "k.key",
        "--version",
        "1",
        "--name",
        "model",
    ]);
    env.write("m/config.json", b"{\"model_type\": \"v2\"}\n");
    env.write("m/new.txt", b"new in v2");
    env.ok(&[
        "pack",
        "m",
        "-o",
        "v2",
        "--key",
        "k.key",
        "--version",
        "2",
        "--name",
        "model",
    ]);
    env.ok(&["unpack", "v1", "--trust", "k.pub", "--dest", "out"]);
    // Existing destination without --replace: refused, untouched.
    let before = tree(&env.path("out"));
    let text = env.fails(2, &["unpack", "v2", "--trust", "k.pub", "--dest", "out"]);
    assert!(text.contains("--replace"), "{text}");
    assert_eq!(tree(&env.path("out")), before);
    env.ok(&[
        "unpack",
        "v2",
        "--trust",
        "k.pub",
        "--dest",
        "out",
        "--replace",
    ]);
    assert_eq!(
        std::fs::read(env.path("out/new.txt")).unwrap(),
        b"new in v2"
    );
    assert_eq!(tree_without_receipt(&env.path("out")), tree(&env.path("m")));
    assert!(staging_leftovers(env.dir.path()).is_empty());
    // Rollback to v1 refused with exit 3, tree unchanged.
    let v2_tree = tree(&env.path("out"));
    let text = env.fails(
        3,
        &[
            "unpack",
            "v1",
            "--trust",
            "k.pub",
            "--dest",
            "out",
            "--replace",
        ],
    );
    assert!(
        text.contains("version 2") && text.contains("older version 1"),
        "{text}"
    );
    assert_eq!(tree(&env.path("out")), v2_tree);
    // ... unless asked for.
    env.ok(&[
        "unpack",
        "v1",
        "--trust",
        "k.pub",
        "--dest",
        "out",
        "--replace",
        "--allow-downgrade",
    ]);
    assert!(!env.path("out/new.txt").exists());
}

#[test]
fn stale_staging_is_removed_and_foreign_directories_are_not() {
    let env = Env::new();
    env.model("m");
    env.ok(&["pack", "m", "-o", "b", "--key", "k.key"]);
    // What a killed unpack leaves: a staging dir whose lock nobody holds.
    env.write(".airlock-staging-out-deadbeef/.airlock-lock", b"");
    env.write(".airlock-staging-out-deadbeef/tree/half.bin", b"half");
    // Same name pattern but no lock file: not ours, must stay.
    env.write(".airlock-staging-foreign/keep.txt", b"keep");
    let (code, j) = env.json(&["unpack", "b", "--trust", "k.pub", "--dest", "out"]);
    assert_eq!(code, 0, "{j}");
    assert!(!env.path(".airlock-staging-out-deadbeef").exists());
    assert!(env.path(".airlock-staging-foreign/keep.txt").exists());
    assert!(j["warnings"].to_string().contains("stale staging"), "{j}");
}

#[test]
fn pack_refuses_existing_output_and_leaves_nothing_on_failure() {
    let env = Env::new();
    env.model("m");
    std::fs::create_dir(env.path("exists")).unwrap();
    env.write("exists/keep.txt", b"not airlock's");
    let before = tree(&env.path("exists"));
    let text = env.fails(2, &["pack", "m", "-o", "exists", "--key", "k.key"]);
    assert!(text.contains("exists"), "{text}");
    assert_eq!(
        tree(&env.path("exists")),
        before,
        "the refused output was touched"
    );
    std::os::unix::fs::symlink("nowhere", env.path("m/dangling.bin")).unwrap();
    let text = env.fails(1, &["pack", "m", "-o", "b", "--key", "k.key"]);
    assert!(
        text.contains("dangling.bin") && text.contains("dangling symlink"),
        "{text}"
    );
    env.assert_nothing_packed("b");
}

#[test]
fn stale_partial_bundle_is_replaced() {
    let env = Env::new();
    env.model("m");
    env.write("b.partial/.airlock-lock", b"");
    env.write("b.partial/volume-0.tmp", b"junk");
    env.ok(&["pack", "m", "-o", "b", "--key", "k.key"]);
    assert!(!env.path("b.partial").exists());
    env.ok(&["verify", "b", "--trust", "k.pub"]);
}

#[test]
fn file_changing_during_pack_fails_the_pack() {
    let env = Env::new();
    env.model("m");
    env.write("m/growing.bin", &vec![0u8; 64 << 20]);
    let path = env.path("m/growing.bin");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
            f.write_all(&[1u8; 4096]).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    });
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
        ],
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    assert!(
        text.contains("growing.bin") && text.contains("changed while being packed"),
        "{text}"
    );
    env.assert_nothing_packed("b");
}

#[test]
fn file_larger_than_8_gib_round_trips() {
    // A sparse 8 GiB + 1 byte file: its size needs a PAX record, which GNU tar and airlock read.
    let env = Env::new();
    std::fs::create_dir(env.path("big")).unwrap();
    let f = std::fs::File::create(env.path("big/huge.bin")).unwrap();
    let size = (8u64 << 30) + 1;
    f.set_len(size).unwrap();
    drop(f);
    env.ok(&["pack", "big", "-o", "b", "--key", "k.key", "--level", "1"]);
    let (_, j) = env.json(&["inspect", "b"]);
    assert_eq!(j["files"][0]["size"], size);
    env.ok(&["unpack", "b", "--trust", "k.pub", "--dest", "out"]);
    assert_eq!(
        std::fs::metadata(env.path("out/huge.bin")).unwrap().len(),
        size
    );
    // GNU tar agrees on the size in the header.
    let out = Command::new("sh")
        .arg("-c")
        .arg("zstd -dc b/data.000 | head -c 4096 | tar -tvf - 2>/dev/null | head -1")
        .current_dir(env.dir.path())
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&out.stdout);
    assert!(
        listing.contains(&size.to_string()) && listing.contains("huge.bin"),
        "{listing}"
    );
}

#[test]
fn many_small_and_empty_files_round_trip() {
    // Regression: each file used to keep one pipeline buffer, so a model with more files than
    // buffers (8) hung the pack.
    let env = Env::new();
    for i in 0..40 {
        let content = if i % 2 == 0 {
            Vec::new()
        } else {
            pseudo_random(i * 1000, i as u64)
        };
        env.write(&format!("m/d{}/f{i:02}.dat", i % 3), &content);
    }
    env.ok(&[
        "pack",
        "m",
        "-o",
        "b",
        "--key",
        "k.key",
        "--compress",
        "none",
    ]);
    env.ok(&["unpack", "b", "--trust", "k.pub", "--dest", "out"]);
    assert_eq!(tree_without_receipt(&env.path("out")), tree(&env.path("m")));
}

#[test]
fn compress_auto_stores_incompressible_weights_and_compresses_the_rest() {
    let env = Env::new();
    // Quantized-like weights: nothing to gain, so the stream is stored.
    env.model("noise");
    env.write("noise/weights/big.bin", &pseudo_random(3 << 20, 9));
    let (code, v) = env.json(&[
        "pack",
        "noise",
        "-o",
        "b1",
        "--key",
        "k.key",
        "--compress",
        "auto",
    ]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["compression"], "none", "{v}");
    // Weights whose every other byte repeats: well over 3% to gain.
    env.model("bf16");
    let mut half = pseudo_random(3 << 20, 10);
    for b in half.iter_mut().skip(1).step_by(2) {
        *b = 0x3c;
    }
    env.write("bf16/weights/big.bin", &half);
    let (code, v) = env.json(&[
        "pack",
        "bf16",
        "-o",
        "b2",
        "--key",
        "k.key",
        "--compress",
        "auto",
    ]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["compression"], "zstd", "{v}");
    // A model with no file large enough to sample is compressed.
    env.model("small");
    let (code, v) = env.json(&[
        "pack",
        "small",
        "-o",
        "b3",
        "--key",
        "k.key",
        "--compress",
        "auto",
    ]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["compression"], "zstd", "{v}");
    for b in ["b1", "b2", "b3"] {
        env.ok(&["verify", b, "--trust", "k.pub", "--deep"]);
    }
    env.ok(&["unpack", "b1", "--trust", "k.pub", "--dest", "out1"]);
    assert_eq!(
        tree_without_receipt(&env.path("out1")),
        tree(&env.path("noise"))
    );
}

#[test]
fn non_utf8_names_devices_and_escaping_links_are_refused_by_name() {
    use std::os::unix::ffi::OsStrExt;
    let env = Env::new();
    env.model("m");
    let bad = env
        .path("m")
        .join(std::ffi::OsStr::from_bytes(b"bad-\xff.txt"));
    std::fs::write(&bad, b"x").unwrap();
    let text = env.fails(1, &["pack", "m", "-o", "b", "--key", "k.key"]);
    assert!(
        text.contains("not valid UTF-8") && text.contains("bad-"),
        "{text}"
    );
    std::fs::remove_file(&bad).unwrap();
    std::os::unix::fs::symlink("../k.pub", env.path("m/escape.pub")).unwrap();
    let text = env.fails(1, &["pack", "m", "-o", "b", "--key", "k.key"]);
    assert!(
        text.contains("escape.pub") && text.contains("outside"),
        "{text}"
    );
    std::fs::remove_file(env.path("m/escape.pub")).unwrap();
    let st = Command::new("mkfifo")
        .arg(env.path("m/pipe"))
        .status()
        .unwrap();
    assert!(st.success());
    let text = env.fails(1, &["pack", "m", "-o", "b", "--key", "k.key"]);
    assert!(text.contains("pipe") && text.contains("FIFO"), "{text}");
    env.assert_nothing_packed("b");
}

#[test]
fn thousands_of_directories_do_not_need_thousands_of_descriptors() {
    let env = Env::new();
    for i in 0..400 {
        env.write(&format!("m/d{:03}/sub/f.txt", i), format!("{i}").as_bytes());
    }
    env.ok(&[
        "pack",
        "m",
        "-o",
        "b",
        "--key",
        "k.key",
        "--compress",
        "none",
    ]);
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -n 256 && exec {} unpack b --trust k.pub --dest out",
            env!("CARGO_BIN_EXE_airlock")
        ))
        .current_dir(env.dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(tree_without_receipt(&env.path("out")), tree(&env.path("m")));
}
