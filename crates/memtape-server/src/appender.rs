//! Group commit: appends from concurrent requests are written together. Each request hands
//! its entries to one writer thread and waits; the writer takes every request waiting (up
//! to a cap), appends all their entries in one store transaction, and only then answers
//! each request, so an acknowledged append is always durable, and many appends share one
//! fsync. If the combined write fails, each request is written on its own, so one bad
//! request never fails the others.
//!
//! The WAL's captures of the batch's user messages (scanned on each request's own thread)
//! are recorded in the same transaction as the messages (`Engine::append_capturing`: one
//! change per message, naming it), so 64 clients writing to one agent share one commit,
//! and no crash can keep a message without its capture. If a memory changed since it was
//! read, the messages are written first and captured after.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, TrySendError, sync_channel};
use std::thread::JoinHandle;

use memtape::wal::WalMatch;
use memtape::{Captured, DynStore, Engine, Entry, NewEntry};
use tokio::sync::oneshot;

use crate::error::{ApiError, Result};
use crate::metrics::AppendMetrics;

/// At most this many requests go into one transaction.
const MAX_JOBS: usize = 256;
/// At most this many entries go into one transaction.
const MAX_ENTRIES: usize = 4096;

/// What a request's append wrote: the entries as stored and, for each of them, what the
/// WAL captured (`Ok` with nothing for an entry it does not scan; an `Err` when the capture
/// could not be recorded, for the caller to retry: the entry is stored all the same).
pub type Written = (Vec<Entry>, Vec<memtape::Result<Captured>>);

struct Job {
    entries: Vec<NewEntry>,
    capture: bool,
    /// With `capture`: what the WAL found in each entry, scanned on the request's thread
    /// so the writer thread only records.
    found: Vec<Vec<WalMatch>>,
    reply: oneshot::Sender<Result<Written>>,
}

/// The writer thread and the way to it.
pub struct Appender {
    jobs: Option<SyncSender<Job>>,
    writer: Option<JoinHandle<()>>,
}

impl Appender {
    /// Starts the writer thread over `engine`; each committed transaction is counted in
    /// `metrics`.
    pub fn start(engine: Arc<Engine<DynStore>>, metrics: AppendMetrics) -> Self {
        let (jobs, queue) = sync_channel::<Job>(MAX_JOBS * 4);
        let writer = std::thread::spawn(move || write_loop(&engine, &queue, &metrics));
        Appender {
            jobs: Some(jobs),
            writer: Some(writer),
        }
    }

    /// Appends `entries` (in one transaction, possibly shared with other requests'), and
    /// returns them as stored once that transaction is committed; with `capture`, the WAL
    /// has scanned their user messages and recorded what it found by then.
    pub async fn append(&self, entries: Vec<NewEntry>, capture: bool) -> Result<Written> {
        let (reply, answer) = oneshot::channel();
        let found = if capture {
            entries.iter().map(memtape::scan_new_entry).collect()
        } else {
            Vec::new()
        };
        let jobs = self
            .jobs
            .clone()
            .ok_or_else(|| ApiError::internal("the server is shutting down"))?;
        // The queue is bounded: when the writer is behind, requests wait for room (on the
        // blocking pool, not the runtime's threads). Otherwise the job goes straight in,
        // without a trip through the pool (two thread switches an append).
        match jobs.try_send(Job {
            entries,
            capture,
            found,
            reply,
        }) {
            Ok(()) => {}
            Err(TrySendError::Full(job)) => tokio::task::spawn_blocking(move || jobs.send(job))
                .await
                .map_err(|e| ApiError::internal(format!("queueing an append failed: {e}")))?
                .map_err(|_| ApiError::internal("the writer has stopped"))?,
            Err(TrySendError::Disconnected(_)) => {
                return Err(ApiError::internal("the writer has stopped"));
            }
        }
        answer
            .await
            .map_err(|_| ApiError::internal("the writer stopped before answering"))?
    }
}

impl Drop for Appender {
    fn drop(&mut self) {
        // Closing the queue ends the writer once it has answered every request in it.
        self.jobs.take();
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

fn write_loop(engine: &Engine<DynStore>, queue: &Receiver<Job>, metrics: &AppendMetrics) {
    while let Ok(first) = queue.recv() {
        let mut batch = vec![first];
        let mut entries = batch[0].entries.len();
        while batch.len() < MAX_JOBS && entries < MAX_ENTRIES {
            match queue.try_recv() {
                Ok(job) => {
                    entries += job.entries.len();
                    batch.push(job);
                }
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        write(engine, batch, metrics);
    }
}

/// Writes `batch` in one transaction with the WAL's captures of its user messages, or each
/// job alone (and its captures after) if that fails, so one bad request never fails the
/// others. A failed transaction stored nothing, so writing alone never stores twice.
fn write(engine: &Engine<DynStore>, batch: Vec<Job>, metrics: &AppendMetrics) {
    let all: Vec<NewEntry> = batch.iter().flat_map(|j| j.entries.clone()).collect();
    let found: Vec<Vec<WalMatch>> = batch
        .iter()
        .flat_map(|j| {
            let mut found = if j.capture {
                j.found.clone()
            } else {
                Vec::new()
            };
            found.resize_with(j.entries.len(), Vec::new);
            found
        })
        .collect();
    match engine.append_capturing(all, found) {
        Ok((mut stored, mut captured)) => {
            metrics.committed(stored.len());
            for job in batch.into_iter().rev() {
                let at = stored.len() - job.entries.len();
                let (mine, captures) = (stored.split_off(at), captured.split_off(at));
                let _ = job.reply.send(Ok((mine, captures)));
            }
            return;
        }
        Err(e) if batch.len() == 1 => {
            let job = batch.into_iter().next().expect("one job");
            let _ = job.reply.send(Err(ApiError::from(e)));
            return;
        }
        Err(_) => {}
    }
    let written = batch
        .into_iter()
        .map(|job| {
            let result = engine
                .append_entries(job.entries.clone())
                .map_err(ApiError::from);
            if let Ok(stored) = &result {
                metrics.committed(stored.len());
            }
            (job, result)
        })
        .collect();
    answer(engine, written);
}

/// Runs the WAL over the user messages of the jobs that asked for it (all at once), then
/// answers each job.
fn answer(engine: &Engine<DynStore>, written: Vec<(Job, Result<Vec<Entry>>)>) {
    let (scanned, found): (Vec<Entry>, Vec<Vec<WalMatch>>) = written
        .iter()
        .filter(|(job, _)| job.capture)
        .filter_map(|(job, stored)| Some(stored.as_ref().ok()?.iter().zip(&job.found)))
        .flatten()
        .filter(|(_, found)| !found.is_empty())
        .map(|(e, found)| (e.clone(), found.clone()))
        .unzip();
    let mut captures: std::collections::HashMap<memtape::EntryId, memtape::Result<Captured>> =
        scanned
            .iter()
            .map(|e| e.id)
            .zip(engine.capture_scanned(&scanned, found))
            .collect();
    for (job, stored) in written {
        let result = stored.map(|entries| {
            let captured = entries
                .iter()
                .map(|e| {
                    captures.remove(&e.id).unwrap_or_else(|| {
                        Ok(Captured {
                            matches: Vec::new(),
                            saved_long_term: 0,
                            recorded: None,
                        })
                    })
                })
                .collect();
            (entries, captured)
        });
        let _ = job.reply.send(result);
    }
}
