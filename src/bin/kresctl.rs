//! `kresctl`: the command-line client (the `kresctl` crate; nothing of the daemon's).

fn main() -> std::process::ExitCode {
    // The environment, read here once: kresctl is given what it needs of it.
    let env = kres_wire::environment::Environment::from_vars(std::env::vars_os());
    kresctl::main(env)
}
