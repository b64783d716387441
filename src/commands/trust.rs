//! `airlock trust init|sign|show|rotate` (a TUF root.json: who may sign bundles, how many must,
//! who may change that, until when) and `airlock cosign` (one more signature on a bundle; on a
//! single file, `sign::cosign_file`).
//!
//! Each root key holder signs on their own offline machine: `sign` takes one secret key and
//! rewrites the root file atomically, so no machine ever needs two secret keys.

use std::path::{Path, PathBuf};

use airlock::bundle::open;
use airlock::error::{Error, Result};
use airlock::manifest;
use airlock::trust::root::{self, Root, RootKey, Verification};
use airlock::trust::{Clock, time, update};

use super::ui::Ui;
use super::{Output, secret, trust_clock, trust_source};
use crate::cli::{
    CosignArgs, RootKeyArgs, TrustCommand, TrustCommandArgs, TrustInitArgs, TrustRotateArgs,
    TrustShowArgs, TrustSignArgs,
};
use airlock::durable::{Place, Staged};

/// `airlock trust ...`.
pub fn run(a: TrustCommandArgs, ui: &Ui) -> Result<Output> {
    match a.command {
        TrustCommand::Init(a) => init(a),
        TrustCommand::Sign(a) => sign(a, ui),
        TrustCommand::Show(a) => show(a),
        TrustCommand::Rotate(a) => rotate(a),
    }
}

fn usage(s: impl Into<String>) -> Error {
    Error::Usage(s.into())
}

/// The file each key given with `--key`/`--root-key` was read from, by TUF key id: the name
/// the init and rotate output give the key.
type Names = std::collections::BTreeMap<String, PathBuf>;

/// The `--key`/`--root-key` files as root keys (each a .pub or a directory of them), noting
/// in `names` where each came from.
fn root_keys(paths: &[PathBuf], names: &mut Names) -> Result<Vec<RootKey>> {
    Ok(airlock::trust::load_paths_named(paths)?
        .iter()
        .map(|(pk, file)| {
            let k = RootKey::from_minisign(pk);
            names.insert(k.keyid.clone(), file.clone());
            k
        })
        .collect())
}

fn expiry(text: &str) -> Result<i64> {
    let at = time::parse_arg(text).map_err(|e| usage(format!("--expires: {e}")))?;
    let now = Clock::system().now;
    if at <= now {
        return Err(usage(format!(
            "--expires {}: that is not in the future (it is now {})",
            time::format(at),
            time::format(now)
        )));
    }
    Ok(at)
}

fn build(version: u64, k: &RootKeyArgs, old: Option<&Root>, names: &mut Names) -> Result<Root> {
    let old_keys = |role: &str| -> Vec<RootKey> {
        old.map(|r| r.role_keys(role).into_iter().cloned().collect())
            .unwrap_or_default()
    };
    let targets = if k.keys.is_empty() {
        old_keys(root::TARGETS)
    } else {
        root_keys(&k.keys, names)?
    };
    if targets.is_empty() {
        return Err(usage(
            "give the targets role's public keys with --key PUBKEY",
        ));
    }
    let threshold = k
        .threshold
        .or_else(|| old.map(|r| r.role(root::TARGETS).threshold))
        .ok_or_else(|| usage("give --threshold K: how many distinct keys must sign a bundle"))?;
    let root_set = if !k.root_keys.is_empty() {
        root_keys(&k.root_keys, names)?
    } else if old.is_some() {
        old_keys(root::ROOT)
    } else {
        targets.clone()
    };
    let root_threshold = match (k.root_threshold, k.root_keys.is_empty(), old) {
        (Some(t), _, _) => t,
        (None, false, _) => {
            return Err(usage(
                "give --root-threshold K with --root-key: how many distinct root keys must sign a new root",
            ));
        }
        (None, true, Some(r)) => r.role(root::ROOT).threshold,
        (None, true, None) => threshold,
    };
    let expires = expiry(&k.expires)?;
    Root::build(
        version,
        expires,
        (&targets, threshold),
        (&root_set, root_threshold),
    )
    .map_err(|e| usage(format!("cannot make this root: {e}")))
}

fn write_new(path: &Path, r: &Root) -> Result<()> {
    if std::fs::symlink_metadata(path).is_ok() {
        return Err(usage(format!(
            "{} already exists; choose a new file",
            path.display()
        )));
    }
    Staged::write_path(path, &r.to_bytes(), 0o644)?.publish(Place::New)
}

fn init(a: TrustInitArgs) -> Result<Output> {
    let mut names = Names::new();
    let r = build(1, &a.keys, None, &mut names)?;
    write_new(&a.out, &r)?;
    let mut out = Output::default();
    describe(&mut out, &a.out, &r, Clock::system().now);
    in_words(&mut out, &r, None, &names, !a.keys.root_keys.is_empty());
    out.line(format!(
        "OK   wrote {} (trust root version 1, unsigned): {} of its root keys must sign it, each on their own machine: `airlock trust sign {} --key KEY.key`",
        a.out.display(),
        r.role(root::ROOT).threshold,
        a.out.display()
    ));
    Ok(out)
}

fn rotate(a: TrustRotateArgs) -> Result<Output> {
    let (old, _) = update::read_root(&a.root)?;
    let version = old
        .version
        .checked_add(1)
        .ok_or_else(|| usage("the root's version cannot go higher"))?;
    let mut names = Names::new();
    let r = build(version, &a.keys, Some(&old), &mut names)?;
    write_new(&a.out, &r)?;
    let mut out = Output::default();
    describe(&mut out, &a.out, &r, Clock::system().now);
    in_words(
        &mut out,
        &r,
        Some(&old),
        &names,
        !a.keys.root_keys.is_empty(),
    );
    let names = |r: &Root| {
        r.role_keys(root::ROOT)
            .iter()
            .map(|k| k.label())
            .collect::<Vec<_>>()
            .join(", ")
    };
    out.line(format!(
        "OK   wrote {} (trust root version {version}, unsigned). It needs {} signature(s) of version {}'s root keys ({}) AND {} of its own ({}): `airlock trust sign {} --key KEY.key --previous {}` on each holder's machine, then `airlock trust show {} --previous {}`, then carry it with `airlock pack ... --trust-update {}`",
        a.out.display(),
        old.role(root::ROOT).threshold,
        old.version,
        names(&old),
        r.role(root::ROOT).threshold,
        names(&r),
        a.out.display(),
        a.root.display(),
        a.out.display(),
        a.root.display(),
        a.out.display(),
    ));
    Ok(out)
}

fn sign(a: TrustSignArgs, ui: &Ui) -> Result<Output> {
    let meta = std::fs::symlink_metadata(&a.root).map_err(|e| Error::io(&a.root, e))?;
    if !meta.is_file() {
        return Err(usage(format!(
            "{} is not a regular file (a link?): sign rewrites the file itself",
            a.root.display()
        )));
    }
    let (mut r, _) = update::read_root(&a.root)?;
    let previous = match &a.previous {
        Some(p) => Some(update::read_root(p)?.0),
        None => None,
    };
    let key_file = secret::read(&a.key, a.password_file.as_deref())?;
    let key = secret::unlock(key_file, ui)?;
    let pk = key.public_key();
    let in_root = |x: &Root| x.role_keys(root::ROOT).iter().any(|k| k.public == pk.key);
    let role = if in_root(&r) {
        format!("a root key of version {}", r.version)
    } else {
        match &previous {
            Some(p) if p.version + 1 == r.version && in_root(p) => {
                format!("a root key of the previous version {}", p.version)
            }
            Some(p) if p.version + 1 != r.version => {
                return Err(usage(format!(
                    "--previous is version {}, not the version before {} (version {})",
                    p.version,
                    a.root.display(),
                    r.version
                )));
            }
            _ => {
                return Err(usage(format!(
                    "key {} is not a root key of {} version {}{}: only root keys sign a root",
                    pk.key_id_hex(),
                    a.root.display(),
                    r.version,
                    if previous.is_some() {
                        " nor of --previous"
                    } else {
                        " (signing a rotation with an old root key? add --previous OLD_ROOT)"
                    }
                )));
            }
        }
    };
    let replaced = r.sign(&key);
    let mode = meta.permissions();
    Staged::write_path(
        &a.root,
        &r.to_bytes(),
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
    )?
    .publish(Place::Replace)?;
    let mut out = Output::default();
    out.set("root", &a.root);
    out.set("signer", pk.key_id_hex());
    out.set("replaced", replaced);
    out.line(format!(
        "OK   signed {} version {} with key {} ({role}){}",
        a.root.display(),
        r.version,
        pk.key_id_hex(),
        if replaced {
            "; its earlier signature was replaced"
        } else {
            ""
        }
    ));
    let own = r.verification(root::ROOT, &r);
    out.line(format!(
        "root role of version {}: {}",
        r.version,
        own.describe()
    ));
    if let Some(p) = &previous {
        out.line(format!(
            "root role of version {} (the rotation): {}",
            p.version,
            p.verification(root::ROOT, &r).describe()
        ));
    }
    Ok(out)
}

fn role_line(r: &Root, role: &str, what: &str) -> String {
    let keys = r.role_keys(role);
    format!(
        "{role:<9} ({what}): {} of {} key(s): {}",
        r.role(role).threshold,
        keys.len(),
        keys.iter()
            .map(|k| match k.minisign_id {
                Some(_) => format!("{} (tuf {})", k.label(), &k.keyid[..16]),
                None => k.label(),
            })
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// How the init and rotate output names a key: the file it was read from and its minisign
/// key id (`alice.pub (1A2B3C4D5E6F7A8B)`), or `key 1A2B3C4D5E6F7A8B` for a key that was not
/// given on this command line (kept from the previous version).
fn key_name(k: &RootKey, names: &Names) -> String {
    match names.get(&k.keyid) {
        Some(file) => format!("{} ({})", file.display(), k.label()),
        None => format!("key {}", k.label()),
    }
}

/// Who a role is, as a phrase: `the key alice.pub (…)`, `both of …`, `any 2 of the 3 keys …`.
fn who(r: &Root, role: &str, names: &Names) -> String {
    let keys = r.role_keys(role);
    let list = keys
        .iter()
        .map(|k| key_name(k, names))
        .collect::<Vec<_>>()
        .join(", ");
    match (r.role(role).threshold, keys.len()) {
        (_, 1) => format!("the one key {list}"),
        (t, n) if t == n => format!("all {n} keys together ({list})"),
        (1, n) => format!("any one of {n} keys ({list})"),
        (t, n) => format!("any {t} of {n} keys ({list})"),
    }
}

fn keyids(r: &Root, role: &str) -> std::collections::BTreeSet<String> {
    r.role_keys(role).iter().map(|k| k.keyid.clone()).collect()
}

/// What `init` and `rotate` made, said in words (issue 33 item 2): who can sign bundles, who
/// can change the root, whether they are the same people; for a rotation, a warning for each
/// key that leaves the targets role but stays in the root role (rotated out of signing
/// bundles, still able to sign the next root, and so to put itself back).
fn in_words(out: &mut Output, r: &Root, old: Option<&Root>, names: &Names, root_keys_given: bool) {
    out.line(format!(
        "who can sign bundles: a bundle is trusted when signed by {}",
        who(r, root::TARGETS, names)
    ));
    let same = keyids(r, root::ROOT) == keyids(r, root::TARGETS);
    let whence = match (old, root_keys_given) {
        (_, true) => String::new(),
        (None, false) => " (no --root-key given: the --key keys)".to_string(),
        (Some(o), false) => format!(" (no --root-key given: kept from version {})", o.version),
    };
    out.line(format!(
        "who can change this root: version {} needs signatures by {}{whence}",
        r.version + 1,
        who(r, root::ROOT, names)
    ));
    if same {
        out.line(
            "the same keys sign bundles and change the root: whoever signs bundles can also change who may sign them (give --root-key to keep the two apart)",
        );
    }
    out.set("root_keys_are_targets_keys", same);
    let Some(old) = old else {
        return;
    };
    let (targets, root_now) = (keyids(r, root::TARGETS), keyids(r, root::ROOT));
    let mut lingering = Vec::new();
    for k in old.role_keys(root::TARGETS) {
        if targets.contains(&k.keyid) || !root_now.contains(&k.keyid) {
            continue;
        }
        let name = key_name(k, names);
        out.warnings.push(format!(
            "{name} leaves the targets role but stays in the root role: from version {} it can no longer sign bundles, but it can still sign version {} of the root (and so put itself back); to take it out, give --root-key for each key that is to change the root, without this one",
            r.version,
            r.version + 1
        ));
        lingering.push(k.label());
    }
    out.set("left_targets_kept_root", lingering);
}

/// The who-can-do-what lines and JSON of a root.
fn describe(out: &mut Output, path: &Path, r: &Root, now: i64) {
    let expired = r.is_expired(now);
    out.line(format!(
        "{}: TUF root version {} (spec {}), expires {} ({}{})",
        path.display(),
        r.version,
        r.spec_version,
        time::format(r.expires),
        if expired { "EXPIRED " } else { "" },
        time::distance(r.expires, now)
    ));
    out.line(role_line(r, root::TARGETS, "may sign bundles"));
    out.line(role_line(r, root::ROOT, "may sign a new root"));
    out.line("snapshot, timestamp: present for TUF tooling; airlock does not use them".to_string());
    let roles: serde_json::Map<String, serde_json::Value> = root::ROLES
        .iter()
        .map(|name| {
            let keys: Vec<serde_json::Value> = r
                .role_keys(name)
                .iter()
                .map(|k| {
                    serde_json::json!({
                        "keyid": k.keyid,
                        "minisign_keyid": k.minisign_id.as_ref().map(root::minisign_hex),
                    })
                })
                .collect();
            (
                name.to_string(),
                serde_json::json!({"threshold": r.role(name).threshold, "keys": keys}),
            )
        })
        .collect();
    out.set("root", path);
    out.set("version", r.version);
    out.set("spec_version", &r.spec_version);
    out.set("expires", time::format(r.expires));
    out.set("expired", expired);
    out.set("roles", roles);
}

fn verification_json(v: &Verification) -> serde_json::Value {
    serde_json::json!({
        "threshold": v.threshold,
        "signed_by": v.signed.iter().map(|k| k.label()).collect::<Vec<_>>(),
        "missing": v.unsigned.iter().map(|k| k.label()).collect::<Vec<_>>(),
        "ok": v.ok(),
    })
}

fn show(a: TrustShowArgs) -> Result<Output> {
    let clock = trust_clock(a.assume_now.as_deref())?;
    let (r, _) = update::read_root(&a.root)?;
    let mut out = Output::default();
    out.warnings.extend(clock.warning());
    describe(&mut out, &a.root, &r, clock.now);
    let own = r.verification(root::ROOT, &r);
    out.line(format!("signatures, root role: {}", own.describe()));
    out.set("signatures", verification_json(&own));
    let mut error = None;
    if let Some(p) = &a.previous {
        let (prev, _) = update::read_root(p)?;
        let old = prev.verification(root::ROOT, &r);
        out.line(format!(
            "rotation from {} version {}: its root role {}",
            p.display(),
            prev.version,
            old.describe()
        ));
        out.set("rotation", verification_json(&old));
        if let Err(why) = root::verify_rotation(&prev, &r) {
            error = Some(Error::TrustUpdate {
                path: a.root.clone(),
                reason: format!(
                    "as a rotation from {}: version {} {why}",
                    p.display(),
                    r.version
                ),
            });
        }
    }
    if !own.ok() {
        error = Some(Error::TrustRoot {
            path: a.root.clone(),
            reason: format!(
                "root version {} is not (yet) signed by the threshold of its own root keys: {}",
                r.version,
                own.describe()
            ),
        });
    } else if error.is_none() && r.is_expired(clock.now) {
        error = Some(airlock::trust::policy::expired(&a.root, &r, clock));
    }
    out.set("verified", error.is_none());
    if error.is_none() {
        out.line(format!(
            "OK   {} version {} is signed well enough to be trusted{}",
            a.root.display(),
            r.version,
            if a.previous.is_some() {
                " and to replace the previous version"
            } else {
                ""
            }
        ));
    }
    out.error = error;
    Ok(out)
}

/// `airlock cosign BUNDLE --key K`: one more minisign signature of the bundle's manifest,
/// written as `manifest.json.KEYID.minisig` beside it: created under a temporary name without
/// following links and exclusively through the bundle directory's handle, synced, then renamed
/// into place without replacing anything. The volumes are not touched.
pub fn cosign(a: CosignArgs, ui: &Ui) -> Result<Output> {
    if super::verify_file::is_file(&a.bundle) {
        return super::sign::cosign_file(a, ui);
    }
    let dir = &a.bundle;
    let (m, bytes, primary) = open::read_unverified(dir)?;
    let Some(primary) = primary else {
        return Err(Error::MissingSignature {
            path: dir.join(manifest::SIGNATURE_NAME),
        });
    };
    let key_file = secret::read(&a.key, a.password_file.as_deref())?;
    let key = secret::unlock(key_file, ui)?;
    let pk = key.public_key();
    let id = pk.key_id_hex();
    if primary.key_id == pk.key_id {
        return Err(usage(format!(
            "{}: already signed by key {id} ({}); a co-signature must come from another key",
            dir.display(),
            manifest::SIGNATURE_NAME
        )));
    }
    let name = open::cosignature_name(&id);
    let path = dir.join(&name);
    let dir_fd = airlock::durable::open_dir(dir)?;
    if rustix::fs::statat(
        &dir_fd,
        name.as_str(),
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    )
    .is_ok()
    {
        return Err(usage(format!(
            "{}: already exists: key {id} has co-signed this bundle",
            path.display()
        )));
    }
    let manifest::Signed {
        signature: sig,
        manifest_sha256: sha,
    } = manifest::sign(&key, &m, &bytes).map_err(|e| Error::Key {
        path: a.key.clone(),
        source: e,
    })?;
    super::files::write_new_at(&dir_fd, dir, &name, &sig)?;
    let mut out = Output::default();
    out.set("bundle", dir);
    out.set("signature", &path);
    out.set("signer", &id);
    out.set("manifest_sha256", &sha);
    out.line(format!(
        "OK   co-signed {} version {} with key {id} into {} (check with `minisign -Vm {} -x {} -p KEY.pub`)",
        m.name,
        m.version,
        path.display(),
        dir.join(manifest::MANIFEST_NAME).display(),
        path.display()
    ));
    let source = trust_source(&a.trust)?;
    if let Some(policy) = source.load_at(trust_clock(a.trust.assume_now.as_deref())?)? {
        match open::open_with(dir, &policy) {
            Ok(o) => out.line(format!(
                "the bundle now meets {}: signed by {}",
                policy.describe(),
                o.trust
                    .signers
                    .iter()
                    .map(|s| s.key.clone())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            Err(Error::SignatureThreshold { detail, .. }) => {
                out.line(format!("not yet enough signatures: {detail}"))
            }
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}
