//! The handles C holds: numbers, never addresses. Each open file and each future lives in a
//! table under a number that is never given out again; the pointer C holds is that number. A
//! handle closed or freed already, or a pointer gpufile never gave out, is then a clear
//! bad-argument error instead of memory used after it was freed, and a call running on one
//! thread keeps its object alive while another thread closes the handle.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::CallError;

/// Live objects of one kind by number.
pub(crate) struct Table<T> {
    /// What C calls the kind in errors ("file", "future").
    what: &'static str,
    live: Mutex<Option<HashMap<usize, Arc<T>>>>,
}

/// The next number: shared by every table (a future's number is never a file's), never 0
/// (NULL), a multiple of 16 (it looks like an aligned pointer to C tools, which is all C may
/// do with it).
static NEXT: AtomicUsize = AtomicUsize::new(16);

impl<T> Table<T> {
    pub(crate) const fn new(what: &'static str) -> Self {
        Table {
            what,
            live: Mutex::new(None),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Option<HashMap<usize, Arc<T>>>> {
        // The table holds no invariant a panicking holder could break half-way.
        self.live.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stores `value`; the number C holds for it.
    pub(crate) fn insert(&self, value: T) -> usize {
        let id = NEXT.fetch_add(16, Ordering::Relaxed);
        self.lock()
            .get_or_insert_with(HashMap::new)
            .insert(id, Arc::new(value));
        id
    }

    fn unknown(&self, id: usize) -> CallError {
        match id {
            0 => CallError::bad(format!("{} is NULL", self.what)),
            _ => CallError::bad(format!(
                "{} {id:#x} is not an open gpufile_{} (closed or freed already, or never \
                 given out by gpufile)",
                self.what, self.what
            )),
        }
    }

    /// The live object `id` names.
    pub(crate) fn get(&self, id: usize) -> Result<Arc<T>, CallError> {
        let live = self.lock();
        let found = live.as_ref().and_then(|m| m.get(&id)).cloned();
        found.ok_or_else(|| self.unknown(id))
    }

    /// Takes the object `id` names out of the table (calls running with it keep it alive).
    pub(crate) fn remove(&self, id: usize) -> Result<Arc<T>, CallError> {
        let found = self.lock().as_mut().and_then(|m| m.remove(&id));
        found.ok_or_else(|| self.unknown(id))
    }
}
