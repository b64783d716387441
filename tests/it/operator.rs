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
    readme_section_commands("## Using it")
}

/// The lines of the first `sh` block of the README section `heading`, comments removed.
fn readme_section_commands(heading: &str) -> Vec<String> {
    let readme = std::fs::read_to_string(repo_file("README.md")).unwrap();
    let start = readme
        .find(&format!("{heading}\n"))
        .unwrap_or_else(|| panic!("README has a {heading:?} section"));
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
    assert_eq!(
        found.len(),
        1,
        "README lines starting with {prefix:?}: {found:?}"
    );
    found[0].clone()
}

/// Runs one README line with bash in `dir`, with airlock on PATH and the absolute paths
/// `/models` and `/etc/airlock` moved under `root`. Returns (exit code, stdout, stderr).
fn run_readme_line(
    dir: &Path,
    root: &Path,
    line: &str,
    envs: &[(&str, &str)],
) -> (i32, String, String) {
    let root = root.display().to_string();
    let line = line
        .replace(" /models/", &format!(" {root}/models/"))
        .replace(" /etc/airlock/", &format!(" {root}/etc/airlock/"));
    let bin = Path::new(env!("CARGO_BIN_EXE_airlock")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new("bash");
    cmd.args(["-ec", &line])
        .current_dir(dir)
        .env("PATH", path)
        .env_remove("AIRLOCK_TRUST")
        .env("SOURCE_DATE_EPOCH", "1700000000")
        .stdin(Stdio::null());
    for (k, v) in envs {
        cmd.env(
            k,
            v.replace("/etc/airlock/", &format!("{root}/etc/airlock/")),
        );
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
    copy_tree(
        &repo_file("testdata/tiny-model"),
        &work.join("Llama-3-8B-v4"),
    );
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

/// Issue 33 item 5. Before: `unpack --dest /models/m` made a missing `/models` 0700, so the
/// service that serves the model (another user) could not reach it. Now the parents take the
/// mode of the nearest existing one without write for group and others (0755 under a 0755
/// directory, 0700 under a private one), or `--parent-mode`, and the output says which and
/// why.
#[test]
fn unpack_makes_missing_parents_as_open_as_the_directory_above() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    env.model("m");
    env.ok(&["pack", "m", "-o", "b", "--key", "k.key"]);
    let mode = |rel: &str| {
        std::fs::metadata(env.path(rel))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    };
    let set = |rel: &str, m: u32| {
        std::fs::create_dir_all(env.path(rel)).unwrap();
        std::fs::set_permissions(env.path(rel), std::fs::Permissions::from_mode(m)).unwrap();
    };
    set("srv", 0o755);
    let out = env.ok(&[
        "unpack",
        "b",
        "--trust",
        "k.pub",
        "--dest",
        "srv/models/llama",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(mode("srv/models"), 0o755);
    assert!(
        stdout.contains("created srv/models for the destination with mode 0755 (taken from srv, the nearest existing parent, without write for group and others; --parent-mode MODE chooses another)"),
        "{stdout}"
    );
    // A shared directory (group-writable, sticky): no write for group and others below it.
    set("shared", 0o1777);
    env.ok(&["unpack", "b", "--trust", "k.pub", "--dest", "shared/a/b/m"]);
    assert_eq!((mode("shared/a"), mode("shared/a/b")), (0o755, 0o755));
    // A private directory stays private below.
    set("home", 0o700);
    env.ok(&["unpack", "b", "--trust", "k.pub", "--dest", "home/models/m"]);
    assert_eq!(mode("home/models"), 0o700);
    // The flag, said so; and in the JSON.
    let (code, j) = env.json(&[
        "unpack",
        "b",
        "--trust",
        "k.pub",
        "--dest",
        "srv/group/m",
        "--parent-mode",
        "0750",
    ]);
    assert_eq!(code, 0, "{j:#}");
    assert_eq!(mode("srv/group"), 0o750);
    assert_eq!(j["created_parents_mode"], "0750", "{j:#}");
    let out = env.ok(&[
        "unpack",
        "b",
        "--trust",
        "k.pub",
        "--dest",
        "srv/g2/m",
        "--parent-mode",
        "750",
    ]);
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains("created srv/g2 for the destination with mode 0750 (as --parent-mode asked)"),
        "{out:?}"
    );
    // A mode airlock could not stage in, or one with special bits: a usage error, nothing made.
    for bad in ["0555", "4755", "rwx", "0o1000"] {
        let text = env.fails(
            2,
            &[
                "unpack",
                "b",
                "--trust",
                "k.pub",
                "--dest",
                "srv/bad/m",
                "--parent-mode",
                bad,
            ],
        );
        assert!(text.contains("--parent-mode"), "{bad}: {text}");
        assert!(!env.path("srv/bad").exists());
    }
}

/// Issue 33 item 10. Before: the README's parity example (`--parity 10%`, one volume) could
/// not rebuild the lost volume it promised (pack warned), and `1vol` leaves no margin. Now the
/// example is `--volume-size 1G --parity 2vol`: run as written on the demo model with the
/// volume size scaled to it (1G would make one volume of a 200 KiB model, which 2vol refuses),
/// it survives a lost volume and damage in another, as its comment says; and the hint names
/// the repair to run with this bundle's path and trust, not `BUNDLE` and `KEY`.
#[test]
fn the_readme_parity_example_survives_what_it_claims_and_the_hint_names_the_bundle() {
    let t = tempfile::tempdir().unwrap();
    let (work, root) = (t.path().join("work"), t.path().join("root"));
    std::fs::create_dir_all(&work).unwrap();
    copy_tree(&repo_file("testdata/tiny-model"), &work.join("Llama-3-8B"));
    let lines = readme_commands();
    let keygen = format!(
        "{} --unencrypted",
        readme_line(&lines, "airlock keygen --out release")
    );
    let (code, out, err) = run_readme_line(&work, &root, &keygen, &[]);
    assert_eq!(code, 0, "{out}{err}");
    let parity: Vec<&String> = lines.iter().filter(|l| l.contains("--parity")).collect();
    assert_eq!(parity.len(), 1, "{parity:?}");
    let pack = parity[0].replace("--volume-size 1G", "--volume-size 40K");
    assert!(pack.contains("--parity 2vol"), "{pack}");
    let (code, out, err) = run_readme_line(&work, &root, &pack, &[]);
    assert_eq!(code, 0, "{pack}\n{out}{err}");
    assert!(!err.contains("warning"), "{err}");
    assert!(out.contains("it rebuilds any 2 whole data volume"), "{out}");
    let bundle = work.join("llama-bundle");
    // A lost volume, and a bad sector in another.
    std::fs::remove_file(bundle.join("data.001")).unwrap();
    let mut bytes = std::fs::read(bundle.join("data.003")).unwrap();
    for b in &mut bytes[1000..1004] {
        *b ^= 0x5a;
    }
    std::fs::write(bundle.join("data.003"), bytes).unwrap();
    let verify = "airlock verify llama-bundle --trust release.pub";
    let (code, out, err) = run_readme_line(&work, &root, verify, &[]);
    assert_eq!(code, 3, "{out}{err}");
    assert!(out.contains("REPAIRABLE from parity"), "{out}");
    assert!(
        err.contains(
            "airlock: hint: run `airlock repair llama-bundle --trust release.pub` (on read-only media, add `-o` and a new directory: `-o /var/tmp/llama-bundle`), then verify again"
        ),
        "{err}"
    );
    // The hint, run as it says.
    let (code, out, err) = run_readme_line(
        &work,
        &root,
        "airlock repair llama-bundle --trust release.pub",
        &[],
    );
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = run_readme_line(&work, &root, verify, &[]);
    assert_eq!(code, 0, "{out}{err}");
    // With the trust from AIRLOCK_TRUST, the hint has no --trust; a path with a space is quoted.
    std::fs::rename(&bundle, work.join("my bundle")).unwrap();
    std::fs::remove_file(work.join("my bundle/data.002")).unwrap();
    let (code, out, err) = run_readme_line(
        &work,
        &root,
        "airlock verify 'my bundle'",
        &[("AIRLOCK_TRUST", "release.pub")],
    );
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        err.contains("run `airlock repair 'my bundle'` (on read-only media, add `-o` and a new directory: `-o /var/tmp/'my bundle'`)"),
        "{err}"
    );
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
    assert!(
        stdout.contains("lint only: airlock did not install plain"),
        "{stdout}"
    );
    let (code, v) = {
        let (code, stdout, _) = run_with(&env, &["--json", "check", "plain"], &vars);
        (
            code,
            serde_json::from_str::<serde_json::Value>(&stdout).unwrap(),
        )
    };
    assert_eq!(
        (code, &v["lint_only"], &v["receipt"]),
        (0, &true.into(), &false.into())
    );
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
    env.write(
        "inst/extra.safetensors",
        b"\x10\x00\x00\x00\x00\x00\x00\x00{",
    );
    let text = env.fails(3, &["check", "inst", "--trust", "k.pub"]);
    assert!(
        text.contains("ERROR weights/part-1.bin: content changed"),
        "{text}"
    );
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

/// Runs airlock against `reg` with `docker_dir` as DOCKER_CONFIG and `bin` first on PATH.
fn airlock_with_helper(
    reg: &crate::oci::Registry,
    env: &Env,
    docker_dir: &Path,
    bin: &Path,
    args: &[&str],
) -> (i32, String) {
    let ca = reg.path("ca.pem");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(args)
        .args(["--ca-file", ca.to_str().unwrap()])
        .current_dir(env.dir.path())
        .env_remove("AIRLOCK_TRUST")
        .env("DOCKER_CONFIG", docker_dir)
        .env("PATH", path)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// Writes an executable `docker-credential-NAME` into `bin`.
fn write_helper(bin: &Path, name: &str, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(bin).unwrap();
    let p = bin.join(format!("docker-credential-{name}"));
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Issue 25 item 2: where `docker login` stored the password through a credential helper
/// (`credsStore`, `credHelpers`, an empty `auths` entry), airlock asks the helper the way
/// docker does, against the real registry with htpasswd auth; a failing or missing helper is
/// named, with what to do. Before the fix the push failed with "authentication refused (it asks
/// for credentials and none were found)" and the hint to `docker login`, which changed nothing.
#[test]
fn credentials_come_from_the_docker_credential_helper() {
    use crate::oci::{PASSWORD, Registry, USER};
    let reg = Registry::start();
    let env = Env::new();
    env.model("m");
    env.ok(&["pack", "m", "-o", "b", "--key", "k.key"]);
    let host = format!("127.0.0.1:{}", reg.port);
    let docker = env.path("docker");
    let bin = env.path("bin");
    std::fs::create_dir_all(&docker).unwrap();
    // The helper answers only for the registry it is asked about, as a store keyed by server.
    write_helper(
        &bin,
        "airlocktest",
        &format!(
            r#"[ "$1" = get ] || exit 2
server=$(cat)
if [ "$server" = "{host}" ]; then
  printf '{{"ServerURL":"%s","Username":"{USER}","Secret":"{PASSWORD}"}}' "$server"
else
  echo "credentials not found in native keychain"; exit 1
fi"#
        ),
    );
    std::fs::write(
        docker.join("config.json"),
        format!(r#"{{"auths":{{"{host}":{{}}}},"credsStore":"airlocktest"}}"#),
    )
    .unwrap();
    let target = reg.reference("models/m:1");
    let (code, text) = airlock_with_helper(
        &reg,
        &env,
        &docker,
        &bin,
        &["push", "b", &target, "--trust", "k.pub"],
    );
    assert_eq!(code, 0, "{text}");
    let (code, text) = airlock_with_helper(
        &reg,
        &env,
        &docker,
        &bin,
        &["unpack", &target, "--trust", "k.pub", "--dest", "out"],
    );
    assert_eq!(code, 0, "{text}");
    assert_eq!(tree_without_receipt(&env.path("out")), tree(&env.path("m")));

    // credHelpers for this registry wins over credsStore; the helper fails: named, with
    // the config key and what to try, exit 1, nothing installed.
    write_helper(
        &bin,
        "broken",
        "echo 'gpg: decryption failed: No secret key' >&2; exit 1",
    );
    std::fs::write(
        docker.join("config.json"),
        format!(r#"{{"auths":{{"{host}":{{}}}},"credsStore":"airlocktest","credHelpers":{{"{host}":"broken"}}}}"#),
    )
    .unwrap();
    let (code, text) = airlock_with_helper(
        &reg,
        &env,
        &docker,
        &bin,
        &["unpack", &target, "--trust", "k.pub", "--dest", "out2"],
    );
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("the credential helper docker-credential-broken (`credHelpers` in")
            && text.contains("gpg: decryption failed")
            && text.contains(&format!("printf {host} | docker-credential-broken get")),
        "{text}"
    );
    assert!(!env.path("out2").exists());
    // A helper that is not installed.
    std::fs::write(
        docker.join("config.json"),
        format!(r#"{{"auths":{{"{host}":{{}}}},"credsStore":"nothere"}}"#),
    )
    .unwrap();
    let (code, text) = airlock_with_helper(
        &reg,
        &env,
        &docker,
        &bin,
        &["push", "b", &target, "--trust", "k.pub"],
    );
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("docker-credential-nothere (`credsStore` in")
            && text.contains("is not on PATH")
            && text.contains("install docker-credential-nothere"),
        "{text}"
    );
    // The helper's credentials are refused by the registry: the hint says where they live.
    write_helper(
        &bin,
        "stale",
        &format!(r#"printf '{{"ServerURL":"{host}","Username":"{USER}","Secret":"old"}}'"#),
    );
    std::fs::write(docker.join("config.json"), r#"{"credsStore":"stale"}"#).unwrap();
    let (code, text) = airlock_with_helper(
        &reg,
        &env,
        &docker,
        &bin,
        &["push", "b", &target, "--trust", "k.pub"],
    );
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("authentication refused")
            && text.contains("the credential helper docker-credential-stale")
            && text.contains("docker stores the password through docker-credential-stale"),
        "{text}"
    );
}

/// Issue 25 item 6: registry hints follow the command and the problem. Before the fix a push
/// over a missing base, a missing tag and an unreachable registry on push all got "check that
/// the registry is up and reachable ...; nothing was installed".
#[test]
fn registry_hints_follow_the_command_and_the_problem() {
    use crate::oci::Registry;
    let reg = Registry::start();
    let env = Env::new();
    env.model("v1");
    env.ok(&[
        "pack",
        "v1",
        "-o",
        "b1",
        "--key",
        "k.key",
        "--name",
        "m",
        "--version",
        "1",
    ]);
    env.ok(&["unpack", "b1", "--trust", "k.pub", "--dest", "base"]);
    env.model("v2");
    env.write("v2/config.json", b"{\"model_type\": \"test2\"}\n");
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
        "base",
    ]);
    let hint = |text: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix("airlock: hint: "))
            .unwrap_or_else(|| panic!("no hint in {text}"))
            .to_string()
    };
    // A delta pushed where its base is not.
    let target = reg.reference("models/m:2");
    let text = reg.fails(&env, 1, &["push", "d2", &target, "--trust", "k.pub"]);
    let h = hint(&text);
    assert!(
        h.starts_with(&format!(
            "push m version 1 to oci://127.0.0.1:{}/models/m first (its full bundle: ",
            reg.port
        )) && !h.contains("installed"),
        "{text}"
    );
    // A tag that is not there.
    let missing = reg.reference("models/m:7");
    let text = reg.fails(
        &env,
        1,
        &["unpack", &missing, "--trust", "k.pub", "--dest", "out"],
    );
    let h = hint(&text);
    assert!(
        h.contains(&format!("airlock push BUNDLE {missing}")) && !h.contains("reachable"),
        "{text}"
    );
    // An unreachable registry: a push publishes nothing, an unpack installs nothing.
    let nobody = format!("oci://127.0.0.1:{}/models/m:1", crate::oci::free_port());
    let text = env.fails(1, &["push", "b1", &nobody, "--trust", "k.pub"]);
    let h = hint(&text);
    assert!(
        h.contains("nothing was published") && !h.contains("installed"),
        "{text}"
    );
    let text = env.fails(1, &["unpack", &nobody, "--trust", "k.pub", "--dest", "out"]);
    assert!(hint(&text).contains("nothing was installed"), "{text}");
}

/// A model large enough that an unpack or pack runs long enough to be interrupted.
fn large_model(env: &Env, rel: &str) {
    env.model(rel);
    for i in 0..8 {
        env.write(
            &format!("{rel}/shard-{i}.bin"),
            &pseudo_random(16 << 20, 40 + i),
        );
    }
}

/// Names in `dir` that are airlock work directories.
fn work_dirs_in(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(".airlock-") || n.ends_with(".partial"))
                .collect()
        })
        .unwrap_or_default()
}

/// Starts airlock with `args` (stdout and stderr captured), waits until a work directory is in
/// `work_in` (for `unpack`, one marked for a rerun to resume and already staging: an interrupt
/// before the mark removes it) and the progress bar has been drawn, sends `signal`; returns the exit code,
/// stdout and stderr.
fn interrupt_while_working(
    env: &Env,
    args: &[&str],
    work_in: &str,
    signal: &str,
) -> (i32, String, String) {
    use std::io::Read;
    use std::sync::{Arc, Mutex};
    let mut child = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(args)
        .current_dir(env.dir.path())
        .env_remove("AIRLOCK_TRUST")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let reader = |mut r: Box<dyn Read + Send>| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let b = Arc::clone(&buf);
        let h = std::thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            while let Ok(n) = r.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                b.lock().unwrap().extend_from_slice(&chunk[..n]);
            }
        });
        (buf, h)
    };
    let (out, out_h) = reader(Box::new(child.stdout.take().unwrap()));
    let (err, err_h) = reader(Box::new(child.stderr.take().unwrap()));
    let json = args.contains(&"--json");
    loop {
        let drawn = json || String::from_utf8_lossy(&err.lock().unwrap()).contains("[=");
        let dirs = work_dirs_in(&env.path(work_in));
        // Marked, and past the mark: something staged beside the marker and the lock (the
        // marker is on disk before `mark_resumable` has registered it).
        let marked = !args.contains(&"unpack")
            || dirs.iter().any(|d| {
                let staged = env.path(work_in).join(d);
                staged.join(".airlock-resume").exists()
                    && std::fs::read_dir(&staged).is_ok_and(|rd| {
                        rd.flatten().any(|e| {
                            let n = e.file_name();
                            n != ".airlock-resume" && n != ".airlock-lock"
                        })
                    })
            });
        if drawn && !dirs.is_empty() && marked {
            break;
        }
        if let Some(st) = child.try_wait().unwrap() {
            panic!(
                "{args:?} finished ({st}) before it could be interrupted: {}",
                String::from_utf8_lossy(&err.lock().unwrap())
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let st = Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let code = child.wait().unwrap().code().unwrap_or(-1);
    out_h.join().unwrap();
    err_h.join().unwrap();
    let text = |b: &Arc<Mutex<Vec<u8>>>| String::from_utf8_lossy(&b.lock().unwrap()).into_owned();
    (code, text(&out), text(&err))
}

/// Issue 25 items 9 and 11: Ctrl-C clears the progress bar and says what was removed and what
/// was kept; under --json it prints one JSON document. Before the fix the process exited 130
/// silently with the last bar frozen on the screen, and printed no JSON.
#[test]
fn ctrl_c_clears_the_bar_and_says_what_was_removed_and_kept() {
    let env = Env::new();
    large_model(&env, "m");
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

    let (code, stdout, stderr) = interrupt_while_working(
        &env,
        &[
            "unpack",
            "b",
            "--trust",
            "k.pub",
            "--dest",
            "out",
            "--progress",
            "bar",
        ],
        ".",
        "INT",
    );
    assert_eq!(code, 130, "{stderr}");
    assert_eq!(stdout, "");
    let shown = crate::ux::screen(&stderr, 1000);
    assert_eq!(shown.len(), 1, "the bar was not cleared: {shown:#?}");
    // The work directory is kept for a rerun to resume (issue 37 item 3), and said so.
    assert!(
        shown[0].starts_with(
            "airlock: error: interrupted by SIGINT (Ctrl-C): kept .airlock-staging-out-"
        ) && shown[0].ends_with(
            " with the files verified so far: rerun the same command to resume; out was not created"
        ),
        "{shown:#?}"
    );
    assert!(!env.path("out").exists());
    let kept = work_dirs_in(env.dir.path());
    assert_eq!(kept.len(), 1, "{kept:?}");
    // --no-resume would start clean; the same command resumes and leaves nothing behind.
    env.ok(&["unpack", "b", "--trust", "k.pub", "--dest", "out"]);
    assert!(work_dirs_in(env.dir.path()).is_empty());
    std::fs::remove_dir_all(env.path("out")).unwrap();

    // pack, SIGTERM: BUNDLE.partial removed, said so.
    let (code, _, stderr) = interrupt_while_working(
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
            "--progress",
            "bar",
        ],
        ".",
        "TERM",
    );
    assert_eq!(code, 143, "{stderr}");
    let shown = crate::ux::screen(&stderr, 1000);
    assert_eq!(
        shown,
        [
            "airlock: error: interrupted by SIGTERM: removed b2.partial; b2 was not created; the model is untouched"
        ],
        "{stderr:?}"
    );

    // --json, into a destination whose parent unpack created: one document; the staging
    // directory is kept for a rerun to resume, so the parent that holds it stays too.
    let (code, stdout, stderr) = interrupt_while_working(
        &env,
        &[
            "--json", "unpack", "b", "--trust", "k.pub", "--dest", "new/out",
        ],
        "new",
        "INT",
    );
    assert_eq!(code, 130, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("not one JSON document ({e}): {stdout:?}"));
    assert_eq!(v["exit_code"], 130);
    assert_eq!(v["ok"], false);
    assert_eq!(v["command"], "unpack");
    assert_eq!(v["error"]["kind"], "interrupted");
    assert_eq!(v["signal"], "SIGINT");
    let removed: Vec<&str> = v["removed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert!(removed.is_empty(), "{v}");
    let kept: Vec<&str> = v["kept_for_resume"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert!(
        kept.len() == 1 && kept[0].starts_with("new/.airlock-staging-out-"),
        "{v}"
    );
    assert_eq!(work_dirs_in(&env.path("new")).len(), 1);
    // --no-resume starts clean: it removes what was kept.
    env.ok(&[
        "unpack",
        "b",
        "--trust",
        "k.pub",
        "--dest",
        "new/out",
        "--no-resume",
    ]);
    assert!(work_dirs_in(&env.path("new")).is_empty());
}

/// Starts airlock with `args` (plain progress), sends `signal` once the first phase has begun;
/// returns the exit code, stdout and stderr.
fn interrupt_once_started(env: &Env, args: &[&str], signal: &str) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(args)
        .args(["--progress", "plain"])
        .current_dir(env.dir.path())
        .env_remove("AIRLOCK_TRUST")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        let n = std::io::BufRead::read_line(&mut err, &mut line).unwrap();
        assert!(
            n > 0,
            "{args:?} ended before it could be interrupted: {seen}"
        );
        seen.push_str(&line);
        if line.contains("to process") {
            break;
        }
    }
    let st = Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let out = child.wait_with_output().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        seen + &rest,
    )
}

/// Issue 33 item 7. Before: Ctrl-C during `verify` or `check` ended the process with no word
/// and, under `--json`, no document, though the README promises one on Ctrl-C for every
/// command. Now they report as the writing commands do: exit 130/143, `interrupted`, and that
/// nothing was changed.
#[test]
fn ctrl_c_during_verify_and_check_says_nothing_was_changed() {
    let env = Env::new();
    large_model(&env, "m");
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
    env.ok(&["unpack", "b", "--trust", "k.pub", "--dest", "out"]);

    let (code, stdout, stderr) = interrupt_once_started(
        &env,
        &["--json", "verify", "b", "--trust", "k.pub", "--deep"],
        "INT",
    );
    assert_eq!(code, 130, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("not one JSON document ({e}): {stdout:?}"));
    assert_eq!(v["command"], "verify");
    assert_eq!(v["exit_code"], 130);
    assert_eq!(v["error"]["kind"], "interrupted");
    assert_eq!(v["signal"], "SIGINT");
    assert_eq!(v["removed"], serde_json::json!([]));
    assert_eq!(v["kept"], "nothing was changed: verify only reads");

    let (code, stdout, stderr) =
        interrupt_once_started(&env, &["check", "out", "--trust", "k.pub"], "TERM");
    assert_eq!(code, 143, "{stderr}");
    assert_eq!(stdout, "");
    assert!(
        stderr.contains(
            "airlock: error: interrupted by SIGTERM: nothing to remove; nothing was changed: check only reads"
        ),
        "{stderr}"
    );
}

/// A directory with executables that stand in for `cargo`, `python3` and `apt-get`.
fn stub_bin(dir: &Path, stubs: &[(&str, &str)]) -> String {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).unwrap();
    for (name, body) in stubs {
        let p = dir.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// Issue 25 item 3: a cargo older than Cargo.toml's rust-version stops demo.sh and test.sh at
/// once with the rustup line; the current one passes. (Before the fix there was no check and
/// no rust-version: a Debian cargo failed minutes into the build.)
#[test]
fn an_old_cargo_is_stopped_first_with_the_rustup_line() {
    let toml = std::fs::read_to_string(repo_file("Cargo.toml")).unwrap();
    assert!(
        toml.contains("\nrust-version = \"1.88\"\n"),
        "Cargo.toml must say rust-version"
    );
    let t = tempfile::tempdir().unwrap();
    let old = stub_bin(&t.path().join("bin"), &[("cargo", "echo 'cargo 1.63.0'")]);
    for script in [
        "scripts/check-rust.sh",
        "scripts/demo.sh",
        "scripts/test.sh",
    ] {
        let out = Command::new("bash")
            .arg(repo_file(script))
            .env("PATH", &old)
            .env_remove("AIRLOCK")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{script}: {stderr}");
        assert!(
            stderr.contains("cargo 1.63.0 is too old")
                && stderr.contains("airlock needs Rust 1.88 or later")
                && stderr.contains("sh.rustup.rs"),
            "{script}: {stderr}"
        );
    }
    let out = Command::new("bash")
        .arg(repo_file("scripts/check-rust.sh"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

/// Issue 25 item 4: the demo installs only what it uses (no test venv, no registry packages)
/// and runs keygen, pack, verify, unpack and check. `python3` and `apt-get` fail here: before
/// the fix demo.sh ran scripts/setup.sh, which builds the Python venv. (The build itself is
/// skipped with AIRLOCK=, too slow for a test.)
#[test]
fn the_demo_needs_only_minisign_and_zstd() {
    let t = tempfile::tempdir().unwrap();
    let path = stub_bin(
        &t.path().join("bin"),
        &[
            ("python3", "echo 'python3 is not for the demo' >&2; exit 97"),
            ("apt-get", "echo 'apt-get is not needed here' >&2; exit 97"),
        ],
    );
    let out = Command::new("bash")
        .arg(repo_file("scripts/demo.sh"))
        .arg(t.path().join("work"))
        .env("PATH", path)
        .env("AIRLOCK", env!("CARGO_BIN_EXE_airlock"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    for step in [
        "$ airlock keygen",
        "$ airlock pack",
        "$ airlock verify bundle",
        "$ airlock unpack bundle",
        "$ airlock check installed",
        "demo OK",
    ] {
        assert!(text.contains(step), "no {step:?} in {text}");
    }
    assert!(
        t.path()
            .join("work/installed/.airlock/manifest.json")
            .is_file()
    );
}

/// Issue 25 item 12: `airlock verify FILE` checks a file's minisign signature against the
/// trust set, so an airlock on the target verifies its own next release without minisign.
#[test]
fn verify_checks_a_signed_file_as_minisign_does() {
    let env = Env::new();
    env.ok(&["keygen", "--out", "other", "--unencrypted"]);
    env.write("airlock-9.9.9-x86_64-linux", &pseudo_random(100_000, 3));
    env.ok(&["sign", "airlock-9.9.9-x86_64-linux", "--key", "k.key"]);
    let out = env.ok(&["verify", "airlock-9.9.9-x86_64-linux", "--trust", "k.pub"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with("OK   airlock-9.9.9-x86_64-linux: signature by ")
            && stdout.contains("file:airlock-9.9.9-x86_64-linux"),
        "{stdout}"
    );
    // Another signer; a changed byte; no signature; a renamed file (warned).
    let text = env.fails(
        3,
        &[
            "verify",
            "airlock-9.9.9-x86_64-linux",
            "--trust",
            "other.pub",
        ],
    );
    assert!(text.contains("not in the trust set"), "{text}");
    std::fs::copy(
        env.path("airlock-9.9.9-x86_64-linux.minisig"),
        env.path("renamed.minisig"),
    )
    .unwrap();
    std::fs::copy(env.path("airlock-9.9.9-x86_64-linux"), env.path("renamed")).unwrap();
    let (code, v) = env.json(&["verify", "renamed", "--trust", "k.pub"]);
    assert_eq!(code, 0);
    assert!(
        v["warnings"][0]
            .as_str()
            .unwrap()
            .contains("names the file"),
        "{v}"
    );
    let mut bytes = std::fs::read(env.path("renamed")).unwrap();
    bytes[500] ^= 1;
    std::fs::write(env.path("renamed"), bytes).unwrap();
    let text = env.fails(3, &["verify", "renamed", "--trust", "k.pub"]);
    assert!(
        text.contains("renamed.minisig: does not verify renamed"),
        "{text}"
    );
    // No signature beside the file: the wrong path or an incomplete copy (exit 1, as for a
    // bundle path that is not a directory), not a failed verification.
    std::fs::remove_file(env.path("renamed.minisig")).unwrap();
    let text = env.fails(1, &["verify", "renamed", "--trust", "k.pub"]);
    assert!(
        text.contains("renamed.minisig: missing: renamed is one file, not a bundle"),
        "{text}"
    );
    env.fails(
        2,
        &[
            "verify",
            "airlock-9.9.9-x86_64-linux",
            "--trust",
            "k.pub",
            "--deep",
        ],
    );
}

/// Issue 25 item 12: release.sh never names a dynamically linked binary like the static
/// release (before the fix it warned and named it airlock-VERSION-x86_64-linux), and the
/// release verifies with sha256sum and with airlock itself.
#[test]
fn release_script_names_a_dynamic_binary_apart_and_airlock_verifies_it() {
    let env = Env::new();
    let out = Command::new("bash")
        .arg(repo_file("scripts/release.sh"))
        .args([
            "--key",
            "k.key",
            "-o",
            "rel",
            "--binary",
            env!("CARGO_BIN_EXE_airlock"),
        ])
        .current_dir(env.dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let version = env!("CARGO_PKG_VERSION");
    let name = format!("airlock-{version}-x86_64-linux-dynamic");
    assert!(env.path("rel").join(&name).is_file(), "{stderr}");
    assert!(
        !env.path("rel")
            .join(format!("airlock-{version}-x86_64-linux"))
            .exists()
    );
    assert!(
        stderr.contains("dynamically linked") && stderr.contains("read it out over the phone"),
        "{stderr}"
    );
    let sums = Command::new("sha256sum")
        .args(["-c", &format!("{name}.sha256")])
        .current_dir(env.path("rel"))
        .output()
        .unwrap();
    assert!(sums.status.success(), "{sums:?}");
    env.ok(&["verify", &format!("rel/{name}"), "--trust", "k.pub"]);
    // A binary for another architecture than --arch says is refused.
    let out = Command::new("bash")
        .arg(repo_file("scripts/release.sh"))
        .args([
            "--key",
            "k.key",
            "-o",
            "rel2",
            "--arch",
            "aarch64",
            "--binary",
            env!("CARGO_BIN_EXE_airlock"),
        ])
        .current_dir(env.dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("is an x86_64 binary, not aarch64"));
}

/// A temp tree for the README's sections: `work` (the current directory, holding the demo
/// model as `Llama-3-8B`) and `root` (where `/models`, `/etc/airlock` and `/srv` go).
fn readme_tree() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let (work, root) = (t.path().join("work"), t.path().join("root"));
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(root.join("srv")).unwrap();
    copy_tree(&repo_file("testdata/tiny-model"), &work.join("Llama-3-8B"));
    (t, work, root)
}

/// Runs the README lines in order, each as written (exit 0), and returns their stdout.
fn run_readme_lines(
    work: &Path,
    root: &Path,
    lines: &[String],
    envs: &[(&str, &str)],
) -> Vec<String> {
    lines
        .iter()
        .map(|line| {
            let (code, out, err) = run_readme_line(work, root, line, envs);
            assert_eq!(code, 0, "README line failed: {line}\n{out}{err}");
            out
        })
        .collect()
}

/// Issue 33 item 4 (k-of-n signing and rotation). The README's trust root section, run as
/// written with keys made by `keygen --unencrypted` (nobody is there to type passwords): the
/// bundle is refused until the second officer co-signs, installs under version 1 of the root,
/// and the rotated version 2 travels with the next bundle and is adopted by its install.
#[test]
fn the_readme_trust_root_section_runs_as_written() {
    let (_t, work, root) = readme_tree();
    for key in ["alice", "bob", "carol", "dave", "sec1", "sec2"] {
        let (code, out, err) = run_readme_line(
            &work,
            &root,
            &format!("airlock keygen --out {key} --unencrypted"),
            &[],
        );
        assert_eq!(code, 0, "{out}{err}");
    }
    let lines = readme_section_commands("## Two-person release and key rotation");
    let at = |prefix: &str| {
        lines
            .iter()
            .position(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no README line {prefix:?}: {lines:?}"))
    };
    let cosign = at("airlock cosign llama-bundle");
    let out = run_readme_lines(&work, &root, &lines[..cosign], &[]);
    assert!(
        out[1].contains("1 more needed") && out[2].contains("signed by 2 of the 2 required"),
        "{out:?}"
    );
    // One officer's signature is not enough.
    let (code, out, err) = run_readme_line(
        &work,
        &root,
        "airlock verify llama-bundle --trust root.json",
        &[],
    );
    assert_eq!(code, 3, "{out}{err}");
    assert!(err.contains("signed by 1 of the 2"), "{err}");
    let out = run_readme_lines(&work, &root, &lines[cosign..], &[]);
    assert!(
        out[0].contains("the bundle now meets the targets role of root.json version 1"),
        "{}",
        out[0]
    );
    assert!(
        out.last()
            .unwrap()
            .contains("updated from version 1 to version 2"),
        "{out:?}"
    );
    assert!(root.join("etc/airlock/root.history/1.root.json").is_file());
    // carol left: her signature no longer counts towards the two.
    let (code, out, err) = run_readme_line(
        &work,
        &root,
        "airlock pack ./Llama-3-8B -o llama-v5 --key carol.key --version 5 && airlock cosign llama-v5 --key alice.key && airlock verify llama-v5 --trust /etc/airlock/root.json",
        &[],
    );
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        err.contains("signed by 1 of the 2")
            && err.contains("which is not one of the targets role")
            && err.contains("version 2"),
        "{err}"
    );
}

/// Issue 33 item 4 (OpenSSF signatures). The README's OMS section, run as written with the
/// real `model_signing` on PATH: the publisher's signature (made by model_signing) is checked
/// at pack, and both signatures verify on the install with the stock tool and with airlock; a
/// changed byte fails them.
#[test]
fn the_readme_oms_section_runs_as_written() {
    let (_t, work, root) = readme_tree();
    let python = crate::oci::venv_python();
    let venv_bin = python.parent().unwrap();
    let setup = format!(
        "airlock keygen --out release --unencrypted \
         && openssl ecparam -name prime256v1 -genkey -noout -out publisher.key \
         && openssl ec -in publisher.key -pubout -out publisher.pub \
         && openssl ecparam -name prime256v1 -genkey -noout -out site-oms.key \
         && openssl ec -in site-oms.key -pubout -out site-oms.pub \
         && {} -m model_signing sign key Llama-3-8B --private_key publisher.key --signature Llama-3-8B/model.sig",
        python.display()
    );
    let (code, out, err) = run_readme_line(&work, &root, &setup, &[]);
    assert_eq!(code, 0, "{out}{err}");
    let trust = readme_line(&readme_commands(), "install -d -m 0755 /etc/airlock/trust");
    let (code, out, err) = run_readme_line(&work, &root, &trust, &[]);
    assert_eq!(code, 0, "{out}{err}");
    let bin = Path::new(env!("CARGO_BIN_EXE_airlock")).parent().unwrap();
    let path = format!(
        "{}:{}:{}",
        bin.display(),
        venv_bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let env = [("PATH", path.as_str())];
    let lines = readme_section_commands("## OpenSSF model signatures");
    assert!(
        lines
            .iter()
            .filter(|l| l.starts_with("model_signing verify"))
            .count()
            == 2,
        "{lines:?}"
    );
    let out = run_readme_lines(&work, &root, &lines, &env);
    assert!(
        out[0].contains("the publisher's OMS signature model.sig verified"),
        "{}",
        out[0]
    );
    assert!(
        out.iter()
            .filter(|o| o.contains("Verification succeeded"))
            .count()
            == 2
    );
    assert!(out[4].contains("OMS signature"), "{}", out[4]);
    // A changed byte: every check of the section fails.
    let weights = root.join("models/llama-3-8b/model.safetensors");
    let mut bytes = std::fs::read(&weights).unwrap();
    bytes[5000] ^= 1;
    std::fs::write(&weights, bytes).unwrap();
    for line in &lines[2..] {
        let (code, out, err) = run_readme_line(&work, &root, line, &env);
        assert_ne!(code, 0, "{line} passed on a changed model: {out}{err}");
    }
}

/// Issue 33 item 4 (the weights scan). The README's lines, as written: `check` scans the demo
/// model and finds nothing, `inspect` shows what the pack recorded; with a checkpoint holding
/// NaN the same `check` and the README's pack refuse it (exit 3), naming the tensor.
#[test]
fn the_readme_weights_scan_section_runs_as_written() {
    let (_t, work, root) = readme_tree();
    let (code, out, err) = run_readme_line(
        &work,
        &root,
        "airlock keygen --out release --unencrypted",
        &[],
    );
    assert_eq!(code, 0, "{out}{err}");
    let lines = readme_section_commands("## The weights scan");
    assert_eq!(lines.len(), 2, "{lines:?}");
    let pack = readme_line(
        &readme_commands(),
        "airlock pack ./Llama-3-8B -o llama-bundle --key release.key --version 3 --volume-size fat32",
    );
    let (code, out, err) = run_readme_line(&work, &root, &lines[0], &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("no NaN, no Inf, no zero-filled region"),
        "{out}"
    );
    run_readme_lines(&work, &root, std::slice::from_ref(&pack), &[]);
    let (code, out, err) = run_readme_line(&work, &root, &lines[1], &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("values:") && out.contains("no NaN, no Inf, no zero-filled region"),
        "{out}"
    );
    std::fs::copy(
        repo_file("testdata/fixtures/values/nan-bf16.safetensors"),
        work.join("Llama-3-8B/model.safetensors"),
    )
    .unwrap();
    let (code, out, err) = run_readme_line(&work, &root, &lines[0], &[]);
    assert_eq!(code, 3, "{out}{err}");
    assert!(out.contains("2 NaN values in tensor"), "{out}");
    std::fs::remove_dir_all(work.join("llama-bundle")).unwrap();
    let (code, out, err) = run_readme_line(&work, &root, &pack, &[]);
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        err.contains("[tensor-nan]") || err.contains("NaN values"),
        "{err}"
    );
    assert!(!work.join("llama-bundle").exists());
}

/// Issue 33 item 4 (the OCI layout with a delta). The README's lines, as written after the
/// walkthrough's full bundle and delta: the layout gets tag 3, then tag 4 from the delta
/// sharing the unchanged blobs, and the README's skopeo line (with the test registry's address,
/// CA and credentials for registry.site's) publishes tag 4, from which airlock installs
/// version 4.
#[test]
fn the_readme_oci_layout_section_runs_as_written() {
    let reg = crate::oci::Registry::start();
    let env = Env::new();
    let (work, root) = (env.path("work"), env.path("root"));
    std::fs::create_dir_all(root.join("srv")).unwrap();
    copy_tree(&repo_file("testdata/tiny-model"), &work.join("Llama-3-8B"));
    copy_tree(
        &repo_file("testdata/tiny-model"),
        &work.join("Llama-3-8B-v4"),
    );
    std::fs::write(
        work.join("Llama-3-8B-v4/generation_config.json"),
        b"{\"temperature\": 0.6}\n",
    )
    .unwrap();
    let using = readme_commands();
    let mut first: Vec<String> = [
        "airlock keygen --out release",
        "airlock pack ./Llama-3-8B -o llama-bundle --key release.key --version 3 --volume-size fat32",
        "install -d -m 0755 /etc/airlock/trust",
        "airlock unpack llama-bundle --trust /etc/airlock/trust --dest /models/llama-3-8b",
        "airlock pack ./Llama-3-8B-v4",
    ]
    .iter()
    .map(|p| readme_line(&using, p))
    .collect();
    first[0].push_str(" --unencrypted");
    run_readme_lines(&work, &root, &first, &[]);

    let lines = readme_section_commands("## An OCI image layout, updated by a delta");
    assert_eq!(lines.len(), 3, "{lines:?}");
    let srv = format!("{}/srv/", root.display());
    let certs = env.path("certs");
    std::fs::create_dir(&certs).unwrap();
    std::fs::copy(reg.path("ca.pem"), certs.join("ca.crt")).unwrap();
    let lines: Vec<String> = lines
        .iter()
        .map(|l| {
            l.replace("/srv/", &srv)
                .replace(
                    "skopeo copy ",
                    &format!(
                        "skopeo copy --dest-cert-dir {} --dest-creds '{}:{}' ",
                        certs.display(),
                        crate::oci::USER,
                        crate::oci::PASSWORD
                    ),
                )
                .replace("registry.site:5000", &format!("127.0.0.1:{}", reg.port))
        })
        .collect();
    let out = run_readme_lines(&work, &root, &lines, &[]);
    assert!(out[0].contains("as tag 3"), "{}", out[0]);
    assert!(
        out[1].contains("as tag 4") && !out[1].contains(" 0 reused"),
        "the delta reuses tag 3's blobs: {}",
        out[1]
    );
    reg.ok(
        &env,
        &[
            "unpack",
            &reg.reference("models/llama:4"),
            "--trust",
            "work/release.pub",
            "--dest",
            "from-registry",
        ],
    );
    assert_eq!(
        std::fs::read(env.path("from-registry/generation_config.json")).unwrap(),
        b"{\"temperature\": 0.6}\n"
    );
}
