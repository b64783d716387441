//! What a person sees: every `--help`, the main error messages and the `--json` failure shape
//! as snapshots (tests/it/snapshots/), and the progress display on a terminal, in a pipe and
//! as plain lines.
//!
//! Snapshots are stable across machines: commands run inside the test's temp tree with
//! relative paths, `SOURCE_DATE_EPOCH` fixed, the checked-in test key (fixed key id), help
//! wrapped at 100 columns, and stdin detached so the caller's terminal width cannot leak in.
//! After an intended change, review with `cargo insta review` or rerun with
//! `INSTA_UPDATE=always` and read the diff.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::support::*;

/// An `Env` whose key pair is testdata/keys/test.*, so key ids are the same everywhere.
fn fixed_env() -> Env {
    let env = Env::new();
    let keys = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/keys");
    std::fs::copy(keys.join("test.key"), env.path("k.key")).unwrap();
    std::fs::copy(keys.join("test.pub"), env.path("k.pub")).unwrap();
    std::fs::copy(keys.join("other.pub"), env.path("other.pub")).unwrap();
    env
}

fn airlock(env: &Env, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_airlock"));
    cmd.args(args)
        .current_dir(env.dir.path())
        .env_remove("AIRLOCK_TRUST")
        .env("SOURCE_DATE_EPOCH", "1700000000")
        .env("COLUMNS", "100")
        .stdin(Stdio::null());
    cmd
}

/// The command line, what it printed (stdout, then stderr) and its exit code, as a person
/// reads a terminal session.
fn session(env: &Env, runs: &[&[&str]]) -> String {
    let mut text = String::new();
    for args in runs {
        let out = airlock(env, args).output().expect("run airlock");
        text.push_str(&format!("$ airlock {}\n", args.join(" ")));
        text.push_str(&String::from_utf8_lossy(&out.stdout));
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        text.push_str(&format!("[exit {}]\n", out.status.code().unwrap_or(-1)));
    }
    text
}

#[test]
fn help_of_every_command() {
    let env = Env::new();
    for cmd in [
        "",
        "keygen",
        "pack",
        "verify",
        "unpack",
        "inspect",
        "check",
        "push",
        "completions",
        "man",
    ] {
        let args: Vec<&str> = [cmd, "--help"]
            .into_iter()
            .filter(|a| !a.is_empty())
            .collect();
        let out = airlock(&env, &args).output().unwrap();
        assert!(out.status.success(), "{args:?}");
        assert!(out.stderr.is_empty(), "{args:?}");
        let name = if cmd.is_empty() {
            "help".to_string()
        } else {
            format!("help_{cmd}")
        };
        insta::assert_snapshot!(name, String::from_utf8(out.stdout).unwrap());
    }
}

fn packed_in_volumes(env: &Env) {
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

fn flip_byte(path: &Path, at: usize) {
    let mut v = std::fs::read(path).unwrap();
    v[at] ^= 0x20;
    std::fs::write(path, v).unwrap();
}

#[test]
fn errors_about_damaged_volumes() {
    let env = fixed_env();
    packed_in_volumes(&env);
    flip_byte(&env.path("b/data.002"), 5000);
    let mut runs: Vec<&[&str]> = vec![
        &["verify", "b", "--trust", "k.pub"],
        &["unpack", "b", "--trust", "k.pub", "--dest", "out"],
    ];
    insta::assert_snapshot!("errors_damaged_volume", session(&env, &runs));
    std::fs::remove_file(env.path("b/data.004")).unwrap();
    std::fs::copy(env.path("b/data.000"), env.path("b/data.007")).unwrap();
    runs.push(&["verify", "b", "--trust", "k.pub", "--deep"]);
    insta::assert_snapshot!("errors_several_volumes", session(&env, &runs));
}

#[test]
fn errors_about_trust_and_bundles() {
    let env = fixed_env();
    packed_in_volumes(&env);
    std::fs::create_dir(env.path("empty")).unwrap();
    let text = session(
        &env,
        &[
            &["verify", "b"],
            &["verify", "b", "--trust", "other.pub"],
            &["verify", "b", "--trust", "missing.pub"],
            &["verify", "b", "--trust", "empty"],
            &["verify", "b", "--trust", "k.key"],
            &["verify", "nowhere", "--trust", "k.pub"],
            &["verify", "m", "--trust", "k.pub"],
        ],
    );
    std::fs::remove_file(env.path("b/manifest.json.minisig")).unwrap();
    let text = text
        + &session(
            &env,
            &[&["unpack", "b", "--trust", "k.pub", "--dest", "out"]],
        );
    insta::assert_snapshot!("errors_trust", text);
}

#[test]
fn errors_when_packing() {
    let env = fixed_env();
    env.model("m");
    env.write(
        "lfs/model.safetensors",
        b"version https://git-lfs.github.com/spec/v1\n\
          oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n\
          size 4900000000\n",
    );
    env.write("dangling/config.json", b"{}");
    std::os::unix::fs::symlink("nowhere.bin", env.path("dangling/weights.bin")).unwrap();
    let text = session(
        &env,
        &[
            &["pack", "lfs", "-o", "b1", "--key", "k.key"],
            &["pack", "dangling", "-o", "b2", "--key", "k.key"],
            &["pack", "m", "-o", "b3", "--key", "k.pub"],
            &[
                "pack",
                "m",
                "-o",
                "b4",
                "--key",
                "k.key",
                "--volume-size",
                "1K",
            ],
            &["pack", "nowhere", "-o", "b5", "--key", "k.key"],
        ],
    );
    insta::assert_snapshot!("errors_pack", text);
}

#[test]
fn errors_when_installing_and_checking() {
    let env = fixed_env();
    env.model("m");
    env.ok(&["pack", "m", "-o", "v1", "--key", "k.key"]);
    env.ok(&["pack", "m", "-o", "v2", "--key", "k.key", "--version", "2"]);
    env.ok(&["unpack", "v2", "--trust", "k.pub", "--dest", "out"]);
    env.write("out/config.json", b"{\"model_type\": \"changed\"}\n");
    std::fs::remove_file(env.path("out/run.sh")).unwrap();
    // The parents unpack creates take this directory's mode (issue 33 item 5): fixed here, so
    // the snapshot does not follow the umask.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(env.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let text = session(
        &env,
        &[
            &["unpack", "v1", "--trust", "k.pub", "--dest", "out"],
            &[
                "unpack",
                "v1",
                "--trust",
                "k.pub",
                "--dest",
                "out",
                "--replace",
            ],
            &["unpack", "v1", "--trust", "k.pub", "--dest", "no/such/dir"],
            &["check", "out"],
            &["check", "m", "--trust", "k.pub"],
        ],
    );
    insta::assert_snapshot!("errors_install", text);
}

#[test]
fn json_failures_have_one_shape() {
    let env = fixed_env();
    env.model("m");
    let text = session(
        &env,
        &[
            &["--json", "pack", "m", "--levl", "3"],
            &["--json", "pack", "m"],
            &["--json", "frobnicate"],
            &["--json", "completions", "bash"],
            &["man", "--json"],
            &["--json", "verify", "m", "--trust", "k.pub"],
        ],
    );
    insta::assert_snapshot!("json_failures", text);
    // Every failure document has the common fields, whatever failed.
    for args in [
        &["--json", "pack", "--levl"][..],
        &["--json", "unpack"],
        &["--json"],
        &["--json", "check", "m", "--sizes-only=yes"],
        &["--json", "man"],
    ] {
        let out = airlock(&env, args).output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: not one JSON document: {e}"));
        assert_eq!(v["ok"], false, "{args:?}");
        assert_eq!(v["exit_code"], 2, "{args:?}");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(v["warnings"].is_array(), "{args:?}");
        assert_eq!(v["error"]["kind"], "usage", "{args:?}");
        assert!(v["error"]["message"].is_string(), "{args:?}");
        assert!(v["error"]["hint"].is_string() || v["error"]["hint"].is_null());
        assert!(out.stderr.is_empty(), "{args:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Progress

/// A model big enough for the bar to draw several frames: 300 MiB of sparse zeros (no disk
/// used, fast to read), next to a config.
fn big_model(env: &Env) {
    env.write("big/config.json", b"{\"model_type\": \"test\"}\n");
    let f = std::fs::File::create(env.path("big/weights.raw")).unwrap();
    f.set_len(300 << 20).unwrap();
}

/// Runs airlock on a pseudo-terminal (util-linux `script`) 160 columns wide; returns what the
/// terminal received and the exit code.
fn on_terminal(env: &Env, args: &[&str]) -> (String, i32) {
    on_terminal_sized(env, 160, args)
}

/// [`on_terminal`] on a terminal `cols` columns wide.
fn on_terminal_sized(env: &Env, cols: usize, args: &[&str]) -> (String, i32) {
    let probe = Command::new("script").arg("--version").output();
    assert!(
        probe.is_ok_and(|o| o.status.success()),
        "`script` from util-linux is needed to test the progress bar on a terminal: \
         install it (Debian: apt-get install bsdutils, or run scripts/setup.sh) and run the tests again"
    );
    let quoted: Vec<String> = std::iter::once(env!("CARGO_BIN_EXE_airlock"))
        .chain(args.iter().copied())
        .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
        .collect();
    let out = Command::new("script")
        .args([
            "-qfec",
            &format!("stty cols {cols} rows 40; exec {}", quoted.join(" ")),
        ])
        .arg("/dev/null")
        .current_dir(env.dir.path())
        .env_remove("AIRLOCK_TRUST")
        .env("SOURCE_DATE_EPOCH", "1700000000")
        .env("TERM", "xterm-256color")
        .stdin(Stdio::null())
        .output()
        .expect("run script");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        out.status.code().unwrap_or(-1),
    )
}

/// What a terminal `width` columns wide shows after receiving `raw`: enough of VT100 for
/// indicatif's redraws (CR, LF, cursor up and down, erase line, deferred autowrap); other
/// escape sequences are ignored.
pub(crate) fn screen(raw: &str, width: usize) -> Vec<String> {
    screen_and_rows_used(raw, width).0
}

/// [`screen`], and how many rows were ever written to: a two-line progress display whose lines
/// fit uses two; a line longer than the terminal wraps onto a third.
fn screen_and_rows_used(raw: &str, width: usize) -> (Vec<String>, usize) {
    let mut used = 0;
    let mut rows: Vec<Vec<char>> = vec![Vec::new()];
    let (mut r, mut c) = (0usize, 0usize);
    let mut chars = raw.chars().peekable();
    while let Some(ch) = chars.next() {
        while rows.len() <= r {
            rows.push(Vec::new());
        }
        match ch {
            '\r' => c = 0,
            '\n' => {
                r += 1;
                c = 0;
            }
            '\x1b' if chars.peek() == Some(&'[') => {
                chars.next();
                let mut param = String::new();
                let mut last = ' ';
                for x in chars.by_ref() {
                    if x.is_ascii_alphabetic() || x == '@' || x == '~' {
                        last = x;
                        break;
                    }
                    param.push(x);
                }
                let n = param.parse::<usize>().unwrap_or(1);
                match last {
                    'A' => r = r.saturating_sub(n),
                    'B' => r += n,
                    'C' => c += n,
                    'D' => c = c.saturating_sub(n),
                    'K' if param == "2" => rows[r].clear(),
                    'K' => rows[r].truncate(c),
                    'J' => {
                        rows.truncate(r + 1);
                        rows[r].truncate(c);
                    }
                    _ => {}
                }
            }
            ch if ch.is_control() => {}
            ch => {
                if c >= width {
                    r += 1;
                    c = 0;
                    while rows.len() <= r {
                        rows.push(Vec::new());
                    }
                }
                used = used.max(r + 1);
                let row = &mut rows[r];
                while row.len() < c {
                    row.push(' ');
                }
                if c < row.len() {
                    row[c] = ch;
                } else {
                    row.push(ch);
                }
                c += 1;
            }
        }
    }
    let rows = rows
        .into_iter()
        .map(|row| row.into_iter().collect::<String>().trim_end().to_string())
        .filter(|row| !row.is_empty())
        .collect();
    (rows, used)
}

#[test]
fn the_screen_model_follows_indicatif_redraws() {
    let raw = "  pack a\n[=>  ] 1\x1b[1A\r\x1b[2K\x1b[1B\r\x1b[2K\x1b[1AOK done\r\n";
    assert_eq!(screen(raw, 80), ["OK done"]);
    assert_eq!(screen("abcdef", 4), ["abcd", "ef"]);
    assert_eq!(screen_and_rows_used("abcd\x1b[1A\rabcd", 4).1, 1);
    assert_eq!(screen_and_rows_used("abcdef\x1b[1A\r", 4).1, 2);
}

#[test]
fn progress_bar_on_a_terminal() {
    let env = fixed_env();
    big_model(&env);

    // pack: the bar with the byte counter, the rate and the current file; gone once the result
    // prints. (The ETA shows only once the rate has settled, after a few seconds.)
    let (raw, code) = on_terminal(&env, &["pack", "big", "-o", "b", "--key", "k.key"]);
    assert_eq!(code, 0, "{raw}");
    for needle in ["pack", "[=", "300.00 MiB", "MiB/s", "weights.raw"] {
        assert!(
            raw.contains(needle),
            "no {needle:?} on the terminal: {raw:?}"
        );
    }
    let shown = screen(&raw, 160);
    assert_eq!(shown.len(), 1, "the bar was not cleared: {shown:#?}");
    assert!(shown[0].starts_with("OK   packed big"), "{shown:#?}");

    // verify --deep: one pass over the volumes checks their chunk digests and the files.
    let (raw, code) = on_terminal(&env, &["verify", "b", "--trust", "k.pub", "--deep"]);
    assert_eq!(code, 0, "{raw}");
    for needle in ["deep check", "weights.raw"] {
        assert!(
            raw.contains(needle),
            "no {needle:?} on the terminal: {raw:?}"
        );
    }
    let shown = screen(&raw, 160);
    assert_eq!(shown.len(), 1, "{shown:#?}");
    assert!(shown[0].starts_with("OK   big version 1"), "{shown:#?}");

    // unpack: the file being installed.
    let (raw, code) = on_terminal(&env, &["unpack", "b", "--trust", "k.pub", "--dest", "out"]);
    assert_eq!(code, 0, "{raw}");
    assert!(
        raw.contains("unpack") && raw.contains("weights.raw"),
        "{raw:?}"
    );
    assert_eq!(screen(&raw, 160).len(), 1);

    // check: hashing the installed files.
    let (raw, code) = on_terminal(&env, &["check", "out"]);
    assert_eq!(code, 0, "{raw}");
    assert!(
        raw.contains("hash") && raw.contains("weights.raw"),
        "{raw:?}"
    );

    // A failure part-way: the error and hint stand alone, no bar drawn over or around them.
    flip_byte(&env.path("b/data.000"), 200);
    let (raw, code) = on_terminal(&env, &["unpack", "b", "--trust", "k.pub", "--dest", "out2"]);
    assert_eq!(code, 3, "{raw}");
    let shown = screen(&raw, 160);
    assert!(
        shown.len() >= 2
            && shown[0].starts_with("airlock: error: volume data.000 of 1 ")
            && shown
                .last()
                .unwrap()
                .starts_with("airlock: hint: copy data.000 again"),
        "{shown:#?}"
    );
    assert!(!shown.iter().any(|l| l.contains("ETA")), "{shown:#?}");

    // --quiet: nothing but the result's absence.
    let (raw, code) = on_terminal(&env, &["-q", "verify", "b", "--trust", "k.pub"]);
    assert_eq!(code, 3);
    assert!(!raw.contains("ETA"), "{raw:?}");
}

#[test]
fn progress_fits_a_narrow_terminal() {
    let env = fixed_env();
    big_model(&env);
    for cols in [40, 50] {
        let bundle = format!("b{cols}");
        let (raw, code) = on_terminal_sized(
            &env,
            cols,
            &["pack", "big", "-o", &bundle, "--key", "k.key"],
        );
        assert_eq!(code, 0, "{raw}");
        let shown = screen(&raw, cols);
        // The result line may be longer than the terminal; no progress line may.
        let progress = &raw[..raw.find("OK   packed").expect("result line")];
        let (_, rows) = screen_and_rows_used(progress, cols);
        assert!(
            rows <= 2,
            "{cols} columns: a progress line wrapped: {progress:?}"
        );
        assert!(raw.contains('%') && raw.contains("weights.raw"), "{raw:?}");
        assert!(!raw.contains("[]"), "a bar with no room was drawn: {raw:?}");
        assert!(shown[0].starts_with("OK   packed big"), "{shown:#?}");
    }
}

#[test]
fn progress_in_a_pipe() {
    let env = fixed_env();
    big_model(&env);

    // auto: stderr is not a terminal, so nothing is drawn, with or without --json.
    let out = airlock(&env, &["pack", "big", "-o", "b", "--key", "k.key"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    let out = airlock(
        &env,
        &["--json", "verify", "b", "--trust", "k.pub", "--deep"],
    )
    .output()
    .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap();

    // plain: log lines, each a whole line, no carriage returns or escapes.
    let out = airlock(
        &env,
        &[
            "--progress=plain",
            "unpack",
            "b",
            "--trust",
            "k.pub",
            "--dest",
            "out",
        ],
    )
    .output()
    .unwrap();
    assert!(out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(!err.contains('\r') && !err.contains('\x1b'), "{err:?}");
    let lines: Vec<&str> = err.lines().collect();
    assert!(
        lines
            .first()
            .is_some_and(|l| *l == "airlock: unpack: 300.0 MiB to process")
            && lines
                .last()
                .is_some_and(|l| l.starts_with("airlock: unpack: done, 300.0 MiB in ")),
        "{err}"
    );
    assert!(
        lines.iter().all(|l| l.starts_with("airlock: unpack: ")),
        "{err}"
    );

    let out = airlock(
        &env,
        &[
            "--progress",
            "plain",
            "verify",
            "b",
            "--trust",
            "k.pub",
            "--deep",
        ],
    )
    .output()
    .unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("airlock: deep check: ") && err.contains("done"),
        "{err}"
    );

    // bar: drawn even into a pipe, because it was asked for.
    let out = airlock(&env, &["--progress=bar", "verify", "b", "--trust", "k.pub"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("volumes") && err.contains('['), "{err:?}");

    // --quiet wins over any --progress, and prints no result line either.
    let out = airlock(
        &env,
        &["-q", "--progress=plain", "verify", "b", "--trust", "k.pub"],
    )
    .output()
    .unwrap();
    assert!(out.status.success());
    assert!(out.stdout.is_empty() && out.stderr.is_empty());
}

// ---------------------------------------------------------------------------------------------
// The key comes last

/// An encrypted key pair `enc.key` / `enc.pub` (password "pw") with libsodium's cheapest scrypt
/// limits, so a test can decrypt it without spending a GiB and seconds.
fn cheap_encrypted_key(env: &Env) {
    let sk = airlock::keys::SecretKey::generate().unwrap();
    let text = sk
        .to_file_text_with_kdf_limits(Some(b"pw"), 32_768, 16_777_216)
        .unwrap();
    env.write("enc.key", text.as_bytes());
    env.write("enc.pub", sk.public_key().to_file_text().as_bytes());
    env.write("pw", b"pw\n");
    env.write("bad-pw", b"not it\n");
}

#[test]
fn pack_reports_cheap_problems_before_the_password() {
    let env = fixed_env();
    cheap_encrypted_key(&env);
    env.model("m");
    env.write("lfs/model.safetensors", b"version https://git-lfs.github.com/spec/v1\noid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 4900000000\n");
    std::fs::create_dir(env.path("taken")).unwrap();
    // With a wrong password, any check that ran after the key would be hidden behind
    // "wrong password": each of these must be the error reported instead.
    fn pack<'a>(args: &[&'a str]) -> Vec<&'a str> {
        let mut all = args.to_vec();
        all.extend(["--key", "enc.key", "--password-file", "bad-pw"]);
        all
    }
    let cases: [(&[&str], i32, &str); 5] = [
        (&["pack", "nowhere", "-o", "b"], 1, "nowhere: No such file"),
        (&["pack", "m", "-o", "taken"], 2, "taken already exists"),
        (
            &["pack", "m", "-o", "no/such/b"],
            1,
            "no/such: No such file",
        ),
        (&["pack", "lfs", "-o", "b"], 3, "Git LFS pointer"),
        (
            &[
                "pack",
                "--hf-repo",
                "org/absent",
                "--hf-cache",
                "m",
                "-o",
                "b",
            ],
            1,
            "org/absent",
        ),
    ];
    for (args, code, needle) in cases {
        let text = env.fails(code, &pack(args));
        assert!(text.contains(needle), "{args:?}: {text}");
        assert!(!text.contains("password"), "{args:?}: {text}");
    }
    // A missing password file is found before the source is read, too.
    let text = env.fails(
        1,
        &[
            "pack",
            "m",
            "-o",
            "b",
            "--key",
            "enc.key",
            "--password-file",
            "no-pw",
        ],
    );
    assert!(text.contains("no-pw: No such file"), "{text}");
    // With everything else right, the wrong password is the error, and the hint names the file.
    let text = env.fails(1, &pack(&["pack", "m", "-o", "b"]));
    assert!(
        text.contains(
            "enc.key: wrong password for this secret key (from the first line of bad-pw)"
        ) && text.contains("hint: check bad-pw: its first line"),
        "{text}"
    );
    env.assert_nothing_packed("b");
    env.ok(&[
        "pack",
        "m",
        "-o",
        "b",
        "--key",
        "enc.key",
        "--password-file",
        "pw",
    ]);
    env.ok(&["verify", "b", "--trust", "enc.pub"]);
}

/// Runs `script` with `input` on its stdin, typed into the terminal airlock runs on.
fn on_terminal_typing(env: &Env, input: &str, args: &[&str]) -> (String, i32) {
    use std::io::Write;
    let quoted: Vec<String> = std::iter::once(env!("CARGO_BIN_EXE_airlock"))
        .chain(args.iter().copied())
        .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
        .collect();
    let mut child = Command::new("script")
        .args([
            "-qfec",
            &format!("stty cols 80 rows 40; exec {}", quoted.join(" ")),
        ])
        .arg("/dev/null")
        .current_dir(env.dir.path())
        .env_remove("AIRLOCK_TRUST")
        .env("SOURCE_DATE_EPOCH", "1700000000")
        .env("TERM", "xterm-256color")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run script");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        out.status.code().unwrap_or(-1),
    )
}

#[test]
fn a_wrong_password_at_the_terminal_is_asked_again() {
    let env = fixed_env();
    cheap_encrypted_key(&env);
    env.model("m");
    // Three wrong: three prompts, then the error, without a word about --password-file.
    let (raw, code) = on_terminal_typing(
        &env,
        "one\ntwo\nthree\n",
        &["pack", "m", "-o", "b", "--key", "enc.key"],
    );
    assert_eq!(code, 1, "{raw}");
    assert_eq!(raw.matches("Password for enc.key: ").count(), 3, "{raw}");
    assert_eq!(raw.matches("wrong password, try again").count(), 2, "{raw}");
    assert!(raw.contains("decrypting the key"), "{raw}");
    assert!(
        raw.contains("enc.key: wrong password for this secret key (3 attempts)"),
        "{raw}"
    );
    assert!(
        !raw.contains("password-file") && !raw.contains("first line"),
        "{raw}"
    );
    assert!(!env.path("b").exists());
    // A typo, then the right one: packed.
    let (raw, code) = on_terminal_typing(
        &env,
        "typo\npw\n",
        &["pack", "m", "-o", "b", "--key", "enc.key"],
    );
    assert_eq!(code, 0, "{raw}");
    assert_eq!(raw.matches("wrong password, try again").count(), 1, "{raw}");
    assert!(raw.contains("OK   packed m"), "{raw}");
}

/// Issue 33 item 11. Before: a model with NaN in its weights was refused only after the
/// password prompt and the whole read, and the prompt gave no sign that anything was still to
/// be checked. The value scan needs every value, so it stays in the pack's one read; the
/// prompt now says that it follows (once, not on a retry).
#[test]
fn the_password_prompt_says_the_value_scan_follows() {
    let env = fixed_env();
    cheap_encrypted_key(&env);
    env.write("m/config.json", b"{\"model_type\": \"test\"}\n");
    env.write(
        "m/model.safetensors",
        &std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("testdata/fixtures/values/nan-f32.safetensors"),
        )
        .unwrap(),
    );
    let (raw, code) = on_terminal_typing(
        &env,
        "typo\npw\n",
        &["pack", "m", "-o", "b", "--key", "enc.key"],
    );
    assert_eq!(code, 3, "{raw}");
    let note = raw
        .find("airlock: after the password, the pack reads the model once; the value scan of its 1 weight file (")
        .unwrap_or_else(|| panic!("{raw}"));
    assert!(
        raw[note..]
            .contains("NaN, Inf, zero-filled regions) runs in that read and reports at its end"),
        "{raw}"
    );
    let prompt = raw.find("Password for enc.key: ").expect("a prompt");
    let nan = raw.find("tensor-nan").expect("the NaN is reported");
    assert!(note < prompt && prompt < nan, "{raw}");
    assert_eq!(raw.matches("the value scan of its").count(), 1, "{raw}");
    // No weight file, nothing to announce.
    env.model("plain");
    let (raw, code) = on_terminal_typing(
        &env,
        "pw\n",
        &["pack", "plain", "-o", "b2", "--key", "enc.key"],
    );
    assert_eq!(code, 0, "{raw}");
    assert!(!raw.contains("value scan"), "{raw}");
}

// ---------------------------------------------------------------------------------------------
// keygen

#[test]
fn keygen_force_keeps_the_old_pair_when_the_pub_cannot_be_written() {
    let env = Env::new();
    let old_key = std::fs::read(env.path("k.key")).unwrap();
    std::fs::remove_file(env.path("k.pub")).unwrap();
    std::fs::create_dir(env.path("k.pub")).unwrap();
    let text = env.fails(2, &["keygen", "--out", "k", "--unencrypted", "--force"]);
    assert!(text.contains("k.pub is not a regular file"), "{text}");
    assert_eq!(std::fs::read(env.path("k.key")).unwrap(), old_key);
    // Nothing left under a temporary name.
    let names: Vec<String> = std::fs::read_dir(env.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.contains("tmp")), "{names:?}");
    // Replaced as a pair once the way is clear.
    std::fs::remove_dir_all(env.path("k.pub")).unwrap();
    env.ok(&["keygen", "--out", "k", "--unencrypted", "--force"]);
    assert_ne!(std::fs::read(env.path("k.key")).unwrap(), old_key);
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &str| std::fs::metadata(env.path(p)).unwrap().permissions().mode() & 0o777;
    assert_eq!((mode("k.key"), mode("k.pub")), (0o600, 0o644));
}

#[test]
fn keygen_into_a_missing_directory_blames_the_directory() {
    let env = Env::new();
    let text = env.fails(1, &["keygen", "--out", "missing/k", "--unencrypted"]);
    assert!(
        text.contains("airlock: error: missing: No such file or directory")
            && text.contains("check the path: missing does not exist"),
        "{text}"
    );
    assert!(!text.contains("k.key"), "{text}");
}

// ---------------------------------------------------------------------------------------------
// man, sign, pipes, small things

#[test]
fn man_prints_a_page_for_every_command() {
    let env = Env::new();
    for cmd in [
        "",
        "keygen",
        "pack",
        "verify",
        "unpack",
        "inspect",
        "check",
        "sign",
        "completions",
    ] {
        let args: Vec<&str> = ["man", cmd].into_iter().filter(|a| !a.is_empty()).collect();
        let out = env.ok(&args);
        let page = String::from_utf8(out.stdout).unwrap();
        let title = if cmd.is_empty() {
            "airlock".to_string()
        } else {
            format!("airlock-{cmd}")
        };
        assert!(page.contains(&format!(".TH {title} 1")), "{cmd}: {page}");
        for section in [
            ".SH OPTIONS",
            ".SH \"EXIT STATUS\"",
            ".SH EXAMPLES",
            ".SH \"SEE ALSO\"",
        ] {
            assert!(page.contains(section), "{cmd}: no {section}");
        }
    }
    let unpack = String::from_utf8(env.ok(&["man", "unpack"]).stdout).unwrap();
    assert!(unpack.contains("AIRLOCK_TRUST") && unpack.contains("\\-\\-replace"));
    // man(1) itself renders it (scripts/setup.sh installs man-db).
    {
        std::fs::write(env.path("airlock-pack.1"), env.ok(&["man", "pack"]).stdout).unwrap();
        let out = Command::new("man")
            .args(["-l", "airlock-pack.1"])
            .current_dir(env.dir.path())
            .env("MANPAGER", "cat")
            .env("COLUMNS", "100")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("EXIT STATUS") && text.contains("--volume-size"),
            "{text}"
        );
    }
    let text = env.fails(2, &["man", "frobnicate"]);
    assert!(
        text.starts_with("airlock: error: invalid value 'frobnicate'"),
        "{text}"
    );
}

#[test]
fn install_man_installs_every_page() {
    let env = Env::new();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/install-man.sh");
    let out = Command::new("bash")
        .arg(&script)
        .args(["--airlock", env!("CARGO_BIN_EXE_airlock"), "man"])
        .current_dir(env.dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let mut pages: Vec<String> = std::fs::read_dir(env.path("man/man1"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    pages.sort();
    // Every command `airlock man` accepts has its page installed.
    let help = String::from_utf8(env.ok(&["man", "--help"]).stdout).unwrap();
    let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
    let listed = help
        .split("possible values: ")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .expect("man --help lists the commands");
    let mut expected: Vec<String> = listed
        .split(", ")
        .map(|c| format!("airlock-{c}.1"))
        .chain(["airlock.1".to_string()])
        .collect();
    expected.sort();
    assert_eq!(pages, expected);
}

#[test]
fn a_closed_pipe_is_not_an_error() {
    let env = Env::new();
    for args in [&["man"][..], &["completions", "bash"], &["man", "pack"]] {
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "'{}' {} | head -c 1 >/dev/null",
                env!("CARGO_BIN_EXE_airlock"),
                args.join(" ")
            ))
            .current_dir(env.dir.path())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.is_empty(), "{args:?}: {err}");
    }
    // Exit status too: write into a pipe whose reader is already gone.
    let mut child = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .arg("man")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn sign_writes_a_signature_stock_minisign_verifies() {
    let env = Env::new();
    env.write("airlock-x86_64", b"not really a binary\n");
    env.ok(&["sign", "airlock-x86_64", "--key", "k.key"]);
    let sig = std::fs::read_to_string(env.path("airlock-x86_64.minisig")).unwrap();
    assert!(sig.contains("file:airlock-x86_64\thashed"), "{sig}");
    let minisign = Command::new("minisign")
        .args(["-Vm", "airlock-x86_64", "-p", "k.pub"])
        .current_dir(env.dir.path())
        .output()
        .expect("minisign is needed (Debian: apt-get install minisign, or run scripts/setup.sh)");
    assert!(minisign.status.success(), "{minisign:?}");
    // Never over an existing signature without --force; a changed file fails minisign.
    let text = env.fails(2, &["sign", "airlock-x86_64", "--key", "k.key"]);
    assert!(text.contains("--force"), "{text}");
    env.write("airlock-x86_64", b"tampered\n");
    let minisign = Command::new("minisign")
        .args(["-Vm", "airlock-x86_64", "-p", "k.pub"])
        .current_dir(env.dir.path())
        .output()
        .unwrap();
    assert!(!minisign.status.success());
    env.fails(1, &["sign", "nowhere", "--key", "k.key"]);
}

#[test]
fn release_script_signs_with_airlock_and_minisign_verifies() {
    // The signature path of scripts/release.sh with an already built binary (building the
    // static release binary is too slow for a test; see RUNBOOK.md for the figures).
    let env = Env::new();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/release.sh");
    let out = Command::new("bash")
        .arg(&script)
        .args([
            "--key",
            "k.key",
            "-o",
            "rel",
            "--binary",
            env!("CARGO_BIN_EXE_airlock"),
        ])
        .current_dir(env.dir.path())
        .env("AIRLOCK", env!("CARGO_BIN_EXE_airlock"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let dir = env.path("rel");
    let names: Vec<String> = {
        let mut v: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    assert_eq!(names.len(), 3, "{names:?}");
    let binary = names
        .iter()
        .find(|n| !n.ends_with(".sha256") && !n.ends_with(".minisig"))
        .expect("the binary");
    let sums = Command::new("sha256sum")
        .args(["-c", &format!("{binary}.sha256")])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(sums.status.success(), "{sums:?}");
    let minisign = Command::new("minisign")
        .args(["-Vm", binary, "-p"])
        .arg(env.path("k.pub"))
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(minisign.status.success(), "{minisign:?}");
}

#[test]
fn small_argument_errors_say_what_is_wanted() {
    let env = fixed_env();
    env.model("m");
    let text = env.fails(
        2,
        &["pack", "m", "-o", "b", "--key", "k.key", "--version", "v2"],
    );
    assert!(
        text.starts_with("airlock: error: invalid value 'v2' for '--version <N>'")
            && text.contains("a bundle version is a whole number"),
        "{text}"
    );
    let text = env.fails(
        2,
        &[
            "pack",
            "m",
            "-o",
            "b",
            "--key",
            "k.key",
            "--volume-size",
            "4.5X",
        ],
    );
    assert!(text.contains("fat32"), "{text}");
    // 4.5G is 4.5 GiB.
    env.ok(&[
        "pack",
        "m",
        "-o",
        "b",
        "--key",
        "k.key",
        "--volume-size",
        "4.5G",
    ]);
    let text = env.fails(2, &["keygen", "--out", "x", "--forse"]);
    assert!(
        text.starts_with("airlock: error: unexpected argument '--forse' found\nairlock: hint: a similar argument exists: '--force'"),
        "{text}"
    );
    // --progress is only offered where there is progress, and accepted after the command.
    env.fails(2, &["keygen", "--out", "x", "--progress", "none"]);
    env.ok(&["verify", "b", "--trust", "k.pub", "--progress", "none"]);
    env.ok(&["--progress", "plain", "verify", "b", "--trust", "k.pub"]);
}

#[test]
fn check_on_an_installed_tree_says_unpack_again_not_pack_again() {
    let env = fixed_env();
    env.write("lfs/config.json", b"{\"model_type\": \"test\"}\n");
    env.write(
        "lfs/model.safetensors",
        b"version https://git-lfs.github.com/spec/v1\n\
          oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n\
          size 4900000000\n",
    );
    env.ok(&[
        "pack",
        "lfs",
        "-o",
        "b",
        "--key",
        "k.key",
        "--no-model-checks",
    ]);
    env.ok(&["unpack", "b", "--trust", "k.pub", "--dest", "out"]);
    // Installed by airlock: the fix is to unpack again (and, since the bundle carries the
    // problem, to repair it where it was packed).
    let text = env.fails(3, &["check", "out"]);
    assert!(
        text.contains(
            "airlock: hint: airlock installed this directory from a bundle: unpack the bundle again"
        ),
        "{text}"
    );
    assert!(
        text.contains("fix: airlock installed this directory"),
        "{text}"
    );
    // A directory airlock did not install keeps the staging-host fix.
    let text = env.fails(3, &["check", "lfs"]);
    assert!(
        text.contains("then pack again") && !text.contains("airlock installed"),
        "{text}"
    );
}
