//! `airlock push`: the library's push, rendered.

use airlock::display::human;
use airlock::error::{Error, Result};
use airlock::oci::{Reference, Registry, RegistryOptions};

use super::{Output, load_trust, open, recorded_findings, report_trust};
use crate::cli::{PushArgs, RegistryArgs};
use crate::commands::ui::Ui;

pub(super) fn registry_options(a: &RegistryArgs) -> Result<RegistryOptions> {
    let ca_file = match &a.ca_file {
        Some(p) => Some(std::path::absolute(p).map_err(|e| Error::io(p, e))?),
        None => None,
    };
    Ok(RegistryOptions {
        plain_http: a.plain_http,
        ca_file,
    })
}

/// `airlock push BUNDLE oci://...`.
pub fn run(a: PushArgs, ui: &Ui) -> Result<Output> {
    let reference = Reference::parse(&a.target)?;
    if reference.is_digest() {
        return Err(Error::Usage(format!(
            "{}: push needs a tag to publish under, not a digest",
            a.target
        )));
    }
    let opts = registry_options(&a.registry)?;
    let trust = load_trust(&a.trust)?;
    let opened = open::open_media(&a.bundle, &trust)?;
    let mut out = Output::default();
    report_trust(&mut out, &trust, &opened.trust);
    out.warnings.extend(opened.warnings.iter().cloned());
    // Connecting uploads nothing: a registry that is down or refuses the credentials fails
    // before the (long) full verification.
    let registry = Registry::connect(&reference, &opts, true)?;
    let pushed = airlock::unpack::registry::push(&opened, &registry, ui)?;
    let m = &opened.manifest;
    out.set("name", &m.name);
    out.set("version", m.version);
    out.set("signer", opened.signer.key_id_hex());
    if let serde_json::Value::Object(fields) = serde_json::to_value(&pushed).expect("json") {
        out.json.extend(fields);
    }
    out.line(format!(
        "OK   published {} version {} as {} ({} layers; uploaded {} layer(s), {}; {} blob(s) already there)",
        m.name,
        m.version,
        pushed.reference,
        pushed.layers,
        pushed.uploaded_files.len(),
        human(pushed.uploaded_bytes),
        pushed.skipped_blobs,
    ));
    recorded_findings(&mut out, m, a.bundle.first().map(|b| b.as_path()));
    Ok(out)
}
