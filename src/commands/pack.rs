//! `airlock pack`: scan, check, pack, sign.

use std::io::IsTerminal;
use std::path::Path;

use airlock::bundle::write::{self, Compress, PackOptions};
use airlock::error::{Error, Result, human};
use airlock::keys::SecretKey;
use airlock::manifest;
use airlock::progress::Progress;
use airlock::scan;
use airlock::size::parse_size;
use zeroize::Zeroizing;

use super::{Output, password_from_file};
use crate::cli::{CompressArg, PackArgs};

/// Loads a secret key, asking for its password when it is encrypted.
pub fn load_secret_key(path: &Path, password_file: Option<&Path>) -> Result<SecretKey> {
    let text = Zeroizing::new(std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?);
    let key_err = |e| Error::Key {
        path: path.to_path_buf(),
        source: e,
    };
    let encrypted = SecretKey::is_encrypted(&text).map_err(key_err)?;
    let password = if !encrypted {
        None
    } else if let Some(f) = password_file {
        Some(password_from_file(f)?)
    } else if std::io::stdin().is_terminal() || std::io::stderr().is_terminal() {
        let p = rpassword::prompt_password(format!("Password for {}: ", path.display()))
            .map_err(|e| Error::io("/dev/tty", e))?;
        Some(Zeroizing::new(p.into_bytes()))
    } else {
        return Err(Error::Usage(format!(
            "{} is encrypted and there is no terminal to ask for its password: pass --password-file FILE",
            path.display()
        )));
    };
    SecretKey::parse(&text, password.as_deref().map(|p| p.as_slice())).map_err(key_err)
}

fn created_unix() -> Result<i64> {
    match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(v) => v.trim().parse().map_err(|_| {
            Error::Usage(format!(
                "SOURCE_DATE_EPOCH={v:?} is not a number of seconds"
            ))
        }),
        Err(_) => Ok(std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0)),
    }
}

pub fn run(a: PackArgs, ui: &dyn Progress) -> Result<Output> {
    let volume_size = match &a.volume_size {
        Some(s) => parse_size(s).map_err(Error::Usage)?,
        None => u64::MAX,
    };
    if volume_size < 4096 {
        return Err(Error::Usage(
            "--volume-size must be at least 4096 bytes".into(),
        ));
    }
    let name = match &a.name {
        Some(n) => n.clone(),
        None => std::fs::canonicalize(&a.model_dir)
            .map_err(|e| Error::io(&a.model_dir, e))?
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("model")
            .to_string(),
    };
    manifest::check_name(&name).map_err(|why| Error::Usage(format!("--name {why}")))?;
    let created = created_unix()?;
    let key = load_secret_key(&a.key, a.password_file.as_deref())?;
    let entries = scan::scan(&a.model_dir, &a.model_dir)?;
    let mut out = Output::default();
    let warnings =
        match super::check::model_checks_for_pack(&a.model_dir, a.no_model_checks, &mut out) {
            Ok(w) => w,
            Err(e) => {
                // Keep the findings in the output: they say what to fix.
                out.error = Some(e);
                return Ok(out);
            }
        };
    let workers = a.threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(1)
    });
    let compress = match a.compress {
        CompressArg::None => Compress::None,
        CompressArg::Zstd => Compress::Zstd {
            level: a.level,
            workers,
        },
    };
    let packed = write::pack(
        PackOptions {
            entries,
            out: a.output.clone(),
            key: &key,
            name,
            version: a.bundle_version,
            compress,
            volume_size,
            chunk_size: manifest::DEFAULT_CHUNK_SIZE,
            created_unix: created,
            warnings,
            source: None,
        },
        ui,
    )?;
    let m = &packed.manifest;
    out.set("bundle", &a.output);
    out.set("name", &m.name);
    out.set("version", m.version);
    out.set("manifest_sha256", &packed.manifest_sha256);
    out.set("signer", key.public_key().key_id_hex());
    out.set("files", m.totals.files);
    out.set("file_bytes", m.totals.file_bytes);
    out.set(
        "volumes",
        m.volumes
            .iter()
            .map(|v| serde_json::json!({"name": v.name, "size": v.size}))
            .collect::<Vec<_>>(),
    );
    out.set("volume_bytes", m.totals.volume_bytes);
    out.line(format!(
        "OK   packed {} version {} into {}: {} files ({}) in {} volume(s) ({}), signed by {}",
        m.name,
        m.version,
        a.output.display(),
        m.totals.files,
        human(m.totals.file_bytes),
        m.volumes.len(),
        human(m.totals.volume_bytes),
        key.public_key().key_id_hex()
    ));
    Ok(out)
}
