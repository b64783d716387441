//! `airlock keygen`: a minisign-compatible key pair.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use airlock::error::{Error, Result};
use airlock::keys::SecretKey;
use zeroize::Zeroizing;

use super::{Output, password_from_file};
use crate::cli::KeygenArgs;

fn with_suffix(prefix: &Path, suffix: &str) -> PathBuf {
    let mut s = prefix.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

fn ask_twice() -> Result<Zeroizing<Vec<u8>>> {
    if !std::io::stdin().is_terminal() && !std::io::stderr().is_terminal() {
        return Err(Error::Usage(
            "no terminal to ask for a password: pass --password-file FILE, or --unencrypted".into(),
        ));
    }
    let first = Zeroizing::new(
        rpassword::prompt_password("Password for the new secret key: ")
            .map_err(|e| Error::io("/dev/tty", e))?,
    );
    let second = Zeroizing::new(
        rpassword::prompt_password("Password (again): ").map_err(|e| Error::io("/dev/tty", e))?,
    );
    if *first != *second {
        return Err(Error::Usage(
            "the two passwords differ; nothing was written".into(),
        ));
    }
    if first.is_empty() {
        return Err(Error::Usage(
            "empty password; use --unencrypted to store the key without one".into(),
        ));
    }
    Ok(Zeroizing::new(first.as_bytes().to_vec()))
}

/// Checks where the pair will go before any password is asked or file written: the directory
/// must exist (a typo there is blamed on the directory, not on `PREFIX.key`), and each of
/// `PREFIX.pub` and `PREFIX.key` must be absent, or with `--force` a file it may replace.
fn check_destination(prefix: &Path, files: [&Path; 2], force: bool) -> Result<()> {
    let dir = match prefix.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(Error::io(
                dir,
                std::io::Error::from(std::io::ErrorKind::NotADirectory),
            ));
        }
        Err(e) => return Err(Error::io(dir, e)),
    }
    for p in files {
        match std::fs::symlink_metadata(p) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(p, e)),
            Ok(_) if !force => {
                return Err(Error::Usage(format!(
                    "{} already exists; pass --force to overwrite it",
                    p.display()
                )));
            }
            Ok(m) if !m.is_file() => {
                return Err(Error::Usage(format!(
                    "{} is not a regular file; --force replaces key files only: move it away first",
                    p.display()
                )));
            }
            Ok(_) => {}
        }
    }
    Ok(())
}

pub fn run(a: KeygenArgs) -> Result<Output> {
    let pub_path = with_suffix(&a.out, ".pub");
    let key_path = with_suffix(&a.out, ".key");
    check_destination(&a.out, [&pub_path, &key_path], a.force)?;
    if a.unencrypted && a.password_file.is_some() {
        return Err(Error::Usage(
            "--unencrypted and --password-file contradict each other".into(),
        ));
    }
    let password = if a.unencrypted {
        None
    } else if let Some(f) = &a.password_file {
        let p = password_from_file(f)?;
        if p.is_empty() {
            return Err(Error::Usage(format!(
                "{}: the password file's first line is empty",
                f.display()
            )));
        }
        Some(p)
    } else {
        Some(ask_twice()?)
    };
    let sk = SecretKey::generate().map_err(|e| Error::Key {
        path: key_path.clone(),
        source: e,
    })?;
    let pk = sk.public_key();
    if password.is_some() && std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        // scrypt at minisign's cost takes seconds and about 1 GiB: say why nothing happens.
        super::term::err_line(
            "airlock: encrypting the secret key (scrypt: a few seconds, about 1 GiB of memory)…",
        );
    }
    let sk_text = Zeroizing::new(
        sk.to_file_text(password.as_deref().map(|p| p.as_slice()))
            .map_err(|e| Error::Key {
                path: key_path.clone(),
                source: e,
            })?,
    );
    // Both files are complete under temporary names before either is renamed into place, so a
    // failure leaves the old pair (with --force) or nothing; never a new key without its .pub.
    airlock::signing::write_key_pair(
        (&key_path, sk_text.as_bytes()),
        (&pub_path, pk.to_file_text().as_bytes()),
        a.force,
    )?;
    let mut out = Output::default();
    out.set("key_id", pk.key_id_hex());
    out.set("public_key", &pub_path);
    out.set("secret_key", &key_path);
    out.set("encrypted", password.is_some());
    out.line(format!("key id:     {}", pk.key_id_hex()));
    out.line(format!(
        "public key: {} (give this to the targets' trust directories)",
        pub_path.display()
    ));
    out.line(format!(
        "secret key: {} (mode 0600, {}; keep it on the staging host)",
        key_path.display(),
        if password.is_some() {
            "password-protected"
        } else {
            "NOT encrypted"
        }
    ));
    Ok(out)
}
