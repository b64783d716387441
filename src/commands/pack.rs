//! `airlock pack`: resolve the options, check everything that needs no key, unlock the key,
//! then scan, pack and sign.

use std::path::Path;

use airlock::display::human;
use airlock::error::{Error, Result};
use airlock::manifest;
use airlock::pack::prepare::{self, CompressAsk, OmsAsk, Prepared};
use airlock::pack::{self, LeftChecks, Model, ModelSpec, PackOptions, ValueScan};
use airlock::parity::Ask;
use airlock::size::parse_size;

use super::Output;
use super::secret;
use super::ui::Ui;
use crate::cli::{CompressArg, PackArgs, RepoTypeArg};

/// The smallest `--volume-size`: one tar block header and some payload.
const MIN_VOLUME_SIZE: u64 = 4096;

pub(super) fn created_unix() -> Result<i64> {
    match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(v) => v.trim().parse().map_err(|_| {
            Error::Usage(format!(
                "SOURCE_DATE_EPOCH={v:?} is not a number of seconds"
            ))
        }),
        Err(_) => Ok(std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0)),
    }
}

/// The sizes and shapes `pack` takes from its flags, checked.
struct Shape {
    volume_size: u64,
    chunk_size: Option<u64>,
    parity: Option<Ask>,
}

fn shape(a: &PackArgs) -> Result<Shape> {
    let volume_size = match &a.volume_size {
        Some(s) => parse_size(s).map_err(|e| Error::Usage(format!("--volume-size {e}")))?,
        None => u64::MAX,
    };
    if volume_size < MIN_VOLUME_SIZE {
        return Err(Error::Usage(format!(
            "--volume-size must be at least {MIN_VOLUME_SIZE} bytes (for a FAT32 medium, use fat32)"
        )));
    }
    let parity = a
        .parity
        .as_deref()
        .map(pack::parity::parse_ask)
        .transpose()
        .map_err(|e| Error::Usage(format!("--parity {e}")))?;
    let chunk_size = a.chunk_size;
    if let Some(c) = chunk_size
        && (!(4096..=(1 << 30)).contains(&c) || !c.is_power_of_two())
    {
        return Err(Error::Usage(format!(
            "--chunk-size {c} is not a power of two from 4096 to 1073741824"
        )));
    }
    Ok(Shape {
        volume_size,
        chunk_size,
        parity,
    })
}

/// Where the model is, from the flags: a directory, one repository of the cache, or several
/// (`--hf-repo` repeated; `ORG/NAME@REV` names a revision).
fn model_spec(a: &PackArgs) -> Result<ModelSpec> {
    super::only_with(
        "--hf-repo",
        !a.hf_repo.is_empty(),
        &[
            ("--revision", a.revision.is_some()),
            ("--hf-cache", a.hf_cache.is_some()),
            ("--repo-type", a.repo_type.is_some()),
            ("--with-dependencies", a.with_dependencies),
        ],
    )?;
    let repo_type = a.repo_type.unwrap_or(RepoTypeArg::Model).as_str();
    let asks = prepare::repo_asks(&a.hf_repo, a.revision.as_deref(), repo_type)?;
    Ok(ModelSpec::of(a.model_dir.clone(), a.hf_cache.clone(), asks))
}

/// The compression `--compress` asks for (`auto` samples the model's large files).
fn compression(a: &PackArgs) -> CompressAsk {
    let workers = a.threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(1)
    });
    let level = a.level;
    match a.compress {
        CompressArg::None => CompressAsk::None,
        CompressArg::Zstd => CompressAsk::Zstd { level, workers },
        CompressArg::Auto => CompressAsk::Auto { level, workers },
    }
}

/// The model checks, rendered: every finding a warning, or with an error finding (unless
/// `--no-model-checks`) the findings as lines (the error that stops the pack is the caller's).
fn render_checks(p: &Prepared, out: &mut Output) {
    for path in &p.unchecked {
        out.warnings.push(format!(
            "model check: {path}: not checked, its path is too long for the format checks"
        ));
    }
    if p.ready.is_ok() {
        for f in &p.findings {
            out.warnings
                .push(format!("{}: {} ({})", f.path, f.problem, f.fix));
        }
    } else {
        // The findings are the detail behind the error: keep them.
        out.set("findings", &p.findings);
        for f in &p.findings {
            out.lines.extend(super::check::finding_lines(f));
        }
    }
}

/// What the preparation found before the model checks: the repositories added and, when the
/// bundle takes a delta's base's name, that and why (`--name` sets it).
fn render_prepared(a: &PackArgs, p: &Prepared, out: &mut Output) {
    out.warnings.extend(p.model.notes.iter().cloned());
    if !p.model.repos.is_empty() {
        out.set("dependencies_added", &p.dependencies_added);
        for d in &p.dependencies_added {
            out.line(format!(
                "added {d} from the cache: a packed model needs it (--with-dependencies)"
            ));
        }
    }
    out.set("name_from_base", p.name_from_base.is_some());
    if let Some(from) = &p.name_from_base {
        out.line(format!(
            "name {:?} taken from the base ({} version {}): the {} is {:?}, and a delta keeps its base's name (--name sets it)",
            p.name,
            a.base.as_deref().unwrap_or(std::path::Path::new("")).display(),
            from.version,
            if from.repository {
                "repository id"
            } else {
                "model directory's name"
            },
            from.own,
        ));
    }
    render_checks(p, out);
}

/// The OMS flags that need no secret key, for [`prepare::prepare`].
fn oms_ask(a: &PackArgs) -> OmsAsk {
    OmsAsk {
        signing_cert: a.oms_signing_cert.clone(),
        signing_chain: a.oms_signing_chain.clone(),
        trust: a.oms_trust.clone(),
        cert_chain: a.oms_cert_chain.clone(),
        signature: a.oms_signature.clone(),
    }
}

/// Packs in this order: options, then every check that needs no key (output path, key and
/// password files, then [`prepare::prepare`]: the source and its model checks), then the key
/// (the scrypt work and the password prompt), then the bundle. A typo is reported at once, not
/// after a password. The value scan needs every value, so it runs in the bundle's one read of
/// the model, after the key; the prompt says so.
pub fn run(a: PackArgs, ui: &Ui) -> Result<Output> {
    let shape = shape(&a)?;
    let spec = model_spec(&a)?;
    let created = created_unix()?;
    prepare::check_output(&a.output)?;
    let key_file = secret::read(&a.key, a.password_file.as_deref())?;
    let oms_key_file = match &a.oms_key {
        Some(k) => Some(read_oms_key(
            k,
            a.oms_password_file
                .as_deref()
                .or(a.password_file.as_deref()),
        )?),
        None => None,
    };
    let mut out = Output::default();
    let prepared = prepare::prepare(prepare::Request {
        model: spec,
        with_dependencies: a.with_dependencies,
        base: a.base.clone(),
        name: a.name.clone(),
        version: a.bundle_version,
        no_model_checks: a.no_model_checks,
        value_scan: !a.no_value_scan,
        compress: compression(&a),
        oms: oms_ask(&a),
        trust_update: a.trust_update.clone(),
    })?;
    render_prepared(&a, &prepared, &mut out);
    // Where the model checks' findings are among the warnings (render_checks): the findings of
    // the checks the scan left to the read pass join them there.
    let checks_end = out.warnings.len();
    let checks_start = match &prepared.ready {
        Ok(_) => checks_end - prepared.findings.len(),
        Err(_) => checks_end,
    };
    let Prepared {
        mut model,
        name,
        ready,
        findings: check_findings,
        ..
    } = prepared;
    let ready = match ready {
        Ok(r) => r,
        Err(e) => {
            out.error = Some(e);
            return Ok(out);
        }
    };
    if let Some(p) = &ready.publisher {
        out.warnings.extend(p.verified.notes.iter().cloned());
    }
    let ahead = ready.value_scan.and_then(value_scan_ahead);
    let key = secret::unlock_saying(key_file, ui, ahead.as_deref())?;
    let oms_emit = match oms_key_file {
        Some(f) => Some(unlock_oms_key(f, ui, &ready.oms_chain)?),
        None => None,
    };
    let keyed = ready.with_key(&model, &key.public_key())?;
    out.warnings.extend(keyed.notes.iter().cloned());
    let mut value_findings = Vec::new();
    let mut left_findings = Vec::new();
    let packed = pack::pack(
        &mut model,
        PackOptions {
            out: a.output.clone(),
            key: &key,
            name,
            version: a.bundle_version,
            compress: ready.compress,
            volume_size: shape.volume_size,
            chunk_size: shape.chunk_size,
            created_unix: created,
            warnings: ready.warnings,
            parity: shape.parity,
            base: keyed.base,
            trust_update: keyed.trust_update,
            values: (!a.no_value_scan).then_some(ValueScan {
                skip_errors: a.no_model_checks,
                findings: &mut value_findings,
            }),
            left_checks: LeftChecks {
                skip_errors: a.no_model_checks,
                findings: Some(&mut left_findings),
            },
            oms: airlock::oms::pack::Sealing {
                emit: oms_emit.map(|key| airlock::oms::pack::Emit {
                    key,
                    chain: ready.oms_chain,
                }),
                publisher: ready.publisher,
            },
        },
        ui,
    );
    // The model checks' findings, with those of the files the scan left to the read pass, in
    // the order the model checks give them (as had the scan checked every file).
    let mut all_checks = check_findings;
    if !left_findings.is_empty() {
        all_checks.extend(left_findings.iter().cloned());
        all_checks.sort_by(|a, b| (&a.path, a.code).cmp(&(&b.path, b.code)));
    }
    let packed = match packed {
        Ok(p) => p,
        // The left checks' errors stop the pack at the end of its read pass, before the value
        // scan's: rendered as a refusal of the model checks before the pack is.
        Err(e @ Error::ModelChecks { .. }) if airlock::inspect::has_errors(&left_findings) => {
            out.warnings.drain(checks_start..checks_end);
            out.set("findings", &all_checks);
            for f in &all_checks {
                out.lines.extend(super::check::finding_lines(f));
            }
            out.error = Some(e);
            return Ok(out);
        }
        // The value scan's errors stop the pack at the end of its read pass: the findings are
        // the detail behind the error, as for the model checks before it.
        Err(e @ Error::ModelChecks { .. }) => {
            out.set("findings", &value_findings);
            for f in &value_findings {
                out.lines.extend(super::check::finding_lines(f));
            }
            out.error = Some(e);
            return Ok(out);
        }
        Err(e) => return Err(e),
    };
    if !left_findings.is_empty() {
        let lines = all_checks
            .iter()
            .map(|f| format!("{}: {} ({})", f.path, f.problem, f.fix));
        out.warnings.splice(checks_start..checks_end, lines);
    }
    for f in &value_findings {
        out.warnings
            .push(format!("{}: {} ({})", f.path, f.problem, f.fix));
    }
    out.warnings.extend(packed.notes.iter().cloned());
    render(
        &mut out,
        &a,
        &model,
        &packed,
        &key.public_key(),
        shape.parity,
    );
    Ok(out)
}

/// What the password prompt says is still to come, when the model has weight files (`files`
/// of them, `bytes` in all): the value scan reads every value, so it runs in the pack's one
/// read of the model, after the key is unlocked (issue 33 item 11: NaN and Inf were reported
/// only after the password and the whole read, unannounced).
fn value_scan_ahead((files, bytes): (u64, u64)) -> Option<String> {
    (files > 0).then(|| {
        format!(
            "after the password, the pack reads the model once; the value scan of its {files} weight file{} ({}: NaN, Inf, zero-filled regions) runs in that read and reports at its end",
            if files == 1 { "" } else { "s" },
            human(bytes)
        )
    })
}

/// What a finished pack reports.
fn render(
    out: &mut Output,
    a: &PackArgs,
    model: &Model,
    packed: &pack::Packed,
    signer: &airlock::keys::PublicKey,
    parity: Option<Ask>,
) {
    let m = &packed.manifest;
    out.set("bundle", &a.output);
    out.set("name", &m.name);
    out.set("version", m.version);
    out.set("manifest_sha256", &packed.manifest_sha256);
    out.set("signer", signer.key_id_hex());
    out.set("files", m.totals.files);
    out.set("file_bytes", m.totals.file_bytes);
    out.set(
        "volumes",
        m.volumes
            .iter()
            .map(|v| serde_json::json!({"name": v.name, "size": v.size}))
            .collect::<Vec<_>>(),
    );
    out.set("volume_bytes", m.totals.volume_bytes);
    out.set("compression", &m.compression.algorithm);
    if let Some(v) = &m.values {
        out.set("values", &v.files);
        out.line(format!(
            "OK   values scanned: {}",
            super::values::summary(v)
        ));
    }
    render_provenance(out, model, m);
    render_delta(out, packed);
    out.line(format!(
        "OK   packed {} version {} into {}: {} files ({}) in {} volume(s) ({}), signed by {}",
        m.name,
        m.version,
        a.output.display(),
        m.totals.files,
        human(m.totals.file_bytes),
        m.volumes.len(),
        human(m.totals.volume_bytes),
        signer.key_id_hex()
    ));
    render_parity(out, m, parity);
}

/// Where the model came from and what vouches for it: the hub's blob names, the OMS signatures,
/// the trust roots carried.
fn render_provenance(out: &mut Output, model: &Model, m: &airlock::manifest::Manifest) {
    if !m.repos.is_empty() {
        out.set("hf_cache", &model.root);
        let repos: Vec<serde_json::Value> = m
            .repos
            .iter()
            .map(|r| {
                serde_json::json!({
                    "path": r.path,
                    "repo_id": r.source.repo_id,
                    "repo_type": r.source.repo_type,
                    "revision": r.source.revision,
                    "commit": r.source.commit,
                    "files": r.source.etags.len(),
                })
            })
            .collect();
        out.set("repos", repos);
        for r in &m.repos {
            out.line(format!(
                "repository {} ({}) at {} = commit {}: {} files under {}/",
                r.source.repo_id,
                r.source.repo_type,
                airlock::display::escape(&r.source.revision),
                r.source.commit,
                r.source.etags.len(),
                r.path
            ));
        }
    }
    if let (Some(hf), Some(src)) = (&model.hf, &m.source) {
        out.set("hf_cache", &hf.cache);
        out.set("snapshot", &hf.snapshot.dir);
        out.set(
            "source",
            serde_json::json!({
                "repo_id": src.repo_id,
                "repo_type": src.repo_type,
                "revision": src.revision,
                "commit": src.commit,
            }),
        );
        out.set("listing_checked", hf.snapshot.listed);
        // A commit airlock installed into this cache (it left a receipt for it) has blob names
        // that airlock's install wrote from its bundle's signed manifest, not a download's
        // (issue 33 item 9).
        let receipt = prepare::installed_receipt(hf, &src.commit);
        out.set(
            "blob_names_from",
            if receipt.is_some() {
                "airlock-install"
            } else {
                "hub"
            },
        );
        let whose = match &receipt {
            Some(dir) => format!(
                "names airlock's own install wrote from the signed manifest of the bundle it installed, receipt {}",
                dir.display()
            ),
            None => "the hash the hub published".to_string(),
        };
        out.line(format!(
            "OK   every file of {} {} at commit {} matched its blob name ({whose})",
            src.repo_type, src.repo_id, src.commit
        ));
    }
    if let Some(o) = &m.oms {
        if let Some(p) = &o.publisher {
            out.set("oms_publisher", p);
            out.line(format!(
                "OK   the publisher's OMS signature {} verified ({} {}): every file matches it; recorded in the manifest",
                p.signature, p.method, p.signer
            ));
        }
        if let Some(s) = &o.signature {
            out.set("oms_signature", s);
            out.line(format!(
                "OK   OMS signature {} made from the packed digests; unpack places it in the install",
                s.name
            ));
        }
    }
    if let Some(t) = &m.trust_update {
        let versions: Vec<u64> = t.roots.iter().map(|r| r.version).collect();
        out.set("trust_update", &versions);
        out.line(format!(
            "OK   carries trust root version(s) {} for the targets to adopt on unpack",
            versions
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
}

/// What a delta bundle carries and takes from its base.
fn render_delta(out: &mut Output, packed: &pack::Packed) {
    let m = &packed.manifest;
    if let (Some(base), Some(c)) = (&m.base, &packed.delta) {
        out.set(
            "base",
            serde_json::json!({"name": base.name, "version": base.version, "manifest_sha256": base.manifest_sha256}),
        );
        out.set("delta", c);
        out.line(format!(
            "OK   delta from version {}: {} file(s) carried ({}), {} taken from the base ({}), {} patched ({} rebuilt from {} of patches)",
            base.version,
            c.carried_files,
            human(c.carried_bytes),
            c.copied_files,
            human(c.copied_bytes),
            c.patched_files,
            human(c.patched_bytes),
            human(c.patch_bytes)
        ));
    }
}

/// The parity written, what it survives, and a warning when it is not what was asked or
/// cannot rebuild a lost volume.
fn render_parity(out: &mut Output, m: &airlock::manifest::Manifest, parity: Option<Ask>) {
    if let (Some(p), Some(advice)) = (&m.parity, pack::parity::advice(m, parity)) {
        let bytes: u64 = p.volumes.iter().map(|v| v.size).sum();
        out.set(
            "parity",
            serde_json::json!({
                "data_units": p.data_units,
                "recovery_units": p.recovery_units,
                "stripes": p.stripes,
                "volumes": p.volumes.len(),
                "bytes": bytes,
                "percent": advice.percent,
                "unit_size": advice.unit_size,
                "survives": advice.survives,
            }),
        );
        out.line(format!(
            "OK   parity: {} volume(s) ({}, {:.1}% of the data) in units of {}; it rebuilds {}",
            p.volumes.len(),
            human(bytes),
            advice.percent,
            human(advice.unit_size),
            survives_text(&advice.survives)
        ));
        if let Some(Ask::Percent(asked)) = parity
            && (advice.percent - asked).abs() > 1.0
        {
            out.warnings.push(format!(
                "parity is {:.1}% of the data, not the {asked}% asked: parity comes in units of {} and the bundle has only {} of them (a small bundle)",
                advice.percent,
                human(advice.unit_size),
                m.data_units()
            ));
        }
        if let Some(one) = advice.one_volume_percent {
            out.warnings.push(format!(
                "{} cannot rebuild a lost data volume: the largest of the {} is {:.1}% of the data; --parity 1vol ({one:.1}% of parity) would{}",
                parity.map_or_else(|| "this parity".to_string(), |a| format!("--parity {a}")),
                m.volumes.len(),
                largest_volume_percent(m),
                match advice.volume_size_for_one {
                    Some(s) => format!(", or --volume-size {} with the same share", size_arg(s)),
                    None => String::new(),
                }
            ));
        }
    }
}

/// What parity rebuilds, in operator terms: "any 1 whole data volume lost, or up to 24.0 MiB of
/// contiguous damage".
fn survives_text(s: &airlock::parity::Survives) -> String {
    let mut parts = Vec::new();
    if s.volumes >= 1 {
        parts.push(format!(
            "any {} whole data volume{} lost",
            s.volumes,
            if s.volumes == 1 { "" } else { "s" }
        ));
    }
    if s.per_volume_bytes > 0 {
        parts.push(format!(
            "up to {} of contiguous damage in every volume at once",
            human(s.per_volume_bytes)
        ));
    }
    parts.push(format!(
        "up to {} of contiguous damage in one place",
        human(s.contiguous_bytes)
    ));
    parts.join(", or ")
}

/// The largest data volume's share of the data, in percent.
fn largest_volume_percent(m: &manifest::Manifest) -> f64 {
    let largest = m.volumes.iter().map(|v| v.size).max().unwrap_or(0);
    largest as f64 * 100.0 / m.totals.volume_bytes.max(1) as f64
}

/// A size as `--volume-size` takes it: whole MiB as `NM`, whole KiB as `NK`, else bytes.
fn size_arg(bytes: u64) -> String {
    if bytes.is_multiple_of(1 << 20) {
        format!("{}M", bytes >> 20)
    } else if bytes.is_multiple_of(1024) {
        format!("{}K", bytes >> 10)
    } else {
        bytes.to_string()
    }
}

/// An OMS key file read (bounded) and where its password comes from, not yet decrypted.
struct OmsKeyFile {
    path: std::path::PathBuf,
    text: zeroize::Zeroizing<String>,
    source: secret::Password,
}

/// Reads `--oms-key` and, when it is encrypted, its password file; refuses before any real
/// work when it is encrypted and there is neither a password file nor a terminal.
fn read_oms_key(path: &Path, password_file: Option<&Path>) -> Result<OmsKeyFile> {
    let text = zeroize::Zeroizing::new(airlock::oms::read_text(path)?);
    let encrypted = airlock::oms::keys::is_encrypted(&text);
    let source = secret::password_source(path, encrypted, password_file, "--oms-password-file")?;
    // Parse now (without decrypting) so a wrong kind of key is reported before any work.
    if !encrypted && let Err(e) = airlock::oms::SigningKey::from_pem(&text, None) {
        return Err(oms_key_error(path, e));
    }
    Ok(OmsKeyFile {
        path: path.to_path_buf(),
        text,
        source,
    })
}

fn oms_key_error(path: &Path, e: airlock::oms::keys::KeyLoadError) -> Error {
    Error::OmsKey {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

/// Decrypts the OMS key (asking on the terminal when there is no password file) and checks it
/// against the signing certificate, if any.
fn unlock_oms_key(f: OmsKeyFile, ui: &Ui, chain: &[Vec<u8>]) -> Result<airlock::oms::SigningKey> {
    use airlock::oms::keys::KeyLoadError;
    let key = secret::unlock_with(
        &f.path,
        &f.source,
        ui,
        None,
        "decrypting the OMS key…",
        |password| airlock::oms::SigningKey::from_pem(&f.text, password),
        |e| matches!(e, KeyLoadError::WrongPassword),
        |e| oms_key_error(&f.path, e),
    )?;
    if let Some(cert) = chain.first() {
        let c = airlock::oms::x509::Cert::from_der(cert)
            .map_err(|why| oms_key_error(&f.path, KeyLoadError::Invalid(why.to_string())))?;
        if c.ecdsa_key().ok().as_ref() != Some(&key.verifying_key()) {
            return Err(Error::OmsKey {
                path: f.path.clone(),
                reason: format!(
                    "is not the key of the signing certificate {:?} (--oms-signing-cert)",
                    c.subject()
                ),
            });
        }
    }
    Ok(key)
}
