//! The processes a credential fetch starts (a profile's `credential_process`, which the AWS SDK
//! runs as `sh -c <command>` and does not kill when its wait is dropped), so that a fetch that is
//! stopped (Ctrl-C) ends them instead of leaving them running: the children this thread
//! started while the fetch ran, and their descendants.
//!
//! Linux only (`/proc/thread-self/children`, the children of the calling thread); elsewhere
//! nothing is found, and a stopped helper is left to end on its own.

use std::collections::BTreeSet;

/// The children of this thread now.
pub(crate) fn of_this_thread() -> BTreeSet<i32> {
    pids("/proc/thread-self/children")
}

/// Kills (SIGKILL) the children of this thread that are not in `before`, and their
/// descendants; how many processes it signalled.
pub(crate) fn kill_new(before: &BTreeSet<i32>) -> usize {
    let mut tree: Vec<i32> = of_this_thread().difference(before).copied().collect();
    let mut i = 0;
    while i < tree.len() {
        for p in descendants_of(tree[i]) {
            if !tree.contains(&p) {
                tree.push(p);
            }
        }
        i += 1;
    }
    for &pid in &tree {
        // SAFETY: kill(2) with a pid read from /proc and a valid signal number; no memory is
        // touched. The direct children are not reaped yet (tokio reaps them), so their pids
        // cannot have been reused; a descendant that ended since is an ESRCH, ignored.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    tree.len()
}

/// The children of every thread of `pid`.
fn descendants_of(pid: i32) -> BTreeSet<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return BTreeSet::new();
    };
    tasks
        .flatten()
        .flat_map(|t| pids(t.path().join("children")))
        .collect()
}

fn pids(path: impl AsRef<std::path::Path>) -> BTreeSet<i32> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// A child started after `before` and the grandchild it started are killed; a child
    /// started before is left alone.
    #[test]
    fn new_children_and_their_descendants_are_killed_older_ones_are_not() {
        let mut old = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let before = of_this_thread();
        assert!(before.contains(&(old.id() as i32)));
        // sh starts a sleep in the background and waits: a grandchild.
        let mut new = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & echo $! ; wait"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(new.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let grandchild: i32 = line.trim().parse().unwrap();
        assert_eq!(kill_new(&before), 2);
        assert!(!new.wait().unwrap().success());
        let t = Instant::now();
        // The grandchild, reparented, ends (its /proc entry goes once it is reaped or a zombie).
        while std::fs::read_to_string(format!("/proc/{grandchild}/stat"))
            .is_ok_and(|s| !s.contains(") Z"))
        {
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "the grandchild still runs"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            old.try_wait().unwrap().is_none(),
            "the older child still runs"
        );
        old.kill().unwrap();
        old.wait().unwrap();
    }
}
