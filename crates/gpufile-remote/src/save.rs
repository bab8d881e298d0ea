//! Saving a Hugging Face checkpoint under an object store's prefix (`s3://`, `http(s)://`,
//! WebHDFS): what `gpufile.safetensors.save_checkpoint` does for a URL.
//!
//! The layout is the local save's ([`layout`]: the same split, file names, metadata and index
//! JSON). How it goes ([`save_checkpoint`]): one [`RemoteWriter`] per shard (nothing is sent at
//! open); every shard's header and tensors as one batch of requests over the engine, from the
//! tensors' own memory (host or device); each shard closed (made) once its writes are done,
//! several at once, while the others' are still written; and only then the index object,
//! which is the commit: a reader that finds the index finds every
//! shard it names whole. On any failure every writer not yet closed is aborted (S3: its
//! multipart upload removed) and no index is written; shards closed before the failure stay.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};

use gpufile::__private::safetensors::{
    layout, plan_save, CheckpointLayout, SavePlan, INDEX_NAME, STOP_POLL,
};
use gpufile::safetensors::{CheckpointIndex, FormatError, SaveError, SaveOptions, TensorRow};
use gpufile::source::{Endpoint, Sink};
use gpufile::StopFlag;
use gpufile::{Buffer, Engine, Error, IoFuture, Request, Settings};

use crate::syntax::endpoint::RemoteEndpointType;
use crate::syntax::redact::redact;
use crate::writer::RemoteWriter;

/// Why a checkpoint save by URL failed.
#[derive(Debug, thiserror::Error)]
pub enum SaveCheckpointError {
    /// A tensor or header the format refuses: nothing was sent.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// An object could not be opened for writing (a bad URL, missing credentials), as
    /// [`RemoteWriter::create`] refuses it: nothing of it was sent.
    #[error(transparent)]
    Open(Error),
    /// An argument refused (a signed URL as the prefix, a name given twice), the upload
    /// failed, or the caller's stop function stopped it ([`Error::Cancelled`]).
    #[error(transparent)]
    Io(#[from] Error),
}

impl From<SaveError> for SaveCheckpointError {
    fn from(e: SaveError) -> Self {
        match e {
            SaveError::Format(e) => SaveCheckpointError::Format(e),
            SaveError::Io(e) | SaveError::Committed(e) => SaveCheckpointError::Io(e),
        }
    }
}

/// The URL of `name` under `prefix` (its trailing slashes dropped).
fn child(prefix: &str, name: &str) -> String {
    format!("{}/{name}", prefix.trim_end_matches('/'))
}

/// Saves `tensors` as a Hugging Face checkpoint under the URL `prefix` (see the module's
/// header), with the local save's `options` (`durable` does not apply: an object exists
/// once it is made), written by `engine` with `settings`. The index (also for one shard,
/// where no index object is written). `options.stop` is asked every [`STOP_POLL`] while the
/// shards are written, closed or aborted and while the index is made: `true` stops the save
/// ([`Error::Cancelled`]), every writer not yet closed aborted.
///
/// # Safety
/// Every row's buffer must stay valid, and unchanged, until the call returns.
pub unsafe fn save_checkpoint(
    prefix: &str,
    tensors: &[TensorRow],
    options: &SaveOptions<'_>,
    engine: &Engine,
    settings: &Settings,
) -> Result<CheckpointIndex, SaveCheckpointError> {
    let shown = redact(prefix);
    if prefix.contains('?') {
        return Err(Error::InvalidArgument(format!(
            "{shown}: a checkpoint is saved under a prefix of several objects, which a signed \
             URL (it names one object) cannot give; save each file to its own signed URL with \
             save_file"
        ))
        .into());
    }
    let CheckpointLayout {
        shards,
        names,
        file_metadata,
        index,
    } = layout(&shown, tensors, options)?;
    let urls: Vec<String> = names.iter().map(|n| child(prefix, n)).collect();
    let mut plans = Vec::with_capacity(shards.len());
    for (keys, url) in shards.iter().zip(&urls) {
        let specs: Vec<_> = keys.iter().map(|&i| tensors[i].spec()).collect();
        plans.push(plan_save(
            Path::new(&redact(url)),
            &specs,
            Some(&file_metadata),
        )?);
    }
    let mut writers = Vec::with_capacity(urls.len());
    for (url, plan) in urls.iter().zip(&plans) {
        // The size raises the part size where the shard would need more than S3's 10,000.
        let w = RemoteWriter::create(url, RemoteEndpointType::Auto, None, Some(plan.file_size))
            .map_err(SaveCheckpointError::Open)?;
        writers.push(Arc::new(w));
    }
    // Closes wait for a server, not for a core: at least as many at once as the four shard
    // uploads Python ran before.
    let threads = settings.num_threads.max(MIN_CLOSES);
    // A writer without parts (HTTP PUT, WebHDFS) holds its whole object in memory until it is
    // made: such shards go a wave of MIN_CLOSES at a time, so a save holds a few shards, not
    // the checkpoint; multipart uploads send their parts as they come, so all shards go at once.
    let wave = match writers.iter().all(|w| w.part_size().is_some()) {
        true => writers.len().max(1),
        false => MIN_CLOSES,
    };
    for first in (0..writers.len()).step_by(wave) {
        let last = (first + wave).min(writers.len());
        let shards_of_wave = Wave {
            writers: &writers[first..last],
            plans: &plans[first..last],
            shards: &shards[first..last],
        };
        // SAFETY: the caller keeps every row's buffer valid until this call returns.
        if let Err(e) = unsafe { shards_of_wave.make(tensors, options, engine, settings, threads) }
        {
            abort_open(&writers, threads, options.stop);
            return Err(e);
        }
    }
    drop(writers);
    if shards.len() > 1 {
        write_index(&child(prefix, INDEX_NAME), &index, options, settings)?;
    }
    Ok(index)
}

/// Shards written and made together: every shard's header and tensors as one batch, each shard
/// made as soon as its writes are done.
struct Wave<'a> {
    writers: &'a [Arc<RemoteWriter>],
    plans: &'a [SavePlan],
    shards: &'a [Vec<usize>],
}

impl Wave<'_> {
    /// Writes and makes the wave's shards; on failure or a stop, every request of the wave is
    /// cancelled and waited for (the caller aborts what is not made).
    ///
    /// # Safety
    /// Every row's buffer must stay valid, and unchanged, until the call returns.
    unsafe fn make(
        &self,
        tensors: &[TensorRow],
        options: &SaveOptions<'_>,
        engine: &Engine,
        settings: &Settings,
        threads: usize,
    ) -> Result<(), SaveCheckpointError> {
        let mut batch = Vec::new();
        let mut counts = Vec::with_capacity(self.writers.len());
        for ((w, plan), keys) in self.writers.iter().zip(self.plans).zip(self.shards) {
            let before = batch.len();
            let sink: Arc<dyn Sink> = w.clone();
            let endpoint = Endpoint::Write(sink);
            let header = Buffer::Host {
                ptr: plan.header.as_ptr().cast_mut(),
                len: plan.header.len(),
            };
            batch.push((endpoint.clone(), Request::write(header, 0)));
            for (&i, &off) in keys.iter().zip(&plan.offsets) {
                let t = &tensors[i];
                if !t.buffer.is_empty() {
                    batch.push((endpoint.clone(), t.request(0, t.buffer.len(), off)));
                }
            }
            counts.push(batch.len() - before);
        }
        // SAFETY: the caller keeps every row's buffer valid until this call returns, and
        // `self.plans` holds the headers; `_ended` waits for every request before it returns.
        let started = unsafe { engine.submit_each(&batch, settings) }?;
        drop(batch);
        let mut each = started.into_iter().map(|(f, _)| f);
        let shard_writes: Vec<IoFuture> = counts
            .iter()
            .map(|&c| IoFuture::all(each.by_ref().take(c).collect()))
            .collect();
        let _ended = EndAll(&shard_writes);
        // Each shard is made as soon as its writes are done, while the others' are still
        // written.
        let failure = Mutex::new(None);
        let stopped = run_jobs(self.writers.len(), threads, options.stop, |k, flag| {
            let made = wait_unless(&shard_writes[k], flag)
                .and_then(|()| self.writers[k].close_with_stop(Some(flag)));
            match made {
                Ok(()) => true,
                Err(e) => {
                    failure
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get_or_insert(e);
                    false
                }
            }
        });
        let failure = failure.into_inner().unwrap_or_else(|p| p.into_inner());
        match (stopped, failure) {
            (false, None) => Ok(()),
            (true, _) => Err(Error::Cancelled.into()),
            (false, Some(e)) => Err(e.into()),
        }
    }
}

/// Shard closes run at once at least (see [`save_checkpoint`]).
const MIN_CLOSES: usize = 4;

/// Cancels and waits for every request of its futures when dropped: no request still reads a
/// buffer once the save returns, however it returns.
struct EndAll<'a>(&'a [IoFuture]);

impl Drop for EndAll<'_> {
    fn drop(&mut self) {
        self.0.iter().for_each(IoFuture::cancel);
        self.0.iter().for_each(|f| drop(f.wait()));
    }
}

/// Waits for `fut`; [`Error::Cancelled`] once `flag` is set (looked at every [`STOP_POLL`]).
fn wait_unless(fut: &IoFuture, flag: &StopFlag) -> gpufile::Result<()> {
    loop {
        if let Some(r) = fut.wait_timeout(STOP_POLL) {
            return r.map(drop);
        }
        if flag.is_set() {
            return Err(Error::Cancelled);
        }
    }
}

/// Makes the index object at `url` (the commit): its text written, then the object closed
/// under `options.stop`.
fn write_index(
    url: &str,
    index: &CheckpointIndex,
    options: &SaveOptions<'_>,
    settings: &Settings,
) -> Result<(), SaveCheckpointError> {
    let body = index.to_json();
    let size = Some(body.len() as u64);
    let w = RemoteWriter::create(url, RemoteEndpointType::Auto, None, size)
        .map_err(SaveCheckpointError::Open)?;
    let w = Arc::new(w);
    if let Err(e) = w.write(body.as_bytes(), 0, settings) {
        abort_open(std::slice::from_ref(&w), 1, options.stop);
        return Err(e.into());
    }
    let result = Mutex::new(Ok(()));
    let stopped = run_jobs(1, 1, options.stop, |_, flag| {
        let r = w.close_with_stop(Some(flag));
        let ok = r.is_ok();
        *result.lock().unwrap_or_else(|p| p.into_inner()) = r;
        ok
    });
    let result = result.into_inner().unwrap_or_else(|p| p.into_inner());
    match (stopped, result) {
        (false, r) => r.map_err(SaveCheckpointError::Io),
        (true, _) => {
            abort_open(std::slice::from_ref(&w), 1, options.stop);
            Err(Error::Cancelled.into())
        }
    }
}

/// Aborts every writer of `writers` that is not closed (S3: its multipart upload removed),
/// several at once; `stop` (asked again: a second Ctrl-C) ends the aborts that wait for a
/// server.
fn abort_open(
    writers: &[Arc<RemoteWriter>],
    threads: usize,
    stop: Option<&(dyn Fn() -> bool + Sync)>,
) {
    run_jobs(writers.len(), threads, stop, |i, flag| {
        if !writers[i].closed() {
            let _ = writers[i].abort_with_stop(Some(flag));
        }
        true
    });
}

/// Runs `job(i, flag)` for `i` in `0..n`, in order, on up to `threads` threads, until one
/// returns `false` (then `flag` is set: the jobs running stop soon); the calling thread asks
/// `stop` every [`STOP_POLL`] meanwhile and, where it says so, sets `flag` and starts no further
/// job. Whether `stop` said so.
fn run_jobs(
    n: usize,
    threads: usize,
    stop: Option<&(dyn Fn() -> bool + Sync)>,
    job: impl Fn(usize, &StopFlag) -> bool + Sync,
) -> bool {
    let flag = StopFlag::default();
    let next = AtomicUsize::new(0);
    let work = || loop {
        if flag.is_set() {
            return;
        }
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= n {
            return;
        }
        if !job(i, &flag) {
            flag.set();
        }
    };
    std::thread::scope(|s| {
        let (tx, rx) = mpsc::channel::<()>();
        let mut started = 0;
        for _ in 0..threads.clamp(1, n.max(1)) {
            let tx = tx.clone();
            let work = &work;
            let spawned = std::thread::Builder::new()
                .name("gpufile-save-remote".into())
                .spawn_scoped(s, move || {
                    // The channel closes once every thread has ended.
                    let _tx = tx;
                    work();
                });
            match spawned {
                Ok(_) => started += 1,
                Err(_) => break,
            }
        }
        drop(tx);
        if started == 0 {
            work();
            return false;
        }
        let mut stopped = false;
        loop {
            match rx.recv_timeout(STOP_POLL) {
                Err(RecvTimeoutError::Disconnected) => return stopped,
                Ok(()) | Err(RecvTimeoutError::Timeout) => {}
            }
            if !stopped && stop.is_some_and(|f| f()) {
                flag.set();
                stopped = true;
            }
        }
    })
}

#[cfg(test)]
#[path = "save_tests.rs"]
mod tests;
