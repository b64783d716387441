//! `airlock repair`: the library's repair, rendered.

use airlock::bundle::open;
use airlock::error::Result;
use airlock::repair::{self, RepairOptions};

use super::{Output, load_trust, recorded_findings};
use crate::cli::RepairArgs;
use crate::commands::ui::Ui;

/// Repairs the bundle in place, or into `-o OUT`.
pub fn run(a: RepairArgs, ui: &Ui) -> Result<Output> {
    let trust = load_trust(&a.trust)?;
    let mut out = Output::default();
    let opened = open::open_with(&a.bundle, &trust)?;
    let mut from = a.more.clone();
    if !a.more.is_empty() {
        if a.output.is_none() {
            return Err(airlock::error::Error::Usage(format!(
                "a bundle spread over several media is repaired into one new directory: add -o OUT (repairing in place would write the volumes of the other media into {})",
                a.bundle.display()
            )));
        }
        // The other media are copies to take volumes from: every volume, wherever it is,
        // goes into OUT.
        // Two bundles mixed are refused here, before anything is read.
        let mut dirs = vec![a.bundle.clone()];
        dirs.extend(a.more.iter().cloned());
        open::open_media(&dirs, &trust)?;
        from.extend(a.from.iter().cloned());
    } else {
        from = a.from.clone();
    }
    super::report_trust(&mut out, &trust, &opened.trust);
    out.warnings.extend(opened.warnings.iter().cloned());
    let opts = RepairOptions {
        out: a.output.clone(),
        from,
    };
    let done = repair::repair(&opened, &opts, &trust, ui, &|map| ui.show_damage(map))?;
    for p in &done.cleaned_stale {
        out.warnings.push(format!(
            "removed stale work directory {} left by an interrupted repair",
            p.display()
        ));
    }
    for (p, why) in &done.stale_skipped {
        out.warnings.push(format!(
            "work directory {} looks abandoned but {why}",
            p.display()
        ));
    }
    for (copy, why) in &done.copies_skipped {
        out.warnings
            .push(format!("{}: {why}; not used", copy.display()));
    }
    out.set("bundle", &done.bundle);
    out.set("repaired_volumes", &done.volumes);
    out.set("chunks_from_copies", done.chunks_from_copies);
    out.set("chunks_from_parity", done.chunks_from_parity);
    out.set(
        "copies_skipped",
        done.copies_skipped
            .iter()
            .map(|(p, _)| p)
            .collect::<Vec<_>>(),
    );
    if done.volumes.is_empty() {
        out.line(match &a.output {
            Some(o) => format!(
                "OK   nothing to repair: every volume is intact; copied the bundle to {}",
                o.display()
            ),
            None => "OK   nothing to repair: every volume is intact".to_string(),
        });
    } else {
        out.line(format!(
            "OK   repaired {} in {} ({} chunk(s) from other copies, {} rebuilt from parity); every repaired chunk matches its signed digest",
            done.volumes.join(", "),
            done.bundle.display(),
            done.chunks_from_copies,
            done.chunks_from_parity
        ));
    }
    recorded_findings(&mut out, &opened.manifest, Some(&a.bundle));
    Ok(out)
}
