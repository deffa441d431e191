//! `kresctl`: the command-line client.

fn main() -> std::process::ExitCode {
    // The environment, read here once: kresctl is given what it needs of it.
    let env = knot_resolver::environment::Environment::from_vars(std::env::vars_os());
    knot_resolver::kresctl::main(env)
}
