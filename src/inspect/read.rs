//! Bounded, positioned reads.
//!
//! Every check reads a few headers at known offsets of a file that may be 100 GB long, so
//! nothing here reads "the rest of the file". Reads are positioned (`pread` on Unix) so one
//! `&File` can serve a sequential header walk and random look-ups at the same time, and every
//! buffer is sized by the caller from numbers already compared with the file length.

use std::fs::File;
use std::io;

/// Reads as many bytes as are available at `offset` into `buf`; returns the count (short at
/// end of file).
pub(crate) fn read_at(file: &File, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
    read_at_with(|at, b| positioned_read(file, at, b), offset, buf)
}

/// [`read_at`] over any positioned read (so tests can inject `Interrupted` and other errors).
fn read_at_with(
    mut read: impl FnMut(u64, &mut [u8]) -> io::Result<usize>,
    offset: u64,
    buf: &mut [u8],
) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        let Some(at) = offset.checked_add(filled as u64) else {
            break;
        };
        match read(at, &mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// One `pread` (Unix) or `seek_read` (Windows). One function with the platform inside, so the
/// code a mutation test changes is the code the platform runs.
fn positioned_read(file: &File, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
    #[cfg(unix)]
    let n = std::os::unix::fs::FileExt::read_at(file, buf, offset);
    #[cfg(windows)]
    let n = std::os::windows::fs::FileExt::seek_read(file, buf, offset);
    n
}

/// `[pos, end)` of a file as a forward [`io::Read`] through positioned reads, so a parser can
/// stream a header without the caller holding it. Ends early (a short read) if the file does.
pub(crate) struct Section<'a> {
    file: &'a File,
    pos: u64,
    end: u64,
}

impl<'a> Section<'a> {
    pub(crate) fn new(file: &'a File, start: u64, len: u64) -> Self {
        Section {
            file,
            pos: start,
            end: start.saturating_add(len),
        }
    }
}

impl io::Read for Section<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let want = (self.end - self.pos).min(buf.len() as u64) as usize;
        if want == 0 {
            return Ok(0);
        }
        let n = loop {
            match positioned_read(self.file, self.pos, &mut buf[..want]) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                other => break other?,
            }
        };
        self.pos += n as u64;
        Ok(n)
    }
}

/// Reads up to `max` bytes from the start of the file.
pub(crate) fn read_prefix(file: &File, file_len: u64, max: usize) -> io::Result<Vec<u8>> {
    read_prefix_given(file, file_len, max, None).map(std::borrow::Cow::into_owned)
}

/// [`read_prefix`], taken from `head` (bytes of the file from its start, already read by the
/// caller) when it holds them all, without a read.
pub(crate) fn read_prefix_given<'h>(
    file: &File,
    file_len: u64,
    max: usize,
    head: Option<&'h [u8]>,
) -> io::Result<std::borrow::Cow<'h, [u8]>> {
    let want = usize::try_from(file_len).map_or(max, |len| len.min(max));
    if let Some(h) = head.filter(|h| h.len() >= want) {
        return Ok(std::borrow::Cow::Borrowed(&h[..want]));
    }
    let mut buf = vec![0; want];
    let got = read_at(file, 0, &mut buf)?;
    buf.truncate(got);
    Ok(std::borrow::Cow::Owned(buf))
}

/// A forward-only reader over a positioned file with a small buffer, for walking a sequence of
/// variable-length records (GGUF key/values, a zip central directory) without trusting any
/// length before it has been compared with what is left of the file.
pub(crate) struct PosReader<'a> {
    file: &'a File,
    file_len: u64,
    pos: u64,
    buf: Vec<u8>,
    buf_start: u64,
    buf_len: usize,
}

/// Why a [`PosReader`] read did not complete.
#[derive(Debug)]
pub(crate) enum Short {
    /// The request runs past the end of the file (or past the limit the caller set).
    End {
        needed: u64,
        available: u64,
    },
    Io(io::Error),
}

impl From<io::Error> for Short {
    fn from(e: io::Error) -> Self {
        Short::Io(e)
    }
}

const READ_BUF: usize = 64 * 1024;

impl<'a> PosReader<'a> {
    pub(crate) fn new(file: &'a File, file_len: u64, start: u64) -> Self {
        PosReader {
            file,
            file_len,
            pos: start.min(file_len),
            buf: Vec::new(),
            buf_start: 0,
            buf_len: 0,
        }
    }

    pub(crate) fn pos(&self) -> u64 {
        self.pos
    }

    pub(crate) fn remaining(&self) -> u64 {
        self.file_len - self.pos
    }

    fn need(&self, n: u64) -> Result<(), Short> {
        if n > self.remaining() {
            Err(Short::End {
                needed: n,
                available: self.remaining(),
            })
        } else {
            Ok(())
        }
    }

    /// Fills `out` from the current position, or fails without consuming anything.
    pub(crate) fn read_exact(&mut self, out: &mut [u8]) -> Result<(), Short> {
        self.need(out.len() as u64)?;
        let mut done = 0;
        while done < out.len() {
            let in_buf =
                self.pos >= self.buf_start && self.pos < self.buf_start + self.buf_len as u64;
            if !in_buf {
                if self.buf.is_empty() {
                    self.buf = vec![0; READ_BUF];
                }
                self.buf_start = self.pos;
                self.buf_len = read_at(self.file, self.pos, &mut self.buf)?;
                if self.buf_len == 0 {
                    // The file shrank while we were reading it.
                    return Err(Short::End {
                        needed: (out.len() - done) as u64,
                        available: 0,
                    });
                }
            }
            let at = (self.pos - self.buf_start) as usize;
            let n = (self.buf_len - at).min(out.len() - done);
            out[done..done + n].copy_from_slice(&self.buf[at..at + n]);
            done += n;
            self.pos += n as u64;
        }
        Ok(())
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], Short> {
        let mut out = [0; N];
        self.read_exact(&mut out)?;
        Ok(out)
    }

    /// Moves forward `n` bytes without reading them.
    pub(crate) fn skip(&mut self, n: u64) -> Result<(), Short> {
        self.need(n)?;
        self.pos += n;
        Ok(())
    }

    /// Reads `n` bytes into a new vector; `n` must already be bounded by the caller (it is also
    /// checked against the bytes left in the file before anything is allocated).
    pub(crate) fn bytes(&mut self, n: u64) -> Result<Vec<u8>, Short> {
        self.need(n)?;
        let mut out = vec![0; n as usize];
        self.read_exact(&mut out)?;
        Ok(out)
    }
}

/// True when `bytes` look like text a person or a web server wrote: UTF-8 without control
/// characters other than tab, CR and LF. Weight formats all start with binary (a length, a
/// magic number, a zip signature, a pickle opcode).
pub(crate) fn looks_like_text(bytes: &[u8]) -> bool {
    if bytes.len() < 4 {
        return false;
    }
    let sample = &bytes[..bytes.len().min(512)];
    let text = match std::str::from_utf8(sample) {
        Ok(t) => t,
        // A multi-byte character cut by the sample boundary is still text.
        Err(e) if e.error_len().is_none() => {
            std::str::from_utf8(&sample[..e.valid_up_to()]).unwrap_or_default()
        }
        Err(_) => return false,
    };
    !text.is_empty()
        && text
            .chars()
            .all(|c| !c.is_control() || matches!(c, '\t' | '\n' | '\r'))
}

/// One phrase naming what a file starts with, for problem sentences: the first line of text,
/// a run of zero bytes, or the first bytes in hex.
pub(crate) fn describe_start(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "is empty".to_string();
    }
    if bytes.iter().all(|&b| b == 0) {
        return format!("starts with {} zero bytes", bytes.len());
    }
    if looks_like_text(bytes) {
        let text = String::from_utf8_lossy(&bytes[..bytes.len().min(200)]);
        let line = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        let mut snippet: String = line.trim().chars().take(60).collect();
        if snippet.len() < line.trim().len() {
            snippet.push('…');
        }
        return format!("starts with text `{snippet}`");
    }
    let hex: Vec<String> = bytes.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("starts with bytes {}", hex.join(" "))
}

/// A size for people: [`crate::display::human_size`] (decimal units, as the Hub shows them).
pub(crate) use crate::display::human_size;

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn temp_with(bytes: &[u8]) -> (tempfile::NamedTempFile, File) {
        let mut tmp = tempfile::NamedTempFile::new().unwrap();
        tmp.write_all(bytes).unwrap();
        let file = File::open(tmp.path()).unwrap();
        (tmp, file)
    }

    #[test]
    fn pos_reader_refuses_reads_past_the_end_without_consuming() {
        let (_tmp, file) = temp_with(b"0123456789");
        let mut r = PosReader::new(&file, 10, 2);
        assert_eq!(r.array::<3>().unwrap(), *b"234");
        match r.bytes(6) {
            Err(Short::End { needed, available }) => {
                assert_eq!((needed, available), (6, 5));
            }
            other => panic!("expected End, got {other:?}"),
        }
        assert_eq!(r.pos(), 5);
        r.skip(4).unwrap();
        assert_eq!(r.array::<1>().unwrap(), *b"9");
        assert!(r.skip(1).is_err());
    }

    #[test]
    fn pos_reader_crosses_buffer_boundaries() {
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let (_tmp, file) = temp_with(&data);
        let mut r = PosReader::new(&file, data.len() as u64, 65_530);
        let got = r.bytes(20).unwrap();
        assert_eq!(got, data[65_530..65_550]);
    }

    /// A read that starts in the loaded buffer and ends past it takes the rest from the next
    /// load.
    #[test]
    fn pos_reader_reads_across_a_reload() {
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let (_tmp, file) = temp_with(&data);
        let mut r = PosReader::new(&file, data.len() as u64, 0);
        assert_eq!(r.array::<4>().unwrap(), data[..4]);
        r.skip(READ_BUF as u64 - 10).unwrap();
        let got = r.bytes(20).unwrap();
        assert_eq!(got, data[READ_BUF - 6..READ_BUF + 14]);
        let got = r.bytes(3 * READ_BUF as u64 / 2).unwrap();
        let from = READ_BUF + 14;
        assert_eq!(got, data[from..from + 3 * READ_BUF / 2]);
    }

    #[test]
    fn text_and_binary_are_told_apart() {
        assert!(looks_like_text(b"<!DOCTYPE html>\n<html>"));
        assert!(looks_like_text(
            "version https://git-lfs ünïcode".as_bytes()
        ));
        assert!(!looks_like_text(b"\x80\x02}q\x00"));
        assert!(!looks_like_text(b"PK\x03\x04"));
        assert!(!looks_like_text(b"ab"));
    }

    #[test]
    fn start_descriptions() {
        assert_eq!(describe_start(&[0; 16]), "starts with 16 zero bytes");
        assert_eq!(
            describe_start(b"<!DOCTYPE html>\n<html>"),
            "starts with text `<!DOCTYPE html>`"
        );
        assert_eq!(
            describe_start(b"PK\x03\x04\x00"),
            "starts with bytes 50 4b 03 04 00"
        );
    }

    /// `Interrupted` is retried; any other error ends the read with that error; short reads
    /// are continued where they stopped.
    #[test]
    fn read_at_retries_interrupted_and_passes_other_errors_on() {
        let data = b"0123456789";
        let mut calls = 0;
        let mut buf = [0u8; 6];
        let n = read_at_with(
            |at, b| {
                calls += 1;
                if calls % 2 == 1 {
                    return Err(io::ErrorKind::Interrupted.into());
                }
                let at = at as usize;
                let k = b.len().min(2).min(data.len() - at);
                b[..k].copy_from_slice(&data[at..at + k]);
                Ok(k)
            },
            3,
            &mut buf,
        )
        .unwrap();
        assert_eq!((n, &buf), (6, b"345678"));
        // EIO, what a failing medium gives, passed on as it came.
        let err =
            read_at_with(|_, _| Err(io::Error::from_raw_os_error(5)), 0, &mut buf).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(5));
        // A directory opened as a file: the real read fails, and says so.
        let dir = tempfile::tempdir().unwrap();
        let file = File::open(dir.path()).unwrap();
        assert!(read_at(&file, 0, &mut buf).is_err());
    }

    #[test]
    fn size_edges() {
        assert_eq!(human_size(0), "0 bytes");
        assert_eq!(human_size(999), "999 bytes");
        assert_eq!(human_size(1000), "1.0 kB (1000 bytes)");
        assert_eq!(human_size(999_949), "999.9 kB (999949 bytes)");
        assert_eq!(human_size(999_950), "1.0 MB (999950 bytes)");
        assert_eq!(
            human_size(1_500_000_000_000),
            "1.5 TB (1500000000000 bytes)"
        );
        assert_eq!(human_size(u64::MAX), "18.4 EB (18446744073709551615 bytes)");
    }

    #[test]
    fn text_edges() {
        // Four bytes is the least that can be judged.
        assert!(looks_like_text(b"abcd"));
        assert!(!looks_like_text(b"abc"));
        // Tab, CR and LF are text; other control characters are not.
        assert!(looks_like_text(b"a\tb\r\nc"));
        assert!(!looks_like_text(b"ab\x07c"));
        assert!(!looks_like_text(b"abc\x00"));
        // Only the first 512 bytes are looked at, and a character cut there is still text.
        let mut late = vec![b'a'; 512];
        late.push(0);
        assert!(looks_like_text(&late));
        let mut early = vec![b'a'; 511];
        early.push(0);
        assert!(!looks_like_text(&early));
        let mut cut = vec![b'a'; 511];
        cut.extend("é".as_bytes());
        assert!(looks_like_text(&cut));
        // An invalid byte inside the sample is not text.
        let mut bad = vec![b'a'; 100];
        bad.push(0xFF);
        bad.extend([b'a'; 100]);
        assert!(!looks_like_text(&bad));
    }

    #[test]
    fn start_description_edges() {
        assert_eq!(describe_start(b""), "is empty");
        assert_eq!(describe_start(&[0]), "starts with 1 zero bytes");
        // The first non-blank line, trimmed, at most 60 characters.
        assert_eq!(
            describe_start(b"\n   \n  <html lang=en>  \nmore"),
            "starts with text `<html lang=en>`"
        );
        let sixty = "é".repeat(60);
        assert_eq!(
            describe_start(sixty.as_bytes()),
            format!("starts with text `{sixty}`")
        );
        let long = format!("{sixty}x");
        assert_eq!(
            describe_start(long.as_bytes()),
            format!("starts with text `{sixty}…`")
        );
        // Binary: the first 8 bytes in hex.
        assert_eq!(
            describe_start(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]),
            "starts with bytes 01 02 03 04 05 06 07 08"
        );
    }

    #[test]
    fn prefixes_and_positions() {
        let (_tmp, file) = temp_with(b"0123456789");
        assert_eq!(read_prefix(&file, 10, 4).unwrap(), b"0123");
        assert_eq!(read_prefix(&file, 10, 64).unwrap(), b"0123456789");
        // A length larger than the file (it shrank): what is there.
        assert_eq!(read_prefix(&file, 20, 64).unwrap(), b"0123456789");
        let mut buf = [0u8; 4];
        assert_eq!(read_at(&file, 8, &mut buf).unwrap(), 2);
        assert_eq!(&buf[..2], b"89");
        // A start past the end is the end.
        let r = PosReader::new(&file, 10, 15);
        assert_eq!((r.pos(), r.remaining()), (10, 0));
        let mut r = PosReader::new(&file, 10, 3);
        assert_eq!(r.remaining(), 7);
        r.skip(7).unwrap();
        assert_eq!((r.pos(), r.remaining()), (10, 0));
        // A file that shrank under the reader: the read fails, it does not loop or invent bytes.
        let mut r = PosReader::new(&file, 20, 8);
        match r.bytes(6) {
            Err(Short::End { needed, available }) => assert_eq!((needed, available), (4, 0)),
            other => panic!("expected End, got {other:?}"),
        }
    }

    #[test]
    fn sizes_read_like_the_hub() {
        assert_eq!(human_size(1), "1 byte");
        assert_eq!(human_size(130), "130 bytes");
        assert_eq!(human_size(4_943_852_032), "4.9 GB (4943852032 bytes)");
        assert_eq!(human_size(999_999), "1.0 MB (999999 bytes)");
    }
}
