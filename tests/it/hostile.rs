//! Hostile bundles: every case of `THREATS.md` that a bundle on a USB stick can carry.
//!
//! Each case must end the same way: the documented exit code, a message naming the file (volume,
//! entry) and the problem, the destination exactly as it was (absent, or the old tree byte for
//! byte under `--replace`), no `.airlock-staging-*` left beside it, nothing created outside it,
//! and the bundle itself untouched. `verify` and `unpack` read the bundle through a read-only
//! bind mount (in a private mount namespace, so nothing leaks if a test dies); the bundle tree is
//! also compared byte for byte and mtime for mtime. No case is skipped: where a private mount
//! namespace cannot be made (as root with `unshare -m`, otherwise in a user namespace with
//! `unshare -rm`), the tests fail and say why.
//!
//! Three sources of cases:
//! - `testdata/hostile/<case>/`, made by `scripts/make-hostile.py`: validly signed bundles with
//!   one hostile defect each, so the deep checks are what must catch them (its README has the
//!   table). [`every_fixture_has_a_test`] keeps that directory and the list below in step.
//! - volume damage, made here from a bundle packed at test time;
//! - trust failures and rollback, made here the same way.
//!
//! Helpers live in this file on purpose: the module is self-contained.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use base64::Engine;

const BIN: &str = env!("CARGO_BIN_EXE_airlock");
/// Placeholder for the bundle directory in an argument list (replaced by the mount point).
const BUNDLE: &str = "{bundle}";
/// Where the absolute-path fixtures point. Nothing may ever appear there.
const ABSOLUTE_TARGET: &str = "/tmp/airlock-hostile";
/// Longest a single airlock run may take before the test calls it hung.
const TIMEOUT: Duration = Duration::from_secs(60);
/// The same for a test that expects a hang if the bug is there.
const SHORT_TIMEOUT: Duration = Duration::from_secs(5);

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn key(name: &str) -> PathBuf {
    repo().join("testdata/keys").join(name)
}

fn fixture(case: &str) -> PathBuf {
    repo().join("testdata/hostile").join(case)
}

// ---------------------------------------------------------------------------------------------
// Running the binary

/// One finished (or killed) run of airlock.
struct Run {
    what: String,
    code: Option<i32>,
    stdout: String,
    stderr: String,
    timed_out: bool,
}

impl Run {
    /// The error message: `error.message` of the JSON document when stdout is one, else stderr.
    fn message(&self) -> String {
        match serde_json::from_str::<serde_json::Value>(&self.stdout) {
            Ok(v) => v["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            Err(_) => self.stderr.clone(),
        }
    }
}

fn execute(cmd: Command, what: String) -> Run {
    execute_within(cmd, what, TIMEOUT)
}

fn execute_within(mut cmd: Command, what: String, timeout: Duration) -> Run {
    let out = tempfile::tempdir().expect("tempdir");
    let (o, e) = (out.path().join("stdout"), out.path().join("stderr"));
    cmd.stdin(Stdio::null())
        .stdout(fs::File::create(&o).unwrap())
        .stderr(fs::File::create(&e).unwrap())
        .env_remove("AIRLOCK_TRUST")
        .env("SOURCE_DATE_EPOCH", "1767225600");
    let mut child = cmd.spawn().expect("spawn");
    let start = Instant::now();
    let mut timed_out = false;
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break Some(st);
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            timed_out = true;
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Run {
        what,
        code: status.and_then(|s| s.code()),
        stdout: fs::read_to_string(&o).unwrap_or_default(),
        stderr: fs::read_to_string(&e).unwrap_or_default(),
        timed_out,
    }
}

/// The `unshare` flags that give a private mount namespace in which a read-only bind mount
/// works: `-m` as root, `-rm` (a user namespace mapping us to root) otherwise. Panics, failing
/// the test, when neither works: these tests never fall back to a weaker check.
fn unshare_flags() -> &'static str {
    static FLAGS: OnceLock<Result<&'static str, String>> = OnceLock::new();
    let found = FLAGS.get_or_init(|| {
        let mut why = Vec::new();
        for flags in ["-m", "-rm"] {
            match probe_ro_mount(flags) {
                Ok(()) => return Ok(flags),
                Err(e) => why.push(format!("unshare {flags}: {e}")),
            }
        }
        Err(why.join("; "))
    });
    match found {
        Ok(flags) => flags,
        Err(why) => panic!(
            "hostile tests need a private mount namespace with a read-only bind mount, and none \
             could be made ({why}); run them as root or where unprivileged user namespaces are \
             allowed"
        ),
    }
}

/// Whether a read-only bind mount in a private namespace made with `unshare FLAGS` works.
fn probe_ro_mount(flags: &str) -> Result<(), String> {
    let t = tempfile::tempdir().expect("tempdir");
    let (src, mnt) = (t.path().join("src"), t.path().join("mnt"));
    fs::create_dir(&src).unwrap();
    fs::create_dir(&mnt).unwrap();
    let probe = Command::new("unshare")
        .args([flags, "sh", "-c"])
        .arg(r#"mount --bind "$1" "$2" && mount -o remount,ro,bind "$2" || exit 125; touch "$2/probe" 2>/dev/null && exit 1; exit 0"#)
        .args(["sh".as_ref(), src.as_os_str(), mnt.as_os_str()])
        .stderr(Stdio::piped())
        .output();
    match probe {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) if o.status.code() == Some(1) => {
            Err("the bind mount accepted a write after remount,ro".to_string())
        }
        Ok(o) => Err(format!(
            "unshare/mount refused: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Err(format!("cannot run unshare: {e}")),
    }
}

/// Runs airlock with `args` (where [`BUNDLE`] stands for the bundle) on a read-only view of
/// `bundle`, and records in `rep` any change to the bundle's tree.
fn on_bundle(rep: &mut Report, bundle: &Path, args: &[&OsStr]) -> Run {
    let before = snapshot(bundle, true);
    let mnt = tempfile::tempdir().expect("tempdir");
    let view: &Path = mnt.path();
    let args: Vec<OsString> = args
        .iter()
        .map(|a| {
            if *a == BUNDLE {
                view.as_os_str().to_owned()
            } else {
                a.to_os_string()
            }
        })
        .collect();
    let what = format!(
        "airlock {} [{} is {} mounted read-only]",
        args.iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" "),
        view.display(),
        bundle.display()
    );
    let mut cmd = Command::new("unshare");
    cmd.args([unshare_flags(), "sh", "-c"])
        .arg(r#"mount --bind "$1" "$2" && mount -o remount,ro,bind "$2" || exit 125; shift 2; exec "$@""#)
        .arg("sh")
        .arg(bundle)
        .arg(view)
        .arg(BIN)
        .args(&args);
    let run = execute_within(cmd, what, rep.timeout);
    assert_ne!(
        run.code,
        Some(125),
        "read-only bind mount failed: {}",
        run.stderr
    );
    let after = snapshot(bundle, true);
    if before != after {
        rep.fail(format!(
            "{} changed the bundle directory:\n{}",
            run.what,
            diff(&before, &after)
        ));
    }
    run
}

fn trust_args(trust: &Path) -> [OsString; 4] {
    [
        "--trust".into(),
        trust.into(),
        "--progress".into(),
        "none".into(),
    ]
}

fn verify(rep: &mut Report, bundle: &Path, trust: &Path, extra: &[&str]) -> Run {
    let mut a: Vec<&OsStr> = vec!["verify".as_ref(), BUNDLE.as_ref()];
    let t = trust_args(trust);
    a.extend(t.iter().map(|s| s.as_os_str()));
    a.extend(extra.iter().map(|s| OsStr::new(*s)));
    on_bundle(rep, bundle, &a)
}

fn unpack(rep: &mut Report, bundle: &Path, trust: &Path, dest: &Path, extra: &[&str]) -> Run {
    let mut a: Vec<&OsStr> = vec![
        "unpack".as_ref(),
        BUNDLE.as_ref(),
        "--dest".as_ref(),
        dest.as_os_str(),
    ];
    let t = trust_args(trust);
    a.extend(t.iter().map(|s| s.as_os_str()));
    a.extend(extra.iter().map(|s| OsStr::new(*s)));
    on_bundle(rep, bundle, &a)
}

// ---------------------------------------------------------------------------------------------
// Collecting problems: a case reports everything wrong with it at once, so the report for a
// failing case says both whether the bundle was refused safely and whether the message is good.

struct Report {
    case: String,
    problems: Vec<String>,
    timeout: Duration,
}

impl Report {
    fn new(case: &str) -> Report {
        Report {
            case: case.to_string(),
            problems: Vec::new(),
            timeout: TIMEOUT,
        }
    }

    fn fail(&mut self, p: String) {
        self.problems.push(p);
    }

    /// Checks exit code and that the message holds every needle.
    fn expect(&mut self, run: &Run, code: i32, needles: &[&str]) {
        if run.timed_out {
            self.fail(format!(
                "{} hung: killed after {:?}",
                run.what, self.timeout
            ));
            return;
        }
        if run.code != Some(code) {
            self.fail(format!(
                "{} exited {:?}, expected {code}\n  stderr: {}\n  stdout: {}",
                run.what,
                run.code,
                run.stderr.trim(),
                run.stdout.trim()
            ));
        }
        let msg = run.message();
        let missing: Vec<&&str> = needles.iter().filter(|n| !msg.contains(**n)).collect();
        if !missing.is_empty() {
            self.fail(format!(
                "{}: the message does not name {missing:?}\n  message: {}",
                run.what,
                msg.trim()
            ));
        }
        // The JSON document must tell the same story as the exit code.
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&run.stdout)
            && run.code == Some(code)
            && (v["ok"] != serde_json::json!(code == 0)
                || v["exit_code"] != serde_json::json!(code))
        {
            self.fail(format!(
                "{}: JSON document disagrees with the exit code: {v}",
                run.what
            ));
        }
    }

    fn finish(self) {
        if !self.problems.is_empty() {
            panic!(
                "case {}: {} problem(s)\n- {}",
                self.case,
                self.problems.len(),
                self.problems.join("\n- ")
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Trees: snapshots and the scratch area around a destination

#[derive(Clone, Debug, PartialEq, Eq)]
enum Node {
    Dir {
        mode: u32,
        mtime: Option<(i64, i64)>,
    },
    File {
        mode: u32,
        mtime: (i64, i64),
        bytes: Vec<u8>,
    },
    Symlink(PathBuf),
    Other {
        mode: u32,
    },
}

type Snapshot = BTreeMap<PathBuf, Node>;

/// Every path under `root` (itself as ""), without following symlinks. Directory mtimes only
/// when asked: a failed unpack may create and remove its staging directory beside the
/// destination, which touches the parent's mtime and nothing else.
fn snapshot(root: &Path, dir_mtimes: bool) -> Snapshot {
    fn walk(root: &Path, rel: &Path, dir_mtimes: bool, out: &mut Snapshot) {
        let p = root.join(rel);
        let Ok(m) = fs::symlink_metadata(&p) else {
            return;
        };
        let mode = m.permissions().mode();
        let ft = m.file_type();
        let node = if ft.is_symlink() {
            Node::Symlink(fs::read_link(&p).unwrap_or_default())
        } else if ft.is_dir() {
            Node::Dir {
                mode,
                mtime: dir_mtimes.then(|| (m.mtime(), m.mtime_nsec())),
            }
        } else if ft.is_file() {
            Node::File {
                mode,
                mtime: (m.mtime(), m.mtime_nsec()),
                bytes: fs::read(&p).unwrap_or_default(),
            }
        } else {
            Node::Other { mode }
        };
        out.insert(rel.to_path_buf(), node);
        if ft.is_dir() {
            let mut names: Vec<_> = fs::read_dir(&p)
                .unwrap()
                .flatten()
                .map(|e| e.file_name())
                .collect();
            names.sort();
            for n in names {
                walk(root, &rel.join(n), dir_mtimes, out);
            }
        }
    }
    let mut out = Snapshot::new();
    walk(root, Path::new(""), dir_mtimes, &mut out);
    out
}

fn diff(a: &Snapshot, b: &Snapshot) -> String {
    let mut lines = Vec::new();
    for (p, n) in a {
        match b.get(p) {
            None => lines.push(format!("  - {}", p.display())),
            Some(m) if m != n => lines.push(format!("  ~ {}", p.display())),
            _ => {}
        }
    }
    for p in b.keys().filter(|p| !a.contains_key(*p)) {
        lines.push(format!("  + {}", p.display()));
    }
    lines.join("\n")
}

/// The scratch area of one unpack: `outside/` (mode 700, one file) stands for everything the
/// bundle must not reach; `dest` is where the model goes.
struct Work {
    dir: tempfile::TempDir,
}

impl Work {
    fn new() -> Work {
        let dir = tempfile::tempdir().expect("tempdir");
        let outside = dir.path().join("outside");
        fs::create_dir(&outside).unwrap();
        fs::write(outside.join("secret"), b"must not be touched\n").unwrap();
        fs::set_permissions(&outside, fs::Permissions::from_mode(0o700)).unwrap();
        Work { dir }
    }

    fn dest(&self) -> PathBuf {
        self.dir.path().join("dest")
    }

    /// A previous install to replace: files, a subdirectory, an executable, and a receipt
    /// naming the same bundle (only an airlock install of that name may be replaced; the
    /// bundle's own signed manifest serves, so the refusal under test is the bundle's).
    fn old_tree(&self, bundle: &Path) {
        let d = self.dest();
        fs::create_dir_all(d.join(".airlock")).unwrap();
        for name in ["manifest.json", "manifest.json.minisig"] {
            if let Ok(bytes) = fs::read(bundle.join(name)) {
                fs::write(d.join(".airlock").join(name), bytes).unwrap();
            }
        }
        fs::create_dir_all(d.join("sub")).unwrap();
        fs::write(d.join("config.json"), b"old config\n").unwrap();
        fs::write(d.join("sub/weights.bin"), b"old weights\n").unwrap();
        fs::write(d.join("run.sh"), b"#!/bin/sh\n").unwrap();
        fs::set_permissions(d.join("run.sh"), fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn snapshot(&self) -> Snapshot {
        snapshot(self.dir.path(), false)
    }

    /// After a refused unpack: the scratch area is exactly `before`, no staging directory is
    /// left, and nothing appeared at the absolute target the fixtures aim at.
    fn check_untouched(&self, rep: &mut Report, run: &Run, before: &Snapshot) {
        let after = self.snapshot();
        let staging: Vec<String> = fs::read_dir(self.dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".airlock-staging-"))
            .collect();
        if !staging.is_empty() {
            rep.fail(format!(
                "{} left staging directories: {staging:?}",
                run.what
            ));
        }
        if *before != after {
            rep.fail(format!(
                "{} changed the destination or its surroundings:\n{}",
                run.what,
                diff(before, &after)
            ));
        }
        if Path::new(ABSOLUTE_TARGET).exists() {
            rep.fail(format!("{} created {ABSOLUTE_TARGET}", run.what));
        }
    }
}

/// The "nothing written outside" check needs [`ABSOLUTE_TARGET`] absent before a case runs: it
/// is never skipped, so a leftover (from a broken build, or anything else) fails the test and
/// names the path to inspect and remove by hand.
fn assert_absolute_target_absent() {
    assert!(
        !Path::new(ABSOLUTE_TARGET).exists(),
        "{ABSOLUTE_TARGET} exists before the case runs, so the check that a hostile bundle wrote \
         nothing there cannot be made: something (an earlier broken build?) created it; inspect \
         and remove it"
    );
}

/// Unpacks `bundle` twice, into a fresh destination and with `--replace --json` over an old
/// tree; both must fail with `code` and `needles` and leave everything as it was.
fn expect_unpack_refused(
    rep: &mut Report,
    bundle: &Path,
    trust: &Path,
    code: i32,
    needles: &[&str],
) {
    assert_absolute_target_absent();

    let work = Work::new();
    let before = work.snapshot();
    let run = unpack(rep, bundle, trust, &work.dest(), &[]);
    rep.expect(&run, code, needles);
    if work.dest().exists() {
        rep.fail(format!("{} left the destination behind", run.what));
    }
    work.check_untouched(rep, &run, &before);

    let work = Work::new();
    work.old_tree(bundle);
    let before = work.snapshot();
    let run = unpack(rep, bundle, trust, &work.dest(), &["--replace", "--json"]);
    rep.expect(&run, code, needles);
    work.check_untouched(rep, &run, &before);
}

// ---------------------------------------------------------------------------------------------
// Fixture cases

#[derive(Clone, Copy, PartialEq, Eq)]
enum Layer {
    /// An honest bundle from the generator: everything succeeds.
    Control,
    /// The signed manifest is hostile: even plain `verify` refuses, naming manifest.json.
    Manifest,
    /// The manifest is clean, the stream is hostile: plain `verify` passes (signature and
    /// volumes are good), `verify --deep` and `unpack` refuse.
    Stream,
}

fn fixture_case(case: &str, layer: Layer, code: i32, needles: &[&str]) {
    let bundle = fixture(case);
    assert!(
        bundle.join("manifest.json").is_file(),
        "{} is missing: run scripts/make-hostile.py",
        bundle.display()
    );
    let trust = key("test.pub");
    let mut rep = Report::new(case);
    match layer {
        Layer::Control => control_case(&mut rep, &bundle, &trust),
        Layer::Manifest | Layer::Stream => {
            let plain = verify(&mut rep, &bundle, &trust, &[]);
            if layer == Layer::Manifest {
                let mut n = needles.to_vec();
                n.push("manifest.json");
                rep.expect(&plain, code, &n);
            } else {
                // The fixture is only a test of the deep checks if nothing else is wrong.
                rep.expect(&plain, 0, &[]);
            }
            let deep = verify(&mut rep, &bundle, &trust, &["--deep"]);
            rep.expect(&deep, code, needles);
            let deep_json = verify(&mut rep, &bundle, &trust, &["--deep", "--json"]);
            rep.expect(&deep_json, code, needles);
            expect_unpack_refused(&mut rep, &bundle, &trust, code, needles);
        }
    }
    rep.finish();
}

fn control_case(rep: &mut Report, bundle: &Path, trust: &Path) {
    let deep = verify(rep, bundle, trust, &["--deep"]);
    rep.expect(&deep, 0, &[]);
    let work = Work::new();
    let run = unpack(rep, bundle, trust, &work.dest(), &[]);
    rep.expect(&run, 0, &[]);
    let m: serde_json::Value =
        serde_json::from_slice(&fs::read(bundle.join("manifest.json")).unwrap()).unwrap();
    for f in m["files"].as_array().unwrap() {
        let path = work.dest().join(f["path"].as_str().unwrap());
        let bytes = fs::read(&path).unwrap_or_default();
        let sha = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes));
        if sha != f["sha256"].as_str().unwrap() {
            rep.fail(format!(
                "{} does not hold the manifest's content",
                path.display()
            ));
        }
    }
    let leftovers: Vec<_> = fs::read_dir(work.dir.path())
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(".airlock-staging-")
        })
        .collect();
    if !leftovers.is_empty() {
        rep.fail("a successful unpack left a staging directory".into());
    }
}

macro_rules! fixtures {
    ($($test:ident: $case:literal, $layer:ident, $code:literal, [$($needle:expr),* $(,)?];)*) => {
        $(
            #[test]
            fn $test() {
                fixture_case($case, Layer::$layer, $code, &[$($needle),*]);
            }
        )*
        /// Every fixture directory a test covers.
        const FIXTURES: &[&str] = &[$($case),*];
    };
}

fixtures! {
    // Controls: the generator makes bundles airlock accepts, so a refusal below is about the
    // hostile defect and nothing else.
    hostile_control_good: "control-good", Control, 0, [];
    hostile_control_good_uncompressed: "control-good-uncompressed", Control, 0, [];
    hostile_control_good_multivolume: "control-good-multivolume", Control, 0, [];
    hostile_control_good_long_names: "control-good-long-names", Control, 0, [];

    // Paths, listed in the signed manifest (the validator refuses) and only in the tar.
    hostile_dotdot_in_manifest: "dotdot", Manifest, 3, ["\"../evil.txt\"", "'..' component"];
    hostile_dotdot: "dotdot-tar-only", Stream, 3, ["\"../evil.txt\"", "'..' component"];
    hostile_dotdot_uncompressed: "dotdot-tar-only-uncompressed", Stream, 3, ["\"../evil.txt\"", "'..' component"];
    hostile_dotdot_deep_in_manifest: "dotdot-deep", Manifest, 3, ["\"sub/../../evil.txt\"", "'..' component"];
    hostile_dotdot_deep: "dotdot-deep-tar-only", Stream, 3, ["\"sub/../../evil.txt\"", "'..' component"];
    hostile_dotdot_dir_in_manifest: "dotdot-dir", Manifest, 3, ["\"../evil\"", "'..' component"];
    hostile_dotdot_dir: "dotdot-dir-tar-only", Stream, 3, ["\"../evil\"", "'..' component"];
    hostile_dotdot_in_pax_path_in_manifest: "dotdot-in-pax-path", Manifest, 3, ["\"../yyyy", "'..' component"];
    hostile_dotdot_in_pax_path: "dotdot-in-pax-path-tar-only", Stream, 3, ["\"../yyyy", "'..' component"];
    hostile_dotdot_in_ustar_prefix_in_manifest: "dotdot-in-ustar-prefix", Manifest, 3, ["\"../xxxx", "'..' component"];
    hostile_dotdot_in_ustar_prefix: "dotdot-in-ustar-prefix-tar-only", Stream, 3, ["\"../xxxx", "'..' component"];
    hostile_dotdot_across_prefix_split: "dotdot-across-prefix-split", Stream, 3, ["\"sub/../zzzz", "'..' component"];
    hostile_dotdot_at_name_boundary: "dotdot-at-name-boundary", Stream, 3, ["wwww/..\"", "'..' component"];
    hostile_dotdot_across_volume_boundary: "dotdot-across-volume-boundary", Stream, 3, ["\"../tokenizer.json\"", "'..' component"];
    hostile_absolute_path_in_manifest: "absolute", Manifest, 3, ["\"/tmp/airlock-hostile/absolute.txt\"", "absolute path"];
    hostile_absolute_path: "absolute-tar-only", Stream, 3, ["\"/tmp/airlock-hostile/absolute.txt\"", "absolute path"];
    hostile_double_slash_in_manifest: "double-slash", Manifest, 3, ["\"sub//evil.txt\"", "empty component"];
    hostile_double_slash: "double-slash-tar-only", Stream, 3, ["\"sub//evil.txt\"", "empty component"];
    hostile_leading_double_slash_in_manifest: "leading-double-slash", Manifest, 3, ["\"//tmp/airlock-hostile/evil.txt\"", "absolute path"];
    hostile_leading_double_slash: "leading-double-slash-tar-only", Stream, 3, ["\"//tmp/airlock-hostile/evil.txt\"", "absolute path"];
    hostile_backslash_unc_in_manifest: "backslash-unc", Manifest, 3, [r#""\\\\?\\C:\\evil.txt""#, "backslash"];
    hostile_backslash_unc: "backslash-unc-tar-only", Stream, 3, [r#""\\\\?\\C:\\evil.txt""#, "backslash"];
    hostile_backslash_dotdot_in_manifest: "backslash-dotdot", Manifest, 3, [r#""..\\evil.txt""#, "backslash"];
    hostile_backslash_dotdot: "backslash-dotdot-tar-only", Stream, 3, [r#""..\\evil.txt""#, "backslash"];
    hostile_drive_letter_in_manifest: "drive-letter", Manifest, 3, ["\"C:/evil.txt\"", "drive letter"];
    hostile_drive_letter: "drive-letter-tar-only", Stream, 3, ["\"C:/evil.txt\"", "drive letter"];
    hostile_device_com1_in_manifest: "device-com1", Manifest, 3, ["\"COM1\"", "Windows device name"];
    hostile_device_com1: "device-com1-tar-only", Stream, 3, ["\"COM1\"", "Windows device name"];
    hostile_device_nul_in_manifest: "device-nul", Manifest, 3, ["\"sub/NUL.txt\"", "Windows device name"];
    hostile_device_nul: "device-nul-tar-only", Stream, 3, ["\"sub/NUL.txt\"", "Windows device name"];
    hostile_empty_name_in_manifest: "empty-name", Manifest, 3, ["\"\"", "empty name"];
    hostile_empty_name: "empty-name-tar-only", Stream, 3, ["entry \"\"", "empty name"];
    hostile_dot_alone_in_manifest: "dot-alone", Manifest, 3, ["\".\"", "'.' component"];
    hostile_dot_alone: "dot-alone-tar-only", Stream, 3, ["\"./\"", "'.' component"];
    hostile_nul_in_name_in_manifest: "nul-in-name", Manifest, 3, [r#""evil\0.txt""#, "control character"];
    hostile_nul_in_name: "nul-in-name-tar-only", Stream, 3, [r"yyyy\0yyyy", "control character"];
    hostile_cr_in_name_in_manifest: "cr-in-name", Manifest, 3, [r#""evil\r.txt""#, "control character"];
    hostile_cr_in_name: "cr-in-name-tar-only", Stream, 3, [r#""evil\r.txt""#, "control character"];
    hostile_lf_in_name_in_manifest: "lf-in-name", Manifest, 3, [r#""evil\n.txt""#, "control character"];
    hostile_lf_in_name: "lf-in-name-tar-only", Stream, 3, [r#""evil\n.txt""#, "control character"];
    hostile_trailing_dot_in_manifest: "trailing-dot", Manifest, 3, ["\"evil.txt.\"", "ending in a space or dot"];
    hostile_trailing_dot: "trailing-dot-tar-only", Stream, 3, ["\"evil.txt.\"", "ending in a space or dot"];
    hostile_receipt_name_in_manifest: "receipt-name", Manifest, 3, ["\".airlock\"", "reserved"];
    hostile_receipt_name: "receipt-name-tar-only", Stream, 3, ["\".airlock", "reserved"];

    // GNU long names (bundles use PAX; a GNU record is refused wherever it is).
    hostile_gnu_longname: "gnu-longname", Stream, 3, ["byte 7168", "GNU long-name record"];
    hostile_gnu_longname_dotdot: "gnu-longname-dotdot", Stream, 3, ["byte 7168", "GNU long-name record"];
    hostile_gnu_longname_not_followed_by_entry: "gnu-longname-orphan", Stream, 3, ["byte 7168", "GNU long-name record"];
    hostile_gnu_longlink: "gnu-longlink", Stream, 3, ["byte 7168", "GNU long-name record"];

    // Links, devices, FIFOs, sparse files, modes. The entry's name must be in the message.
    hostile_symlink: "symlink", Stream, 3, ["\"tokenizer.json\"", "symbolic link"];
    hostile_symlink_then_file_through_it: "symlink-then-file", Stream, 3, ["\"sub\"", "symbolic link"];
    hostile_symlink_then_file_through_it_uncompressed: "symlink-then-file-uncompressed", Stream, 3, ["\"sub\"", "symbolic link"];
    hostile_symlink_then_dir_of_same_name: "symlink-then-dir", Stream, 3, ["\"sub\"", "symbolic link"];
    hostile_hardlink_to_outside: "hardlink-outside", Stream, 3, ["\"tokenizer.json\"", "hard link"];
    hostile_hardlink_inside: "hardlink-inside", Stream, 3, ["\"tokenizer.json\"", "hard link"];
    hostile_char_device: "char-device", Stream, 3, ["\"tokenizer.json\"", "device entry"];
    hostile_block_device: "block-device", Stream, 3, ["\"tokenizer.json\"", "device entry"];
    hostile_fifo: "fifo", Stream, 3, ["\"tokenizer.json\"", "FIFO entry"];
    hostile_gnu_sparse: "gnu-sparse", Stream, 3, ["byte 1536", "not a POSIX ustar header"];
    hostile_gnu_sparse_posix_magic: "gnu-sparse-posix-magic", Stream, 3, ["\"sub/weights.bin\"", "GNU sparse entry"];
    hostile_pax_sparse: "pax-sparse", Stream, 3, ["byte 1536", "\"GNU.sparse.major\" is not part of the bundle format"];
    hostile_setuid_file: "setuid-file", Stream, 3, ["\"tokenizer.json\"", "mode 4755", "setuid"];
    hostile_setgid_file: "setgid-file", Stream, 3, ["\"tokenizer.json\"", "mode 2755", "setgid"];
    hostile_sticky_world_writable_dir: "sticky-world-writable-dir", Stream, 3, ["\"sub/\"", "directory mode 1777"];
    hostile_mode_disagrees_with_manifest: "mode-disagrees-with-manifest", Stream, 3, ["\"tokenizer.json\"", "mode that disagrees with the manifest"];

    // Duplicates and names that are one file elsewhere.
    hostile_duplicate_entry_in_manifest: "duplicate-entry", Manifest, 3, ["\"config.json\"", "out of order or twice"];
    hostile_duplicate_entry: "duplicate-entry-tar-only", Stream, 3, ["\"config.json\"", "appears twice"];
    hostile_duplicate_dir_entry: "duplicate-dir-tar-only", Stream, 3, ["\"sub\"", "appears twice"];
    hostile_case_fold_collision_in_manifest: "case-fold-collision", Manifest, 3, ["\"config.json\"", "\"Config.json\"", "case-insensitive"];
    hostile_case_fold_collision: "case-fold-collision-tar-only", Stream, 3, ["\"Config.json\"", "not in the manifest"];
    hostile_unicode_normalisation_collision_in_manifest: "unicode-normalisation-collision", Manifest, 3, ["café.txt", r"cafe\u{301}.txt", "normalising"];
    hostile_unicode_normalisation_collision: "unicode-normalisation-collision-tar-only", Stream, 3, [r"cafe\u{301}.txt", "not in the manifest"];
    hostile_file_and_dir_same_name_in_manifest: "file-and-dir-same-name", Manifest, 3, ["\"sub\"", "both a file and a directory"];
    hostile_file_where_manifest_has_dir: "file-for-dir-tar-only", Stream, 3, ["\"sub\"", "the manifest says it is a directory"];

    // The stream held to the manifest.
    hostile_entry_size_larger_than_manifest: "size-differs-from-manifest", Stream, 3, ["\"sub/weights.bin\"", "6000 bytes in the stream, the manifest says 5000"];
    hostile_entry_size_smaller_than_manifest: "size-smaller-than-manifest", Stream, 3, ["\"sub/weights.bin\"", "10 bytes in the stream, the manifest says 5000"];
    hostile_entry_not_in_manifest: "entry-not-in-manifest", Stream, 3, ["\"extra.txt\"", "not in the manifest"];
    hostile_entry_after_last_manifest_entry: "entry-after-last", Stream, 3, ["\"zz-extra.txt\"", "not in the manifest"];
    hostile_manifest_file_missing_from_tar: "manifest-file-missing-from-tar", Stream, 3, ["\"tokenizer.json\"", "missing from the stream"];
    hostile_manifest_file_missing_mid_stream: "manifest-file-missing-mid-stream", Stream, 3, ["\"tokenizer.json\"", "expected \"sub/weights.bin\""];
    hostile_out_of_order_in_manifest: "out-of-order", Manifest, 3, ["\"config.json\"", "out of order"];
    hostile_entries_out_of_manifest_order: "out-of-order-tar-only", Stream, 3, ["\"tokenizer.json\"", "out of manifest order"];
    hostile_content_differs_from_manifest_sha256: "content-sha256-mismatch", Stream, 3, ["sub/weights.bin", "sha256"];
    hostile_content_differs_from_manifest_sha256_uncompressed: "content-sha256-mismatch-uncompressed", Stream, 3, ["sub/weights.bin", "sha256"];

    // PAX against ustar, malformed PAX.
    hostile_pax_size_disagrees_with_ustar: "pax-size-disagrees-with-ustar", Stream, 3, ["\"sub/weights.bin\"", "PAX size 9000000000 disagrees with the ustar size 5000"];
    hostile_pax_size_hides_entry: "pax-size-hides-entry", Stream, 3, ["\"sub/weights.bin\"", "PAX size used for a size that fits"];
    hostile_pax_path_disagrees_with_ustar: "pax-path-disagrees-with-ustar", Stream, 3, ["\"innocent.txt\"", "PAX path disagrees with the ustar name"];
    hostile_pax_path_for_short_name: "pax-path-for-short-name", Stream, 3, ["\"tokenizer.json\"", "PAX path used for a name that fits"];
    hostile_pax_path_renames_entry: "pax-path-renames-entry", Stream, 3, ["/evil.txt\"", "\"tokenizer.json\"", "PAX path disagrees"];
    hostile_pax_length_too_long: "pax-length-too-long", Stream, 3, ["byte 1536", "PAX record length 99 is out of bounds"];
    hostile_pax_length_too_short: "pax-length-too-short", Stream, 3, ["byte 1536", "PAX record does not end with a newline"];
    hostile_pax_length_leading_zero: "pax-length-leading-zero", Stream, 3, ["byte 1536", "PAX record length is not a decimal number"];
    hostile_pax_no_length: "pax-no-length", Stream, 3, ["byte 1536", "PAX record without a length"];
    hostile_pax_no_equals: "pax-no-equals", Stream, 3, ["byte 1536", "PAX record without '='"];
    hostile_pax_no_newline: "pax-no-newline", Stream, 3, ["byte 1536", "does not end with a newline"];
    hostile_pax_value_not_utf8: "pax-value-not-utf8", Stream, 3, ["byte 1536", "not UTF-8"];
    hostile_pax_unknown_key_linkpath: "pax-unknown-key-linkpath", Stream, 3, ["byte 1536", "\"linkpath\" is not part of the bundle format"];
    hostile_pax_repeated_path: "pax-repeated-path", Stream, 3, ["byte 1536", "repeats 'path'"];
    hostile_pax_size_not_decimal: "pax-size-not-decimal", Stream, 3, ["byte 1536", "PAX size \"-1\" is not a decimal number"];
    hostile_pax_empty: "pax-empty", Stream, 3, ["byte 1536", "empty PAX header"];
    hostile_pax_global_header: "pax-global-header", Stream, 3, ["byte 1536", "PAX global header"];
    hostile_pax_too_large: "pax-too-large", Stream, 3, ["byte 1536", "70000 bytes is too large"];
    hostile_pax_two_headers_in_a_row: "pax-two-headers", Stream, 3, ["byte 2560", "two PAX headers in a row"];
    hostile_pax_not_followed_by_entry: "pax-orphan-at-end", Stream, 3, ["byte 8192", "PAX header not followed by an entry"];

    // Header fields the dialect fixes.
    hostile_bad_header_checksum: "bad-header-checksum", Stream, 3, ["byte 7168", "checksum"];
    hostile_base256_size: "base256-size", Stream, 3, ["byte 1536", "size field"];
    hostile_nonzero_owner: "nonzero-owner", Stream, 3, ["\"tokenizer.json\"", "uid is not 0"];
    hostile_linkname_on_file: "linkname-on-file", Stream, 3, ["\"tokenizer.json\"", "link name set"];
    hostile_nonzero_padding: "nonzero-padding", Stream, 3, ["\"config.json\"", "non-zero bytes in the padding"];
    hostile_lone_zero_block: "lone-zero-block", Stream, 3, ["byte 7168", "lone zero block"];

    // Streams: short, long, garbage, bombs.
    hostile_stream_ends_early: "stream-ends-early", Stream, 3, ["\"sub/weights.bin\"", "ends inside the entry's data (4000 bytes missing)"];
    hostile_stream_ends_before_end_marker: "stream-ends-before-end-marker", Stream, 3, ["byte 8192", "ends inside a header"];
    hostile_zstd_frame_truncated: "zstd-frame-truncated", Stream, 3, ["data stream", "incomplete frame"];
    hostile_trailing_garbage_after_tar: "trailing-garbage-after-tar", Stream, 3, ["data stream", "past the size the manifest declares"];
    hostile_trailing_zero_blocks_after_tar: "trailing-zero-blocks", Stream, 3, ["data stream", "past the size the manifest declares"];
    hostile_trailing_garbage_after_zstd_frame: "trailing-garbage-after-zstd-frame", Stream, 3, ["data stream", "trailing data after the end of the compressed stream"];
    hostile_zstd_skippable_frame_after_end: "zstd-skippable-frame-after-end", Stream, 3, ["data stream", "trailing"];
    hostile_zstd_empty_second_frame: "zstd-empty-second-frame", Stream, 3, ["data stream", "trailing"];
    hostile_zstd_second_frame_with_data: "zstd-second-frame-with-data", Stream, 3, ["data stream", "trailing data after the end of the compressed stream"];
    hostile_zstd_huge_window: "zstd-huge-window", Stream, 3, ["data stream", "too much memory"];
    hostile_decompression_bomb: "decompression-bomb", Stream, 3, ["data stream", "past the size the manifest declares"];
    hostile_decompression_bomb_in_entry: "decompression-bomb-in-entry", Stream, 3, ["\"sub/weights.bin\"", "1073741824 bytes in the stream, the manifest says 5000"];
}

#[test]
fn every_fixture_has_a_test() {
    let mut on_disk: Vec<String> = fs::read_dir(repo().join("testdata/hostile"))
        .expect("testdata/hostile exists: run scripts/make-hostile.py")
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    on_disk.sort();
    let mut tested: Vec<String> = FIXTURES.iter().map(|s| s.to_string()).collect();
    tested.sort();
    assert_eq!(
        on_disk, tested,
        "testdata/hostile and the fixtures! list differ"
    );
}

/// The bomb must be refused at the declared size, not after inflating a gigabyte.
#[test]
fn hostile_decompression_bomb_stops_early() {
    let bundle = fixture("decompression-bomb");
    let start = Instant::now();
    let mut rep = Report::new("decompression-bomb (timing)");
    let run = verify(&mut rep, &bundle, &key("test.pub"), &["--deep"]);
    rep.expect(&run, 3, &["past the size the manifest declares"]);
    let took = start.elapsed();
    if took > Duration::from_secs(5) {
        rep.fail(format!(
            "refusing the bomb took {took:?}: it was inflated, not stopped"
        ));
    }
    rep.finish();
}

// ---------------------------------------------------------------------------------------------
// Bundles packed at test time, for volume damage and trust

/// Deterministic text-like bytes: compressible, so zstd emits real compressed blocks (a flipped
/// bit then breaks decoding, not just a digest).
fn model_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed;
    (0..len)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            b"abcdefgh \n"[(x >> 59) as usize % 10]
        })
        .collect()
}

/// A packed bundle in its own temp dir.
struct Packed {
    _dir: tempfile::TempDir,
    bundle: PathBuf,
}

/// Packs a 1.5 MiB model into 128 KiB volumes (six of them) with `key_file`. The model is
/// text-like, so zstd emits real compressed blocks: a damaged volume then breaks decoding before
/// the volume's own digest is checked, which is what a real damaged medium does.
fn pack(version: u64, seed: u64, key_file: &str) -> Packed {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = dir.path().join("model");
    fs::create_dir_all(model.join("sub")).unwrap();
    fs::write(model.join("config.json"), format!("{{\"seed\": {seed}}}\n")).unwrap();
    fs::write(
        model.join("sub/weights.dat"),
        model_bytes(1536 * 1024, seed),
    )
    .unwrap();
    fs::write(model.join("tokenizer.json"), b"{\"vocab\": {}}\n").unwrap();
    let bundle = dir.path().join("bundle");
    let mut cmd = Command::new(BIN);
    cmd.arg("pack")
        .arg(&model)
        .arg("-o")
        .arg(&bundle)
        .arg("--key")
        .arg(key(key_file))
        .args(["--name", "hostile-model", "--version", &version.to_string()])
        .args([
            "--volume-size",
            "128K",
            "--threads",
            "1",
            "--progress",
            "none",
        ])
        // The model-format checks are not under test here, only the bundle.
        .arg("--no-model-checks");
    let run = execute(cmd, "airlock pack".into());
    assert_eq!(run.code, Some(0), "pack failed: {}", run.stderr);
    let volumes = fs::read_dir(&bundle)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("data."))
        .count();
    assert!(volumes >= 4, "expected several volumes, got {volumes}");
    Packed { _dir: dir, bundle }
}

fn edit(path: &Path, f: impl FnOnce(&mut Vec<u8>)) {
    let mut bytes = fs::read(path).unwrap();
    f(&mut bytes);
    fs::write(path, bytes).unwrap();
}

/// A damaged bundle: `verify` (plain, with `verify_needles`) and both unpacks (with
/// `unpack_needles`) must exit `code`.
fn damaged(
    case: &str,
    bundle: &Path,
    trust: &Path,
    code: i32,
    verify_needles: &[&str],
    unpack_needles: &[&str],
) {
    damaged_within(
        TIMEOUT,
        case,
        bundle,
        trust,
        code,
        verify_needles,
        unpack_needles,
    )
}

fn damaged_within(
    timeout: Duration,
    case: &str,
    bundle: &Path,
    trust: &Path,
    code: i32,
    verify_needles: &[&str],
    unpack_needles: &[&str],
) {
    let mut rep = Report::new(case);
    rep.timeout = timeout;
    damaged_into(
        &mut rep,
        bundle,
        trust,
        code,
        verify_needles,
        unpack_needles,
    );
    rep.finish();
}

fn damaged_into(
    rep: &mut Report,
    bundle: &Path,
    trust: &Path,
    code: i32,
    verify_needles: &[&str],
    unpack_needles: &[&str],
) {
    let run = verify(rep, bundle, trust, &[]);
    rep.expect(&run, code, verify_needles);
    let run = verify(rep, bundle, trust, &["--json"]);
    rep.expect(&run, code, verify_needles);
    expect_unpack_refused(rep, bundle, trust, code, unpack_needles);
}

#[test]
fn packed_bundle_is_good() {
    let p = pack(2, 1, "test.key");
    let mut rep = Report::new("packed control");
    control_case(&mut rep, &p.bundle, &key("test.pub"));
    rep.finish();
}

#[test]
fn volume_truncated() {
    let p = pack(2, 1, "test.key");
    edit(&p.bundle.join("data.001"), |b| b.truncate(b.len() - 1));
    damaged(
        "volume truncated",
        &p.bundle,
        &key("test.pub"),
        3,
        &["data.001", "truncated"],
        &["data.001", "truncated"],
    );
}

#[test]
fn volume_extended() {
    let p = pack(2, 1, "test.key");
    edit(&p.bundle.join("data.001"), |b| b.push(0));
    damaged(
        "volume extended",
        &p.bundle,
        &key("test.pub"),
        3,
        &["data.001", "extended"],
        &["data.001", "extended"],
    );
}

/// One bit flipped at several places of one volume, each in its own copy of the bundle: where
/// the flip lands decides whether zstd, the tar reader or the volume digest notices first, and
/// every one of those paths must still name the volume.
fn flip_each(case: &str, volume: Option<&str>) {
    let p = pack(2, 1, "test.key");
    let volume = volume.map_or_else(|| last_volume(&p.bundle), str::to_string);
    let len = fs::metadata(p.bundle.join(&volume)).unwrap().len() as usize;
    let mut rep = Report::new(case);
    for at in [100, len / 4, len / 2, 3 * len / 4, len - 100] {
        let copy = tempfile::tempdir().unwrap();
        let bundle = copy.path().join("bundle");
        copy_dir(&p.bundle, &bundle);
        edit(&bundle.join(&volume), |b| b[at] ^= 0x04);
        let before = rep.problems.len();
        damaged_into(
            &mut rep,
            &bundle,
            &key("test.pub"),
            3,
            &[&volume, "sha256"],
            &[&volume],
        );
        for p in &mut rep.problems[before..] {
            *p = format!("[bit flipped at byte {at} of {volume}] {p}");
        }
    }
    rep.finish();
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir(to).unwrap();
    for e in fs::read_dir(from).unwrap().flatten() {
        fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

#[test]
fn volume_one_bit_flipped() {
    flip_each("volume bit flipped", Some("data.002"));
}

#[test]
fn volume_one_bit_flipped_in_last_volume() {
    flip_each("last volume bit flipped", None);
}

fn last_volume(bundle: &Path) -> String {
    let mut v: Vec<String> = fs::read_dir(bundle)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("data."))
        .collect();
    v.sort();
    v.pop().unwrap()
}

#[test]
fn volume_missing() {
    let p = pack(2, 1, "test.key");
    fs::remove_file(p.bundle.join("data.002")).unwrap();
    damaged(
        "volume missing",
        &p.bundle,
        &key("test.pub"),
        3,
        &["data.002", "missing"],
        &["data.002", "missing"],
    );
}

#[test]
fn volume_duplicated_over_the_next() {
    let p = pack(2, 1, "test.key");
    fs::copy(p.bundle.join("data.001"), p.bundle.join("data.002")).unwrap();
    damaged(
        "volume duplicated",
        &p.bundle,
        &key("test.pub"),
        3,
        &["data.002", "sha256"],
        &["data.002"],
    );
}

#[test]
fn volumes_swapped() {
    let p = pack(2, 1, "test.key");
    let (a, b) = (p.bundle.join("data.001"), p.bundle.join("data.002"));
    let tmp = p.bundle.with_extension("swap");
    fs::rename(&a, &tmp).unwrap();
    fs::rename(&b, &a).unwrap();
    fs::rename(&tmp, &b).unwrap();
    damaged(
        "volumes swapped",
        &p.bundle,
        &key("test.pub"),
        3,
        &["data.001", "data.002", "sha256"],
        &["data.001"],
    );
}

/// THREATS.md: "an extra volume present" must end with a non-zero exit naming it.
#[test]
fn volume_extra_present() {
    let p = pack(2, 1, "test.key");
    let last = last_volume(&p.bundle);
    let n: usize = last.trim_start_matches("data.").parse().unwrap();
    let extra = format!("data.{:03}", n + 1);
    fs::copy(p.bundle.join(&last), p.bundle.join(&extra)).unwrap();
    damaged(
        "extra volume",
        &p.bundle,
        &key("test.pub"),
        3,
        &[&extra],
        &[&extra],
    );
}

/// An unreadable medium: data.002 reads fail with EIO (it is bind-mounted over with the memory
/// file of a sleeping process, whose address 0 is unmapped), in a private mount namespace.
#[test]
fn volume_unreadable_io_error_half_way() {
    let p = pack(2, 1, "test.key");
    let mut sleeper = Command::new("sleep").arg("600").spawn().expect("sleep");
    let mem = format!("/proc/{}/mem", sleeper.id());
    let mut rep = Report::new("I/O error half way");
    let work = Work::new();
    let before = work.snapshot();
    let bundle_before = snapshot(&p.bundle, true);
    let mut cmd = Command::new("unshare");
    cmd.args([
        unshare_flags(),
        "sh",
        "-c",
        r#"mount --bind "$1" "$2" || exit 125; shift 2; exec "$@""#,
        "sh",
    ])
    .arg(&mem)
    .arg(p.bundle.join("data.002"))
    .arg(BIN)
    .arg("unpack")
    .arg(&p.bundle)
    .arg("--dest")
    .arg(work.dest())
    .arg("--trust")
    .arg(key("test.pub"))
    .args(["--progress", "none"]);
    let run = execute(cmd, "airlock unpack (data.002 gives EIO)".into());
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert_ne!(run.code, Some(125), "bind mount failed: {}", run.stderr);
    // An I/O error is operational (exit 1), and the message must say which volume.
    rep.expect(&run, 1, &["data.002", "Input/output error"]);
    if work.dest().exists() {
        rep.fail("the destination exists after the I/O error".into());
    }
    work.check_untouched(&mut rep, &run, &before);
    if snapshot(&p.bundle, true) != bundle_before {
        rep.fail("the bundle changed".into());
    }
    rep.finish();
}

/// A volume that is a FIFO (possible on an ext4 stick) must be refused, not waited on forever.
#[test]
fn volume_is_a_fifo() {
    let p = pack(2, 1, "test.key");
    let v = p.bundle.join("data.002");
    fs::remove_file(&v).unwrap();
    let st = Command::new("mkfifo").arg(&v).status().expect("mkfifo");
    assert!(st.success());
    damaged_within(
        SHORT_TIMEOUT,
        "volume is a FIFO",
        &p.bundle,
        &key("test.pub"),
        3,
        &["data.002", "not a regular file"],
        &["data.002", "not a regular file"],
    );
}

// Trust.

#[test]
fn trust_manifest_edited_one_byte() {
    let p = pack(2, 1, "test.key");
    edit(&p.bundle.join("manifest.json"), |b| {
        let at = find(b, b"\"version\": 2").expect("version field") + 11;
        b[at] = b'3';
    });
    let n = ["manifest.json", "does not match its signature"];
    damaged("manifest edited", &p.bundle, &key("test.pub"), 3, &n, &n);
}

#[test]
fn trust_signature_edited() {
    let p = pack(2, 1, "test.key");
    edit(&p.bundle.join("manifest.json.minisig"), |b| {
        // Line 2 is base64 of "ED" ‖ key id ‖ 64-byte signature: change a signature character.
        let line2 = find(b, b"\n").unwrap() + 1;
        let at = line2 + 60;
        b[at] = if b[at] == b'A' { b'B' } else { b'A' };
    });
    let n = ["manifest.json", "does not match its signature"];
    damaged("signature edited", &p.bundle, &key("test.pub"), 3, &n, &n);
}

#[test]
fn trust_trusted_comment_edited() {
    let p = pack(2, 1, "test.key");
    edit(&p.bundle.join("manifest.json.minisig"), |b| {
        let at = find(b, b"version=2").expect("trusted comment") + 8;
        b[at] = b'9';
    });
    let n = ["manifest.json", "does not match its signature"];
    damaged(
        "trusted comment edited",
        &p.bundle,
        &key("test.pub"),
        3,
        &n,
        &n,
    );
}

#[test]
fn trust_untrusted_key() {
    let p = pack(2, 1, "other.key");
    let other_id = key_id(&key("other.pub"));
    let n = [
        "manifest.json.minisig",
        other_id.as_str(),
        "not in the trust set",
    ];
    damaged("untrusted key", &p.bundle, &key("test.pub"), 3, &n, &n);
}

#[test]
fn trust_mix_and_match_signature() {
    let a = pack(2, 1, "test.key");
    let b = pack(3, 2, "test.key");
    fs::copy(
        a.bundle.join("manifest.json.minisig"),
        b.bundle.join("manifest.json.minisig"),
    )
    .unwrap();
    let n = ["manifest.json", "does not match its signature"];
    damaged("mix and match", &b.bundle, &key("test.pub"), 3, &n, &n);
}

/// A signature by other.key whose key id field was rewritten to the trusted key's id.
#[test]
fn trust_key_id_mismatch_in_signature() {
    let p = pack(2, 1, "other.key");
    let trusted = key_id_bytes(&key("test.pub"));
    rewrite_key_id(&p.bundle.join("manifest.json.minisig"), &trusted);
    let n = ["manifest.json", "does not match its signature"];
    damaged(
        "key id rewritten in signature",
        &p.bundle,
        &key("test.pub"),
        3,
        &n,
        &n,
    );
}

/// A trusted .pub whose key id is other.key's but whose key is test.key's: the key id matches
/// the signature, the key does not.
#[test]
fn trust_key_id_mismatch_in_public_key() {
    let p = pack(2, 1, "other.key");
    let dir = tempfile::tempdir().unwrap();
    let forged = dir.path().join("forged.pub");
    fs::copy(key("test.pub"), &forged).unwrap();
    rewrite_key_id(&forged, &key_id_bytes(&key("other.pub")));
    let n = ["manifest.json", "does not match its signature"];
    damaged(
        "key id rewritten in public key",
        &p.bundle,
        &forged,
        3,
        &n,
        &n,
    );
}

#[test]
fn trust_no_signature() {
    let p = pack(2, 1, "test.key");
    fs::remove_file(p.bundle.join("manifest.json.minisig")).unwrap();
    let n = ["manifest.json.minisig", "missing"];
    damaged("no signature", &p.bundle, &key("test.pub"), 3, &n, &n);
}

#[test]
fn trust_empty_signature_file() {
    let p = pack(2, 1, "test.key");
    fs::write(p.bundle.join("manifest.json.minisig"), b"").unwrap();
    let n = ["manifest.json.minisig"];
    damaged("empty signature", &p.bundle, &key("test.pub"), 3, &n, &n);
}

/// A correctly signed older version offered over a newer install is refused (the installed
/// tree stays byte for byte), and installs only with --allow-downgrade.
#[test]
fn rollback_older_version_refused() {
    let new = pack(2, 1, "test.key");
    let old = pack(1, 7, "test.key");
    let trust = key("test.pub");
    let mut rep = Report::new("rollback");
    let work = Work::new();
    let run = unpack(&mut rep, &new.bundle, &trust, &work.dest(), &[]);
    rep.expect(&run, 0, &[]);
    let before = work.snapshot();
    let run = unpack(&mut rep, &old.bundle, &trust, &work.dest(), &["--replace"]);
    rep.expect(
        &run,
        3,
        &["version 2", "older version 1", "--allow-downgrade"],
    );
    work.check_untouched(&mut rep, &run, &before);
    let run = unpack(
        &mut rep,
        &old.bundle,
        &trust,
        &work.dest(),
        &["--replace", "--json"],
    );
    rep.expect(&run, 3, &["version 2", "older version 1"]);
    work.check_untouched(&mut rep, &run, &before);
    let run = unpack(
        &mut rep,
        &old.bundle,
        &trust,
        &work.dest(),
        &["--replace", "--allow-downgrade"],
    );
    rep.expect(&run, 0, &[]);
    let config = fs::read_to_string(work.dest().join("config.json")).unwrap_or_default();
    if config != "{\"seed\": 7}\n" {
        rep.fail(format!("after --allow-downgrade config.json is {config:?}"));
    }
    rep.finish();
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The base64 line of a minisign key or signature file (line 2).
fn second_line(text: &str) -> &str {
    text.lines().nth(1).expect("two lines")
}

fn key_id_bytes(pub_file: &Path) -> [u8; 8] {
    let text = fs::read_to_string(pub_file).unwrap();
    let raw = base64::engine::general_purpose::STANDARD
        .decode(second_line(&text))
        .unwrap();
    raw[2..10].try_into().unwrap()
}

fn key_id(pub_file: &Path) -> String {
    let mut id = key_id_bytes(pub_file);
    id.reverse();
    hex::encode_upper(id)
}

/// Replaces bytes 2..10 (the key id) of line 2 of a minisign file.
fn rewrite_key_id(file: &Path, id: &[u8; 8]) {
    let text = fs::read_to_string(file).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let mut raw = base64::engine::general_purpose::STANDARD
        .decode(&lines[1])
        .unwrap();
    raw[2..10].copy_from_slice(id);
    lines[1] = base64::engine::general_purpose::STANDARD.encode(raw);
    let mut f = fs::File::create(file).unwrap();
    for l in lines {
        writeln!(f, "{l}").unwrap();
    }
}
