//! The `mcm` binary: parses arguments and hands over to the library.

fn main() -> std::process::ExitCode {
    mcm::cli::run()
}
