//! The `gpufile` command.

fn main() {
    std::process::exit(gpufile_cli::run(std::env::args_os()));
}
