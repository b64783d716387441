//! The stable finding codes.
//!
//! A code names one kind of damage and never changes meaning: scripts, CI gates and the
//! `--allow` lists of users match on it, while the problem sentence beside it is free to
//! improve. The severity of each code is fixed too, and noted here.

// Anywhere in the tree.

/// Error: a Git LFS pointer stands where the file should be.
pub const LFS_POINTER: &str = "lfs-pointer";
/// Error: a `*.incomplete` file, an interrupted Hugging Face download.
pub const INCOMPLETE_DOWNLOAD: &str = "incomplete-download";
/// Error: a weight file (by extension) with zero bytes.
pub const EMPTY_WEIGHT_FILE: &str = "empty-weight-file";
/// Error: a symlink whose target does not exist (or cannot be resolved).
pub const DANGLING_SYMLINK: &str = "dangling-symlink";
/// Error: a symlink that resolves outside the checked tree.
pub const SYMLINK_ESCAPES_TREE: &str = "symlink-escapes-tree";
/// Error: the hub's listing of a cached commit (`trees/<commit>.json`) names a file that the
/// snapshot lacks: an interrupted download, or one limited to some files on purpose.
pub const HF_FILE_MISSING: &str = "hf-file-missing";

// safetensors: one code per refusal of the reference reader.

/// Error: under 8 bytes (`HeaderTooSmall`).
pub const SAFETENSORS_HEADER_TOO_SMALL: &str = "safetensors-header-too-small";
/// Error: header length over 100,000,000 (`HeaderTooLarge`).
pub const SAFETENSORS_HEADER_TOO_LARGE: &str = "safetensors-header-too-large";
/// Error: the declared header runs past the end of the file (`InvalidHeaderLength`).
pub const SAFETENSORS_HEADER_TRUNCATED: &str = "safetensors-header-truncated";
/// Error: the header is not UTF-8 (`InvalidHeader`).
pub const SAFETENSORS_HEADER_NOT_UTF8: &str = "safetensors-header-not-utf8";
/// Error: the header is not the JSON the reader expects (`InvalidHeaderDeserialization`).
pub const SAFETENSORS_HEADER_INVALID: &str = "safetensors-header-invalid";
/// Error: the file starts with zero bytes, a preallocated file never written
/// (`InvalidHeaderDeserialization`).
pub const SAFETENSORS_ZERO_FILLED: &str = "safetensors-zero-filled";
/// Error: sorted data offsets do not start at 0 and run contiguously (`InvalidOffset`).
pub const SAFETENSORS_INVALID_OFFSET: &str = "safetensors-invalid-offset";
/// Error: shape × dtype size overflows (`ValidationOverflow`).
pub const SAFETENSORS_SIZE_OVERFLOW: &str = "safetensors-size-overflow";
/// Error: a sub-byte dtype tensor does not end on a byte boundary (`MisalignedSlice`).
pub const SAFETENSORS_MISALIGNED_SUBBYTE: &str = "safetensors-misaligned-subbyte";
/// Error: byte length ≠ dtype size × product(shape) (`TensorInvalidInfo`).
pub const SAFETENSORS_TENSOR_INVALID_INFO: &str = "safetensors-tensor-invalid-info";
/// Error: the file is shorter than the header says (`MetadataIncompleteBuffer`).
pub const SAFETENSORS_TRUNCATED: &str = "safetensors-truncated";
/// Error: bytes follow the last tensor (`MetadataIncompleteBuffer`).
pub const SAFETENSORS_TRAILING_BYTES: &str = "safetensors-trailing-bytes";
/// Error: the header lists more tensors or shape dimensions than airlock reads from one file
/// (not a refusal of the reference reader: a limit of airlock's, so a legal header cannot make
/// the checks exhaust memory).
pub const SAFETENSORS_TOO_MANY_TENSORS: &str = "safetensors-too-many-tensors";

// Sharded checkpoints (`*.index.json`).

/// Error: the index is not JSON with a `weight_map` of strings.
pub const SHARD_INDEX_INVALID: &str = "shard-index-invalid";
/// Error: a shard name in `weight_map` is absolute or climbs out with `..`.
pub const SHARD_PATH_INVALID: &str = "shard-path-invalid";
/// Error: a shard named in `weight_map` is not in the tree.
pub const SHARD_MISSING: &str = "shard-missing";
/// Error: a tensor the index assigns to a shard is not in that shard's header.
pub const SHARD_TENSOR_MISSING: &str = "shard-tensor-missing";
/// Warning: the shards' tensor bytes do not add up to `metadata.total_size`.
pub const SHARD_TOTAL_SIZE_MISMATCH: &str = "shard-total-size-mismatch";

// GGUF.

/// Error: a `.gguf` file that does not start with `GGUF`.
pub const GGUF_BAD_MAGIC: &str = "gguf-bad-magic";
/// Error: a GGUF version ggml does not read (0, 1, or newer than 3).
pub const GGUF_UNSUPPORTED_VERSION: &str = "gguf-unsupported-version";
/// Warning: a big-endian GGUF, which llama.cpp on a little-endian host refuses.
pub const GGUF_BIG_ENDIAN: &str = "gguf-big-endian";
/// Error: the file ends inside the header, key/values or tensor infos.
pub const GGUF_TRUNCATED: &str = "gguf-truncated";
/// Error: tensor or key/value counts the file cannot hold.
pub const GGUF_INVALID_HEADER: &str = "gguf-invalid-header";
/// Error: a key/value ggml refuses (empty or duplicate key, bad type, bad `general.alignment`).
pub const GGUF_INVALID_KV: &str = "gguf-invalid-kv";
/// Error: a tensor info ggml refuses (name, dims, type, block size, offset).
pub const GGUF_INVALID_TENSOR_INFO: &str = "gguf-invalid-tensor-info";
/// Error: tensor data past the end of the file (llama.cpp: "data is not within the file
/// bounds").
pub const GGUF_TENSOR_OUT_OF_BOUNDS: &str = "gguf-tensor-out-of-bounds";

// PyTorch checkpoints (`.bin`, `.pt`, `.pth`, `.ckpt`).

/// Error: a checkpoint file that holds text (an HTML error page, a JSON error, a pointer).
pub const TORCH_NOT_A_CHECKPOINT: &str = "torch-not-a-checkpoint";
/// Warning: a `.pt`/`.pth`/`.ckpt` that is neither a zip nor a pickle.
pub const TORCH_UNRECOGNIZED_FORMAT: &str = "torch-unrecognized-format";
/// Error: no end-of-central-directory record ("failed finding central directory").
pub const TORCH_ZIP_NO_EOCD: &str = "torch-zip-no-eocd";
/// Warning: a zip checkpoint without the ZIP64 records `torch.save` always writes.
pub const TORCH_ZIP_NOT_ZIP64: &str = "torch-zip-not-zip64";
/// Error: the ZIP64 locator or ZIP64 end record is missing, misplaced or inconsistent.
pub const TORCH_ZIP_BAD_ZIP64: &str = "torch-zip-bad-zip64";
/// Error: the central directory is not where the end records say, or does not parse.
pub const TORCH_ZIP_BAD_CENTRAL_DIRECTORY: &str = "torch-zip-bad-central-directory";
/// Error: an entry's local header or data is not where the central directory says.
pub const TORCH_ZIP_ENTRY_OUT_OF_BOUNDS: &str = "torch-zip-entry-out-of-bounds";
/// Error: the zip lacks what `torch.load` needs (one top folder, `data.pkl`, `version`).
pub const TORCH_ZIP_BAD_LAYOUT: &str = "torch-zip-bad-layout";

// config.json and tokenizer_config.json.

/// Error: `config.json` (or `tokenizer_config.json`) is not valid JSON.
pub const CONFIG_INVALID_JSON: &str = "config-invalid-json";
/// Warning: `auto_map` loads code from another repository.
pub const AUTO_MAP_REMOTE_CODE: &str = "auto-map-remote-code";
/// Error: `auto_map` names a module file of this repository that is not there.
pub const AUTO_MAP_MODULE_MISSING: &str = "auto-map-module-missing";

// Offline readiness (`--offline-ready`, `inspect::offline`): what the loaders look for.

/// Error: a file a loader reads is not there (config.json beside weights, weights beside a
/// config naming an architecture, a PEFT adapter's weights) or cannot be read as JSON.
pub const OFFLINE_FILE_MISSING: &str = "offline-file-missing";
/// Error: the tokenizer's class has none of the files it is built from.
pub const OFFLINE_TOKENIZER_FILES_MISSING: &str = "offline-tokenizer-files-missing";
/// Warning: no `tokenizer.json`, only a SentencePiece model the loader converts with packages
/// the target may not have.
pub const OFFLINE_TOKENIZER_NEEDS_CONVERSION: &str = "offline-tokenizer-needs-conversion";
/// Warning: a text-generating model with no chat template, which a chatting caller needs.
pub const OFFLINE_CHAT_TEMPLATE_MISSING: &str = "offline-chat-template-missing";
/// Error: `auto_map` code imports a module of its repository that is not there.
pub const OFFLINE_REMOTE_CODE_IMPORT_MISSING: &str = "offline-remote-code-import-missing";
/// Error: `auto_map` code imports a module of its repository by its plain name (`import x`,
/// `from x import ...`, with `x.py` beside it) or from transformers' module cache
/// (`transformers_modules...`): transformers' `check_imports` looks for an installed package
/// of that name and never fetches the file.
pub const OFFLINE_REMOTE_CODE_ABSOLUTE_IMPORT: &str = "offline-remote-code-absolute-import";
/// Warning: another repository is needed (a PEFT base model), and the cache it will load
/// from is not known here.
pub const OFFLINE_REPO_NEEDED: &str = "offline-repo-needed";
/// Warning: the loader reaches for the network whatever the cache holds unless HF_HUB_OFFLINE
/// is set (peft's `load_peft_weights` by repository id).
pub const OFFLINE_NEEDS_HUB_OFFLINE: &str = "offline-needs-hub-offline";
/// Error: another repository is needed and the cache does not hold it at a revision that
/// resolves offline.
pub const OFFLINE_REPO_MISSING: &str = "offline-repo-missing";
/// Error: the repository's own revision does not resolve offline in the cache.
pub const OFFLINE_REVISION_UNRESOLVED: &str = "offline-revision-unresolved";
/// Error: a sentence-transformers module of `modules.json` lacks what it loads.
pub const OFFLINE_ST_MODULE_MISSING: &str = "offline-st-module-missing";
/// Error: a diffusers component of `model_index.json` lacks its subfolder, config or weights.
pub const OFFLINE_DIFFUSERS_COMPONENT_MISSING: &str = "offline-diffusers-component-missing";
/// Error: a GGUF split of `NAME-0000N-of-0000M.gguf` is missing.
pub const OFFLINE_GGUF_SPLIT_MISSING: &str = "offline-gguf-split-missing";
/// Warning: a vision or audio model with no image processor or feature extractor config,
/// which a caller that feeds it images or sound (AutoProcessor, a pipeline) needs.
pub const OFFLINE_PROCESSOR_MISSING: &str = "offline-processor-missing";

// Values (the value scan, `inspect::values`): read while the bytes pass for another reason.

/// Error: NaN values in a float tensor, or NaN scales in a quantized one.
pub const TENSOR_NAN: &str = "tensor-nan";
/// Error: +Inf or -Inf values in a float tensor, or infinite scales in a quantized one.
pub const TENSOR_INF: &str = "tensor-inf";
/// Error: a run of at least 1 MiB of zero bytes across a tensor boundary: a preallocated file
/// that was never completely written.
pub const TENSOR_ZERO_REGION: &str = "tensor-zero-region";
/// Warning: a tensor of at least two values, all zero.
pub const TENSOR_ALL_ZERO: &str = "tensor-all-zero";
/// Warning: a float tensor of at least two values, all equal (and not zero).
pub const TENSOR_CONSTANT: &str = "tensor-constant";

/// The codes whose findings are warnings; every other code is an error.
pub(crate) const WARNINGS: &[&str] = &[
    SHARD_TOTAL_SIZE_MISMATCH,
    GGUF_BIG_ENDIAN,
    TORCH_UNRECOGNIZED_FORMAT,
    TORCH_ZIP_NOT_ZIP64,
    AUTO_MAP_REMOTE_CODE,
    OFFLINE_TOKENIZER_NEEDS_CONVERSION,
    OFFLINE_CHAT_TEMPLATE_MISSING,
    OFFLINE_REPO_NEEDED,
    OFFLINE_NEEDS_HUB_OFFLINE,
    OFFLINE_PROCESSOR_MISSING,
    TENSOR_ALL_ZERO,
    TENSOR_CONSTANT,
];

/// The severity of a code's findings (fixed per code): what a reader of a manifest's recorded
/// findings, which carry the code and not the severity, goes by.
pub fn severity(code: &str) -> super::Severity {
    if WARNINGS.contains(&code) {
        super::Severity::Warning
    } else {
        super::Severity::Error
    }
}

#[cfg(test)]
mod tests {
    /// [`super::WARNINGS`] holds exactly the codes documented above as `Warning:`.
    #[test]
    fn the_warning_list_is_the_documented_one() {
        let text = include_str!("codes.rs");
        let mut documented = Vec::new();
        let mut lines = text.lines().peekable();
        while let Some(line) = lines.next() {
            if !line.starts_with("/// Warning:") {
                continue;
            }
            // The constant follows its comment, which may run over several lines.
            for next in lines.by_ref() {
                if let Some(rest) = next.strip_prefix("pub const ") {
                    let value = rest.split('"').nth(1).expect("a string constant");
                    documented.push(value);
                    break;
                }
            }
        }
        let mut listed = super::WARNINGS.to_vec();
        documented.sort_unstable();
        listed.sort_unstable();
        assert_eq!(documented, listed);
    }
}
