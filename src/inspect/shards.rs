//! Sharded checkpoints: the index and the shards must agree.
//!
//! A large model is split into `model-00001-of-00003.safetensors`, ... with an index
//! (`model.safetensors.index.json`, or `pytorch_model.bin.index.json` for pickled shards):
//! `{"metadata": {"total_size": N}, "weight_map": {tensor: shard_file}}`. transformers loads a
//! sharded model by reading `weight_map` and opening each shard it names, so a shard that is
//! absent, or a shard that lacks a tensor the map assigns to it, fails the load. Each shard's
//! own damage (truncation and so on) is reported by the shard's own check; this one checks
//! that the set is complete.
//!
//! Only safetensors shards can be checked tensor by tensor from their headers; for pickled
//! shards this checks that each named shard exists.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::read::{self, human_size};
use super::safetensors;
use super::{Finding, Resolved, Tree, codes, is_plain_relative};
use crate::display;

/// Indexes are a few MB even for the largest models; anything bigger is not an index.
const MAX_INDEX_SIZE: u64 = 64 * 1024 * 1024;

/// Most `weight_map` entries read from one index: four times the per-file limit of the
/// safetensors check, several times the largest real models.
const MAX_INDEX_TENSORS: usize = 4 * safetensors::MAX_TENSORS;

/// Tensor names quoted in one problem sentence.
const NAMES_SHOWN: usize = 3;

pub(crate) fn check_index(
    tree: &Tree,
    rel: &str,
    file: &File,
    len: u64,
) -> io::Result<Vec<Finding>> {
    let invalid = |problem: String| {
        Ok(vec![Finding::error(
            codes::SHARD_INDEX_INVALID,
            rel,
            problem,
            "download the index file again from the same revision as the shards",
        )])
    };
    if len > MAX_INDEX_SIZE {
        return invalid(format!(
            "is {}, far larger than any shard index",
            human_size(len)
        ));
    }
    let index = match read_index(file, len)? {
        Ok(index) => index,
        Err(problem) => return invalid(problem.to_string()),
    };
    let Some(weight_map) = &index.weight_map else {
        return invalid("has no `weight_map` object".to_string());
    };
    let mut by_shard: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (tensor, shard) in weight_map {
        by_shard
            .entry(&index.shards[*shard as usize])
            .or_default()
            .push(tensor);
    }

    let dir = rel.rsplit_once('/').map_or("", |(d, _)| d);
    let mut findings = Vec::new();
    // Bytes of every tensor in the shards' headers; None once any shard cannot be read.
    let mut tensor_bytes: Option<u64> = Some(0);
    for (shard, tensors) in &by_shard {
        if !is_plain_relative(shard) || shard.contains('\\') {
            findings.push(Finding::error(
                codes::SHARD_PATH_INVALID,
                rel,
                format!(
                    "names shard `{shard}`, which is not a plain file name inside the model \
                     directory"
                ),
                "this index is damaged or hostile; download it again from the model's \
                 repository",
            ));
            tensor_bytes = None;
            continue;
        }
        let shard_rel = if dir.is_empty() {
            shard.to_string()
        } else {
            format!("{dir}/{shard}")
        };
        match tree.resolve(&shard_rel)? {
            Resolved::File { target, len } => {
                if !shard.ends_with(".safetensors") {
                    tensor_bytes = None;
                    continue;
                }
                let (shard_file, _) =
                    crate::fsio::open_regular(&target, crate::fsio::Follow::Never)?;
                match safetensors::read_header(&shard_file, len)? {
                    Ok(header) => {
                        let present: std::collections::HashSet<&str> =
                            header.tensors.iter().map(|t| t.name.as_str()).collect();
                        let absent: Vec<&str> = tensors
                            .iter()
                            .copied()
                            .filter(|t| !present.contains(t))
                            .collect();
                        if absent.is_empty() {
                            let bytes: u64 = header.tensors.iter().map(|t| t.end - t.begin).sum();
                            tensor_bytes = tensor_bytes.map(|sum| sum.saturating_add(bytes));
                        } else {
                            // The sum is off too; the missing tensors already say why.
                            findings.push(tensors_missing(rel, &shard_rel, &absent, tensors.len()));
                            tensor_bytes = None;
                        }
                    }
                    // The shard's own check reports its damage.
                    Err(_) => tensor_bytes = None,
                }
            }
            // Reported by the symlink check of the shard itself; never read outside the tree.
            Resolved::Escapes { .. } => tensor_bytes = None,
            Resolved::Missing | Resolved::Dangling { .. } | Resolved::NotAFile => {
                findings.push(Finding::error(
                    codes::SHARD_MISSING,
                    rel,
                    format!(
                        "names shard `{shard}` for {} (e.g. `{}`), but `{shard_rel}` is not in \
                         the tree",
                        display::count(tensors.len() as u64, "tensor"),
                        tensors[0]
                    ),
                    "download the missing shard (huggingface_hub fetches every file the index \
                     names), then pack again",
                ));
                tensor_bytes = None;
            }
        }
    }

    // total_size mismatch is a warning, not an error: no loader reads it (transformers and
    // huggingface_hub load by `weight_map` alone), and the writer does not count tensor bytes
    // the way the shards store them. huggingface_hub's `split_state_dict_into_shards_factory`
    // sums storage sizes (`untyped_storage().nbytes()`), counting a storage shared by several
    // tensors once and a view by its whole storage, while each safetensors shard stores each
    // tensor contiguously. Most exports still match exactly, so a difference is worth a look
    // (shards from another export mixed in), but it does not by itself stop a load.
    let total_size = index.total_size;
    if let (Some(total), Some(sum)) = (total_size, tensor_bytes)
        && total != sum
    {
        findings.push(Finding::warning(
            codes::SHARD_TOTAL_SIZE_MISMATCH,
            rel,
            format!(
                "says metadata.total_size is {total} bytes but the tensors of its {} add up to \
                 {sum} bytes (off by {})",
                display::count(by_shard.len() as u64, "shard"),
                total.abs_diff(sum)
            ),
            "check that every shard comes from the same revision as the index; loaders ignore \
             total_size, so if the shards are right this is only a stale index",
        ));
    }
    Ok(findings)
}

/// What the checks need of an index: `weight_map` (tensor → shard, in tensor name order; a
/// tensor listed twice keeps its last shard, as a JSON object read whole does) and
/// `metadata.total_size`. Streamed from the file and held compactly (each shard name once),
/// never as a JSON tree: a 64 MiB index is up to two million entries.
struct Index {
    /// `None` when the index has no `weight_map` object.
    weight_map: Option<BTreeMap<String, u32>>,
    /// The shard names, indexed by the values of `weight_map`.
    shards: Vec<String>,
    total_size: Option<u64>,
}

/// Why a shard index is not one airlock reads; `Display` follows the index's name in a finding.
#[derive(Debug)]
enum IndexError {
    /// More than [`MAX_INDEX_TENSORS`] entries in `weight_map`.
    TooManyTensors,
    /// `weight_map` maps the tensor to something that is not a file name.
    NotAFileName { tensor: String },
    /// Not JSON.
    Json(serde_json::Error),
}

impl fmt::Display for IndexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooManyTensors => write!(
                f,
                "lists more than {MAX_INDEX_TENSORS} tensors in `weight_map`, over what airlock checks (the largest real models have about 150,000)"
            ),
            Self::NotAFileName { tensor } => {
                write!(
                    f,
                    "maps tensor `{tensor}` to something that is not a file name"
                )
            }
            Self::Json(e) => write!(f, "is not valid JSON ({e})"),
        }
    }
}

/// Reads an index of `len` bytes (at most [`MAX_INDEX_SIZE`]), or says why it is not one.
fn read_index(file: &File, len: u64) -> io::Result<Result<Index, IndexError>> {
    let mut index = Index {
        weight_map: None,
        shards: Vec::new(),
        total_size: None,
    };
    let mut problem = None;
    let reader = io::BufReader::with_capacity(1 << 16, read::Section::new(file, 0, len));
    let mut de = serde_json::Deserializer::from_reader(reader);
    let parsed = IndexSeed {
        index: &mut index,
        problem: &mut problem,
    }
    .deserialize(&mut de)
    .and_then(|()| de.end());
    Ok(match parsed {
        Ok(()) => Ok(index),
        Err(_) if problem.is_some() => Err(problem.expect("set")),
        Err(e) if e.is_io() => return Err(e.into()),
        Err(e) => Err(IndexError::Json(e)),
    })
}

/// The index object: `weight_map` and `metadata` read, other members skipped.
struct IndexSeed<'a> {
    index: &'a mut Index,
    problem: &'a mut Option<IndexError>,
}

impl<'de> DeserializeSeed<'de> for IndexSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

/// The `Visitor` methods of a value that is not an object: skipped over, as if absent (valid
/// JSON is never an error here; only what an object holds is checked).
macro_rules! skip_other_values {
    () => {
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
    };
}

impl<'de> Visitor<'de> for IndexSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "weight_map" => {
                    // The last `weight_map` counts, as when the object is read whole.
                    self.index.weight_map = None;
                    self.index.shards.clear();
                    map.next_value_seed(WeightMap {
                        index: &mut *self.index,
                        problem: &mut *self.problem,
                    })?;
                }
                "metadata" => self.index.total_size = map.next_value_seed(TotalSize)?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
    // Any other JSON value is valid JSON without a `weight_map`.
    skip_other_values!();
}

/// `weight_map`: tensor → shard file name, at most [`MAX_INDEX_TENSORS`] entries.
struct WeightMap<'a> {
    index: &'a mut Index,
    problem: &'a mut Option<IndexError>,
}

impl<'de> DeserializeSeed<'de> for WeightMap<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for WeightMap<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut weight_map = BTreeMap::new();
        let mut ids: std::collections::HashMap<String, u32> = Default::default();
        let mut entries = 0usize;
        while let Some(tensor) = map.next_key::<String>()? {
            entries += 1;
            if entries > MAX_INDEX_TENSORS {
                *self.problem = Some(IndexError::TooManyTensors);
                return Err(de::Error::custom("too many tensors"));
            }
            let Some(shard) = map.next_value_seed(ShardName)? else {
                *self.problem = Some(IndexError::NotAFileName { tensor });
                return Err(de::Error::custom("not a file name"));
            };
            let id = match ids.get(&shard) {
                Some(id) => *id,
                None => {
                    let id = self.index.shards.len() as u32;
                    self.index.shards.push(shard.clone());
                    ids.insert(shard, id);
                    id
                }
            };
            weight_map.insert(tensor, id);
        }
        self.index.weight_map = Some(weight_map);
        Ok(())
    }
    // Not an object: as if there were no `weight_map`.
    skip_other_values!();
}

/// A shard name: `Some` for a string, `None` for any other value (skipped over).
struct ShardName;

impl<'de> DeserializeSeed<'de> for ShardName {
    type Value = Option<String>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ShardName {
    type Value = Option<String>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Some(v.to_string()))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(None)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
}

/// `metadata`: its `total_size` as an integer (a float is truncated), else `None`.
struct TotalSize;

impl<'de> DeserializeSeed<'de> for TotalSize {
    type Value = Option<u64>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for TotalSize {
    type Value = Option<u64>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut total = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == "total_size" {
                total = map.next_value_seed(Size)?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(total)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
}

/// A number as a byte count: an integer, or a float truncated (a negative one to 0); `None`
/// for any other value (skipped over).
struct Size;

impl<'de> DeserializeSeed<'de> for Size {
    type Value = Option<u64>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Size {
    type Value = Option<u64>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Some(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Some(v as f64 as u64))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        Ok(Some(v as u64))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(None)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
}

fn tensors_missing(index_rel: &str, shard_rel: &str, absent: &[&str], assigned: usize) -> Finding {
    let mut names: Vec<String> = absent
        .iter()
        .take(NAMES_SHOWN)
        .map(|n| format!("`{n}`"))
        .collect();
    if absent.len() > NAMES_SHOWN {
        names.push(format!("and {} more", absent.len() - NAMES_SHOWN));
    }
    Finding::error(
        codes::SHARD_TENSOR_MISSING,
        shard_rel,
        format!(
            "lacks {} of the {} that `{index_rel}` assigns to it: {}",
            absent.len(),
            display::count(assigned as u64, "tensor"),
            names.join(", ")
        ),
        "the shard and the index come from different exports; download both again from the \
         same revision",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inspect::safetensors::tests::make;
    use crate::inspect::testutil::*;
    use crate::inspect::{Severity, check_file, check_tree};

    fn shard(tensors: &[(&str, usize)]) -> Vec<u8> {
        let mut parts = Vec::new();
        let mut at = 0;
        for (name, len) in tensors {
            parts.push(format!(
                r#""{name}":{{"dtype":"U8","shape":[{len}],"data_offsets":[{at},{}]}}"#,
                at + len
            ));
            at += len;
        }
        make(&format!("{{{}}}", parts.join(",")), at)
    }

    const INDEX: &str = r#"{"metadata":{"total_size":30},"weight_map":{
        "a":"model-00001-of-00002.safetensors","b":"model-00001-of-00002.safetensors",
        "c":"model-00002-of-00002.safetensors"}}"#;

    fn shards() -> (Vec<u8>, Vec<u8>) {
        (shard(&[("a", 10), ("b", 5)]), shard(&[("c", 15)]))
    }

    #[test]
    fn a_complete_set_passes() {
        let (one, two) = shards();
        let dir = tree(&[
            ("m/model.safetensors.index.json", INDEX.as_bytes()),
            ("m/model-00001-of-00002.safetensors", &one),
            ("m/model-00002-of-00002.safetensors", &two),
        ]);
        assert!(check_tree(dir.path()).unwrap().is_empty());
    }

    #[test]
    fn a_missing_shard_is_named() {
        let (one, _) = shards();
        let dir = tree(&[
            ("m/model.safetensors.index.json", INDEX.as_bytes()),
            ("m/model-00001-of-00002.safetensors", &one),
        ]);
        let findings = check_file(dir.path(), "m/model.safetensors.index.json").unwrap();
        let f = only(
            &findings,
            codes::SHARD_MISSING,
            "m/model.safetensors.index.json",
        );
        assert!(
            f.problem.contains("model-00002-of-00002.safetensors"),
            "{}",
            f.problem
        );
        assert!(f.problem.contains("1 tensor (e.g. `c`)"), "{}", f.problem);
    }

    #[test]
    fn a_tensor_missing_from_its_shard_names_the_shard() {
        let two = shard(&[("c", 15)]);
        let dir = tree(&[
            ("model.safetensors.index.json", INDEX.as_bytes()),
            ("model-00001-of-00002.safetensors", &shard(&[("a", 15)])),
            ("model-00002-of-00002.safetensors", &two),
        ]);
        let findings = check_file(dir.path(), "model.safetensors.index.json").unwrap();
        let f = only(
            &findings,
            codes::SHARD_TENSOR_MISSING,
            "model-00001-of-00002.safetensors",
        );
        assert!(
            f.problem.contains("lacks 1 of the 2 tensors"),
            "{}",
            f.problem
        );
        assert!(f.problem.contains("`b`"), "{}", f.problem);
    }

    #[test]
    fn a_wrong_total_size_is_a_warning() {
        let (one, two) = shards();
        let index = INDEX.replace("30", "31");
        let dir = tree(&[
            ("model.safetensors.index.json", index.as_bytes()),
            ("model-00001-of-00002.safetensors", &one),
            ("model-00002-of-00002.safetensors", &two),
        ]);
        let findings = check_file(dir.path(), "model.safetensors.index.json").unwrap();
        let f = only(
            &findings,
            codes::SHARD_TOTAL_SIZE_MISMATCH,
            "model.safetensors.index.json",
        );
        assert_eq!(f.severity, Severity::Warning);
        assert!(f.problem.contains("31 bytes"), "{}", f.problem);
        assert!(f.problem.contains("add up to 30 bytes"), "{}", f.problem);
    }

    #[test]
    fn a_broken_shard_is_left_to_its_own_check() {
        let (one, two) = shards();
        let dir = tree(&[
            ("model.safetensors.index.json", INDEX.as_bytes()),
            ("model-00001-of-00002.safetensors", &one[..one.len() - 1]),
            ("model-00002-of-00002.safetensors", &two),
        ]);
        let findings = check_tree(dir.path()).unwrap();
        assert_eq!(codes_of(&findings), vec![codes::SAFETENSORS_TRUNCATED]);
        assert_eq!(findings[0].path, "model-00001-of-00002.safetensors");
    }

    #[test]
    fn hostile_shard_names_are_refused() {
        let index = r#"{"weight_map":{"a":"../outside.safetensors","b":"/etc/passwd"}}"#;
        let findings = check_bytes("model.safetensors.index.json", index.as_bytes());
        assert_eq!(
            codes_of(&findings),
            vec![codes::SHARD_PATH_INVALID, codes::SHARD_PATH_INVALID]
        );
    }

    #[test]
    fn pytorch_indexes_check_that_shards_exist() {
        let index = r#"{"metadata":{"total_size":1},"weight_map":{"a":"pytorch_model-00001-of-00002.bin","b":"pytorch_model-00002-of-00002.bin"}}"#;
        let dir = tree(&[
            ("pytorch_model.bin.index.json", index.as_bytes()),
            ("pytorch_model-00001-of-00002.bin", b"\x80\x02}q\x00."),
        ]);
        let findings = check_tree(dir.path()).unwrap();
        let f = only(
            &findings,
            codes::SHARD_MISSING,
            "pytorch_model.bin.index.json",
        );
        assert!(f.problem.contains("pytorch_model-00002-of-00002.bin"));
    }

    /// An index of exactly 64 MiB is read (here it fails as JSON: it is zeros); one byte more
    /// is refused unread.
    #[test]
    fn index_size_limit_is_64_mib() {
        let name = "model.safetensors.index.json";
        for (len, want) in [
            (64 << 20, "is not valid JSON"),
            ((64 << 20) + 1, "far larger than any shard index"),
        ] {
            let dir = tree(&[]);
            let file = File::create(dir.path().join(name)).unwrap();
            file.set_len(len).unwrap();
            let findings = check_file(dir.path(), name).unwrap();
            let f = only(&findings, codes::SHARD_INDEX_INVALID, name);
            assert!(f.problem.contains(want), "{len}: {}", f.problem);
        }
    }

    /// Up to three missing tensor names are quoted; beyond that the rest are counted.
    #[test]
    fn missing_tensor_names_are_quoted_up_to_three() {
        let four = r#"{"weight_map":{"a":"s.safetensors","b":"s.safetensors","c":"s.safetensors","d":"s.safetensors","e":"s.safetensors"}}"#;
        for (present, quoted) in [
            (&[("e", 1)][..], "`a`, `b`, `c`, and 1 more"),
            (&[("d", 1), ("e", 1)][..], "`a`, `b`, `c`"),
        ] {
            let dir = tree(&[
                ("model.safetensors.index.json", four.as_bytes()),
                ("s.safetensors", &shard(present)),
            ]);
            let findings = check_file(dir.path(), "model.safetensors.index.json").unwrap();
            let f = only(&findings, codes::SHARD_TENSOR_MISSING, "s.safetensors");
            assert!(f.problem.ends_with(quoted), "{}", f.problem);
        }
    }

    /// Issue 26: a 30 MB index of two million entries cost 400 MB read as a JSON tree. It is
    /// streamed now, and an index listing more than MAX_INDEX_TENSORS tensors is refused.
    #[test]
    fn an_index_over_the_tensor_limit_is_refused() {
        let index = |n: usize| {
            let map: Vec<String> = (0..n)
                .map(|i| format!(r#""t{i}":"s.safetensors""#))
                .collect();
            format!(r#"{{"weight_map":{{{}}}}}"#, map.join(","))
        };
        let name = "model.safetensors.index.json";
        let findings = check_bytes(name, index(MAX_INDEX_TENSORS + 1).as_bytes());
        let f = only(&findings, codes::SHARD_INDEX_INVALID, name);
        assert!(
            f.problem
                .contains(&format!("more than {MAX_INDEX_TENSORS} tensors")),
            "{}",
            f.problem
        );
        // At the limit it is read (and here the shard is missing).
        let findings = check_bytes(name, index(MAX_INDEX_TENSORS).as_bytes());
        only(&findings, codes::SHARD_MISSING, name);
    }

    /// What the streamed reader takes from an index: the last of a tensor listed twice,
    /// `total_size` as an integer or a float, other members ignored.
    #[test]
    fn index_members_are_read_as_a_whole_object_would_be() {
        let (one, two) = shards();
        let index = r#"{"x":[1,{"a":2}],"metadata":{"total_size":30.0,"y":null},"weight_map":{"c":"model-00001-of-00002.safetensors","a":"model-00001-of-00002.safetensors","b":"model-00001-of-00002.safetensors","c":"model-00002-of-00002.safetensors"}}"#;
        let dir = tree(&[
            ("m/model.safetensors.index.json", index.as_bytes()),
            ("m/model-00001-of-00002.safetensors", &one),
            ("m/model-00002-of-00002.safetensors", &two),
        ]);
        let findings = check_file(dir.path(), "m/model.safetensors.index.json").unwrap();
        assert!(findings.is_empty(), "{findings:#?}");
    }

    #[test]
    fn invalid_indexes() {
        for index in [
            "{",
            "[]",
            r#"{"weight_map":[]}"#,
            r#"{"weight_map":{"a":1}}"#,
        ] {
            let findings = check_bytes("model.safetensors.index.json", index.as_bytes());
            only(
                &findings,
                codes::SHARD_INDEX_INVALID,
                "model.safetensors.index.json",
            );
        }
    }

    #[test]
    fn the_fixture_sets() {
        let corrupt = fixtures().join("corrupt");
        let index = "model.safetensors.index.json";
        let findings = check_tree(&corrupt.join("missing-shard")).unwrap();
        let f = only(&findings, codes::SHARD_MISSING, index);
        assert!(
            f.problem.contains("model-00002-of-00003.safetensors"),
            "{}",
            f.problem
        );

        let findings = check_tree(&corrupt.join("tensor-missing")).unwrap();
        only(
            &findings,
            codes::SHARD_TENSOR_MISSING,
            "model-00002-of-00003.safetensors",
        );

        let findings = check_tree(&corrupt.join("wrong-total-size")).unwrap();
        let f = only(&findings, codes::SHARD_TOTAL_SIZE_MISMATCH, index);
        assert_eq!(f.severity, Severity::Warning);

        let valid = fixtures().join("valid/sharded");
        assert!(check_tree(&valid).unwrap().is_empty());
    }
}
