//! The part of a bundle of several repositories an install takes (`unpack --repo`, FORMAT.md
//! section 14.4): a sink in front of the target's own that passes the chosen repositories'
//! entries on (their paths unchanged, or with the repository's folder taken off when one
//! repository goes into a directory of its own) and drops the others' bytes. It sits behind the
//! verifier and the tally, so every byte that passes through is still hashed against the
//! signed manifest and the whole manifest must still arrive; a source that can skip a file
//! asks [`EntrySink::holds`], which says yes for the others: a registry never fetches them,
//! and a resumed stream starts after those before the first file of the part it still needs.

use std::borrow::Cow;

use crate::entries::EntrySink;
use crate::error::Result;
use crate::manifest::FileEntry;

/// The repositories chosen, by folder, and whether their folder is taken off the paths.
#[derive(Clone, Debug)]
pub struct Part {
    /// `models--ORG--NAME`, in bundle order.
    pub folders: Vec<String>,
    /// One repository into a directory: its files at the directory's root.
    pub strip: bool,
}

impl Part {
    /// The path the target sees for bundle path `path`, or `None` when it is not chosen; `""`
    /// for the chosen folder itself when it is taken off.
    pub fn map<'p>(&self, path: &'p str) -> Option<Cow<'p, str>> {
        let (first, rest) = match path.split_once('/') {
            Some((f, r)) => (f, Some(r)),
            None => (path, None),
        };
        if !self.folders.iter().any(|f| f == first) {
            return None;
        }
        Some(if self.strip {
            Cow::Borrowed(rest.unwrap_or(""))
        } else {
            Cow::Borrowed(path)
        })
    }
}

/// A target's sink behind a [`Part`] (none: everything passes).
pub struct Select<S> {
    /// The target's own sink.
    pub inner: S,
    part: Option<Part>,
    /// The current file as the target sees it; `None` while an unchosen file's bytes pass.
    current: Option<FileEntry>,
}

impl<S: EntrySink> Select<S> {
    /// `inner` behind `part`.
    pub fn new(inner: S, part: Option<Part>) -> Self {
        Select {
            inner,
            part,
            current: None,
        }
    }

    /// `file` as the target sees it, or `None` when it is not chosen.
    fn mapped(&self, file: &FileEntry) -> Option<FileEntry> {
        match &self.part {
            None => Some(file.clone()),
            Some(p) => p.map(&file.path).map(|path| FileEntry {
                path: path.into_owned(),
                ..file.clone()
            }),
        }
    }
}

impl<S: EntrySink> EntrySink for Select<S> {
    fn dir(&mut self, path: &str) -> Result<()> {
        match &self.part {
            None => self.inner.dir(path),
            Some(p) => match p.map(path) {
                Some(d) if !d.is_empty() => self.inner.dir(&d),
                _ => Ok(()),
            },
        }
    }

    fn begin_file(&mut self, file: &FileEntry) -> Result<()> {
        self.current = self.mapped(file);
        match &self.current {
            Some(f) => self.inner.begin_file(f),
            None => Ok(()),
        }
    }

    fn data(&mut self, bytes: &[u8]) -> Result<()> {
        match self.current {
            Some(_) => self.inner.data(bytes),
            // Hashed by the verifier in front; not installed.
            None => Ok(()),
        }
    }

    fn end_file(&mut self, _file: &FileEntry) -> Result<()> {
        match self.current.take() {
            Some(f) => self.inner.end_file(&f),
            None => Ok(()),
        }
    }

    fn holds(&mut self, file: &FileEntry) -> Result<bool> {
        match self.mapped(file) {
            Some(f) => self.inner.holds(&f),
            // Not chosen: a source that can skip it need not fetch it.
            None => Ok(true),
        }
    }

    fn holds_dir(&mut self, path: &str) -> Result<bool> {
        match &self.part {
            None => self.inner.holds_dir(path),
            Some(p) => match p.map(path) {
                Some(d) if !d.is_empty() => self.inner.holds_dir(&d),
                // Not chosen, or the folder taken off: nothing to make.
                _ => Ok(true),
            },
        }
    }

    fn clone_from(
        &mut self,
        file: &FileEntry,
        src: &std::fs::File,
    ) -> Result<Option<std::fs::File>> {
        match self.mapped(file) {
            Some(f) => {
                let cloned = self.inner.clone_from(&f, src)?;
                if cloned.is_some() {
                    self.current = Some(f);
                }
                Ok(cloned)
            }
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Log(Vec<String>);

    impl EntrySink for Log {
        fn dir(&mut self, path: &str) -> Result<()> {
            self.0.push(format!("dir {path}"));
            Ok(())
        }
        fn begin_file(&mut self, file: &FileEntry) -> Result<()> {
            self.0.push(format!("file {}", file.path));
            Ok(())
        }
        fn data(&mut self, bytes: &[u8]) -> Result<()> {
            self.0.push(format!("data {}", bytes.len()));
            Ok(())
        }
        fn end_file(&mut self, file: &FileEntry) -> Result<()> {
            self.0.push(format!("end {}", file.path));
            Ok(())
        }
    }

    fn file(path: &str) -> FileEntry {
        FileEntry {
            path: path.into(),
            size: 3,
            sha256: "0".repeat(64),
            executable: false,
            from: None,
        }
    }

    fn run(part: Option<Part>) -> (Vec<String>, Vec<bool>) {
        let mut s = Select::new(Log::default(), part);
        for d in ["models--o--a", "models--o--a/sub", "models--o--b"] {
            s.dir(d).unwrap();
        }
        let files = ["models--o--a/sub/x", "models--o--b/y"];
        let mut held = Vec::new();
        for p in files {
            let f = file(p);
            held.push(s.holds(&f).unwrap());
            s.begin_file(&f).unwrap();
            s.data(b"abc").unwrap();
            s.end_file(&f).unwrap();
        }
        (s.inner.0, held)
    }

    #[test]
    fn only_the_chosen_repository_reaches_the_target() {
        let (log, held) = run(Some(Part {
            folders: vec!["models--o--a".into()],
            strip: true,
        }));
        assert_eq!(log, ["dir sub", "file sub/x", "data 3", "end sub/x"]);
        assert_eq!(held, [false, true]);
        let (log, held) = run(Some(Part {
            folders: vec!["models--o--b".into()],
            strip: false,
        }));
        assert_eq!(
            log,
            [
                "dir models--o--b",
                "file models--o--b/y",
                "data 3",
                "end models--o--b/y"
            ]
        );
        assert_eq!(held, [true, false]);
        let (log, held) = run(None);
        assert_eq!(log.len(), 3 + 6);
        assert_eq!(held, [false, false]);
    }

    #[test]
    fn a_folder_is_matched_whole() {
        let p = Part {
            folders: vec!["models--o--a".into()],
            strip: false,
        };
        assert!(p.map("models--o--ab/x").is_none());
        assert!(p.map("models--o--a").is_some());
        assert_eq!(p.map("models--o--a/x").as_deref(), Some("models--o--a/x"));
    }
}
