//! `kresctl convert`: validate configuration files locally (no API) and print or write the
//! Lua the manager would generate, like upstream (the text, then a newline, on stdout; exit 1
//! with the error on stderr).

use std::path::PathBuf;

use super::FileError;
use crate::cli::{ConvertArgs, LuaType};
use crate::output;
use kres_config::ConfigError;
use kres_wire::environment::Environment;

/// `env` is kresctl's environment (what `logging.target: from-arg` means).
pub fn convert(args: &ConvertArgs, env: &Environment) -> Result<(), FileError> {
    let default = [PathBuf::from(kres_config::DEFAULT_CONFIG_FILE)];
    let files = if args.input_file.is_empty() {
        &default[..]
    } else {
        &args.input_file[..]
    };
    let loaded = kres_config::load_files(files, args.checks, super::logtarget_arg(env)).map_err(
        |e| match e {
            ConfigError::Parse { source, .. } => FileError::Unparsable(source),
            e => FileError::Config(e),
        },
    )?;
    let lua = match args.lua_type {
        LuaType::Worker => kres_lua::render_worker(&loaded.model),
        LuaType::PolicyLoader => kres_lua::render_policy_loader(&loaded.model),
    };
    match &args.output {
        Some(path) => std::fs::write(path, lua).map_err(|source| FileError::Write {
            path: path.clone(),
            source,
        }),
        None => Ok(output::println(&lua)?),
    }
}
