//! Helpers shared by the integration tests: a temp tree per test, a key pair, the binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub struct Env {
    pub dir: tempfile::TempDir,
}

impl Env {
    /// A fresh temp tree with an unencrypted key pair at `k.key` / `k.pub`.
    pub fn new() -> Env {
        let env = Env {
            dir: tempfile::tempdir().expect("tempdir"),
        };
        env.ok(&["keygen", "--out", "k", "--unencrypted"]);
        env
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// Runs airlock in the temp tree.
    pub fn run(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_airlock"))
            .args(args)
            .current_dir(self.dir.path())
            .env_remove("AIRLOCK_TRUST")
            .env("SOURCE_DATE_EPOCH", "1700000000")
            .output()
            .expect("run airlock")
    }

    /// Runs airlock and asserts exit 0.
    pub fn ok(&self, args: &[&str]) -> Output {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "airlock {args:?} failed ({:?}):\n{}\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// The JSON file at `rel` in the temp tree (a bundle's `manifest.json`, a layout's index).
    pub fn read_json(&self, rel: &str) -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(self.path(rel)).unwrap()).unwrap()
    }

    /// Installs `bundle` (signed by `k.key`) into the Hugging Face cache `cache` as `repo`,
    /// laid out as huggingface_hub lays one out (each file a link to its blob); asserts exit 0.
    pub fn install_in_hf_cache(&self, bundle: &str, cache: &str, repo: &str) -> Output {
        self.ok(&[
            "unpack",
            bundle,
            "--trust",
            "k.pub",
            "--hf-cache",
            cache,
            "--hf-repo",
            repo,
        ])
    }

    /// Runs airlock and asserts the exit code; returns stderr + stdout as one string.
    pub fn fails(&self, code: i32, args: &[&str]) -> String {
        let out = self.run(args);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        assert_eq!(out.status.code(), Some(code), "airlock {args:?}: {text}");
        text
    }

    /// Runs airlock with `--json` and parses stdout (whatever the exit code).
    pub fn json(&self, args: &[&str]) -> (i32, serde_json::Value) {
        let mut a = args.to_vec();
        a.push("--json");
        let out = self.run(&a);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout of {a:?} is not one JSON document ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        });
        (out.status.code().expect("exit code"), v)
    }

    /// Asserts a failed pack left neither the bundle `name` nor any work directory behind.
    pub fn assert_nothing_packed(&self, name: &str) {
        assert!(!self.path(name).exists(), "{name} was created");
        assert!(
            staging_leftovers(self.dir.path()).is_empty(),
            "work directories left behind"
        );
    }

    /// Writes a file (creating parents).
    pub fn write(&self, rel: &str, bytes: &[u8]) {
        let p = self.path(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }

    /// A small model with nested directories, an empty file, an executable and an empty dir.
    pub fn model(&self, rel: &str) -> PathBuf {
        self.write(
            &format!("{rel}/config.json"),
            b"{\"model_type\": \"test\"}\n",
        );
        self.write(
            &format!("{rel}/weights/part-1.bin"),
            &pseudo_random(300_000, 1),
        );
        self.write(
            &format!("{rel}/weights/part-2.bin"),
            &pseudo_random(123_457, 2),
        );
        self.write(&format!("{rel}/tokenizer/deep/er/vocab.txt"), b"a\nb\nc\n");
        self.write(&format!("{rel}/empty.txt"), b"");
        self.write(&format!("{rel}/run.sh"), b"#!/bin/sh\necho hi\n");
        std::fs::create_dir_all(self.path(&format!("{rel}/empty-dir"))).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            self.path(&format!("{rel}/run.sh")),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        self.path(rel)
    }
}

/// Deterministic incompressible bytes.
pub fn pseudo_random(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Every file and directory under `root` (relative path, mode, content), sorted.
pub fn tree(root: &Path) -> Vec<(String, u32, Option<Vec<u8>>)> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = Vec::new();
    for e in walkdir::WalkDir::new(root).min_depth(1).sort_by_file_name() {
        let e = e.unwrap();
        let rel = e
            .path()
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let meta = e.metadata().unwrap();
        let content = if meta.is_file() {
            Some(std::fs::read(e.path()).unwrap())
        } else {
            None
        };
        out.push((rel, meta.permissions().mode() & 0o7777, content));
    }
    out
}

/// `tree` without the receipt directory.
pub fn tree_without_receipt(root: &Path) -> Vec<(String, u32, Option<Vec<u8>>)> {
    tree(root)
        .into_iter()
        .filter(|(p, _, _)| p != ".airlock" && !p.starts_with(".airlock/"))
        .collect()
}

/// Names beginning with the staging prefix in `dir`.
pub fn staging_leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".airlock-staging-") || n.ends_with(".partial"))
        .collect()
}

/// Text that tries to take over the terminal: erase the line above and print a green `OK`,
/// write the clipboard (OSC 52) and ring the bell, a C1 CSI, a bidi override and isolate, a
/// zero-width space, a byte order mark, a line break and a carriage return (issue 36 items 3
/// and 4).
pub const HOSTILE_TEXT: &str = "\x1b[1A\x1b[2K\x1b[32mOK\x1b[0m\x1b]52;c;ZXZpbA==\x07\u{9b}31m\u{202e}\u{2066}\u{200b}\u{feff}\n\rX";

/// [`HOSTILE_TEXT`] as airlock shows it.
pub const HOSTILE_SHOWN: &str = "\\x1b[1A\\x1b[2K\\x1b[32mOK\\x1b[0m\\x1b]52;c;ZXZpbA==\\x07\\u{9b}31m\\u{202e}\\u{2066}\\u{200b}\\u{feff}\\n\\rX";

/// Whether a terminal acts on `c` rather than show it: controls (the line break that ends a
/// line, and TAB, which only moves forward over blank cells, aside), bidi embeddings,
/// overrides, isolates and marks, zero-width and invisible characters, the byte order mark,
/// line and paragraph separators, tag characters.
fn acts_on_terminal(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(c,
            '\u{61c}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}'
            | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{206f}' | '\u{feff}'
            | '\u{e0000}'..='\u{e007f}')
}

/// Asserts that nothing in what airlock printed (stdout and stderr, every line) would act on a
/// terminal, and returns both as text for further checks. What a command quotes from the
/// medium, a model or a registry must arrive escaped.
pub fn assert_inert(out: &Output, what: &str) -> String {
    for (stream, bytes) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
        let text = String::from_utf8_lossy(bytes);
        let bad: Vec<(usize, char)> = text
            .char_indices()
            .filter(|(_, c)| acts_on_terminal(*c))
            .collect();
        assert!(
            bad.is_empty(),
            "{what}: {stream} holds characters a terminal acts on {bad:?}:\n{text:?}"
        );
    }
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
