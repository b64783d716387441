//! `--offline-ready` agrees with the real loaders, offline (issue 35 items 1 and 3).
//!
//! tests/offline_models.py builds small models with the real transformers, tokenizers, peft,
//! sentence-transformers and diffusers (tiny random configurations saved by `save_pretrained`,
//! nothing downloaded; GGUF splits with gguf-py), some complete and some with what a loader
//! needs taken away. Each is checked (`check DIR --offline-ready`), packed (pack reports the
//! offline findings as warnings and refuses only for the other model checks' errors), unpacked into one fresh Hugging Face cache,
//! checked there (`check --hf-cache C --hf-repo R --offline-ready`: the prediction), and
//! loaded from that cache with the real library in a network namespace with no network
//! (`unshare -n`) and without HF_HUB_OFFLINE, so any reach for the network fails loudly.
//!
//! For every case: predicted ready ⇔ it loads; and where it does not, the loader's error names
//! a file or repository airlock's error findings named. A warning counts for the caller it
//! is about: the chat-template warning for a caller that chats (`causal+chat`), the processor
//! warning for one that feeds the model images or sound (`image`, `audio`).
//!
//! The packages come from scripts/requirements-loaders.txt (scripts/setup.sh installs them into
//! $AIRLOCK_VENV); without them this test fails rather than skips.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use crate::support::Env;

pub(crate) fn venv_python() -> PathBuf {
    let venv = std::env::var_os("AIRLOCK_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv"));
    let python = venv.join("bin/python");
    assert!(
        python.is_file(),
        "{} does not exist: run scripts/setup.sh (or point AIRLOCK_VENV at a venv with \
         scripts/requirements-loaders.txt installed)",
        python.display()
    );
    let probe = Command::new(&python)
        .args([
            "-c",
            "import torch, transformers, tokenizers, peft, sentence_transformers, diffusers, gguf",
        ])
        .output()
        .expect("run the venv's python");
    assert!(
        probe.status.success(),
        "the real loaders are not installed in {}: run scripts/setup.sh \
         (scripts/requirements-loaders.txt): {}",
        python.display(),
        String::from_utf8_lossy(&probe.stderr)
    );
    python
}

pub(crate) fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/offline_models.py")
}

/// The text between backticks in `s` (the names a finding quotes), and their last components.
fn quoted(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, part) in s.split('`').enumerate() {
        if i % 2 == 1 && !part.is_empty() {
            out.push(part.to_string());
            let last = part
                .trim_end_matches('/')
                .rsplit('/')
                .next()
                .unwrap_or(part);
            out.push(last.to_string());
        }
    }
    out
}

/// The problems `check --hf-cache` found in the cache (a model check of the snapshot, a
/// damaged blob), as text.
fn cache_problems(j: &Value) -> Vec<String> {
    j["problems"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| p["problem"].as_str().unwrap_or("").to_string())
        .collect()
}

fn codes(j: &Value, key: &str) -> Vec<String> {
    j[key]
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| f["code"].as_str().unwrap_or("").to_string())
        .collect()
}

#[test]
fn prediction_matches_the_real_offline_load() {
    let python = venv_python();
    let env = Env::new();
    let models = env.path("models");
    let out = Command::new(&python)
        .arg(script())
        .args(["build"])
        .arg(&models)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "building the models failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cases: BTreeMap<String, Value> =
        serde_json::from_slice(&std::fs::read(models.join("cases.json")).unwrap()).unwrap();
    assert!(cases.len() >= 20, "{} cases", cases.len());

    // Check, pack (refused exactly when the directory check finds errors), unpack.
    let mut dir_checks = BTreeMap::new();
    for (name, spec) in &cases {
        let dir = format!("models/{name}");
        let (code, j) = env.json(&["check", &dir, "--offline-ready"]);
        assert_eq!(
            code == 0,
            j["offline_ready"] == true,
            "{name}: exit {code} but offline_ready {}",
            j["offline_ready"]
        );
        // Pack refuses only for the other model checks' errors: offline findings are warnings
        // there (the target's loader and cache are not known at pack).
        let other_errors = j["findings"].as_array().unwrap().iter().any(|f| {
            f["severity"] == "error" && !f["code"].as_str().unwrap().starts_with("offline-")
        });
        let refused = env.run(&["pack", &dir, "-o", &format!("b-{name}"), "--key", "k.key"]);
        assert_eq!(
            !refused.status.success(),
            other_errors,
            "{name}: pack {} but check's non-offline errors: {other_errors}: {}",
            if refused.status.success() {
                "packed"
            } else {
                "refused"
            },
            String::from_utf8_lossy(&refused.stderr)
        );
        if code != 0 && !other_errors {
            // The offline errors reach pack's output as warnings, naming their files.
            let text = String::from_utf8_lossy(&refused.stderr);
            for f in j["offline_findings"].as_array().unwrap() {
                let path = f["path"].as_str().unwrap();
                assert!(
                    text.contains("warning") && text.contains(path),
                    "{name}: pack said nothing of the offline finding on {path}: {text}"
                );
            }
        }
        if !refused.status.success() {
            env.ok(&[
                "pack",
                &dir,
                "-o",
                &format!("b-{name}"),
                "--key",
                "k.key",
                "--no-model-checks",
            ]);
        }
        let repo = spec["repo"].as_str().unwrap();
        let mut unpack = vec![
            "unpack".to_string(),
            format!("b-{name}"),
            "--trust".into(),
            "k.pub".into(),
            "--hf-cache".into(),
            "cache".into(),
            "--hf-repo".into(),
            repo.into(),
        ];
        if let Some(rev) = spec["revision"].as_str() {
            unpack.extend(["--revision".into(), rev.into()]);
        }
        let args: Vec<&str> = unpack.iter().map(String::as_str).collect();
        env.ok(&args);
        dir_checks.insert(name.clone(), j);
    }

    // The prediction, where the model will load from.
    let mut predictions = BTreeMap::new();
    for (name, spec) in &cases {
        let repo = spec["repo"].as_str().unwrap();
        let (code, j) = env.json(&[
            "check",
            "--hf-cache",
            "cache",
            "--hf-repo",
            repo,
            "--offline-ready",
            "--no-value-scan",
        ]);
        assert!(code == 0 || code == 3, "{name}: exit {code}: {j}");
        assert_eq!(code == 0, j["offline_ready"] == true, "{name}: {j}");
        predictions.insert(name.clone(), (code, j));
    }

    // The real load, with no network: once as a caller that sets nothing, once with
    // HF_HUB_OFFLINE=1 (the caller the `offline-needs-hub-offline` warning asks for).
    let plain = load_all(&python, &env, false);
    let hub_offline = load_all(&python, &env, true);

    let mut table = Vec::new();
    let mut wrong = Vec::new();
    let mut ready_count = 0;
    let mut cases_loaded = 0;
    for (name, spec) in &cases {
        let (_, j) = &predictions[name];
        for (with_hub_offline, loads) in [(false, &plain), (true, &hub_offline)] {
            let Some(loaded) = loads.get(name) else {
                continue; // A repository other cases need, not loaded by itself.
            };
            // What applies to this caller: every error, and the warnings about what it does.
            let chats = spec["load"] == "causal+chat";
            // A caller that feeds the model images or sound goes through its processor.
            let processes = spec["load"] == "image" || spec["load"] == "audio";
            let applies = |code: &str, severity: &str| {
                severity == "error"
                    || (chats && code == "offline-chat-template-missing")
                    || (processes && code == "offline-processor-missing")
                    || (!with_hub_offline && code == "offline-needs-hub-offline")
            };
            let mut named = Vec::new();
            let mut ready = j["offline_ready"] == true;
            for f in j["offline_findings"].as_array().into_iter().flatten() {
                let code = f["code"].as_str().unwrap_or("");
                if applies(code, f["severity"].as_str().unwrap_or("")) {
                    ready = false;
                    named.extend(quoted(f["problem"].as_str().unwrap_or("")));
                }
            }
            for text in cache_problems(j) {
                named.extend(quoted(&text));
            }
            if chats {
                named.push("chat_template".into());
            }
            let caller = if with_hub_offline {
                "HF_HUB_OFFLINE=1"
            } else {
                "no HF_HUB_OFFLINE"
            };
            if !with_hub_offline {
                cases_loaded += 1;
                ready_count += usize::from(ready);
            }
            let ok = match loaded {
                None => ready,
                Some(err) => {
                    !ready
                        && named
                            .iter()
                            .any(|n| n.len() > 2 && err.to_lowercase().contains(&n.to_lowercase()))
                }
            };
            table.push(format!(
                "{name} ({caller}): predicted {}, loaded {}",
                if ready { "ready" } else { "not ready" },
                match loaded {
                    None => "yes".to_string(),
                    Some(e) => format!("no ({})", e.chars().take(400).collect::<String>()),
                }
            ));
            if !ok {
                wrong.push(format!(
                    "{name} ({caller}): predicted {} (airlock named {named:?}; directory check {}), load: {loaded:?}",
                    if ready { "ready" } else { "not ready" },
                    dir_checks[name]["offline_findings"]
                ));
            }
        }
    }
    eprintln!("{}", table.join("\n"));
    assert!(wrong.is_empty(), "prediction ≠ load:\n{}", wrong.join("\n"));
    assert!(
        cases_loaded >= 20 && ready_count >= 5 && cases_loaded - ready_count >= 10,
        "too few cases of each kind: {table:#?}"
    );
}

/// Loads every case from the test's cache in a network namespace with no network, with or
/// without HF_HUB_OFFLINE=1: `{case: null | error}`.
pub(crate) fn load_all(
    python: &PathBuf,
    env: &Env,
    hub_offline: bool,
) -> BTreeMap<String, Option<String>> {
    let mut cmd = Command::new("unshare");
    cmd.arg("-n")
        .arg(python)
        .arg(script())
        .args(["load", "cache", "models/cases.json"])
        .current_dir(env.dir.path())
        .env("HF_HUB_CACHE", env.path("cache"))
        .env("HF_HOME", env.path("hf-home"))
        .env(
            "HF_MODULES_CACHE",
            env.path(if hub_offline {
                "hf-modules-1"
            } else {
                "hf-modules-0"
            }),
        )
        .env_remove("HF_HUB_OFFLINE")
        .env_remove("TRANSFORMERS_OFFLINE")
        .env_remove("HF_DATASETS_OFFLINE")
        .env("HF_HUB_DISABLE_TELEMETRY", "1");
    if hub_offline {
        cmd.env("HF_HUB_OFFLINE", "1");
    }
    let out = cmd
        .output()
        .expect("unshare (util-linux) must be installed");
    assert!(
        out.status.success(),
        "the loads did not run: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// The checks' words for the loaders name what is missing (a unit of the same rules, on one
/// directory, no Python needed).
#[test]
fn check_offline_ready_lists_what_is_missing() {
    let env = Env::new();
    env.write(
        "m/config.json",
        br#"{"model_type":"llama","architectures":["LlamaForCausalLM"]}"#,
    );
    env.write(
        "m/tokenizer_config.json",
        br#"{"tokenizer_class":"LlamaTokenizer"}"#,
    );
    env.write("m/adapter_config.json", b"{}");
    let (code, j) = env.json(&["check", "m", "--offline-ready"]);
    assert_eq!(code, 3, "{j}");
    assert_eq!(j["offline_ready"], false);
    let got = codes(&j, "offline_findings");
    assert!(got.contains(&"offline-file-missing".to_string()), "{j}");
    // Without the flag the same directory gets the format checks only.
    let (code, j) = env.json(&["check", "m"]);
    assert_eq!(code, 0, "{j}");
    assert!(j.get("offline_ready").is_none());
    // --hf-cache needs --hf-repo for it.
    env.fails(2, &["check", "--hf-cache", "m", "--offline-ready"]);
}
