//! gpufile's diagnostics, apart from the I/O core: [`check`] (what this machine offers for file ⇄
//! GPU I/O) and [`explain`] (how a request will be split and which path each piece takes, from
//! the core's own planner, and what ran when it is performed), with the one JSON shape of their
//! reports ([`schema`]) and the one rule for printing sizes and rates ([`units`]). Used by the
//! CLI and the Python binding; the core never depends on it.

pub mod capabilities;
pub mod check;
pub mod explain;
pub mod schema;
pub mod units;
