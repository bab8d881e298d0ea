//! cuFile's `execution.*` settings from cufile.json and the pieces cuFile makes of one request
//! under them: the model behind an explanation's cuFile work units.
//!
//! How to use: [`CufileExecution::load`] a cufile.json, then [`CufileExecution::pieces`] of a
//! request's length.

use std::path::Path;

use gpufile::__private::cufile;

/// cuFile's `execution.*` settings that decide how it splits one request.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CufileExecution {
    /// `execution.parallel_io`.
    pub parallel_io: bool,
    /// `execution.max_io_threads`.
    pub max_io_threads: u64,
    /// `execution.min_io_threshold_size_kb`.
    pub min_io_threshold_size_kb: u64,
    /// `execution.max_request_parallelism`.
    pub max_request_parallelism: u64,
    /// Where the values came from.
    pub source: String,
}

/// cuFile's documented defaults for the `execution.*` keys gpufile predicts with, as cufile.json
/// would spell them (cuFile uses them where cufile.json or a key is missing).
pub const CUFILE_EXECUTION_DEFAULTS: [(&str, &str); 4] = [
    ("execution.parallel_io", "true"),
    ("execution.max_io_threads", "4"),
    ("execution.min_io_threshold_size_kb", "8192"),
    ("execution.max_request_parallelism", "4"),
];

impl CufileExecution {
    /// cuFile's documented defaults ([`CUFILE_EXECUTION_DEFAULTS`]), `source` saying why.
    fn defaults(source: String) -> Self {
        CufileExecution {
            parallel_io: true,
            max_io_threads: 4,
            min_io_threshold_size_kb: 8192,
            max_request_parallelism: 4,
            source,
        }
    }

    /// Reads the cufile.json a caller named: a file that is missing, unreadable or not valid
    /// cufile.json is an error (never cuFile's defaults in its place); missing keys take
    /// cuFile's documented defaults.
    pub fn load_named(path: &Path) -> gpufile::Result<Self> {
        let values = cufile::read_config(path)?;
        let mut e = Self::defaults(path.display().to_string());
        e.apply(&values);
        Ok(e)
    }

    /// Reads the cufile.json cuFile would read (`CUFILE_ENV_PATH_JSON` or /etc/cufile.json):
    /// where it does not exist, cuFile uses its defaults, and so does the prediction; where it
    /// cannot be read or parsed, the defaults too, `source` saying why.
    pub fn load(path: &Path) -> Self {
        match cufile::read_config(path) {
            Ok(values) => {
                let mut e = Self::defaults(path.display().to_string());
                e.apply(&values);
                e
            }
            Err(err) if err.errno() == Some(libc::ENOENT) => Self::defaults(format!(
                "{} (cuFile defaults: the file does not exist)",
                path.display()
            )),
            Err(err) => Self::defaults(format!("cuFile defaults: {err}")),
        }
    }

    fn apply(&mut self, values: &[(String, String)]) {
        for (k, v) in values {
            match k.as_str() {
                "execution.parallel_io" => self.parallel_io = v == "true",
                "execution.max_io_threads" => self.max_io_threads = v.parse().unwrap_or(4),
                "execution.min_io_threshold_size_kb" => {
                    self.min_io_threshold_size_kb = v.parse().unwrap_or(8192)
                }
                "execution.max_request_parallelism" => {
                    self.max_request_parallelism = v.parse().unwrap_or(4)
                }
                _ => {}
            }
        }
    }

    /// The pieces cuFile makes of one request of `len` bytes: one piece up to
    /// min_io_threshold_size_kb (or without parallel_io), else at most max_request_parallelism
    /// pieces of at least that threshold (the spec: 1 GiB → 4 × 256 MiB; 16 MiB → 2 × 8 MiB).
    pub fn pieces(&self, len: usize) -> Vec<usize> {
        let threshold = (self.min_io_threshold_size_kb as usize)
            .saturating_mul(1024)
            .max(1);
        if !self.parallel_io || len <= threshold || self.max_request_parallelism <= 1 {
            return vec![len];
        }
        let n = len
            .div_ceil(threshold)
            .min(self.max_request_parallelism as usize)
            .max(1);
        let piece = len.div_ceil(n);
        (0..len)
            .step_by(piece)
            .map(|o| piece.min(len - o))
            .collect()
    }
}
