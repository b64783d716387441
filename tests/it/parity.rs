//! Parity volumes and repair (docs/FORMAT.md section 17, `airlock repair`): damage within the
//! parity budget is reported as repairable, installs the exact model from read-only media and
//! is repaired in place or into a new directory; damage beyond it is refused with nothing
//! installed or changed. A small chunk size (the hidden `--chunk-size`) makes a model of a few
//! MiB span hundreds of units and dozens of volumes.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::support::{Env, pseudo_random};

const CHUNK: u64 = 16384;
/// Four units per volume.
const VOLUME: &str = "65536";

/// A model of about 4 MiB (incompressible) packed uncompressed with `parity`.
fn packed(env: &Env, name: &str, parity: Option<&str>) -> PathBuf {
    env.write("m/weights.bin", &pseudo_random(4_000_000, 7));
    env.write("m/config.json", b"{\"model_type\": \"test\"}\n");
    let chunk = CHUNK.to_string();
    let mut args = vec![
        "pack",
        "m",
        "-o",
        name,
        "--key",
        "k.key",
        "--compress",
        "none",
        "--volume-size",
        VOLUME,
        "--chunk-size",
        &chunk,
    ];
    if let Some(p) = parity {
        args.extend(["--parity", p]);
    }
    env.ok(&args);
    env.path(name)
}

fn manifest(bundle: &Path) -> Value {
    serde_json::from_slice(&fs::read(bundle.join("manifest.json")).unwrap()).unwrap()
}

/// `(K, R)` of a bundle's parity.
fn geometry(bundle: &Path) -> (u64, u64) {
    let m = manifest(bundle);
    (
        m["parity"]["stripes"].as_u64().unwrap(),
        m["parity"]["recovery_units"].as_u64().unwrap(),
    )
}

/// Volume name and chunk of data unit `u` (every data volume has 4 units here but the last).
fn unit_place(u: u64) -> (String, u64) {
    (format!("data.{:03}", u / 4), u % 4)
}

fn flip(path: &Path, offset: u64) {
    let mut bytes = fs::read(path).unwrap();
    bytes[offset as usize] ^= 0x40;
    fs::write(path, bytes).unwrap();
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

fn same_tree(a: &Path, b: &Path) {
    for name in ["weights.bin", "config.json"] {
        assert!(
            fs::read(a.join(name)).unwrap() == fs::read(b.join(name)).unwrap(),
            "{name} differs"
        );
    }
}

fn volume_bytes(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

/// Damage within the budget: a whole volume deleted, one chunk flipped, a volume truncated,
/// all in different stripes (asserted, so the fixture cannot silently go beyond the budget).
fn damage_within(bundle: &Path) -> Vec<String> {
    let (k, r) = geometry(bundle);
    assert!(r >= 1);
    // data.010 holds units 40..44; data.030 chunk 1 is unit 121; data.050 truncated to one
    // chunk loses units 201..204.
    let mut units: Vec<u64> = (40..44).collect();
    units.push(121);
    units.extend(201..204);
    let mut stripes: Vec<u64> = units.iter().map(|u| u % k).collect();
    stripes.sort();
    stripes.dedup();
    assert_eq!(
        stripes.len(),
        units.len(),
        "fixture damage shares a stripe (K={k})"
    );
    fs::remove_file(bundle.join("data.010")).unwrap();
    let (v, c) = unit_place(121);
    flip(&bundle.join(v), c * CHUNK + 5);
    let f = fs::OpenOptions::new()
        .write(true)
        .open(bundle.join("data.050"))
        .unwrap();
    f.set_len(CHUNK).unwrap();
    vec!["data.010".into(), "data.030".into(), "data.050".into()]
}

/// Damage beyond the budget: two data units of one stripe.
fn damage_beyond(bundle: &Path) -> Vec<String> {
    let (k, r) = geometry(bundle);
    let mut names = vec![];
    for d in 0..=r {
        let (v, c) = unit_place(3 + d * k);
        flip(&bundle.join(&v), c * CHUNK + 100);
        names.push(v);
    }
    names
}

/// Runs airlock with the bundle directory seen through a read-only bind mount (a private
/// mount namespace: `unshare -m` as root, `unshare -rm` otherwise), so the check holds as root
/// too. `{ro}` in `args` stands for the mount point.
fn on_read_only(env: &Env, bundle: &Path, args: &[&str]) -> (Option<i32>, String) {
    let mnt = tempfile::tempdir().unwrap();
    let view = mnt.path().to_str().unwrap().to_string();
    let args: Vec<String> = args.iter().map(|a| a.replace("{ro}", &view)).collect();
    let mut last = String::new();
    for flags in ["-m", "-rm"] {
        let out = Command::new("unshare")
            .arg(flags)
            .args(["sh", "-c"])
            .arg(r#"mount --bind "$1" "$2" && mount -o remount,ro,bind "$2" || exit 125; touch "$2/probe" 2>/dev/null && exit 124; shift 2; exec "$@""#)
            .arg("sh")
            .arg(bundle)
            .arg(&view)
            .arg(env!("CARGO_BIN_EXE_airlock"))
            .args(&args)
            .current_dir(env.dir.path())
            .env_remove("AIRLOCK_TRUST")
            .stdin(Stdio::null())
            .output()
            .expect("run unshare");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        match out.status.code() {
            Some(125) | Some(124) => last = format!("unshare {flags}: {text}"),
            code => return (code, text),
        }
    }
    panic!(
        "no read-only bind mount could be made (the test needs one, as root or with user namespaces): {last}"
    );
}

#[test]
fn parity_size_is_within_one_percent_of_what_was_asked_and_cat_data_is_still_the_payload() {
    let env = Env::new();
    for (pct, want) in [("10%", 10.0), ("25%", 25.0)] {
        let name = format!("b{}", want as u32);
        let b = packed(&env, &name, Some(pct));
        let m = manifest(&b);
        let data: u64 = m["totals"]["volume_bytes"].as_u64().unwrap();
        let parity: u64 = m["parity"]["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["size"].as_u64().unwrap())
            .sum();
        let on_disk: u64 = fs::read_dir(&b)
            .unwrap()
            .map(|e| e.unwrap())
            .filter(|e| e.file_name().to_string_lossy().starts_with("parity."))
            .map(|e| e.metadata().unwrap().len())
            .sum();
        assert_eq!(on_disk, parity);
        let got = parity as f64 * 100.0 / data as f64;
        assert!(
            (got - want).abs() <= 1.0,
            "{pct}: parity is {got:.2}% of the data"
        );
        assert_eq!(m["parity"]["algorithm"], "rs-leopard-gf16");
        env.ok(&["verify", &name, "--trust", "k.pub"]);
        let shown = String::from_utf8(env.ok(&["inspect", &name]).stdout).unwrap();
        assert!(shown.contains("parity.000"), "{shown}");
        // The stock-tools fallback: `cat data.*` is still the tar stream.
        let out = env.path(&format!("stock{}", want as u32));
        fs::create_dir(&out).unwrap();
        let st = Command::new("sh")
            .arg("-c")
            .arg(r#"cat "$1"/data.* | tar -x -C "$2""#)
            .args(["sh", b.to_str().unwrap(), out.to_str().unwrap()])
            .status()
            .unwrap();
        assert!(st.success());
        same_tree(&out, &env.path("m"));
    }
}

#[test]
fn verify_says_damage_within_the_budget_is_repairable_and_beyond_it_is_not() {
    let env = Env::new();
    let b = packed(&env, "b", Some("25%"));
    let (code, v) = env.json(&["verify", "b", "--trust", "k.pub"]);
    assert_eq!(code, 0);
    assert_eq!(v["repairable"], Value::Null);
    let damaged = damage_within(&b);
    let (code, v) = env.json(&["verify", "b", "--trust", "k.pub"]);
    assert_eq!(code, 3, "{v}");
    assert_eq!(v["repairable"], true, "{v}");
    assert_eq!(v["parity_assessment"]["erased_data_units"], 8);
    assert_eq!(v["parity_assessment"]["worst_stripe_erased"], 1);
    let bad: Vec<&str> = v["bad_volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["volume"].as_str().unwrap())
        .collect();
    assert_eq!(bad, damaged);
    let text = env.fails(3, &["verify", "b", "--trust", "k.pub"]);
    assert!(text.contains("REPAIRABLE from parity"), "{text}");
    assert!(text.contains("airlock repair"), "{text}");

    let env2 = Env::new();
    let b2 = packed(&env2, "b", Some("10%"));
    let names = damage_beyond(&b2);
    let (code, v) = env2.json(&["verify", "b", "--trust", "k.pub"]);
    assert_eq!(code, 3);
    assert_eq!(v["repairable"], false, "{v}");
    let hint = v["error"]["hint"].as_str().unwrap();
    for n in &names {
        assert!(hint.contains(n.as_str()), "{hint}");
    }
    // A damaged parity volume is reported like a damaged data volume.
    let env3 = Env::new();
    let b3 = packed(&env3, "b", Some("10%"));
    flip(&b3.join("parity.000"), 7);
    let (code, v) = env3.json(&["verify", "b", "--trust", "k.pub"]);
    assert_eq!(code, 3);
    assert_eq!(v["bad_parity_volumes"][0]["volume"], "parity.000", "{v}");
    assert_eq!(v["repairable"], true);
    // Without parity, damage is not repairable (from parity).
    let env4 = Env::new();
    let b4 = packed(&env4, "b", None);
    flip(&b4.join("data.002"), 9);
    let (code, v) = env4.json(&["verify", "b", "--trust", "k.pub"]);
    assert_eq!(code, 3);
    assert_eq!(v["repairable"], false);
}

#[test]
fn unpack_rebuilds_damage_within_the_budget_from_read_only_media() {
    let env = Env::new();
    let b = packed(&env, "b", Some("25%"));
    let damaged = damage_within(&b);
    let dest = env.path("out");
    let (code, text) = on_read_only(
        &env,
        &b,
        &[
            "unpack",
            "{ro}",
            "--trust",
            "k.pub",
            "--dest",
            dest.to_str().unwrap(),
            "--json",
        ],
    );
    assert_eq!(code, Some(0), "{text}");
    same_tree(&dest, &env.path("m"));
    let v: Value = serde_json::from_str(&text[text.find('{').unwrap()..]).unwrap();
    let repaired: Vec<&str> = v["repaired_volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert_eq!(repaired, damaged);
    // verify --deep reads on through the damage too, and still fails the bundle.
    let (code, v) = env.json(&["verify", "b", "--deep", "--trust", "k.pub"]);
    assert_eq!(code, 3);
    assert_eq!(v["deep_completed"], true, "{v}");
    assert_eq!(v["repairable"], true);
}

#[test]
fn unpack_refuses_damage_beyond_the_budget_and_installs_nothing() {
    let env = Env::new();
    let b = packed(&env, "b", Some("10%"));
    damage_beyond(&b);
    let text = env.fails(3, &["unpack", "b", "--trust", "k.pub", "--dest", "out"]);
    assert!(!env.path("out").exists(), "{text}");
    assert!(text.contains("NOT repairable from parity"), "{text}");
}

#[test]
fn a_tampered_parity_volume_is_not_trusted() {
    // The parity of stripe 0 is changed and its digest re-signed (a hostile or broken packer):
    // the rebuilt unit fails its signed data digest, so unpack refuses and installs nothing.
    let env = Env::new();
    let b = packed(&env, "b", Some("10%"));
    let m = manifest(&b);
    let old = m["parity"]["volumes"][0]["chunks"][0]
        .as_str()
        .unwrap()
        .to_string();
    let p0 = b.join("parity.000");
    let mut bytes = fs::read(&p0).unwrap();
    bytes[10] ^= 1;
    fs::write(&p0, &bytes).unwrap();
    use sha2::Digest;
    let new = hex::encode(sha2::Sha256::digest(&bytes[..CHUNK as usize]));
    let text = fs::read_to_string(b.join("manifest.json")).unwrap();
    assert_eq!(text.matches(&old).count(), 1);
    fs::write(b.join("manifest.json"), text.replace(&old, &new)).unwrap();
    fs::remove_file(b.join("manifest.json.minisig")).unwrap();
    env.ok(&["sign", "b/manifest.json", "--key", "k.key"]);
    env.ok(&["verify", "b", "--trust", "k.pub"]);
    // Unit 0 (stripe 0) erased: the rebuild uses the lying recovery unit.
    flip(&b.join("data.000"), 3);
    let text = env.fails(3, &["unpack", "b", "--trust", "k.pub", "--dest", "out"]);
    assert!(!env.path("out").exists(), "{text}");
    let before = volume_bytes(&b);
    let text = env.fails(3, &["repair", "b", "--trust", "k.pub"]);
    assert!(text.contains("does not match its signed digest"), "{text}");
    assert!(volume_bytes(&b) == before, "repair changed the bundle");
}

#[test]
fn repair_in_place_and_into_a_new_directory() {
    let env = Env::new();
    let b = packed(&env, "b", Some("25%"));
    let pristine = volume_bytes(&b);
    damage_within(&b);
    flip(&b.join("parity.001"), 1);
    let damaged = volume_bytes(&b);
    // Read-only media: exit 1, a hint to use -o, nothing changed.
    let (code, text) = on_read_only(&env, &b, &["repair", "{ro}", "--trust", "k.pub"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("-o"), "{text}");
    // -o from read-only media writes a complete good bundle.
    let out = env.path("fixed");
    let (code, text) = on_read_only(
        &env,
        &b,
        &[
            "repair",
            "{ro}",
            "--trust",
            "k.pub",
            "-o",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(code, Some(0), "{text}");
    assert!(volume_bytes(&b) == damaged, "-o changed the source bundle");
    assert!(volume_bytes(&out) == pristine, "the repaired copy differs");
    env.ok(&["verify", "fixed", "--trust", "k.pub"]);
    // In place.
    let (code, v) = env.json(&["repair", "b", "--trust", "k.pub"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(
        v["repaired_volumes"],
        serde_json::json!(["data.010", "data.030", "data.050", "parity.001"])
    );
    assert!(
        volume_bytes(&b) == pristine,
        "in-place repair is not the packed bundle"
    );
    env.ok(&["verify", "b", "--deep", "--trust", "k.pub"]);
}

#[test]
fn repair_beyond_the_budget_changes_nothing_and_names_the_volumes() {
    let env = Env::new();
    let b = packed(&env, "b", Some("10%"));
    let names = damage_beyond(&b);
    let before = volume_bytes(&b);
    let text = env.fails(3, &["repair", "b", "--trust", "k.pub"]);
    for n in &names {
        assert!(text.contains(n.as_str()), "{text}");
    }
    assert!(text.contains("nothing was changed"), "{text}");
    assert!(volume_bytes(&b) == before);
}

#[test]
fn two_copies_damaged_in_different_places_make_one_good_one_without_parity() {
    let env = Env::new();
    let a = packed(&env, "a", None);
    let pristine = volume_bytes(&a);
    let b = env.path("b");
    copy_dir(&a, &b);
    fs::remove_file(a.join("data.003")).unwrap();
    flip(&a.join("data.007"), 20_000);
    flip(&b.join("data.007"), 10);
    fs::OpenOptions::new()
        .write(true)
        .open(b.join("data.020"))
        .unwrap()
        .set_len(100)
        .unwrap();
    // Alone, neither can be repaired.
    env.fails(3, &["repair", "a", "--trust", "k.pub"]);
    let (code, v) = env.json(&["repair", "a", "--trust", "k.pub", "--from", "b"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["chunks_from_parity"], 0);
    assert!(volume_bytes(&a) == pristine);
    // The same chunk bad in both copies: refused, naming it, nothing changed.
    let env2 = Env::new();
    let c = packed(&env2, "c", None);
    let d = env2.path("d");
    copy_dir(&c, &d);
    flip(&c.join("data.005"), 30);
    flip(&d.join("data.005"), 40);
    let before = volume_bytes(&c);
    let text = env2.fails(3, &["repair", "c", "--trust", "k.pub", "--from", "d"]);
    assert!(text.contains("data.005"), "{text}");
    assert!(volume_bytes(&c) == before);
}

#[test]
fn the_stock_tools_procedure_works_with_parity_volumes_present() {
    // FORMAT.md section 12, step by step, on a zstd bundle with parity: minisign, the chunk
    // digests of the data volumes and (the same way) of the parity volumes with jq, split and
    // sha256sum, then `cat data.* | zstd -d | tar -x` and sha256sum -c.
    let env = Env::new();
    env.write("m/weights.bin", &pseudo_random(1_000_000, 3));
    env.write("m/config.json", b"{}\n");
    let chunk = CHUNK.to_string();
    env.ok(&[
        "pack",
        "m",
        "-o",
        "b",
        "--key",
        "k.key",
        "--volume-size",
        VOLUME,
        "--chunk-size",
        &chunk,
        "--parity",
        "20%",
    ]);
    let script = r#"
set -eu
cd b
minisign -Vm manifest.json -p ../k.pub >/dev/null
cs=$(jq -r .chunk_size manifest.json)
for sel in .volumes .parity.volumes; do
  for v in $(jq -r "$sel[].name" manifest.json); do
    split -b "$cs" --filter='sha256sum | cut -c1-64' "$v" > "/tmp/$$.$v.chunks"
    jq -r --arg v "$v" "$sel[] | select(.name == \$v) | .chunks[]" manifest.json \
      | cmp -s - "/tmp/$$.$v.chunks" && echo "$v: OK" || echo "$v: FAILED"
    rm -f "/tmp/$$.$v.chunks"
  done
done
mkdir ../manual
cat data.* | zstd -d | tar -x -C ../manual
jq -r '.files[] | "\(.sha256)  \(.path)"' manifest.json > ../sums
cd ../manual && sha256sum -c --strict ../sums
"#;
    let out = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(env.dir.path())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(!text.contains("FAILED"), "{text}");
    assert!(text.contains("parity.000: OK"), "{text}");
    assert_eq!(text.matches(": OK").count(), {
        let m = manifest(&env.path("b"));
        m["volumes"].as_array().unwrap().len()
            + m["parity"]["volumes"].as_array().unwrap().len()
            + 2
    });
    same_tree(&env.path("manual"), &env.path("m"));
}
