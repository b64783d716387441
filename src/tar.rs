//! The tar dialect of a bundle: a deterministic writer and a strict reader.
//!
//! airlock owns its tar code instead of using the `tar` crate for two reasons. The writer must
//! be byte-for-byte deterministic and stream file contents while they are hashed. The reader
//! must *refuse* rather than skip: tar-rs documents `unpack` as best effort, silently ignores
//! entry types it does not extract, and accepts GNU extensions a bundle never contains. Here
//! every header is checked (checksum, magic, type, mode, size, path), PAX records are parsed
//! strictly and checked against the ustar header, and anything airlock does not write is an
//! error. GNU tar and bsdtar read what the writer produces (`docs/FORMAT.md` has the rules).

use std::io::{self, Read, Write};

use crate::paths;

/// Size of one tar block.
pub const BLOCK: usize = 512;
/// Largest size a ustar header's 11 octal digits can hold; larger files get a PAX `size`.
pub const USTAR_MAX_SIZE: u64 = 0o77777777777;
/// Largest PAX extended header accepted.
pub(crate) const MAX_PAX: u64 = 64 * 1024;
/// Name field of the PAX extended header entries the writer emits.
const PAX_NAME: &str = "././@PaxHeader";

/// What a tar entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
}

/// One entry as read from (or written to) the stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Relative path without a trailing slash.
    pub path: String,
    /// File or directory.
    pub kind: Kind,
    /// Content size in bytes (0 for directories).
    pub size: u64,
    /// Whether the executable bits are set (files only).
    pub executable: bool,
}

/// Why the reader refused the stream. `offset` is the byte offset of the header in the
/// uncompressed tar stream.
#[derive(Debug, thiserror::Error)]
pub enum TarError {
    /// The underlying reader failed (decompression error, bad volume, I/O).
    #[error(transparent)]
    Io(#[from] io::Error),
    /// The stream breaks a rule of the bundle's tar dialect.
    #[error("{}at byte {offset} of the tar stream: {reason}", entry.as_ref().map(|e| format!("entry {e:?} ")).unwrap_or_default())]
    Malformed {
        /// Header offset in the uncompressed stream.
        offset: u64,
        /// Entry name, where one was decoded.
        entry: Option<String>,
        /// What is wrong.
        reason: String,
    },
}

fn octal(field: &mut [u8], value: u64) {
    let digits = field.len() - 1;
    let mut rest = value;
    for b in field[..digits].iter_mut().rev() {
        *b = b'0' + (rest & 7) as u8;
        rest >>= 3;
    }
    // A value wider than its field goes in a PAX record, never here.
    assert!(rest == 0, "{value} does not fit a {digits}-digit tar field");
    field[digits] = 0;
}

/// Splits a path into ustar `prefix` and `name` fields if it fits.
fn split_ustar(path: &[u8]) -> Option<(&[u8], &[u8])> {
    if path.len() <= 100 {
        return Some((&[], path));
    }
    // The prefix is at most 155 bytes, the name at most 100, split at a '/'.
    let start = path.len().saturating_sub(101);
    for i in start..path.len().min(156) {
        if path[i] == b'/' && i <= 155 && path.len() - i - 1 <= 100 && i > 0 {
            return Some((&path[..i], &path[i + 1..]));
        }
    }
    None
}

/// Whether a stored name fits the ustar `prefix`/`name` fields (otherwise a PAX `path` is used).
pub(crate) fn split_ustar_fits(path: &[u8]) -> bool {
    split_ustar(path).is_some()
}

/// Length of the PAX record `"<len> <key>=<value>\n"` for a value of `value_len` bytes: the
/// smallest `len` with `len == digits(len) + body`. `digits(len) + body` never decreases as
/// `len` grows and `body` is below every solution, so iterating it from `body` climbs to the
/// smallest solution and stops there.
pub fn pax_record_len(key: &str, value_len: usize) -> usize {
    let body = 3 + key.len() + value_len;
    let mut len = body;
    loop {
        let total = len.to_string().len() + body;
        if total == len {
            return len;
        }
        len = total;
    }
}

/// The name a header stores for an entry: its path, plus a trailing `/` for a directory.
fn stored_name(path: &str, is_dir: bool) -> std::borrow::Cow<'_, str> {
    match is_dir {
        true => format!("{path}/").into(),
        false => path.into(),
    }
}

/// Bytes the writer emits for one entry: a PAX header and its records when the entry needs
/// them, the ustar header, the content and its padding. `None` if that overflows a u64 (a
/// hostile manifest can declare any size). [`crate::manifest::Manifest::validate`] adds these
/// up to the exact stream size, which caps decompression before any byte is read.
pub fn entry_stream_size(path: &str, is_dir: bool, size: u64) -> Option<u64> {
    let block = BLOCK as u64;
    let stored = stored_name(path, is_dir);
    let mut pax_len = 0u64;
    if !split_ustar_fits(stored.as_bytes()) {
        pax_len += pax_record_len("path", stored.len()) as u64;
    }
    if size > USTAR_MAX_SIZE {
        pax_len += pax_record_len("size", size.to_string().len()) as u64;
    }
    let mut total = size
        .div_ceil(block)
        .checked_mul(block)?
        .checked_add(block)?;
    if pax_len > 0 {
        total = total.checked_add(block + pax_len.div_ceil(block) * block)?;
    }
    Some(total)
}

fn pax_record(key: &str, value: &str) -> Vec<u8> {
    let len = pax_record_len(key, value.len());
    format!("{len} {key}={value}\n").into_bytes()
}

fn header(name: &[u8], prefix: &[u8], mode: u32, size: u64, typeflag: u8) -> [u8; BLOCK] {
    let mut h = [0u8; BLOCK];
    h[..name.len()].copy_from_slice(name);
    octal(&mut h[100..108], u64::from(mode));
    octal(&mut h[108..116], 0);
    octal(&mut h[116..124], 0);
    octal(&mut h[124..136], size);
    octal(&mut h[136..148], 0);
    h[156] = typeflag;
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    octal(&mut h[329..337], 0);
    octal(&mut h[337..345], 0);
    h[345..345 + prefix.len()].copy_from_slice(prefix);
    h[148..156].fill(b' ');
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    // Six octal digits, a NUL and a space.
    octal(&mut h[148..155], u64::from(sum));
    h[155] = b' ';
    h
}

/// Writes the bundle's tar dialect: ustar headers, owner 0:0, mtime 0, mode 0644/0755, PAX
/// records only for paths that do not fit ustar and sizes of 8 GiB and more.
pub struct Writer<W: Write> {
    inner: W,
    remaining: u64,
    pad: usize,
    offset: u64,
}

impl<W: Write> Writer<W> {
    /// Starts a stream on `inner`.
    pub fn new(inner: W) -> Self {
        Writer {
            inner,
            remaining: 0,
            pad: 0,
            offset: 0,
        }
    }

    fn emit(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.inner.write_all(bytes)?;
        self.offset += bytes.len() as u64;
        Ok(())
    }

    fn headers(&mut self, path: &str, kind: Kind, size: u64, executable: bool) -> io::Result<()> {
        if self.remaining != 0 {
            return Err(crate::fault::fault(
                "tar writer: previous entry not finished",
            ));
        }
        let stored = stored_name(path, kind == Kind::Dir);
        let mut pax = Vec::new();
        let (prefix, name): (&[u8], &[u8]) = match split_ustar(stored.as_bytes()) {
            Some(split) => split,
            None => {
                pax.extend(pax_record("path", &stored));
                // The ustar name keeps the last 100 bytes or fewer, cut at a character edge, so a
                // reader that ignores PAX still sees something recognisable.
                let mut cut = stored.len() - 100;
                while !stored.is_char_boundary(cut) {
                    cut += 1;
                }
                (&[], &stored.as_bytes()[cut..])
            }
        };
        let ustar_size = if size > USTAR_MAX_SIZE {
            pax.extend(pax_record("size", &size.to_string()));
            0
        } else {
            size
        };
        if !pax.is_empty() {
            let h = header(PAX_NAME.as_bytes(), &[], 0o644, pax.len() as u64, b'x');
            self.emit(&h)?;
            let padded = pax.len().div_ceil(BLOCK) * BLOCK;
            pax.resize(padded, 0);
            self.emit(&pax)?;
        }
        let (mode, flag) = match kind {
            Kind::Dir => (0o755, b'5'),
            Kind::File if executable => (0o755, b'0'),
            Kind::File => (0o644, b'0'),
        };
        let h = header(name, prefix, mode, ustar_size, flag);
        self.emit(&h)
    }

    /// Writes a directory entry.
    pub fn append_dir(&mut self, path: &str) -> io::Result<()> {
        self.headers(path, Kind::Dir, 0, false)
    }

    /// Starts a file entry; exactly `size` bytes must follow through [`Writer::write_data`],
    /// then [`Writer::end_file`].
    pub fn begin_file(&mut self, path: &str, size: u64, executable: bool) -> io::Result<()> {
        self.headers(path, Kind::File, size, executable)?;
        self.remaining = size;
        self.pad = ((BLOCK as u64 - size % BLOCK as u64) % BLOCK as u64) as usize;
        Ok(())
    }

    /// Writes content of the current file.
    pub fn write_data(&mut self, data: &[u8]) -> io::Result<()> {
        if data.len() as u64 > self.remaining {
            return Err(crate::fault::fault(
                "tar writer: more data than the declared size",
            ));
        }
        self.remaining -= data.len() as u64;
        self.emit(data)
    }

    /// Pads the current file to the block boundary; fails if data is missing.
    pub fn end_file(&mut self) -> io::Result<()> {
        if self.remaining != 0 {
            return Err(crate::fault::fault(format!(
                "tar writer: {} bytes of the declared size were not written",
                self.remaining
            )));
        }
        let pad = [0u8; BLOCK];
        let n = std::mem::take(&mut self.pad);
        self.emit(&pad[..n])
    }

    /// Bytes written so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Writes the two zero blocks that end the archive and returns the inner writer.
    pub fn finish(mut self) -> io::Result<W> {
        if self.remaining != 0 {
            return Err(crate::fault::fault("tar writer: last entry not finished"));
        }
        self.emit(&[0u8; 2 * BLOCK])?;
        Ok(self.inner)
    }
}

/// Reads the bundle's tar dialect and refuses everything else.
pub struct Reader<R: Read> {
    inner: R,
    offset: u64,
    header_offset: u64,
    remaining: u64,
    pad: u64,
    current: Option<String>,
    done: bool,
}

fn field_str(field: &[u8]) -> &[u8] {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    &field[..end]
}

impl<R: Read> Reader<R> {
    /// Starts reading `inner` from its first header.
    pub fn new(inner: R) -> Self {
        Reader {
            inner,
            offset: 0,
            header_offset: 0,
            remaining: 0,
            pad: 0,
            current: None,
            done: false,
        }
    }

    fn bad(&self, reason: impl Into<String>) -> TarError {
        TarError::Malformed {
            offset: self.header_offset,
            entry: self.current.clone(),
            reason: reason.into(),
        }
    }

    fn read_exact_counted(&mut self, buf: &mut [u8], what: &str) -> Result<(), TarError> {
        let mut filled = 0;
        while filled < buf.len() {
            match self.inner.read(&mut buf[filled..]) {
                Ok(0) => {
                    return Err(self.bad(format!(
                        "the stream ends inside {what} ({} of {} bytes)",
                        filled,
                        buf.len()
                    )));
                }
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(TarError::Io(e)),
            }
        }
        self.offset += buf.len() as u64;
        Ok(())
    }

    fn skip_padding(&mut self) -> Result<(), TarError> {
        if self.remaining != 0 {
            return Err(self.bad("the previous entry's data was not read to its end"));
        }
        let mut pad = [0u8; BLOCK];
        let n = std::mem::take(&mut self.pad) as usize;
        self.read_exact_counted(&mut pad[..n], "padding")?;
        if pad[..n].iter().any(|&b| b != 0) {
            return Err(self.bad("non-zero bytes in the padding after the entry's data"));
        }
        Ok(())
    }

    fn parse_octal(&self, field: &[u8], what: &str) -> Result<u64, TarError> {
        // The writer emits zero-padded octal digits followed by NUL; accept only that shape
        // (plus the space terminator some tars use), never base-256 or blank fields.
        let digits = match field.iter().position(|&b| b == 0 || b == b' ') {
            Some(end) => {
                if field[end..].iter().any(|&b| b != 0 && b != b' ') {
                    return Err(self.bad(format!("{what} field has bytes after its terminator")));
                }
                &field[..end]
            }
            None => field,
        };
        if digits.is_empty() || !digits.iter().all(|b| (b'0'..=b'7').contains(b)) {
            return Err(self.bad(format!(
                "{what} field is not octal digits ({:?})",
                String::from_utf8_lossy(field)
            )));
        }
        let mut v: u64 = 0;
        for &d in digits {
            v = v
                .checked_mul(8)
                .and_then(|v| v.checked_add(u64::from(d - b'0')))
                .ok_or_else(|| self.bad(format!("{what} field overflows")))?;
        }
        Ok(v)
    }

    fn parse_pax(&self, data: &[u8]) -> Result<(Option<String>, Option<u64>), TarError> {
        let mut path = None;
        let mut size = None;
        let mut rest = data;
        while !rest.is_empty() {
            let space = rest
                .iter()
                .position(|&b| b == b' ')
                .ok_or_else(|| self.bad("PAX record without a length"))?;
            let len_str = std::str::from_utf8(&rest[..space])
                .ok()
                .filter(|s| !s.is_empty() && !s.starts_with('0'))
                .filter(|s| s.bytes().all(|b| b.is_ascii_digit()))
                .ok_or_else(|| self.bad("PAX record length is not a decimal number"))?;
            let len: usize = len_str
                .parse()
                .map_err(|_| self.bad("PAX record length overflows"))?;
            if len <= space + 1 || len > rest.len() {
                return Err(self.bad(format!("PAX record length {len} is out of bounds")));
            }
            let record = &rest[space + 1..len];
            if record.last() != Some(&b'\n') {
                return Err(self.bad("PAX record does not end with a newline"));
            }
            let record = &record[..record.len() - 1];
            let eq = record
                .iter()
                .position(|&b| b == b'=')
                .ok_or_else(|| self.bad("PAX record without '='"))?;
            let key = &record[..eq];
            let value = std::str::from_utf8(&record[eq + 1..])
                .map_err(|_| self.bad("PAX record value is not UTF-8"))?;
            match key {
                b"path" => {
                    if path.replace(value.to_string()).is_some() {
                        return Err(self.bad("PAX header repeats 'path'"));
                    }
                }
                b"size" => {
                    if value.is_empty()
                        || !value.bytes().all(|b| b.is_ascii_digit())
                        || (value.len() > 1 && value.starts_with('0'))
                    {
                        return Err(self.bad(format!("PAX size {value:?} is not a decimal number")));
                    }
                    let v = value
                        .parse()
                        .map_err(|_| self.bad(format!("PAX size {value:?} overflows")))?;
                    if size.replace(v).is_some() {
                        return Err(self.bad("PAX header repeats 'size'"));
                    }
                }
                other => {
                    return Err(self.bad(format!(
                        "PAX record {:?} is not part of the bundle format",
                        String::from_utf8_lossy(other)
                    )));
                }
            }
            rest = &rest[len..];
        }
        Ok((path, size))
    }

    /// Reads the next entry header. Returns `None` at the end-of-archive marker, after checking
    /// that nothing but the second zero block follows it.
    pub fn next_entry(&mut self) -> Result<Option<Entry>, TarError> {
        if self.done {
            return Ok(None);
        }
        self.skip_padding()?;
        self.current = None;
        let mut pax: Option<(Option<String>, Option<u64>)> = None;
        loop {
            self.header_offset = self.offset;
            let mut h = [0u8; BLOCK];
            self.read_exact_counted(&mut h, "a header")?;
            if h.iter().all(|&b| b == 0) {
                if pax.is_some() {
                    return Err(self.bad("PAX header not followed by an entry"));
                }
                let mut second = [0u8; BLOCK];
                self.read_exact_counted(&mut second, "the end-of-archive marker")?;
                if second.iter().any(|&b| b != 0) {
                    return Err(self.bad("a lone zero block inside the archive"));
                }
                let mut probe = [0u8; 1];
                loop {
                    match self.inner.read(&mut probe) {
                        Ok(0) => break,
                        Ok(_) => {
                            self.header_offset = self.offset;
                            return Err(self.bad("trailing data after the end-of-archive marker"));
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(TarError::Io(e)),
                    }
                }
                self.done = true;
                return Ok(None);
            }
            self.check_header(&h)?;
            let typeflag = h[156];
            if typeflag != b'x' {
                // Name the entry in every refusal below, whatever its type.
                let mut name = String::new();
                let prefix = field_str(&h[345..500]);
                if !prefix.is_empty() {
                    name.push_str(&String::from_utf8_lossy(prefix));
                    name.push('/');
                }
                name.push_str(&String::from_utf8_lossy(field_str(&h[0..100])));
                if let Some((Some(p), _)) = &pax {
                    name = p.clone();
                }
                self.current = Some(name);
            }
            let size = self.parse_octal(&h[124..136], "size")?;
            let link = String::from_utf8_lossy(field_str(&h[157..257])).into_owned();
            match typeflag {
                b'x' => {
                    if pax.is_some() {
                        return Err(self.bad("two PAX headers in a row"));
                    }
                    if size > MAX_PAX {
                        return Err(self.bad(format!("PAX header of {size} bytes is too large")));
                    }
                    let mut data = vec![0u8; size as usize];
                    self.read_exact_counted(&mut data, "a PAX header")?;
                    let padded = (size as usize).div_ceil(BLOCK) * BLOCK - size as usize;
                    let mut pad = vec![0u8; padded];
                    self.read_exact_counted(&mut pad, "PAX padding")?;
                    if pad.iter().any(|&b| b != 0) {
                        return Err(self.bad("non-zero bytes in the PAX header's padding"));
                    }
                    if field_str(&h[0..100]) != PAX_NAME.as_bytes()
                        || h[345..500].iter().any(|&b| b != 0)
                    {
                        return Err(self.bad("PAX header entry has an unexpected name"));
                    }
                    if self.parse_octal(&h[100..108], "mode")? != 0o644 {
                        return Err(self.bad("PAX header entry has an unexpected mode"));
                    }
                    self.check_fixed_fields(&h)?;
                    pax = Some(self.parse_pax(&data)?);
                    if pax == Some((None, None)) {
                        return Err(self.bad("empty PAX header"));
                    }
                }
                b'0' | b'5' => return self.finish_entry(&h, typeflag, size, pax).map(Some),
                b'L' | b'K' => {
                    return Err(self.bad(
                        "GNU long-name record: bundles use PAX for long names, never GNU records",
                    ));
                }
                b'1' => {
                    return Err(self.bad(format!(
                        "hard link entry (to {link:?}): bundles carry regular files and directories only"
                    )));
                }
                b'2' => {
                    return Err(self.bad(format!(
                        "symbolic link entry (to {link:?}): bundles carry regular files and directories only"
                    )));
                }
                b'3' | b'4' => {
                    return Err(
                        self.bad("device entry: bundles carry regular files and directories only")
                    );
                }
                b'6' => {
                    return Err(
                        self.bad("FIFO entry: bundles carry regular files and directories only")
                    );
                }
                b'S' => {
                    return Err(
                        self.bad("GNU sparse entry: bundles carry plain regular files only")
                    );
                }
                b'g' => return Err(self.bad("PAX global header: not part of the bundle format")),
                other => {
                    return Err(self.bad(format!(
                        "entry type {:?} is not a regular file or directory",
                        char::from(other)
                    )));
                }
            }
        }
    }

    fn check_header(&mut self, h: &[u8; BLOCK]) -> Result<(), TarError> {
        let stored = self.parse_octal(&h[148..156], "checksum")?;
        let mut sum: u64 = 0;
        for (i, &b) in h.iter().enumerate() {
            sum += if (148..156).contains(&i) {
                u64::from(b' ')
            } else {
                u64::from(b)
            };
        }
        if stored != sum {
            return Err(self.bad(format!(
                "header checksum {stored:o} does not match the header ({sum:o})"
            )));
        }
        if &h[257..263] != b"ustar\0" || &h[263..265] != b"00" {
            return Err(self.bad("not a POSIX ustar header"));
        }
        Ok(())
    }

    /// Fields every header of the dialect holds at fixed values.
    fn check_fixed_fields(&self, h: &[u8; BLOCK]) -> Result<(), TarError> {
        for (range, what) in [(108..116, "uid"), (116..124, "gid"), (136..148, "mtime")] {
            if self.parse_octal(&h[range], what)? != 0 {
                return Err(self.bad(format!("{what} is not 0 as the bundle format requires")));
            }
        }
        if h[157..257].iter().any(|&b| b != 0) {
            return Err(self.bad("link name set on a non-link entry"));
        }
        if h[265..329].iter().any(|&b| b != 0) {
            return Err(self.bad("owner names are set; the bundle format leaves them empty"));
        }
        for (range, what) in [(329..337, "device major"), (337..345, "device minor")] {
            if self.parse_octal(&h[range], what)? != 0 {
                return Err(self.bad(format!("{what} number is set")));
            }
        }
        if h[500..].iter().any(|&b| b != 0) {
            return Err(self.bad("bytes set in the header's unused tail"));
        }
        Ok(())
    }

    fn finish_entry(
        &mut self,
        h: &[u8; BLOCK],
        typeflag: u8,
        ustar_size: u64,
        pax: Option<(Option<String>, Option<u64>)>,
    ) -> Result<Entry, TarError> {
        let name = field_str(&h[0..100]);
        let prefix = field_str(&h[345..500]);
        let mut ustar_path = Vec::new();
        if !prefix.is_empty() {
            ustar_path.extend_from_slice(prefix);
            ustar_path.push(b'/');
        }
        ustar_path.extend_from_slice(name);
        let ustar_path =
            String::from_utf8(ustar_path).map_err(|_| self.bad("entry name is not UTF-8"))?;
        let (pax_path, pax_size) = pax.unwrap_or((None, None));
        let raw_path = match pax_path {
            Some(p) => {
                // The ustar name must be the tail of the PAX path, as the writer makes it: a
                // reader that ignored PAX would otherwise see another file.
                if !prefix.is_empty() || !p.ends_with(&ustar_path) || ustar_path.is_empty() {
                    self.current = Some(p.clone());
                    return Err(self.bad(format!(
                        "PAX path disagrees with the ustar name {ustar_path:?}"
                    )));
                }
                if split_ustar(p.as_bytes()).is_some() {
                    self.current = Some(p.clone());
                    return Err(self.bad("PAX path used for a name that fits the ustar header"));
                }
                p
            }
            None => ustar_path,
        };
        self.current = Some(raw_path.clone());
        let size = match pax_size {
            Some(s) => {
                if ustar_size != 0 {
                    return Err(self.bad(format!(
                        "PAX size {s} disagrees with the ustar size {ustar_size}"
                    )));
                }
                if s <= USTAR_MAX_SIZE {
                    return Err(self.bad("PAX size used for a size that fits the ustar header"));
                }
                s
            }
            None => ustar_size,
        };
        let mode = self.parse_octal(&h[100..108], "mode")?;
        self.check_fixed_fields(h)?;
        for (field, what) in [(&h[0..100], "name"), (&h[345..500], "prefix")] {
            let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
            if field[end..].iter().any(|&b| b != 0) {
                return Err(self.bad(format!("bytes after the end of the {what} field's text")));
            }
        }
        let (kind, path) = if typeflag == b'5' {
            let Some(p) = raw_path.strip_suffix('/') else {
                return Err(self.bad("directory name does not end with '/'"));
            };
            if size != 0 {
                return Err(self.bad(format!("directory entry with a size of {size}")));
            }
            if mode != 0o755 {
                return Err(self.bad(format!("directory mode {mode:o} is not 755")));
            }
            (Kind::Dir, p.to_string())
        } else {
            if mode != 0o644 && mode != 0o755 {
                return Err(self.bad(format!(
                    "file mode {mode:o} is not 644 or 755 (setuid, setgid, sticky and odd permissions are refused)"
                )));
            }
            (Kind::File, raw_path)
        };
        if let Err(why) = paths::check_relative(&path) {
            return Err(self.bad(format!("unsafe path: {path:?} {why}")));
        }
        if kind == Kind::File {
            self.remaining = size;
            self.pad = (BLOCK as u64 - size % BLOCK as u64) % BLOCK as u64;
        }
        Ok(Entry {
            path,
            kind,
            size,
            executable: kind == Kind::File && mode == 0o755,
        })
    }

    /// Reads content of the current file entry; returns 0 at its end.
    pub fn read_data(&mut self, buf: &mut [u8]) -> Result<usize, TarError> {
        if self.remaining == 0 {
            return Ok(0);
        }
        let want = buf
            .len()
            .min(usize::try_from(self.remaining).unwrap_or(usize::MAX));
        let n = loop {
            match self.inner.read(&mut buf[..want]) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(TarError::Io(e)),
            }
        };
        if n == 0 {
            return Err(self.bad(format!(
                "the stream ends inside the entry's data ({} bytes missing)",
                self.remaining
            )));
        }
        self.remaining -= n as u64;
        self.offset += n as u64;
        Ok(n)
    }

    /// Offset in the uncompressed stream.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Returns the inner reader.
    pub fn into_inner(self) -> R {
        self.inner
    }
}

/// Builds a raw header block for tests and hostile fixtures: every field as given, checksum
/// computed. Not used by the writer.
#[doc(hidden)]
pub fn raw_header(name: &[u8], mode: u32, size: u64, typeflag: u8) -> [u8; BLOCK] {
    header(name, &[], mode, size, typeflag)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(entries: &[(&str, Option<&[u8]>, bool)]) -> Vec<u8> {
        let mut w = Writer::new(Vec::new());
        for (path, data, exec) in entries {
            match data {
                None => w.append_dir(path).unwrap(),
                Some(d) => {
                    w.begin_file(path, d.len() as u64, *exec).unwrap();
                    w.write_data(d).unwrap();
                    w.end_file().unwrap();
                }
            }
        }
        w.finish().unwrap()
    }

    fn read_all(bytes: &[u8]) -> Result<Vec<(Entry, Vec<u8>)>, TarError> {
        let mut r = Reader::new(bytes);
        let mut out = Vec::new();
        while let Some(e) = r.next_entry()? {
            let mut data = Vec::new();
            let mut buf = [0u8; 7];
            loop {
                let n = r.read_data(&mut buf)?;
                if n == 0 {
                    break;
                }
                data.extend_from_slice(&buf[..n]);
            }
            out.push((e, data));
        }
        Ok(out)
    }

    #[test]
    fn round_trip_with_long_names() {
        let long_dir = "d".repeat(120);
        let long_file = format!("{long_dir}/{}", "f".repeat(99));
        let unsplittable = format!("x/{}", "y".repeat(150));
        let bytes = write(&[
            ("a", None, false),
            ("a/empty", Some(b""), false),
            ("a/run.sh", Some(b"#!/bin/sh\n"), true),
            (&long_dir, None, false),
            (&long_file, Some(b"long"), false),
            ("x", None, false),
            (&unsplittable, Some(&[7u8; 1000]), false),
        ]);
        assert_eq!(bytes.len() % BLOCK, 0);
        let got = read_all(&bytes).unwrap();
        let names: Vec<_> = got.iter().map(|(e, _)| e.path.as_str()).collect();
        assert_eq!(
            names,
            [
                "a",
                "a/empty",
                "a/run.sh",
                &long_dir,
                &long_file,
                "x",
                &unsplittable
            ]
        );
        assert!(got[2].0.executable);
        assert_eq!(got[6].1, vec![7u8; 1000]);
    }

    #[test]
    fn pax_record_lengths_are_self_consistent() {
        for n in [1, 5, 80, 89, 90, 95, 990, 995, 9990] {
            let rec = pax_record("path", &"p".repeat(n));
            let s = String::from_utf8(rec.clone()).unwrap();
            let len: usize = s.split(' ').next().unwrap().parse().unwrap();
            assert_eq!(len, rec.len(), "{n}");
        }
    }

    #[test]
    fn big_sizes_use_pax_and_read_back() {
        let mut w = Writer::new(Vec::new());
        let size = USTAR_MAX_SIZE + 1;
        w.begin_file("big", size, false).unwrap();
        let bytes = w.inner.clone();
        let mut r = Reader::new(&bytes[..]);
        let e = r.next_entry().unwrap().unwrap();
        assert_eq!(e.size, size);
    }

    #[test]
    fn refuses_trailing_garbage_and_short_streams() {
        let mut bytes = write(&[("f", Some(b"hello"), false)]);
        bytes.push(1);
        assert!(
            read_all(&bytes)
                .unwrap_err()
                .to_string()
                .contains("trailing data")
        );
        let bytes = write(&[("f", Some(b"hello"), false)]);
        for cut in [0, 100, 512, 515, 1024, 1500] {
            assert!(read_all(&bytes[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn refuses_links_devices_and_bad_modes() {
        for (flag, word) in [
            (b'1', "hard link"),
            (b'2', "symbolic link"),
            (b'3', "device"),
            (b'6', "FIFO"),
            (b'L', "GNU long-name"),
            (b'g', "global"),
            (b'S', "sparse"),
        ] {
            let mut bytes = raw_header(b"x", 0o644, 0, flag).to_vec();
            bytes.extend([0u8; 1024]);
            let err = read_all(&bytes).unwrap_err().to_string();
            assert!(err.contains(word), "{err}");
        }
        let mut bytes = raw_header(b"x", 0o4755, 0, b'0').to_vec();
        bytes.extend([0u8; 1024]);
        assert!(read_all(&bytes).unwrap_err().to_string().contains("setuid"));
    }

    #[test]
    fn refuses_bad_checksum_and_unsafe_paths() {
        let mut h = raw_header(b"x", 0o644, 0, b'0');
        h[0] = b'y';
        let mut bytes = h.to_vec();
        bytes.extend([0u8; 1024]);
        assert!(
            read_all(&bytes)
                .unwrap_err()
                .to_string()
                .contains("checksum")
        );
        for name in [&b"../x"[..], b"/etc/x", b"a//b", b"a/./b", b".airlock/x"] {
            let mut bytes = raw_header(name, 0o644, 0, b'0').to_vec();
            bytes.extend([0u8; 1024]);
            assert!(
                read_all(&bytes)
                    .unwrap_err()
                    .to_string()
                    .contains("unsafe path")
            );
        }
    }

    #[test]
    fn pax_must_agree_with_ustar() {
        // A PAX path whose ustar name is something else entirely (desync smuggling).
        let rec = pax_record("path", &format!("{}/evil", "d".repeat(200)));
        let mut bytes = raw_header(b"././@PaxHeader", 0o644, rec.len() as u64, b'x').to_vec();
        let mut data = rec.clone();
        data.resize(BLOCK, 0);
        bytes.extend(data);
        bytes.extend(raw_header(b"innocent", 0o644, 0, b'0'));
        bytes.extend([0u8; 1024]);
        assert!(
            read_all(&bytes)
                .unwrap_err()
                .to_string()
                .contains("disagrees")
        );
        // A PAX size alongside a non-zero ustar size.
        let rec = pax_record("size", "9000000000");
        let mut bytes = raw_header(b"././@PaxHeader", 0o644, rec.len() as u64, b'x').to_vec();
        let mut data = rec;
        data.resize(BLOCK, 0);
        bytes.extend(data);
        bytes.extend(raw_header(b"f", 0o644, 5, b'0'));
        bytes.extend([0u8; 1024]);
        assert!(
            read_all(&bytes)
                .unwrap_err()
                .to_string()
                .contains("disagrees")
        );
        // Malformed records and unknown keys.
        for rec in [
            &b"99 path=x\n"[..],
            b"5 path=x\n",
            b"12 path=abc",
            b"11 mtime=1\n",
            b"09 path=ab\n",
        ] {
            let mut bytes = raw_header(b"././@PaxHeader", 0o644, rec.len() as u64, b'x').to_vec();
            let mut data = rec.to_vec();
            data.resize(BLOCK, 0);
            bytes.extend(data);
            bytes.extend(raw_header(b"x", 0o644, 0, b'0'));
            bytes.extend([0u8; 1024]);
            assert!(
                read_all(&bytes).is_err(),
                "{:?}",
                String::from_utf8_lossy(rec)
            );
        }
    }

    #[test]
    fn gnu_tar_reads_what_we_write() {
        let dir = tempfile::tempdir().unwrap();
        let long = format!("x/{}", "y".repeat(150));
        let bytes = write(&[
            ("sub", None, false),
            ("sub/a.txt", Some(b"alpha"), false),
            ("sub/run", Some(b"#!"), true),
            ("x", None, false),
            (&long, Some(b"long name"), false),
        ]);
        let tarfile = dir.path().join("t.tar");
        std::fs::write(&tarfile, &bytes).unwrap();
        let out = dir.path().join("out");
        std::fs::create_dir(&out).unwrap();
        let st = std::process::Command::new("tar")
            .arg("-xf")
            .arg(&tarfile)
            .arg("-C")
            .arg(&out)
            .status()
            .expect("GNU tar must be installed");
        assert!(st.success());
        assert_eq!(std::fs::read(out.join("sub/a.txt")).unwrap(), b"alpha");
        assert_eq!(std::fs::read(out.join(&long)).unwrap(), b"long name");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(out.join("sub/run"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o111, 0o111);
    }

    // ---- byte-exact writer output ----------------------------------------------------------

    /// The header the writer makes, field by field, against the table in FORMAT.md 3.1.
    #[test]
    fn writer_header_is_the_documented_bytes() {
        let bytes = write(&[("f", Some(b"hello"), false), ("d", None, false)]);
        let h = &bytes[..BLOCK];
        assert_eq!(&h[0..2], b"f\0");
        assert!(h[2..100].iter().all(|&b| b == 0));
        assert_eq!(&h[100..108], b"0000644\0");
        assert_eq!(&h[108..116], b"0000000\0");
        assert_eq!(&h[116..124], b"0000000\0");
        assert_eq!(&h[124..136], b"00000000005\0");
        assert_eq!(&h[136..148], b"00000000000\0");
        let sum: u32 = h
            .iter()
            .enumerate()
            .map(|(i, &b)| {
                if (148..156).contains(&i) {
                    32
                } else {
                    u32::from(b)
                }
            })
            .sum();
        assert_eq!(&h[148..156], format!("{sum:06o}\0 ").as_bytes());
        assert_eq!(h[156], b'0');
        assert!(h[157..257].iter().all(|&b| b == 0));
        assert_eq!(&h[257..263], b"ustar\0");
        assert_eq!(&h[263..265], b"00");
        assert!(h[265..329].iter().all(|&b| b == 0));
        assert_eq!(&h[329..337], b"0000000\0");
        assert_eq!(&h[337..345], b"0000000\0");
        assert!(h[345..].iter().all(|&b| b == 0));
        // Content, then NUL padding to the block edge.
        assert_eq!(&bytes[BLOCK..BLOCK + 5], b"hello");
        assert!(bytes[BLOCK + 5..2 * BLOCK].iter().all(|&b| b == 0));
        let d = &bytes[2 * BLOCK..3 * BLOCK];
        assert_eq!(&d[0..3], b"d/\0");
        assert_eq!(&d[100..108], b"0000755\0");
        assert_eq!(d[156], b'5');
        assert_eq!(&d[124..136], b"00000000000\0");
        assert_eq!(bytes.len(), 5 * BLOCK);
        assert!(bytes[3 * BLOCK..].iter().all(|&b| b == 0));
        let x = write(&[("x", Some(b""), true)]);
        assert_eq!(&x[100..108], b"0000755\0");
        assert_eq!(x.len(), 3 * BLOCK);
    }

    /// PAX records as written: the header's own fields and the exact record text.
    #[test]
    fn writer_pax_header_is_the_documented_bytes() {
        let path = "p".repeat(101);
        let bytes = write(&[(&path, Some(b"z"), false)]);
        let h = &bytes[..BLOCK];
        assert_eq!(&h[..15], b"././@PaxHeader\0");
        assert_eq!(&h[100..108], b"0000644\0");
        assert_eq!(h[156], b'x');
        let record = format!("111 path={path}\n");
        assert_eq!(record.len(), 111);
        assert_eq!(&h[124..136], format!("{:011o}\0", record.len()).as_bytes());
        assert_eq!(&bytes[BLOCK..BLOCK + 111], record.as_bytes());
        assert!(bytes[BLOCK + 111..2 * BLOCK].iter().all(|&b| b == 0));
        // The ustar name keeps the last 100 bytes; the prefix is empty.
        let e = &bytes[2 * BLOCK..3 * BLOCK];
        assert_eq!(&e[..100], &path.as_bytes()[1..]);
        assert!(e[345..500].iter().all(|&b| b == 0));
        assert_eq!(&e[124..136], b"00000000001\0");
    }

    /// 8 GiB − 1 is the largest ustar size; 8 GiB needs a PAX `size` and a zero ustar size.
    #[test]
    fn ustar_size_limit_is_exact() {
        assert_eq!(USTAR_MAX_SIZE, 8 * 1024 * 1024 * 1024 - 1);
        let headers = |size: u64| {
            let mut w = Writer::new(Vec::new());
            w.begin_file("big", size, false).unwrap();
            assert_eq!(
                entry_stream_size("big", false, size).unwrap(),
                w.offset() + size.div_ceil(512) * 512
            );
            w.inner
        };
        let h = headers(USTAR_MAX_SIZE);
        assert_eq!(h.len(), BLOCK);
        assert_eq!(&h[124..136], b"77777777777\0");
        assert_eq!(
            Reader::new(&h[..]).next_entry().unwrap().unwrap().size,
            USTAR_MAX_SIZE
        );
        let h = headers(USTAR_MAX_SIZE + 1);
        assert_eq!(h.len(), 3 * BLOCK);
        assert_eq!(&h[BLOCK..BLOCK + 20], b"19 size=8589934592\n\0");
        assert_eq!(&h[2 * BLOCK + 124..2 * BLOCK + 136], b"00000000000\0");
        assert_eq!(
            Reader::new(&h[..]).next_entry().unwrap().unwrap().size,
            USTAR_MAX_SIZE + 1
        );
        // The reader refuses a PAX size that would have fitted, and accepts the first that does not.
        let why = refusal(&[
            &pax_block(b"19 size=8589934591\n"),
            &raw_header(b"big", 0o644, 0, b'0'),
        ]);
        assert!(why.contains("PAX size used for a size that fits"), "{why}");
    }

    /// `pax_record_len` (the size arithmetic) equals the record the writer emits at every value
    /// length across the 1→2, 2→3, 3→4 and 4→5 digit edges of the length prefix.
    #[test]
    fn pax_record_len_equals_the_record_written() {
        for key in ["path", "size"] {
            for n in 0..=10_050 {
                let rec = pax_record(key, &"v".repeat(n));
                assert_eq!(pax_record_len(key, n), rec.len(), "{key} {n}");
                let s = String::from_utf8(rec.clone()).unwrap();
                let (len, rest) = s.split_once(' ').unwrap();
                assert_eq!(len.parse::<usize>().unwrap(), rec.len(), "{key} {n}");
                assert!(!len.starts_with('0'));
                assert_eq!(rest, format!("{key}={}\n", "v".repeat(n)));
            }
        }
        // The documented tie: a 97-byte body fits both 99 and 100; the smaller is used.
        let body_97 = "v".repeat(97 - " path=\n".len());
        assert_eq!(pax_record("path", &body_97).len(), 99);
    }

    // ---- stream size arithmetic ----------------------------------------------------------

    /// The ustar split of FORMAT.md 3.2, written straight from the text, as an oracle.
    fn spec_split(s: &[u8]) -> Option<usize> {
        if s.len() <= 100 {
            return Some(0);
        }
        (1..=155.min(s.len() - 1)).find(|&i| s[i] == b'/' && s.len() - i - 1 <= 100)
    }

    fn check_entry(path: &str, is_dir: bool, size: u64) {
        let mut w = Writer::new(Vec::new());
        if is_dir {
            w.append_dir(path).unwrap();
        } else {
            w.begin_file(path, size, false).unwrap();
            w.write_data(&vec![b'a'; size as usize]).unwrap();
            w.end_file().unwrap();
        }
        assert_eq!(
            w.offset(),
            entry_stream_size(path, is_dir, size).unwrap(),
            "{path:?} dir={is_dir} size={size}"
        );
        let bytes = w.finish().unwrap();
        let stored = stored_name(path, is_dir);
        let s = stored.as_bytes();
        // Where the writer put the name, against the spec.
        let (pax, h) = if bytes[156] == b'x' {
            (
                true,
                &bytes[bytes.len() - 2 * BLOCK - size.div_ceil(512) as usize * 512 - BLOCK..],
            )
        } else {
            (false, &bytes[..])
        };
        let name = field_str(&h[0..100]);
        let prefix = field_str(&h[345..500]);
        match spec_split(s) {
            Some(0) => assert!(!pax && name == s && prefix.is_empty(), "{path:?}"),
            Some(i) => {
                assert!(!pax, "{path:?}");
                assert_eq!((prefix, name), (&s[..i], &s[i + 1..]), "{path:?}");
            }
            None => {
                assert!(pax, "{path:?}");
                assert!(prefix.is_empty());
                let cut = (s.len() - 100..=s.len())
                    .find(|&c| stored.is_char_boundary(c))
                    .unwrap();
                assert_eq!(name, &s[cut..], "{path:?}");
            }
        }
        let got = read_all(&bytes).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0.path, path);
        assert_eq!(got[0].0.size, size);
        assert_eq!(got[0].0.kind == Kind::Dir, is_dir);
    }

    /// Paths at every edge of the ustar split: 100 and 101 bytes, prefixes of 155 and 156, names
    /// of 100 and 101, a directory whose '/' is what makes it not fit, and only the trailing '/'.
    #[test]
    fn split_edges_match_the_spec_and_the_size_arithmetic() {
        let mut paths = vec![];
        for n in [99, 100, 101] {
            paths.push("a".repeat(n));
        }
        for (pre, name) in [
            (155, 100),
            (156, 100),
            (155, 101),
            (154, 99),
            (1, 100),
            (1, 101),
            (0, 100),
        ] {
            paths.push(format!("{}/{}", "p".repeat(pre.max(1)), "n".repeat(name)));
        }
        paths.push(format!("{}/{}", "p".repeat(20), "n".repeat(100)));
        paths.push(format!("{}/b/{}", "p".repeat(154), "n".repeat(98)));
        paths.push("é".repeat(60));
        for p in &paths {
            for is_dir in [false, true] {
                for size in [0, 1, 511, 512, 513] {
                    if !is_dir || size == 0 {
                        check_entry(p, is_dir, size);
                    }
                }
            }
        }
        assert_eq!(entry_stream_size("f", false, u64::MAX), None);
        assert_eq!(entry_stream_size("f", false, u64::MAX - 1024), None);
    }

    /// A long path of multi-byte characters with no '/' cannot be split: the writer must cut
    /// the ustar name at a character edge (a broken cut loop hangs or writes invalid UTF-8) and
    /// the PAX path must carry the whole name back.
    #[test]
    fn unsplittable_multibyte_paths_round_trip() {
        let mut names = vec![];
        for (unit, n) in [("é", 120), ("€", 80), ("😀", 60), ("😀", 26)] {
            for lead in ["", "a", "ab", "abc"] {
                names.push(format!("{lead}{}", unit.repeat(n)));
            }
        }
        names.push(format!("{0}/{0}", "é".repeat(100)));
        names.push(format!("a/{}", "😀".repeat(40)));
        {
            for p in names {
                for is_dir in [false, true] {
                    check_entry(&p, is_dir, if is_dir { 0 } else { 3 });
                }
                let bytes = write(&[(&p, Some(b"x"), false)]);
                let h = &bytes[2 * BLOCK..3 * BLOCK];
                let name = field_str(&h[..100]);
                assert!(std::str::from_utf8(name).is_ok(), "{p}");
                assert!(p.as_bytes().ends_with(name));
            }
        }
    }

    proptest::proptest! {
        /// Any path of short components (ASCII and multi-byte) up to past the split limits:
        /// writer, size arithmetic, spec split and reader agree.
        #[test]
        fn any_path_agrees_with_spec_and_reader(
            parts in proptest::collection::vec(
                (proptest::sample::select(vec!["a", "é", "€", "😀", "b.c"]), 1usize..60), 1..8),
            is_dir in proptest::bool::ANY,
            size in 0u64..1100,
        ) {
            let path: Vec<String> = parts.iter().map(|(u, n)| u.repeat(*n)).collect();
            let path = path.join("/");
            proptest::prop_assume!(paths::check_relative(&path).is_ok());
            check_entry(&path, is_dir, if is_dir { 0 } else { size });
        }
    }

    // ---- why the reader refuses ------------------------------------------------------------

    fn fix_checksum(h: &mut [u8; BLOCK]) {
        h[148..156].fill(b' ');
        let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
        h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    }

    /// A header as the writer makes it, with `edit` applied and the checksum made right again,
    /// so that exactly one rule is broken.
    fn edited(
        name: &[u8],
        mode: u32,
        size: u64,
        flag: u8,
        edit: impl FnOnce(&mut [u8; BLOCK]),
    ) -> [u8; BLOCK] {
        let mut h = raw_header(name, mode, size, flag);
        edit(&mut h);
        fix_checksum(&mut h);
        h
    }

    /// A PAX header entry carrying `records`, padded.
    fn pax_block(records: &[u8]) -> Vec<u8> {
        let mut v = raw_header(PAX_NAME.as_bytes(), 0o644, records.len() as u64, b'x').to_vec();
        v.extend_from_slice(records);
        v.resize(v.len().div_ceil(BLOCK) * BLOCK, 0);
        v
    }

    fn stream(blocks: &[&[u8]]) -> Vec<u8> {
        let mut bytes: Vec<u8> = blocks.concat();
        bytes.extend([0u8; 2 * BLOCK]);
        bytes
    }

    /// The refusal text for `blocks` followed by the end-of-archive marker.
    fn refusal(blocks: &[&[u8]]) -> String {
        match read_all(&stream(blocks)) {
            Ok(e) => panic!("accepted: {e:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn an_edited_header_is_accepted_when_nothing_is_broken() {
        let got = read_all(&stream(&[&edited(b"f", 0o644, 0, b'0', |_| {})])).unwrap();
        assert_eq!(got[0].0.path, "f");
    }

    /// Each fixed field set on its own, so that deleting any one check is noticed.
    type Edit = Box<dyn Fn(&mut [u8; BLOCK])>;

    fn case(edit: impl Fn(&mut [u8; BLOCK]) + 'static, why: &'static str) -> (Edit, &'static str) {
        (Box::new(edit), why)
    }

    #[test]
    fn each_fixed_field_is_checked_on_its_own() {
        let cases = [
            case(
                |h| h[108..116].copy_from_slice(b"0000001\0"),
                "uid is not 0",
            ),
            case(
                |h| h[116..124].copy_from_slice(b"0000001\0"),
                "gid is not 0",
            ),
            case(
                |h| h[136..148].copy_from_slice(b"00000000001\0"),
                "mtime is not 0",
            ),
            case(
                |h| h[329..337].copy_from_slice(b"0000001\0"),
                "device major number is set",
            ),
            case(
                |h| h[337..345].copy_from_slice(b"0000001\0"),
                "device minor number is set",
            ),
            case(|h| h[157] = b'l', "link name set"),
            case(|h| h[256] = b'l', "link name set"),
            case(|h| h[265] = b'r', "owner names are set"),
            case(|h| h[296] = b'r', "owner names are set"),
            case(|h| h[297] = b'r', "owner names are set"),
            case(|h| h[328] = b'r', "owner names are set"),
            case(|h| h[500] = 1, "unused tail"),
            case(|h| h[511] = 1, "unused tail"),
            case(
                |h| h[2] = b'x',
                "bytes after the end of the name field's text",
            ),
            case(
                |h| h[99] = b'x',
                "bytes after the end of the name field's text",
            ),
            case(
                |h| {
                    h[345] = b'p';
                    h[347] = b'x'
                },
                "bytes after the end of the prefix field's text",
            ),
            case(
                |h| {
                    h[345] = b'p';
                    h[499] = b'x'
                },
                "bytes after the end of the prefix field's text",
            ),
            case(
                |h| h[257..263].copy_from_slice(b"ustar "),
                "not a POSIX ustar header",
            ),
            case(|h| h[262] = b'x', "not a POSIX ustar header"),
            case(
                |h| h[263..265].copy_from_slice(b"01"),
                "not a POSIX ustar header",
            ),
            case(
                |h| h[263..265].copy_from_slice(b" \0"),
                "not a POSIX ustar header",
            ),
            case(
                |h| h[100..108].copy_from_slice(b"644\0x\0\0\0"),
                "mode field has bytes after its terminator",
            ),
            case(
                |h| h[100..108].copy_from_slice(b" 000644\0"),
                "mode field has bytes after its terminator",
            ),
            case(
                |h| h[100..108].copy_from_slice(b"0000648\0"),
                "mode field is not octal digits",
            ),
            case(
                |h| h[100..108].copy_from_slice(b"\0\0\0\0\0\0\0\0"),
                "mode field is not octal digits",
            ),
            case(
                |h| h[124..136].copy_from_slice(b"\x80\0\0\0\0\0\0\0\0\0\0\0"),
                "size field is not octal digits",
            ),
        ];
        for (i, (edit, why)) in cases.into_iter().enumerate() {
            let text = refusal(&[&edited(b"f", 0o644, 0, b'0', edit)]);
            assert!(text.contains(why), "case {i}: expected {why:?}, got {text}");
            assert!(text.contains("at byte 0 "), "case {i}: {text}");
        }
        // Terminators the reader accepts: a space, or NULs and spaces after the digits.
        for field in [
            &b"644 \0\0\0\0"[..],
            b"0000644 ",
            b"644\0 \0 \0",
            b"00000644",
        ] {
            let h = edited(b"f", 0o644, 0, b'0', |h| h[100..108].copy_from_slice(field));
            assert!(read_all(&stream(&[&h])).is_ok(), "{field:?}");
        }
    }

    #[test]
    fn checksum_is_checked() {
        let mut h = raw_header(b"f", 0o644, 0, b'0');
        h[0] = b'g';
        assert!(refusal(&[&h]).contains("header checksum"));
        let mut h = raw_header(b"f", 0o644, 0, b'0');
        h[148..156].copy_from_slice(b"xx\0\0\0\0\0\0");
        assert!(refusal(&[&h]).contains("checksum field is not octal"));
        // A checksum computed with the chksum bytes as zero (not spaces) is wrong.
        let mut h = raw_header(b"f", 0o644, 0, b'0');
        let sum: u32 = h
            .iter()
            .enumerate()
            .map(|(i, &b)| {
                if (148..156).contains(&i) {
                    0
                } else {
                    u32::from(b)
                }
            })
            .sum();
        h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
        assert!(refusal(&[&h]).contains("header checksum"));
    }

    #[test]
    fn directories_and_modes_are_checked() {
        let why = refusal(&[&raw_header(b"d/", 0o755, 5, b'5')]);
        assert!(why.contains("directory entry with a size of 5"), "{why}");
        let why = refusal(&[&raw_header(b"d/", 0o644, 0, b'5')]);
        assert!(why.contains("directory mode 644 is not 755"), "{why}");
        let why = refusal(&[&raw_header(b"d", 0o755, 0, b'5')]);
        assert!(why.contains("does not end with '/'"), "{why}");
        for mode in [0o600, 0o4755, 0o2755, 0o1755, 0o775, 0o744] {
            let why = refusal(&[&raw_header(b"f", mode, 0, b'0')]);
            assert!(
                why.contains(&format!("file mode {mode:o} is not 644 or 755")),
                "{why}"
            );
        }
        let got = read_all(&stream(&[&raw_header(b"d/", 0o755, 0, b'5')])).unwrap();
        assert_eq!(
            got[0].0,
            Entry {
                path: "d".into(),
                kind: Kind::Dir,
                size: 0,
                executable: false
            }
        );
        let got = read_all(&stream(&[&raw_header(b"f", 0o755, 0, b'0')])).unwrap();
        assert!(got[0].0.executable);
        let got = read_all(&stream(&[&raw_header(b"f", 0o644, 0, b'0')])).unwrap();
        assert!(!got[0].0.executable);
    }

    /// Every refusal names the entry: from the name field, prefix/name, or the PAX path.
    #[test]
    fn refusals_name_the_entry_and_its_offset() {
        let why = refusal(&[&raw_header(b"evil", 0o644, 0, b'2')]);
        assert!(why.starts_with("entry \"evil\" at byte 0"), "{why}");
        let h = edited(b"evil", 0o644, 0, b'1', |h| {
            h[157..163].copy_from_slice(b"target");
            h[345] = b'p';
        });
        let why = refusal(&[&h]);
        assert!(why.starts_with("entry \"p/evil\" at byte 0"), "{why}");
        assert!(why.contains("hard link entry (to \"target\")"), "{why}");
        let long = "q".repeat(120);
        let pax = pax_block(pax_record("path", &long).as_slice());
        let h = raw_header(&long.as_bytes()[20..], 0o644, 0, b'6');
        let why = refusal(&[&pax, &h]);
        assert!(
            why.starts_with(&format!("entry {long:?} at byte 1024")),
            "{why}"
        );
        // The offset of a later entry counts headers, data and padding.
        let first = write(&[("a", Some(b"hello"), false)]);
        let why = refusal(&[&first[..2 * BLOCK], &raw_header(b"b", 0o600, 0, b'0')]);
        assert!(why.starts_with("entry \"b\" at byte 1024 "), "{why}");
        let first = write(&[("a", Some(&[1u8; 1024]), false)]);
        let why = refusal(&[&first[..3 * BLOCK], &raw_header(b"b", 0o600, 0, b'0')]);
        assert!(why.starts_with("entry \"b\" at byte 1536 "), "{why}");
    }

    #[test]
    fn entry_types_are_refused_by_name() {
        for (flag, word) in [
            (b'1', "hard link entry"),
            (b'2', "symbolic link entry"),
            (b'3', "device entry"),
            (b'4', "device entry"),
            (b'6', "FIFO entry"),
            (b'L', "GNU long-name record"),
            (b'K', "GNU long-name record"),
            (b'S', "GNU sparse entry"),
            (b'g', "PAX global header"),
            (b'7', "entry type '7' is not"),
            (0, "entry type '\\0' is not"),
            (b'A', "entry type 'A' is not"),
        ] {
            let why = refusal(&[&raw_header(b"x", 0o644, 0, flag)]);
            assert!(why.contains(word), "{flag}: {why}");
        }
    }

    #[test]
    fn data_padding_and_ends_are_checked() {
        let mut bytes = write(&[("f", Some(b"hello"), false)]);
        bytes[BLOCK + 5] = 1;
        let why = read_all(&bytes).unwrap_err().to_string();
        assert!(
            why.contains("non-zero bytes in the padding after the entry's data"),
            "{why}"
        );
        let mut bytes = write(&[("f", Some(b"hello"), false)]);
        bytes[2 * BLOCK - 1] = 1;
        assert!(
            read_all(&bytes)
                .unwrap_err()
                .to_string()
                .contains("padding")
        );
        // A lone zero block followed by another header.
        let f = raw_header(b"f", 0o644, 0, b'0');
        let bytes = [&f[..], &[0u8; BLOCK], &f[..], &[0u8; 2 * BLOCK]].concat();
        let why = read_all(&bytes).unwrap_err().to_string();
        assert!(
            why.contains("a lone zero block inside the archive"),
            "{why}"
        );
        assert!(why.contains("at byte 512 "), "{why}");
        // Trailing data, at its offset.
        let mut bytes = write(&[("f", Some(b"hello"), false)]);
        let end = bytes.len();
        bytes.push(0);
        let why = read_all(&bytes).unwrap_err().to_string();
        assert!(
            why.contains(&format!("at byte {end} of the tar stream: trailing data")),
            "{why}"
        );
        // Where the stream ends is named.
        let bytes = write(&[("f", Some(b"hello"), false)]);
        for (cut, what) in [
            (100, "inside a header (100 of 512 bytes)"),
            (515, "inside the entry's data (2 bytes missing)"),
            (1000, "inside padding"),
            (1024, "inside a header (0 of 512 bytes)"),
            (1536, "inside the end-of-archive marker"),
        ] {
            let why = read_all(&bytes[..cut]).unwrap_err().to_string();
            assert!(why.contains(what), "cut {cut}: {why}");
        }
        // The next header cannot be read before the entry's data is.
        let mut r = Reader::new(&bytes[..]);
        r.next_entry().unwrap().unwrap();
        let why = r.next_entry().unwrap_err().to_string();
        assert!(why.contains("was not read to its end"), "{why}");
        // After the end, nothing more, and the offset is the whole stream.
        let mut r = Reader::new(&bytes[..]);
        r.next_entry().unwrap().unwrap();
        let mut buf = [0u8; 64];
        assert_eq!(r.read_data(&mut buf).unwrap(), 5);
        assert_eq!(r.read_data(&mut buf).unwrap(), 0);
        assert!(r.next_entry().unwrap().is_none());
        assert!(r.next_entry().unwrap().is_none());
        assert_eq!(r.offset(), bytes.len() as u64);
    }

    /// A reader that returns one byte at a time and an `Interrupted` error before each.
    struct Stutter<'a> {
        data: &'a [u8],
        interrupt: bool,
    }

    impl Read for Stutter<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.interrupt = !self.interrupt;
            if self.interrupt {
                return Err(io::ErrorKind::Interrupted.into());
            }
            if self.data.is_empty() || buf.is_empty() {
                return Ok(0);
            }
            buf[0] = self.data[0];
            self.data = &self.data[1..];
            Ok(1)
        }
    }

    #[test]
    fn short_reads_and_interruptions_are_retried() {
        let long = format!("x/{}", "y".repeat(150));
        let bytes = write(&[
            ("a", None, false),
            ("a/f", Some(b"hello world"), true),
            (&long, Some(b"z"), false),
        ]);
        let mut r = Reader::new(Stutter {
            data: &bytes,
            interrupt: false,
        });
        let mut got = vec![];
        while let Some(e) = r.next_entry().unwrap() {
            let mut data = vec![];
            let mut buf = [0u8; 4];
            loop {
                let n = r.read_data(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                data.extend_from_slice(&buf[..n]);
            }
            got.push((e.path, data));
        }
        assert_eq!(
            got,
            [
                ("a".into(), vec![]),
                ("a/f".into(), b"hello world".to_vec()),
                (long, b"z".to_vec())
            ]
        );
        assert_eq!(r.offset(), bytes.len() as u64);
    }

    #[test]
    fn io_errors_are_passed_through_not_called_malformed() {
        struct Broken;
        impl Read for Broken {
            fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
                // EIO, what a failing medium gives.
                Err(io::Error::from_raw_os_error(5))
            }
        }
        assert!(matches!(
            Reader::new(Broken).next_entry(),
            Err(TarError::Io(_))
        ));
        let bytes = write(&[("f", Some(b"hello"), false)]);
        let mut r = Reader::new(bytes[..BLOCK].chain(Broken));
        r.next_entry().unwrap().unwrap();
        assert!(matches!(r.read_data(&mut [0u8; 8]), Err(TarError::Io(_))));
        let mut r = Reader::new(bytes[..].chain(Broken));
        r.next_entry().unwrap().unwrap();
        r.read_data(&mut [0u8; 8]).unwrap();
        assert!(matches!(r.next_entry(), Err(TarError::Io(_))));
    }

    #[test]
    fn writer_refuses_wrong_amounts_of_data() {
        let mut w = Writer::new(Vec::new());
        w.begin_file("f", 3, false).unwrap();
        assert!(w.write_data(b"abcd").is_err());
        w.write_data(b"ab").unwrap();
        assert!(w.end_file().unwrap_err().to_string().contains("1 bytes"));
        assert!(w.append_dir("d").is_err());
        w.write_data(b"c").unwrap();
        w.end_file().unwrap();
        let mut w2 = Writer::new(Vec::new());
        w2.begin_file("f", 1, false).unwrap();
        assert!(w2.finish().is_err());
        w.append_dir("d").unwrap();
        assert_eq!(w.finish().unwrap().len(), 5 * BLOCK);
    }

    // ---- PAX rules ---------------------------------------------------------------------

    #[test]
    fn pax_header_entry_itself_is_checked() {
        let rec = pax_record("size", "9000000000");
        let entry = raw_header(b"f", 0o644, 0, b'0');
        let good = pax_block(&rec);
        assert_eq!(
            Reader::new(&stream(&[&good, &entry])[..])
                .next_entry()
                .unwrap()
                .unwrap()
                .size,
            9_000_000_000
        );
        let with = |edit: &Edit| {
            let mut v = good.clone();
            let mut h: [u8; BLOCK] = v[..BLOCK].try_into().unwrap();
            edit(&mut h);
            fix_checksum(&mut h);
            v[..BLOCK].copy_from_slice(&h);
            v
        };
        for (edit, why) in [
            case(
                |h| h[..15].copy_from_slice(b"././@PaxHeadeR\0"),
                "PAX header entry has an unexpected name",
            ),
            case(|h| h[345] = b'p', "PAX header entry has an unexpected name"),
            case(|h| h[499] = b'p', "PAX header entry has an unexpected name"),
            case(
                |h| h[100..108].copy_from_slice(b"0000600\0"),
                "PAX header entry has an unexpected mode",
            ),
            case(
                |h| h[116..124].copy_from_slice(b"0000001\0"),
                "gid is not 0",
            ),
            case(|h| h[500] = 1, "unused tail"),
        ] {
            let text = refusal(&[&with(&edit), &entry]);
            assert!(text.contains(why), "expected {why:?}: {text}");
        }
        // Padding after the records.
        let mut bad = good.clone();
        bad[BLOCK + rec.len()] = b'x';
        let why = refusal(&[&bad, &entry]);
        assert!(
            why.contains("non-zero bytes in the PAX header's padding"),
            "{why}"
        );
        let mut bad = good.clone();
        bad[2 * BLOCK - 1] = 1;
        assert!(refusal(&[&bad, &entry]).contains("PAX header's padding"));
    }

    #[test]
    fn pax_size_limit_is_exact() {
        let h = raw_header(PAX_NAME.as_bytes(), 0o644, MAX_PAX + 1, b'x');
        let why = refusal(&[&h]);
        assert!(
            why.contains("PAX header of 65537 bytes is too large"),
            "{why}"
        );
        // At the limit the header is read (the stream then ends inside it).
        let h = raw_header(PAX_NAME.as_bytes(), 0o644, MAX_PAX, b'x');
        let why = refusal(&[&h]);
        assert!(
            why.contains("the stream ends inside a PAX header (1024 of 65536 bytes)"),
            "{why}"
        );
        // A full 64 KiB of records is parsed (and refused for what it says, not its size).
        let mut records = Vec::new();
        while records.len() < MAX_PAX as usize - 100 {
            records.extend(pax_record("path", &"p".repeat(900)));
        }
        let pad = MAX_PAX as usize - records.len();
        let v = (0..pad).find(|&v| pax_record_len("x", v) == pad).unwrap();
        records.extend(pax_record("x", &"v".repeat(v)));
        assert_eq!(records.len() as u64, MAX_PAX);
        let why = refusal(&[&pax_block(&records), &raw_header(b"f", 0o644, 0, b'0')]);
        assert!(
            !why.contains("too large") && why.contains("repeats 'path'"),
            "{why}"
        );
    }

    #[test]
    fn pax_records_are_checked() {
        let entry = raw_header(b"f", 0o644, 0, b'0');
        let long = format!("{}/f", "d".repeat(200));
        for (records, why) in [
            (
                &b"09 path=ab\n"[..],
                "PAX record length is not a decimal number",
            ),
            (b"+9 path=a\n", "PAX record length is not a decimal number"),
            (b" 9 path=a\n", "PAX record length is not a decimal number"),
            (b"path=abc\n", "PAX record without a length"),
            (b"99 path=x\n", "PAX record length 99 is out of bounds"),
            (b"1 x\n", "PAX record length 1 is out of bounds"),
            (b"2 \n", "PAX record length 2 is out of bounds"),
            (b"12 path=abc", "PAX record length 12 is out of bounds"),
            (b"11 path=abc", "PAX record does not end with a newline"),
            (b"11 pathabc\n", "PAX record without '='"),
            (b"11 path=\xff\xfe\n", "PAX record value is not UTF-8"),
            (
                b"11 mtime=1\n",
                "PAX record \"mtime\" is not part of the bundle format",
            ),
            (b"12 size=+10\n", "PAX size \"+10\" is not a decimal number"),
            (b"12 size=010\n", "PAX size \"010\" is not a decimal number"),
            (b"9 size=0\n", "PAX size used for a size that fits"),
            (b"8 size=\n", "PAX size \"\" is not a decimal number"),
            (b"11 size=-1\n", "PAX size \"-1\" is not a decimal number"),
            (
                b"29 size=99999999999999999999\n",
                "PAX size \"99999999999999999999\" overflows",
            ),
            (
                b"19 size=8589934592\n19 size=8589934592\n",
                "PAX header repeats 'size'",
            ),
        ] {
            let text = refusal(&[&pax_block(records), &entry]);
            assert!(
                text.contains(why),
                "{:?}: expected {why:?}, got {text}",
                String::from_utf8_lossy(records)
            );
        }
        let twice = [pax_record("path", &long), pax_record("path", &long)].concat();
        assert!(refusal(&[&pax_block(&twice), &entry]).contains("PAX header repeats 'path'"));
        // Empty, doubled, or not followed by an entry.
        assert!(
            refusal(&[&raw_header(PAX_NAME.as_bytes(), 0o644, 0, b'x'), &entry])
                .contains("empty PAX header")
        );
        let p = pax_block(&pax_record("size", "9000000000"));
        assert!(refusal(&[&p, &p, &entry]).contains("two PAX headers in a row"));
        assert!(refusal(&[&p]).contains("PAX header not followed by an entry"));
    }

    #[test]
    fn pax_path_must_agree_with_the_ustar_fields() {
        let long = format!("{}/{}", "d".repeat(200), "f".repeat(20));
        let pax = pax_block(&pax_record("path", &long));
        let tail = &long.as_bytes()[long.len() - 100..];
        assert_eq!(
            read_all(&stream(&[&pax, &raw_header(tail, 0o644, 0, b'0')])).unwrap()[0]
                .0
                .path,
            long
        );
        // The ustar name is a shorter tail: still agrees.
        assert!(read_all(&stream(&[&pax, &raw_header(b"ffff", 0o644, 0, b'0')])).is_ok());
        for (h, why) in [
            (
                raw_header(b"other", 0o644, 0, b'0'),
                "PAX path disagrees with the ustar name \"other\"",
            ),
            (
                edited(b"", 0o644, 0, b'0', |_| {}),
                "PAX path disagrees with the ustar name \"\"",
            ),
            (
                edited(b"ffff", 0o644, 0, b'0', |h| h[345] = b'd'),
                "PAX path disagrees with the ustar name \"d/ffff\"",
            ),
        ] {
            let text = refusal(&[&pax, &h]);
            assert!(text.contains(why), "{text}");
            assert!(text.starts_with(&format!("entry {long:?}")), "{text}");
        }
        // A PAX path for a name that fits: short, or splittable.
        for fits in [
            "short".to_string(),
            format!("{}/{}", "d".repeat(100), "f".repeat(20)),
        ] {
            let pax = pax_block(&pax_record("path", &fits));
            let tail = fits.rsplit('/').next().unwrap().as_bytes();
            let text = refusal(&[&pax, &raw_header(tail, 0o644, 0, b'0')]);
            assert!(
                text.contains("PAX path used for a name that fits the ustar header"),
                "{text}"
            );
        }
        // The '/' at byte 0 of a 101-byte name is not a split point (the prefix would be
        // empty): the name does not fit, and the PAX path is then refused as absolute.
        let abs = format!("/{}", "a".repeat(100));
        let pax = pax_block(&pax_record("path", &abs));
        let text = refusal(&[&pax, &raw_header(&abs.as_bytes()[1..], 0o644, 0, b'0')]);
        assert!(text.contains("is an absolute path"), "{text}");
        // A PAX size with a non-zero ustar size.
        let pax = pax_block(&pax_record("size", "9000000000"));
        let text = refusal(&[&pax, &raw_header(b"f", 0o644, 5, b'0')]);
        assert!(
            text.contains("PAX size 9000000000 disagrees with the ustar size 5"),
            "{text}"
        );
        // Names must be UTF-8 and safe.
        let text = refusal(&[&raw_header(b"\xff", 0o644, 0, b'0')]);
        assert!(text.contains("entry name is not UTF-8"), "{text}");
        let text = refusal(&[&raw_header(b"a/../b", 0o644, 0, b'0')]);
        assert!(
            text.contains("unsafe path: \"a/../b\" has a '..' component"),
            "{text}"
        );
    }

    // ---- headers with valid checksums, mutated one field at a time ---------------------------

    /// Reads a stream; if the reader accepts it, every entry obeys the dialect and writing the
    /// entries again gives a stream the reader reads to the same entries.
    fn accepted_streams_are_sound(bytes: &[u8]) {
        let Ok(got) = read_all(bytes) else { return };
        let mut w = Writer::new(Vec::new());
        for (e, data) in &got {
            assert_eq!(paths::check_relative(&e.path), Ok(()));
            assert_eq!(data.len() as u64, e.size);
            match e.kind {
                Kind::Dir => {
                    assert_eq!(e.size, 0);
                    w.append_dir(&e.path).unwrap();
                }
                Kind::File => {
                    w.begin_file(&e.path, e.size, e.executable).unwrap();
                    w.write_data(data).unwrap();
                    w.end_file().unwrap();
                }
            }
        }
        let again = read_all(&w.finish().unwrap()).unwrap();
        assert_eq!(again, got);
    }

    proptest::proptest! {
        /// A valid stream with one header byte changed and the checksum recomputed: the reader
        /// gets past the checksum to the deeper rules, and never accepts anything unsound.
        #[test]
        fn mutated_headers_with_valid_checksums(
            which in 0usize..4,
            at in 0usize..BLOCK,
            value in proptest::sample::select(vec![0u8, b' ', b'0', b'1', b'7', b'8', b'/', b'.', b'a', b'x', b'5', 0xff]),
        ) {
            let long = format!("{}/{}", "d".repeat(130), "n".repeat(30));
            let unsplittable = "u".repeat(120);
            let bytes = write(&[
                ("d", None, false),
                ("d/f", Some(b"hello"), true),
                (&long, Some(b""), false),
                (&unsplittable, Some(b"data"), false),
            ]);
            // Header blocks: d, d/f, long (prefix+name), PAX of unsplittable.
            let header_at = [0, BLOCK, 3 * BLOCK, 4 * BLOCK][which];
            if (148..156).contains(&at) {
                return Ok(());
            }
            let mut bytes = bytes;
            let mut h: [u8; BLOCK] = bytes[header_at..header_at + BLOCK].try_into().unwrap();
            h[at] = value;
            fix_checksum(&mut h);
            bytes[header_at..header_at + BLOCK].copy_from_slice(&h);
            accepted_streams_are_sound(&bytes);
        }

        /// Random headers built from plausible field values with a valid checksum.
        #[test]
        fn random_headers_with_valid_checksums(
            name in proptest::sample::select(vec![&b"f"[..], b"d/", b"a/b", b"../x", b"././@PaxHeader", b"", b"x\0y"]),
            mode in proptest::sample::select(vec![0o644u32, 0o755, 0o600, 0o4755, 0]),
            size in proptest::sample::select(vec![0u64, 1, 5, 511, 512, 513, MAX_PAX + 1]),
            flag in proptest::sample::select(vec![b'0', b'5', b'x', b'1', b'2', 0u8, b'L']),
            fields in proptest::collection::vec((0usize..BLOCK, proptest::num::u8::ANY), 0..3),
            tail in proptest::collection::vec(proptest::num::u8::ANY, 0..1100),
        ) {
            let mut h = raw_header(name, mode, size, flag);
            for (at, v) in fields {
                h[at] = v;
            }
            fix_checksum(&mut h);
            let mut bytes = h.to_vec();
            bytes.extend(tail);
            accepted_streams_are_sound(&bytes);
            accepted_streams_are_sound(&stream(&[&h]));
        }
    }

    proptest::proptest! {
        #[test]
        fn reader_never_panics(data in proptest::collection::vec(proptest::num::u8::ANY, 0..4096)) {
            let _ = read_all(&data);
        }
    }
}
