//! Killed processes and full disks: the destination is the old tree or the new one, never a
//! mix, and the next run cleans up.

use crate::support::*;
use std::process::{Command, Stdio};
use std::time::Instant;

fn big_model(env: &Env, rel: &str, seed: u64) {
    env.model(rel);
    for i in 0..6 {
        env.write(
            &format!("{rel}/shard-{i}.bin"),
            &pseudo_random(16 << 20, seed + i),
        );
    }
}

fn unpack_cmd(env: &Env, bundle: &str, replace: bool) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_airlock"));
    c.args([
        "unpack",
        bundle,
        "--trust",
        "k.pub",
        "--dest",
        "out",
        "--progress",
        "none",
    ]);
    if replace {
        c.arg("--replace");
    }
    c.current_dir(env.dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c
}

/// Kills unpack with SIGKILL at evenly spread moments across a normal run and checks after each
/// kill that the destination is exactly one of the allowed trees.
fn kill_at_many_points(replace: bool) {
    let env = Env::new();
    big_model(&env, "v1", 1);
    big_model(&env, "v2", 100);
    env.ok(&[
        "pack",
        "v1",
        "-o",
        "b1",
        "--key",
        "k.key",
        "--compress",
        "none",
        "--version",
        "1",
        "--name",
        "m",
    ]);
    env.ok(&[
        "pack",
        "v2",
        "-o",
        "b2",
        "--key",
        "k.key",
        "--compress",
        "none",
        "--version",
        "2",
        "--name",
        "m",
    ]);
    let old = tree(&env.path("v1"));
    let new = tree(&env.path("v2"));
    // How long an undisturbed run takes here.
    let start = Instant::now();
    if replace {
        env.ok(&["unpack", "b1", "--trust", "k.pub", "--dest", "out"]);
        env.ok(&[
            "unpack",
            "b2",
            "--trust",
            "k.pub",
            "--dest",
            "out",
            "--replace",
        ]);
    } else {
        env.ok(&["unpack", "b2", "--trust", "k.pub", "--dest", "out"]);
    }
    let full = start.elapsed() / if replace { 2 } else { 1 };
    let points = 12u32;
    let mut outcomes = (0, 0);
    for i in 0..=points {
        let _ = std::fs::remove_dir_all(env.path("out"));
        if replace {
            env.ok(&["unpack", "b1", "--trust", "k.pub", "--dest", "out"]);
        }
        let mut child = unpack_cmd(&env, "b2", replace).spawn().unwrap();
        std::thread::sleep(full * i / points);
        let _ = child.kill();
        let _ = child.wait();
        let out = env.path("out");
        if out.exists() {
            let now = tree_without_receipt(&out);
            if now == new {
                outcomes.1 += 1;
            } else {
                assert!(
                    replace,
                    "kill point {i}: a destination appeared that is not the new tree"
                );
                assert_eq!(
                    now, old,
                    "kill point {i}: the destination is neither the old nor the new tree"
                );
                outcomes.0 += 1;
            }
        } else {
            assert!(!replace, "kill point {i}: --replace lost the old tree");
            outcomes.0 += 1;
        }
        // The next run cleans up whatever the kill left and succeeds.
        let o = unpack_cmd(&env, "b2", true)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "kill point {i}: the run after the kill failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(tree_without_receipt(&out), new);
        assert!(
            staging_leftovers(env.dir.path()).is_empty(),
            "kill point {i}: leftovers"
        );
    }
    eprintln!(
        "kill points: {} before the switch, {} after",
        outcomes.0, outcomes.1
    );
    assert!(
        outcomes.0 > 0,
        "no kill landed before the rename: the test did not exercise anything"
    );
}

#[test]
fn sigkill_during_unpack_leaves_no_destination() {
    kill_at_many_points(false);
}

#[test]
fn sigkill_during_replace_leaves_the_old_or_new_tree() {
    kill_at_many_points(true);
}

/// Runs `script` in a private mount namespace with a tmpfs of `size` mounted at `mnt`.
fn with_tmpfs(env: &Env, size: &str, script: &str) -> std::process::Output {
    std::fs::create_dir_all(env.path("mnt")).unwrap();
    let full = format!("mount -t tmpfs -o size={size} tmpfs mnt && {script}");
    let out = Command::new("unshare")
        .args(["-m", "sh", "-c", &full])
        .env("AIRLOCK", env!("CARGO_BIN_EXE_airlock"))
        .current_dir(env.dir.path())
        .output()
        .expect("unshare (util-linux) must be installed");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("mount: ") && !err.contains("unshare: "),
        "the tests run as root and must be able to mount a tmpfs in a private namespace: {err}"
    );
    out
}

#[test]
fn not_enough_space_is_refused_before_writing() {
    let env = Env::new();
    env.model("m");
    env.write("m/big.bin", &pseudo_random(12 << 20, 9));
    env.ok(&["pack", "m", "-o", "b", "--key", "k.key"]);
    let out = with_tmpfs(
        &env,
        "8m",
        "mkdir mnt/keep && echo x > mnt/keep/file; \"$AIRLOCK\" unpack b --trust k.pub --dest mnt/model; echo \"rc=$?\"; ls -A mnt",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("rc=1"), "{stdout}{stderr}");
    assert!(
        stderr.contains("not enough free space") && stderr.contains("mnt"),
        "{stderr}"
    );
    assert!(
        stderr.contains("needs") && stderr.contains("available"),
        "{stderr}"
    );
    // Nothing but what was there before.
    let listing: Vec<&str> = stdout.lines().filter(|l| !l.starts_with("rc=")).collect();
    assert_eq!(listing, ["keep"], "{stdout}");
}

#[test]
fn disk_filling_during_unpack_fails_cleanly() {
    let env = Env::new();
    env.model("m");
    env.write("m/big.bin", &pseudo_random(12 << 20, 9));
    env.ok(&["pack", "m", "-o", "b", "--key", "k.key"]);
    // An earlier, small install of the same bundle name (only those can be replaced).
    env.write("small/old.txt", b"old\n");
    env.ok(&["pack", "small", "-o", "s", "--key", "k.key", "--name", "m"]);
    // The old tree must survive a --replace that runs out of space half way; what was staged
    // is kept (issue 37 item 3), and the same command resumes from it once there is room.
    let out = with_tmpfs(
        &env,
        "10m",
        "\"$AIRLOCK\" unpack s --trust k.pub --dest mnt/model >/dev/null; \
         \"$AIRLOCK\" unpack b --trust k.pub --dest mnt/model --replace --no-space-check; echo \"rc=$?\"; \
         ls -A mnt | sed 's/-[0-9a-f]\\{16\\}$/-RANDOM/'; cat mnt/model/old.txt; ls -A mnt/model; \
         mount -o remount,size=40m mnt && \"$AIRLOCK\" unpack b --trust k.pub --dest mnt/model --replace > resumed.txt; \
         echo \"rc=$?\"; ls -A mnt; grep -c 'resumed: ' resumed.txt",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("rc=1"), "{stdout}{stderr}");
    assert!(
        stderr.contains("No space left on device") && stderr.contains("big.bin"),
        "{stderr}"
    );
    let lines: Vec<&str> = stdout.lines().filter(|l| !l.starts_with("rc=")).collect();
    assert_eq!(
        lines,
        [
            ".airlock-staging-model-RANDOM",
            "model",
            "old",
            ".airlock",
            "old.txt",
            "model",
            "1"
        ],
        "{stdout}{stderr}"
    );
    assert!(stdout.contains("rc=0"), "{stdout}{stderr}");
}

/// Names of work directories (staging, birth, partial) in `dir`.
fn work_dirs(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".airlock-") || n.ends_with(".partial"))
        .collect()
}

#[test]
fn concurrent_unpacks_into_one_parent_all_succeed() {
    let env = Env::new();
    env.model("m");
    env.ok(&["pack", "m", "-o", "b", "--key", "k.key"]);
    std::fs::create_dir(env.path("parent")).unwrap();
    let n = 32;
    let children: Vec<_> = (0..n)
        .map(|i| {
            Command::new(env!("CARGO_BIN_EXE_airlock"))
                .args([
                    "unpack",
                    "b",
                    "--trust",
                    "k.pub",
                    "--progress",
                    "none",
                    "--dest",
                ])
                .arg(format!("parent/out-{i}"))
                .current_dir(env.dir.path())
                .env_remove("AIRLOCK_TRUST")
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut failed = Vec::new();
    for (i, c) in children.into_iter().enumerate() {
        let out = c.wait_with_output().unwrap();
        if !out.status.success() {
            failed.push(format!("{i}: {}", String::from_utf8_lossy(&out.stderr)));
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {n} failed: {failed:?}",
        failed.len()
    );
    for i in 0..n {
        env.ok(&["check", &format!("parent/out-{i}"), "--trust", "k.pub"]);
    }
    assert!(work_dirs(&env.path("parent")).is_empty());
}

/// Asserts the work directories an interrupted unpack left in the temp tree are at most one,
/// kept for a rerun to resume (it holds the resume marker).
fn only_kept_for_resume(env: &Env) {
    let left = work_dirs(env.dir.path());
    assert!(left.len() <= 1, "{left:?}");
    for d in &left {
        assert!(
            d.starts_with(".airlock-staging-out-") && env.path(d).join(".airlock-resume").is_file(),
            "{left:?}"
        );
    }
}

/// Starts `args`, waits until a work directory appears in the temp tree, sends `signal` and
/// returns the exit code.
fn interrupt_when_working(env: &Env, args: &[&str], signal: &str) -> Option<i32> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(args)
        .current_dir(env.dir.path())
        .env_remove("AIRLOCK_TRUST")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    loop {
        if !work_dirs(env.dir.path()).is_empty() {
            break;
        }
        if let Some(st) = child.try_wait().unwrap() {
            panic!("{args:?} finished ({st}) before it could be interrupted");
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let st = Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    child.wait().unwrap().code()
}

#[test]
fn sigint_and_sigterm_remove_the_work_directory_and_leave_the_destination() {
    let env = Env::new();
    big_model(&env, "m", 11);
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
    // A fresh unpack: nothing at the destination, nothing left over.
    let code = interrupt_when_working(
        &env,
        &["unpack", "b", "--trust", "k.pub", "--dest", "out"],
        "INT",
    );
    assert_eq!(code, Some(130));
    assert!(!env.path("out").exists());
    // The staging directory is removed, or kept for the rerun to resume once it is marked
    // (issue 37 item 3); the same command then completes and leaves nothing.
    only_kept_for_resume(&env);
    env.ok(&["unpack", "b", "--trust", "k.pub", "--dest", "out"]);
    assert!(work_dirs(env.dir.path()).is_empty());
    std::fs::remove_dir_all(env.path("out")).unwrap();
    // --replace: the old tree stays exactly as it was.
    env.ok(&["unpack", "b", "--trust", "k.pub", "--dest", "out"]);
    let before = tree(&env.path("out"));
    let code = interrupt_when_working(
        &env,
        &[
            "unpack",
            "b",
            "--trust",
            "k.pub",
            "--dest",
            "out",
            "--replace",
        ],
        "TERM",
    );
    assert_eq!(code, Some(143));
    assert_eq!(tree(&env.path("out")), before);
    only_kept_for_resume(&env);
    env.ok(&[
        "unpack",
        "b",
        "--trust",
        "k.pub",
        "--dest",
        "out",
        "--replace",
    ]);
    assert!(work_dirs(env.dir.path()).is_empty());
    // pack: no BUNDLE.partial, no bundle.
    let code = interrupt_when_working(
        &env,
        &[
            "pack",
            "m",
            "-o",
            "b2",
            "--key",
            "k.key",
            "--compress",
            "none",
        ],
        "INT",
    );
    assert_eq!(code, Some(130));
    assert!(!env.path("b2").exists());
    assert!(
        work_dirs(env.dir.path()).is_empty(),
        "{:?}",
        work_dirs(env.dir.path())
    );
}

#[test]
fn replace_refuses_an_old_tree_holding_a_mount_point() {
    let env = Env::new();
    env.model("m");
    env.ok(&["pack", "m", "-o", "b", "--key", "k.key"]);
    env.ok(&["unpack", "b", "--trust", "k.pub", "--dest", "out"]);
    env.write("precious/data.bin", b"must survive");
    std::fs::create_dir(env.path("out/mnt")).unwrap();
    // In a private mount namespace (as an unprivileged user too, with -r): bind `precious`
    // into the old tree, then try to replace it.
    let script = "mount --bind precious out/mnt && \
                  \"$AIRLOCK\" unpack b --trust k.pub --dest out --replace; echo \"rc=$?\"; \
                  ls out/mnt";
    let out = Command::new("unshare")
        .args(["-rm", "sh", "-c", script])
        .env("AIRLOCK", env!("CARGO_BIN_EXE_airlock"))
        .env_remove("AIRLOCK_TRUST")
        .current_dir(env.dir.path())
        .output()
        .expect("unshare (util-linux) must be installed");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("unshare: ") && !stderr.contains("mount: "),
        "the mount namespace for this test could not be made: {stderr}"
    );
    assert!(stdout.contains("rc=1"), "{stdout}\n{stderr}");
    assert!(stderr.contains("contains the mount point"), "{stderr}");
    assert!(
        stdout.contains("data.bin"),
        "the bind mount was emptied: {stdout}"
    );
    assert_eq!(
        std::fs::read(env.path("precious/data.bin")).unwrap(),
        b"must survive"
    );
    assert!(work_dirs(env.dir.path()).is_empty());
}

/// A signal while stderr is a pipe nobody reads any more (a `| tail` killed with the command)
/// still exits 143 and removes the work: the signal thread's report cannot be written, and
/// before the fix it panicked there, leaving the main thread parked for ever.
#[test]
fn a_signal_with_stderr_closed_still_exits_with_its_code() {
    let env = Env::new();
    big_model(&env, "m", 21);
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut child = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args([
            "--progress",
            "none",
            "pack",
            "m",
            "-o",
            "b",
            "--key",
            "k.key",
            "--compress",
            "none",
        ])
        .current_dir(env.dir.path())
        .env_remove("AIRLOCK_TRUST")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(writer)
        .spawn()
        .unwrap();
    while work_dirs(env.dir.path()).is_empty() {
        if let Some(st) = child.try_wait().unwrap() {
            panic!("pack finished ({st}) before it could be interrupted");
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let st = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let start = Instant::now();
    let code = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st.code();
        }
        if start.elapsed() > std::time::Duration::from_secs(60) {
            let _ = child.kill();
            panic!("airlock did not exit within 60 s of SIGTERM with stderr closed");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    assert_eq!(code, Some(143));
    assert!(work_dirs(env.dir.path()).is_empty());
    assert!(!env.path("b").exists());
}
