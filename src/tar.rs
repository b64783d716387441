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
pub const MAX_PAX: u64 = 64 * 1024;
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
    let s = format!("{value:0digits$o}");
    field[..digits].copy_from_slice(s.as_bytes());
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
pub fn split_ustar_fits(path: &[u8]) -> bool {
    split_ustar(path).is_some()
}

/// Length of the PAX record `"<len> <key>=<value>\n"` for a value of `value_len` bytes.
pub fn pax_record_len(key: &str, value_len: usize) -> usize {
    let body = 3 + key.len() + value_len;
    let mut len = body + 1;
    loop {
        let total = len.to_string().len() + body;
        if total == len {
            return len;
        }
        len = total;
    }
}

fn pax_record(key: &str, value: &str) -> Vec<u8> {
    let body = format!(" {key}={value}\n");
    let mut len = body.len() + 1;
    loop {
        let total = len.to_string().len() + body.len();
        if total == len {
            break;
        }
        len = total;
    }
    format!("{len}{body}").into_bytes()
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
    let s = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(s.as_bytes());
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
            return Err(io::Error::other("tar writer: previous entry not finished"));
        }
        let mut stored = path.to_string();
        if kind == Kind::Dir {
            stored.push('/');
        }
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
            return Err(io::Error::other(
                "tar writer: more data than the declared size",
            ));
        }
        self.remaining -= data.len() as u64;
        self.emit(data)
    }

    /// Pads the current file to the block boundary; fails if data is missing.
    pub fn end_file(&mut self) -> io::Result<()> {
        if self.remaining != 0 {
            return Err(io::Error::other(format!(
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
            return Err(io::Error::other("tar writer: last entry not finished"));
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
        let mut ustar_path = Vec::with_capacity(prefix.len() + 1 + name.len());
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

    proptest::proptest! {
        #[test]
        fn reader_never_panics(data in proptest::collection::vec(proptest::num::u8::ANY, 0..4096)) {
            let _ = read_all(&data);
        }
    }
}
