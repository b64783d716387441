//! `airlock push` and `airlock unpack oci://...`: the registry side of the fleet workflow.

use airlock::error::{Error, Result, human};
use airlock::install::UnpackOptions;
use airlock::install_oci;
use airlock::oci::{self, Reference, Registry, RegistryOptions};
use airlock::trust::Policy;

use super::{
    Output, apply_trust_update, load_trust, open, recorded_warnings, replace_note, report_install,
    report_trust,
};
use crate::cli::{PushArgs, RegistryArgs, UnpackArgs};
use crate::commands::ui::Ui;

fn registry_options(a: &RegistryArgs) -> Result<RegistryOptions> {
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
    let opened = open::open_with(&a.bundle, &trust)?;
    let mut out = Output::default();
    report_trust(&mut out, &trust, &opened.trust);
    out.warnings.extend(opened.warnings.iter().cloned());
    out.warnings.extend(recorded_warnings(&opened.manifest));
    // Connecting uploads nothing: a registry that is down or refuses the credentials fails
    // before the (long) full verification.
    let registry = Registry::connect(&reference, &opts, true)?;
    let pushed = oci::push::push(&opened, &registry, ui)?;
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
    Ok(out)
}

/// `airlock unpack oci://... --dest DIR`.
pub fn unpack_oci(a: UnpackArgs, trust: Policy, ui: &Ui) -> Result<Output> {
    let text = a.bundle.to_string_lossy().into_owned();
    let reference = Reference::parse(&text)?;
    let Some(dest) = a.dest else {
        return Err(Error::Usage(
            "unpack from a registry installs into a directory (--dest); --hf-cache is not supported with oci:// yet".into(),
        ));
    };
    let opts = registry_options(&a.registry)?;
    let registry = Registry::connect(&reference, &opts, false)?;
    let opened = install_oci::open_with(&registry, &trust)?;
    if opened.trust.update.is_some() {
        airlock::trust::update::check_writable(&trust)?;
    }
    let mut out = Output::default();
    report_trust(&mut out, &trust, &opened.trust);
    out.warnings.extend(opened.warnings.iter().cloned());
    let m = &opened.manifest;
    out.warnings.extend(recorded_warnings(m));
    out.set("name", &m.name);
    out.set("version", m.version);
    out.set("signer", opened.signer.key_id_hex());
    out.set("reference", reference.to_string());
    let opts = UnpackOptions {
        dest,
        replace: a.replace,
        allow_downgrade: a.allow_downgrade,
        check_space: !a.no_space_check,
        trust: opened.trust.policy.clone().unwrap_or_else(|| trust.clone()),
    };
    replace_note(&mut out, &opts);
    let installed = install_oci::unpack(&opened, &registry, &opts, ui)?;
    report_install(&mut out, &installed.notes);
    out.set("findings", &installed.notes.findings);
    out.set("dest", &installed.dest);
    out.set("replaced", installed.replaced);
    out.set("previous_version", installed.previous_version);
    out.set("files", m.totals.files);
    out.set("bytes", m.totals.file_bytes);
    out.line(format!(
        "OK   installed {} version {} from {} into {} ({} files, {})",
        m.name,
        m.version,
        reference,
        installed.dest.display(),
        m.totals.files,
        human(m.totals.file_bytes)
    ));
    apply_trust_update(&mut out, &trust, &opened.trust)?;
    Ok(out)
}
