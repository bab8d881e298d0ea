//! The part of `gpufile check` that only cuFile 1.15+ can tell: the GPUs' BAR sizes as cuFile
//! sees them, the P2P modes it supports per storage type, and the range of each `size_t`
//! parameter. Each is "not in this cuFile" where the loaded library lacks the call.

use std::fmt::Write as _;

use gpufile::__private::cufile::{self, StorageType};
use serde_json::{json, Value};

use crate::{schema, units};

/// What a probe says where the loaded cuFile lacks the call.
pub const NOT_IN_THIS_CUFILE: &str = "not in this cuFile";

/// One GPU's BAR size (`cuFileGetBARSizeInKB`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BarSize {
    /// CUDA ordinal.
    pub gpu: i32,
    /// The size in bytes, or why cuFile did not say.
    pub bytes: Result<u64, String>,
}

/// One storage type's P2P modes (`cuFileDriverGetP2PFlags`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct P2pModes {
    /// The storage type's short name (`nvme`).
    pub storage: String,
    /// The modes by name (`P2PDMA`, `NVFS`, ...), or why cuFile did not say.
    pub modes: Result<Vec<String>, String>,
}

/// One `size_t` parameter's range (`cuFileGetParameterMinMaxValue`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limit {
    /// cuFile's name (`CUFILE_PARAM_EXECUTION_MAX_IO_THREADS`).
    pub param: &'static str,
    /// `(min, max)` in the parameter's own unit, or why cuFile did not say.
    pub range: Result<(u64, u64), String>,
}

/// What cuFile 1.15+ tells; each part is an error ([`NOT_IN_THIS_CUFILE`] first) where the
/// loaded cuFile lacks its call or cuFile did not load.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// BAR sizes, one per GPU.
    pub bar_sizes: Result<Vec<BarSize>, String>,
    /// P2P modes, one per storage type.
    pub p2p: Result<Vec<P2pModes>, String>,
    /// Parameter ranges, one per `size_t` parameter.
    pub limits: Result<Vec<Limit>, String>,
}

/// Runs `query` over `items`; the whole part is [`NOT_IN_THIS_CUFILE`] where the first answer
/// says the call is missing (a symbol is there for every item or for none), and one error where
/// every item failed alike (the driver did not open), rather than that error once per item.
fn each<I, T, R>(
    items: impl IntoIterator<Item = I>,
    mut query: impl FnMut(&I) -> gpufile::Result<Option<T>>,
    wrap: impl Fn(I, Result<T, String>) -> R,
) -> Result<Vec<R>, String> {
    let mut answers = Vec::new();
    for item in items {
        let answer = match query(&item) {
            Ok(None) => return Err(NOT_IN_THIS_CUFILE.to_owned()),
            Ok(Some(v)) => Ok(v),
            Err(e) => Err(e.to_string()),
        };
        answers.push((item, answer));
    }
    if let Some((_, Err(first))) = answers.first() {
        if answers.len() > 1 && answers.iter().all(|(_, a)| a.as_ref().err() == Some(first)) {
            return Err(first.clone());
        }
    }
    Ok(answers.into_iter().map(|(i, a)| wrap(i, a)).collect())
}

/// Asks the loaded cuFile (`libcufile`: the load error, if it did not load) about `gpus`.
pub fn probe(libcufile: &Result<String, String>, gpus: &[i32]) -> Capabilities {
    if libcufile.is_err() {
        // The load error is said once, on libcufile's line.
        let missing = format!("{NOT_IN_THIS_CUFILE} (libcufile not loaded)");
        return Capabilities {
            bar_sizes: Err(missing.clone()),
            p2p: Err(missing.clone()),
            limits: Err(missing),
        };
    }
    // The calls exist or not whatever the GPU count: ask with no GPU too, to say which.
    let bar_sizes = match gpus.is_empty() {
        true => cufile::library().map_err(|e| e.to_string()).and_then(|l| {
            match l.api.get_bar_size_in_kb {
                Some(_) => Ok(Vec::new()),
                None => Err(NOT_IN_THIS_CUFILE.to_owned()),
            }
        }),
        false => each(
            gpus.iter().copied(),
            |&g| cufile::bar_size_kb(g),
            |gpu, kb| BarSize {
                gpu,
                bytes: kb.map(|kb| kb.saturating_mul(1024)),
            },
        ),
    };
    let p2p = each(
        StorageType::all(),
        |&s| cufile::p2p_flags(s),
        |s, flags| P2pModes {
            storage: s.name(),
            modes: flags.map(|f| f.names()),
        },
    );
    let limits = each(
        cufile::SIZE_T_PARAMETERS,
        |&(code, _)| cufile::parameter_limits(code),
        |(_, param), range| Limit { param, range },
    );
    Capabilities {
        bar_sizes,
        p2p,
        limits,
    }
}

impl Capabilities {
    /// The `check` fields `cufile_bar_sizes`, `cufile_p2p_flags`, `cufile_parameter_limits`
    /// (docs/json.md), added to `body`.
    pub fn add_json(&self, body: &mut Value) {
        let bar = self.bar_sizes.as_ref().map_err(Clone::clone).map(|v| {
            v.iter()
                .map(|b| {
                    json!({"gpu": b.gpu, "bytes": b.bytes.as_ref().ok(),
                                "error": b.bytes.as_ref().err()})
                })
                .collect::<Vec<_>>()
        });
        let p2p = self.p2p.as_ref().map_err(Clone::clone).map(|v| {
            v.iter()
                .map(|p| {
                    json!({"storage": p.storage, "modes": p.modes.as_ref().ok(),
                                "error": p.modes.as_ref().err()})
                })
                .collect::<Vec<_>>()
        });
        let limits = self.limits.as_ref().map_err(Clone::clone).map(|v| {
            v.iter()
                .map(|l| {
                    let (min, max) = match &l.range {
                        Ok((min, max)) => (Some(*min), Some(*max)),
                        Err(_) => (None, None),
                    };
                    json!({"param": l.param, "min": min, "max": max,
                           "error": l.range.as_ref().err()})
                })
                .collect::<Vec<_>>()
        });
        body["cufile_bar_sizes"] = schema::outcome(&bar);
        body["cufile_p2p_flags"] = schema::outcome(&p2p);
        body["cufile_parameter_limits"] = schema::outcome(&limits);
    }

    /// The report's lines for people.
    pub fn render(&self, s: &mut String) {
        match &self.bar_sizes {
            Ok(v) if v.is_empty() => {
                let _ = writeln!(s, "cuFile BAR   no GPU");
            }
            Ok(v) => {
                let parts: Vec<String> = v
                    .iter()
                    .map(|b| match &b.bytes {
                        Ok(n) => format!("GPU {} {}", b.gpu, units::size(*n)),
                        Err(e) => format!("GPU {} unknown ({e})", b.gpu),
                    })
                    .collect();
                let _ = writeln!(s, "cuFile BAR   {}", parts.join(", "));
            }
            Err(e) => {
                let _ = writeln!(s, "cuFile BAR   {e}");
            }
        }
        match &self.p2p {
            Ok(v) => {
                let _ = writeln!(s, "cuFile P2P   modes by storage type");
                for p in v {
                    let modes = match &p.modes {
                        Ok(m) if m.is_empty() => "none".to_owned(),
                        Ok(m) => m.join(", "),
                        Err(e) => format!("unknown ({e})"),
                    };
                    let _ = writeln!(s, "  {} = {modes}", p.storage);
                }
            }
            Err(e) => {
                let _ = writeln!(s, "cuFile P2P   {e}");
            }
        }
        match &self.limits {
            Ok(v) => {
                let _ = writeln!(s, "cuFile limits (least..greatest value accepted)");
                for l in v {
                    let range = match &l.range {
                        Ok((min, max)) => format!("{min}..{max}"),
                        Err(e) => format!("unknown ({e})"),
                    };
                    let _ = writeln!(s, "  {} = {range}", l.param);
                }
            }
            Err(e) => {
                let _ = writeln!(s, "cuFile limits {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rendered(c: &Capabilities) -> String {
        let mut s = String::new();
        c.render(&mut s);
        s
    }

    #[test]
    fn without_cufile_every_part_says_not_in_this_cufile() {
        let c = probe(&Err("cannot load libcufile.so.0: ...".into()), &[0]);
        let text = rendered(&c);
        assert_eq!(text.matches(NOT_IN_THIS_CUFILE).count(), 3, "{text}");
        // The load error itself is libcufile's line, not repeated here.
        assert!(!text.contains("cannot load"), "{text}");
        let mut body = json!({});
        c.add_json(&mut body);
        for key in [
            "cufile_bar_sizes",
            "cufile_p2p_flags",
            "cufile_parameter_limits",
        ] {
            assert_eq!(body[key]["ok"], false);
            assert!(body[key]["value"].is_null());
            assert!(body[key]["error"]
                .as_str()
                .unwrap()
                .starts_with(NOT_IN_THIS_CUFILE));
        }
    }

    #[test]
    fn answers_render_by_name_and_unit() {
        let c = Capabilities {
            bar_sizes: Ok(vec![
                BarSize {
                    gpu: 0,
                    bytes: Ok(256 << 20),
                },
                BarSize {
                    gpu: 1,
                    bytes: Err("CU_FILE_INVALID_VALUE".into()),
                },
            ]),
            p2p: Ok(vec![
                P2pModes {
                    storage: "nvme".into(),
                    modes: Ok(cufile::P2pFlags(0b11).names()),
                },
                P2pModes {
                    storage: "lustre".into(),
                    modes: Ok(vec![]),
                },
            ]),
            limits: Err(NOT_IN_THIS_CUFILE.into()),
        };
        let text = rendered(&c);
        assert!(
            text.contains("cuFile BAR   GPU 0 256 MiB, GPU 1 unknown (CU_FILE_INVALID_VALUE)"),
            "{text}"
        );
        assert!(text.contains("  nvme = P2PDMA, NVFS\n"), "{text}");
        assert!(text.contains("  lustre = none\n"), "{text}");
        assert!(
            text.contains("cuFile limits not in this cuFile\n"),
            "{text}"
        );
        let mut body = json!({});
        c.add_json(&mut body);
        assert_eq!(
            body["cufile_bar_sizes"]["value"][0],
            json!({"gpu": 0, "bytes": 256 << 20, "error": null})
        );
        assert_eq!(
            body["cufile_bar_sizes"]["value"][1],
            json!({"gpu": 1, "bytes": null, "error": "CU_FILE_INVALID_VALUE"})
        );
        assert_eq!(
            body["cufile_p2p_flags"]["value"][0],
            json!({"storage": "nvme", "modes": ["P2PDMA", "NVFS"], "error": null})
        );
        assert_eq!(
            body["cufile_parameter_limits"],
            json!({"ok": false, "value": null, "error": NOT_IN_THIS_CUFILE})
        );
        let limits = Capabilities {
            limits: Ok(vec![Limit {
                param: "CUFILE_PARAM_EXECUTION_MAX_IO_THREADS",
                range: Ok((1, 64)),
            }]),
            ..c
        };
        assert!(rendered(&limits).contains("  CUFILE_PARAM_EXECUTION_MAX_IO_THREADS = 1..64\n"));
        let mut body = json!({});
        limits.add_json(&mut body);
        assert_eq!(
            body["cufile_parameter_limits"]["value"][0],
            json!({"param": "CUFILE_PARAM_EXECUTION_MAX_IO_THREADS", "min": 1, "max": 64,
                   "error": null})
        );
    }
}
