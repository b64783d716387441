//! The volumes of an opened bundle: that each listed one is there with its size, that its
//! signed chunk digests (and, in format version 1, its whole-volume digest) match, which files
//! in the bundle directory are not part of the bundle, and [`VolumeReader`], which reads the
//! volumes in order as one payload on a thread of its own while it checks them.
//!
//! The signed chunk digests are the authority on a volume's content (FORMAT.md, section 6):
//! all of them matching proves the volume as well as a whole-volume digest would, and they also
//! name the damaged byte ranges. A version 1 manifest also carries `volumes[].sha256`; where it
//! is present it is checked too, so a manifest whose two digests disagree is refused.
//!
//! By concept: `at_rest.rs` (the checks of volumes at rest and the stray files), `source.rs`
//! (where the volume bytes come from), `reader.rs` (the volume-reading thread), `units.rs`
//! (parity units) and `assess.rs` (the damage assessment); everything is re-exported here, so
//! `bundle::volumes::X` names what it always named.

mod assess;
mod at_rest;
mod reader;
mod source;
mod units;

pub use assess::*;
pub use at_rest::*;
pub(in crate::bundle) use reader::*;
pub use source::*;
pub use units::*;

#[cfg(test)]
mod tests {
    use std::io::{self, Read};
    use std::path::{Path, PathBuf};

    use sha2::{Digest, Sha256};

    use super::*;
    use crate::bundle::stream::stream_volumes;
    use crate::entries::{Mode, NullSink};
    use crate::manifest::Manifest;
    use crate::pack::{self, Compress, Model, ModelSpec, PackOptions};
    use crate::parity;

    /// A bundle of about 200 KB in 4 KiB chunks and 16 KiB volumes with 25% parity.
    fn packed(dir: &Path) -> Manifest {
        let model = dir.join("m");
        std::fs::create_dir_all(&model).unwrap();
        let mut x: u64 = 0x9e3779b97f4a7c15;
        let bytes: Vec<u8> = (0..200_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        std::fs::write(model.join("w.bin"), bytes).unwrap();
        let key = crate::keys::SecretKey::generate().unwrap();
        let packed = pack::pack(
            &mut Model::open(&ModelSpec::Dir(model.clone())).unwrap(),
            PackOptions {
                out: dir.join("b"),
                key: &key,
                name: "m".into(),
                version: 1,
                compress: Compress::None,
                volume_size: 16384,
                chunk_size: Some(4096),
                created_unix: 0,
                warnings: vec![],
                parity: Some(crate::parity::Ask::Percent(25.0)),
                base: None,
                trust_update: vec![],
                values: None,
                left_checks: Default::default(),
                oms: Default::default(),
            },
            &crate::progress::Silent,
        )
        .unwrap();
        packed.manifest
    }

    /// FORMAT.md section 2: the exact grammar of a volume-like name.
    #[test]
    fn volume_like_names_are_exactly_prefix_and_ascii_digits_in_any_case() {
        for name in [
            "data.000",
            "data.0",
            "data.0000000000000000000000001",
            "parity.007",
            "DATA.005",
            "Data.005",
            "dAtA.1",
            "PARITY.000",
            "Parity.12",
        ] {
            assert!(is_volume_like(name), "{name}");
        }
        for name in [
            "data.",
            "parity.",
            "data",
            "data.x",
            "data.00x",
            "data.000.sha256",
            "data.000 (1)",
            "data.001.part",
            "data.000~",
            "data.-1",
            "data.+1",
            " data.000",
            ".data.000.airlock-repair",
            "xdata.000",
            "data_000",
            "data.\u{661}\u{662}",
            "data.\u{ff11}",
            "d\u{430}ta.000",
            "manifest.json",
            "README.txt",
        ] {
            assert!(!is_volume_like(name), "{name}");
        }
    }

    /// Before: `DATA.005` was an "other" file, ignored by unpack; a second spelling of a listed
    /// volume that is another file is a duplicate; the same entry seen in another case (here a
    /// hard link, as a case-insensitive filesystem shows it) is the listed volume.
    #[test]
    fn strays_are_classified_in_any_case_and_a_listed_entry_in_another_case_is_not_stray() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        for n in [
            "manifest.json",
            "manifest.json.minisig",
            "data.000",
            "data.001",
        ] {
            std::fs::write(d.join(n), n).unwrap();
        }
        std::fs::write(d.join("DATA.002"), "x").unwrap();
        std::fs::write(d.join("Data.001"), "another copy").unwrap();
        std::fs::hard_link(d.join("data.000"), d.join("DATA.000")).unwrap();
        std::fs::hard_link(d.join("manifest.json"), d.join("MANIFEST.JSON")).unwrap();
        std::fs::write(d.join("data.000.sha256"), "x").unwrap();
        std::os::unix::fs::symlink("data.001", d.join("data.0001")).unwrap();
        std::os::unix::fs::symlink("data.001", d.join("DATA.001")).unwrap();
        std::fs::create_dir(d.join("parity.000")).unwrap();
        let listed = [
            "manifest.json",
            "manifest.json.minisig",
            "data.000",
            "data.001",
        ];
        let got: Vec<(String, StrayKind)> = stray_in(d, listed.into_iter())
            .into_iter()
            .map(|s| (s.name, s.kind))
            .collect();
        let want = [
            ("DATA.001", StrayKind::VolumeLike),
            ("DATA.002", StrayKind::VolumeLike),
            ("Data.001", StrayKind::VolumeLike),
            ("data.000.sha256", StrayKind::Other),
            ("data.0001", StrayKind::VolumeLike),
            ("parity.000", StrayKind::VolumeLike),
        ];
        let want: Vec<(String, StrayKind)> =
            want.iter().map(|(n, k)| (n.to_string(), *k)).collect();
        assert_eq!(got, want);
    }

    fn flip(path: &Path, at: usize) {
        let mut b = std::fs::read(path).unwrap();
        b[at] ^= 1;
        std::fs::write(path, b).unwrap();
    }

    /// A bundle directory that counts the bytes read at random and may hold units of at most
    /// `memory` bytes.
    struct Counted<'a> {
        dir: DirVolumes<'a>,
        memory: u64,
        read: std::sync::atomic::AtomicU64,
    }

    impl<'a> Counted<'a> {
        fn new(dir: &'a Path, memory: u64) -> Self {
            Counted {
                dir: DirVolumes::new(dir),
                memory,
                read: Default::default(),
            }
        }
    }

    impl VolumeSource for Counted<'_> {
        fn open(&self, index: usize, name: &str) -> io::Result<Box<dyn Read + Send + '_>> {
            self.dir.open(index, name)
        }
        fn path(&self, name: &str) -> PathBuf {
            self.dir.path(name)
        }
        fn read_at(&self, name: &str, offset: u64, buf: &mut [u8]) -> io::Result<()> {
            self.read
                .fetch_add(buf.len() as u64, std::sync::atomic::Ordering::Relaxed);
            self.dir.read_at(name, offset, buf)
        }
        fn unit_memory(&self) -> u64 {
            self.memory
        }
    }

    /// Both ways of reading a bundle with parity: units held in memory, and units read twice.
    const HELD_AND_TWICE: [u64; 2] = [parity::MAX_UNIT_SIZE, 0];

    /// Issue 24: an intact bundle with parity is read once (each unit was hashed, then read
    /// and hashed again: unpack took 1.46x unpack without parity); units larger than a reader
    /// holds are still read twice.
    #[test]
    fn an_intact_bundle_with_parity_is_read_once() {
        let t = tempfile::tempdir().unwrap();
        let m = packed(t.path());
        let b = t.path().join("b");
        for (memory, reads) in [(parity::MAX_UNIT_SIZE, 1), (0, 2)] {
            let source = Counted::new(&b, memory);
            stream_volumes(
                &m,
                &source,
                Mode::Strict,
                &mut NullSink,
                &crate::progress::Silent,
            )
            .unwrap();
            assert_eq!(
                source.read.into_inner(),
                reads * m.totals.volume_bytes,
                "units held up to {memory} bytes"
            );
        }
    }

    #[test]
    fn an_erased_unit_is_rebuilt_while_streaming_and_the_volume_named() {
        for memory in HELD_AND_TWICE {
            let t = tempfile::tempdir().unwrap();
            let m = packed(t.path());
            let b = t.path().join("b");
            flip(&b.join("data.000"), 3);
            std::fs::remove_file(b.join("data.002")).unwrap();
            // Strict: every file is held to its signed digest, so the rebuilt bytes are right.
            let report = stream_volumes(
                &m,
                &Counted::new(&b, memory),
                Mode::Strict,
                &mut NullSink,
                &crate::progress::Silent,
            )
            .unwrap();
            assert_eq!(report.repaired, ["data.000", "data.002"]);
        }
    }

    #[test]
    fn a_rebuilt_unit_that_fails_its_signed_digest_is_refused() {
        // The recovery unit of stripe 0 is changed and its digest in the manifest with it (a
        // parity volume that verifies but lies): the rebuilt data unit 0 must not be used.
        for memory in HELD_AND_TWICE {
            let t = tempfile::tempdir().unwrap();
            let mut m = packed(t.path());
            let b = t.path().join("b");
            let g = m.parity_geometry().unwrap();
            assert_eq!(g.recovery_index(0, 0), 0);
            let p0 = b.join("parity.000");
            flip(&p0, 10);
            let unit = std::fs::read(&p0).unwrap()[..4096].to_vec();
            m.parity.as_mut().unwrap().volumes[0].chunks[0] = hex::encode(Sha256::digest(&unit));
            flip(&b.join("data.000"), 3);
            let e = stream_volumes(
                &m,
                &Counted::new(&b, memory),
                Mode::Strict,
                &mut NullSink,
                &crate::progress::Silent,
            )
            .unwrap_err()
            .to_string();
            assert!(
                e.contains("chunk 0 rebuilt from parity does not match its signed digest"),
                "{e}"
            );
        }
    }
}
