//! The value scan's record (a manifest's `values`, FORMAT.md section 20), rendered for `pack`,
//! `inspect` and `check`: the clauses are the library's ([`airlock::check`]), which also
//! words a changed record as receipt drift.

use airlock::manifest::{FileValues, Values};

/// A whole record in one clause: `1 weight file, 12 tensors (12 checked): no NaN, …`.
pub(crate) fn summary(v: &Values) -> String {
    let files: Vec<&FileValues> = v.files.iter().collect();
    airlock::check::values_clause(&files)
}
