//! The window a zstd frame declares, read from its header (RFC 8878 section 3.1.1.1).
//!
//! docs/FORMAT.md section 5 limits every frame a reader accepts to a window of 2^27 bytes. The
//! decoders are configured with that limit (`window_log_max(27)`), but libzstd does not apply
//! it to a frame whose content size is declared and fits the output it is given (it then
//! decodes in one pass and never allocates the window): such a frame, declaring a window of,
//! say, 2^31 bytes with a content size of a few kilobytes, decodes. A second implementation
//! that follows the text refuses it, so the rule is checked here, on the header, before the
//! decoder sees the frame: the window is the `Window_Descriptor`'s, or the content size for a
//! single-segment frame (which has no descriptor).

/// The largest window a reader accepts (docs/FORMAT.md section 5).
pub(crate) const MAX_WINDOW: u64 = 1 << 27;

/// The zstd frame magic number, little-endian.
const MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];

/// What a frame header declares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// Bytes of the header: magic, descriptor, window descriptor, dictionary id, content size.
    pub len: usize,
    /// The window size.
    pub window: u64,
    /// The content size, when declared.
    pub content_size: Option<u64>,
}

/// Reads the header at the start of `bytes`. `Ok(None)`: more bytes are needed (`bytes` is a
/// prefix of a header). An error names what is wrong: not a zstd frame (a skippable frame is
/// not one either), a reserved bit set.
pub fn parse(bytes: &[u8]) -> Result<Option<FrameHeader>, FrameError> {
    if bytes.len() < 5 {
        if !MAGIC.starts_with(&bytes[..bytes.len().min(4)]) {
            return Err(FrameError::NoMagic);
        }
        return Ok(None);
    }
    if bytes[..4] != MAGIC {
        return Err(FrameError::NoMagic);
    }
    let fhd = bytes[4];
    if fhd & 0x08 != 0 {
        return Err(FrameError::ReservedBit);
    }
    let single_segment = fhd & 0x20 != 0;
    let dict_len = [0usize, 1, 2, 4][usize::from(fhd & 0x03)];
    let fcs_len = match fhd >> 6 {
        0 if single_segment => 1,
        0 => 0,
        1 => 2,
        2 => 4,
        _ => 8,
    };
    let wd_len = usize::from(!single_segment);
    let len = 5 + wd_len + dict_len + fcs_len;
    if bytes.len() < len {
        return Ok(None);
    }
    let fcs_at = 5 + wd_len + dict_len;
    let content_size = (fcs_len > 0).then(|| {
        let mut le = [0u8; 8];
        le[..fcs_len].copy_from_slice(&bytes[fcs_at..fcs_at + fcs_len]);
        let v = u64::from_le_bytes(le);
        if fcs_len == 2 { v + 256 } else { v }
    });
    let window = if single_segment {
        content_size.expect("a single-segment frame declares its content size")
    } else {
        let wd = bytes[5];
        let log = 10 + u32::from(wd >> 3);
        let base = 1u64 << log;
        base + (base / 8) * u64::from(wd & 0x07)
    };
    Ok(Some(FrameHeader {
        len,
        window,
        content_size,
    }))
}

/// [`parse`], then the section 5 limit: a window over [`MAX_WINDOW`] is an error.
pub fn check(bytes: &[u8]) -> Result<Option<FrameHeader>, FrameError> {
    match parse(bytes)? {
        Some(h) if h.window > MAX_WINDOW => Err(FrameError::Window(h.window)),
        other => Ok(other),
    }
}

/// Why a frame header is refused ([`parse`], [`check`]); `Display` follows "the zstd frame".
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Not a zstd frame (a skippable frame is not one either).
    #[error("does not start with the zstd frame magic number")]
    NoMagic,
    /// The reserved bit of the frame header descriptor is set.
    #[error("sets the reserved bit of its frame header descriptor")]
    ReservedBit,
    /// The window (bytes) is over [`MAX_WINDOW`].
    #[error(
        "declares a window of {0} bytes, over the {MAX_WINDOW}-byte limit of docs/FORMAT.md section 5 (too much memory for decoding)"
    )]
    Window(u64),
}

/// The error a [`Checked`] reader returns (inside an [`std::io::Error`]) for a frame header it
/// refuses, so a caller can tell it from a failing read.
#[derive(Debug, thiserror::Error)]
#[error("the zstd frame {0}")]
pub struct FrameRefused(pub FrameError);

/// A reader that checks the frame header at the start of `inner` ([`check`]) before handing
/// any byte on, so a decoder reading from it never sees a frame over the window limit.
pub struct Checked<R> {
    inner: R,
    /// The header bytes read and checked, handed on first.
    head: Vec<u8>,
    at: usize,
    checked: bool,
}

impl<R> Checked<R> {
    /// Wraps `inner`, which starts with a zstd frame.
    pub fn new(inner: R) -> Self {
        Checked {
            inner,
            head: Vec::new(),
            at: 0,
            checked: false,
        }
    }

    /// The reader after the bytes read so far.
    pub fn into_inner(self) -> R {
        self.inner
    }
}

impl<R: std::io::Read> Checked<R> {
    /// Reads the header byte by byte (it is at most 18 bytes) and checks it; at the end of the
    /// input (a frame shorter than its header) the decoder reports the truncated frame.
    fn check_header(&mut self) -> std::io::Result<()> {
        use std::io;
        while !self.checked {
            let mut byte = [0u8; 1];
            let n = loop {
                match self.inner.read(&mut byte) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    other => break other?,
                }
            };
            if n == 0 {
                self.checked = true;
                break;
            }
            self.head.push(byte[0]);
            match check(&self.head) {
                Ok(None) => {}
                Ok(Some(_)) => self.checked = true,
                Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, FrameRefused(e))),
            }
        }
        Ok(())
    }
}

impl<R: std::io::Read> std::io::Read for Checked<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.check_header()?;
        if self.at < self.head.len() {
            let n = (self.head.len() - self.at).min(buf.len());
            buf[..n].copy_from_slice(&self.head[self.at..self.at + n]);
            self.at += n;
            return Ok(n);
        }
        self.inner.read(buf)
    }
}

impl<R: std::io::BufRead> std::io::BufRead for Checked<R> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        self.check_header()?;
        if self.at < self.head.len() {
            return Ok(&self.head[self.at..]);
        }
        self.inner.fill_buf()
    }

    fn consume(&mut self, amt: usize) {
        if self.at < self.head.len() {
            self.at = (self.at + amt).min(self.head.len());
        } else {
            self.inner.consume(amt);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::Read;

    /// A frame as zstd writes it for `data` (with its content size).
    fn frame(data: &[u8], level: i32) -> Vec<u8> {
        zstd::bulk::compress(data, level).unwrap()
    }

    /// `frame` with its header replaced: not single-segment, window descriptor `wd`, content
    /// size in 4 bytes (the blocks are unchanged, so it still decodes).
    pub(crate) fn with_window(frame: &[u8], wd: u8) -> Vec<u8> {
        let h = parse(frame).unwrap().unwrap();
        let size = h.content_size.unwrap() as u32;
        let checksum = frame[4] & 0x04;
        let mut out = MAGIC.to_vec();
        out.push(0x80 | checksum);
        out.push(wd);
        out.extend(size.to_le_bytes());
        out.extend(&frame[h.len..]);
        out
    }

    #[test]
    fn windows_are_read_as_rfc_8878_defines_them() {
        // Window_Descriptor: exponent 17 mantissa 0 is 2^27; exponent 21 is 2^31.
        let data = vec![7u8; 5000];
        let f = frame(&data, 3);
        let h = parse(&f).unwrap().unwrap();
        assert!(h.window >= 5000, "{h:?}");
        assert_eq!(h.content_size, Some(5000));
        let at_limit = with_window(&f, 17 << 3);
        assert_eq!(parse(&at_limit).unwrap().unwrap().window, 1 << 27);
        assert!(check(&at_limit).unwrap().is_some());
        let over = with_window(&f, (17 << 3) | 1);
        assert_eq!(parse(&over).unwrap().unwrap().window, (1 << 27) + (1 << 24));
        assert_eq!(check(&over), Err(FrameError::Window((1 << 27) + (1 << 24))));
        assert_eq!(
            FrameRefused(check(&over).unwrap_err()).to_string(),
            "the zstd frame declares a window of 150994944 bytes, over the 134217728-byte limit of \
             docs/FORMAT.md section 5 (too much memory for decoding)"
        );
        let huge = with_window(&f, 21 << 3);
        assert_eq!(parse(&huge).unwrap().unwrap().window, 1 << 31);
        // Every prefix of a header asks for more bytes; a wrong magic is refused at once.
        for n in 0..parse(&huge).unwrap().unwrap().len {
            assert_eq!(parse(&huge[..n]), Ok(None), "{n}");
        }
        assert_eq!(parse(b"\x28\xb5\x2f\xfc"), Err(FrameError::NoMagic));
        assert!(parse(b"\x50\x2a\x4d\x18\x00\x00\x00\x00").is_err());
        let mut reserved = f.clone();
        reserved[4] |= 0x08;
        assert_eq!(parse(&reserved), Err(FrameError::ReservedBit));
    }

    /// The reason this module exists: libzstd, told `window_log_max(27)`, still decodes a
    /// frame declaring a 2^31-byte window whose content fits the output; through [`Checked`]
    /// it is refused, and a frame within the limit decodes as before.
    #[test]
    fn a_frame_over_the_window_limit_is_refused_though_libzstd_decodes_it() {
        let data: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 251) as u8).collect();
        let huge = with_window(&frame(&data, 3), 21 << 3);
        // The first read has room for the whole content (as the patch decoder's 1 MiB pieces
        // do): libzstd decodes in one pass and skips its window limit.
        let mut dec = zstd::stream::read::Decoder::new(&huge[..]).unwrap();
        dec.window_log_max(27).unwrap();
        let mut out = vec![0u8; 1 << 20];
        let plain = dec.read(&mut out);
        assert!(
            plain.as_ref().ok() == Some(&data.len()) && out[..data.len()] == data[..],
            "libzstd now refuses it: {plain:?}"
        );
        let mut dec = zstd::stream::read::Decoder::new(Checked::new(&huge[..])).unwrap();
        dec.window_log_max(27).unwrap();
        let err = dec.read(&mut out).unwrap_err();
        assert!(
            err.get_ref().is_some_and(|e| e.is::<FrameRefused>()),
            "{err}"
        );
        assert!(err.to_string().contains("window of 2147483648"), "{err}");
        let ok = with_window(&frame(&data, 3), 17 << 3);
        let mut dec = zstd::stream::read::Decoder::new(Checked::new(&ok[..])).unwrap();
        let mut out = Vec::new();
        dec.read_to_end(&mut out).unwrap();
        assert_eq!(out, data);
    }
}
