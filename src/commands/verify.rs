//! `airlock verify BUNDLE…`: the library's verdict ([`airlock::verify::verify`]) on each
//! bundle, rendered; a single signed file is checked by `verify_file`.

use std::path::PathBuf;

use airlock::bundle::open;
use airlock::display::human;
use airlock::error::{Error, Result};
use airlock::verify::{self, DeepOutcome, Depth};

use super::inspect::delta_summary;
use super::ui::Ui;
use super::{
    Output, damage_map, load_trust, recorded_clause, recorded_error, recorded_errors, report_trust,
    verify_file,
};
use crate::cli::TrustArgs;

/// `airlock verify`: the library's verdict, rendered.
pub(super) fn run(
    bundles: Vec<PathBuf>,
    trust: &TrustArgs,
    deep: bool,
    cached: bool,
    ui: &Ui,
) -> Result<Output> {
    let trust = load_trust(trust)?;
    let bundle = bundles[0].clone();
    if verify_file::is_file(&bundle) {
        if bundles.len() > 1 {
            return Err(Error::Usage(format!(
                "{} is one file, checked by its signature alone: give it alone",
                bundle.display()
            )));
        }
        if deep {
            return Err(Error::Usage(format!(
                "--deep checks the files inside a bundle; {} is one file, checked by its signature alone",
                bundle.display()
            )));
        }
        return verify_file::run(&bundle, &trust);
    }
    let mut out = Output::default();
    let mut opened = open::open_media(&bundles, &trust)?;
    opened.media.set_read(if cached {
        airlock::verify::MediumRead::Cached
    } else {
        airlock::verify::MediumRead::Device
    });
    report_trust(&mut out, &trust, &opened.trust);
    if let Some(u) = &opened.trust.update {
        out.line(format!(
            "the bundle carries trust root version {} (verified against version {}); unpack applies it, verify leaves the root file as it is",
            u.to(),
            u.from
        ));
    }
    let depth = if deep { Depth::Deep } else { Depth::Volumes };
    let verdict = verify::verify(&opened, depth, ui);
    let m = &opened.manifest;
    out.warnings
        .extend(verdict.signature_warnings.iter().cloned());
    out.warnings.extend(recorded_errors(m));
    out.set("bundle", &bundle);
    out.set("media", opened.media.dirs());
    out.set("name", &m.name);
    out.set("version", m.version);
    out.set("format_version", m.format_version);
    out.set("signer", opened.signer.key_id_hex());
    out.set("manifest_sha256", &opened.manifest_sha256);
    out.set("deep", deep);
    out.set("recorded_findings", &verdict.recorded_warnings);
    for s in verdict.stray_others() {
        out.warnings.push(format!("{}: {}", s.name, s.problem()));
    }
    out.set("volumes_checked", verdict.volumes_checked);
    out.set("bad_volumes", &verdict.bad_volumes);
    out.set("parity_volumes_checked", verdict.parity_checked);
    out.set("bad_parity_volumes", &verdict.bad_parity);
    // Whether the damage can be rebuilt from parity: null when there is nothing to rebuild.
    let damaged = !verdict.is_ok();
    out.set(
        "repairable",
        damaged.then(|| verdict.repair.as_ref().is_some_and(|r| r.repairable)),
    );
    out.set("parity_assessment", &verdict.repair);
    out.set(
        "stray_volumes",
        verdict.stray_volumes().map(|s| &s.name).collect::<Vec<_>>(),
    );
    if let Some(outcome) = &verdict.deep {
        match outcome {
            DeepOutcome::Completed { bad_files } => {
                out.set("deep_completed", true);
                out.set("files_checked", m.files.len());
                out.set("bad_files", bad_files);
            }
            DeepOutcome::StoppedAtDamage(reason) => {
                out.set("deep_completed", false);
                out.set("bad_files", Vec::<String>::new());
                out.warnings
                    .push(format!("the deep check stopped at the damage: {reason}"));
            }
            DeepOutcome::Failed(_) => {
                out.set("deep_completed", false);
                out.set("bad_files", Vec::<String>::new());
            }
        }
    }
    if let Some(base) = &m.base {
        delta_summary(&mut out, m, base);
        if deep {
            let c = airlock::delta::Counts::of(m);
            out.warnings.push(format!(
                "delta: the stream and its {} patch(es) were checked against their digests; the {} file(s) taken from or rebuilt against the base ({} of {}) can only be checked on install, against {} version {}",
                c.patched_files,
                c.copied_files + c.patched_files,
                human(c.copied_bytes + c.patched_bytes),
                human(m.totals.file_bytes),
                base.name,
                base.version
            ));
        }
    }
    report_reads(&mut out, &verdict);
    super::inspect::repos_summary(&mut out, m);
    if verdict.is_ok() {
        let recorded_errors = m.warnings.iter().filter(|w| recorded_error(w)).count();
        let recorded = recorded_clause(m, Some(&bundle));
        out.line(format!(
            "OK   {} version {}: signature by {}, {} volume(s), {}{}{}{}{}",
            m.name,
            m.version,
            opened.signer.key_id_hex(),
            m.volumes.len(),
            human(m.totals.volume_bytes),
            match &m.parity {
                Some(p) => format!(
                    " + {} parity volume(s), {}",
                    p.volumes.len(),
                    human(p.volumes.iter().map(|v| v.size).sum())
                ),
                None => String::new(),
            },
            if deep && m.base.is_some() {
                let c = airlock::delta::Counts::of(m);
                format!(
                    ", {} carried file(s) and {} patch(es) checked",
                    c.carried_files, c.patched_files
                )
            } else if deep {
                format!(", {} files checked", m.files.len())
            } else {
                String::new()
            },
            if !verdict.reads.is_empty() && verdict.all_from_medium() {
                ", read from the medium"
            } else if verdict.reads.is_empty() {
                ""
            } else {
                ", NOT all read from the medium (see the warnings)"
            },
            match recorded_errors {
                0 => String::new(),
                1 => "; 1 model-check finding recorded at pack time (see the warning)".into(),
                n => format!("; {n} model-check findings recorded at pack time (see the warnings)"),
            } + &recorded.map(|r| format!("; {r}")).unwrap_or_default()
        ));
        return Ok(out);
    }
    // On a terminal, a map of the damage first (issue 25 item 13); pipes get the list alone.
    if let (Some(map), Some(cols)) = (
        &verdict.damage,
        damage_map::terminal_width(&console::Term::stdout()),
    ) && let Some(lines) = damage_map::draw(map, cols)
    {
        out.lines.extend(lines);
    }
    for p in verdict.bad_volumes.iter().chain(&verdict.bad_parity) {
        out.line(format!("BAD  {}: {}", p.volume, p.problem));
    }
    if let Some(r) = &verdict.repair {
        out.line(r.describe());
    }
    for s in verdict.stray_volumes() {
        out.line(format!("BAD  {}: {}", s.name, s.problem()));
    }
    for f in verdict.bad_files() {
        out.line(format!("BAD  file {f}: content fails its sha256"));
    }
    out.error = verdict.into_error();
    Ok(out)
}

/// Where verify's bytes came from: `read_from` ("medium", "page-cache" or "mixed") and each
/// volume not read from the medium with why, in the JSON; a warning per reason otherwise
/// (issue 32: a green verify of the page cache says nothing about the stick).
fn report_reads(out: &mut Output, verdict: &verify::Verdict) {
    let from_medium = verdict
        .reads
        .iter()
        .filter(|r| r.read_from.from_medium())
        .count();
    let summary = if from_medium == verdict.reads.len() {
        "medium"
    } else if from_medium == 0 {
        "page-cache"
    } else {
        "mixed"
    };
    out.set("read_from", summary);
    out.set("volumes_read_from_medium", from_medium);
    let others: Vec<_> = verdict
        .reads
        .iter()
        .filter(|r| !r.read_from.from_medium())
        .collect();
    out.set("not_read_from_medium", &others);
    let mut by_reason: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    for r in &others {
        by_reason
            .entry(r.why.as_deref().unwrap_or("not from the medium"))
            .or_default()
            .push(&r.volume);
    }
    for (why, volumes) in by_reason {
        out.warnings.push(format!(
            "{} not read from the medium: {why}",
            match volumes.as_slice() {
                [one] => format!("{one} was"),
                [first, .., last] => format!("{} volumes ({first} to {last}) were", volumes.len()),
                [] => continue,
            }
        ));
    }
    for n in &verdict.copy_notes {
        out.warnings.push(n.clone());
    }
}
