//! `airlock unpack`: resolve the source (a bundle directory or an `oci://` reference) and the
//! target (`--dest`, `--hf-cache` or `--oci-layout`), run the library's unpack, render.

use std::path::{Path, PathBuf};

use serde_json::Value;

use airlock::bundle::open::{self, BundleDir, Opened};
use airlock::display::human;
use airlock::error::{Error, HintPaths, Result};
use airlock::oci::{Reference, Registry};
use airlock::pipeline::Source;
use airlock::source::BundleOnDisk;
use airlock::source::registry::{self, RegistrySource};
use airlock::trust::Policy;
use airlock::unpack::{
    self, HfInstalled, HfUnpackOptions, InstallNotes, Installed, LayoutOptions, LayoutWritten,
    SnapshotState, To, UnpackOptions, Unpacked,
};

use super::push::registry_options;
use super::{Output, apply_trust_update, load_trust, only_with, recorded_findings, report_trust};
use crate::cli::UnpackArgs;
use crate::commands::ui::Ui;

/// `airlock unpack`.
pub fn run(a: UnpackArgs, ui: &Ui) -> Result<Output> {
    only_with(
        "--hf-cache",
        a.hf_cache.is_some(),
        &[
            ("--hf-repo", a.hf_repo.is_some()),
            ("--revision", a.revision.is_some()),
            ("--repo-type", a.repo_type.is_some()),
        ],
    )?;
    let trust = load_trust(&a.trust)?;
    if a.require_tag_version && !registry::is_reference(&a.bundle) {
        return Err(Error::Usage(
            "--require-tag-version is for an oci:// reference: a bundle directory has no tag"
                .into(),
        ));
    }
    if registry::is_reference(&a.bundle) {
        if !a.more.is_empty() {
            return Err(Error::Usage(
                "a registry reference is one source: give no other bundle directory with it".into(),
            ));
        }
        let text = a.bundle.to_string_lossy().into_owned();
        let reference = Reference::parse(&text)?;
        let registry = Registry::connect(&reference, &registry_options(&a.registry)?, false)?;
        let source = RegistrySource::open(&registry, &trust)?;
        let m = &source.opened().manifest;
        let mismatch = reference.tag_mismatch(&m.name, m.version);
        if let Some(why) = &mismatch
            && a.require_tag_version
        {
            return Err(Error::Artifact {
                reference: reference.to_string(),
                reason: format!("{why}; refused (--require-tag-version), nothing installed"),
            });
        }
        let mut out = start(source.opened(), &trust)?;
        out.warnings.extend(mismatch);
        out.set("reference", reference.to_string());
        let to = target(&a, source.opened(), &trust, &mut out)?;
        let from = format!(" from {reference}");
        finish(&source, None, to, out, &trust, (&from, None), ui)
    } else {
        let mut dirs = vec![a.bundle.clone()];
        dirs.extend(a.more.iter().cloned());
        let opened = open::open_media(&dirs, &trust)?;
        let mut out = start(&opened, &trust)?;
        let to = target(&a, &opened, &trust, &mut out)?;
        let bundles: Vec<&std::path::Path> = dirs.iter().map(PathBuf::as_path).collect();
        let hints = super::hint_paths(&bundles, &a.trust);
        finish(
            &BundleOnDisk(&opened),
            Some(&opened),
            to,
            out,
            &trust,
            ("", Some((&a.bundle, &hints))),
            ui,
        )
    }
}

/// Where to unpack, from the flags. Receipts (a replaced install's, a delta's base) are
/// checked with the root the bundle leads to, when it carries an update, and its earlier
/// versions.
fn target(a: &UnpackArgs, opened: &Opened, trust: &Policy, out: &mut Output) -> Result<To> {
    let policy = opened.trust.policy.clone().unwrap_or_else(|| trust.clone());
    let check_space = !a.no_space_check;
    Ok(if let Some(cache) = &a.hf_cache {
        To::HfCache(HfUnpackOptions {
            cache: std::path::absolute(cache).map_err(|e| Error::io(cache, e))?,
            repo_id: a.hf_repo.clone(),
            repo_type: a.repo_type.map(|t| t.as_str().to_string()),
            revision: a.revision.clone(),
            check_space,
            trust: policy,
            resume: !a.no_resume,
            repos: a.repos.clone(),
        })
    } else if let Some(layout) = &a.oci_layout {
        To::Layout(LayoutOptions {
            resume: !a.no_resume,
            ..LayoutOptions::parse(layout, check_space)
        })
    } else {
        let opts = UnpackOptions {
            dest: a
                .dest
                .clone()
                .expect("clap requires --dest without --hf-cache or --oci-layout"),
            replace: a.replace,
            allow_downgrade: a.allow_downgrade,
            check_space,
            trust: policy,
            parent_mode: a.parent_mode,
            resume: !a.no_resume,
            repos: a.repos.clone(),
        };
        replace_note(out, &opts);
        To::Dir(opts)
    })
}

/// The output every unpack starts with, once the signature verified.
fn start(opened: &Opened, trust: &Policy) -> Result<Output> {
    if opened.trust.update.is_some() {
        airlock::trust::update::check_writable(trust)?;
    }
    let mut out = Output::default();
    report_trust(&mut out, trust, &opened.trust);
    out.warnings.extend(opened.warnings.iter().cloned());
    let m = &opened.manifest;
    out.set("name", &m.name);
    out.set("version", m.version);
    out.set("signer", opened.signer.key_id_hex());
    Ok(out)
}

/// A note when the install being replaced was signed under an earlier trust root version.
fn replace_note(out: &mut Output, opts: &UnpackOptions) {
    if !opts.replace || !airlock::receipt::exists(&opts.dest) {
        return;
    }
    if let Ok(r) = airlock::receipt::open(&opts.dest, Some(&opts.trust))
        && let Some(v) = r.vouched_by
    {
        out.warnings.push(format!(
            "the install being replaced in {} was signed under trust root version {v}, not the version in force",
            opts.dest.display()
        ));
    }
}

/// Installs, and says what was installed. `from`: the source as the result line names it (` from
/// oci://...`, or nothing for a bundle directory) and, for a bundle directory, its path and
/// what a repair of it would be given; `disk`, the bundle directory the source reads.
fn finish(
    source: &dyn Source,
    disk: Option<&BundleDir>,
    to: To,
    mut out: Output,
    trust: &Policy,
    (from, bundle): (&str, Option<(&std::path::Path, &HintPaths)>),
    ui: &Ui,
) -> Result<Output> {
    let opened = source.opened();
    let m = &opened.manifest;
    // What is installed: the whole bundle, or the part `--repo` chose (its files and bytes).
    let chosen: &[String] = match &to {
        To::Dir(o) => &o.repos,
        To::HfCache(o) => &o.repos,
        To::Layout(_) => &[],
    };
    let part = (!chosen.is_empty())
        .then(|| m.choose_repos(chosen).ok())
        .flatten()
        .and_then(|c| m.select_repos(&c));
    let totals = part.as_ref().map_or(&m.totals, |p| &p.totals);
    let done = unpack::unpack(source, to, ui)?;
    report_install(
        &mut out,
        done.notes(),
        &m.warnings,
        bundle.map(|(_, h)| h.repair_step()),
    );
    out.set("findings", &done.notes().findings);
    out.set("repaired_volumes", &done.notes().repaired_volumes);
    out.set("resumed", &done.notes().resumed);
    out.set("volume_bytes_read", done.notes().volume_bytes_read);
    out.set("files", totals.files);
    out.set("bytes", totals.file_bytes);
    // Volumes are read from the medium at no cost (their cached pages dropped at the open):
    // which were, and which could not be (a tmpfs, a network file system).
    let reads = disk.map(|d| d.media.reads()).unwrap_or_default();
    if !reads.is_empty() {
        let past: Vec<_> = reads.iter().filter(|r| r.read_from.past_cache()).collect();
        out.set(
            "read_from",
            if past.len() == reads.len() {
                "medium"
            } else if past.is_empty() {
                "page-cache"
            } else {
                "mixed"
            },
        );
        out.set(
            "not_read_from_medium",
            reads
                .iter()
                .filter(|r| !r.read_from.past_cache())
                .collect::<Vec<_>>(),
        );
    }
    let what = format!("{} version {}{from}", m.name, m.version);
    let size = format!("{} files, {}", totals.files, human(totals.file_bytes));
    let oms_at = airlock::oms::carried_name(m).and_then(|name| match &done {
        // Part of a bundle of several: the OMS signature covers the whole tree, not placed.
        Unpacked::Dir(i) if !i.part.is_empty() => None,
        Unpacked::Dir(i) => Some(i.dest.join(name).display().to_string()),
        Unpacked::HfCache(i) => Some(
            i.repo_folder
                .join(airlock::paths::RECEIPT_DIR)
                .join("receipts")
                .join(&i.commit)
                .join(name)
                .display()
                .to_string(),
        ),
        Unpacked::Layout(_) => Some(format!("{name}, a layer of the artifact")),
    });
    // A directory install holds airlock's own files beside the publisher's: the stock
    // verifiers must be told to leave them out (issue 33 item 1).
    let publisher_dest = match &done {
        Unpacked::Dir(i) if !i.part.is_empty() => None,
        Unpacked::Dir(i) => Some(Some(i.dest.clone())),
        Unpacked::Layout(_) => Some(None),
        Unpacked::HfCache(_) => None,
    };
    match done {
        Unpacked::Dir(i) => render_dir(&mut out, &i, &what, &size),
        Unpacked::HfCache(i) => {
            let size = format!("{} files ({})", totals.files, human(totals.file_bytes));
            render_hf(&mut out, &i, &what, &size)
        }
        Unpacked::Layout(l) => render_layout(&mut out, &l, &what, &size),
    }
    if let Some(at) = oms_at {
        out.set("oms_signature", &at);
        out.line(format!(
            "OK   the OMS signature is at {at} (model_signing verify, or airlock check --oms-trust, checks the install with it)"
        ));
    }
    if let Some(p) = m.oms.as_ref().and_then(|o| o.publisher.as_ref()) {
        out.set("oms_publisher", p);
        out.line(format!(
            "OK   the publisher's OMS signature {} was verified when packing ({} {})",
            p.signature, p.method, p.signer
        ));
        match &publisher_dest {
            Some(Some(dest)) => publisher_verify_line(&mut out, m, p, dest),
            Some(None) => {
                // The artifact carries airlock's files as layers with their paths: whatever
                // extracts it holds them beside the model.
                let ignore = publisher_ignore_paths(m);
                out.set("oms_publisher_ignore_paths", &ignore);
                out.line(format!(
                    "     an extraction of this artifact holds airlock's {} beside the model, which the publisher did not sign: a stock verifier of {} there needs them left out (--ignore-paths; a ModelValidation's ignorePaths; RUNBOOK 3.5)",
                    ignore.join(" and "),
                    p.signature
                ));
            }
            None => {}
        }
    }
    recorded_findings(&mut out, m, bundle.map(|(b, _)| b));
    apply_trust_update(&mut out, trust, &opened.trust)?;
    Ok(out)
}

/// The paths of a directory install that the publisher's OMS signature does not list, as the
/// model root's names: the receipt, and the site's signature when it sits beside the
/// publisher's. A stock verifier fails on them unless told to ignore them (RUNBOOK 3.5).
pub(crate) fn publisher_ignore_paths(m: &airlock::manifest::Manifest) -> Vec<String> {
    let mut paths = vec![airlock::paths::RECEIPT_DIR.to_string()];
    let publisher = m.oms.as_ref().and_then(|o| o.publisher.as_ref());
    if let Some(name) = airlock::oms::carried_name(m)
        && publisher.is_none_or(|p| p.signature != name)
    {
        paths.push(name.to_string());
    }
    paths
}

/// Says how the stock `model_signing` verifies the publisher's signature on the install at
/// `dest`: with airlock's own files left out, which it names (JSON
/// `oms_publisher_ignore_paths`).
fn publisher_verify_line(
    out: &mut Output,
    m: &airlock::manifest::Manifest,
    p: &airlock::manifest::OmsPublisher,
    dest: &Path,
) {
    let ignore = publisher_ignore_paths(m);
    out.set("oms_publisher_ignore_paths", &ignore);
    let dest = std::path::absolute(dest).unwrap_or_else(|_| dest.to_path_buf());
    let (method, trust) = if p.method == "certificate" {
        ("certificate", "--certificate_chain PUBLISHER-CA.pem")
    } else {
        ("key", "--public_key PUBLISHER.pub")
    };
    let flags: Vec<String> = ignore
        .iter()
        .map(|i| format!(" --ignore-paths {}", super::shell_word(&dest.join(i))))
        .collect();
    out.line(format!(
        "     airlock's {} {} not signed by the publisher: `model_signing verify {method} {} --signature {} {trust}{}` checks the publisher's signature here (a ModelValidation lists them in ignorePaths; RUNBOOK 3.5)",
        ignore.join(" and "),
        if ignore.len() == 1 { "is" } else { "are" },
        super::shell_word(&dest),
        super::shell_word(&dest.join(&p.signature)),
        flags.concat(),
    ));
}

fn render_dir(out: &mut Output, i: &Installed, what: &str, size: &str) {
    out.set("dest", &i.dest);
    out.set("replaced", i.replaced);
    out.set("previous_version", i.previous_version);
    if i.part.is_empty() {
        out.line(format!(
            "OK   installed {what} into {} ({size})",
            i.dest.display()
        ));
    } else {
        let ids: Vec<String> = i
            .part
            .iter()
            .map(|f| match airlock::hfcache::parse_repo_folder(f) {
                Some((t, id)) => format!("{t} {id}"),
                None => f.clone(),
            })
            .collect();
        out.set("part", &i.part);
        out.line(format!(
            "OK   installed {} of {what} into {} ({}; the rest of the bundle was read and hashed, not installed)",
            ids.join(", "),
            i.dest.display(),
            if i.part.len() == 1 {
                "its files at the top of the directory".to_string()
            } else {
                "each in its folder".to_string()
            }
        ));
    }
    out.set("created_parents", &i.notes.created_parents);
    out.set(
        "created_parents_mode",
        i.notes
            .created_parents_mode
            .as_ref()
            .map(|m| format!("{:04o}", m.mode)),
    );
    if let (false, Some(mode)) = (
        i.notes.created_parents.is_empty(),
        &i.notes.created_parents_mode,
    ) {
        let made: Vec<String> = i
            .notes
            .created_parents
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        let why = match &mode.from {
            None => "as --parent-mode asked".to_string(),
            Some(from) => format!(
                "taken from {}, the nearest existing parent, without write for group and others; --parent-mode MODE chooses another",
                if from == std::path::Path::new(".") {
                    "the current directory".to_string()
                } else {
                    from.display().to_string()
                }
            ),
        };
        out.line(format!(
            "created {} for the destination with mode {:04o} ({why})",
            made.join(", "),
            mode.mode
        ));
    }
}

fn render_hf(out: &mut Output, installed: &HfInstalled, what: &str, size: &str) {
    let state = |s: SnapshotState| match s {
        SnapshotState::Created => "new snapshot",
        SnapshotState::Merged => "added to the existing snapshot",
        SnapshotState::Unchanged => "the snapshot already held every file",
    };
    if !installed.repos.is_empty() {
        out.line(format!(
            "OK   installed {what} into the Hugging Face cache {}: {size}, {} repositories, all or none:",
            installed.cache.display(),
            installed.repos.len()
        ));
        for r in &installed.repos {
            for b in &r.blobs_repaired {
                out.warnings.push(format!(
                    "{} did not hash to its name and was replaced by the verified copy from the bundle",
                    b.display()
                ));
            }
            if let Some(old) = &r.previous_commit {
                out.warnings.push(format!(
                    "{}: refs/{} named commit {old:?}; it now names {}",
                    r.repo_id, r.revision, r.commit
                ));
            }
            out.line(format!(
                "     {} {} (revision {}, commit {}): {}, {} new blob(s), {} reused{}",
                r.repo_type,
                r.repo_id,
                r.revision,
                r.commit,
                state(r.snapshot_state),
                r.blobs_written,
                r.blobs_reused,
                match r.blobs_repaired.len() {
                    0 => String::new(),
                    n => format!(", {n} repaired (replaced by the verified copy)"),
                },
            ));
        }
        if let Value::Object(fields) = serde_json::to_value(installed).expect("serialisable") {
            out.json.extend(fields);
        }
        return;
    }
    for b in &installed.blobs_repaired {
        out.warnings.push(format!(
            "{} did not hash to its name and was replaced by the verified copy from the bundle",
            b.display()
        ));
    }
    if installed.commit_derived {
        out.warnings.push(format!(
            "the bundle was packed from a directory, so it has no hub commit: installed as commit {} (the first 40 hex digits of its manifest's sha256)",
            installed.commit
        ));
    }
    if installed.ref_path.is_none() {
        out.warnings.push(
            "no ref was written: the revision is the commit itself, so huggingface_hub finds it only by commit id; pass --revision main (or another branch or tag) to name it".to_string(),
        );
    }
    if let Some(old) = &installed.previous_commit {
        out.warnings.push(format!(
            "refs/{} named commit {old:?}; it now names {}",
            installed.revision, installed.commit
        ));
    }
    if let Value::Object(fields) = serde_json::to_value(installed).expect("serialisable") {
        out.json.extend(fields);
    }
    let state = state(installed.snapshot_state);
    out.line(format!(
        "OK   installed {what} into the Hugging Face cache {} as {} {} (revision {}, commit {}): {size}; {}, {} new blob(s), {} reused{}",
        installed.cache.display(),
        installed.repo_type,
        installed.repo_id,
        installed.revision,
        installed.commit,
        state,
        installed.blobs_written,
        installed.blobs_reused,
        match installed.blobs_repaired.len() {
            0 => String::new(),
            n => format!(", {n} repaired (replaced by the verified copy)"),
        },
    ));
}

fn render_layout(out: &mut Output, l: &LayoutWritten, what: &str, size: &str) {
    for b in &l.blobs_repaired {
        out.warnings.push(format!(
            "{} did not hash to its name and was replaced by the verified copy",
            b.display()
        ));
    }
    if let Some(prev) = &l.previous_digest {
        out.warnings.push(format!(
            "the tag {} named {prev}; it now names {}",
            l.tag, l.manifest_digest
        ));
    }
    if let Value::Object(fields) = serde_json::to_value(l).expect("serialisable") {
        out.json.extend(fields);
    }
    out.line(format!(
        "OK   wrote {what} into the OCI image layout {} as tag {} ({size}; image manifest {}): {} new blob(s), {} reused",
        l.layout.display(),
        l.tag,
        l.manifest_digest,
        l.blobs_written,
        l.blobs_reused,
    ));
}

/// What every install reports: stale staging it removed or left, and the model-check findings
/// on the installed files that are not the ones `recorded` at pack time (those are counted by
/// [`recorded_findings`], not repeated).
pub(crate) fn report_install(
    out: &mut Output,
    notes: &InstallNotes,
    recorded: &[airlock::manifest::Warning],
    repair: Option<String>,
) {
    for p in &notes.unchecked {
        out.warnings.push(format!(
            "model check: {p}: not checked, its path is too long for the format checks (its bytes match the signed manifest)"
        ));
    }
    if let Some(r) = &notes.resumed {
        out.line(format!(
            "     resumed: {} files ({} bytes) kept from the interrupted install, each proven against the signed manifest{}",
            r.files,
            r.bytes,
            match (&r.from_volume, &r.from_entry) {
                (Some(v), Some(e)) => format!("; read from volume {v} on ({e:?} first)"),
                _ => "; the stream was read from its start".to_string(),
            }
        ));
    }
    for p in &notes.cleaned_stale {
        out.warnings.push(format!(
            "removed stale staging directory {} left by an interrupted unpack",
            p.display()
        ));
    }
    for (p, why) in &notes.stale_skipped {
        out.warnings.push(format!(
            "staging directory {} looks abandoned but {why}",
            p.display()
        ));
    }
    let was_recorded = |f: &&airlock::inspect::Finding| {
        recorded
            .iter()
            .any(|w| w.path == f.path && w.code == f.code && w.problem == f.problem)
    };
    for f in notes.findings.iter().filter(|f| !was_recorded(f)) {
        out.warnings.push(format!(
            "model check: {}: {} ({})",
            f.path, f.problem, f.fix
        ));
    }
    if !notes.repaired_volumes.is_empty() {
        out.warnings.push(format!(
            "damaged volume(s) {} were rebuilt from parity as they were read; the installed files match the signed digests; to fix the bundle itself, {}",
            notes.repaired_volumes.join(", "),
            repair.unwrap_or_else(|| "run `airlock repair` on it".to_string())
        ));
    }
}
