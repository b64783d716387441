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
    unpack_to(env, bundle, &["--dest", dest], delay_ms, extra)
}

/// [`unpack`] into the target the arguments `to` name (`--dest DIR`, `--hf-cache CACHE ...`).
fn unpack_to(env: &Env, bundle: &str, to: &[&str], delay_ms: u64, extra: &[&str]) -> Child {
    let _ = std::fs::remove_file(env.path("reads.log"));
    Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(["unpack", bundle, "--trust", "k.pub"])
        .args(to)
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
    run_until_to(env, bundle, &["--dest", dest], after, signal, extra)
}

/// [`run_until`] into the target the arguments `to` name.
fn run_until_to(
    env: &Env,
    bundle: &str,
    to: &[&str],
    after: u64,
    signal: Signal,
    extra: &[&str],
) -> Ran {
    let mut child = unpack_to(env, bundle, to, 2, extra);
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
    let read = reads(env);
    // The log is replaced by rename after every read, so a killed run's count is never lost.
    assert!(
        !killed || read >= after,
        "a run killed after reading {after} bytes logged {read}"
    );
    Ran {
        read,
        killed: killed && out.status.code() != Some(0),
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Every file, directory and link under `root`: relative path, mode, SHA-256 of a file's
/// content or a link's target.
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
            let content = if meta.is_symlink() {
                Some(format!(
                    "-> {}",
                    std::fs::read_link(e.path()).unwrap().display()
                ))
            } else {
                meta.is_file().then(|| {
                    let mut h = Sha256::new();
                    std::io::copy(&mut std::fs::File::open(e.path()).unwrap(), &mut h).unwrap();
                    hex::encode(h.finalize())
                })
            };
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

/// How many bundle bytes each of 20 runs reads before it is killed: the gaps between 20 random
/// points of the first 80% of a clean run's `clean` bytes, each at least 0.25% of them. The
/// kills then fall across most of the install, and all 20 come before its end whatever the
/// seed (at most 85% in all, before the few bytes each rerun reads again): gaps drawn one by
/// one, independently, overran the install in about one seed in eight.
fn kill_gaps(rng: &mut Rng, clean: u64) -> Vec<u64> {
    kill_gaps_n(rng, clean, 20)
}

/// [`kill_gaps`] for `n` kills.
fn kill_gaps_n(rng: &mut Rng, clean: u64, n: usize) -> Vec<u64> {
    let span = clean * 80 / 100;
    let mut points: Vec<u64> = (0..n).map(|_| rng.next() % span).collect();
    points.sort_unstable();
    let mut last = 0;
    points
        .into_iter()
        .map(|p| {
            let gap = (p - last).max(clean / 400);
            last = p;
            gap
        })
        .collect()
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
    let gaps = kill_gaps(&mut rng, clean);
    let mut total = 0u64;
    let mut kills = 0;
    while kills < 20 {
        // The kills cover most of the install and leave the rest to the final run.
        let after = gaps[kills];
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
    // 8 MiB: a kill loses up to about 1.4 MiB (the volume reader's 1 MiB buffer, the file
    // being written, a volume's start), under the quarter of the bundle allowed below; with
    // 4 MiB it went over under load (1.37 MiB lost once).
    model(&env, "m", 32, 256 << 10, 11);
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
    assert!(files > 0 && files < 33, "{v}");
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

// ---- Hugging Face cache (`unpack --hf-cache`) ----
//
// The work directory is `CACHE/.locks/.airlock-staging-<repo folder>-<16 hex>/`, marked with the
// manifest digest, the repository folder and the revision; a rerun proves each staged blob and
// reads the bundle from the first file whose blob it still needs. Nothing appears in the
// repository folder before the end (a new repository is one rename, refs included).

/// The repository a bundle packed from a directory is installed as.
const HF_REPO: &str = "acme/m";

/// The target arguments of an install of a bundle packed from a directory into `cache`.
fn hf_to(cache: &str) -> [&str; 4] {
    ["--hf-cache", cache, "--hf-repo", HF_REPO]
}

/// The work directories in `cache`'s `.locks`.
fn hf_work_dirs(env: &Env, cache: &str) -> Vec<String> {
    let locks = env.path(&format!("{cache}/.locks"));
    if !locks.exists() {
        return Vec::new();
    }
    let mut dirs = staging_leftovers(&locks);
    dirs.sort();
    dirs
}

/// Every file of the model directory `model`, as huggingface_hub must find it: `{path: {sha256}}`.
fn hf_files(env: &Env, model: &str) -> serde_json::Value {
    use sha2::{Digest, Sha256};
    let root = env.path(model);
    let mut out = serde_json::Map::new();
    for e in walkdir::WalkDir::new(&root).min_depth(1) {
        let e = e.unwrap();
        if e.file_type().is_file() {
            let rel = e.path().strip_prefix(&root).unwrap().display().to_string();
            let sha = hex::encode(Sha256::digest(std::fs::read(e.path()).unwrap()));
            out.insert(rel, serde_json::json!({ "sha256": sha }));
        }
    }
    serde_json::Value::Object(out)
}

/// The goal for a Hugging Face cache: 20 kills at random points (SIGKILL and SIGINT in
/// turn), each followed by a rerun; the repository folder is byte for byte (blobs, links, refs,
/// airlock's trace) the one a clean install makes, huggingface_hub's own readers scan and load
/// it, and all the runs together read at most 1.1 times the bundle bytes of one clean run. The
/// model is packed from a directory, so every blob name is a git blob id the rerun recomputes.
#[test]
fn twenty_kills_of_an_hf_cache_install_then_reruns_read_the_bundle_about_once() {
    let env = Env::new();
    model(&env, "m", 1024, 256 << 10, 1);
    pack(&env, "m", "b", "none", "128K", "1");
    let mut args = vec!["unpack", "b", "--trust", "k.pub"];
    args.extend(hf_to("clean"));
    let (code, v) = env.json(&args);
    assert_eq!(code, 0, "{v}");
    assert!(v["resumed"].is_null(), "{v}");
    let clean = v["volume_bytes_read"].as_u64().unwrap();
    let want = hashed_tree(&env.path("clean/models--acme--m"));

    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("kill points seed {seed:#x}");
    let mut rng = Rng(seed | 1);
    let gaps = kill_gaps(&mut rng, clean);
    let mut total = 0u64;
    let mut kills = 0;
    while kills < 20 {
        let after = gaps[kills];
        let signal = if kills % 2 == 0 {
            Signal::KILL
        } else {
            Signal::INT
        };
        // Every other SIGINT reports in JSON.
        let json = kills % 4 == 3;
        let extra: &[&str] = if json {
            &["--progress", "plain", "--json"]
        } else {
            &["--progress", "plain"]
        };
        let ran = run_until_to(&env, "b", &hf_to("c"), after, signal, extra);
        total += ran.read;
        if !ran.killed {
            break;
        }
        kills += 1;
        assert!(
            !env.path("c/models--acme--m").exists(),
            "kill {kills}: the repository appeared before the install was complete"
        );
        let dirs = hf_work_dirs(&env, "c");
        assert_eq!(dirs.len(), 1, "kill {kills}: {dirs:?}");
        assert!(
            dirs[0].starts_with(".airlock-staging-models--acme--m-"),
            "{dirs:?}"
        );
        if signal == Signal::INT {
            assert_eq!(ran.code, Some(130), "{}", ran.stderr);
            let kept = env.path("c/.locks").join(&dirs[0]);
            let text = if json {
                let doc: serde_json::Value = serde_json::from_str(&ran.stdout).unwrap();
                assert_eq!(doc["kept_for_resume"], serde_json::json!([kept]), "{doc}");
                doc["kept"].as_str().unwrap().to_string()
            } else {
                ran.stderr.clone()
            };
            assert!(
                text.contains(&format!("kept {}", kept.display()))
                    && text.contains("rerun the same command to resume"),
                "{text}"
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
    let child = unpack_to(&env, "b", &hf_to("c"), 0, &["--json"]);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    total += reads(&env);
    assert!(v["resumed"]["files"].as_u64().unwrap() > 0, "{v}");
    assert!(v["resumed"]["from_volume"].is_string(), "{v}");
    assert_eq!(
        hashed_tree(&env.path("c/models--acme--m")),
        want,
        "not the clean install"
    );
    assert!(
        hf_work_dirs(&env, "c").is_empty(),
        "{:?}",
        hf_work_dirs(&env, "c")
    );
    let ratio = total as f64 / clean as f64;
    eprintln!(
        "20 kills and reruns into a Hugging Face cache: {total} volume bytes read, one clean run {clean}: {ratio:.3}x ({} files kept by the last rerun)",
        v["resumed"]["files"]
    );
    assert!(
        ratio <= 1.1,
        "the kills and reruns read {ratio:.3} times the bundle"
    );
    crate::hfcache::assert_client_resolves(&env, "c", HF_REPO, &hf_files(&env, "m"));
}

/// Files of a repository built with huggingface_hub's own functions: LFS blobs (named by
/// SHA-256) large enough for a kill to land between them, and small files in git (named by
/// their git blob id, one content twice).
fn hf_source_files(changed: Option<u64>) -> serde_json::Value {
    let mut files = vec![
        serde_json::json!({"path": "config.json", "lfs": false, "text": "{\"model_type\": \"tiny\"}\n"}),
        serde_json::json!({"path": "tok/vocab.txt", "lfs": false, "text": "a\nb\nc\n"}),
        serde_json::json!({"path": "tok/copy.txt", "lfs": false, "text": "a\nb\nc\n"}),
    ];
    for i in 0..16u64 {
        let seed = if Some(i) == changed { 1000 + i } else { i };
        files.push(serde_json::json!({
            "path": format!("w/part-{i:02}.bin"), "lfs": i % 2 == 0, "random": 256 << 10, "seed": seed
        }));
    }
    serde_json::Value::Array(files)
}

/// Builds a source cache `src` at `commit` and packs it (stored, 64 KiB volumes) into `out`.
fn hf_source_bundle(
    env: &Env,
    src: &str,
    commit: &str,
    changed: Option<u64>,
    out: &str,
) -> serde_json::Value {
    let built = crate::hfcache::build(env, src, commit, hf_source_files(changed), true);
    env.ok(&[
        "pack",
        "--hf-repo",
        crate::hfcache::REPO,
        "--hf-cache",
        src,
        "-o",
        out,
        "--key",
        "k.key",
        "--compress",
        "none",
        "--volume-size",
        "64K",
        "-q",
    ]);
    built
}

/// A clean install of `bundle` into `cache` with `extra`: the volume bytes it read.
fn clean_hf(env: &Env, bundle: &str, cache: &str, extra: &[&str]) -> u64 {
    let mut args = vec!["unpack", bundle, "--trust", "k.pub", "--hf-cache", cache];
    args.extend(extra);
    let (code, v) = env.json(&args);
    assert_eq!(code, 0, "{v}");
    assert!(v["resumed"].is_null(), "{v}");
    v["volume_bytes_read"].as_u64().unwrap()
}

/// Kills an install of `bundle` into `cache` (with `extra`) half way; returns its work
/// directory's path.
fn hf_killed_half_way(
    env: &Env,
    bundle: &str,
    cache: &str,
    extra: &[&str],
    clean: u64,
) -> std::path::PathBuf {
    let before = hf_work_dirs(env, cache);
    let mut to = vec!["--hf-cache", cache];
    to.extend(extra);
    let ran = run_until_to(env, bundle, &to, clean / 2, Signal::KILL, &[]);
    assert!(ran.killed, "{}{}", ran.stdout, ran.stderr);
    let mut dirs = hf_work_dirs(env, cache);
    dirs.retain(|d| !before.contains(d));
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    env.path(&format!("{cache}/.locks")).join(&dirs[0])
}

/// A kept work directory is reused only by the same bundle into the same repository and
/// revision of the same cache: another version of the model, another revision or
/// `--no-resume` starts clean (reading the whole bundle) and removes it; the one kept for
/// another repository of the cache is left alone and later resumes.
#[test]
fn an_hf_cache_staging_is_reused_only_for_the_same_bundle_repository_and_revision() {
    let env = Env::new();
    hf_source_bundle(&env, "src1", crate::hfcache::COMMIT_A, None, "b1");
    let built2 = hf_source_bundle(&env, "src2", crate::hfcache::COMMIT_B, Some(15), "b2");
    let clean1 = clean_hf(&env, "b1", "clean1", &[]);
    let clean2 = clean_hf(&env, "b2", "clean2", &[]);
    let want2 = hashed_tree(&env.path("clean2/models--acme--tiny-model"));

    // Version 1 killed into the repository, and into another repository of the same cache.
    let v1 = hf_killed_half_way(&env, "b1", "c", &[], clean1);
    let other = hf_killed_half_way(&env, "b1", "c", &["--hf-repo", "acme/other"], clean1);
    assert!(
        v1.join(".airlock-resume").is_file(),
        "the first kept directory was touched"
    );
    // Version 2 into the repository: version 1's staging is not reused, it is removed.
    let (code, v) = env.json(&["unpack", "b2", "--trust", "k.pub", "--hf-cache", "c"]);
    assert_eq!(code, 0, "{v}");
    assert!(
        v["resumed"].is_null(),
        "another bundle's staging was reused: {v}"
    );
    assert_eq!(v["volume_bytes_read"].as_u64().unwrap(), clean2, "{v}");
    assert!(!v1.exists(), "{} was left", v1.display());
    assert!(
        other.join(".airlock-resume").is_file(),
        "the work directory of another repository was touched"
    );
    assert_eq!(hashed_tree(&env.path("c/models--acme--tiny-model")), want2);
    crate::hfcache::assert_client_resolves(&env, "c", crate::hfcache::REPO, &built2);

    // The same bundle under another revision: not reused either.
    let main = hf_killed_half_way(&env, "b1", "c3", &[], clean1);
    let (code, v) = env.json(&[
        "unpack",
        "b1",
        "--trust",
        "k.pub",
        "--hf-cache",
        "c3",
        "--revision",
        "dev",
    ]);
    assert_eq!(code, 0, "{v}");
    assert!(
        v["resumed"].is_null(),
        "the staging of another revision was reused: {v}"
    );
    assert_eq!(v["volume_bytes_read"].as_u64().unwrap(), clean1, "{v}");
    assert!(!main.exists(), "{} was left", main.display());

    // The other repository's rerun resumes from its own.
    let (code, v) = env.json(&[
        "unpack",
        "b1",
        "--trust",
        "k.pub",
        "--hf-cache",
        "c",
        "--hf-repo",
        "acme/other",
    ]);
    assert_eq!(code, 0, "{v}");
    assert!(v["resumed"]["files"].as_u64().unwrap() > 0, "{v}");
    assert!(v["volume_bytes_read"].as_u64().unwrap() < clean1, "{v}");
    assert!(
        hf_work_dirs(&env, "c").is_empty(),
        "{:?}",
        hf_work_dirs(&env, "c")
    );

    // --no-resume starts clean and removes what was kept.
    let kept = hf_killed_half_way(&env, "b2", "c4", &[], clean2);
    let (code, v) = env.json(&[
        "unpack",
        "b2",
        "--trust",
        "k.pub",
        "--hf-cache",
        "c4",
        "--no-resume",
    ]);
    assert_eq!(code, 0, "{v}");
    assert!(v["resumed"].is_null(), "{v}");
    assert_eq!(v["volume_bytes_read"].as_u64().unwrap(), clean2, "{v}");
    assert!(!kept.exists());
    assert!(
        hf_work_dirs(&env, "c4").is_empty(),
        "{:?}",
        hf_work_dirs(&env, "c4")
    );
    assert_eq!(hashed_tree(&env.path("c4/models--acme--tiny-model")), want2);
}

/// Nothing in a kept work directory is trusted because it is there: a staged blob changed
/// after the kill (same size), a file planted under the name of a blob not staged yet, a blob
/// replaced by a link to a file outside and the snapshot folder replaced by a link to a
/// directory outside are each discarded (the files outside untouched) and streamed again; a
/// work directory replaced by a link is not adopted or followed, nor is one opened up to others.
#[test]
fn a_changed_planted_or_linked_blob_in_a_kept_hf_staging_is_discarded_not_trusted() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    let built = hf_source_bundle(&env, "src", crate::hfcache::COMMIT_A, None, "b");
    let clean = clean_hf(&env, "b", "clean", &[]);
    let want = hashed_tree(&env.path("clean/models--acme--tiny-model"));
    env.write("outside/secret", b"not airlock's");
    env.write("outside/dir/keep", b"keep");

    let work = hf_killed_half_way(&env, "b", "c", &[], clean);
    let blobs = work.join("repo/blobs");
    let etag = |path: &str| built[path]["etag"].as_str().unwrap().to_string();
    let mut staged = Vec::new();
    let mut missing = Vec::new();
    for i in 0..16 {
        let path = format!("w/part-{i:02}.bin");
        let blob = blobs.join(etag(&path));
        if blob.is_file() {
            staged.push(blob);
        } else {
            missing.push(blob);
        }
    }
    assert!(staged.len() >= 3 && !missing.is_empty(), "{staged:?}");
    // Changed after the kill, same size.
    let mut bytes = std::fs::read(&staged[1]).unwrap();
    bytes[1000] ^= 1;
    std::fs::write(&staged[1], &bytes).unwrap();
    // A file of the right size planted under the name of a blob not staged yet.
    std::fs::write(&missing[0], vec![7u8; 256 << 10]).unwrap();
    // A blob replaced by a link to a file outside.
    std::fs::remove_file(&staged[0]).unwrap();
    std::os::unix::fs::symlink(env.path("outside/secret"), &staged[0]).unwrap();
    // The snapshot folder replaced by a link to a directory outside.
    let snapshots = work.join("repo/snapshots");
    std::fs::remove_dir_all(&snapshots).unwrap();
    std::os::unix::fs::symlink(env.path("outside/dir"), &snapshots).unwrap();

    let (code, v) = env.json(&["unpack", "b", "--trust", "k.pub", "--hf-cache", "c"]);
    assert_eq!(code, 0, "{v}");
    let kept = v["resumed"]["files"].as_u64().unwrap();
    assert!(kept >= 1, "{v}");
    assert!(v["resumed"]["discarded"].as_u64().unwrap() >= 3, "{v}");
    assert_eq!(hashed_tree(&env.path("c/models--acme--tiny-model")), want);
    crate::hfcache::assert_client_resolves(&env, "c", crate::hfcache::REPO, &built);
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

    // The work directory replaced by a link to a directory holding it: not adopted, not
    // followed, not removed.
    let work = hf_killed_half_way(&env, "b", "c2", &[], clean);
    std::fs::rename(&work, env.path("outside/moved")).unwrap();
    std::os::unix::fs::symlink(env.path("outside/moved"), &work).unwrap();
    let (code, v) = env.json(&["unpack", "b", "--trust", "k.pub", "--hf-cache", "c2"]);
    assert_eq!(code, 0, "{v}");
    assert!(
        v["resumed"].is_null(),
        "a linked work directory was adopted: {v}"
    );
    assert_eq!(v["volume_bytes_read"].as_u64().unwrap(), clean, "{v}");
    assert!(env.path("outside/moved/repo/blobs").is_dir());
    assert!(std::fs::symlink_metadata(&work).unwrap().is_symlink());
    assert_eq!(hashed_tree(&env.path("c2/models--acme--tiny-model")), want);

    // Opened up to others (mode 0755): not adopted.
    let work = hf_killed_half_way(&env, "b", "c3", &[], clean);
    std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (code, v) = env.json(&["unpack", "b", "--trust", "k.pub", "--hf-cache", "c3"]);
    assert_eq!(code, 0, "{v}");
    assert!(
        v["resumed"].is_null(),
        "an opened-up work directory was adopted: {v}"
    );
    assert_eq!(hashed_tree(&env.path("c3/models--acme--tiny-model")), want);
}

/// A delta install into `--dest` resumes too: its marker names the delta's manifest (which names
/// its base by digest); a rerun proves the files the killed run staged against the target
/// manifest and the delta stage skips their copies and patches. The delta's stream (its
/// carried files and patches) starts at the first entry whose file is not held, and the result
/// is the clean delta install, byte for byte, receipt included.
#[test]
fn a_delta_install_into_a_directory_resumes_from_what_it_staged() {
    let env = Env::new();
    model(&env, "v1", 16, 256 << 10, 1);
    model(&env, "v2", 16, 256 << 10, 1);
    // Version 2: one file changed, 24 new ones (carried whole in the delta's stream).
    env.write("v2/layer-3/part-015.bin", &pseudo_random(256 << 10, 999));
    for i in 0..24u64 {
        env.write(
            &format!("v2/new/part-{i:03}.bin"),
            &pseudo_random(256 << 10, 500 + i),
        );
    }
    pack(&env, "v1", "b1", "none", "64K", "1");
    env.ok(&[
        "pack",
        "v2",
        "-o",
        "d2",
        "--key",
        "k.key",
        "--name",
        "m",
        "--version",
        "2",
        "--base",
        "b1",
        "--compress",
        "none",
        "--volume-size",
        "64K",
        "-q",
    ]);
    for d in ["clean", "out"] {
        env.ok(&["unpack", "b1", "--trust", "k.pub", "--dest", d]);
    }
    let (code, v) = env.json(&[
        "unpack",
        "d2",
        "--trust",
        "k.pub",
        "--dest",
        "clean",
        "--replace",
    ]);
    assert_eq!(code, 0, "{v}");
    let clean = v["volume_bytes_read"].as_u64().unwrap();
    let want = tree(&env.path("clean"));
    let before = tree(&env.path("out"));

    let ran = run_until(&env, "d2", "out", clean / 2, Signal::INT, &["--replace"]);
    assert!(ran.killed, "{}{}", ran.stdout, ran.stderr);
    assert_eq!(ran.code, Some(130), "{}", ran.stderr);
    assert!(
        ran.stderr.contains("rerun the same command to resume"),
        "{}",
        ran.stderr
    );
    assert_eq!(tree(&env.path("out")), before, "the base changed");
    assert_eq!(work_dirs(&env).len(), 1, "{:?}", work_dirs(&env));

    let child = unpack(
        &env,
        "d2",
        "out",
        0,
        &["--replace", "--json", "--progress", "plain"],
    );
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains(", reading from volume data."), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["resumed"]["files"].as_u64().unwrap() > 0, "{v}");
    assert!(v["resumed"]["from_volume"].is_string(), "{v}");
    // The rerun read what the killed run had not installed, not the whole stream again.
    let again = reads(&env);
    assert!(
        ran.read + again < clean + clean / 10,
        "{} + {again} bytes read, one clean run {clean}",
        ran.read
    );
    assert_eq!(tree(&env.path("out")), want, "not the clean delta install");
    assert!(work_dirs(&env).is_empty(), "{:?}", work_dirs(&env));
}

/// A base of 256 files of 256 KiB (`v1`, bundle `b1`) and a delta to version 2 (`d2`, stored,
/// 128 KiB volumes) whose stream holds both kinds of entries a delta streams: a patch for each
/// of the first 128 files (the second half of each changed, so each patch is about half a
/// file), the 128 others copies from the base (not in the stream), and 960 new files carried
/// whole: about 265 MB of stream, as large as the full bundle's test above, so the fixed loss
/// of each kill (the file being written, the reader's buffer, the start of a chunk) weighs
/// what it weighs there.
fn delta_of_patches_and_carried_files(env: &Env) {
    model(env, "v1", 256, 256 << 10, 1);
    model(env, "v2", 256, 256 << 10, 1);
    for i in 0..128usize {
        let path = format!("v2/layer-{}/part-{i:03}.bin", i % 4);
        let mut bytes = std::fs::read(env.path(&path)).unwrap();
        let half = bytes.len() / 2;
        bytes[half..].copy_from_slice(&pseudo_random(half, 7000 + i as u64));
        env.write(&path, &bytes);
    }
    for i in 0..960u64 {
        env.write(
            &format!("v2/new-{}/part-{i:03}.bin", i % 8),
            &pseudo_random(256 << 10, 500 + i),
        );
    }
    pack(env, "v1", "b1", "none", "128K", "1");
    let (code, j) = env.json(&[
        "pack",
        "v2",
        "-o",
        "d2",
        "--key",
        "k.key",
        "--name",
        "m",
        "--version",
        "2",
        "--base",
        "b1",
        "--compress",
        "none",
        "--volume-size",
        "128K",
        "-q",
    ]);
    assert_eq!(code, 0, "{j:#}");
    assert_eq!(j["delta"]["patched_files"], 128, "{j:#}");
    // The 128 unchanged files and the config.
    assert_eq!(j["delta"]["copied_files"], 129, "{j:#}");
}

/// The goal for a delta (`unpack --dest --replace` of a delta bundle onto the
/// installed base): 20 kills at random points (SIGKILL and SIGINT in turn), each followed by a
/// rerun that resumes the delta's stream at the first carried file or patch whose file it does
/// not hold yet; the base stays as it was until the end, the result is byte for byte the
/// clean delta install (receipt included), and all the runs together read at most 1.1 times
/// the bundle bytes of one clean run.
#[test]
fn twenty_kills_of_a_delta_install_then_reruns_read_the_delta_about_once() {
    let env = Env::new();
    delta_of_patches_and_carried_files(&env);
    for d in ["clean", "out"] {
        env.ok(&["unpack", "b1", "--trust", "k.pub", "--dest", d]);
    }
    let (code, v) = env.json(&[
        "unpack",
        "d2",
        "--trust",
        "k.pub",
        "--dest",
        "clean",
        "--replace",
    ]);
    assert_eq!(code, 0, "{v}");
    let clean = v["volume_bytes_read"].as_u64().unwrap();
    let want = hashed_tree(&env.path("clean"));
    std::fs::remove_dir_all(env.path("clean")).unwrap();
    let base = hashed_tree(&env.path("out"));

    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("kill points seed {seed:#x}");
    let mut rng = Rng(seed | 1);
    let gaps = kill_gaps(&mut rng, clean);
    let mut total = 0u64;
    let mut kills = 0;
    let mut from_volume = 0;
    while kills < 20 {
        let signal = if kills % 2 == 0 {
            Signal::KILL
        } else {
            Signal::INT
        };
        let ran = run_until(
            &env,
            "d2",
            "out",
            gaps[kills],
            signal,
            &["--replace", "--progress", "plain"],
        );
        total += ran.read;
        if !ran.killed {
            break;
        }
        kills += 1;
        assert_eq!(
            hashed_tree(&env.path("out")),
            base,
            "kill {kills}: the base changed before the install was complete"
        );
        let dirs = work_dirs(&env);
        assert_eq!(dirs.len(), 1, "kill {kills}: {dirs:?}");
        if signal == Signal::INT {
            assert_eq!(ran.code, Some(130), "{}", ran.stderr);
            assert!(
                ran.stderr.contains("rerun the same command to resume"),
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
            from_volume += usize::from(ran.stderr.contains(", reading from volume data."));
        }
    }
    assert_eq!(kills, 20, "the install finished before 20 kills");
    // Once something is held past the stream's first entry, reruns start part way.
    assert!(from_volume > 0, "no rerun started the stream part way");
    let child = unpack(&env, "d2", "out", 0, &["--replace", "--json"]);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    total += reads(&env);
    assert!(v["resumed"]["files"].as_u64().unwrap() > 0, "{v}");
    assert!(v["resumed"]["from_volume"].is_string(), "{v}");
    assert_eq!(
        hashed_tree(&env.path("out")),
        want,
        "not the clean delta install"
    );
    assert!(work_dirs(&env).is_empty(), "{:?}", work_dirs(&env));
    env.ok(&["check", "out", "--trust", "k.pub"]);
    let ratio = total as f64 / clean as f64;
    eprintln!(
        "20 kills and reruns of a delta: {total} volume bytes read, one clean run {clean}: {ratio:.3}x ({} files kept by the last rerun)",
        v["resumed"]["files"]
    );
    assert!(
        ratio <= 1.1,
        "the kills and reruns read {ratio:.3} times the delta"
    );
}

/// A rerun from a registry (`unpack oci://…`) adopts the work directory an interrupted install
/// of the same signed manifest left (here a killed install of the same bundle from disk) and
/// fetches only the files it does not hold: each file is a blob of its own, so the held ones
/// are skipped wherever they are, not only a prefix. The registry's access log counts the
/// blob fetches.
#[test]
fn a_registry_rerun_fetches_only_the_files_a_kept_staging_lacks() {
    use crate::oci::{PASSWORD, Registry};
    let env = Env::new();
    model(&env, "m", 64, 256 << 10, 3);
    pack(&env, "m", "b", "none", "128K", "1");
    let (code, v) = env.json(&["unpack", "b", "--trust", "k.pub", "--dest", "clean"]);
    assert_eq!(code, 0, "{v}");
    let clean = v["volume_bytes_read"].as_u64().unwrap();
    let want = hashed_tree(&env.path("clean"));
    let reg = Registry::start();
    reg.docker_config(&[(reg.port, PASSWORD)]);
    let target = reg.reference("models/m:1");
    reg.ok(&env, &["push", "b", &target, "--trust", "k.pub"]);

    let ran = run_until(&env, "b", "out", clean / 2, Signal::KILL, &[]);
    assert!(ran.killed, "{}{}", ran.stdout, ran.stderr);
    assert_eq!(work_dirs(&env).len(), 1, "{:?}", work_dirs(&env));

    let m = env.read_json("b/manifest.json");
    let digests: Vec<String> = m["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["sha256"].as_str().unwrap().to_string())
        .collect();
    let fetched = |log: &str| {
        digests
            .iter()
            .filter(|d| {
                log.lines().any(|l| {
                    l.contains("\"GET /v2/models/m/blobs/sha256:") && l.contains(d.as_str())
                })
            })
            .count()
    };
    assert_eq!(fetched(&reg.log()), 0, "the push fetched file blobs");
    let out = reg.airlock(
        &env,
        &[
            "unpack",
            &target,
            "--trust",
            "k.pub",
            "--dest",
            "out",
            "--json",
            "--progress",
            "plain",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("airlock: resuming: ")
            && stderr.contains("fetching only the files not held"),
        "{stderr}"
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let kept = v["resumed"]["files"].as_u64().unwrap() as usize;
    assert!(kept > 0 && kept < digests.len(), "{v}");
    // Each file's blob fetched once, but for the kept ones (the pseudo-random contents are
    // all different: one digest a file).
    assert_eq!(fetched(&reg.log()), digests.len() - kept, "{v}");
    assert_eq!(hashed_tree(&env.path("out")), want, "not the clean install");
    assert!(work_dirs(&env).is_empty(), "{:?}", work_dirs(&env));
}

/// Two repositories, `acme/a` then `acme/b`, each `files` files of 256 KiB (different
/// contents), installed by airlock into the cache `src` and packed from there as one bundle
/// `multi` of several repositories (stored, 128 KiB volumes; FORMAT.md section 14.4). With 128
/// files each the bundle is 64 MiB: each kill loses at most about 1.4 MiB (the volume reader's
/// 1 MiB buffer, the file being written, the start of the volume the rerun reads from), so 4
/// kills stay well under the 10% the tests allow whatever the seed.
fn multi_bundle(env: &Env, files: usize) {
    for (dir, repo, seed) in [("ma", "acme/a", 1), ("mb", "acme/b", 100_000)] {
        model(env, dir, files, 256 << 10, seed);
        let b = format!("b-{dir}");
        pack(env, dir, &b, "none", "8M", "1");
        env.install_in_hf_cache(&b, "src", repo);
    }
    env.ok(&[
        "pack",
        "--hf-cache",
        "src",
        "--hf-repo",
        "acme/a",
        "--hf-repo",
        "acme/b",
        "-o",
        "multi",
        "--key",
        "k.key",
        "--compress",
        "none",
        "--volume-size",
        "128K",
        "-q",
    ]);
}

/// `gaps.len()` kills of an install of `bundle` into `to` (SIGKILL and SIGINT in turn), the
/// i-th once that run read `gaps[i]` volume bytes, each followed by a rerun, and the rerun
/// that finishes (`--json`). After each kill `visible` (the destination or repository
/// folders) does not exist and `work()` lists exactly one work directory; every rerun says it
/// resumes. Returns the volume bytes all the runs read and the last run's report.
fn kills_then_rerun(
    env: &Env,
    bundle: &str,
    to: &[&str],
    gaps: &[u64],
    visible: &[&str],
    work: &dyn Fn() -> Vec<String>,
) -> (u64, serde_json::Value) {
    let mut total = 0u64;
    for (kill, &after) in gaps.iter().enumerate() {
        let signal = if kill % 2 == 0 {
            Signal::KILL
        } else {
            Signal::INT
        };
        let ran = run_until_to(env, bundle, to, after, signal, &["--progress", "plain"]);
        total += ran.read;
        assert!(
            ran.killed,
            "the install finished before kill {}: {}",
            kill + 1,
            ran.stderr
        );
        for v in visible {
            assert!(
                !env.path(v).exists(),
                "kill {}: {v} appeared before the install was complete",
                kill + 1
            );
        }
        let dirs = work();
        assert_eq!(dirs.len(), 1, "kill {}: {dirs:?}", kill + 1);
        if signal == Signal::INT {
            assert_eq!(ran.code, Some(130), "{}", ran.stderr);
            assert!(
                ran.stderr.contains("rerun the same command to resume"),
                "{}",
                ran.stderr
            );
        }
        if kill > 0 {
            assert!(
                ran.stderr.contains("airlock: resuming: "),
                "kill {}: the rerun did not resume: {}",
                kill + 1,
                ran.stderr
            );
        }
    }
    let child = unpack_to(env, bundle, to, 0, &["--json", "--progress", "plain"]);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("airlock: resuming: "), "{stderr}");
    total += reads(env);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(work().is_empty(), "{:?}", work());
    (total, v)
}

/// [`kill_gaps`] for `n` kills, from a seed of the clock (printed).
fn kill_gaps_of(n: usize, clean: u64) -> Vec<u64> {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("kill points seed {seed:#x}");
    kill_gaps_n(&mut Rng(seed | 1), clean, n)
}

/// The ratio of `total` to `clean`, printed, and held to 1.1.
fn about_once(what: &str, total: u64, clean: u64) {
    let ratio = total as f64 / clean as f64;
    eprintln!("{what}: {total} volume bytes read, one clean run {clean}: {ratio:.3}x");
    assert!(
        ratio <= 1.1,
        "{what}: the kills and reruns read {ratio:.3} times the bundle"
    );
}

/// A bundle of several repositories into a Hugging Face cache resumes like a bundle of one:
/// kills at random points, each followed by a rerun; both repository folders are byte for byte
/// a clean install's, `check` passes, huggingface_hub resolves them, and the runs together
/// read at most 1.1 times one clean run.
#[test]
fn kills_of_an_install_of_several_repositories_into_a_cache_then_reruns_read_it_about_once() {
    let env = Env::new();
    multi_bundle(&env, 128);
    let clean = clean_hf(&env, "multi", "clean", &[]);
    let want: Vec<_> = ["models--acme--a", "models--acme--b"]
        .iter()
        .map(|f| hashed_tree(&env.path(&format!("clean/{f}"))))
        .collect();
    let (total, v) = kills_then_rerun(
        &env,
        "multi",
        &["--hf-cache", "c"],
        &kill_gaps_of(4, clean),
        &["c/models--acme--a", "c/models--acme--b"],
        &|| hf_work_dirs(&env, "c"),
    );
    assert!(v["resumed"]["files"].as_u64().unwrap() > 0, "{v}");
    for (f, want) in ["models--acme--a", "models--acme--b"].iter().zip(&want) {
        assert_eq!(
            &hashed_tree(&env.path(&format!("c/{f}"))),
            want,
            "{f}: not the clean install"
        );
    }
    env.ok(&["check", "--hf-cache", "c"]);
    about_once("4 kills of two repositories into a cache", total, clean);
    crate::hfcache::assert_client_resolves(&env, "c", "acme/a", &hf_files(&env, "ma"));
    crate::hfcache::assert_client_resolves(&env, "c", "acme/b", &hf_files(&env, "mb"));
}

/// The same bundle of several repositories into a directory: each repository in its folder,
/// byte for byte (receipt included) a clean install's.
#[test]
fn kills_of_an_install_of_several_repositories_into_a_directory_then_reruns_read_it_about_once() {
    let env = Env::new();
    multi_bundle(&env, 128);
    let (clean, want) = (
        {
            let (code, v) = env.json(&["unpack", "multi", "--trust", "k.pub", "--dest", "clean"]);
            assert_eq!(code, 0, "{v}");
            v["volume_bytes_read"].as_u64().unwrap()
        },
        hashed_tree(&env.path("clean")),
    );
    let (total, v) = kills_then_rerun(
        &env,
        "multi",
        &["--dest", "out"],
        &kill_gaps_of(4, clean),
        &["out"],
        &|| work_dirs(&env),
    );
    assert!(v["resumed"]["files"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(hashed_tree(&env.path("out")), want, "not the clean install");
    env.ok(&["check", "out", "--trust", "k.pub"]);
    about_once("4 kills of two repositories into a directory", total, clean);
}

/// Part of a bundle (`--repo acme/a`, the first repository in the stream) resumes when the
/// rerun chooses the same part: the kills land while its files stream, the rerun starts after
/// what it kept (the other repository's files are not the part's, so not needed; the rest of
/// the stream after the part is still read, once, by the run that finishes, as a clean install
/// of the part reads it), and the result (`.airlock/part.json` included) is byte for byte a
/// clean install of that part.
/// Another selection, into a directory or a cache, never reuses the kept work directory.
#[test]
fn kills_of_an_install_of_part_of_a_bundle_then_reruns_with_the_same_part_resume() {
    let env = Env::new();
    multi_bundle(&env, 128);
    let part = ["--dest", "out", "--repo", "acme/a"];
    let (code, v) = env.json(&[
        "unpack", "multi", "--trust", "k.pub", "--dest", "clean", "--repo", "acme/a",
    ]);
    assert_eq!(code, 0, "{v}");
    let clean = v["volume_bytes_read"].as_u64().unwrap();
    let want = hashed_tree(&env.path("clean"));
    assert!(env.path("clean/.airlock/part.json").is_file());
    // acme/a's files are the first half of the stream: the kills fall in it.
    let (total, v) = kills_then_rerun(
        &env,
        "multi",
        &part,
        &kill_gaps_of(4, clean / 2),
        &["out"],
        &|| work_dirs(&env),
    );
    assert!(v["resumed"]["files"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(hashed_tree(&env.path("out")), want, "not the clean install");
    env.ok(&["check", "out", "--trust", "k.pub"]);
    about_once("4 kills of part of a bundle into a directory", total, clean);

    // Another selection into the same destination: not adopted, the whole stream read, the
    // kept work directory removed.
    std::fs::remove_dir_all(env.path("out")).unwrap();
    let ran = run_until_to(&env, "multi", &part, clean / 4, Signal::KILL, &[]);
    assert!(ran.killed);
    assert_eq!(work_dirs(&env).len(), 1, "{:?}", work_dirs(&env));
    let (code, v) = env.json(&[
        "unpack", "multi", "--trust", "k.pub", "--dest", "out", "--repo", "acme/b",
    ]);
    assert_eq!(code, 0, "{v}");
    assert!(v["resumed"].is_null(), "{v}");
    assert_eq!(v["volume_bytes_read"].as_u64().unwrap(), clean, "{v}");
    assert!(work_dirs(&env).is_empty(), "{:?}", work_dirs(&env));
    // The whole bundle after a kill of a part: not adopted either.
    std::fs::remove_dir_all(env.path("out")).unwrap();
    let ran = run_until_to(&env, "multi", &part, clean / 4, Signal::KILL, &[]);
    assert!(ran.killed);
    let (code, v) = env.json(&["unpack", "multi", "--trust", "k.pub", "--dest", "out"]);
    assert_eq!(code, 0, "{v}");
    assert!(v["resumed"].is_null(), "{v}");
    assert!(work_dirs(&env).is_empty(), "{:?}", work_dirs(&env));

    // Into a cache: a rerun with the same part resumes, another part does not.
    let to = ["--hf-cache", "c", "--repo", "acme/a"];
    let ran = run_until_to(&env, "multi", &to, clean / 4, Signal::KILL, &[]);
    assert!(ran.killed);
    assert_eq!(hf_work_dirs(&env, "c").len(), 1);
    let (code, v) = env.json(&[
        "unpack",
        "multi",
        "--trust",
        "k.pub",
        "--hf-cache",
        "c",
        "--repo",
        "acme/b",
    ]);
    assert_eq!(code, 0, "{v}");
    assert!(v["resumed"].is_null(), "{v}");
    let ran = run_until_to(
        &env,
        "multi",
        &to,
        clean / 8,
        Signal::KILL,
        &["--progress", "plain"],
    );
    assert!(ran.killed);
    assert!(ran.stderr.contains("airlock: resuming: "), "{}", ran.stderr);
    let child = unpack_to(&env, "multi", &to, 0, &["--json"]);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["resumed"]["files"].as_u64().unwrap() > 0, "{v}");
    assert!(
        reads(&env) < clean,
        "the part's rerun read the whole bundle"
    );
    assert!(
        hf_work_dirs(&env, "c").is_empty(),
        "{:?}",
        hf_work_dirs(&env, "c")
    );
    env.ok(&["check", "--hf-cache", "c"]);
    crate::hfcache::assert_client_resolves(&env, "c", "acme/a", &hf_files(&env, "ma"));
    crate::hfcache::assert_client_resolves(&env, "c", "acme/b", &hf_files(&env, "mb"));
}
