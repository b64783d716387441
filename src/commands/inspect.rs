//! `airlock inspect BUNDLE`: what a bundle's manifest says, read without verifying its
//! signature (`--sha256sums`: the files' digests in `sha256sum` form).

use std::path::Path;

use serde_json::json;

use airlock::bundle::open;
use airlock::display::human;
use airlock::error::Result;

use super::{Output, recorded_warnings, values};

/// `airlock inspect`: the manifest, unverified.
pub(super) fn run(bundle: &Path, sha256sums: bool) -> Result<Output> {
    let (m, bytes, sig) = open::read_unverified(bundle)?;
    let mut out = Output::default();
    if sha256sums {
        for f in &m.files {
            out.line(format!("{}  {}", f.sha256, f.path));
        }
        out.set("sha256sums", out.lines.clone());
        return Ok(out);
    }
    use sha2::Digest;
    out.set("name", &m.name);
    out.set("version", m.version);
    out.set("created", &m.created);
    out.set("signer", sig.as_ref().map(|s| s.key_id_hex()));
    out.set("signature_verified", false);
    out.set("manifest_sha256", hex::encode(sha2::Sha256::digest(&bytes)));
    out.set("compression", &m.compression);
    out.set("totals", &m.totals);
    out.set(
        "volumes",
        m.volumes
            .iter()
            .map(|v| match &v.sha256 {
                Some(sha) => json!({"name": v.name, "size": v.size, "sha256": sha}),
                None => json!({"name": v.name, "size": v.size}),
            })
            .collect::<Vec<_>>(),
    );
    out.set("directories", &m.directories);
    out.set("files", &m.files);
    if let Some(src) = &m.source {
        out.set("source", src);
    }
    repos_summary(&mut out, &m);
    out.warnings.extend(recorded_warnings(&m));
    out.line(format!("name:        {}", m.name));
    out.line(format!("version:     {}", m.version));
    out.line(format!("created:     {}", m.created));
    out.line(format!(
        "signer:      {} (not verified; use `airlock verify`)",
        sig.as_ref()
            .map_or("NONE (no manifest.json.minisig)".into(), |s| s.key_id_hex())
    ));
    if let Some(src) = &m.source {
        out.line(format!(
            "source:      Hugging Face {} {}, revision {}, commit {}",
            src.repo_type, src.repo_id, src.revision, src.commit
        ));
    }
    if let Some(base) = &m.base {
        delta_summary(&mut out, &m, base);
    }
    if let Some(v) = &m.values {
        out.set("values", v);
        out.line(format!("values:      {}", values::summary(v)));
    }
    out.line(format!(
        "compression: {}{}",
        m.compression.algorithm,
        m.compression
            .level
            .map(|l| format!(" level {l}"))
            .unwrap_or_default()
    ));
    out.line(format!(
        "contents:    {} files, {} directories, {}",
        m.totals.files,
        m.totals.directories,
        human(m.totals.file_bytes)
    ));
    out.line(format!(
        "volumes:     {} ({})",
        m.volumes.len(),
        human(m.totals.volume_bytes)
    ));
    for v in &m.volumes {
        let digest = v.sha256.as_deref().map_or_else(
            || format!("{} chunk digest(s)", v.chunks.len()),
            str::to_string,
        );
        out.line(format!("  {}  {:>14}  {digest}", v.name, v.size));
    }
    if let Some(p) = &m.parity {
        out.set("parity", p);
        out.line(format!(
            "parity:      {} volume(s) ({}), {} of {} units per stripe, {} stripes ({})",
            p.volumes.len(),
            human(p.volumes.iter().map(|v| v.size).sum()),
            p.recovery_units,
            p.data_units + p.recovery_units,
            p.stripes,
            p.algorithm
        ));
        for v in &p.volumes {
            out.line(format!(
                "  {}  {:>14}  {} chunk digest(s)",
                v.name,
                v.size,
                v.chunks.len()
            ));
        }
    }
    out.line("files:".to_string());
    for f in &m.files {
        out.line(format!(
            "  {:>14}  {}{}{}",
            f.size,
            f.path,
            if f.executable { " (executable)" } else { "" },
            match (&f.from, f.patch()) {
                (None, _) => String::new(),
                (Some(fr), None) => format!(" (from the base: {})", fr.path),
                (Some(fr), Some((size, _))) => format!(
                    " (patched from the base's {}: {size}-byte {} patch)",
                    fr.path,
                    fr.map.as_deref().unwrap_or("?")
                ),
            }
        ));
    }
    if m.files.is_empty() {
        out.line("  (none)".to_string());
    }
    Ok(out)
}

/// The `base` of a delta and how its files travel, for verify and inspect.
pub(super) fn delta_summary(
    out: &mut Output,
    m: &airlock::manifest::Manifest,
    base: &airlock::manifest::Base,
) {
    let c = airlock::delta::Counts::of(m);
    out.set("base", base);
    out.set("delta", c);
    out.line(format!(
        "base:        delta of {} version {} (manifest sha256 {})",
        base.name, base.version, base.manifest_sha256
    ));
    out.line(format!(
        "delta:       {} file(s) carried ({}), {} taken from the base ({}), {} patched ({} from {} of patches)",
        c.carried_files,
        human(c.carried_bytes),
        c.copied_files,
        human(c.copied_bytes),
        c.patched_files,
        human(c.patched_bytes),
        human(c.patch_bytes)
    ));
}

/// The repositories of a bundle of several (FORMAT.md section 14.4): JSON `repos` (each one's
/// directory, id, type, revision, commit and file count) and a line each; the model directory
/// beside them, if any, as JSON `dir` (its name, file count and bytes) and a line.
pub(super) fn repos_summary(out: &mut Output, m: &airlock::manifest::Manifest) {
    if m.repos.is_empty() {
        return;
    }
    let listed: Vec<serde_json::Value> = m
        .repos
        .iter()
        .enumerate()
        .map(|(i, r)| {
            json!({
                "path": r.path,
                "repo_id": r.source.repo_id,
                "repo_type": r.source.repo_type,
                "revision": r.source.revision,
                "commit": r.source.commit,
                "files": m.repo_files(i).len(),
                "file_bytes": m.repo_files(i).iter().map(|f| f.size).sum::<u64>(),
            })
        })
        .collect();
    out.set("repos", listed);
    // The model directory beside them (`dir`): its files are the ones of no repository.
    if let Some(d) = &m.dir {
        let (files, bytes) = m
            .files
            .iter()
            .filter(|f| m.in_dir(&f.path))
            .fold((0u64, 0u64), |(n, b), f| (n + 1, b + f.size));
        out.set(
            "dir",
            json!({"path": d.path, "files": files, "file_bytes": bytes}),
        );
        out.line(format!(
            "directory:   {}/: {files} files ({})",
            airlock::display::escape(&d.path),
            human(bytes)
        ));
    }
    for (i, r) in m.repos.iter().enumerate() {
        let files = m.repo_files(i);
        out.line(format!(
            "repository:  Hugging Face {} {}, revision {}, commit {}: {} files ({}) under {}/",
            r.source.repo_type,
            r.source.repo_id,
            airlock::display::escape(&r.source.revision),
            r.source.commit,
            files.len(),
            human(files.iter().map(|f| f.size).sum()),
            r.path
        ));
    }
}
