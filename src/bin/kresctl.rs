//! `kresctl`: the command-line client.

fn main() -> std::process::ExitCode {
    knot_resolver::kresctl::main()
}
