//! The signing key for `pack` and `sign`, in two steps: [`read`] is cheap (read the file, check
//! it is a secret key, read the password file, make sure a password can be had at all) and runs
//! with the other cheap checks; [`unlock`] runs scrypt (seconds, about 1 GiB for minisign's
//! keys) and runs last, once everything that needs no key has been checked.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use airlock::error::{Error, Result};
use airlock::keys::{KeyError, SecretKey};
use zeroize::Zeroizing;

use super::password_from_file;
use super::ui::Ui;

/// How many times a password typed at the terminal may be wrong before the command gives up.
pub const PASSWORD_ATTEMPTS: u32 = 3;

/// A secret key file, read and decoded but not decrypted.
pub struct KeyFile {
    path: PathBuf,
    text: Zeroizing<String>,
    source: Password,
}

/// Where the password comes from.
pub(crate) enum Password {
    /// The key is not encrypted.
    NotNeeded,
    /// The first line of `--password-file`.
    File(PathBuf, Zeroizing<Vec<u8>>),
    /// Asked on the terminal.
    Terminal,
}

/// Reads `path` as a secret key and, when it is encrypted, the password file; refuses before any
/// real work when the key is encrypted and there is neither a password file nor a terminal.
pub fn read(path: &Path, password_file: Option<&Path>) -> Result<KeyFile> {
    let text = airlock::signing::read_secret_key_file(path)?;
    let encrypted = SecretKey::is_encrypted(&text).map_err(|e| Error::Key {
        path: path.to_path_buf(),
        source: e,
    })?;
    let source = password_source(path, encrypted, password_file, "--password-file")?;
    Ok(KeyFile {
        path: path.to_path_buf(),
        text,
        source,
    })
}

/// Decrypts the key, saying so on the progress display while scrypt runs. A password typed at
/// the terminal is asked again after a wrong one, up to [`PASSWORD_ATTEMPTS`] times.
pub fn unlock(key: KeyFile, ui: &Ui) -> Result<SecretKey> {
    unlock_saying(key, ui, None)
}

/// Where the password for the key at `path` comes from: none when it is not `encrypted`, the
/// first line of `password_file`, or the terminal; refused (naming `flag`) when there is none
/// of them. The one rule for airlock's minisign keys and the OMS signing key.
pub(crate) fn password_source(
    path: &Path,
    encrypted: bool,
    password_file: Option<&Path>,
    flag: &str,
) -> Result<Password> {
    Ok(match password_file {
        _ if !encrypted => Password::NotNeeded,
        Some(f) => Password::File(f.to_path_buf(), password_from_file(f)?),
        None if std::io::stdin().is_terminal() || std::io::stderr().is_terminal() => {
            Password::Terminal
        }
        None => {
            return Err(Error::Usage(format!(
                "{} is encrypted and there is no terminal to ask for its password: pass {flag} FILE",
                path.display()
            )));
        }
    })
}

/// [`unlock`], with `ahead` said on the terminal above the first password prompt: what the
/// command does once it has the key, so the operator knows what is still to come (issue 33
/// item 11: `pack` finds NaN and Inf only in the read that follows the password).
pub fn unlock_saying(key: KeyFile, ui: &Ui, ahead: Option<&str>) -> Result<SecretKey> {
    unlock_with(
        &key.path,
        &key.source,
        ui,
        ahead,
        "decrypting the key…",
        |password| SecretKey::parse(&key.text, password),
        |e| matches!(e, KeyError::WrongPassword),
        |e| Error::Key {
            path: key.path.clone(),
            source: e,
        },
    )
}

/// The one unlock of a secret key (airlock's minisign keys, the OMS signing key): `open` the
/// key with the password `source` gives, saying `note` on the progress display while it
/// decrypts. A password typed at the terminal is asked again after a wrong one (`is_wrong`),
/// up to [`PASSWORD_ATTEMPTS`] times; a wrong password is [`Error::WrongPassword`], any other
/// failure `fail`'s error.
#[allow(clippy::too_many_arguments)]
pub(crate) fn unlock_with<K, E>(
    path: &Path,
    source: &Password,
    ui: &Ui,
    ahead: Option<&str>,
    note: &str,
    open: impl Fn(Option<&[u8]>) -> std::result::Result<K, E>,
    is_wrong: impl Fn(&E) -> bool,
    fail: impl Fn(E) -> Error,
) -> Result<K> {
    let decrypt = |password: &[u8]| {
        ui.note(note);
        let opened = open(Some(password));
        ui.clear();
        opened
    };
    match source {
        Password::NotNeeded => open(None).map_err(fail),
        Password::File(file, password) => match decrypt(password) {
            Err(e) if is_wrong(&e) => Err(Error::WrongPassword {
                key: path.to_path_buf(),
                password_file: Some(file.clone()),
                attempts: 1,
            }),
            other => other.map_err(fail),
        },
        Password::Terminal => {
            for attempt in 1..=PASSWORD_ATTEMPTS {
                let shown = super::term::shown(&path.display().to_string());
                let prompt = match ahead {
                    Some(text) if attempt == 1 => {
                        format!(
                            "airlock: {}\nPassword for {shown}: ",
                            super::term::shown(text)
                        )
                    }
                    _ => format!("Password for {shown}: "),
                };
                let typed =
                    rpassword::prompt_password(prompt).map_err(|e| Error::io("/dev/tty", e))?;
                let typed = Zeroizing::new(typed.into_bytes());
                match decrypt(&typed) {
                    Err(e) if is_wrong(&e) && attempt < PASSWORD_ATTEMPTS => {
                        super::term::err_line("airlock: wrong password, try again");
                    }
                    Err(e) if is_wrong(&e) => break,
                    other => return other.map_err(fail),
                }
            }
            Err(Error::WrongPassword {
                key: path.to_path_buf(),
                password_file: None,
                attempts: PASSWORD_ATTEMPTS,
            })
        }
    }
}
