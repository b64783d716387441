//! The hand-over between the two rooms of the volume writer: the reading thread
//! ([`super::reader`]) packs entry events and file bytes into pooled buffers ([`Outbox`]),
//! the writer thread ([`super::writer`]) frames them. One hand-over per MiB of data, not three
//! per file.

use std::borrow::Cow;

use crossbeam_channel::{Receiver, Sender};

/// Size of the buffers that carry file data between the threads.
pub const BUFFER_SIZE: usize = 1 << 20;

/// One entry event of a [`Batch`]; `Data(n)` is the next `n` bytes of the batch's buffer. A
/// path is borrowed from the stream (`'s`), which outlives both threads: not copied a file.
pub(super) enum Item<'s> {
    Dir(Cow<'s, str>),
    Begin {
        path: Cow<'s, str>,
        size: u64,
        executable: bool,
    },
    Data(usize),
    End,
}

/// What the reading thread sends the writer thread: entry events and the file bytes they
/// refer to, packed into one pooled buffer. A buffer is sent when it is full (or at most
/// [`BATCH_ITEMS`] events are waiting, or at the end), so many small files travel in one
/// message: one hand-over between the threads per MiB of data, not three per file (with 512-byte
/// files the hand-overs, not the reads, were the pack's cost on a loaded machine).
pub(super) struct Batch<'s> {
    pub(super) items: Vec<Item<'s>>,
    pub(super) buf: Vec<u8>,
    pub(super) len: usize,
}

/// Most entry events in one [`Batch`] (a model of empty files fills no buffer).
pub(super) const BATCH_ITEMS: usize = 4096;

/// The reading thread's side of the hand-over: fills pooled buffers with file bytes and
/// records the entry events that go with them.
pub(super) struct Outbox<'a, 's> {
    tx: &'a Sender<Batch<'s>>,
    pool: &'a Receiver<Vec<u8>>,
    pub(super) items: Vec<Item<'s>>,
    /// The buffer being filled, taken from the pool only when there are bytes to put in it:
    /// every buffer taken must travel back.
    pub(super) buf: Option<Vec<u8>>,
    pub(super) len: usize,
}

/// The writer thread stopped (its error is reported by the caller).
pub(super) struct WriterGone;

impl<'a, 's> Outbox<'a, 's> {
    pub(super) fn new(tx: &'a Sender<Batch<'s>>, pool: &'a Receiver<Vec<u8>>) -> Self {
        Outbox {
            tx,
            pool,
            items: Vec::new(),
            buf: None,
            len: 0,
        }
    }

    /// Records an entry event without data.
    pub(super) fn push(&mut self, item: Item<'s>) -> std::result::Result<(), WriterGone> {
        self.items.push(item);
        if self.items.len() >= BATCH_ITEMS {
            self.send()?;
        }
        Ok(())
    }

    /// Room for the next bytes of the current file (never empty): the rest of the buffer
    /// being filled, or a fresh buffer once it is full.
    pub(super) fn room(&mut self) -> std::result::Result<&mut [u8], WriterGone> {
        if self.len == BUFFER_SIZE {
            self.send()?;
        }
        let pool = self.pool;
        let buf = self
            .buf
            .get_or_insert_with(|| pool.recv().unwrap_or_else(|_| vec![0u8; BUFFER_SIZE]));
        Ok(&mut buf[self.len..])
    }

    /// The first `n` bytes of [`Outbox::room`] hold the current file's next bytes.
    pub(super) fn filled(&mut self, n: usize) {
        self.len += n;
        match self.items.last_mut() {
            Some(Item::Data(m)) => *m += n,
            _ => self.items.push(Item::Data(n)),
        }
    }

    /// Sends what is waiting.
    pub(super) fn send(&mut self) -> std::result::Result<(), WriterGone> {
        if self.items.is_empty() {
            return Ok(());
        }
        let batch = Batch {
            items: std::mem::take(&mut self.items),
            buf: self.buf.take().unwrap_or_default(),
            len: std::mem::take(&mut self.len),
        };
        self.tx.send(batch).map_err(|_| WriterGone)
    }
}
