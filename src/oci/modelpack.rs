//! The CNCF ModelPack artifact airlock publishes: media types, the config and the image
//! manifest, built from a signed airlock manifest (model-spec, `specs-go/v1/mediatype.go`,
//! `docs/config.md`, `docs/annotations.md`).
//!
//! Every model file is one raw (untarred, uncompressed) layer: its digest is the file's
//! SHA-256 from the signed manifest and its `org.cncf.model.filepath` annotation its path,
//! so the artifact's content is exactly the signed list, byte for byte, and an unchanged file
//! is the same blob in every version. The signed `manifest.json` and its signature are two
//! more layers of airlock's own media types, at the paths of an install's receipt
//! (`.airlock/`), so a ModelPack tool that extracts the artifact leaves a tree
//! `airlock check --trust` can verify.

use serde_json::{Value, json};

use super::client::MAX_OCI_MANIFEST_BYTES;
use super::client::OCI_MANIFEST;
use crate::bundle::open::MAX_SIGNATURE_BYTES;
use crate::hexdigest;
use crate::manifest::{FileEntry, MAX_MANIFEST_BYTES, Manifest};
use crate::paths::RECEIPT_DIR;

/// The manifest's `artifactType`.
pub const ARTIFACT_TYPE: &str = "application/vnd.cncf.model.manifest.v1+json";
/// The config's media type.
pub(crate) const CONFIG: &str = "application/vnd.cncf.model.config.v1+json";
/// Raw weights.
pub(crate) const WEIGHT_RAW: &str = "application/vnd.cncf.model.weight.v1.raw";
/// Raw weight configuration (config.json, tokenizer files).
pub(crate) const WEIGHT_CONFIG_RAW: &str = "application/vnd.cncf.model.weight.config.v1.raw";
/// Raw documentation (README, LICENSE).
pub(crate) const DOC_RAW: &str = "application/vnd.cncf.model.doc.v1.raw";
/// Raw code (scripts, modelling code).
pub(crate) const CODE_RAW: &str = "application/vnd.cncf.model.code.v1.raw";
/// airlock's signed manifest.
pub(crate) const AIRLOCK_MANIFEST: &str = "application/vnd.airlock.manifest.v1+json";
/// Its minisign signature.
pub(crate) const AIRLOCK_SIGNATURE: &str = "application/vnd.airlock.signature.v1";
/// A co-signature of the manifest (FORMAT.md section 18), one layer per co-signer.
pub(crate) const AIRLOCK_COSIGNATURE: &str = "application/vnd.airlock.cosignature.v1";
/// A TUF root version the bundle carries (FORMAT.md section 18).
pub(crate) const AIRLOCK_TRUST_ROOT: &str = "application/vnd.airlock.trust-root.v1+json";
/// The OMS signature (a Sigstore bundle, FORMAT.md section 19), at its path in the model.
pub(crate) const OMS_SIGNATURE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
/// The layer annotation naming a file's path.
pub(crate) const FILEPATH: &str = "org.cncf.model.filepath";
/// The OCI title annotation (what ORAS names a file by).
pub(crate) const TITLE: &str = "org.opencontainers.image.title";

/// The receipt path of the signed manifest layer.
pub fn manifest_layer_path() -> String {
    format!("{RECEIPT_DIR}/manifest.json")
}

/// The receipt path of the signature layer.
pub fn signature_layer_path() -> String {
    format!("{RECEIPT_DIR}/manifest.json.minisig")
}

fn ext(path: &str) -> String {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default()
}

/// The model-spec media type for a file, by its name.
pub fn media_type(path: &str) -> &'static str {
    let name = path.rsplit('/').next().unwrap_or(path);
    let upper = name.to_ascii_uppercase();
    match ext(path).as_str() {
        "safetensors" | "gguf" | "bin" | "pt" | "pth" | "ckpt" | "onnx" | "h5" | "msgpack"
        | "npz" | "tflite" | "pb" | "ot" | "mlmodel" | "pkl" | "engine" | "plan" => WEIGHT_RAW,
        "py" | "sh" | "ipynb" | "js" | "ts" | "c" | "cc" | "cpp" | "cu" | "h" | "rs" | "go"
        | "java" => CODE_RAW,
        "md" | "pdf" | "rst" | "html" => DOC_RAW,
        _ if [
            "README",
            "LICENSE",
            "LICENCE",
            "NOTICE",
            "COPYING",
            "USE_POLICY",
        ]
        .iter()
        .any(|p| upper.starts_with(p)) =>
        {
            DOC_RAW
        }
        _ => WEIGHT_CONFIG_RAW,
    }
}

/// The model format, from the weight files' names.
pub(crate) fn format_of(m: &Manifest) -> Option<&'static str> {
    let mut found = None;
    for f in &m.files {
        let fmt = match ext(&f.path).as_str() {
            "safetensors" => "safetensors",
            "gguf" => "gguf",
            "onnx" => "onnx",
            "bin" | "pt" | "pth" | "ckpt" => "pytorch",
            _ => continue,
        };
        // safetensors wins over a leftover pytorch_model.bin beside it.
        if found.is_none() || fmt == "safetensors" {
            found = Some(fmt);
        }
    }
    found
}

/// Precision and quantization as a Hugging Face `config.json` states them.
pub fn precision_of(config_json: &[u8]) -> (Option<String>, Option<String>) {
    let Ok(v) = serde_json::from_slice::<Value>(config_json) else {
        return (None, None);
    };
    let dtype = v
        .get("torch_dtype")
        .or_else(|| v.get("dtype"))
        .and_then(|d| d.as_str())
        .map(|d| match d {
            "bfloat16" => "bf16".to_string(),
            "float16" => "fp16".to_string(),
            "float32" => "fp32".to_string(),
            other => other.to_string(),
        });
    let quant = v
        .get("quantization_config")
        .and_then(|q| q.get("quant_method"))
        .and_then(|q| q.as_str())
        .map(str::to_string);
    (dtype, quant)
}

/// One layer of the artifact.
#[derive(Clone, Debug)]
pub struct Layer {
    /// The media type.
    pub media_type: &'static str,
    /// `sha256:HEX`.
    pub digest: String,
    /// Size in bytes.
    pub size: u64,
    /// The path the layer's content has in the model (or the receipt).
    pub path: String,
}

impl Layer {
    /// The layer of a model file.
    pub(crate) fn of_file(f: &FileEntry) -> Layer {
        Layer {
            media_type: media_type(&f.path),
            digest: format!("sha256:{}", f.sha256),
            size: f.size,
            path: f.path.clone(),
        }
    }

    fn descriptor(&self) -> Value {
        json!({
            "mediaType": self.media_type,
            "digest": self.digest,
            "size": self.size,
            "annotations": { FILEPATH: self.path, TITLE: self.path },
        })
    }
}

/// `sha256:HEX` of bytes.
pub fn digest_of(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// The layers of a signed manifest: every file in manifest order, then the airlock manifest
/// and signature.
pub fn layers(m: &Manifest, manifest_bytes: &[u8], signature_text: &str) -> Vec<Layer> {
    let mut out: Vec<Layer> = m.files.iter().map(Layer::of_file).collect();
    out.extend(
        signed_blobs(manifest_bytes, signature_text, &[], &[])
            .into_iter()
            .map(|(l, _)| l),
    );
    out
}

/// The small airlock layers with their bytes, in the artifact's order: the manifest, its
/// signature, then each co-signature (`(file name, text)`) and each carried root, all at their
/// receipt paths.
pub(crate) fn signed_blobs(
    manifest_bytes: &[u8],
    signature_text: &str,
    cosignatures: &[(String, String)],
    roots: &[crate::trust::update::RootFile],
) -> Vec<(Layer, Vec<u8>)> {
    let blob = |media_type, bytes: &[u8], path: String| {
        (
            Layer {
                media_type,
                digest: digest_of(bytes),
                size: bytes.len() as u64,
                path,
            },
            bytes.to_vec(),
        )
    };
    let mut out = vec![
        blob(AIRLOCK_MANIFEST, manifest_bytes, manifest_layer_path()),
        blob(
            AIRLOCK_SIGNATURE,
            signature_text.as_bytes(),
            signature_layer_path(),
        ),
    ];
    for (name, text) in cosignatures {
        out.push(blob(
            AIRLOCK_COSIGNATURE,
            text.as_bytes(),
            format!("{RECEIPT_DIR}/{name}"),
        ));
    }
    for r in roots {
        out.push(blob(
            AIRLOCK_TRUST_ROOT,
            &r.bytes,
            format!(
                "{RECEIPT_DIR}/{}",
                crate::trust::update::file_name(r.version)
            ),
        ));
    }
    out
}

/// What a publish would make a registry refuse, and why.
const PUBLISH_HINT: &str = "pack fewer, larger files (put the many small files into one tar file inside the model), or carry the bundle itself on media";

/// Why an image manifest's airlock layers are refused, or a bundle cannot be published (issue
/// 34 item 6: typed, not a string). `Display` is the reason as the user reads it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayerError {
    /// The image manifest is not JSON.
    #[error("its manifest is not JSON: {0}")]
    NotJson(String),
    /// The image manifest has no layers (read for its trust layers).
    #[error("its manifest has no layers")]
    NoLayers,
    /// The image manifest has no layers (read for the airlock layers: what it may be instead).
    #[error("its manifest has no layers (is it an image index or a Docker v2 manifest?)")]
    NoLayersHinted,
    /// A trust layer without a sha256 digest.
    #[error("a {media_type} layer has no sha256 digest")]
    TrustLayerDigest { media_type: &'static str },
    /// A trust layer without a size.
    #[error("a {media_type} layer has no size")]
    TrustLayerSize { media_type: &'static str },
    /// A trust layer whose path annotation names no file under the receipt directory.
    #[error("a {media_type} layer has no {filepath} annotation naming a file under {receipt}/", filepath = FILEPATH, receipt = RECEIPT_DIR)]
    TrustLayerPath { media_type: &'static str },
    /// Two trust layers for one file.
    #[error("it has two {media_type} layers for {name}")]
    TrustLayerTwice {
        media_type: &'static str,
        name: String,
    },
    /// More than 64 trust layers of a kind.
    #[error("it has more than 64 {media_type} layers")]
    TooManyTrustLayers { media_type: &'static str },
    /// More than one airlock manifest or signature layer.
    #[error("it has more than one {media_type} layer")]
    MoreThanOne { media_type: &'static str },
    /// The airlock manifest or signature layer without a sha256 digest.
    #[error("its {media_type} layer has no sha256 digest")]
    LayerDigest { media_type: &'static str },
    /// The airlock manifest or signature layer without a size.
    #[error("its {media_type} layer has no size")]
    LayerSize { media_type: &'static str },
    /// No airlock manifest layer.
    #[error(
        "it carries no airlock manifest (no {AIRLOCK_MANIFEST} layer): it was not published by `airlock push`, so nothing in it can be verified"
    )]
    NoAirlockManifest,
    /// No airlock signature layer.
    #[error(
        "it carries no airlock signature (no {AIRLOCK_SIGNATURE} layer), so nothing in it can be trusted"
    )]
    NoAirlockSignature,
    /// The image manifest would be larger than a reader reads.
    #[error(
        "cannot publish this bundle to a registry: its OCI image manifest would be {bytes} bytes ({layers} layers), more than the {MAX_OCI_MANIFEST_BYTES}-byte limit `unpack oci://` (and the registry) enforce; nothing was uploaded: {PUBLISH_HINT}"
    )]
    ImageManifestTooLarge { bytes: u64, layers: usize },
    /// A layer larger than a reader fetches it to.
    #[error(
        "cannot publish this bundle to a registry: its {path} layer would be {size} bytes, more than the {limit}-byte limit `unpack oci://` reads it to; nothing was uploaded: {PUBLISH_HINT}"
    )]
    LayerTooLarge { path: String, size: u64, limit: u64 },
}

/// The co-signature and trust-root layers of an image manifest, each with the file name its
/// path annotation gives (`manifest.json.KEYID.minisig`, `N.root.json`). `Err` says what is
/// malformed; at most 64 of each are accepted.
pub fn trust_layers(image_manifest: &[u8]) -> Result<(Vec<Layer>, Vec<Layer>), LayerError> {
    let v: Value =
        serde_json::from_slice(image_manifest).map_err(|e| LayerError::NotJson(e.to_string()))?;
    let layers = v
        .get("layers")
        .and_then(|l| l.as_array())
        .ok_or(LayerError::NoLayers)?;
    let mut cosigs = Vec::new();
    let mut roots = Vec::new();
    for l in layers {
        let media_type = match l.get("mediaType").and_then(|t| t.as_str()) {
            Some(AIRLOCK_COSIGNATURE) => AIRLOCK_COSIGNATURE,
            Some(AIRLOCK_TRUST_ROOT) => AIRLOCK_TRUST_ROOT,
            _ => continue,
        };
        let digest = l
            .get("digest")
            .and_then(|d| d.as_str())
            .filter(|d| hexdigest::sha256_prefixed(d).is_some())
            .ok_or(LayerError::TrustLayerDigest { media_type })?;
        let size = l
            .get("size")
            .and_then(|s| s.as_u64())
            .ok_or(LayerError::TrustLayerSize { media_type })?;
        let name = l
            .get("annotations")
            .and_then(|a| a.get(FILEPATH))
            .and_then(|p| p.as_str())
            .and_then(|p| p.strip_prefix(&format!("{RECEIPT_DIR}/")))
            .filter(|n| {
                if media_type == AIRLOCK_COSIGNATURE {
                    crate::bundle::open::is_cosignature_name(n)
                } else {
                    crate::trust::update::version_of_name(n).is_some()
                }
            })
            .ok_or(LayerError::TrustLayerPath { media_type })?;
        let layer = Layer {
            media_type,
            digest: digest.to_ascii_lowercase(),
            size,
            path: name.to_string(),
        };
        let list = if media_type == AIRLOCK_COSIGNATURE {
            &mut cosigs
        } else {
            &mut roots
        };
        if list.iter().any(|o: &Layer| o.path == layer.path) {
            return Err(LayerError::TrustLayerTwice {
                media_type,
                name: name.to_string(),
            });
        }
        list.push(layer);
        if list.len() > 64 {
            return Err(LayerError::TooManyTrustLayers { media_type });
        }
    }
    Ok((cosigs, roots))
}

/// The ModelPack config document.
pub fn config(
    m: &Manifest,
    layers: &[Layer],
    precision: (Option<String>, Option<String>),
) -> Vec<u8> {
    let mut cfg = serde_json::Map::new();
    if let Some(f) = format_of(m) {
        cfg.insert("format".into(), json!(f));
    }
    if let Some(p) = precision.0 {
        cfg.insert("precision".into(), json!(p));
    }
    if let Some(q) = precision.1 {
        cfg.insert("quantization".into(), json!(q));
    }
    let doc = json!({
        "descriptor": {
            "name": m.name,
            "version": m.version.to_string(),
            "createdAt": m.created,
        },
        "config": cfg,
        "modelfs": {
            "type": "layers",
            "diffIds": layers.iter().map(|l| l.digest.clone()).collect::<Vec<_>>(),
        },
    });
    serde_json::to_vec(&doc).expect("json")
}

/// The OCI image manifest of the artifact.
pub(crate) fn image_manifest(
    m: &Manifest,
    config: &[u8],
    layers: &[Layer],
    manifest_sha256: &str,
) -> Vec<u8> {
    image_manifest_for(
        m,
        &digest_of(config),
        config.len() as u64,
        layers,
        manifest_sha256,
    )
}

fn image_manifest_for(
    m: &Manifest,
    config_digest: &str,
    config_size: u64,
    layers: &[Layer],
    manifest_sha256: &str,
) -> Vec<u8> {
    let doc = json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": ARTIFACT_TYPE,
        "config": {
            "mediaType": CONFIG,
            "digest": config_digest,
            "size": config_size,
        },
        "layers": layers.iter().map(Layer::descriptor).collect::<Vec<_>>(),
        "annotations": {
            "org.cncf.model.name": m.name,
            "org.cncf.model.version": m.version.to_string(),
            "org.cncf.model.created": m.created,
            "org.opencontainers.image.created": m.created,
            "dev.airlock.manifest.sha256": manifest_sha256,
        },
    });
    serde_json::to_vec(&doc).expect("json")
}

/// Largest root `config.json` read for the artifact's config (precision, quantization).
pub const MAX_CONFIG_JSON: u64 = 1 << 20;

/// Keeps the root `config.json`'s bytes as the verified entries pass (when it is small enough):
/// its precision and quantization go into the artifact's config.
#[derive(Debug, Default)]
pub struct ConfigCapture {
    capturing: bool,
    bytes: Option<Vec<u8>>,
}

impl ConfigCapture {
    /// A file begins.
    pub fn begin(&mut self, f: &FileEntry) {
        self.capturing = f.path == "config.json" && f.size <= MAX_CONFIG_JSON;
        if self.capturing {
            self.bytes = Some(Vec::with_capacity(f.size as usize));
        }
    }
    /// Bytes of the current file.
    pub fn data(&mut self, b: &[u8]) {
        if self.capturing
            && let Some(c) = &mut self.bytes
        {
            c.extend_from_slice(b);
        }
    }
    /// The current file ended.
    pub fn end(&mut self) {
        self.capturing = false;
    }
    /// The config's bytes, if they passed.
    pub fn take(&mut self) -> Option<Vec<u8>> {
        self.bytes.take()
    }
}

/// The root `config.json` whose content goes into the artifact's config, if the model has one
/// small enough.
pub fn config_json_entry(m: &Manifest) -> Option<&FileEntry> {
    m.files
        .iter()
        .find(|f| f.path == "config.json" && f.size <= MAX_CONFIG_JSON)
}

/// The layers of a verified bundle: every file in manifest order, then its small signed
/// blobs (the airlock manifest, its signature, the co-signatures that counted, the trust roots
/// it carries), those with their bytes.
pub fn bundle_layers(opened: &crate::bundle::open::Opened) -> (Vec<Layer>, Vec<(Layer, Vec<u8>)>) {
    let small = signed_blobs(
        &opened.manifest_bytes,
        &opened.signature_text,
        &opened.trust.cosignatures,
        &opened.trust.roots,
    );
    let mut small = small;
    if let Some(c) = &opened.oms {
        small.push((
            Layer {
                media_type: OMS_SIGNATURE,
                digest: digest_of(&c.bytes),
                size: c.bytes.len() as u64,
                path: c.name.clone(),
            },
            c.bytes.clone(),
        ));
    }
    let mut layers: Vec<Layer> = opened.manifest.files.iter().map(Layer::of_file).collect();
    layers.extend(small.iter().map(|(l, _)| l.clone()));
    (layers, small)
}

/// The whole artifact of a verified bundle: its layers, the small ones with their bytes, the
/// config and the image manifest.
pub struct Artifact {
    /// Every file, then the small signed blobs.
    pub layers: Vec<Layer>,
    /// The small signed blobs with their bytes.
    pub small: Vec<(Layer, Vec<u8>)>,
    /// The ModelPack config document.
    pub config: Vec<u8>,
    /// The OCI image manifest.
    pub image: Vec<u8>,
}

impl Artifact {
    /// The artifact of `opened`, its config reading precision from the root `config.json`
    /// content when given (already checked against its signed digest).
    pub fn of(opened: &crate::bundle::open::Opened, config_json: Option<&[u8]>) -> Artifact {
        let m = &opened.manifest;
        let (layers, small) = bundle_layers(opened);
        let precision = config_json.map(precision_of).unwrap_or((None, None));
        let config = config(m, &layers, precision);
        let image = image_manifest(m, &config, &layers, &opened.manifest_sha256);
        Artifact {
            layers,
            small,
            config,
            image,
        }
    }
}

/// Checks, before anything is uploaded, that the artifact of `m` is one `unpack oci://`
/// reads: its image manifest within [`MAX_OCI_MANIFEST_BYTES`] (the limit the reader and
/// distribution enforce), the airlock manifest and signature layers within the limits the
/// reader fetches them to. `Err` says which and why, with the way out.
///
/// The image manifest's size does not depend on the config's content (only its digest and
/// size are in it), so it is measured with a config of the largest possible size field.
pub fn check_publishable(
    m: &Manifest,
    layers: &[Layer],
    manifest_sha256: &str,
) -> Result<(), LayerError> {
    let placeholder = format!("sha256:{}", "0".repeat(64));
    let bound = image_manifest_for(m, &placeholder, u64::MAX, layers, manifest_sha256).len() as u64;
    if bound > MAX_OCI_MANIFEST_BYTES {
        return Err(LayerError::ImageManifestTooLarge {
            bytes: bound,
            layers: layers.len(),
        });
    }
    for l in layers {
        let limit = match l.media_type {
            AIRLOCK_MANIFEST => MAX_MANIFEST_BYTES,
            AIRLOCK_SIGNATURE => MAX_SIGNATURE_BYTES,
            OMS_SIGNATURE => crate::manifest::MAX_OMS_SIGNATURE_BYTES,
            _ => continue,
        };
        if l.size > limit {
            return Err(LayerError::LayerTooLarge {
                path: l.path.clone(),
                size: l.size,
                limit,
            });
        }
    }
    Ok(())
}

/// Finds the digests of the airlock manifest and signature layers in an image manifest.
/// `Err` says what is missing or malformed.
pub fn airlock_layers(image_manifest: &[u8]) -> Result<(Layer, Layer), LayerError> {
    let v: Value =
        serde_json::from_slice(image_manifest).map_err(|e| LayerError::NotJson(e.to_string()))?;
    let layers = v
        .get("layers")
        .and_then(|l| l.as_array())
        .ok_or(LayerError::NoLayersHinted)?;
    let find = |media_type: &'static str| -> Result<Option<Layer>, LayerError> {
        let mut hits = layers
            .iter()
            .filter(|l| l.get("mediaType").and_then(|t| t.as_str()) == Some(media_type));
        let Some(l) = hits.next() else {
            return Ok(None);
        };
        if hits.next().is_some() {
            return Err(LayerError::MoreThanOne { media_type });
        }
        let digest = l
            .get("digest")
            .and_then(|d| d.as_str())
            .filter(|d| hexdigest::sha256_prefixed(d).is_some())
            .ok_or(LayerError::LayerDigest { media_type })?;
        let size = l
            .get("size")
            .and_then(|s| s.as_u64())
            .ok_or(LayerError::LayerSize { media_type })?;
        Ok(Some(Layer {
            media_type,
            digest: digest.to_ascii_lowercase(),
            size,
            path: String::new(),
        }))
    };
    match (find(AIRLOCK_MANIFEST)?, find(AIRLOCK_SIGNATURE)?) {
        (Some(m), Some(s)) => Ok((m, s)),
        (None, _) => Err(LayerError::NoAirlockManifest),
        (Some(_), None) => Err(LayerError::NoAirlockSignature),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_get_the_model_spec_kind_by_name() {
        assert_eq!(media_type("model-00001-of-00002.safetensors"), WEIGHT_RAW);
        assert_eq!(media_type("sub/ggml-q4.gguf"), WEIGHT_RAW);
        assert_eq!(media_type("config.json"), WEIGHT_CONFIG_RAW);
        assert_eq!(media_type("tokenizer.model"), WEIGHT_CONFIG_RAW);
        assert_eq!(media_type("merges.txt"), WEIGHT_CONFIG_RAW);
        assert_eq!(media_type("README.md"), DOC_RAW);
        assert_eq!(media_type("LICENSE"), DOC_RAW);
        assert_eq!(media_type("modeling_x.py"), CODE_RAW);
    }

    #[test]
    fn precision_comes_from_config_json() {
        assert_eq!(
            precision_of(
                br#"{"torch_dtype":"bfloat16","quantization_config":{"quant_method":"gptq"}}"#
            ),
            (Some("bf16".into()), Some("gptq".into()))
        );
        assert_eq!(precision_of(b"not json"), (None, None));
    }

    /// A manifest of `n` files with `path_len`-byte paths (only what the artifact uses).
    fn many_files(n: usize, path_len: usize) -> Manifest {
        let files: Vec<Value> = (0..n)
            .map(|i| {
                let name = format!("{i:08}");
                json!({
                    "path": format!("{}{name}", "p".repeat(path_len - name.len())),
                    "size": 1,
                    "sha256": "ab".repeat(32),
                    "executable": false,
                })
            })
            .collect();
        serde_json::from_value(json!({
            "format": "airlock-bundle",
            "format_version": 2,
            "name": "m",
            "version": 1,
            "created": "2026-01-01T00:00:00Z",
            "tool": "test",
            "compression": {"algorithm": "none"},
            "stream": {"size": 0},
            "chunk_size": 4096,
            "volumes": [],
            "directories": [],
            "files": files,
            "totals": {"files": n, "directories": 0, "file_bytes": n, "volume_bytes": 0},
        }))
        .unwrap()
    }

    #[test]
    fn an_artifact_unpack_would_refuse_is_not_publishable() {
        let sha = "cd".repeat(32);
        let sig = "s".repeat(300);
        // Small: publishable, and the bound holds for any config.
        let m = many_files(50, 40);
        let small = layers_of(&m, &sig);
        assert!(check_publishable(&m, &small, &sha).is_ok());
        let cfg = config(&m, &small, (Some("x".repeat(5000)), None));
        assert!((image_manifest(&m, &cfg, &small, &sha).len() as u64) < MAX_OCI_MANIFEST_BYTES);
        // 20,000 files of 100-byte paths: an image manifest of 8.8 MB, over 4 MiB.
        let m = many_files(20_000, 100);
        let big = layers_of(&m, &sig);
        let image = image_manifest(&m, b"{}", &big, &sha);
        assert!(
            image.len() as u64 > MAX_OCI_MANIFEST_BYTES,
            "{}",
            image.len()
        );
        let why = check_publishable(&m, &big, &sha).unwrap_err().to_string();
        assert!(why.contains("20002 layers"), "{why}");
        assert!(why.contains("nothing was uploaded"), "{why}");
        // The largest count that fits is still publishable: the limit is the reader's, no less.
        let fits = |n: usize| {
            let m = many_files(n, 100);
            image_manifest(&m, b"{}", &layers_of(&m, &sig), &sha).len() as u64 + 20
                <= MAX_OCI_MANIFEST_BYTES
        };
        let (mut lo, mut hi) = (1usize, 20_000usize);
        while hi - lo > 1 {
            let mid = (lo + hi) / 2;
            if fits(mid) { lo = mid } else { hi = mid }
        }
        let m = many_files(lo, 100);
        assert!(check_publishable(&m, &layers_of(&m, &sig), &sha).is_ok());
        // A signature layer larger than the reader fetches.
        let m = many_files(1, 40);
        let big_sig = "s".repeat(MAX_SIGNATURE_BYTES as usize + 1);
        let why = check_publishable(&m, &layers_of(&m, &big_sig), &sha)
            .unwrap_err()
            .to_string();
        assert!(why.contains("manifest.json.minisig"), "{why}");
    }

    fn layers_of(m: &Manifest, sig: &str) -> Vec<Layer> {
        layers(m, b"{}", sig)
    }

    #[test]
    fn airlock_layers_are_required() {
        let sig = format!(
            r#"{{"mediaType":"{AIRLOCK_SIGNATURE}","digest":"sha256:{}","size":3}}"#,
            "b".repeat(64)
        );
        let man = format!(
            r#"{{"mediaType":"{AIRLOCK_MANIFEST}","digest":"sha256:{}","size":9}}"#,
            "a".repeat(64)
        );
        let both = format!(r#"{{"layers":[{man},{sig}]}}"#);
        let (m, s) = airlock_layers(both.as_bytes()).unwrap();
        assert_eq!((m.size, s.size), (9, 3));
        let only_man = format!(r#"{{"layers":[{man}]}}"#);
        assert!(
            airlock_layers(only_man.as_bytes())
                .unwrap_err()
                .to_string()
                .contains("no airlock signature")
        );
        assert!(
            airlock_layers(br#"{"layers":[]}"#)
                .unwrap_err()
                .to_string()
                .contains("no airlock manifest")
        );
        let twice = format!(r#"{{"layers":[{man},{man},{sig}]}}"#);
        assert!(airlock_layers(twice.as_bytes()).is_err());
    }
}
