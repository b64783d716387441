//! `config.json` / `tokenizer_config.json`: code the model needs that may not travel with it.
//!
//! transformers reads `auto_map` to load classes from Python files instead of its own code
//! (with `trust_remote_code=True`). A value `"modeling_x.MyModel"` loads `modeling_x.py`
//! from the model's own repository, so that file must be there. A value
//! `"org/repo--modeling_x.MyModel"` loads it from another repository: offline, that repository
//! must be in the target's cache too, which nothing in this model's files reveals at a glance.
//! Both are cheap to see here and expensive to discover on the far side of the air gap.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;

use serde_json::Value;

use super::read::{self, human_size};
use super::{Finding, Resolved, Tree, codes};

/// Configs are kilobytes; a larger file is not worth parsing.
const MAX_CONFIG_SIZE: u64 = 16 * 1024 * 1024;

pub(crate) fn check(tree: &Tree, rel: &str, file: &File, len: u64) -> io::Result<Vec<Finding>> {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    let invalid = |problem: String| {
        vec![Finding::error(
            codes::CONFIG_INVALID_JSON,
            rel,
            problem,
            format!(
                "download `{name}` again; transformers cannot load a model whose {name} is not JSON"
            ),
        )]
    };
    if len > MAX_CONFIG_SIZE {
        return Ok(invalid(format!(
            "is {}, far larger than any model configuration",
            human_size(len)
        )));
    }
    let bytes = read::read_prefix(file, len, MAX_CONFIG_SIZE as usize)?;
    let config: Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(e) => {
            return Ok(invalid(format!(
                "is not valid JSON ({e}); it {}",
                read::describe_start(&bytes[..bytes.len().min(200)])
            )));
        }
    };
    let Some(Value::Object(auto_map)) = config.get("auto_map") else {
        return Ok(Vec::new());
    };

    let dir = rel.rsplit_once('/').map_or("", |(d, _)| d);
    let mut findings = Vec::new();
    let mut remote: BTreeMap<&str, Vec<(&str, &str)>> = BTreeMap::new();
    for (auto_class, value) in auto_map {
        let references: Vec<&str> = match value {
            Value::String(s) => vec![s.as_str()],
            // AutoTokenizer maps to [slow, fast], either of which may be null.
            Value::Array(items) => items.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        for reference in references {
            if let Some((repo, _)) = reference.split_once("--") {
                remote
                    .entry(repo)
                    .or_default()
                    .push((auto_class.as_str(), reference));
                continue;
            }
            let Some((module, _class)) = reference.rsplit_once('.') else {
                continue;
            };
            let module_file = format!("{module}.py");
            let module_rel = if dir.is_empty() {
                module_file.clone()
            } else {
                format!("{dir}/{module_file}")
            };
            if !super::is_plain_relative(&module_rel) {
                continue;
            }
            if matches!(
                tree.resolve(&module_rel)?,
                Resolved::Missing | Resolved::Dangling { .. } | Resolved::NotAFile
            ) {
                findings.push(Finding::error(
                    codes::AUTO_MAP_MODULE_MISSING,
                    rel,
                    format!(
                        "has auto_map {auto_class} → `{reference}`, but `{module_file}` is not \
                         beside it, so loading with trust_remote_code=True fails"
                    ),
                    format!(
                        "download the repository's Python files too (`{module_file}` and what \
                         it imports), then pack again"
                    ),
                ));
            }
        }
    }
    for (repo, uses) in remote {
        let (auto_class, reference) = uses[0];
        let more = if uses.len() > 1 {
            format!(" and {} more", uses.len() - 1)
        } else {
            String::new()
        };
        findings.push(Finding::warning(
            codes::AUTO_MAP_REMOTE_CODE,
            rel,
            format!(
                "has auto_map {auto_class} → `{reference}`{more}: code from another repository, \
                 `{repo}`, which offline loading needs in the cache too, with \
                 trust_remote_code=True"
            ),
            format!(
                "pack `{repo}` as well (at the revision this model expects) and load with \
                 trust_remote_code=True, or use a model whose code ships in its own repository"
            ),
        ));
    }
    Ok(findings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inspect::testutil::*;
    use crate::inspect::{Severity, check_tree};

    #[test]
    fn remote_code_from_another_repository_is_a_warning() {
        let config = r#"{"model_type":"x","auto_map":{
            "AutoConfig":"org/base--configuration_x.XConfig",
            "AutoModelForCausalLM":"org/base--modeling_x.XForCausalLM"}}"#;
        let findings = check_bytes("config.json", config.as_bytes());
        let f = only(&findings, codes::AUTO_MAP_REMOTE_CODE, "config.json");
        assert_eq!(f.severity, Severity::Warning);
        assert!(f.problem.contains("`org/base`"), "{}", f.problem);
        assert!(f.problem.contains("and 1 more"), "{}", f.problem);
        assert!(f.fix.contains("trust_remote_code"), "{}", f.fix);
    }

    #[test]
    fn local_code_must_be_present() {
        let config = r#"{"auto_map":{"AutoModel":"modeling_x.XModel","AutoConfig":"configuration_x.XConfig"}}"#;
        let dir = tree(&[
            ("m/config.json", config.as_bytes()),
            ("m/configuration_x.py", b"class XConfig: pass\n"),
        ]);
        let findings = check_tree(dir.path()).unwrap();
        let f = only(&findings, codes::AUTO_MAP_MODULE_MISSING, "m/config.json");
        assert!(f.problem.contains("`modeling_x.py`"), "{}", f.problem);
    }

    #[test]
    fn tokenizer_config_lists_are_read() {
        let config =
            r#"{"auto_map":{"AutoTokenizer":["org/tok--tokenization_x.XTokenizer",null]}}"#;
        let findings = check_bytes("tokenizer_config.json", config.as_bytes());
        only(
            &findings,
            codes::AUTO_MAP_REMOTE_CODE,
            "tokenizer_config.json",
        );
    }

    /// A config of exactly 16 MiB is parsed (these zeros are not JSON); one byte more is not
    /// read at all.
    #[test]
    fn config_size_limit_is_16_mib() {
        for (len, want) in [
            (16 << 20, "is not valid JSON"),
            ((16 << 20) + 1, "far larger than any model configuration"),
        ] {
            let dir = tree(&[]);
            File::create(dir.path().join("config.json"))
                .unwrap()
                .set_len(len)
                .unwrap();
            let findings = crate::inspect::check_file(dir.path(), "config.json").unwrap();
            let f = only(&findings, codes::CONFIG_INVALID_JSON, "config.json");
            assert!(f.problem.contains(want), "{len}: {}", f.problem);
        }
    }

    /// One remote use is named alone; local modules are looked for beside the config, at the
    /// root too; references without a module, or with a module outside the model, are not
    /// looked for; a directory or a dangling link is not the module.
    #[test]
    fn auto_map_references_one_by_one() {
        let one_remote = r#"{"auto_map":{"AutoModel":"org/base--modeling_x.XModel"}}"#;
        let findings = check_bytes("config.json", one_remote.as_bytes());
        let f = only(&findings, codes::AUTO_MAP_REMOTE_CODE, "config.json");
        assert!(
            f.problem.contains("`org/base--modeling_x.XModel`: code"),
            "{}",
            f.problem
        );
        let local = r#"{"auto_map":{"AutoModel":"modeling_x.XModel","AutoConfig":"NoModule","AutoX":"../up.X"}}"#;
        let dir = tree(&[
            ("config.json", local.as_bytes()),
            ("modeling_x.py", b"class XModel: pass\n"),
        ]);
        assert!(check_tree(dir.path()).unwrap().is_empty());
        for broken in ["dir", "dangling"] {
            let dir = tree(&[("config.json", local.as_bytes())]);
            let module = dir.path().join("modeling_x.py");
            if broken == "dir" {
                std::fs::create_dir(&module).unwrap();
            } else {
                std::os::unix::fs::symlink("nowhere.py", &module).unwrap();
            }
            let findings = crate::inspect::check_file(dir.path(), "config.json").unwrap();
            let f = only(&findings, codes::AUTO_MAP_MODULE_MISSING, "config.json");
            assert!(
                f.problem.contains("`modeling_x.py` is not"),
                "{broken}: {}",
                f.problem
            );
        }
    }

    #[test]
    fn plain_configs_pass_and_broken_ones_do_not() {
        assert!(check_bytes("config.json", br#"{"model_type":"llama"}"#).is_empty());
        let findings = check_bytes("config.json", b"<html>503</html>");
        let f = only(&findings, codes::CONFIG_INVALID_JSON, "config.json");
        assert!(f.problem.contains("`<html>503</html>`"), "{}", f.problem);
        // Other JSON files are not parsed.
        assert!(check_bytes("generation_config.json", b"{").is_empty());
    }
}
