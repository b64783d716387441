//! Removable media (issue 32), on real ones: loop devices holding ext4 file systems, mounted
//! as an operator mounts a USB stick. Corruption is written to the device (the image file under
//! the loop device), under the file system and its page cache, as a failing or counterfeit
//! stick would show it. These tests need root (losetup, mkfs.ext4, mount): they fail, never
//! skip, without it.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::support::{Env, pseudo_random, tree};

/// A loop device with an ext4 file system, mounted at `mnt`; unmounted and detached on drop.
struct Medium {
    image: PathBuf,
    device: String,
    mnt: PathBuf,
}

fn sh(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd} (the media tests need util-linux and e2fsprogs): {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?} failed (the media tests need root for losetup and mount): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

impl Medium {
    /// A medium of `mib` MiB, mounted at `env/NAME`.
    fn new(env: &Env, name: &str, mib: u64) -> Medium {
        let image = env.path(&format!("{name}.img"));
        std::fs::File::create(&image)
            .unwrap()
            .set_len(mib << 20)
            .unwrap();
        sh(
            "mkfs.ext4",
            &["-q", "-F", "-b", "4096", image.to_str().unwrap()],
        );
        // losetup --find can race with another test taking the same device: try again.
        let mut device = String::new();
        for _ in 0..20 {
            let out = Command::new("losetup")
                .args(["--find", "--show", image.to_str().unwrap()])
                .output()
                .expect("losetup");
            if out.status.success() {
                device = String::from_utf8_lossy(&out.stdout).trim().to_string();
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert!(!device.is_empty(), "losetup --find failed (root needed)");
        let mnt = env.path(name);
        std::fs::create_dir_all(&mnt).unwrap();
        sh("mount", &[&device, mnt.to_str().unwrap()]);
        Medium { image, device, mnt }
    }

    /// Writes `bytes` onto the device under `file` at `offset` in the file, through the image:
    /// the file system and its page cache do not see it.
    fn corrupt_under(&self, file: &Path, offset: u64, bytes: &[u8]) {
        sh("sync", &[]);
        let out = sh("filefrag", &["-v", "-b4096", file.to_str().unwrap()]);
        // " 0:        0..    1023:      34816..     35839:   1024: ..."
        let (logical, physical) = out
            .lines()
            .filter_map(|l| {
                let l = l.trim();
                let (_, rest) = l.split_once(':')?;
                let mut f = rest.split(':').map(str::trim);
                let logical = f.next()?.split("..").next()?.trim().parse::<u64>().ok()?;
                let physical = f.next()?.split("..").next()?.trim().parse::<u64>().ok()?;
                Some((logical, physical))
            })
            .rfind(|(l, _)| *l * 4096 <= offset)
            .unwrap_or_else(|| panic!("no extent of {} in:\n{out}", file.display()));
        let at = physical * 4096 + (offset - logical * 4096);
        let img = std::fs::OpenOptions::new()
            .write(true)
            .open(&self.image)
            .unwrap();
        img.write_all_at(bytes, at).unwrap();
        img.sync_all().unwrap();
    }

    fn unmount(&mut self) {
        if !self.device.is_empty() {
            let _ = Command::new("umount").arg(&self.mnt).status();
            let _ = Command::new("losetup").args(["-d", &self.device]).status();
            self.device.clear();
        }
    }
}

impl Drop for Medium {
    fn drop(&mut self) {
        self.unmount();
    }
}

/// A model of about `mib` MiB in two incompressible weight files, packed to `bundle` in
/// volumes of `volume` bytes without compression.
fn packed(env: &Env, bundle: &str, mib: usize, volume: &str, extra: &[&str]) {
    env.write("model/config.json", b"{\"model_type\": \"test\"}\n");
    env.write("model/a.bin", &pseudo_random(mib << 19, 1));
    env.write("model/b.bin", &pseudo_random((mib << 19) + 777, 2));
    let mut args = vec![
        "pack",
        "model",
        "-o",
        bundle,
        "--key",
        "k.key",
        "--version",
        "1",
        "--volume-size",
        volume,
        "--compress",
        "none",
        "--no-model-checks",
    ];
    args.extend_from_slice(extra);
    env.ok(&args);
}

#[test]
fn verify_reads_the_medium_not_the_page_cache() {
    let env = Env::new();
    let stick = Medium::new(&env, "stick", 64);
    let bundle = stick.mnt.join("b");
    packed(&env, bundle.to_str().unwrap(), 24, "8M", &[]);
    let b = bundle.to_str().unwrap();
    // Fresh from pack, in the page cache: the device is good too.
    let (code, v) = env.json(&["verify", b, "--trust", "k.pub"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["read_from"], "medium", "{v}");
    assert_eq!(v["volumes_read_from_medium"], v["volumes_checked"], "{v}");
    // Bytes flipped on the device under data.001: the cache still holds the good ones.
    stick.corrupt_under(&bundle.join("data.001"), 5000, b"CORRUPT");
    let text = env.fails(3, &["verify", b, "--trust", "k.pub"]);
    assert!(text.contains("BAD  data.001: fails its sha256"), "{text}");
    assert!(
        !text.contains("data.000:") && !text.contains("data.002:"),
        "{text}"
    );
    // --deep reads the stream from the medium too.
    let text = env.fails(3, &["verify", b, "--trust", "k.pub", "--deep"]);
    assert!(text.contains("data.001"), "{text}");
    // --cached proves the cache on purpose, and says so.
    let out = env.ok(&["verify", b, "--trust", "k.pub", "--cached"]);
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(all.contains("NOT all read from the medium"), "{all}");
    assert!(all.contains("--cached"), "{all}");
    let (code, v) = env.json(&["verify", b, "--trust", "k.pub", "--cached"]);
    assert_eq!(code, 0);
    assert_eq!(v["read_from"], "page-cache", "{v}");
    assert_eq!(v["not_read_from_medium"][0]["read_from"], "cached", "{v}");
}

#[test]
fn a_bundle_on_a_memory_file_system_says_there_is_no_medium() {
    let env = Env::new();
    let shm = tempfile::tempdir_in("/dev/shm").expect("/dev/shm, a tmpfs");
    let bundle = shm.path().join("b");
    packed(&env, bundle.to_str().unwrap(), 2, "1M", &[]);
    let (code, v) = env.json(&["verify", bundle.to_str().unwrap(), "--trust", "k.pub"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["read_from"], "page-cache", "{v}");
    let why = v["not_read_from_medium"][0]["why"].as_str().unwrap();
    assert!(why.contains("tmpfs") && why.contains("in memory"), "{why}");
    assert!(
        v["warnings"].as_array().unwrap().iter().any(|w| w
            .as_str()
            .unwrap()
            .contains("not read from the medium: tmpfs")),
        "{v}"
    );
}

/// The bundle of [`packed`] copied onto two 48 MiB media.
fn two_media(env: &Env) -> (Medium, Medium, PathBuf, PathBuf) {
    packed(env, "b", 40, "12M", &[]);
    let m1 = Medium::new(env, "m1", 48);
    let m2 = Medium::new(env, "m2", 48);
    let (code, v) = env.json(&[
        "copy",
        "b",
        m1.mnt.to_str().unwrap(),
        m2.mnt.to_str().unwrap(),
        "--trust",
        "k.pub",
    ]);
    assert_eq!(code, 0, "{v}");
    let media = v["media"].as_array().unwrap();
    assert_eq!(media.len(), 2, "{v}");
    let placed: usize = media
        .iter()
        .map(|m| m["volumes"].as_array().unwrap().len())
        .sum();
    assert_eq!(placed, 4, "every volume placed once: {v}");
    for m in media {
        assert_eq!(m["read_from"], "medium", "{v}");
        assert_eq!(m["bytes_read_back"], m["bytes_written"], "{v}");
        assert!(m["kept"].as_array().unwrap().is_empty());
    }
    // Whole volumes in order: medium 1 takes what fits, medium 2 the rest.
    assert_eq!(media[0]["volumes"][0], "data.000");
    let b1 = m1.mnt.join("b");
    let b2 = m2.mnt.join("b");
    (m1, m2, b1, b2)
}

#[test]
fn copy_spreads_a_bundle_over_media_that_every_command_then_takes() {
    let env = Env::new();
    let (_m1, _m2, b1, b2) = two_media(&env);
    let (a, b) = (b1.to_str().unwrap(), b2.to_str().unwrap());
    for d in [&b1, &b2] {
        for f in [
            "manifest.json",
            "manifest.json.minisig",
            "airlock-media.json",
        ] {
            assert!(d.join(f).is_file(), "{} has no {f}", d.display());
        }
        assert_eq!(
            std::fs::read(d.join("manifest.json")).unwrap(),
            std::fs::read(env.path("b/manifest.json")).unwrap()
        );
    }
    // Both media, in either order, with --deep.
    env.ok(&["verify", a, b, "--trust", "k.pub"]);
    env.ok(&["verify", b, a, "--trust", "k.pub", "--deep"]);
    // One medium alone, off a terminal: exit 1 at once, naming the medium the rest is on.
    let text = env.fails(1, &["verify", a, "--trust", "k.pub"]);
    assert!(
        text.contains("it is on medium 2 of 2, which was not given"),
        "{text}"
    );
    let (code, v) = env.json(&["verify", a, "--trust", "k.pub"]);
    assert_eq!(
        (code, v["error"]["kind"].as_str()),
        (1, Some("medium-needed"))
    );
    // unpack from both: the model as packed.
    let (code, v) = env.json(&["unpack", a, b, "--trust", "k.pub", "--dest", "out"]);
    assert_eq!(code, 0, "{v}");
    // unpack read the volumes from the media too (their cached pages dropped at the open).
    assert_eq!(v["read_from"], "medium", "{v}");
    assert_eq!(
        tree(&env.path("out"))
            .into_iter()
            .filter(|(p, ..)| !p.starts_with(".airlock"))
            .collect::<Vec<_>>(),
        tree(&env.path("model"))
    );
    let text = env.fails(1, &["unpack", a, "--trust", "k.pub", "--dest", "out2"]);
    assert!(text.contains("medium 2 of 2"), "{text}");
    assert!(!env.path("out2").exists());
    // repair into one directory: every volume, wherever it was.
    env.ok(&["repair", a, b, "--trust", "k.pub", "-o", "whole"]);
    env.ok(&["verify", "whole", "--trust", "k.pub"]);
    // A volume on both media: checked on each, the good copy used, the bad one named.
    std::fs::copy(env.path("b/data.000"), b2.join("data.000")).unwrap();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(b1.join("data.000"))
        .unwrap();
    f.write_all_at(b"XXXX", 100).unwrap();
    let (code, v) = env.json(&["verify", a, b, "--trust", "k.pub"]);
    assert_eq!(code, 0, "{v}");
    let warned = v["warnings"].as_array().unwrap();
    assert!(
        warned.iter().any(|w| {
            let w = w.as_str().unwrap();
            w.contains("data.000") && w.contains("fails its sha256") && w.contains("is good")
        }),
        "{v}"
    );
    env.ok(&["unpack", b, a, "--trust", "k.pub", "--dest", "out3"]);
}

#[test]
fn two_bundles_mixed_on_the_media_are_refused() {
    let env = Env::new();
    let (_m1, _m2, b1, b2) = two_media(&env);
    // Another version of the bundle on the second medium.
    env.ok(&[
        "pack",
        "model",
        "-o",
        "other",
        "--key",
        "k.key",
        "--version",
        "2",
        "--volume-size",
        "12M",
        "--compress",
        "none",
        "--no-model-checks",
    ]);
    std::fs::copy(env.path("other/manifest.json"), b2.join("manifest.json")).unwrap();
    for cmd in ["verify", "unpack"] {
        let mut args = vec![
            cmd,
            b1.to_str().unwrap(),
            b2.to_str().unwrap(),
            "--trust",
            "k.pub",
        ];
        if cmd == "unpack" {
            args.extend(["--dest", "out"]);
        }
        let (code, v) = env.json(&args);
        assert_eq!(code, 3, "{v}");
        assert_eq!(v["error"]["kind"], "mixed-media", "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("holds another bundle"),
            "{v}"
        );
    }
    assert!(!env.path("out").exists());
    // copy never writes over another bundle.
    let m3 = Medium::new(&env, "m3", 48);
    std::fs::create_dir(m3.mnt.join("b")).unwrap();
    std::fs::copy(
        env.path("other/manifest.json"),
        m3.mnt.join("b/manifest.json"),
    )
    .unwrap();
    let (code, v) = env.json(&["copy", "b", m3.mnt.to_str().unwrap(), "--trust", "k.pub"]);
    assert_eq!(code, 3, "{v}");
    assert_eq!(
        std::fs::read_dir(m3.mnt.join("b")).unwrap().count(),
        1,
        "nothing written beside the other bundle"
    );
    // Nor beside a file it did not make.
    std::fs::remove_file(m3.mnt.join("b/manifest.json")).unwrap();
    std::fs::write(m3.mnt.join("b/notes.txt"), b"mine").unwrap();
    let (code, v) = env.json(&["copy", "b", m3.mnt.to_str().unwrap(), "--trust", "k.pub"]);
    assert_eq!(code, 3, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("notes.txt"),
        "{v}"
    );
}

#[test]
fn copy_refuses_media_too_small_before_writing_anything() {
    let env = Env::new();
    packed(&env, "b", 40, "12M", &[]);
    let m1 = Medium::new(&env, "m1", 24);
    let m2 = Medium::new(&env, "m2", 24);
    let (code, v) = env.json(&[
        "copy",
        "b",
        m1.mnt.to_str().unwrap(),
        m2.mnt.to_str().unwrap(),
        "--trust",
        "k.pub",
    ]);
    assert_eq!(code, 1, "{v}");
    assert_eq!(v["error"]["kind"], "no-space", "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("cannot hold the bundle") && msg.contains("has room for"),
        "{msg}"
    );
    assert!(!m1.mnt.join("b").exists() && !m2.mnt.join("b").exists());
    // One file system given twice would count its space twice.
    let text = env.fails(
        2,
        &[
            "copy",
            "b",
            m1.mnt.to_str().unwrap(),
            m1.mnt.join(".").to_str().unwrap(),
            "--trust",
            "k.pub",
        ],
    );
    assert!(text.contains("same file system"), "{text}");
}

#[test]
fn a_medium_that_gives_back_other_bytes_is_named_and_not_trusted() {
    let env = Env::new();
    packed(&env, "b", 16, "6M", &[]);
    let m1 = Medium::new(&env, "m1", 48);
    let flag = env.path("flag");
    let child = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args([
            "copy",
            "b",
            m1.mnt.to_str().unwrap(),
            "--trust",
            "k.pub",
            "--json",
        ])
        .current_dir(env.dir.path())
        .env("AIRLOCK_TEST_PAUSE_BEFORE_READ_BACK", &flag)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let waiting = env.path("flag.waiting");
    let start = std::time::Instant::now();
    while !waiting.exists() {
        assert!(
            start.elapsed().as_secs() < 60,
            "copy never reached its read-back"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // The medium "wraps around": data.001's first bytes land on data.000.
    m1.corrupt_under(&m1.mnt.join("b/data.000"), 0, &pseudo_random(4096, 9));
    std::fs::write(&flag, b"").unwrap();
    let out = child.wait_with_output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(3), "{v}");
    assert_eq!(v["error"]["kind"], "medium-failing", "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("data.000 reads back other bytes"), "{msg}");
    assert!(msg.contains("may be counterfeit or failing"), "{msg}");
    assert!(
        !msg.contains("data.001"),
        "only the bad volume is named: {msg}"
    );
}

#[test]
fn an_interrupted_copy_keeps_whole_volumes_and_its_rerun_writes_only_the_rest() {
    let env = Env::new();
    packed(&env, "b", 24, "2M", &[]);
    let m1 = Medium::new(&env, "m1", 64);
    let dir = m1.mnt.join("b");
    // Stopped (SIGKILL: no cleanup at all) once two volumes are in place.
    let mut child = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(["copy", "b", m1.mnt.to_str().unwrap(), "--trust", "k.pub"])
        .current_dir(env.dir.path())
        .env("AIRLOCK_TEST_PAUSE_BEFORE_READ_BACK", env.path("never"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while !dir.join("data.001").exists() {
        assert!(start.elapsed().as_secs() < 60, "no volume was written");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // No half volume under a volume's name.
    let total = std::fs::read_dir(env.path("b"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("data.")
        })
        .count();
    let mut kept = 0;
    for i in 0..total {
        let name = format!("data.{i:03}");
        if let Ok(meta) = std::fs::metadata(dir.join(&name)) {
            assert_eq!(
                std::fs::read(dir.join(&name)).unwrap(),
                std::fs::read(env.path(&format!("b/{name}"))).unwrap(),
                "{name} is whole"
            );
            assert!(meta.len() > 0);
            kept += 1;
        }
    }
    assert!(kept >= 2, "{kept} of {total} volumes before the kill");
    let (code, v) = env.json(&["copy", "b", m1.mnt.to_str().unwrap(), "--trust", "k.pub"]);
    assert_eq!(code, 0, "{v}");
    let m = &v["media"][0];
    assert_eq!(m["kept"].as_array().unwrap().len(), kept, "{v}");
    assert_eq!(m["written"].as_array().unwrap().len(), total - kept, "{v}");
    assert!(
        !v["removed_stale"].as_array().unwrap().is_empty(),
        "the killed copy's work directory is removed: {v}"
    );
    env.ok(&[
        "verify",
        dir.to_str().unwrap(),
        "--trust",
        "k.pub",
        "--deep",
    ]);
    assert!(
        std::fs::read_dir(&dir).unwrap().all(|e| !e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with(".airlock")),
        "no work directory left"
    );
}

#[test]
fn with_parity_copy_says_which_lost_medium_the_set_survives() {
    let env = Env::new();
    // Parity for three whole volumes, four and a bit data volumes, three media: the data on two
    // (a medium that holds a parity volume loses every recovery unit of its stripes, so it
    // must hold no data), the parity on the third; the loss of any one is rebuildable.
    packed(&env, "b", 24, "6M", &["--parity", "3vol"]);
    let media: Vec<Medium> = (1..=3)
        .map(|i| Medium::new(&env, &format!("m{i}"), 40))
        .collect();
    let mut args = vec!["copy", "b"];
    let mnts: Vec<String> = media
        .iter()
        .map(|m| m.mnt.to_str().unwrap().to_string())
        .collect();
    args.extend(mnts.iter().map(String::as_str));
    args.extend(["--trust", "k.pub"]);
    let (code, v) = env.json(&args);
    assert_eq!(code, 0, "{v}");
    let survives: Vec<u64> = v["survives_losing"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_u64().unwrap())
        .collect();
    assert_eq!(survives, vec![1, 2, 3], "{v}");
    // And it does: each medium left out in turn, unpack rebuilds what was on it.
    let dirs: Vec<PathBuf> = media.iter().map(|m| m.mnt.join("b")).collect();
    for lost in 0..3 {
        let mut args: Vec<&str> = vec!["unpack"];
        for (i, d) in dirs.iter().enumerate() {
            if i != lost {
                args.push(d.to_str().unwrap());
            }
        }
        let dest = format!("out{lost}");
        args.extend(["--trust", "k.pub", "--dest", &dest]);
        let out = env.run(&args);
        let text = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(0),
            "medium {} lost: {text}",
            lost + 1
        );
        assert_eq!(
            tree(&env.path(&dest))
                .into_iter()
                .filter(|(p, ..)| !p.starts_with(".airlock"))
                .collect::<Vec<_>>(),
            tree(&env.path("model")),
            "medium {} lost",
            lost + 1
        );
    }
}

#[test]
fn on_a_terminal_verify_asks_for_the_next_medium_in_the_one_drive() {
    let env = Env::new();
    let (mut m1, mut m2, _b1, _b2) = two_media(&env);
    // One drive: medium 1 at /drive, then medium 2 at the same place.
    let drive = env.path("drive");
    std::fs::create_dir(&drive).unwrap();
    let (dev1, dev2) = (m1.device.clone(), m2.device.clone());
    sh("umount", &[m1.mnt.to_str().unwrap()]);
    sh("umount", &[m2.mnt.to_str().unwrap()]);
    sh("mount", &[&dev1, drive.to_str().unwrap()]);
    let cmd = format!(
        "{} verify {} --trust {} --progress none",
        env!("CARGO_BIN_EXE_airlock"),
        drive.join("b").display(),
        env.path("k.pub").display()
    );
    let mut child = Command::new("script")
        .args(["-qfec", &cmd, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script from util-linux");
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut seen = String::new();
    let mut byte = [0u8; 1];
    while !seen.contains("press Enter") {
        let n = stdout.read(&mut byte).unwrap();
        assert!(n > 0, "no question was asked: {seen}");
        seen.push(byte[0] as char);
    }
    assert!(seen.contains("medium 2 of 2"), "{seen}");
    // The operator swaps the sticks and presses Enter.
    sh("umount", &[drive.to_str().unwrap()]);
    sh("mount", &[&dev2, drive.to_str().unwrap()]);
    child.stdin.as_mut().unwrap().write_all(b"\n").unwrap();
    let mut rest = String::new();
    for line in stdout.lines() {
        rest.push_str(&line.unwrap());
        rest.push('\n');
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "{seen}{rest}");
    assert!(rest.contains("OK   model version 1"), "{seen}{rest}");
    sh("umount", &[drive.to_str().unwrap()]);
    // The devices are detached by the Medium drops; they are unmounted already.
    let _ = Command::new("mount")
        .args([&dev1, m1.mnt.to_str().unwrap()])
        .status();
    let _ = Command::new("mount")
        .args([&dev2, m2.mnt.to_str().unwrap()])
        .status();
    m1.unmount();
    m2.unmount();
}

/// What a typo, a planted link and a FIFO do to `copy`: each is refused by name, at once,
/// without writing through the link or waiting on the FIFO.
#[test]
fn copy_refuses_a_missing_medium_a_link_and_a_fifo_by_name() {
    let env = Env::new();
    packed(&env, "b", 4, "2M", &[]);
    let m1 = Medium::new(&env, "m1", 32);
    let run = |args: &[&str]| {
        let mut full = vec!["30", env!("CARGO_BIN_EXE_airlock")];
        full.extend_from_slice(args);
        full.push("--json");
        let out = Command::new("timeout")
            .args(&full)
            .current_dir(env.dir.path())
            .output()
            .unwrap();
        assert_ne!(out.status.code(), Some(124), "airlock {args:?} hung");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (out.status.code().unwrap(), v)
    };
    let mnt = m1.mnt.to_str().unwrap();
    // A typo in the medium's path: exit 1, named.
    let typo = format!("{mnt}x");
    let (code, v) = run(&["copy", "b", &typo, "--trust", "k.pub"]);
    assert_eq!(code, 1, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains(&typo),
        "{v}"
    );
    // MEDIUM/b a link to another directory (another user's): refused, nothing written there.
    let elsewhere = env.path("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, m1.mnt.join("b")).unwrap();
    let (code, v) = run(&["copy", "b", mnt, "--trust", "k.pub"]);
    assert_eq!(code, 3, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not a directory"),
        "{v}"
    );
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    std::fs::remove_file(m1.mnt.join("b")).unwrap();
    // A FIFO planted as a volume beside this bundle's manifest: named, not opened.
    std::fs::create_dir(m1.mnt.join("b")).unwrap();
    std::fs::copy(env.path("b/manifest.json"), m1.mnt.join("b/manifest.json")).unwrap();
    assert!(
        Command::new("mkfifo")
            .arg(m1.mnt.join("b/data.000"))
            .status()
            .unwrap()
            .success()
    );
    let (code, v) = run(&["copy", "b", mnt, "--trust", "k.pub"]);
    assert_eq!(code, 3, "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("data.000") && msg.contains("non-regular"),
        "{msg}"
    );
    // A FIFO in the source bundle: refused by name, no half volume on the medium.
    std::fs::remove_file(m1.mnt.join("b/data.000")).unwrap();
    std::fs::remove_file(env.path("b/data.001")).unwrap();
    assert!(
        Command::new("mkfifo")
            .arg(env.path("b/data.001"))
            .status()
            .unwrap()
            .success()
    );
    let (code, v) = run(&["copy", "b", mnt, "--trust", "k.pub"]);
    assert_eq!(code, 1, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("data.001"),
        "{v}"
    );
    assert!(!m1.mnt.join("b/data.001").exists());
}
