//! The commit's order, step by step: a hook on the publish seam looks at the directory before
//! every rename, link, removal and sync of a save (so at every instant of its commit), or fails
//! the k-th of them, as a kill or an I/O error would stop the commit there.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use super::super::checkpoint::{save_checkpoint, SaveOptions, INDEX_NAME};
use super::super::write::{SaveError, TensorRow};
use crate::formats::safetensors::{Checkpoint, Dtype};
use crate::publish::{with_hook, Step};
use crate::{Engine, Error};

const TENSORS: usize = 6;
const LEN: usize = 1000;

/// Shard limits: one file, 2 and 3 shards of the six 1000-byte tensors.
const SINGLE: u64 = 1 << 20;
const LAYOUTS: [u64; 3] = [SINGLE, 3000, 2000];

fn save(dir: &Path, version: u8, limit: u64, durable: bool) -> Result<(), SaveError> {
    let data: Vec<Vec<u8>> = (0..TENSORS).map(|_| vec![version; LEN]).collect();
    let engine = Engine::global().unwrap();
    let settings = engine.shared_settings();
    let rows: Vec<TensorRow> = data
        .iter()
        .enumerate()
        .map(|(i, d)| TensorRow::host(format!("t{i}"), Dtype::U8, vec![LEN as u64], d))
        .collect();
    let meta = BTreeMap::new();
    let options = SaveOptions {
        max_shard_size: limit,
        metadata: Some(&meta),
        durable,
        sizes: None,
        stop: None,
    };
    // SAFETY: `data` outlives the call.
    unsafe { save_checkpoint(dir, &rows, &options, &engine, &settings) }.map(drop)
}

/// The version every tensor of the checkpoint in `dir` holds, as the loader resolves the
/// directory; an error where it does not load as one whole checkpoint of one version.
fn loads_as(dir: &Path) -> Result<u8, String> {
    let ck = Checkpoint::open(dir).map_err(|e| e.to_string())?;
    if ck.entries.len() != TENSORS {
        return Err(format!("{} tensors", ck.entries.len()));
    }
    let mut versions = Vec::new();
    for i in 0..TENSORS {
        let e = &ck.entries[ck.find(&format!("t{i}")).map_err(|e| e.to_string())?];
        let h = &ck.files[e.file];
        let t = ck.info(e);
        let bytes = std::fs::read(&h.path).map_err(|e| e.to_string())?;
        let at = (h.data_start + t.start) as usize;
        let v = &bytes[at..at + LEN];
        if v.iter().any(|b| *b != v[0]) {
            return Err(format!("t{i} is torn"));
        }
        versions.push(v[0]);
    }
    versions.dedup();
    match versions[..] {
        [v] => Ok(v),
        _ => Err(format!("a mix of versions {versions:?}")),
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

/// Every (old, new) pair of layouts, the same layout included.
fn transitions() -> Vec<(u64, u64)> {
    LAYOUTS
        .iter()
        .flat_map(|&a| LAYOUTS.iter().map(move |&b| (a, b)))
        .collect()
}

/// The steps of a save of `new` over `old` (a durable one, which syncs too).
fn count_steps(old: u64, new: u64) -> usize {
    let tmp = tempfile::tempdir().unwrap();
    save(tmp.path(), 1, old, false).unwrap();
    let n = Rc::new(RefCell::new(0));
    let seen = Rc::clone(&n);
    with_hook(
        move |_, _| {
            *seen.borrow_mut() += 1;
            Ok(())
        },
        || save(tmp.path(), 2, new, true).unwrap(),
    );
    let steps = *n.borrow();
    steps
}

#[test]
fn every_instant_of_a_commit_loads_as_the_old_or_the_new_checkpoint() {
    for (old, new) in transitions() {
        let tmp = tempfile::tempdir().unwrap();
        let dir: PathBuf = tmp.path().to_owned();
        save(&dir, 1, old, false).unwrap();
        let instants = Rc::new(RefCell::new(Vec::new()));
        let seen = Rc::clone(&instants);
        let at = dir.clone();
        with_hook(
            move |step, path| {
                let state = loads_as(&at);
                seen.borrow_mut()
                    .push((step, path.to_owned(), state, names(&at)));
                Ok(())
            },
            || save(&dir, 2, new, true).unwrap(),
        );
        for (step, path, state, listing) in instants.borrow().iter() {
            assert!(
                matches!(state, Ok(1 | 2)),
                "{old} -> {new}: before {step:?} of {}: {state:?} from {listing:?}",
                path.display()
            );
        }
        assert_eq!(loads_as(&dir), Ok(2), "{old} -> {new}");
        assert!(
            !names(&dir).iter().any(|n| n.starts_with('.')),
            "{old} -> {new}: {:?}",
            names(&dir)
        );
        assert_eq!(names(&dir).contains(&INDEX_NAME.to_owned()), new != SINGLE);
    }
}

#[test]
fn a_commit_stopped_at_each_step_leaves_one_whole_checkpoint() {
    for (old, new) in transitions() {
        let steps = count_steps(old, new);
        for k in 0..steps {
            let tmp = tempfile::tempdir().unwrap();
            let dir = tmp.path();
            save(dir, 1, old, false).unwrap();
            let before = names(dir);
            let n = Rc::new(RefCell::new(0usize));
            let failed = Rc::new(RefCell::new(None));
            let (count, what) = (Rc::clone(&n), Rc::clone(&failed));
            let r = with_hook(
                move |step, path| {
                    let mut i = count.borrow_mut();
                    *i += 1;
                    if *i - 1 == k {
                        *what.borrow_mut() = Some((step, path.to_owned()));
                        return Err(io::Error::from_raw_os_error(libc::EIO));
                    }
                    Ok(())
                },
                || save(dir, 2, new, true),
            );
            let failed = failed.borrow().clone();
            let state = loads_as(dir);
            let case = format!("{old} -> {new}, step {k} ({failed:?}): {r:?}");
            match &r {
                // Before the commit: the old checkpoint, as it was, nothing left behind.
                Err(SaveError::Io(e)) => {
                    assert_eq!(e.errno(), Some(libc::EIO), "{case}");
                    assert_eq!(state, Ok(1), "{case}");
                    let now = names(dir);
                    assert!(
                        now == before || (new == SINGLE && old != SINGLE),
                        "{case}: {now:?}"
                    );
                }
                Err(SaveError::Committed(e)) => {
                    assert_eq!(e.errno(), Some(libc::EIO), "{case}");
                    assert_eq!(state, Ok(2), "{case}");
                }
                // A removal of what the old checkpoint had failed: a notice, not an error.
                Ok(()) => {
                    assert_eq!(state, Ok(2), "{case}");
                    assert!(
                        matches!(failed, Some((Step::Remove, _))),
                        "{case}: only a removal fails quietly"
                    );
                }
                Err(e) => panic!("{case}: {e}"),
            }
            // The next save goes through and leaves its own checkpoint.
            save(dir, 3, new, false).unwrap();
            assert_eq!(loads_as(dir), Ok(3), "{case}");
        }
    }
}

#[test]
fn an_fsync_failure_is_reported_by_a_durable_save_and_not_by_a_non_durable_one() {
    for (old, new, shard) in [
        (2000, 2000, "model-00002-of-00003.safetensors"),
        (SINGLE, 3000, "model-00001-of-00002.safetensors"),
        (2000, SINGLE, "model.safetensors"),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        save(dir, 1, old, true).unwrap();
        let before = names(dir);
        let syncs = Rc::new(RefCell::new(Vec::new()));
        let hook = |syncs: Rc<RefCell<Vec<(Step, PathBuf)>>>| {
            move |step: Step, path: &Path| {
                if matches!(step, Step::SyncFile | Step::SyncDir) {
                    syncs.borrow_mut().push((step, path.to_owned()));
                }
                match step == Step::SyncFile && path.ends_with(shard) {
                    true => Err(io::Error::from_raw_os_error(libc::EIO)),
                    false => Ok(()),
                }
            }
        };
        let r = with_hook(hook(Rc::clone(&syncs)), || save(dir, 2, new, true));
        let case = format!("{old} -> {new}");
        match r {
            Err(SaveError::Io(Error::Os {
                op, errno, path, ..
            })) => {
                assert_eq!(
                    (op, errno, path),
                    (crate::error::Op::Sync, libc::EIO, dir.join(shard)),
                    "{case}"
                );
            }
            other => panic!("{case}: a durable save whose fsync fails says so: {other:?}"),
        }
        assert_eq!(loads_as(dir), Ok(1), "{case}");
        assert_eq!(names(dir), before, "{case}: nothing left behind");
        syncs.borrow_mut().clear();
        with_hook(hook(Rc::clone(&syncs)), || save(dir, 2, new, false)).unwrap();
        assert_eq!(loads_as(dir), Ok(2), "{case}");
        assert!(syncs.borrow().is_empty(), "{case}: {:?}", syncs.borrow());
    }
}
