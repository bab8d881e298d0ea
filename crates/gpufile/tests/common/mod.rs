//! Helpers shared by the integration tests.

use gpufile::{Engine, FileHandle, Request};

/// xorshift bytes: cheap, and not periodic at any task size the tests use.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// `req` on `h`, on the process engine, under `settings` (`None`: the defaults).
///
/// # Safety
/// As for [`Engine::submit`].
pub unsafe fn submit(
    h: &FileHandle,
    req: Request,
    settings: Option<&gpufile::Settings>,
) -> gpufile::Result<gpufile::IoFuture> {
    let engine = Engine::global()?;
    let defaults = engine.shared_settings();
    let settings = settings.unwrap_or(&defaults);
    // SAFETY: the caller's contract.
    unsafe { engine.submit(&h.endpoint(req.direction), req, settings) }
}
