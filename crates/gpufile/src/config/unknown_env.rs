//! Variables under gpufile's and KvikIO's prefixes that nothing reads: without a word, a misspelt
//! `KVIKIO_NTHREAD=8` would leave the default in place.
//!
//! How to use: [`take_unknown_env_warnings`] once, where a front end reads the environment (the
//! CLI prints each line as a warning, the Python package issues `warnings.warn`); later calls
//! return nothing, so a process warns once whichever front end asks first.

use std::ffi::OsString;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};

use super::{Name, ENV_PREFIXES, LOG_ENV_VARS};

/// Variables under the prefixes that are read but are not settings: gpufile's own (the cuFile
/// search path, the interpreter `bench --plot` runs, the scripts' virtualenvs, what the test
/// scripts and the test suite read) and KvikIO's that gpufile accepts with no effect (it has no
/// use for them), so a KvikIO environment warns of nothing.
pub const OTHER_ENV_VARS: [&str; 16] = [
    "GPUFILE_CUFILE_PATH",
    "GPUFILE_PYTHON",
    "GPUFILE_VENV",
    "GPUFILE_TEST_VENV",
    "GPUFILE_RELEASE_VENV",
    // The test command's and the GPU round's: every `import gpufile` under them would warn.
    "GPUFILE_TEST_MACHINE",
    "GPUFILE_TEST_SHUFFLE",
    "GPUFILE_TEST_TIME_SCALE",
    "GPUFILE_REQUIRE_GPU",
    "GPUFILE_SKIP_CPP",
    "GPUFILE_SKIP_VALGRIND",
    "KVIKIO_WEBHDFS_USERNAME",
    "KVIKIO_AUTO_DIRECT_IO_READ_OVERREAD",
    "KVIKIO_NUM_BOUNCE_BUFFERS_PER_CACHE",
    "KVIKIO_THREAD_POOL_PER_BLOCK_DEVICE",
    "KVIKIO_CUDA_DRIVER_TRY",
];

/// KvikIO's remote-I/O family (`KVIKIO_REMOTE_VERBOSE`, `KVIKIO_REMOTE_IO_NUM_REACTORS`, ...):
/// tuning of its libcurl backends, a family that grows between KvikIO releases and that
/// gpufile's one remote path has no use for. A name of it is flagged only where it is a near
/// miss of a setting's variable (`KVIKIO_REMOTE_IO_BACKNED`).
const KVIKIO_REMOTE_FAMILY: &str = "KVIKIO_REMOTE_";

/// Most edits between a name and the variable it is taken for.
const MAX_DISTANCE: usize = 3;

/// A variable under `GPUFILE_`/`KVIKIO_` that neither gpufile nor KvikIO reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownEnvVar {
    /// Its name.
    pub var: String,
    /// The known variable nearest to it, where one is a few edits away.
    pub nearest: Option<String>,
}

impl fmt::Display for UnknownEnvVar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "environment variable {} is not one gpufile reads",
            self.var
        )?;
        match &self.nearest {
            Some(n) => write!(f, "; did you mean {n}?"),
            None => write!(
                f,
                " (`gpufile config` lists the settings and their variables)"
            ),
        }
    }
}

/// Every variable that sets a setting, under both prefixes.
fn setting_vars() -> Vec<String> {
    Name::ALL.iter().flat_map(|n| n.env_vars()).collect()
}

/// The names among `names` under gpufile's or KvikIO's prefix that nothing reads, each with the
/// nearest known variable (a pure function of the names, in their order).
pub fn unknown_env_vars(names: impl IntoIterator<Item = OsString>) -> Vec<UnknownEnvVar> {
    let settings = setting_vars();
    let known: Vec<&str> = settings
        .iter()
        .map(String::as_str)
        .chain(OTHER_ENV_VARS)
        .chain(LOG_ENV_VARS)
        .collect();
    let mut found = Vec::new();
    for name in names {
        // A name that is not UTF-8 cannot be one of ours, nor a misspelling worth a guess.
        let Some(var) = name.to_str() else { continue };
        if !ENV_PREFIXES.iter().any(|p| var.starts_with(p)) || known.contains(&var) {
            continue;
        }
        let nearest = known
            .iter()
            .map(|k| (distance(var, k), *k))
            .filter(|(d, _)| *d <= MAX_DISTANCE)
            .min()
            .map(|(_, k)| k.to_owned());
        let near_setting = nearest
            .as_deref()
            .is_some_and(|n| settings.iter().any(|s| s == n));
        if var.starts_with(KVIKIO_REMOTE_FAMILY) && !near_setting {
            continue;
        }
        found.push(UnknownEnvVar {
            var: var.to_owned(),
            nearest,
        });
    }
    found
}

/// Levenshtein distance (names are short ASCII; bytes are enough).
fn distance(a: &str, b: &str) -> usize {
    let b = b.as_bytes();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.bytes().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// The warnings for this process's unknown variables, the first time it is called; nothing
/// afterwards (one warning per process, whichever front end asks first).
pub fn take_unknown_env_warnings() -> Vec<String> {
    static TAKEN: AtomicBool = AtomicBool::new(false);
    if TAKEN.swap(true, Ordering::SeqCst) {
        return Vec::new();
    }
    let mut names: Vec<OsString> = std::env::vars_os().map(|(k, _)| k).collect();
    names.sort();
    unknown_env_vars(names)
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unknown(names: &[&str]) -> Vec<UnknownEnvVar> {
        unknown_env_vars(names.iter().map(OsString::from))
    }

    #[test]
    fn misspelt_setting_is_flagged_with_the_nearest_name() {
        let found = unknown(&["KVIKIO_NTHREAD", "GPUFILE_TASKSIZE", "PATH"]);
        assert_eq!(
            found,
            vec![
                UnknownEnvVar {
                    var: "KVIKIO_NTHREAD".into(),
                    nearest: Some("KVIKIO_NTHREADS".into())
                },
                UnknownEnvVar {
                    var: "GPUFILE_TASKSIZE".into(),
                    nearest: Some("GPUFILE_TASK_SIZE".into())
                },
            ]
        );
        assert_eq!(
            found[0].to_string(),
            "environment variable KVIKIO_NTHREAD is not one gpufile reads; \
             did you mean KVIKIO_NTHREADS?"
        );
    }

    #[test]
    fn known_names_and_other_prefixes_are_not_flagged() {
        let mut names: Vec<String> = setting_vars();
        names.extend(OTHER_ENV_VARS.iter().map(|s| (*s).to_owned()));
        names.extend(
            [
                "KVIKIO_REMOTE_VERBOSE",
                "KVIKIO_REMOTE_IO_NUM_REACTORS",
                "CUFILE_ENV_PATH_JSON",
                "kvikio_nthread",
            ]
            .map(String::from),
        );
        assert_eq!(
            unknown_env_vars(names.into_iter().map(OsString::from)),
            vec![]
        );
    }

    #[test]
    fn near_miss_in_the_remote_family_and_far_names_are_flagged() {
        let found = unknown(&["KVIKIO_REMOTE_IO_BACKNED", "GPUFILE_SOMETHING_ELSE"]);
        assert_eq!(
            found[0].nearest.as_deref(),
            Some("KVIKIO_REMOTE_IO_BACKEND")
        );
        assert_eq!(found[1].nearest, None);
        assert!(found[1].to_string().contains("`gpufile config` lists"));
    }

    #[test]
    fn distance_counts_edits() {
        assert_eq!(distance("KVIKIO_NTHREAD", "KVIKIO_NTHREADS"), 1);
        assert_eq!(distance("abc", "abc"), 0);
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("kitten", "sitting"), 3);
    }
}
