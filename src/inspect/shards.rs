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

use serde_json::Value;

use super::read::{self, human_size};
use super::safetensors;
use super::{Finding, Resolved, Tree, codes, is_plain_relative};

/// Indexes are a few MB even for the largest models; anything bigger is not an index.
const MAX_INDEX_SIZE: u64 = 64 * 1024 * 1024;

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
    let bytes = read::read_prefix(file, len, MAX_INDEX_SIZE as usize)?;
    let index: Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(e) => return invalid(format!("is not valid JSON ({e})")),
    };
    let Some(Value::Object(weight_map)) = index.get("weight_map") else {
        return invalid("has no `weight_map` object".to_string());
    };
    let mut by_shard: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (tensor, shard) in weight_map {
        let Some(shard) = shard.as_str() else {
            return invalid(format!(
                "maps tensor `{tensor}` to {shard}, which is not a file name"
            ));
        };
        by_shard.entry(shard).or_default().push(tensor);
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
                        count(tensors.len(), "tensor"),
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
    let total_size = index
        .get("metadata")
        .and_then(|m| m.get("total_size"))
        .and_then(|t| t.as_u64().or_else(|| t.as_f64().map(|f| f as u64)));
    if let (Some(total), Some(sum)) = (total_size, tensor_bytes)
        && total != sum
    {
        findings.push(Finding::warning(
            codes::SHARD_TOTAL_SIZE_MISMATCH,
            rel,
            format!(
                "says metadata.total_size is {total} bytes but the tensors of its {} add up to \
                 {sum} bytes (off by {})",
                count(by_shard.len(), "shard"),
                total.abs_diff(sum)
            ),
            "check that every shard comes from the same revision as the index; loaders ignore \
             total_size, so if the shards are right this is only a stale index",
        ));
    }
    Ok(findings)
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
            count(assigned, "tensor"),
            names.join(", ")
        ),
        "the shard and the index come from different exports; download both again from the \
         same revision",
    )
}

fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
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
