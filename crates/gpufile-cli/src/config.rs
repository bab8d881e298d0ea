//! `gpufile config`: every effective setting, its value, where it came from (default,
//! environment, set) and the environment variables that set it, as a table or as docs/json.md's
//! `config` object. A variable that does not
//! parse stops every other command; here it is shown in its setting's row with the reason, the
//! other rows as they would be, and the command exits 1.

use gpufile::__private::config::{Kind, State};
use gpufile::Engine;
use gpufile_diag::schema;
use gpufile_diag::units;
use serde_json::{json, Value};

use crate::error::CliError;
use crate::{emit_json, out, CliResult};

/// One row: the setting, its value as shown, its source, and why its variable was refused.
struct Row {
    name: &'static str,
    value: Value,
    shown: String,
    source: String,
    error: Option<String>,
    /// The `GPUFILE_*`/`KVIKIO_*` variables that set it (a misspelt one's warning sends users
    /// here).
    variables: Vec<String>,
}

/// Prints the settings: a table, or JSON with `json`; exits 1 where a variable is bad.
pub(crate) fn run(json: bool) -> CliResult {
    let (rows, mut errors) = rows()?;
    let error = match errors.len() {
        0 => None,
        1 => errors.pop().map(CliError::from),
        n => Some(CliError::new(
            "invalid-env",
            format!(
                "{n} environment variables are invalid: {}",
                errors
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        )),
    };
    if json {
        let map: serde_json::Map<String, Value> = rows
            .iter()
            .map(|r| {
                let entry = json!({
                    "value": r.value,
                    "source": r.source,
                    "error": r.error,
                    "variables": r.variables,
                });
                (r.name.to_owned(), entry)
            })
            .collect();
        let err = error
            .as_ref()
            .map(|e| e.to_json(Some("config"))["error"].clone());
        emit_json(&schema::envelope(
            "config",
            json!({ "settings": map, "error": err }),
        ));
    } else {
        out(&table(&rows));
    }
    match error {
        None => Ok(()),
        // The JSON above carries the error already; the message still goes to stderr.
        Some(e) => Err(e.in_output(json)),
    }
}

/// The rows, from the engine's settings; where a variable is bad (the engine refuses to start),
/// from the environment read variable by variable, with the errors.
fn rows() -> Result<(Vec<Row>, Vec<gpufile::Error>), CliError> {
    let (report, errors) = match Engine::global() {
        Ok(engine) => (engine.report(), Vec::new()),
        Err(gpufile::Error::InvalidEnv { .. }) => {
            let (state, errors) = State::from_env_each(|v| std::env::var_os(v));
            let report = gpufile::Name::ALL
                .iter()
                .map(|n| (*n, state.settings.get(*n), state.origin(*n).clone()))
                .collect();
            (report, errors)
        }
        Err(e) => return Err(e.into()),
    };
    let rows = report
        .into_iter()
        .map(|(name, value, source)| {
            let bad = errors.iter().find_map(|e| match e {
                gpufile::Error::InvalidEnv { var, value, reason }
                    if name.env_vars().contains(var) =>
                {
                    Some((var.clone(), value.clone(), reason.clone()))
                }
                _ => None,
            });
            match bad {
                Some((var, text, reason)) => Row {
                    name: name.as_str(),
                    value: json!(text),
                    shown: format!("{text:?}"),
                    source: format!("env {var}"),
                    error: Some(reason),
                    variables: name.env_vars(),
                },
                None => Row {
                    name: name.as_str(),
                    shown: shown(name.kind(), &value),
                    value: json!(value),
                    source: source.to_string(),
                    error: None,
                    variables: name.env_vars(),
                },
            }
        })
        .collect();
    Ok((rows, errors))
}

/// A value for people: sizes as bytes and with units.
fn shown(kind: Kind, value: &gpufile::Value) -> String {
    match (kind, value) {
        (Kind::Size | Kind::PositiveSize, gpufile::Value::Int(n)) => {
            format!("{n} ({})", units::size(*n))
        }
        _ => value.to_string(),
    }
}

/// The table: each column as wide as its widest cell, so no row runs past its column; a bad
/// variable's reason follows its source. Then the environment variables of each setting (a
/// misspelt variable's warning sends users here), indented under their own heading.
fn table(rows: &[Row]) -> String {
    let w_name = rows.iter().map(|r| r.name.len()).max().unwrap_or(0).max(7);
    let w_value = rows
        .iter()
        .map(|r| r.shown.chars().count())
        .max()
        .unwrap_or(0)
        .max(5);
    let mut text = format!("{:<w_name$}  {:<w_value$}  source\n", "setting", "value");
    for r in rows {
        let source = match &r.error {
            Some(reason) => format!("{}: invalid: {reason}", r.source),
            None => r.source.clone(),
        };
        text += &format!("{:<w_name$}  {:<w_value$}  {source}\n", r.name, r.shown);
    }
    text += "\nenvironment variables (where several are set, the first listed wins)\n";
    for r in rows {
        text += &format!("  {:<w_name$}  {}\n", r.name, r.variables.join(" "));
    }
    text
}
