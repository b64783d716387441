//! Many small files (issue 24): the model checks ride on the pass that already opens every
//! file (pack's scan, check's receipt comparison) and must find exactly what their own
//! path-based walk finds.

use std::io::Write;
use std::os::unix::fs::symlink;
use std::path::Path;

use rustix::fs::{Mode, OFlags};

use crate::support::*;

const POINTER: &[u8] = b"version https://git-lfs.github.com/spec/v1\n\
    oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n\
    size 4943852032\n";

fn fixtures() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/fixtures")
}

/// Copies the directory `from` to `to` (files and directories).
fn copy_tree(from: &Path, to: &Path) {
    for e in walkdir::WalkDir::new(from) {
        let e = e.unwrap();
        let dest = to.join(e.path().strip_prefix(from).unwrap());
        if e.file_type().is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
        } else {
            std::fs::copy(e.path(), &dest).unwrap();
        }
    }
}

/// Packs into `b`, with `--no-model-checks`, the model `m`: the test model, the corrupt and
/// valid fixtures, and what `more` adds.
fn pack_the_fixtures(env: &Env, more: impl FnOnce(&Env)) {
    let m = env.model("m");
    copy_tree(&fixtures().join("corrupt"), &m.join("corrupt"));
    copy_tree(&fixtures().join("valid"), &m.join("valid"));
    more(env);
    env.ok(&[
        "pack",
        "m",
        "-o",
        "b",
        "--key",
        "k.key",
        "--no-model-checks",
    ]);
}

fn codes_and_paths(findings: &serde_json::Value) -> Vec<(String, String)> {
    findings
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_string(),
                f["code"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// The JSON refusals of a pack whose checks were left to the read pass (`left`) and of one that
/// checked every file in its walk (`walked`) are the same, and name the pointer
/// `z/notes.txt`: exit code, findings and error.
fn assert_same_pointer_refusal(left: (i32, serde_json::Value), walked: (i32, serde_json::Value)) {
    assert_eq!(left.0, walked.0);
    assert_eq!(left.1["findings"], walked.1["findings"]);
    assert_eq!(left.1["error"], walked.1["error"]);
    assert_eq!(
        codes_and_paths(&left.1["findings"]),
        [("z/notes.txt".to_string(), "lfs-pointer".to_string())]
    );
}

/// `check` of an install that drifted every way the model checks care about (files the
/// receipt does not list, a receipt file replaced by a link, a missing one, links in and out
/// of the tree, `.no_exist` markers, shard indexes and configs read by path): the checks fed
/// by the receipt comparison find what `inspect::check_tree` finds walking the tree itself.
#[test]
fn checks_on_the_compares_handles_find_what_the_tree_walk_finds() {
    let env = Env::new();
    pack_the_fixtures(&env, |_| {});
    env.ok(&["unpack", "b", "--trust", "k.pub", "--dest", "out"]);
    let out = env.path("out");
    env.write("out/extra/tokenizer.json", POINTER);
    env.write(
        "out/extra/model.safetensors.index.json",
        b"{\"weight_map\": {\"a\": \"gone.safetensors\"}}",
    );
    env.write("out/.no_exist/c1/model.safetensors", b"");
    symlink(
        "corrupt/lfs-pointer.safetensors",
        out.join("linked.safetensors"),
    )
    .unwrap();
    symlink("nowhere.bin", out.join("dangling.bin")).unwrap();
    symlink(env.path("m/config.json"), out.join("outside.json")).unwrap();
    std::fs::remove_file(out.join("weights/part-2.bin")).unwrap();
    symlink("part-1.bin", out.join("weights/part-2.bin")).unwrap();
    std::fs::remove_file(out.join("run.sh")).unwrap();

    let receipt = airlock::receipt::open(&out, None).unwrap();
    let compared = airlock::receipt::compare_checking(
        &out,
        &receipt.manifest,
        false,
        true,
        &airlock::progress::Silent,
    )
    .unwrap();
    let (fed, unchecked) = compared.checks.finish(&out).unwrap();
    let walked = airlock::inspect::check_tree(&out).unwrap();
    assert_eq!(
        serde_json::to_value(&fed).unwrap(),
        serde_json::to_value(&walked).unwrap()
    );
    assert!(unchecked.is_empty(), "{unchecked:?}");
    let got = codes_and_paths(&serde_json::to_value(&fed).unwrap());
    for (path, code) in [
        ("corrupt/html-page.bin", "torch-not-a-checkpoint"),
        (
            "corrupt/missing-shard/model.safetensors.index.json",
            "shard-missing",
        ),
        ("dangling.bin", "dangling-symlink"),
        ("extra/model.safetensors.index.json", "shard-missing"),
        ("extra/tokenizer.json", "lfs-pointer"),
        ("linked.safetensors", "lfs-pointer"),
        ("outside.json", "symlink-escapes-tree"),
    ] {
        assert!(
            got.contains(&(path.to_string(), code.to_string())),
            "{path} {code} not in {got:?}"
        );
    }

    // The command reports the same findings (it drops those under .airlock, of which there
    // are none here; the value scan's are left out).
    let (code, v) = env.json(&["check", "out", "--trust", "k.pub", "--no-value-scan"]);
    assert_eq!(code, 3, "{v}");
    assert_eq!(v["error"]["kind"], "receipt-mismatch", "{v}");
    assert_eq!(codes_and_paths(&v["findings"]), got);
}

/// Creates `dirs/file` holding `bytes` below `root` through directory handles (a path this
/// long cannot be created by name).
fn write_deep(root: &Path, dirs: &[String], file: &str, bytes: &[u8]) {
    let flags = OFlags::DIRECTORY | OFlags::RDONLY | OFlags::NOFOLLOW;
    let mut fd = rustix::fs::open(root, flags, Mode::empty()).unwrap();
    for d in dirs {
        rustix::fs::mkdirat(&fd, d.as_str(), Mode::from_raw_mode(0o755)).unwrap();
        fd = rustix::fs::openat(&fd, d.as_str(), flags, Mode::empty()).unwrap();
    }
    let f = rustix::fs::openat(
        &fd,
        file,
        OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY,
        Mode::from_raw_mode(0o644),
    )
    .unwrap();
    std::fs::File::from(f).write_all(bytes).unwrap();
}

/// A path longer than the system's limit somewhere in an install stopped `check`'s model
/// checks altogether (their walk opened files by path): every finding was dropped with a
/// warning and a model that will not load passed with exit 0. The checks now ride on the
/// receipt comparison, which reaches every file through directory handles.
#[test]
fn a_path_too_long_to_walk_no_longer_hides_the_other_findings_of_check() {
    let env = Env::new();
    env.write("m/config.json", b"{\"model_type\": \"test\"}\n");
    env.write(
        "m/pytorch_model.bin",
        b"<!DOCTYPE html><html>Not Found</html>\n",
    );
    let dirs: Vec<String> = (0..16)
        .map(|i| format!("{i:02}{}", "d".repeat(248)))
        .collect();
    write_deep(
        &env.path("m"),
        &dirs,
        &format!("{}.bin", "f".repeat(76)),
        b"\x80\x02}q\x00.",
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
    env.ok(&["unpack", "b", "--trust", "k.pub", "--dest", "out"]);
    let (code, v) = env.json(&["check", "out", "--trust", "k.pub"]);
    assert_eq!(code, 3, "{v}");
    assert_eq!(v["error"]["kind"], "model-checks", "{v}");
    assert_eq!(
        codes_and_paths(&v["findings"]),
        [(
            "pytorch_model.bin".to_string(),
            "torch-not-a-checkpoint".to_string()
        )]
    );
}

/// The model checks an unpack runs on its staged files open each file once below its
/// directory's handle (one path-based check a file was 11% of an unpack of 100,000 files):
/// they find what the path-based walk finds on the install, paths without the staging prefix,
/// shard indexes and configs included.
#[test]
fn the_install_checks_on_handles_find_what_the_tree_walk_finds() {
    let env = Env::new();
    pack_the_fixtures(&env, |env| {
        env.write("m/deep/er/tokenizer.json", POINTER);
        for i in 0..300 {
            env.write(&format!("m/many/d{}/f{i}.txt", i % 3), b"small");
        }
    });
    let (code, v) = env.json(&["unpack", "b", "--trust", "k.pub", "--dest", "out"]);
    assert_eq!(code, 0, "{v}");
    let walked = airlock::inspect::check_tree(&env.path("out")).unwrap();
    let walked = codes_and_paths(&serde_json::to_value(&walked).unwrap());
    assert_eq!(codes_and_paths(&v["findings"]), walked);
    for (path, code) in [
        ("corrupt/html-page.bin", "torch-not-a-checkpoint"),
        (
            "corrupt/missing-shard/model.safetensors.index.json",
            "shard-missing",
        ),
        ("deep/er/tokenizer.json", "lfs-pointer"),
    ] {
        assert!(
            walked.contains(&(path.to_string(), code.to_string())),
            "{path} {code} not in {walked:?}"
        );
    }
}

/// Writes into `m/a/` more small files than the scan keeps the bytes of (64 MiB of 64 KiB
/// files), so that the small files after them are not opened by the scan: their model checks
/// are left to the pack's read pass.
fn fill_the_kept_bytes(env: &Env) {
    let bytes = vec![b'a'; 64 << 10];
    for i in 0..1100 {
        env.write(&format!("m/a/f{i:04}"), &bytes);
    }
}

/// Past the scan's kept bytes the small files are opened once, by the read pass, which runs
/// their model checks (issue 37 item 2): an LFS pointer there refuses the pack at the end of
/// that pass with the exit code, message and findings of the same pointer checked by the scan,
/// and leaves nothing behind; with `--no-model-checks` its finding is recorded as the scan's
/// are. Delta packs check such files before packing, with the same result.
#[test]
fn checks_left_to_the_read_pass_refuse_as_the_scans_do() {
    let env = Env::new();
    fill_the_kept_bytes(&env);
    env.write("m/z/notes.txt", POINTER);
    env.write("m/z/plain.txt", b"a plain text file\n");
    // The same pointer in a model the scan keeps whole: checked by the scan.
    env.write("small/z/notes.txt", POINTER);
    env.write("small/z/plain.txt", b"a plain text file\n");

    let scanned = env.run(&["pack", "small", "-o", "s", "--key", "k.key"]);
    let left = env.run(&["pack", "m", "-o", "b", "--key", "k.key"]);
    assert_ne!(scanned.status.code(), Some(0));
    assert_eq!(left.status.code(), scanned.status.code());
    assert_eq!(
        String::from_utf8_lossy(&left.stderr),
        String::from_utf8_lossy(&scanned.stderr)
    );
    env.assert_nothing_packed("b");
    env.assert_nothing_packed("s");
    assert_same_pointer_refusal(
        env.json(&["pack", "m", "-o", "b", "--key", "k.key"]),
        env.json(&["pack", "small", "-o", "s", "--key", "k.key"]),
    );
    env.assert_nothing_packed("b");

    // Recorded as a warning, where the scan's findings go.
    let (code, json) = env.json(&[
        "pack",
        "m",
        "-o",
        "b",
        "--key",
        "k.key",
        "--no-model-checks",
    ]);
    assert_eq!(code, 0, "{json}");
    let manifest = env.read_json("b/manifest.json");
    assert_eq!(
        codes_and_paths(&manifest["warnings"]),
        [("z/notes.txt".to_string(), "lfs-pointer".to_string())]
    );
    let warned = json["warnings"].as_array().unwrap();
    assert!(
        warned
            .iter()
            .any(|w| w.as_str().unwrap().starts_with("z/notes.txt: ")),
        "{json}"
    );

    // A delta of it (the pointer's file taken from the base) refuses the same way.
    std::fs::write(env.path("m/z/plain.txt"), b"changed\n").unwrap();
    let delta = env.run(&[
        "pack",
        "m",
        "-o",
        "d",
        "--key",
        "k.key",
        "--base",
        "b",
        "--version",
        "2",
    ]);
    assert_eq!(delta.status.code(), scanned.status.code());
    assert_eq!(
        String::from_utf8_lossy(&delta.stderr),
        String::from_utf8_lossy(&scanned.stderr)
    );
    env.assert_nothing_packed("d");
}

/// The same past a Hugging Face snapshot's kept bytes (issue 37 item 2, the cache half): the
/// walk finds the small blobs after them by `fstatat` and leaves their model checks to the
/// read pass, their one open. An LFS pointer there refuses the pack with the exit code, message
/// and findings of the same pointer in a snapshot the walk checks whole, and leaves nothing;
/// with `--no-model-checks` it is recorded as the walk's findings are; a bundle of two
/// repositories counts and names both pointers; a delta (the pointer taken from its base)
/// refuses as well.
#[test]
fn a_snapshots_checks_left_to_the_read_pass_refuse_as_the_walks_do() {
    let env = Env::new();
    fill_the_kept_bytes(&env);
    for dir in ["m", "small"] {
        env.write(&format!("{dir}/z/notes.txt"), POINTER);
        env.write(&format!("{dir}/z/plain.txt"), b"a plain text file\n");
    }
    // Into a cache as huggingface_hub lays one out: each file a link to its blob.
    for (dir, repo) in [("m", "org/m"), ("small", "org/small")] {
        let b = format!("b-{dir}");
        env.ok(&["pack", dir, "-o", &b, "--key", "k.key", "--no-model-checks"]);
        env.install_in_hf_cache(&b, "c", repo);
    }
    let pack = |repos: &[&str], out: &str, more: &[&str]| {
        let mut args = vec!["pack", "--hf-cache", "c"];
        for r in repos {
            args.extend(["--hf-repo", r]);
        }
        args.extend(["-o", out, "--key", "k.key"]);
        args.extend(more);
        args.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let run = |args: Vec<String>| env.run(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let json = |args: Vec<String>| env.json(&args.iter().map(String::as_str).collect::<Vec<_>>());

    let walked = run(pack(&["org/small"], "s", &[]));
    let left = run(pack(&["org/m"], "b", &[]));
    assert_ne!(walked.status.code(), Some(0));
    assert_eq!(left.status.code(), walked.status.code());
    // The same refusal; the note on the missing hub listing names each snapshot's commit.
    let refusal = |out: &std::process::Output| {
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .filter(|l| !l.contains("no hub listing"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(
        refusal(&walked).contains("z/notes.txt"),
        "{}",
        refusal(&walked)
    );
    assert_eq!(refusal(&left), refusal(&walked));
    let walked = json(pack(&["org/small"], "s", &[]));
    let walked_code = walked.0;
    assert_same_pointer_refusal(json(pack(&["org/m"], "b", &[])), walked);
    env.assert_nothing_packed("b");
    env.assert_nothing_packed("s");

    // Recorded as a warning, where the walk's findings go.
    let (code, out) = json(pack(&["org/m"], "b", &["--no-model-checks"]));
    assert_eq!(code, 0, "{out}");
    let manifest = env.read_json("b/manifest.json");
    assert_eq!(
        codes_and_paths(&manifest["warnings"]),
        [("z/notes.txt".to_string(), "lfs-pointer".to_string())]
    );

    // Both repositories in one bundle: the refusal counts and names both pointers, the one
    // left to the read pass included.
    let (code, both) = json(pack(&["org/m", "org/small"], "two", &[]));
    assert_eq!(code, walked_code, "{both}");
    assert_eq!(
        codes_and_paths(&both["findings"]),
        [
            (
                "models--org--m/z/notes.txt".to_string(),
                "lfs-pointer".to_string()
            ),
            (
                "models--org--small/z/notes.txt".to_string(),
                "lfs-pointer".to_string()
            ),
        ]
    );
    env.assert_nothing_packed("two");

    // A delta of it, the pointer's blob taken from the base: refused the same way.
    let (code, delta) = json(pack(&["org/m"], "d", &["--base", "b", "--version", "2"]));
    assert_eq!(code, walked_code, "{delta}");
    assert_eq!(
        codes_and_paths(&delta["findings"]),
        [("z/notes.txt".to_string(), "lfs-pointer".to_string())]
    );
    env.assert_nothing_packed("d");
}
