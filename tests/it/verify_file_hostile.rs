//! `airlock verify FILE` (one file signed by `FILE.minisig`) against hostile inputs: FIFOs,
//! devices and links where the file or its signature should be, a signature file too large to
//! be one, a truncated signature, a trusted comment signed by another key, a signature over
//! other bytes; and the round trip with the real `minisign` in both directions.
//!
//! Every run has a deadline: a command that blocks on a FIFO or reads `/dev/zero` without end
//! fails its test instead of hanging the suite.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;

/// Long enough for a debug build on a busy machine; a blocked open never ends at all.
const DEADLINE: Duration = Duration::from_secs(60);

/// What one run of airlock did.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs airlock in `env` with `args`, killing it (and failing the test) at the deadline.
fn run(env: &Env, args: &[&str]) -> Run {
    let out = tempfile::tempdir().expect("tempdir");
    let (o, e) = (out.path().join("stdout"), out.path().join("stderr"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(args)
        .current_dir(env.dir.path())
        .env_remove("AIRLOCK_TRUST")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&o).unwrap())
        .stderr(std::fs::File::create(&e).unwrap())
        .spawn()
        .expect("spawn airlock");
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st;
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "airlock {args:?} still running after {DEADLINE:?}: it blocked or read without end"
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Run {
        code: status.code(),
        stdout: std::fs::read_to_string(&o).unwrap(),
        stderr: std::fs::read_to_string(&e).unwrap(),
    }
}

/// Runs `verify FILE --trust k.pub` and asserts the exit code and that stderr holds every
/// one of `said` (the file named, and the problem). Returns stderr.
fn verify_fails(env: &Env, file: &str, code: i32, said: &[&str]) -> String {
    let r = run(env, &["verify", file, "--trust", "k.pub"]);
    assert_eq!(
        r.code,
        Some(code),
        "verify {file}: stdout {} stderr {}",
        r.stdout,
        r.stderr
    );
    for s in said {
        assert!(
            r.stderr.contains(s),
            "verify {file}: {s:?} not in {}",
            r.stderr
        );
    }
    r.stderr
}

/// A temp tree with key pairs `k` and `o`, and `release` signed by `k` (`release.minisig`).
fn signed_release() -> Env {
    let env = Env::new();
    env.ok(&["keygen", "--out", "o", "--unencrypted"]);
    env.write("release", &pseudo_random(70_000, 9));
    env.ok(&["sign", "release", "--key", "k.key"]);
    env
}

fn mkfifo(path: &Path) {
    let st = Command::new("mkfifo").arg(path).status().expect("mkfifo");
    assert!(st.success(), "mkfifo {}", path.display());
}

fn lines(env: &Env, rel: &str) -> Vec<String> {
    std::fs::read_to_string(env.path(rel))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn a_fifo_as_the_signature_is_refused_at_once() {
    let env = signed_release();
    std::fs::remove_file(env.path("release.minisig")).unwrap();
    mkfifo(&env.path("release.minisig"));
    verify_fails(
        &env,
        "release",
        1,
        &["release.minisig: is a FIFO, not a regular file"],
    );
}

#[test]
fn a_signature_linked_to_dev_zero_is_refused_without_reading_it() {
    let env = signed_release();
    std::fs::remove_file(env.path("release.minisig")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", env.path("release.minisig")).unwrap();
    verify_fails(
        &env,
        "release",
        1,
        &["release.minisig: is a character device, not a regular file"],
    );
}

#[test]
fn a_fifo_as_the_file_is_named_as_one_and_never_opened_for_reading() {
    // Before: `g: is not a directory (a bundle is a directory)`, as if a bundle was meant.
    let env = signed_release();
    mkfifo(&env.path("g"));
    // With no signature beside it, the file's own problem is what is said first.
    let text = verify_fails(&env, "g", 1, &["g: is a FIFO, not a regular file"]);
    assert!(!text.contains("bundle is a directory"), "{text}");
    std::fs::copy(env.path("release.minisig"), env.path("g.minisig")).unwrap();
    verify_fails(&env, "g", 1, &["g: is a FIFO, not a regular file"]);
}

#[test]
fn a_file_linked_to_dev_zero_is_refused_without_hashing_it() {
    // Before: `z: is not a directory (a bundle is a directory)`.
    let env = signed_release();
    std::os::unix::fs::symlink("/dev/zero", env.path("z")).unwrap();
    std::fs::copy(env.path("release.minisig"), env.path("z.minisig")).unwrap();
    verify_fails(
        &env,
        "z",
        1,
        &["z: is a character device, not a regular file"],
    );
}

#[test]
fn a_file_that_is_a_link_is_followed_on_purpose_and_its_bytes_are_what_is_checked() {
    // The operator names FILE as the shell would (SECURITY.md section 11): a link to the
    // signed file verifies, with a warning that the signature names the file it leads to; a
    // link to other bytes does not verify; a dangling link is a missing file (exit 1).
    let env = signed_release();
    std::os::unix::fs::symlink("release", env.path("current")).unwrap();
    std::fs::copy(env.path("release.minisig"), env.path("current.minisig")).unwrap();
    let r = run(&env, &["verify", "current", "--trust", "k.pub"]);
    assert_eq!(r.code, Some(0), "{} {}", r.stdout, r.stderr);
    assert!(
        r.stdout.starts_with("OK   current: signature by ")
            && r.stderr
                .contains("names the file \"release\", not \"current\""),
        "{} {}",
        r.stdout,
        r.stderr
    );
    env.write("other", b"other bytes\n");
    std::fs::remove_file(env.path("current")).unwrap();
    std::os::unix::fs::symlink("other", env.path("current")).unwrap();
    verify_fails(
        &env,
        "current",
        3,
        &["current.minisig: does not verify current"],
    );
    std::fs::remove_file(env.path("current")).unwrap();
    std::os::unix::fs::symlink("nowhere", env.path("current")).unwrap();
    verify_fails(&env, "current", 1, &["current"]);
    // The signature may be a link too (to a regular file; its bytes are what is checked).
    std::fs::remove_file(env.path("current")).unwrap();
    std::fs::remove_file(env.path("current.minisig")).unwrap();
    std::os::unix::fs::symlink("release", env.path("current")).unwrap();
    std::os::unix::fs::symlink("release.minisig", env.path("current.minisig")).unwrap();
    let r = run(&env, &["verify", "current", "--trust", "k.pub"]);
    assert_eq!(r.code, Some(0), "{} {}", r.stdout, r.stderr);
}

#[test]
fn an_oversized_signature_is_refused_after_reading_at_most_the_limit() {
    // Before: exit 1 with `is larger than the limit (20000 bytes or more)`: no limit named,
    // and not the bad-signature failure it is.
    let env = signed_release();
    std::fs::write(env.path("release.minisig"), vec![b'a'; 16 * 1024 + 1]).unwrap();
    let text = verify_fails(
        &env,
        "release",
        3,
        &["release.minisig: ", "more than the 16384-byte limit"],
    );
    assert!(
        text.contains("too large to be a minisign signature"),
        "{text}"
    );
    // A sparse file of a TiB is refused by its size, before a byte is read (reading it would
    // not end before the deadline).
    let f = std::fs::File::create(env.path("release.minisig")).unwrap();
    f.set_len(1 << 40).unwrap();
    drop(f);
    verify_fails(
        &env,
        "release",
        3,
        &[
            "release.minisig: 1099511627776 bytes",
            "more than the 16384-byte limit",
        ],
    );
}

#[test]
fn a_truncated_signature_is_malformed_and_the_hint_is_about_this_file() {
    let env = signed_release();
    let all = std::fs::read(env.path("release.minisig")).unwrap();
    for cut in [0, 1, 20, all.len() / 2, all.len() - 10] {
        std::fs::write(env.path("release.minisig"), &all[..cut]).unwrap();
        let text = verify_fails(&env, "release", 3, &["release.minisig: "]);
        assert!(
            text.contains("malformed signature") || text.contains("does not verify"),
            "cut at {cut}: {text}"
        );
        // Before: the hint said to copy manifest.json and manifest.json.minisig again.
        assert!(!text.contains("manifest.json"), "cut at {cut}: {text}");
        assert!(
            text.contains("hint: do not use release: get release and release.minisig again"),
            "cut at {cut}: {text}"
        );
    }
}

#[test]
fn a_trusted_comment_signed_by_another_key_is_refused() {
    // The first two lines (the signature over the file) by k, the trusted comment and its
    // global signature by o over the same file: the global signature must verify with k.
    let env = signed_release();
    std::fs::copy(env.path("release"), env.path("copy")).unwrap();
    env.ok(&["sign", "copy", "--key", "o.key", "-t", "file:release\tby o"]);
    let (k, o) = (lines(&env, "release.minisig"), lines(&env, "copy.minisig"));
    let spliced = format!("{}\n{}\n{}\n{}\n", k[0], k[1], o[2], o[3]);
    std::fs::write(env.path("release.minisig"), spliced).unwrap();
    verify_fails(
        &env,
        "release",
        3,
        &[
            "release.minisig: does not verify release",
            "trusted comment",
        ],
    );
    // The trusted comment edited, its signature kept.
    let edited = format!(
        "{}\n{}\n{}\n{}\n",
        k[0],
        k[1],
        k[2].replace("file:release", "file:releasf"),
        k[3]
    );
    assert_ne!(edited.lines().nth(2), Some(k[2].as_str()));
    std::fs::write(env.path("release.minisig"), edited).unwrap();
    verify_fails(
        &env,
        "release",
        3,
        &[
            "release.minisig: does not verify release",
            "trusted comment",
        ],
    );
}

#[test]
fn a_signature_over_other_bytes_or_by_another_key_is_refused() {
    let env = signed_release();
    env.write("other", b"other bytes\n");
    env.ok(&["sign", "other", "--key", "k.key"]);
    std::fs::copy(env.path("other.minisig"), env.path("release.minisig")).unwrap();
    verify_fails(
        &env,
        "release",
        3,
        &["release.minisig: does not verify release with key"],
    );
    env.ok(&["sign", "release", "--key", "o.key", "--force"]);
    verify_fails(
        &env,
        "release",
        3,
        &[
            "release.minisig: signed by key",
            "which is not in the trust set",
        ],
    );
}

fn minisign(env: &Env, args: &[&str]) {
    let out = Command::new("minisign")
        .args(args)
        .current_dir(env.dir.path())
        .stdin(Stdio::null())
        .output()
        .expect("the real minisign must be installed: apt-get install minisign (scripts/setup.sh does it)");
    assert!(
        out.status.success(),
        "minisign {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_file_minisign_signed_verifies_and_one_airlock_signed_verifies_under_minisign() {
    let env = signed_release();
    minisign(&env, &["-V", "-m", "release", "-p", "k.pub"]);
    minisign(&env, &["-G", "-W", "-p", "ms.pub", "-s", "ms.key"]);
    env.write("tool", &pseudo_random(50_000, 4));
    minisign(
        &env,
        &[
            "-S",
            "-s",
            "ms.key",
            "-m",
            "tool",
            "-t",
            "file:tool\trelease 1",
        ],
    );
    let r = run(&env, &["verify", "tool", "--trust", "ms.pub"]);
    assert_eq!(r.code, Some(0), "{} {}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains("trusted comment: file:tool\trelease 1") && r.stderr.is_empty(),
        "{} {}",
        r.stdout,
        r.stderr
    );
    // minisign's signature over other bytes is refused.
    env.write("tool", b"changed\n");
    let r = run(&env, &["verify", "tool", "--trust", "ms.pub"]);
    assert_eq!(r.code, Some(3), "{} {}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains("tool.minisig: does not verify tool"),
        "{}",
        r.stderr
    );
}
