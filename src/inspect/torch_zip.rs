//! PyTorch checkpoints: `torch.save` zips, legacy pickles, and text that is neither.
//!
//! Since PyTorch 1.6, `torch.save` writes a zip through miniz (`PyTorchStreamWriter` in
//! `caffe2/serialize/inline_container.cc`): entries stored uncompressed, each local header
//! padded with an `FB` extra field so the data starts on a 64-byte boundary, all under one
//! top-level folder (`archive/data.pkl`, `archive/byteorder`, `archive/data/0`, ...,
//! `archive/version`, `archive/.data/serialization_id`), and ZIP64 always on, so the file ends
//! with a ZIP64 end record (56 bytes), a ZIP64 locator (20) and the end record (22).
//!
//! A zip is read from its end, so truncation destroys exactly the part a reader needs first:
//! with no end record in the last 64 KiB, PyTorch says "PytorchStreamReader failed reading zip
//! archive: failed finding central directory". This check finds the three end records, checks
//! that they agree with each other and that the central directory ends exactly where the
//! ZIP64 record begins, then walks the central directory: every entry's local header must be
//! where the directory says, and its data must end before the directory starts. Finally the
//! layout `torch.load` relies on: one top-level folder, a `data.pkl` and a `version` record.
//!
//! Older checkpoints are a bare pickle (first byte 0x80, the protocol opcode) and are not
//! checked further. A checkpoint file that starts with text is an HTML error page, a JSON
//! error or a pointer, never a checkpoint. Other binary `.bin` files are left alone: `.bin`
//! is also the extension of raw weight files (OpenVINO IR, legacy ggml).

use std::fs::File;
use std::io;

use super::read::{self, PosReader, Short, describe_start, human_size, looks_like_text};
use super::{Finding, codes};

const LOCAL_SIG: u32 = 0x0403_4b50;
const CENTRAL_SIG: u32 = 0x0201_4b50;
const EOCD_SIG: u32 = 0x0605_4b50;
const EOCD64_SIG: u32 = 0x0606_4b50;
const LOCATOR_SIG: u32 = 0x0706_4b50;
const LOCAL_LEN: u64 = 30;
const CENTRAL_LEN: u64 = 46;
const EOCD_LEN: u64 = 22;
const EOCD64_LEN: u64 = 56;
const LOCATOR_LEN: u64 = 20;
const MAX_COMMENT: u64 = 0xFFFF;

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

const FIX_RECOPY: &str = "download or copy the checkpoint again and compare its size with the \
     source; torch.load will refuse it as it is";

/// The check for one `.bin` / `.pt` / `.pth` / `.ckpt` file.
pub(crate) fn check(
    rel: &str,
    ext: &str,
    file: &File,
    len: u64,
    prefix: &[u8],
) -> io::Result<Vec<Finding>> {
    if prefix.starts_with(b"PK\x03\x04") || prefix.starts_with(b"PK\x05\x06") {
        return check_zip(rel, file, len);
    }
    if prefix.len() >= 2 && prefix[0] == 0x80 && (2..=5).contains(&prefix[1]) {
        return Ok(Vec::new());
    }
    if looks_like_text(prefix) {
        return Ok(vec![Finding::error(
            codes::TORCH_NOT_A_CHECKPOINT,
            rel,
            format!(
                "is a .{ext} checkpoint that {} ({}): text, not a PyTorch zip or pickle",
                describe_start(prefix),
                human_size(len)
            ),
            "the download saved an error page or a pointer in place of the weights; download \
             the real file again",
        )]);
    }
    if ext == "bin" {
        return Ok(Vec::new());
    }
    Ok(vec![Finding::warning(
        codes::TORCH_UNRECOGNIZED_FORMAT,
        rel,
        format!(
            "is a .{ext} file that is neither a PyTorch zip nor a pickle: it {}",
            describe_start(prefix)
        ),
        "check that the file is what the model card says; torch.load cannot read it",
    )])
}

/// The end records, once found and reconciled.
struct End {
    entries: u64,
    cd_size: u64,
    cd_offset: u64,
    /// Where the central directory must end: the ZIP64 end record, or the end record.
    cd_end: u64,
    zip64: bool,
}

fn check_zip(rel: &str, file: &File, len: u64) -> io::Result<Vec<Finding>> {
    let mut findings = Vec::new();
    let end = match find_end(rel, file, len)? {
        Ok(end) => end,
        Err(f) => return Ok(vec![f]),
    };
    if !end.zip64 {
        findings.push(Finding::warning(
            codes::TORCH_ZIP_NOT_ZIP64,
            rel,
            "is a zip without the ZIP64 end records torch.save always writes, so it was \
             written by another tool (PyTorch can still read it)",
            "if this should be a torch.save checkpoint, check where it came from",
        ));
    }
    if let Err(f) = walk(rel, file, &end)? {
        findings.push(f);
    }
    Ok(findings)
}

fn bad_cd(rel: &str, problem: String) -> Finding {
    Finding::error(
        codes::TORCH_ZIP_BAD_CENTRAL_DIRECTORY,
        rel,
        problem,
        FIX_RECOPY,
    )
}

fn bad_zip64(rel: &str, problem: String) -> Finding {
    Finding::error(codes::TORCH_ZIP_BAD_ZIP64, rel, problem, FIX_RECOPY)
}

/// Finds the end record and the ZIP64 records, and checks that they agree.
fn find_end(rel: &str, file: &File, len: u64) -> io::Result<Result<End, Finding>> {
    let (eocd, eocd_pos) = match locate_eocd(rel, file, len)? {
        Ok(found) => found,
        Err(finding) => return Ok(Err(finding)),
    };
    let mut locator = [0u8; LOCATOR_LEN as usize];
    let has_locator = eocd_pos >= LOCATOR_LEN
        && read::read_at(file, eocd_pos - LOCATOR_LEN, &mut locator)? == locator.len()
        && u32_at(&locator, 0) == LOCATOR_SIG;
    if has_locator {
        zip64_end(rel, file, &eocd, eocd_pos, &locator)
    } else {
        Ok(classic_end(rel, &eocd, eocd_pos))
    }
}

/// A classic end-of-central-directory record, as read.
type Eocd = [u8; EOCD_LEN as usize];

/// The end-of-central-directory record and its offset: the last signature in the file's tail
/// whose comment length reaches exactly to the end of the file.
fn locate_eocd(rel: &str, file: &File, len: u64) -> io::Result<Result<(Eocd, u64), Finding>> {
    let tail_len = len.min(EOCD_LEN + MAX_COMMENT);
    let tail_start = len - tail_len;
    let mut tail = vec![0u8; tail_len as usize];
    let got = read::read_at(file, tail_start, &mut tail)?;
    tail.truncate(got);
    // The last signature whose comment length reaches exactly to the end of the file: a
    // signature found elsewhere is stray data (typical of a truncated file), not an end record.
    let eocd_in_tail = (0..tail.len().saturating_sub(EOCD_LEN as usize - 1))
        .rev()
        .find(|&i| {
            u32_at(&tail, i) == EOCD_SIG
                && i + EOCD_LEN as usize + usize::from(u16_at(&tail, i + 20)) == tail.len()
        });
    let Some(i) = eocd_in_tail else {
        return Ok(Err(Finding::error(
            codes::TORCH_ZIP_NO_EOCD,
            rel,
            format!(
                "is a zip with no end-of-central-directory record in its last {}: truncated \
                 (PyTorch: \"PytorchStreamReader failed reading zip archive: failed finding \
                 central directory\")",
                human_size(tail_len)
            ),
            FIX_RECOPY,
        )));
    };
    let mut eocd = [0u8; EOCD_LEN as usize];
    eocd.copy_from_slice(&tail[i..i + EOCD_LEN as usize]);
    Ok(Ok((eocd, tail_start + i as u64)))
}

/// The end of a zip without a ZIP64 locator: the classic record's own values.
fn classic_end(rel: &str, eocd: &Eocd, eocd_pos: u64) -> Result<End, Finding> {
    let entries16 = u16_at(eocd, 10);
    let cd_size32 = u32_at(eocd, 12);
    let cd_offset32 = u32_at(eocd, 16);
    if entries16 == 0xFFFF || cd_size32 == u32::MAX || cd_offset32 == u32::MAX {
        return Err(bad_zip64(
            rel,
            format!(
                "has an end record at byte {eocd_pos} that defers to ZIP64 values, but no \
                 ZIP64 locator precedes it"
            ),
        ));
    }
    if u16_at(eocd, 4) != 0 || u16_at(eocd, 6) != 0 || entries16 != u16_at(eocd, 8) {
        return Err(bad_cd(
            rel,
            "is a zip that spans several disks (miniz: \"unsupported multidisk archive\")"
                .to_string(),
        ));
    }
    Ok(End {
        entries: u64::from(entries16),
        cd_size: u64::from(cd_size32),
        cd_offset: u64::from(cd_offset32),
        cd_end: eocd_pos,
        zip64: false,
    })
}

/// The end of a zip whose classic record is preceded by a ZIP64 locator: the ZIP64 end record it
/// points at, held to the classic record wherever that one is not saturated.
fn zip64_end(
    rel: &str,
    file: &File,
    eocd: &Eocd,
    eocd_pos: u64,
    locator: &[u8; LOCATOR_LEN as usize],
) -> io::Result<Result<End, Finding>> {
    let disk = u16_at(eocd, 4);
    let cd_disk = u16_at(eocd, 6);
    let entries16 = u16_at(eocd, 10);
    let cd_size32 = u32_at(eocd, 12);
    let cd_offset32 = u32_at(eocd, 16);
    let locator_pos = eocd_pos - LOCATOR_LEN;
    let eocd64_pos = u64_at(locator, 8);
    let locator_disk = u32_at(locator, 4);
    let total_disks = u32_at(locator, 16);
    if eocd64_pos
        .checked_add(EOCD64_LEN)
        .is_none_or(|end| end > locator_pos)
    {
        return Ok(Err(bad_zip64(
            rel,
            format!(
                "has a ZIP64 locator pointing at byte {eocd64_pos}, where no 56-byte ZIP64 end \
                 record fits before the locator at byte {locator_pos}"
            ),
        )));
    }
    let mut eocd64 = [0u8; EOCD64_LEN as usize];
    read::read_at(file, eocd64_pos, &mut eocd64)?;
    if u32_at(&eocd64, 0) != EOCD64_SIG {
        return Ok(Err(bad_zip64(
            rel,
            format!(
                "has no ZIP64 end record at byte {eocd64_pos}, where its ZIP64 locator points \
                 (miniz: \"not a ZIP archive\")"
            ),
        )));
    }
    let record_size = u64_at(&eocd64, 4);
    if eocd64_pos
        .checked_add(12)
        .and_then(|p| p.checked_add(record_size))
        != Some(locator_pos)
    {
        return Ok(Err(bad_zip64(
            rel,
            format!(
                "has a ZIP64 end record at byte {eocd64_pos} declaring {record_size} more bytes, \
                 which does not end where the ZIP64 locator begins (byte {locator_pos})"
            ),
        )));
    }
    let disk64 = u32_at(&eocd64, 16);
    let cd_disk64 = u32_at(&eocd64, 20);
    let entries_disk = u64_at(&eocd64, 24);
    let entries = u64_at(&eocd64, 32);
    let cd_size = u64_at(&eocd64, 40);
    let cd_offset = u64_at(&eocd64, 48);
    let disagreements = [
        ("entry count", u64::from(entries16), 0xFFFF, entries),
        (
            "central directory size",
            u64::from(cd_size32),
            0xFFFF_FFFF,
            cd_size,
        ),
        (
            "central directory offset",
            u64::from(cd_offset32),
            0xFFFF_FFFF,
            cd_offset,
        ),
    ];
    for (field, short, saturated, long) in disagreements {
        if short != saturated && short != long {
            return Ok(Err(bad_zip64(
                rel,
                format!(
                    "has an end record whose {field} is {short} but a ZIP64 end record whose \
                     {field} is {long}"
                ),
            )));
        }
    }
    if disk != 0
        || cd_disk != 0
        || disk64 != 0
        || cd_disk64 != 0
        || locator_disk != 0
        || total_disks != 1
        || entries_disk != entries
    {
        return Ok(Err(bad_cd(
            rel,
            "is a zip that spans several disks (miniz: \"unsupported multidisk archive\")"
                .to_string(),
        )));
    }
    Ok(Ok(End {
        entries,
        cd_size,
        cd_offset,
        cd_end: eocd64_pos,
        zip64: true,
    }))
}

/// Walks the central directory and each entry's local header.
fn walk(rel: &str, file: &File, end: &End) -> io::Result<Result<(), Finding>> {
    let record = if end.zip64 {
        "ZIP64 end record"
    } else {
        "end record"
    };
    let cd_stop = end.cd_offset.checked_add(end.cd_size);
    if cd_stop != Some(end.cd_end) {
        return Ok(Err(bad_cd(
            rel,
            format!(
                "has a central directory of {} bytes at byte {}, which should end where the \
                 {record} begins (byte {}) but ends at byte {}",
                end.cd_size,
                end.cd_offset,
                end.cd_end,
                cd_stop.map_or_else(|| "past 2^64".to_string(), |s| s.to_string())
            ),
        )));
    }
    if end.entries.saturating_mul(CENTRAL_LEN) > end.cd_size {
        return Ok(Err(bad_cd(
            rel,
            format!(
                "declares {} entries, more than its {}-byte central directory can hold",
                end.entries, end.cd_size
            ),
        )));
    }
    if end.entries == 0 {
        return Ok(Err(layout(
            rel,
            "is an empty zip (PyTorch: \"archive does not contain any files\")".to_string(),
        )));
    }

    // Reads through this reader cannot go past the central directory.
    let mut cd = PosReader::new(file, end.cd_end, end.cd_offset);
    let mut top = String::new();
    let (mut has_pickle, mut has_version) = (false, false);
    for i in 0..end.entries {
        let at = cd.pos();
        let entry_past_end = |_: Short| {
            bad_cd(
                rel,
                format!(
                    "has central directory entry {} of {} (at byte {at}) running past the end \
                     of the central directory",
                    i + 1,
                    end.entries
                ),
            )
        };
        let header = match cd.array::<{ CENTRAL_LEN as usize }>() {
            Ok(h) => h,
            Err(Short::Io(e)) => return Err(e),
            Err(s) => return Ok(Err(entry_past_end(s))),
        };
        if u32_at(&header, 0) != CENTRAL_SIG {
            return Ok(Err(bad_cd(
                rel,
                format!(
                    "has no central directory header at byte {at} for entry {} of {} \
                     (miniz: \"invalid header or archive is corrupted\")",
                    i + 1,
                    end.entries
                ),
            )));
        }
        let mut compressed = u64::from(u32_at(&header, 20));
        let mut uncompressed = u64::from(u32_at(&header, 24));
        let name_len = u64::from(u16_at(&header, 28));
        let extra_len = u64::from(u16_at(&header, 30));
        let comment_len = u64::from(u16_at(&header, 32));
        let mut local = u64::from(u32_at(&header, 42));
        let (name, extra) = match (cd.bytes(name_len), cd.bytes(extra_len)) {
            (Ok(n), Ok(e)) => (n, e),
            (Err(Short::Io(e)), _) | (_, Err(Short::Io(e))) => return Err(e),
            (Err(s), _) | (_, Err(s)) => return Ok(Err(entry_past_end(s))),
        };
        match cd.skip(comment_len) {
            Ok(()) => {}
            Err(Short::Io(e)) => return Err(e),
            Err(s) => return Ok(Err(entry_past_end(s))),
        }
        let name = String::from_utf8_lossy(&name).into_owned();
        if !zip64_extra(&extra, &mut uncompressed, &mut compressed, &mut local) {
            return Ok(Err(bad_cd(
                rel,
                format!("has entry `{name}` whose ZIP64 sizes are missing from its extra field"),
            )));
        }
        if let Err(f) = local_header(rel, file, &name, local, compressed, end.cd_offset)? {
            return Ok(Err(f));
        }
        if i == 0 {
            let Some((folder, _)) = name.split_once('/') else {
                return Ok(Err(layout(
                    rel,
                    format!(
                        "has first entry `{name}` outside any folder (PyTorch: \"file in \
                         archive is not in a subdirectory\")"
                    ),
                )));
            };
            top = folder.to_string();
        }
        if let Some(record) = name
            .strip_prefix(top.as_str())
            .and_then(|r| r.strip_prefix('/'))
        {
            has_pickle |= record == "data.pkl";
            has_version |= record == "version" || record == ".data/version";
        }
    }
    if !has_pickle || !has_version {
        let missing = match (has_pickle, has_version) {
            (false, false) => "data.pkl and version records",
            (false, true) => "data.pkl record",
            _ => "version record",
        };
        return Ok(Err(layout(
            rel,
            format!("is a zip without the `{top}/` {missing} that torch.load reads"),
        )));
    }
    Ok(Ok(()))
}

fn layout(rel: &str, problem: String) -> Finding {
    Finding::error(
        codes::TORCH_ZIP_BAD_LAYOUT,
        rel,
        problem,
        "this zip was not written by torch.save; check where the checkpoint came from",
    )
}

/// Applies a ZIP64 extended-information extra field (id 1) to the saturated fields; false if
/// a saturated field has no 64-bit value.
fn zip64_extra(
    extra: &[u8],
    uncompressed: &mut u64,
    compressed: &mut u64,
    local: &mut u64,
) -> bool {
    let mut need: Vec<&mut u64> = [uncompressed, compressed, local]
        .into_iter()
        .filter(|v| **v == 0xFFFF_FFFF)
        .collect();
    if need.is_empty() {
        return true;
    }
    let mut at = 0;
    while at + 4 <= extra.len() {
        let id = u16_at(extra, at);
        let size = usize::from(u16_at(extra, at + 2));
        let body = &extra[(at + 4).min(extra.len())..(at + 4 + size).min(extra.len())];
        if id == 1 {
            if body.len() < need.len() * 8 {
                return false;
            }
            for (k, field) in need.iter_mut().enumerate() {
                **field = u64_at(body, k * 8);
            }
            return true;
        }
        at += 4 + size;
    }
    false
}

/// Checks that an entry's local header is where the central directory says and that its data
/// ends before the central directory starts.
fn local_header(
    rel: &str,
    file: &File,
    name: &str,
    offset: u64,
    compressed: u64,
    cd_offset: u64,
) -> io::Result<Result<(), Finding>> {
    let out = |problem: String| {
        Ok(Err(Finding::error(
            codes::TORCH_ZIP_ENTRY_OUT_OF_BOUNDS,
            rel,
            problem,
            FIX_RECOPY,
        )))
    };
    if offset.saturating_add(LOCAL_LEN) > cd_offset {
        return out(format!(
            "has entry `{name}` whose local header at byte {offset} lies past the start of the \
             central directory (byte {cd_offset})"
        ));
    }
    let mut header = [0u8; LOCAL_LEN as usize];
    if read::read_at(file, offset, &mut header)? < header.len() || u32_at(&header, 0) != LOCAL_SIG {
        return out(format!(
            "has no local header at byte {offset}, where the central directory says entry \
             `{name}` starts"
        ));
    }
    let name_len = u64::from(u16_at(&header, 26));
    let extra_len = u64::from(u16_at(&header, 28));
    let mut local_name = vec![0u8; name_len as usize];
    read::read_at(file, offset + LOCAL_LEN, &mut local_name)?;
    if local_name != name.as_bytes() {
        return out(format!(
            "has a local header at byte {offset} naming `{}` where the central directory says \
             `{name}`",
            String::from_utf8_lossy(&local_name)
        ));
    }
    let data_end = offset + LOCAL_LEN + name_len + extra_len;
    let data_end = data_end.saturating_add(compressed);
    if data_end > cd_offset {
        return out(format!(
            "has entry `{name}` whose {compressed} bytes of data run to byte {data_end}, past \
             the start of the central directory (byte {cd_offset})"
        ));
    }
    Ok(Ok(()))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::inspect::testutil::*;
    use crate::inspect::{Severity, check_file};

    /// A torch.save-style zip: stored entries, 64-byte aligned data via an `FB` extra field,
    /// ZIP64 end records.
    pub(crate) fn torch_zip(entries: &[(&str, &[u8])], zip64: bool) -> Vec<u8> {
        let mut out = Vec::new();
        let mut central = Vec::new();
        for (name, data) in entries {
            let offset = out.len() as u64;
            let start = offset + LOCAL_LEN + name.len() as u64 + 4;
            let pad = (64 - start % 64) % 64;
            let mut extra = b"FB".to_vec();
            extra.extend((pad as u16).to_le_bytes());
            extra.extend(std::iter::repeat_n(b'Z', pad as usize));
            let mut local = Vec::new();
            local.extend(LOCAL_SIG.to_le_bytes());
            local.extend([20, 0, 0, 0, 0, 0, 0, 0, 0, 0]); // version, flags, method, time, date
            local.extend(0u32.to_le_bytes()); // crc (unchecked here)
            local.extend((data.len() as u32).to_le_bytes());
            local.extend((data.len() as u32).to_le_bytes());
            local.extend((name.len() as u16).to_le_bytes());
            local.extend((extra.len() as u16).to_le_bytes());
            out.extend(local);
            out.extend(name.as_bytes());
            out.extend(&extra);
            assert_eq!(out.len() % 64, 0);
            out.extend(*data);

            central.extend(CENTRAL_SIG.to_le_bytes());
            central.extend([20, 0, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
            central.extend(0u32.to_le_bytes());
            central.extend((data.len() as u32).to_le_bytes());
            central.extend((data.len() as u32).to_le_bytes());
            central.extend((name.len() as u16).to_le_bytes());
            central.extend([0u8; 2 + 2 + 2 + 2 + 4]); // extra, comment, disk, attrs
            central.extend((offset as u32).to_le_bytes());
            central.extend(name.as_bytes());
        }
        let cd_offset = out.len() as u64;
        let cd_size = central.len() as u64;
        out.extend(central);
        let eocd64_pos = out.len() as u64;
        if zip64 {
            out.extend(EOCD64_SIG.to_le_bytes());
            out.extend(44u64.to_le_bytes());
            out.extend([45, 0, 45, 0]);
            out.extend([0u8; 8]);
            out.extend((entries.len() as u64).to_le_bytes());
            out.extend((entries.len() as u64).to_le_bytes());
            out.extend(cd_size.to_le_bytes());
            out.extend(cd_offset.to_le_bytes());
            out.extend(LOCATOR_SIG.to_le_bytes());
            out.extend(0u32.to_le_bytes());
            out.extend(eocd64_pos.to_le_bytes());
            out.extend(1u32.to_le_bytes());
        }
        out.extend(EOCD_SIG.to_le_bytes());
        out.extend([0u8; 4]);
        out.extend((entries.len() as u16).to_le_bytes());
        out.extend((entries.len() as u16).to_le_bytes());
        out.extend((cd_size as u32).to_le_bytes());
        out.extend((cd_offset as u32).to_le_bytes());
        out.extend([0u8; 2]);
        out
    }

    pub(crate) const ENTRIES: &[(&str, &[u8])] = &[
        ("archive/data.pkl", b"\x80\x02}q\x00."),
        ("archive/byteorder", b"little"),
        ("archive/data/0", &[7u8; 100]),
        ("archive/version", b"3\n"),
    ];

    fn one(bytes: &[u8], code: &str) -> Finding {
        let findings = check_bytes("pytorch_model.bin", bytes);
        only(&findings, code, "pytorch_model.bin").clone()
    }

    #[test]
    fn a_torch_style_zip_passes() {
        let bytes = torch_zip(ENTRIES, true);
        for name in ["pytorch_model.bin", "model.pt", "model.pth", "last.ckpt"] {
            assert!(check_bytes(name, &bytes).is_empty(), "{name}");
        }
    }

    #[test]
    fn a_plain_zip_is_only_a_warning() {
        let f = one(&torch_zip(ENTRIES, false), codes::TORCH_ZIP_NOT_ZIP64);
        assert_eq!(f.severity, Severity::Warning);
    }

    #[test]
    fn truncation_loses_the_end_records() {
        let bytes = torch_zip(ENTRIES, true);
        for cut in [1, 22, 98, 150, bytes.len() - 10] {
            let f = one(&bytes[..bytes.len() - cut], codes::TORCH_ZIP_NO_EOCD);
            assert!(
                f.problem.contains("failed finding central directory"),
                "{}",
                f.problem
            );
        }
    }

    #[test]
    fn the_end_records_must_agree() {
        let good = torch_zip(ENTRIES, true);
        let n = good.len();
        // EOCD's entry count (offset 10 of the end record) disagrees with ZIP64's.
        let mut bytes = good.clone();
        bytes[n - 22 + 10] = 9;
        one(&bytes, codes::TORCH_ZIP_BAD_ZIP64);
        // The locator points at the wrong place: too late for a whole record before it, or
        // somewhere with no record.
        let mut bytes = good.clone();
        let late = (n - 22 - 20 - 55) as u64;
        bytes[n - 22 - 20 + 8..n - 22 - 20 + 16].copy_from_slice(&late.to_le_bytes());
        let f = one(&bytes, codes::TORCH_ZIP_BAD_ZIP64);
        assert!(
            f.problem.contains("where no 56-byte ZIP64 end record fits"),
            "{}",
            f.problem
        );
        let mut bytes = good.clone();
        bytes[n - 22 - 20 + 8] -= 8;
        let f = one(&bytes, codes::TORCH_ZIP_BAD_ZIP64);
        assert!(
            f.problem.contains("has no ZIP64 end record at byte"),
            "{}",
            f.problem
        );
        // The ZIP64 record's central directory size is off by one: the directory no longer
        // ends where the ZIP64 record begins.
        let mut bytes = good.clone();
        let cd_size_at = n - 22 - 20 - 56 + 40;
        bytes[cd_size_at] = bytes[cd_size_at].wrapping_add(1);
        bytes[n - 22 + 12] = bytes[n - 22 + 12].wrapping_add(1);
        let f = one(&bytes, codes::TORCH_ZIP_BAD_CENTRAL_DIRECTORY);
        assert!(
            f.problem.contains("ZIP64 end record begins"),
            "{}",
            f.problem
        );
    }

    /// Every field of the three end records that miniz refuses, each on its own: one broken
    /// rule per input, so deleting any one check fails this test.
    #[test]
    fn each_end_record_field_on_its_own() {
        let zip64 = torch_zip(ENTRIES, true);
        let n = zip64.len();
        let (eocd, locator, eocd64) = (n - 22, n - 22 - 20, n - 22 - 20 - 56);
        let patch = |bytes: &[u8], at: usize, value: &[u8]| {
            let mut b = bytes.to_vec();
            b[at..at + value.len()].copy_from_slice(value);
            b
        };
        let multidisk = "spans several disks";
        for (at, value) in [
            (eocd + 4, &[1u8, 0][..]),     // this disk
            (eocd + 6, &[1, 0]),           // disk of the central directory
            (eocd64 + 16, &[1, 0, 0, 0]),  // ZIP64: this disk
            (eocd64 + 20, &[1, 0, 0, 0]),  // ZIP64: disk of the central directory
            (eocd64 + 24, &[3, 0, 0, 0]),  // ZIP64: entries on this disk
            (locator + 4, &[1, 0, 0, 0]),  // locator: disk of the ZIP64 record
            (locator + 16, &[2, 0, 0, 0]), // locator: total disks
        ] {
            let f = one(
                &patch(&zip64, at, value),
                codes::TORCH_ZIP_BAD_CENTRAL_DIRECTORY,
            );
            assert!(f.problem.contains(multidisk), "{at}: {}", f.problem);
        }
        // The end record may defer each field to ZIP64 by saturating it...
        for (at, value) in [
            (eocd + 10, &[0xFF, 0xFF][..]),
            (eocd + 12, &[0xFF; 4]),
            (eocd + 16, &[0xFF; 4]),
        ] {
            assert!(
                check_bytes("m.pt", &patch(&zip64, at, value)).is_empty(),
                "{at}"
            );
        }
        // ...but otherwise each must agree with it.
        for (at, field) in [
            (eocd + 10, "entry count is 5"),
            (eocd + 12, "central directory size is 5"),
            (eocd + 16, "central directory offset is 5"),
        ] {
            let f = one(&patch(&zip64, at, &[5, 0]), codes::TORCH_ZIP_BAD_ZIP64);
            assert!(f.problem.contains(field), "{at}: {}", f.problem);
        }
        // Without ZIP64 records, saturating a field defers to records that are not there.
        let plain = torch_zip(ENTRIES, false);
        let m = plain.len();
        for (at, value) in [
            (m - 22 + 10, &[0xFF, 0xFF][..]),
            (m - 22 + 12, &[0xFF; 4]),
            (m - 22 + 16, &[0xFF; 4]),
        ] {
            let f = one(&patch(&plain, at, value), codes::TORCH_ZIP_BAD_ZIP64);
            assert!(
                f.problem.contains("no ZIP64 locator"),
                "{at}: {}",
                f.problem
            );
        }
        for (at, value) in [
            (m - 22 + 4, &[1u8, 0][..]),
            (m - 22 + 6, &[1, 0]),
            (m - 22 + 8, &[3, 0]),
        ] {
            let findings = check_bytes("m.pt", &patch(&plain, at, value));
            let f = &findings[0];
            assert_eq!(
                f.code,
                codes::TORCH_ZIP_BAD_CENTRAL_DIRECTORY,
                "{at}: {findings:#?}"
            );
            assert!(f.problem.contains(multidisk), "{at}: {}", f.problem);
        }
    }

    /// The end record may carry a comment: it is found by its comment length reaching the end.
    #[test]
    fn an_end_record_with_a_comment() {
        let mut bytes = torch_zip(ENTRIES, true);
        let n = bytes.len();
        bytes[n - 2..].copy_from_slice(&10u16.to_le_bytes());
        bytes.extend(b"a comment!");
        assert!(check_bytes("m.pt", &bytes).is_empty());
    }

    /// The end record is looked for in the last 22 + 65535 bytes (the record and the longest
    /// comment), and the message says so.
    #[test]
    fn the_end_record_search_window() {
        let big = vec![7u8; 100_000];
        let entries: &[(&str, &[u8])] =
            &[("archive/data.pkl", b"\x80\x02."), ("archive/data/0", &big)];
        let bytes = torch_zip(entries, true);
        let f = one(&bytes[..bytes.len() - 1], codes::TORCH_ZIP_NO_EOCD);
        assert!(
            f.problem.contains("in its last 65.6 kB (65557 bytes)"),
            "{}",
            f.problem
        );
    }

    /// A bare pickle (protocol 2 to 5) is a legacy checkpoint under any checkpoint name.
    #[test]
    fn legacy_pickles_by_protocol() {
        for proto in 2u8..=5 {
            assert!(
                check_bytes("model.pt", &[0x80, proto, b'}', b'.']).is_empty(),
                "{proto}"
            );
        }
        for proto in [1u8, 6] {
            let findings = check_bytes("model.pt", &[0x80, proto, b'}', b'.']);
            only(&findings, codes::TORCH_UNRECOGNIZED_FORMAT, "model.pt");
        }
    }

    /// The ZIP64 extra field (id 1) holds, in order, the 64-bit value of each saturated field
    /// among uncompressed size, compressed size and local header offset; other fields before it
    /// are skipped by their sizes.
    #[test]
    fn zip64_extra_fields() {
        const SAT: u64 = 0xFFFF_FFFF;
        let field = |id: u16, body: &[u8]| {
            let mut f = id.to_le_bytes().to_vec();
            f.extend((body.len() as u16).to_le_bytes());
            f.extend(body);
            f
        };
        let values = |vs: &[u64]| vs.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>();
        let apply = |extra: &[u8], mut v: [u64; 3]| {
            let [u, c, l] = &mut v;
            let ok = zip64_extra(extra, u, c, l);
            (ok, v)
        };
        // Nothing saturated: nothing needed, whatever the extra field holds.
        assert_eq!(apply(&[1], [5, 6, 7]), (true, [5, 6, 7]));
        // Two saturated, after an unrelated field: filled in order.
        let mut extra = field(0x5455, &[1, 2, 3, 4, 5]);
        extra.extend(field(1, &values(&[1 << 33, 1 << 34])));
        assert_eq!(apply(&extra, [SAT, SAT, 7]), (true, [1 << 33, 1 << 34, 7]));
        // Only the offset saturated: the first value is the offset.
        let extra = field(1, &values(&[1 << 35]));
        assert_eq!(apply(&extra, [5, 6, SAT]), (true, [5, 6, 1 << 35]));
        // All three, exactly 24 bytes.
        let extra = field(1, &values(&[10, 20, 30]));
        assert_eq!(apply(&extra, [SAT, SAT, SAT]), (true, [10, 20, 30]));
        // Too few values, a body cut short by the end of the extra data, no id 1 at all, and an
        // extra field too short for a header: the sizes are missing.
        let short = field(1, &values(&[10, 20]));
        assert!(!apply(&short, [SAT, SAT, SAT]).0);
        // A short id-1 body is not lengthened by the field after it.
        let mut followed = field(1, &values(&[10]));
        followed.extend(field(0x5455, &values(&[20, 30])));
        assert!(!apply(&followed, [SAT, SAT, 7]).0);
        let mut cut = field(1, &values(&[10, 20]));
        cut.truncate(12);
        assert!(!apply(&cut, [SAT, SAT, 7]).0);
        assert!(!apply(&field(0x5455, &values(&[10, 20])), [SAT, SAT, 7]).0);
        for len in 0..4 {
            assert!(!apply(&[1, 0, 16, 0][..len], [SAT, 6, 7]).0, "{len}");
        }
    }

    /// A local header may end exactly where the central directory starts; one that is cut
    /// short (the file shrank under the reader) is not a local header.
    #[test]
    fn local_header_edges() {
        let mut header = LOCAL_SIG.to_le_bytes().to_vec();
        header.extend([0u8; 26]); // version .. extra length, all zero: empty name, no data
        let dir = tree(&[("full", &header), ("cut", &header[..14])]);
        let open = |name: &str| File::open(dir.path().join(name)).unwrap();
        assert!(
            local_header("m.pt", &open("full"), "", 0, 0, 30)
                .unwrap()
                .is_ok()
        );
        let f = local_header("m.pt", &open("full"), "", 1, 0, 30)
            .unwrap()
            .unwrap_err();
        assert!(
            f.problem
                .contains("lies past the start of the central directory"),
            "{}",
            f.problem
        );
        let f = local_header("m.pt", &open("cut"), "", 0, 0, 30)
            .unwrap()
            .unwrap_err();
        assert!(
            f.problem.contains("has no local header at byte 0"),
            "{}",
            f.problem
        );
    }

    /// The last entry's data ends exactly where the central directory starts, after its name
    /// and extra field; one byte more runs into the directory.
    #[test]
    fn data_may_end_at_the_central_directory_and_no_further() {
        let good = torch_zip(ENTRIES, true);
        let cd_entry = good
            .windows(15)
            .rposition(|w| w == b"archive/version")
            .unwrap()
            - 46;
        let mut bytes = good.clone();
        bytes[cd_entry + 20] += 1; // compressed size 2 -> 3
        let cd_offset = u64_at(&good, good.len() - 22 - 20 - 56 + 48);
        let f = one(&bytes, codes::TORCH_ZIP_ENTRY_OUT_OF_BOUNDS);
        assert!(
            f.problem.contains(&format!(
                "whose 3 bytes of data run to byte {}, past the start of the central directory (byte {cd_offset})",
                cd_offset + 1
            )),
            "{}",
            f.problem
        );
    }

    /// A zip with neither record names both.
    #[test]
    fn a_zip_with_neither_record() {
        let neither: &[(&str, &[u8])] = &[("archive/byteorder", b"little")];
        let f = one(&torch_zip(neither, true), codes::TORCH_ZIP_BAD_LAYOUT);
        assert!(
            f.problem
                .contains("`archive/` data.pkl and version records"),
            "{}",
            f.problem
        );
    }

    #[test]
    fn entries_must_be_where_the_directory_says() {
        let good = torch_zip(ENTRIES, true);
        // Break the local header signature of the third entry (data/0).
        let at = good
            .windows(14)
            .position(|w| w == b"archive/data/0")
            .unwrap()
            - 30;
        let mut bytes = good.clone();
        bytes[at] = b'X';
        let f = one(&bytes, codes::TORCH_ZIP_ENTRY_OUT_OF_BOUNDS);
        assert!(f.problem.contains("`archive/data/0`"), "{}", f.problem);
        // Make data/0 claim more data than there is before the central directory.
        let mut bytes = good.clone();
        let cd_entry = good
            .windows(14)
            .rposition(|w| w == b"archive/data/0")
            .unwrap()
            - 46;
        bytes[cd_entry + 21] = 0x10; // compressed size += 4096
        let f = one(&bytes, codes::TORCH_ZIP_ENTRY_OUT_OF_BOUNDS);
        assert!(
            f.problem
                .contains("past the start of the central directory"),
            "{}",
            f.problem
        );
    }

    #[test]
    fn layout_torch_load_needs() {
        let flat: &[(&str, &[u8])] = &[("data.pkl", b"\x80\x02."), ("version", b"3\n")];
        let f = one(&torch_zip(flat, true), codes::TORCH_ZIP_BAD_LAYOUT);
        assert!(f.problem.contains("not in a subdirectory"), "{}", f.problem);
        let no_version: &[(&str, &[u8])] = &[
            ("archive/data.pkl", b"\x80\x02."),
            ("archive/byteorder", b"little"),
        ];
        let f = one(&torch_zip(no_version, true), codes::TORCH_ZIP_BAD_LAYOUT);
        assert!(
            f.problem.contains("`archive/` version record"),
            "{}",
            f.problem
        );
        // Newer torch.save writes the version as `.data/version`.
        let dot_data: &[(&str, &[u8])] = &[
            ("archive/data.pkl", b"\x80\x02."),
            ("archive/.data/version", b"3\n"),
        ];
        assert!(check_bytes("m.pt", &torch_zip(dot_data, true)).is_empty());
        let no_pickle: &[(&str, &[u8])] = &[("archive/version", b"3\n")];
        let f = one(&torch_zip(no_pickle, true), codes::TORCH_ZIP_BAD_LAYOUT);
        assert!(f.problem.contains("data.pkl record"), "{}", f.problem);
        let findings = check_bytes("pytorch_model.bin", &torch_zip(&[], false));
        assert_eq!(
            codes_of(&findings),
            [codes::TORCH_ZIP_BAD_LAYOUT, codes::TORCH_ZIP_NOT_ZIP64]
        );
    }

    #[test]
    fn pickles_text_and_other_binaries() {
        assert!(
            check_bytes(
                "pytorch_model.bin",
                b"\x80\x02\x8a\x0alz\xfc\x9cF\xf9 j\xa8P\x19."
            )
            .is_empty()
        );
        let f = one(
            b"<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title>",
            codes::TORCH_NOT_A_CHECKPOINT,
        );
        assert!(f.problem.contains("`<!DOCTYPE html>`"), "{}", f.problem);
        // Raw binary .bin files (OpenVINO, legacy ggml) are not PyTorch's to judge.
        assert!(check_bytes("openvino_model.bin", &[1, 2, 3, 0, 9, 200, 7, 1]).is_empty());
        let findings = check_bytes("model.pt", &[1, 2, 3, 0, 9, 200, 7, 1]);
        only(&findings, codes::TORCH_UNRECOGNIZED_FORMAT, "model.pt");
    }

    #[test]
    fn the_fixtures() {
        let valid = fixtures().join("valid");
        assert!(check_file(&valid, "pytorch_model.bin").unwrap().is_empty());
        assert!(check_file(&valid, "pickle-only.bin").unwrap().is_empty());
        let corrupt = fixtures().join("corrupt");
        let cases = [
            ("truncated-zip.bin", codes::TORCH_ZIP_NO_EOCD),
            ("html-page.bin", codes::TORCH_NOT_A_CHECKPOINT),
        ];
        for (name, code) in cases {
            only(&check_file(&corrupt, name).unwrap(), code, name);
        }
    }
}
