//! Finding the cache: the directory huggingface_hub would use, from the same environment
//! variables in the same order, expanded the same way.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::error::{Error, Result};

/// The cache directory huggingface_hub would use, from the process environment.
pub fn cache_dir_from_env() -> Result<PathBuf> {
    resolve_cache_dir(&|name| std::env::var_os(name))
}

/// The cache directory huggingface_hub would use (`constants.HF_HUB_CACHE`), with `var`
/// reading the environment:
///
/// 1. `HF_HUB_CACHE`;
/// 2. else `HUGGINGFACE_HUB_CACHE` (the legacy name);
/// 3. else `HF_HOME/hub`;
/// 4. else `XDG_CACHE_HOME/huggingface/hub`;
/// 5. else `~/.cache/huggingface/hub`.
///
/// Each value goes through `~` expansion then `$VAR`/`${VAR}` expansion, as
/// `os.path.expandvars(os.path.expanduser(...))` does. Two deliberate differences: a variable
/// that is set but empty is an error (huggingface_hub would quietly use a directory relative
/// to the current one), and `~user` is not expanded (only `~` and `~/...`, from `HOME`).
pub fn resolve_cache_dir(var: &dyn Fn(&str) -> Option<OsString>) -> Result<PathBuf> {
    let get = |name: &str| -> Result<Option<String>> {
        match var(name) {
            None => Ok(None),
            Some(v) if v.is_empty() => Err(Error::Usage(format!(
                "{name} is set but empty, so huggingface_hub would use a cache relative to the current directory; unset it or pass --hf-cache DIR"
            ))),
            Some(v) => v.into_string().map(Some).map_err(|_| {
                Error::Usage(format!("{name} is not valid UTF-8; pass --hf-cache DIR"))
            }),
        }
    };
    let expand = |s: &str| -> Result<String> { Ok(expandvars(&expanduser(s, var)?, var)) };
    let hub = match get("HF_HUB_CACHE")? {
        Some(v) => expand(&v)?,
        None => match get("HUGGINGFACE_HUB_CACHE")? {
            Some(v) => expand(&v)?,
            None => {
                let hf_home = match get("HF_HOME")? {
                    Some(v) => v,
                    None => {
                        let base = match get("XDG_CACHE_HOME")? {
                            Some(v) => v,
                            None => join(&expanduser("~", var)?, ".cache"),
                        };
                        join(&base, "huggingface")
                    }
                };
                // HF_HOME is expanded, joined with "hub", and the result expanded again.
                expand(&join(&expand(&hf_home)?, "hub"))?
            }
        },
    };
    let path = PathBuf::from(hub);
    if path.is_absolute() {
        Ok(path)
    } else {
        let cwd = std::env::current_dir().map_err(|e| Error::io(".", e))?;
        Ok(cwd.join(path))
    }
}

/// `os.path.join(a, b)` for a relative `b`.
fn join(a: &str, b: &str) -> String {
    if a.is_empty() || a.ends_with('/') {
        format!("{a}{b}")
    } else {
        format!("{a}/{b}")
    }
}

/// `os.path.expanduser` for `~` and `~/...` (from `HOME`); `~user` is left as it is.
fn expanduser(path: &str, var: &dyn Fn(&str) -> Option<OsString>) -> Result<String> {
    if path != "~" && !path.starts_with("~/") {
        return Ok(path.to_string());
    }
    let home = var("HOME")
        .and_then(|h| h.into_string().ok())
        .ok_or_else(|| {
            Error::Usage(
                "HOME is not set, so the default Hugging Face cache cannot be found; pass --hf-cache DIR".into(),
            )
        })?;
    let home = home.trim_end_matches('/');
    let joined = format!("{home}{}", &path[1..]);
    Ok(if joined.is_empty() {
        "/".into()
    } else {
        joined
    })
}

/// `posixpath.expandvars`: `$name` and `${name}` (name: ASCII letters, digits, `_`) are
/// replaced by the variable's value; unknown variables are left as they are.
fn expandvars(path: &str, var: &dyn Fn(&str) -> Option<OsString>) -> String {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let bytes = path.as_bytes();
    let mut out = String::with_capacity(path.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'$' {
            let (name, end) = if bytes.get(i + 1) == Some(&b'{') {
                match path[i + 2..].find('}') {
                    Some(close) => (&path[i + 2..i + 2 + close], i + 3 + close),
                    None => ("", i + 1),
                }
            } else {
                let len = bytes[i + 1..].iter().take_while(|&&b| word(b)).count();
                (&path[i + 1..i + 1 + len], i + 1 + len)
            };
            if end > i + 1 {
                if let Some(value) = (!name.is_empty())
                    .then(|| var(name))
                    .flatten()
                    .and_then(|v| v.into_string().ok())
                {
                    out.push_str(&value);
                } else {
                    out.push_str(&path[i..end]);
                }
                i = end;
                continue;
            }
        }
        let ch = path[i..].chars().next().expect("in bounds");
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<OsString> + 'a {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn cache_dir_resolves_like_huggingface_hub() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (&[("HOME", "/home/u")], "/home/u/.cache/huggingface/hub"),
            (&[("HOME", "/home/u/")], "/home/u/.cache/huggingface/hub"),
            (
                &[("HOME", "/h"), ("XDG_CACHE_HOME", "/xdg")],
                "/xdg/huggingface/hub",
            ),
            (
                &[
                    ("HOME", "/h"),
                    ("XDG_CACHE_HOME", "/xdg"),
                    ("HF_HOME", "~/hf"),
                ],
                "/h/hf/hub",
            ),
            (
                &[("HF_HOME", "/hf"), ("HUGGINGFACE_HUB_CACHE", "/legacy")],
                "/legacy",
            ),
            (
                &[
                    ("HF_HOME", "/hf"),
                    ("HUGGINGFACE_HUB_CACHE", "/legacy"),
                    ("HF_HUB_CACHE", "/new"),
                ],
                "/new",
            ),
            (
                &[
                    ("HF_HUB_CACHE", "$BASE/x/${SUB}/$NOPE/${}"),
                    ("BASE", "/b"),
                    ("SUB", "s"),
                ],
                "/b/x/s/$NOPE/${}",
            ),
            (&[("HF_HUB_CACHE", "~other/c")], "~other/c"),
        ];
        for (vars, want) in cases {
            let got = resolve_cache_dir(&env(vars)).unwrap();
            if want.starts_with('/') {
                assert_eq!(got, PathBuf::from(want), "{vars:?}");
            } else {
                assert!(got.ends_with(want), "{vars:?}: {}", got.display());
            }
        }
        let err = resolve_cache_dir(&env(&[("HF_HOME", "")])).unwrap_err();
        assert!(
            err.to_string().contains("HF_HOME is set but empty"),
            "{err}"
        );
        let err = resolve_cache_dir(&env(&[])).unwrap_err();
        assert!(err.to_string().contains("HOME is not set"), "{err}");
    }
}
