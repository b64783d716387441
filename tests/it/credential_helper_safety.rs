//! The docker credential helper airlock runs for a registry password (`oci/auth.rs`): found on
//! `PATH` once, refused where another local user could have planted or could replace it, and
//! exactly the resolved file run. Against the real registry with htpasswd auth.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::oci::{PASSWORD, Registry, USER};
use crate::support::*;

/// Runs airlock in `env` against `reg`, with `docker` as DOCKER_CONFIG and `path` as PATH.
fn airlock(reg: &Registry, env: &Env, docker: &Path, path: &str, args: &[&str]) -> (i32, String) {
    let ca = reg.path("ca.pem");
    let out = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(args)
        .args(["--ca-file", ca.to_str().unwrap()])
        .current_dir(env.dir.path())
        .env_remove("AIRLOCK_TRUST")
        .env("DOCKER_CONFIG", docker)
        .env("PATH", path)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A helper `docker-credential-airlocktest` in `bin` (mode 0755) that answers with the
/// registry's user and password and leaves `ran` behind in `bin` when it runs.
fn write_helper(bin: &Path) {
    std::fs::create_dir_all(bin).unwrap();
    chmod(bin, 0o755);
    let p = bin.join("docker-credential-airlocktest");
    std::fs::write(
        &p,
        format!(
            r#"#!/bin/sh
: > "$(dirname "$0")/ran"
[ "$1" = get ] || exit 2
server=$(cat)
printf '{{"ServerURL":"%s","Username":"{USER}","Secret":"{PASSWORD}"}}' "$server"
"#
        ),
    )
    .unwrap();
    chmod(&p, 0o755);
}

#[test]
fn a_credential_helper_others_could_replace_is_refused_and_never_run() {
    let reg = Registry::start();
    let env = Env::new();
    env.model("m");
    env.ok(&["pack", "m", "-o", "b", "--key", "k.key"]);
    let host = format!("127.0.0.1:{}", reg.port);
    let docker = env.path("docker");
    std::fs::create_dir_all(&docker).unwrap();
    std::fs::write(
        docker.join("config.json"),
        format!(r#"{{"auths":{{"{host}":{{}}}},"credsStore":"airlocktest"}}"#),
    )
    .unwrap();
    let bin = env.path("bin");
    write_helper(&bin);
    let system = std::env::var("PATH").unwrap_or_default();
    let path = format!("{}:{system}", bin.display());
    let target = reg.reference("models/m:1");
    let push = ["push", "b", &target, "--trust", "k.pub"];

    // A directory on PATH that every user can write (a planted helper, or one that can be
    // swapped): refused before it runs, exit 1, naming the directory and the fix.
    chmod(&bin, 0o777);
    let (code, text) = airlock(&reg, &env, &docker, &path, &push);
    assert_eq!(code, 1, "{text}");
    let real_bin = bin.canonicalize().unwrap();
    assert!(
        text.contains(&format!(
            "registry {host}: the credential helper docker-credential-airlocktest (`credsStore` in"
        )) && text.contains(&format!(
            "is not run: {} is a directory writable by its group and all users (mode 0777, no sticky bit), so another local user could replace what runs and read the registry password",
            real_bin.display()
        )) && text.contains(&format!("hint: run `chmod go-w {}`", real_bin.display())),
        "{text}"
    );
    assert!(!bin.join("ran").exists(), "the helper ran");
    assert_eq!(reg.uploads(), 0);

    // The helper itself writable by all (mode 0777).
    chmod(&bin, 0o755);
    let helper = bin.join("docker-credential-airlocktest");
    chmod(&helper, 0o777);
    let (code, text) = airlock(&reg, &env, &docker, &path, &push);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains(&format!(
            "is not run: {} is a file writable by its group and all users (mode 0777)",
            helper.canonicalize().unwrap().display()
        )),
        "{text}"
    );
    assert!(!bin.join("ran").exists(), "the helper ran");

    // Found through a relative PATH entry (`bin`, relative to the working directory).
    chmod(&helper, 0o755);
    let (code, text) = airlock(&reg, &env, &docker, &format!("bin:{system}"), &push);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("was found through the relative PATH entry \"bin\"")
            && text.contains("remove the relative entry from PATH"),
        "{text}"
    );
    assert!(!bin.join("ran").exists(), "the helper ran");
    assert_eq!(reg.uploads(), 0);

    // Owned by you, mode 0755, in a directory only you can write: run, and the push works.
    let (code, text) = airlock(&reg, &env, &docker, &path, &push);
    assert_eq!(code, 0, "{text}");
    assert!(bin.join("ran").exists(), "the helper did not run");
}
