//! What a new operator trips over (issue 25): the README's examples run as written, messages
//! and hints that say what to do, `check` summaries, Ctrl-C, credential helpers, the scripts.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::support::*;

fn repo_file(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// Copies a directory tree (regular files and directories only).
fn copy_tree(from: &Path, to: &Path) {
    for e in walkdir::WalkDir::new(from).sort_by_file_name() {
        let e = e.unwrap();
        let rel = e.path().strip_prefix(from).unwrap();
        let dest = to.join(rel);
        if e.file_type().is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
        } else {
            std::fs::copy(e.path(), &dest).unwrap();
        }
    }
}

/// The lines of the README's "Using it" block, comments removed.
fn readme_commands() -> Vec<String> {
    let readme = std::fs::read_to_string(repo_file("README.md")).unwrap();
    let start = readme.find("## Using it").expect("README has a \"Using it\" section");
    let block = &readme[start..];
    let block = &block[block.find("```sh\n").expect("a sh block") + 6..];
    let block = &block[..block.find("```").expect("the block ends")];
    block
        .lines()
        .map(|l| match l.find("  #") {
            Some(i) => l[..i].trim_end(),
            None => l.trim_end(),
        })
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

/// The README line that starts with `prefix` (exactly one).
fn readme_line(lines: &[String], prefix: &str) -> String {
    let found: Vec<&String> = lines.iter().filter(|l| l.starts_with(prefix)).collect();
    assert_eq!(found.len(), 1, "README lines starting with {prefix:?}: {found:?}");
    found[0].clone()
}

/// Runs one README line with bash in `dir`, with airlock on PATH and the absolute paths
/// `/models` and `/etc/airlock` moved under `root`. Returns (exit code, stdout, stderr).
fn run_readme_line(dir: &Path, root: &Path, line: &str, envs: &[(&str, &str)]) -> (i32, String, String) {
    let root = root.display().to_string();
    let line = line
        .replace(" /models/", &format!(" {root}/models/"))
        .replace(" /etc/airlock/", &format!(" {root}/etc/airlock/"));
    let bin = Path::new(env!("CARGO_BIN_EXE_airlock")).parent().unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let mut cmd = Command::new("bash");
    cmd.args(["-ec", &line])
        .current_dir(dir)
        .env("PATH", path)
        .env_remove("AIRLOCK_TRUST")
        .env("SOURCE_DATE_EPOCH", "1700000000")
        .stdin(Stdio::null());
    for (k, v) in envs {
        cmd.env(k, v.replace("/etc/airlock/", &format!("{root}/etc/airlock/")));
    }
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Issue 25 item 1 (and 5, 8): the README's lines from a first pack to a delta update, run as
/// written in a temp tree with the README's directory names. Only the key is made without a
/// password (`--unencrypted`), since nobody is there to type one. Before the fix the delta's
/// pack stopped with `--base is "Llama-3-8B" version 3, not a version of "Llama-3-8B-v4"`
/// (exit 2), the unpack with `.../models: No such file or directory`, and the lint line with
/// exit 3 under AIRLOCK_TRUST.
#[test]
fn the_readme_walkthrough_runs_as_written() {
    let t = tempfile::tempdir().unwrap();
    let (work, root) = (t.path().join("work"), t.path().join("root"));
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&root).unwrap();
    copy_tree(&repo_file("testdata/tiny-model"), &work.join("Llama-3-8B"));
    copy_tree(&repo_file("testdata/tiny-model"), &work.join("Llama-3-8B-v4"));
    std::fs::write(
        work.join("Llama-3-8B-v4/generation_config.json"),
        b"{\"temperature\": 0.6}\n",
    )
    .unwrap();
    copy_tree(&repo_file("testdata/tiny-model"), &work.join("some-model"));
    let lines = readme_commands();
    let steps = [
        "airlock keygen --out release",
        "airlock pack ./Llama-3-8B -o llama-bundle --key release.key --version 3 --volume-size fat32",
        "airlock verify llama-bundle --trust release.pub --deep",
        "install -d -m 0755 /etc/airlock/trust",
        "airlock unpack llama-bundle --trust /etc/airlock/trust --dest /models/llama-3-8b",
        "airlock check /models/llama-3-8b",
        "airlock pack ./Llama-3-8B-v4",
        "airlock unpack llama-v4-delta",
    ];
    let mut outputs = Vec::new();
    for prefix in steps {
        let mut line = readme_line(&lines, prefix);
        if prefix == "airlock keygen --out release" {
            line.push_str(" --unencrypted");
        }
        let (code, stdout, stderr) = run_readme_line(&work, &root, &line, &[]);
        assert_eq!(code, 0, "README line failed: {line}\n{stdout}{stderr}");
        outputs.push(stdout);
    }
    // The delta took the base's name and said why.
    let delta_pack = &outputs[6];
    assert!(
        delta_pack.contains(r#"name "Llama-3-8B" taken from the base"#)
            && delta_pack.contains(r#""Llama-3-8B-v4""#),
        "{delta_pack}"
    );
    // The unpack created /models and said so.
    assert!(
        outputs[4].contains(&format!("created {}/models ", root.display())),
        "{}",
        outputs[4]
    );
    let installed = root.join("models/llama-3-8b");
    assert_eq!(
        std::fs::read(installed.join("generation_config.json")).unwrap(),
        b"{\"temperature\": 0.6}\n"
    );
    // The lint line, with AIRLOCK_TRUST set system-wide as the runbook recommends.
    let lint = readme_line(&lines, "airlock check ./some-model");
    let (code, stdout, stderr) = run_readme_line(
        &work,
        &root,
        &lint,
        &[("AIRLOCK_TRUST", "/etc/airlock/trust")],
    );
    assert_eq!(code, 0, "{lint}\n{stdout}{stderr}");
}

/// Runs airlock in `env`'s tree with extra environment variables.
fn run_with(env: &Env, args: &[&str], vars: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_airlock"));
    cmd.args(args)
        .current_dir(env.dir.path())
        .env_remove("AIRLOCK_TRUST")
        .env("SOURCE_DATE_EPOCH", "1700000000")
        .stdin(Stdio::null());
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Issue 25 item 8: `AIRLOCK_TRUST` set system-wide lints a directory airlock never installed
/// (exit 0, and says so); a directory holding `.airlock`, or `--trust` on the command line,
/// still needs a receipt that verifies (exit 3). Before the fix the first check was exit 3.
#[test]
fn airlock_trust_in_the_environment_lints_a_directory_airlock_never_installed() {
    let env = Env::new();
    env.model("plain");
    let trust = env.path("k.pub").display().to_string();
    let vars = [("AIRLOCK_TRUST", trust.as_str())];
    let (code, stdout, stderr) = run_with(&env, &["check", "plain"], &vars);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("lint only: airlock did not install plain"), "{stdout}");
    let (code, v) = {
        let (code, stdout, _) = run_with(&env, &["--json", "check", "plain"], &vars);
        (code, serde_json::from_str::<serde_json::Value>(&stdout).unwrap())
    };
    assert_eq!((code, &v["lint_only"], &v["receipt"]), (0, &true.into(), &false.into()));
    // --trust on the command line: the verdict is asked for.
    env.fails(3, &["check", "plain", "--trust", "k.pub"]);
    // An incomplete .airlock: an install whose receipt is missing.
    std::fs::create_dir(env.path("plain/.airlock")).unwrap();
    let (code, stdout, stderr) = run_with(&env, &["check", "plain"], &vars);
    assert_eq!(code, 3, "{stdout}{stderr}");
    assert!(stderr.contains("no signed receipt"), "{stderr}");
    // A real install whose receipt signature was removed.
    env.ok(&["pack", "plain", "-o", "b", "--key", "k.key", "--name", "m"]);
    std::fs::remove_dir(env.path("plain/.airlock")).unwrap();
    env.ok(&["unpack", "b", "--trust", "k.pub", "--dest", "inst"]);
    let (code, ..) = run_with(&env, &["check", "inst"], &vars);
    assert_eq!(code, 0);
    std::fs::remove_file(env.path("inst/.airlock/manifest.json.minisig")).unwrap();
    let (code, stdout, stderr) = run_with(&env, &["check", "inst"], &vars);
    assert_eq!(code, 3, "{stdout}{stderr}");
}

/// Issue 25 item 7: one summary counts the receipt's drift and the model checks' findings
/// together. Before the fix an `ERROR ... [modified]` line was followed by
/// `0 error(s), 0 warning(s) from the model checks`.
#[test]
fn check_counts_everything_it_found_in_one_summary() {
    let env = Env::new();
    env.model("m");
    env.ok(&["pack", "m", "-o", "b", "--key", "k.key"]);
    env.ok(&["unpack", "b", "--trust", "k.pub", "--dest", "inst"]);
    let out = env.ok(&["check", "inst", "--trust", "k.pub"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("0 error(s), 0 warning(s) (0 against the receipt, 0 error(s) and 0 warning(s) from the model checks)"),
        "{stdout}"
    );
    let mut bytes = std::fs::read(env.path("inst/weights/part-1.bin")).unwrap();
    bytes[10] ^= 1;
    std::fs::write(env.path("inst/weights/part-1.bin"), bytes).unwrap();
    // A model-check error on top: a truncated safetensors header.
    env.write("inst/extra.safetensors", b"\x10\x00\x00\x00\x00\x00\x00\x00{");
    let text = env.fails(3, &["check", "inst", "--trust", "k.pub"]);
    assert!(text.contains("ERROR weights/part-1.bin: content changed"), "{text}");
    assert!(
        text.contains("3 error(s), 0 warning(s) (2 against the receipt, 1 error(s) and 0 warning(s) from the model checks)"),
        "{text}"
    );
    assert!(!text.contains("\n0 error(s)"), "{text}");
    let (code, v) = env.json(&["check", "inst", "--trust", "k.pub"]);
    assert_eq!(code, 3);
    assert_eq!(v["counts"]["errors"], 3, "{v}");
    assert_eq!(v["counts"]["receipt_problems"], 2, "{v}");
}
