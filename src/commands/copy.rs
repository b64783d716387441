//! `airlock copy`: the library's copy onto media, rendered.

use airlock::bundle::open;
use airlock::copy::{self, CopyOptions};
use airlock::display::human;
use airlock::error::Result;

use super::{Output, load_trust, recorded_findings};
use crate::cli::CopyArgs;
use crate::commands::ui::Ui;

/// Verifies the bundle's signature, then copies it onto the media and reads every volume back.
pub fn run(a: CopyArgs, ui: &Ui) -> Result<Output> {
    let trust = load_trust(&a.trust)?;
    let mut out = Output::default();
    let opened = open::open_with(&a.bundle, &trust)?;
    super::report_trust(&mut out, &trust, &opened.trust);
    out.warnings.extend(opened.warnings.iter().cloned());
    let opts = CopyOptions {
        media: a.media.clone(),
    };
    let done = copy::copy(&opened, &opts, ui)?;
    for p in &done.removed_stale {
        out.warnings.push(format!(
            "removed the work directory {} of an interrupted copy",
            p.display()
        ));
    }
    out.set("bundle", &a.bundle);
    out.set("name", &done.name);
    out.set("version", done.version);
    out.set("media", &done.media);
    out.set("survives_losing", &done.survives_losing);
    out.set("removed_stale", &done.removed_stale);
    let count = done.media.len();
    for m in &done.media {
        let speed = |bytes: u64, secs: f64| {
            if secs > 0.0 && bytes > 0 {
                format!("{}/s", human((bytes as f64 / secs) as u64))
            } else {
                "-".to_string()
            }
        };
        out.line(format!(
            "OK   medium {} of {count}: {} holds {} ({}); written {} at {}{}, read back from {} at {}",
            m.number,
            m.dir.display(),
            volume_range(&m.volumes),
            human(m.bytes_read_back),
            human(m.bytes_written),
            speed(m.bytes_written, m.write_seconds),
            if m.kept.is_empty() {
                String::new()
            } else {
                format!(" ({} kept from an earlier copy)", volume_range(&m.kept))
            },
            if m.read_from.from_medium() {
                "the device"
            } else {
                "the page cache"
            },
            speed(m.bytes_read_back, m.read_seconds)
        ));
        if let Some(why) = &m.why {
            out.warnings.push(format!(
                "medium {}: the read-back may not have come from the device: {why}",
                m.number
            ));
        }
    }
    if let Some(s) = &done.survives_losing {
        out.line(match (s.len(), count) {
            (0, _) => "the parity cannot rebuild the loss of any one whole medium (it covers damage within the media; pack with more --parity to survive losing one)".to_string(),
            (n, c) if n == c => format!("the parity rebuilds the loss of any one of the {c} media"),
            _ => format!(
                "the parity rebuilds the loss of medium {} (not of the others)",
                s.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(", ")
            ),
        });
    }
    if count > 1 {
        out.line(format!(
            "label them \"{} {}, medium N of {count}\"; on the target: airlock verify|unpack {}",
            done.name,
            done.version,
            done.media
                .iter()
                .map(|m| m.dir.display().to_string())
                .collect::<Vec<_>>()
                .join(" ")
        ));
    }
    recorded_findings(&mut out, &opened.manifest, Some(&a.bundle));
    Ok(out)
}

/// `data.000` or `data.000 to data.004, parity.000` style: the names, runs shortened.
fn volume_range(names: &[String]) -> String {
    match names {
        [] => "no volume".to_string(),
        [one] => one.clone(),
        [first, .., last] => format!("{} volumes, {first} to {last}", names.len()),
    }
}
