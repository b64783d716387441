//! The value scan's record (a manifest's `values`, FORMAT.md section 20), rendered for `pack`,
//! `inspect` and `check`.

use airlock::display::grouped;
use airlock::inspect::values::{FileScan, RULES, Summary};
use airlock::manifest::{FileValues, Values};
use airlock::pack::file_values;
use airlock::receipt::Drift;

/// What the counts of `files` say, as a clause: `no NaN, no Inf, no zero-filled region; 2
/// all-zero and 65 constant tensors`.
pub(crate) fn counts(files: &[&FileValues]) -> String {
    let sum = |f: fn(&FileValues) -> u64| files.iter().map(|v| f(v)).sum::<u64>();
    let (nan, inf, regions) = (sum(|v| v.nan), sum(|v| v.inf), sum(|v| v.zero_regions));
    let (zero, constant) = (sum(|v| v.zero_tensors), sum(|v| v.constant_tensors));
    let mut parts = [
        match nan {
            0 => "no NaN".to_string(),
            n => format!("{} NaN", grouped(n)),
        },
        match inf {
            0 => "no Inf".to_string(),
            n => format!("{} Inf", grouped(n)),
        },
        match regions {
            0 => "no zero-filled region".to_string(),
            1 => "1 zero-filled region".to_string(),
            n => format!("{} zero-filled regions", grouped(n)),
        },
    ]
    .join(", ");
    let flagged: Vec<String> = [(zero, "all-zero"), (constant, "constant")]
        .into_iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| {
            format!(
                "{} {what} tensor{}",
                grouped(n),
                if n == 1 { "" } else { "s" }
            )
        })
        .collect();
    if !flagged.is_empty() {
        parts.push_str(&format!("; {}", flagged.join(", ")));
    }
    parts
}

/// A whole record in one clause: `1 weight file, 12 tensors (12 checked): no NaN, …`.
pub(crate) fn summary(v: &Values) -> String {
    let files: Vec<&FileValues> = v.files.iter().collect();
    let tensors: u64 = files.iter().map(|f| f.tensors).sum();
    let checked: u64 = files.iter().map(|f| f.checked).sum();
    format!(
        "{} weight file{}, {} tensors ({} checked): {}",
        files.len(),
        if files.len() == 1 { "" } else { "s" },
        grouped(tensors),
        grouped(checked),
        counts(&files)
    )
}

/// What the value scans of `check` counted, as a clause like [`summary`].
pub(crate) fn scanned(summaries: &[&Summary]) -> String {
    let files: Vec<FileValues> = summaries.iter().map(|s| file_values("", s)).collect();
    let refs: Vec<&FileValues> = files.iter().collect();
    let tensors: u64 = files.iter().map(|f| f.tensors).sum();
    let checked: u64 = files.iter().map(|f| f.checked).sum();
    format!(
        "{} weight file{}, {} tensors ({} checked): {}",
        files.len(),
        if files.len() == 1 { "" } else { "s" },
        grouped(tensors),
        grouped(checked),
        counts(&refs)
    )
}

/// The files of an install whose counts differ from what the pack recorded (`values`, made by
/// the same rules), as receipt drift: the signed record says what was true at pack time, so
/// a NaN that is not in it arrived later. A file the scan could not read as a model now (its
/// header changed) is drift too; the receipt comparison reports its content.
pub(crate) fn changed(recorded: &Values, scans: &[(String, FileScan)]) -> Vec<Drift> {
    if recorded.rules != RULES {
        return Vec::new();
    }
    let mut out = Vec::new();
    for r in &recorded.files {
        let now = scans
            .iter()
            .find(|(p, _)| *p == r.path)
            .map(|(p, s)| file_values(p, &s.summary));
        let detail = match &now {
            Some(now) if now == r => continue,
            Some(now) => format!(
                "values changed since packing: the signed record says {}; now {}",
                counts(&[r]),
                counts(&[now])
            ),
            None => format!(
                "values could not be scanned (the header no longer reads as {}); the signed record says {}",
                r.format,
                counts(&[r])
            ),
        };
        out.push(Drift {
            path: r.path.clone(),
            kind: "values",
            detail,
        });
    }
    out
}
