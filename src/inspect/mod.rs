//! TEMPORARY shim: replaced by the model-format checks module (in progress).
use serde::Serialize;
use std::io;
use std::path::Path;
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Warning,
    Error,
}
#[derive(Clone, Debug, Serialize)]
pub struct Finding {
    pub severity: Severity,
    pub code: &'static str,
    pub path: String,
    pub problem: String,
    pub fix: String,
}
pub fn has_errors(findings: &[Finding]) -> bool {
    findings.iter().any(|f| f.severity == Severity::Error)
}
pub fn check_tree(root: &Path) -> io::Result<Vec<Finding>> {
    std::fs::metadata(root).map(|_| Vec::new())
}
