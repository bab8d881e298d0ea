//! `gpufile config`: every effective setting, its value and where it came from (default,
//! environment, set), as a table or as docs/json.md's `config` object.

use gpufile::config::{self, Kind};
use gpufile::Engine;
use gpufile_diag::schema;
use gpufile_diag::units;
use serde_json::{json, Value};

use crate::{emit_json, out, CliResult};

/// Prints the settings: a table, or JSON with `json`.
pub(crate) fn run(json: bool) -> CliResult {
    let rows = Engine::global()?.report();
    if json {
        let map: serde_json::Map<String, Value> = rows
            .iter()
            .map(|(name, value, source)| {
                let entry = json!({ "value": value, "source": source.to_string() });
                (name.to_string(), entry)
            })
            .collect();
        emit_json(&schema::envelope("config", json!({ "settings": map })));
        return Ok(());
    }
    let mut text = format!("{:<22} {:<26} {}\n", "setting", "value", "source");
    for (name, value, source) in rows {
        let shown = match (name.kind(), &value) {
            (Kind::Size | Kind::PositiveSize, config::Value::Int(n)) => {
                format!("{n} ({})", units::size(*n))
            }
            _ => value.to_string(),
        };
        text += &format!("{:<22} {:<26} {}\n", name.as_str(), shown, source);
    }
    out(&text);
    Ok(())
}
