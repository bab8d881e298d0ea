//! cufile.json, as cuFile reads it (`CUFILE_ENV_PATH_JSON`, else `/etc/cufile.json`; `//`
//! comments allowed), and the effective values cuFile reports for it (`cuFileGetParameter*`).

use std::path::PathBuf;

use gpufile_sys::cufile as sys;

use super::library::api;
use crate::error::{Error, Result};

/// cufile.json as cuFile would read it: `CUFILE_ENV_PATH_JSON`, else `/etc/cufile.json`.
pub fn config_path() -> PathBuf {
    std::env::var_os("CUFILE_ENV_PATH_JSON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/etc/cufile.json"))
}

/// Removes `//` comments outside strings (cufile.json allows them; JSON does not).
pub fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_string = false;
    let mut escaped = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
        } else if c == '"' {
            in_string = true;
            out.push(c);
        } else if c == '/' && chars.peek() == Some(&'/') {
            for c in chars.by_ref() {
                if c == '\n' {
                    out.push('\n');
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The `execution` and `properties` sections of cufile.json (flattened, `section.key`).
pub fn read_config(path: &std::path::Path) -> Result<Vec<(String, String)>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::os(crate::error::Op::Open, path, 0, 0, e))?;
    parse_config(&text).map_err(|reason| {
        Error::InvalidArgument(format!(
            "{} is not valid cufile.json: {reason}",
            path.display()
        ))
    })
}

/// Parses cufile.json text; see [`read_config`].
pub fn parse_config(text: &str) -> std::result::Result<Vec<(String, String)>, String> {
    let v: serde_json::Value =
        serde_json::from_str(&strip_comments(text)).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for section in ["execution", "properties"] {
        if let Some(obj) = v.get(section).and_then(|s| s.as_object()) {
            for (k, val) in obj {
                out.push((format!("{section}.{k}"), val.to_string()));
            }
        }
    }
    Ok(out)
}

/// Effective settings as cuFile reports them (`cuFileGetParameter*`, where present).
pub fn parameters() -> Result<Vec<(&'static str, String)>> {
    let api = api()?;
    let mut out = Vec::new();
    if let Some(get) = api.get_parameter_size_t {
        for (name, p) in [
            (
                "execution.max_io_queue_depth",
                sys::CUFILE_PARAM_EXECUTION_MAX_IO_QUEUE_DEPTH,
            ),
            (
                "execution.max_io_threads",
                sys::CUFILE_PARAM_EXECUTION_MAX_IO_THREADS,
            ),
            (
                "execution.min_io_threshold_size_kb",
                sys::CUFILE_PARAM_EXECUTION_MIN_IO_THRESHOLD_SIZE_KB,
            ),
            (
                "execution.max_request_parallelism",
                sys::CUFILE_PARAM_EXECUTION_MAX_REQUEST_PARALLELISM,
            ),
            (
                "properties.max_direct_io_size_kb",
                sys::CUFILE_PARAM_PROPERTIES_MAX_DIRECT_IO_SIZE_KB,
            ),
        ] {
            let mut v = 0usize;
            // SAFETY: plain out-parameter.
            if unsafe { get(p, &mut v) }.err == sys::CU_FILE_SUCCESS {
                out.push((name, v.to_string()));
            }
        }
    }
    if let Some(get) = api.get_parameter_bool {
        for (name, p) in [
            (
                "execution.parallel_io",
                sys::CUFILE_PARAM_EXECUTION_PARALLEL_IO,
            ),
            (
                "properties.allow_compat_mode",
                sys::CUFILE_PARAM_PROPERTIES_ALLOW_COMPAT_MODE,
            ),
            (
                "properties.use_poll_mode",
                sys::CUFILE_PARAM_PROPERTIES_USE_POLL_MODE,
            ),
            ("properties.use_pci_p2pdma", sys::CUFILE_PARAM_USE_PCIP2PDMA),
            ("force_compat_mode", sys::CUFILE_PARAM_FORCE_COMPAT_MODE),
        ] {
            let mut v = false;
            // SAFETY: plain out-parameter (C `bool`).
            if unsafe { get(p, &mut v) }.err == sys::CU_FILE_SUCCESS {
                out.push((name, v.to_string()));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_go_strings_stay() {
        let text = r#"{ // top
            "execution": { "max_io_threads": 4, // four
                           "url": "http://x//y" },
            "properties": { "allow_compat_mode": true }
        }"#;
        let cfg = parse_config(text).unwrap();
        assert!(cfg.contains(&("execution.max_io_threads".into(), "4".into())));
        assert!(cfg.contains(&("execution.url".into(), "\"http://x//y\"".into())));
        assert!(cfg.contains(&("properties.allow_compat_mode".into(), "true".into())));
        assert!(parse_config("{ not json").is_err());
    }

    proptest::proptest! {
        #[test]
        fn cufile_json_parsing_never_panics(text in "\\PC{0,200}") {
            let _ = parse_config(&text);
            let _ = strip_comments(&text);
        }

        #[test]
        fn comments_never_touch_string_contents(s in "[a-z/ ]{0,20}") {
            let text = format!("{{\"execution\": {{\"k\": \"{s}\"}}}} // tail");
            let cfg = parse_config(&text).unwrap();
            proptest::prop_assert_eq!(&cfg[0].1, &format!("\"{s}\""));
        }
    }
}
