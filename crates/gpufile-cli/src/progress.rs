//! The progress bar `gpufile read` and `gpufile load` draw on a terminal while a large read
//! runs, its rate in the units asked for (`--units`).

use gpufile_diag::units::Units;

use crate::error::CliError;
use crate::interrupt::Interrupts;

/// The progress bar's rate, in the units asked for (indicatif labels it: MB/s or MiB/s).
fn bar_template(units: Units) -> &'static str {
    match units {
        Units::Decimal => "{bar:40} {binary_bytes}/{binary_total_bytes} {decimal_bytes_per_sec} eta {eta}",
        Units::Binary => "{bar:40} {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} eta {eta}",
        Units::Both => "{bar:40} {binary_bytes}/{binary_total_bytes} {decimal_bytes_per_sec} ({binary_bytes_per_sec}) eta {eta}",
    }
}

/// Waits for a read, drawing a progress bar on a terminal for reads that take a while; a
/// caught signal cancels it ([`Interrupts::wait`], `what` says what became of the work).
pub(crate) fn wait_with_progress(
    fut: &gpufile::IoFuture,
    total: u64,
    show_progress: bool,
    units: Units,
    interrupts: &Interrupts,
    what: &str,
) -> Result<usize, CliError> {
    const BAR_MIN_BYTES: u64 = 256 << 20;
    if !show_progress || total < BAR_MIN_BYTES {
        return interrupts.wait(fut, what, || {});
    }
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template(bar_template(units))
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let result = interrupts.wait(fut, what, || bar.set_position(fut.bytes_transferred()));
    bar.finish_and_clear();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_templates_parse_and_say_their_unit() {
        for u in [Units::Decimal, Units::Binary, Units::Both] {
            assert!(indicatif::ProgressStyle::with_template(bar_template(u)).is_ok());
        }
        assert!(bar_template(Units::Decimal).contains("decimal_bytes_per_sec"));
        assert!(bar_template(Units::Binary).contains("binary_bytes_per_sec"));
    }
}
