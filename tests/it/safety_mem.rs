//! Memory a signed bundle can make airlock spend (issue 26, items 3 and 4): sizes a hostile
//! signer declares (parity geometry, tensor counts) bound what is allocated only after they are
//! checked against what the bundle really holds, and an allocation that fails is a clean exit,
//! never an abort (exit 134). Each run here happens under an address-space limit
//! (`prlimit --as`), as on a small air-gapped node.

use std::fs;
use std::process::{Command, Stdio};

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::support::{Env, staging_leftovers};

/// The address-space limit of the parity runs (the issue's figure).
const PARITY_LIMIT: u64 = 384 << 20;

/// Runs airlock in the test tree under `prlimit --as=LIMIT`; returns the exit code (`None` when
/// killed by a signal) and stderr + stdout.
fn limited(env: &Env, limit: u64, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new("prlimit")
        .arg(format!("--as={limit}"))
        .arg(env!("CARGO_BIN_EXE_airlock"))
        .args(args)
        .current_dir(env.dir.path())
        .env_remove("AIRLOCK_TRUST")
        .env("SOURCE_DATE_EPOCH", "1700000000")
        .stdin(Stdio::null())
        .output()
        .expect("prlimit (util-linux) must be installed");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    (out.status.code(), text)
}

/// Re-signs a bundle's edited manifest with the test key (a hostile or broken packer).
fn resign(env: &Env, bundle: &str, edit: impl FnOnce(&mut Value)) {
    let path = env.path(bundle).join("manifest.json");
    let mut v: Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    edit(&mut v);
    let bytes = serde_json::to_vec(&v).unwrap();
    fs::write(&path, &bytes).unwrap();
    let comment = format!(
        "airlock manifest_sha256={} version={} name={}",
        hex::encode(Sha256::digest(&bytes)),
        v["version"],
        v["name"].as_str().unwrap()
    );
    let manifest = format!("{bundle}/manifest.json");
    env.ok(&[
        "sign", &manifest, "--key", "k.key", "-t", &comment, "--force",
    ]);
}

/// A small bundle in 4 KiB chunks with parity, whose parity object is re-signed to declare
/// `D` data and `R` recovery units per stripe. The parity volume is a sparse file of zeros as
/// long as the geometry says, each unit signed as zeros, so every recovery unit is intact; then
/// data unit 0 is damaged, so reading or repairing the bundle needs a rebuild.
fn hostile_geometry(env: &Env, name: &str, data: u32, recovery: u32) {
    env.write("m/config.json", b"{\"model_type\": \"test\"}\n");
    env.ok(&[
        "pack",
        "m",
        "-o",
        name,
        "--key",
        "k.key",
        "--compress",
        "none",
        "--chunk-size",
        "4096",
        "--parity",
        "50",
    ]);
    let dir = env.path(name);
    let mut units = 0;
    resign(env, name, |v| {
        units = v["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["chunks"].as_array().unwrap().len() as u64)
            .sum::<u64>();
        let stripes = units.div_ceil(u64::from(data));
        let n = stripes * u64::from(recovery);
        let zero = hex::encode(Sha256::digest([0u8; 4096]));
        let p = &mut v["parity"];
        p["data_units"] = data.into();
        p["recovery_units"] = recovery.into();
        p["stripes"] = stripes.into();
        p["volumes"] = serde_json::json!([{
            "name": "parity.000",
            "size": n * 4096,
            "chunks": vec![zero; n as usize],
        }]);
        fs::remove_file(dir.join("parity.000")).unwrap();
        let f = fs::File::create(dir.join("parity.000")).unwrap();
        f.set_len(n * 4096).unwrap();
    });
    assert!(units >= 1);
    let mut bytes = fs::read(dir.join("data.000")).unwrap();
    bytes[100] ^= 0x40;
    fs::write(dir.join("data.000"), bytes).unwrap();
}

/// Unpack, repair in place and repair into a new directory of `bundle`, each under the limit:
/// exit 3 with `want` in the message, nothing installed, the bundle unchanged.
fn refused_within_the_limit(env: &Env, bundle: &str, want: &str) {
    let before = fs::read(env.path(bundle).join("data.000")).unwrap();
    let runs: [&[&str]; 3] = [
        &["unpack", bundle, "--dest", "out", "--trust", "k.pub"],
        &["repair", bundle, "--trust", "k.pub"],
        &["repair", bundle, "-o", "fixed", "--trust", "k.pub"],
    ];
    for args in runs {
        let (code, text) = limited(env, PARITY_LIMIT, args);
        assert_eq!(code, Some(3), "{args:?} under a 384 MiB limit: {text}");
        assert!(text.contains(want), "{args:?}: {text}");
        assert!(!text.contains("memory allocation"), "{args:?}: {text}");
    }
    assert!(!env.path("out").exists(), "something was installed");
    assert!(!env.path("fixed").exists(), "a repaired bundle was written");
    assert!(staging_leftovers(env.dir.path()).is_empty());
    assert_eq!(fs::read(env.path(bundle).join("data.000")).unwrap(), before);
    let names: Vec<String> = fs::read_dir(env.path(bundle))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().all(|n| !n.contains("airlock-repair")),
        "{names:?}"
    );
}

/// Issue 26 item 3: `data_units` 32768 over a bundle of one data unit made unpack and repair
/// allocate about 540 MB for a rebuild and abort (exit 134) under 384 MiB. A stripe cannot
/// have more data units than the bundle: the manifest is refused before anything is read.
#[test]
fn a_stripe_wider_than_the_bundle_is_refused_before_any_allocation() {
    let env = Env::new();
    hostile_geometry(&env, "b", 32768, 1);
    refused_within_the_limit(&env, "b", "more than the bundle's");
}

/// Issue 26 item 3: `recovery_units` 32768 (a 128 MiB sparse parity volume, its units signed)
/// made a rebuild allocate about 430 MB and abort under 384 MiB. The codec's work area now
/// follows a memory budget whatever the geometry: the rebuild runs, its unit fails its signed
/// digest (the parity is zeros), and data.000 is named as damaged, exit 3.
#[test]
fn a_huge_recovery_count_rebuilds_within_a_bounded_memory() {
    let env = Env::new();
    hostile_geometry(&env, "b", 1, 32768);
    refused_within_the_limit(&env, "b", "data.000");
}

/// The memory limit itself is effective: an allocation of what the old rebuilds took fails
/// under it (so the two tests above would catch them).
#[test]
fn the_limit_used_here_is_below_what_the_old_rebuilds_took() {
    let out = Command::new("prlimit")
        .arg(format!("--as={PARITY_LIMIT}"))
        .args(["python3", "-c", "b = bytearray(420 << 20)"])
        .stderr(Stdio::null())
        .output()
        .expect("prlimit");
    assert!(!out.status.success());
}

/// The address-space limit of the model-check runs (the issue's figure).
const CHECK_LIMIT: u64 = 1 << 30;

/// An 88 MiB safetensors file whose 90 MB header lists 1.3 million one-byte tensors: legal
/// for the reference reader (header under 100 MB, offsets contiguous, sizes right).
fn hostile_safetensors(env: &Env, rel: &str) {
    const COUNT: usize = 1_300_000;
    let mut header = String::with_capacity(COUNT * 64);
    header.push('{');
    for i in 0..COUNT {
        if i > 0 {
            header.push(',');
        }
        header.push_str(&format!(
            r#""t{i:07}":{{"dtype":"U8","shape":[1],"data_offsets":[{i},{}]}}"#,
            i + 1
        ));
    }
    header.push('}');
    while !header.len().is_multiple_of(8) {
        header.push(' ');
    }
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    drop(header);
    bytes.resize(bytes.len() + COUNT, 7);
    env.write(rel, &bytes);
}

/// Issue 26 item 4: `check`, `pack` and `unpack` of a model holding such a file used 1.7 GB
/// and aborted (exit 134) under a 1 GiB limit. Now the header is streamed and the checks stop
/// at 262,144 tensors: `check` and `pack` refuse it with `safetensors-too-many-tensors`
/// (exit 3, nothing packed), and `unpack` of a bundle packed without the checks installs it
/// with the finding as a warning, all within the limit.
#[test]
fn a_header_of_a_million_tensors_is_refused_within_a_bounded_memory() {
    let env = Env::new();
    env.write("m/config.json", b"{\"model_type\": \"test\"}\n");
    hostile_safetensors(&env, "m/model.safetensors");
    let (code, text) = limited(&env, CHECK_LIMIT, &["check", "m"]);
    assert_eq!(code, Some(3), "check under a 1 GiB limit: {text}");
    assert!(text.contains("more than 262144 tensors"), "{text}");
    assert!(text.contains("model.safetensors"), "{text}");

    let (code, text) = limited(
        &env,
        CHECK_LIMIT,
        &["pack", "m", "-o", "b", "--key", "k.key"],
    );
    assert_eq!(code, Some(3), "pack under a 1 GiB limit: {text}");
    assert!(text.contains("safetensors-too-many-tensors"), "{text}");
    env.assert_nothing_packed("b");

    env.ok(&[
        "pack",
        "m",
        "-o",
        "b",
        "--key",
        "k.key",
        "--no-model-checks",
    ]);
    let (code, text) = limited(
        &env,
        CHECK_LIMIT,
        &["unpack", "b", "--dest", "out", "--trust", "k.pub"],
    );
    assert_eq!(code, Some(0), "unpack under a 1 GiB limit: {text}");
    assert!(text.contains("more than 262144 tensors"), "{text}");
    assert_eq!(
        fs::read(env.path("out/model.safetensors")).unwrap(),
        fs::read(env.path("m/model.safetensors")).unwrap()
    );
}
