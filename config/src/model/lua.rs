//! The `lua` section: its description (types, defaults, documentation and rules, as in
//! upstream's datamodel) and the typed form the rest of the crate reads. Field documentation
//! lives in the description only; it is what `kresctl schema` serves.

use super::blocks::*;

pub(super) fn lua() -> ObjectDef {
    let mut d = section(
        "knot_resolver.datamodel.lua_schema.LuaSchema",
        Some("Custom Lua configuration."),
        vec![
            f("script-only", Ty::Bool, json!(false), "Ignore declarative configuration intended for workers and use only Lua script or script file configured in this section."),
            f("script", opt(Ty::Str), Value::Null, "Custom Lua configuration script intended for workers."),
            f("script-file", opt(v(&vt::READABLE_FILE)), Value::Null, "Path to file that contains Lua configuration script for workers."),
            f("policy-script-only", Ty::Bool, json!(false), "Ignore declarative configuration intended for policy-loader and use only Lua script or script file configured in this section."),
            f("policy-script", opt(Ty::Str), Value::Null, "Custom Lua configuration script intended for policy-loader."),
            f("policy-script-file", opt(v(&vt::READABLE_FILE)), Value::Null, "Path to file that contains Lua configuration script for policy-loader."),
        ],
    );
    d.validate = Some(|m, _, path| {
        if is_nonempty_str(m, "script") && is_set(m, "script-file") {
            return fail(
                path,
                "'lua.script' and 'lua.script-file' are both defined, only one can be used",
            );
        }
        if is_nonempty_str(m, "policy-script") && is_set(m, "policy-script-file") {
            return fail(path, "'lua.policy-script' and 'lua.policy-script-file' are both defined, only one can be used");
        }
        Ok(())
    });
    d
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct LuaSchema {
    pub script_only: bool,
    pub script: Option<String>,
    pub script_file: Option<PathBuf>,
    pub policy_script_only: bool,
    pub policy_script: Option<String>,
    pub policy_script_file: Option<PathBuf>,
}
