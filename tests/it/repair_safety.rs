//! `airlock repair` on a hostile medium and after a crash (issue 26, items 1, 8 and 12c):
//! nothing planted in the bundle directory is followed, nothing is created outside it, a killed
//! repair does not block the next one, and SIGTERM removes the work and exits 143.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::support::{Env, pseudo_random};

/// A small bundle with parity: about 3 MB in 64 KiB volumes of 16 KiB chunks, 25% parity
/// (enough for a damaged chunk of `data.003` and all of `data.007`).
fn small_bundle(env: &Env) -> PathBuf {
    env.write("m/weights.bin", &pseudo_random(3_000_000, 5));
    env.write("m/config.json", b"{\"model_type\": \"test\"}\n");
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
        "65536",
        "--chunk-size",
        "16384",
        "--parity",
        "25%",
    ]);
    env.path("b")
}

/// Every entry of `dir` with its bytes (`None` for a link or directory), by name.
fn listing(dir: &Path) -> BTreeMap<String, Option<Vec<u8>>> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let t = e.file_type().unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                t.is_file().then(|| fs::read(e.path()).unwrap()),
            )
        })
        .collect()
}

/// Flips one byte of `data.003` (one damaged chunk, within the parity budget).
fn damage(bundle: &Path) {
    let p = bundle.join("data.003");
    let mut bytes = fs::read(&p).unwrap();
    bytes[5] ^= 0x40;
    fs::write(&p, bytes).unwrap();
}

#[test]
fn repair_never_follows_a_link_planted_as_its_probe() {
    // Issue 26 item 1: `.airlock-repair-probe -> VICTIM` and one damaged volume made repair
    // truncate VICTIM (as root, /etc/shadow).
    let env = Env::new();
    let b = small_bundle(&env);
    let pristine = listing(&b);
    env.write("victim", b"the secret that must survive\n");
    let victim = env.path("victim");
    symlink(&victim, b.join(".airlock-repair-probe")).unwrap();
    damage(&b);
    let (code, v) = env.json(&["repair", "b", "--trust", "k.pub"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["repaired_volumes"], serde_json::json!(["data.003"]));
    assert_eq!(
        fs::read(&victim).unwrap(),
        b"the secret that must survive\n",
        "repair wrote through a link planted in the bundle"
    );
    // The link is left as it was (not airlock's), every volume is the packed one.
    let now = listing(&b);
    assert_eq!(
        fs::read_link(b.join(".airlock-repair-probe")).unwrap(),
        victim
    );
    let without_link: BTreeMap<_, _> = now
        .into_iter()
        .filter(|(n, _)| n != ".airlock-repair-probe")
        .collect();
    assert!(
        without_link == pristine,
        "the repaired bundle is not the packed one"
    );
}

#[test]
fn a_dangling_link_in_the_bundle_creates_nothing_at_its_target() {
    let env = Env::new();
    let b = small_bundle(&env);
    fs::create_dir(env.path("elsewhere")).unwrap();
    let target = env.path("elsewhere/created-by-repair");
    symlink(&target, b.join(".airlock-repair-probe")).unwrap();
    damage(&b);
    let (code, v) = env.json(&["repair", "b", "--trust", "k.pub"]);
    assert_eq!(code, 0, "{v}");
    assert!(
        fs::symlink_metadata(&target).is_err(),
        "repair created a file where a dangling link in the bundle pointed"
    );
    assert!(
        fs::read_dir(env.path("elsewhere"))
            .unwrap()
            .next()
            .is_none()
    );
    env.ok(&["verify", "b", "--trust", "k.pub"]);
}

#[test]
fn links_under_a_volumes_temporary_name_or_its_own_name_are_not_followed() {
    // The temporary name CLI.md documented for a repaired volume, planted as a link to a file
    // outside: repair must neither write through it nor stop at it ("in the way").
    let env = Env::new();
    let b = small_bundle(&env);
    let pristine = listing(&b);
    env.write("victim", b"keep me\n");
    let victim = env.path("victim");
    symlink(&victim, b.join(".data.003.airlock-repair")).unwrap();
    damage(&b);
    // A damaged volume that is itself a link to a file outside: replaced, not written through.
    env.write("victim2", b"keep me too\n");
    let victim2 = env.path("victim2");
    fs::remove_file(b.join("data.007")).unwrap();
    symlink(&victim2, b.join("data.007")).unwrap();
    // A directory named like a repair's work directory, holding a lock file and a link out:
    // removing it as a leftover must not follow the link.
    let planted = b.join(".airlock-staging-repair-planted");
    fs::create_dir(&planted).unwrap();
    fs::write(planted.join(".airlock-lock"), b"").unwrap();
    fs::create_dir(env.path("outside")).unwrap();
    env.write("outside/keep", b"x");
    symlink(env.path("outside"), planted.join("link")).unwrap();
    let (code, v) = env.json(&["repair", "b", "--trust", "k.pub"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(
        v["repaired_volumes"],
        serde_json::json!(["data.003", "data.007"])
    );
    assert_eq!(fs::read(&victim).unwrap(), b"keep me\n");
    assert_eq!(fs::read(&victim2).unwrap(), b"keep me too\n");
    assert_eq!(fs::read(env.path("outside/keep")).unwrap(), b"x");
    assert!(
        !fs::symlink_metadata(b.join("data.007"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    let now: BTreeMap<_, _> = listing(&b)
        .into_iter()
        .filter(|(n, _)| n != ".data.003.airlock-repair" && n != ".airlock-staging-repair-planted")
        .collect();
    assert!(now == pristine, "the repaired bundle is not the packed one");
    env.ok(&["verify", "b", "--deep", "--trust", "k.pub"]);
}

#[test]
fn repair_in_place_refuses_a_bundle_path_that_is_a_link() {
    let env = Env::new();
    let b = small_bundle(&env);
    damage(&b);
    let before = listing(&b);
    symlink(&b, env.path("blink")).unwrap();
    let text = env.fails(2, &["repair", "blink", "--trust", "k.pub"]);
    assert!(text.contains("symbolic link"), "{text}");
    assert!(listing(&b) == before);
    env.ok(&["repair", "b", "--trust", "k.pub"]);
}

#[test]
fn repair_output_inside_the_bundle_is_refused_before_anything_is_created() {
    // Issue 26 item 12c: `-o b/fixed` left a stray directory inside the bundle.
    let env = Env::new();
    let b = small_bundle(&env);
    damage(&b);
    let before = listing(&b);
    symlink(&b, env.path("blink")).unwrap();
    fs::create_dir(b.join("sub")).unwrap();
    let with_sub = listing(&b);
    for out in [
        "b/fixed",
        "b",
        "blink/fixed",
        "./b/sub/../fixed",
        "b/sub/deeper",
    ] {
        let text = env.fails(2, &["repair", "b", "--trust", "k.pub", "-o", out]);
        assert!(text.contains("the bundle being repaired"), "{out}: {text}");
        assert!(listing(&b) == with_sub, "-o {out} changed the bundle");
        assert!(
            fs::read_dir(b.join("sub")).unwrap().next().is_none(),
            "-o {out} created something in the bundle"
        );
    }
    fs::remove_dir(b.join("sub")).unwrap();
    assert!(listing(&b) == before);
    // Beside the bundle it works.
    env.ok(&["repair", "b", "--trust", "k.pub", "-o", "fixed"]);
    env.ok(&["verify", "fixed", "--trust", "k.pub"]);
}

/// A bundle of six 8 MiB volumes and an intact copy of it; four volumes of the bundle are
/// removed, so repair copies 32 MiB back (syncing each volume): long enough to be caught.
fn big_damaged(env: &Env) -> (PathBuf, BTreeMap<String, Option<Vec<u8>>>) {
    env.write("m/weights.bin", &pseudo_random(48 << 20, 9));
    env.write("m/config.json", b"{}\n");
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
        "8388608",
    ]);
    let b = env.path("b");
    let pristine = listing(&b);
    fs::create_dir(env.path("copy")).unwrap();
    for name in pristine.keys() {
        fs::copy(b.join(name), env.path("copy").join(name)).unwrap();
    }
    for v in ["data.001", "data.002", "data.003", "data.004"] {
        fs::remove_file(b.join(v)).unwrap();
    }
    (b, pristine)
}

/// Whether repair's temporary files are in the bundle directory: a volume being written.
fn repair_writing(b: &Path) -> bool {
    fs::read_dir(b).unwrap().flatten().any(|e| {
        let name = e.file_name().to_string_lossy().into_owned();
        name.ends_with(".airlock-repair")
            || (name.starts_with(".airlock-staging-repair-")
                && fs::read_dir(e.path()).is_ok_and(|d| d.count() > 1))
    })
}

/// Starts `repair b --from copy`, waits until it is writing a volume, sends `signal` and
/// returns the exit code.
fn interrupt_repair(env: &Env, b: &Path, signal: &str) -> Option<i32> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(["repair", "b", "--trust", "k.pub", "--from", "copy"])
        .current_dir(env.dir.path())
        .env_remove("AIRLOCK_TRUST")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    while !repair_writing(b) {
        if let Some(st) = child.try_wait().unwrap() {
            panic!("repair finished ({st}) before it could be interrupted");
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let st = Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    child.wait().unwrap().code()
}

/// Each volume of the bundle is either the packed one or still missing; nothing else is there.
fn volumes_packed_or_missing(b: &Path, pristine: &BTreeMap<String, Option<Vec<u8>>>) {
    for (name, bytes) in listing(b) {
        assert!(
            pristine.get(&name) == Some(&bytes),
            "{name} is neither a packed volume nor absent"
        );
    }
}

#[test]
fn a_killed_repair_does_not_block_the_next_one() {
    // Issue 26 item 8: after SIGKILL, every rerun failed with "b is in the way: remove it".
    let env = Env::new();
    let (b, pristine) = big_damaged(&env);
    let code = interrupt_repair(&env, &b, "KILL");
    assert_eq!(code, None, "SIGKILL cannot be caught");
    assert!(
        listing(&b).keys().any(|n| n.starts_with('.')),
        "the kill left nothing behind: the test did not exercise anything"
    );
    let (code, v) = env.json(&["repair", "b", "--trust", "k.pub", "--from", "copy"]);
    assert_eq!(code, 0, "{v}");
    let warnings = v["warnings"].to_string();
    assert!(
        warnings.contains("left by an interrupted repair"),
        "{warnings}"
    );
    assert!(
        listing(&b) == pristine,
        "leftovers, or not the packed bundle"
    );
    env.ok(&["verify", "b", "--trust", "k.pub"]);
    // With -o: a killed run leaves OUT.partial, which the next run removes.
    fs::remove_file(b.join("data.002")).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args([
            "repair", "b", "--trust", "k.pub", "--from", "copy", "-o", "out",
        ])
        .current_dir(env.dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let partial = env.path("out.partial");
    while !fs::read_dir(&partial).is_ok_and(|d| d.count() > 1) {
        if let Some(st) = child.try_wait().unwrap() {
            panic!("repair -o finished ({st}) before it could be killed");
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(partial.exists());
    let (code, v) = env.json(&[
        "repair", "b", "--trust", "k.pub", "--from", "copy", "-o", "out",
    ]);
    assert_eq!(code, 0, "{v}");
    assert!(!partial.exists());
    env.ok(&["verify", "out", "--trust", "k.pub"]);
}

#[test]
fn sigterm_removes_the_repairs_work_and_exits_143() {
    let env = Env::new();
    let (b, pristine) = big_damaged(&env);
    let code = interrupt_repair(&env, &b, "TERM");
    assert_eq!(code, Some(143));
    volumes_packed_or_missing(&b, &pristine);
    let (code, v) = env.json(&["repair", "b", "--trust", "k.pub", "--from", "copy"]);
    assert_eq!(code, 0, "{v}");
    assert!(listing(&b) == pristine);
    // SIGINT the same way, with -o: nothing beside the bundle, exit 130.
    fs::remove_file(b.join("data.002")).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args([
            "repair", "b", "--trust", "k.pub", "--from", "copy", "-o", "out",
        ])
        .current_dir(env.dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let partial = env.path("out.partial");
    while !partial.exists() {
        if let Some(st) = child.try_wait().unwrap() {
            panic!("repair -o finished ({st}) before it could be interrupted");
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(130));
    assert!(!partial.exists() && !env.path("out").exists());
}
