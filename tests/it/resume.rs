//! Resuming an interrupted unpack (issue 37 item 3): a rerun of the same bundle into the same
//! destination keeps each file the killed run staged that proves complete against the signed
//! manifest, and reads the bundle from the chunk holding the first file it still needs; a
//! work directory of another bundle is never reused, a staged file is never trusted because it
//! exists, and nothing in the work directory is followed.
//!
//! The kills land in the middle of the stream: debug builds read each volume
//! `AIRLOCK_TEST_VOLUME_READ_DELAY_MS` late and write how many volume bytes they have read so
//! far into `AIRLOCK_TEST_VOLUME_READ_LOG` after every read, so the test kills a run once it has
//! read a chosen amount, and knows what a killed run read. "Bytes read" below is that count:
//! bytes read from the bundle's volumes (the medium); the proof of the kept files reads the
//! staging directory (local disk) once per rerun and is reported beside it.

use crate::support::*;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process};

/// A model of `files` files of `size` bytes each in a few directories, and a config.
fn model(env: &Env, rel: &str, files: usize, size: usize, seed: u64) {
    env.write(
        &format!("{rel}/config.json"),
        b"{\"model_type\": \"test\"}\n",
    );
    for i in 0..files {
        env.write(
            &format!("{rel}/layer-{}/part-{i:03}.bin", i % 4),
            &pseudo_random(size, seed + i as u64),
        );
    }
}

fn pack(env: &Env, model: &str, bundle: &str, compress: &str, volume: &str, version: &str) {
    env.ok(&[
        "pack",
        model,
        "-o",
        bundle,
        "--key",
        "k.key",
        "--compress",
        compress,
        "--volume-size",
        volume,
        "--name",
        "m",
        "--version",
        version,
        "-q",
    ]);
}

/// Volume bytes a run of airlock read, from its log (removed after).
fn reads(env: &Env) -> u64 {
    let log = env.path("reads.log");
    let n = std::fs::read_to_string(&log)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    let _ = std::fs::remove_file(log);
    n
}

fn unpack(env: &Env, bundle: &str, dest: &str, delay_ms: u64, extra: &[&str]) -> Child {
    let _ = std::fs::remove_file(env.path("reads.log"));
    Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(["unpack", bundle, "--trust", "k.pub", "--dest", dest])
        .args(extra)
        .current_dir(env.dir.path())
        .env_remove("AIRLOCK_TRUST")
        .env("AIRLOCK_TEST_VOLUME_READ_DELAY_MS", delay_ms.to_string())
        .env("AIRLOCK_TEST_VOLUME_READ_LOG", env.path("reads.log"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run airlock")
}

/// How a run ended.
struct Ran {
    /// Volume bytes it read.
    read: u64,
    /// Killed (by the signal) rather than finished.
    killed: bool,
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs an unpack and sends `signal` once it has read `after` volume bytes (never, if it ends
/// first).
fn run_until(
    env: &Env,
    bundle: &str,
    dest: &str,
    after: u64,
    signal: Signal,
    extra: &[&str],
) -> Ran {
    let mut child = unpack(env, bundle, dest, 2, extra);
    let mut killed = false;
    let started = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        let so_far = std::fs::read_to_string(env.path("reads.log"))
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or(0);
        if so_far >= after {
            kill_process(Pid::from_child(&child), signal).unwrap();
            killed = true;
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "unpack did not end"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let out = child.wait_with_output().unwrap();
    Ran {
        read: reads(env),
        killed: killed && out.status.code() != Some(0),
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Every file and directory under `root`: relative path, mode, SHA-256 of a file's content.
fn hashed_tree(root: &Path) -> Vec<(String, u32, Option<String>)> {
    use sha2::{Digest, Sha256};
    use std::os::unix::fs::PermissionsExt;
    walkdir::WalkDir::new(root)
        .min_depth(1)
        .sort_by_file_name()
        .into_iter()
        .map(|e| {
            let e = e.unwrap();
            let meta = std::fs::symlink_metadata(e.path()).unwrap();
            let rel = e
                .path()
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let content = meta.is_file().then(|| {
                let mut h = Sha256::new();
                std::io::copy(&mut std::fs::File::open(e.path()).unwrap(), &mut h).unwrap();
                hex::encode(h.finalize())
            });
            (rel, meta.permissions().mode() & 0o7777, content)
        })
        .collect()
}

/// The work directories beside the destination.
fn work_dirs(env: &Env) -> Vec<String> {
    staging_leftovers(env.dir.path())
}

/// A small deterministic generator (the kill points; the seed is printed).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// A tree as `support::tree` gives it.
type Tree = Vec<(String, u32, Option<Vec<u8>>)>;

fn clean_run(env: &Env, bundle: &str, dest: &str) -> (u64, Tree) {
    let (code, v) = env.json(&["unpack", bundle, "--trust", "k.pub", "--dest", dest]);
    assert_eq!(code, 0, "{v}");
    assert!(v["resumed"].is_null(), "{v}");
    let read = v["volume_bytes_read"].as_u64().unwrap();
    (read, tree(&env.path(dest)))
}

/// The goal: 20 kills at random points of one install (SIGKILL, a power cut, and
/// SIGINT, Ctrl-C, in turn), each followed by a rerun: the result is byte for byte the clean
/// install, and all the runs together read at most 1.1 times the bundle bytes of one clean run.
#[test]
fn twenty_kills_then_reruns_read_the_bundle_about_once() {
    let env = Env::new();
    // 256 MiB in 1024 files of 256 KiB, stored, in 128 KiB volumes. Each kill loses what the
    // killed run read but had not written as a complete file: the file it was writing (half a
    // file on average), the buffer the volume reader was filling (up to 1 MiB) and the start
    // of the chunk the rerun reads from (here a volume: 64 KiB on average). The model is large
    // enough for those to weigh what they weigh in a large install, where the buffer is
    // nothing and the partial file is half of one shard among many.
    model(&env, "m", 1024, 256 << 10, 1);
    pack(&env, "m", "b", "none", "128K", "1");
    let (code, v) = env.json(&["unpack", "b", "--trust", "k.pub", "--dest", "clean"]);
    assert_eq!(code, 0, "{v}");
    let clean = v["volume_bytes_read"].as_u64().unwrap();
    let want = hashed_tree(&env.path("clean"));
    std::fs::remove_dir_all(env.path("clean")).unwrap();

    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("kill points seed {seed:#x}");
    let mut rng = Rng(seed | 1);
    let mut total = 0u64;
    let mut kills = 0;
    while kills < 20 {
        // Each run is killed after reading 1% to 8% of the bundle, so 20 kills cover most of
        // the install and leave the rest to the final run.
        let after = clean / 100 + rng.next() % (clean * 7 / 100);
        let signal = if kills % 2 == 0 {
            Signal::KILL
        } else {
            Signal::INT
        };
        let ran = run_until(&env, "b", "out", after, signal, &["--progress", "plain"]);
        total += ran.read;
        if !ran.killed {
            break;
        }
        kills += 1;
        assert!(
            !env.path("out").exists(),
            "kill {kills}: the destination appeared before the install was complete"
        );
        let dirs = work_dirs(&env);
        assert_eq!(dirs.len(), 1, "kill {kills}: {dirs:?}");
        if signal == Signal::INT {
            assert_eq!(ran.code, Some(130), "{}", ran.stderr);
            assert!(
                ran.stderr.contains("kept .airlock-staging-out-")
                    && ran.stderr.contains("rerun the same command to resume"),
                "{}",
                ran.stderr
            );
        }
        if kills > 1 {
            assert!(
                ran.stderr.contains("airlock: resuming: "),
                "kill {kills}: the rerun did not resume: {}",
                ran.stderr
            );
        }
    }
    assert_eq!(kills, 20, "the install finished before 20 kills");
    // The rerun that finishes.
    let child = unpack(&env, "b", "out", 0, &["--json"]);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    total += reads(&env);
    assert!(v["resumed"]["files"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(hashed_tree(&env.path("out")), want, "not the clean install");
    assert!(work_dirs(&env).is_empty(), "{:?}", work_dirs(&env));
    let ratio = total as f64 / clean as f64;
    eprintln!(
        "20 kills and reruns: {total} volume bytes read, one clean run {clean}: {ratio:.3}x ({} files kept by the last rerun)",
        v["resumed"]["files"]
    );
    assert!(
        ratio <= 1.1,
        "the kills and reruns read {ratio:.3} times the bundle"
    );
}

/// A compressed bundle is one zstd frame: a rerun keeps the proven files (not written again)
/// but reads the stream from its start, and says so.
#[test]
fn a_compressed_bundle_resumes_from_the_start_of_its_stream() {
    let env = Env::new();
    model(&env, "m", 24, 256 << 10, 7);
    pack(&env, "m", "b", "zstd", "64K", "1");
    let (clean, want) = clean_run(&env, "b", "clean");
    let ran = run_until(&env, "b", "out", clean / 2, Signal::KILL, &[]);
    assert!(ran.killed);
    let child = unpack(&env, "b", "out", 0, &["--json", "--progress", "plain"]);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("reading the stream from its start"),
        "{stderr}"
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["resumed"]["files"].as_u64().unwrap() > 0, "{v}");
    assert!(v["resumed"]["from_volume"].is_null(), "{v}");
    assert_eq!(v["volume_bytes_read"].as_u64().unwrap(), clean);
    let _ = reads(&env);
    assert_eq!(tree(&env.path("out")), want);
}

/// Kills an unpack of `bundle` into `dest` half way with SIGKILL; returns the work directory.
fn killed_half_way(env: &Env, bundle: &str, dest: &str, clean: u64) -> String {
    let before = work_dirs(env);
    let ran = run_until(env, bundle, dest, clean / 2, Signal::KILL, &[]);
    assert!(ran.killed, "{}{}", ran.stdout, ran.stderr);
    let mut dirs = work_dirs(env);
    dirs.retain(|d| !before.contains(d));
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    dirs.remove(0)
}

/// Staged files, complete ones first, relative to the work directory's tree.
fn staged_files(tree: &Path) -> Vec<String> {
    let mut out: Vec<String> = walkdir::WalkDir::new(tree)
        .into_iter()
        .flatten()
        .filter(|e| e.file_type().is_file())
        .map(|e| {
            e.path()
                .strip_prefix(tree)
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    out.sort();
    out
}

/// A work directory another bundle (another version of the same model) left is never reused:
/// it is removed, the install starts clean and reads the whole bundle. One left for another
/// destination is left alone for that destination's rerun.
#[test]
fn a_staging_directory_of_another_bundle_is_not_reused() {
    let env = Env::new();
    model(&env, "v1", 16, 256 << 10, 1);
    model(&env, "v2", 16, 256 << 10, 1);
    // Version 2 changes one file: most staged files of version 1 would hash right for it.
    env.write("v2/layer-3/part-015.bin", &pseudo_random(256 << 10, 999));
    pack(&env, "v1", "b1", "none", "64K", "1");
    pack(&env, "v2", "b2", "none", "64K", "2");
    let (clean, _) = clean_run(&env, "b2", "clean2");
    let other = killed_half_way(&env, "b1", "elsewhere", clean);
    let stale = killed_half_way(&env, "b1", "out", clean);
    let (code, v) = env.json(&["unpack", "b2", "--trust", "k.pub", "--dest", "out"]);
    assert_eq!(code, 0, "{v}");
    assert!(
        v["resumed"].is_null(),
        "another bundle's staging was reused: {v}"
    );
    assert_eq!(v["volume_bytes_read"].as_u64().unwrap(), clean, "{v}");
    assert!(!env.path(&stale).exists(), "{stale} was left");
    assert!(
        env.path(&other).join(".airlock-resume").is_file(),
        "the work directory of another destination was touched"
    );
    assert_eq!(
        tree_without_receipt(&env.path("out")),
        tree(&env.path("v2"))
    );
    // That destination's rerun resumes from it.
    let (code, v) = env.json(&["unpack", "b1", "--trust", "k.pub", "--dest", "elsewhere"]);
    assert_eq!(code, 0, "{v}");
    assert!(v["resumed"]["files"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(
        tree_without_receipt(&env.path("elsewhere")),
        tree(&env.path("v1"))
    );
    // --no-resume starts clean and removes what was kept.
    let third = killed_half_way(&env, "b2", "out3", clean);
    let (code, v) = env.json(&[
        "unpack",
        "b2",
        "--trust",
        "k.pub",
        "--dest",
        "out3",
        "--no-resume",
    ]);
    assert_eq!(code, 0, "{v}");
    assert!(v["resumed"].is_null(), "{v}");
    assert_eq!(v["volume_bytes_read"].as_u64().unwrap(), clean, "{v}");
    assert!(!env.path(&third).exists());
    assert!(work_dirs(&env).is_empty(), "{:?}", work_dirs(&env));
}

/// A staged file is never trusted because it exists: one altered after the kill (same size)
/// is hashed, fails, is discarded and streamed again.
#[test]
fn a_tampered_kept_file_is_rehashed_and_discarded() {
    let env = Env::new();
    model(&env, "m", 16, 256 << 10, 3);
    pack(&env, "m", "b", "none", "64K", "1");
    let (clean, want) = clean_run(&env, "b", "clean");
    let work = killed_half_way(&env, "b", "out", clean);
    let tree_dir = env.path(&work).join("tree");
    let staged = staged_files(&tree_dir);
    let complete: Vec<&String> = staged
        .iter()
        .filter(|p| {
            std::fs::read(tree_dir.join(p)).unwrap()
                == std::fs::read(env.path("m").join(p)).unwrap()
        })
        .collect();
    assert!(complete.len() >= 3, "{staged:?}");
    // The first file in bundle order: everything after it must be read again too.
    let victim = complete[1].clone();
    let mut bytes = std::fs::read(tree_dir.join(&victim)).unwrap();
    bytes[1000] ^= 1;
    std::fs::write(tree_dir.join(&victim), &bytes).unwrap();
    let (code, v) = env.json(&["unpack", "b", "--trust", "k.pub", "--dest", "out"]);
    assert_eq!(code, 0, "{v}");
    let kept = v["resumed"]["files"].as_u64().unwrap();
    assert!(
        kept >= 1 && kept < complete.len() as u64,
        "kept {kept} of {} complete files, one altered: {v}",
        complete.len()
    );
    assert!(v["resumed"]["discarded"].as_u64().unwrap() >= 1, "{v}");
    assert_eq!(tree(&env.path("out")), want);
}

/// Links planted in the work directory are never followed: a staged file replaced by a link to
/// a file outside, and a directory replaced by a link to a directory outside, are removed (the
/// files outside untouched) and streamed again; a work directory replaced by a link is not
/// adopted, nor is one whose mode was opened up.
#[test]
fn a_link_planted_in_the_staging_directory_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    model(&env, "m", 16, 256 << 10, 5);
    pack(&env, "m", "b", "none", "64K", "1");
    let (clean, want) = clean_run(&env, "b", "clean");
    env.write("outside/secret", b"not airlock's");
    env.write("outside/dir/keep", b"keep");
    let work = killed_half_way(&env, "b", "out", clean);
    let tree_dir = env.path(&work).join("tree");
    let staged = staged_files(&tree_dir);
    assert!(staged.len() >= 2, "{staged:?}");
    let victim = tree_dir.join(&staged[0]);
    std::fs::remove_file(&victim).unwrap();
    std::os::unix::fs::symlink(env.path("outside/secret"), &victim).unwrap();
    std::fs::remove_dir_all(tree_dir.join("layer-3")).ok();
    std::os::unix::fs::symlink(env.path("outside/dir"), tree_dir.join("layer-3")).unwrap();
    let (code, v) = env.json(&["unpack", "b", "--trust", "k.pub", "--dest", "out"]);
    assert_eq!(code, 0, "{v}");
    assert!(v["resumed"]["discarded"].as_u64().unwrap() >= 2, "{v}");
    assert_eq!(tree(&env.path("out")), want);
    assert_eq!(
        std::fs::read(env.path("outside/secret")).unwrap(),
        b"not airlock's"
    );
    assert_eq!(
        std::fs::read(env.path("outside/dir/keep")).unwrap(),
        b"keep"
    );
    assert_eq!(
        std::fs::read_dir(env.path("outside/dir")).unwrap().count(),
        1
    );

    // The work directory itself replaced by a link to a directory holding a copy of it: not
    // adopted, not followed, not removed.
    let work = killed_half_way(&env, "b", "out2", clean);
    std::fs::rename(env.path(&work), env.path("outside/moved")).unwrap();
    std::os::unix::fs::symlink(env.path("outside/moved"), env.path(&work)).unwrap();
    let (code, v) = env.json(&["unpack", "b", "--trust", "k.pub", "--dest", "out2"]);
    assert_eq!(code, 0, "{v}");
    assert!(
        v["resumed"].is_null(),
        "a linked work directory was adopted: {v}"
    );
    assert!(env.path("outside/moved/tree").is_dir());
    assert!(
        std::fs::symlink_metadata(env.path(&work))
            .unwrap()
            .is_symlink()
    );
    assert_eq!(tree(&env.path("out2")), want);
    std::fs::remove_file(env.path(&work)).unwrap();

    // Opened up to others (mode 0755): not adopted (removed as stale, it is this user's).
    let work = killed_half_way(&env, "b", "out3", clean);
    std::fs::set_permissions(env.path(&work), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (code, v) = env.json(&["unpack", "b", "--trust", "k.pub", "--dest", "out3"]);
    assert_eq!(code, 0, "{v}");
    assert!(
        v["resumed"].is_null(),
        "an opened-up work directory was adopted: {v}"
    );
    assert_eq!(tree(&env.path("out3")), want);
}

/// An OCI image layout keeps each blob once it is verified (content-addressed, unreferenced
/// until `index.json` names it): a rerun after a kill hashes the blobs there and reads the
/// bundle from the first file whose blob is missing; the layout is the clean one.
#[test]
fn an_oci_layout_resumes_from_the_first_missing_blob() {
    let env = Env::new();
    model(&env, "m", 16, 256 << 10, 11);
    pack(&env, "m", "b", "none", "64K", "1");
    let (code, v) = env.json(&["unpack", "b", "--trust", "k.pub", "--oci-layout", "clean"]);
    assert_eq!(code, 0, "{v}");
    let clean = v["volume_bytes_read"].as_u64().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_airlock"));
    child
        .args(["unpack", "b", "--trust", "k.pub", "--oci-layout", "lay"])
        .current_dir(env.dir.path())
        .env("AIRLOCK_TEST_VOLUME_READ_DELAY_MS", "2")
        .env("AIRLOCK_TEST_VOLUME_READ_LOG", env.path("reads.log"))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = child.spawn().unwrap();
    loop {
        let n = std::fs::read_to_string(env.path("reads.log"))
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or(0);
        if n >= clean / 2 {
            break;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "finished before the kill"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    kill_process(Pid::from_child(&child), Signal::KILL).unwrap();
    child.wait().unwrap();
    let first = reads(&env);
    let (code, v) = env.json(&["unpack", "b", "--trust", "k.pub", "--oci-layout", "lay"]);
    assert_eq!(code, 0, "{v}");
    let files = v["resumed"]["files"].as_u64().unwrap();
    assert!(files > 0 && files < 17, "{v}");
    assert!(v["resumed"]["from_volume"].is_string(), "{v}");
    let second = v["volume_bytes_read"].as_u64().unwrap();
    assert!(
        first + second < clean + clean / 4,
        "read {first} + {second} of {clean}"
    );
    let ls = |d: &str| -> Vec<(String, Vec<u8>)> {
        let mut out: Vec<_> = std::fs::read_dir(env.path(d).join("blobs/sha256"))
            .unwrap()
            .flatten()
            .map(|e| {
                (
                    e.file_name().to_string_lossy().into_owned(),
                    std::fs::read(e.path()).unwrap(),
                )
            })
            .collect();
        out.sort();
        out
    };
    assert_eq!(ls("lay"), ls("clean"));
    assert_eq!(
        std::fs::read(env.path("lay/index.json")).unwrap(),
        std::fs::read(env.path("clean/index.json")).unwrap()
    );
}
