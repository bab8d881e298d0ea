//! Contexts: the handle, the primary contexts gpufile retains, and guards that make one current.

use std::collections::HashMap;
use std::sync::Mutex;

use gpufile_sys::CUcontext;

use super::result;
use crate::error::Result;

/// A CUDA context handle (an address; contexts are process-wide objects).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Context(usize);

impl Context {
    /// A handle the driver gave.
    pub(super) fn from_raw(ctx: CUcontext) -> Self {
        Context(ctx as usize)
    }

    pub(super) fn raw(self) -> CUcontext {
        self.0 as CUcontext
    }

    /// The handle as a number (for logs and maps).
    pub fn addr(self) -> usize {
        self.0
    }

    /// A made-up handle, for tests that never give it to the driver.
    #[cfg(test)]
    pub(crate) fn for_test(addr: usize) -> Self {
        Context(addr)
    }
}

/// The primary contexts gpufile retained, by device ordinal.
static PRIMARY: Mutex<Option<HashMap<i32, Context>>> = Mutex::new(None);

/// Whether `ctx` is a primary context gpufile retained (alive for the whole process).
pub(super) fn retained_primary(ctx: Context) -> bool {
    let map = PRIMARY.lock().unwrap_or_else(|e| e.into_inner());
    map.as_ref().is_some_and(|m| m.values().any(|c| *c == ctx))
}

/// The primary context of device `ordinal`, retained once by gpufile and never released, so it
/// stays valid for pinned buffers and streams whatever the application does with its own.
pub fn primary_context(ordinal: i32) -> Result<Context> {
    result::api()?;
    let mut map = PRIMARY.lock().unwrap_or_else(|e| e.into_inner());
    let map = map.get_or_insert_with(HashMap::new);
    if let Some(c) = map.get(&ordinal) {
        return Ok(*c);
    }
    let dev = result::device_get(ordinal)?;
    // The retain is deliberately never released.
    let c = Context::from_raw(result::primary_ctx_retain(dev)?);
    map.insert(ordinal, c);
    Ok(c)
}

/// The context current on this thread, if any.
pub fn current_context() -> Result<Option<Context>> {
    let current = result::ctx_get_current()?;
    Ok((!current.is_null()).then(|| Context::from_raw(current)))
}

/// The device ordinal of `ctx`.
pub fn context_device(ctx: Context) -> Result<i32> {
    let _g = push_unless_current(ctx)?;
    result::ctx_get_device()
}

/// Makes a context current on this thread until dropped (then the previous one is back).
pub struct ContextGuard {
    _not_send: std::marker::PhantomData<*const ()>,
}

impl ContextGuard {
    /// Pushes `ctx` onto this thread's context stack.
    pub fn push(ctx: Context) -> Result<Self> {
        // SAFETY: `ctx` came from the driver (pointer attribute or primary retain).
        unsafe { result::ctx_push_current(ctx.raw()) }?;
        Ok(ContextGuard {
            _not_send: std::marker::PhantomData,
        })
    }
}

impl Drop for ContextGuard {
    fn drop(&mut self) {
        // Pops exactly the context this guard pushed on this thread (guards are not `Send`).
        result::ctx_pop_current().ok();
    }
}

/// `ctx` made current on this thread until the guard drops, unless it is already (an
/// application thread that made the array usually has it: no push, no pop).
pub(super) fn push_unless_current(ctx: Context) -> Result<Option<ContextGuard>> {
    match result::ctx_get_current()? as usize == ctx.0 {
        true => Ok(None),
        false => ContextGuard::push(ctx).map(Some),
    }
}
