//! `gpufile check`: what this machine offers for file ⇄ GPU I/O, and which path each
//! compat_mode would take — gdscheck, gds_stats and a read of cufile.json in one report.
//!
//! How to use: [`check`]`(Some(path))` gives a [`CheckReport`] (serde for `--json`, `render()`
//! for people). Every probe that fails says why instead of failing the report.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use gpufile::__private::cuda;
use gpufile::__private::cufile;
use gpufile::__private::plan::{self, Availability, Policy};
use gpufile::CompatMode;
use gpufile::{IoPath, Memory};
use serde_json::{json, Value};

use crate::capabilities::{self, Capabilities};
use crate::explain::CUFILE_EXECUTION_DEFAULTS;
use crate::{schema, units};
use gpufile::{Engine, FileHandle};

/// One GPU.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Gpu {
    /// Ordinal.
    pub ordinal: i32,
    /// Name.
    pub name: String,
    /// Memory, bytes.
    pub memory_bytes: usize,
    /// PCI address.
    pub pci: Option<String>,
    /// PCIe link ("32.0 GT/s PCIe x16"), from sysfs.
    pub pcie_link: Option<String>,
    /// BAR1 size in bytes, from sysfs.
    pub bar1_bytes: Option<u64>,
}

/// The file a check was asked about.
#[derive(Clone, Debug)]
pub struct FileCheck {
    /// The path.
    pub path: PathBuf,
    /// Why it cannot be opened for reading (missing, a directory, no permission), if so.
    pub error: Option<String>,
    /// File system type (from /proc/self/mountinfo).
    pub fs_type: Option<String>,
    /// Mount point.
    pub mount_point: Option<String>,
    /// Block device "major:minor" and its name.
    pub block_device: Option<String>,
    /// Whether udev's database describes that device (cuFile needs it to register files).
    pub udev_entry: Option<bool>,
    /// Whether O_DIRECT opens work.
    pub o_direct: bool,
    /// Whether cuFile registers the file, or why not.
    pub cufile_registers: Result<(), String>,
}

/// cufile.json as cuFile would read it.
#[derive(Clone, Debug)]
pub struct CufileJson {
    /// `CUFILE_ENV_PATH_JSON`, else /etc/cufile.json.
    pub path: PathBuf,
    /// Whether the file exists (where not, cuFile uses its built-in defaults).
    pub exists: bool,
    /// Its `execution.*` / `properties.*` values (JSON text), cuFile's defaults where the file
    /// does not exist, or why it could not be read.
    pub values: Result<Vec<(String, String)>, String>,
}

/// The path a large device read would take under one compat_mode.
#[derive(Clone, Debug)]
pub struct Verdict {
    /// The mode.
    pub compat_mode: CompatMode,
    /// The path, or why such a read would fail.
    pub decision: Result<IoPath, String>,
}

/// Everything `gpufile check` reports.
#[derive(Clone, Debug)]
pub struct CheckReport {
    /// gpufile's version.
    pub gpufile_version: &'static str,
    /// libcuda: its path and driver version, or why not.
    pub libcuda: Result<String, String>,
    /// GPUs (empty where none).
    pub gpus: Vec<Gpu>,
    /// libcufile: where it loaded from and its version, or why not.
    pub libcufile: Result<String, String>,
    /// cuFile's driver properties, or why not.
    pub cufile_properties: Result<cufile::Properties, String>,
    /// nvidia-fs kernel module version, if loaded.
    pub nvidia_fs: Option<String>,
    /// Whether /run/udev exists.
    pub run_udev: bool,
    /// Whether this is WSL.
    pub wsl: bool,
    /// IOMMU state: groups in /sys/class/iommu and the kernel command line's iommu words.
    pub iommu: String,
    /// cufile.json's path and its values.
    pub cufile_json: CufileJson,
    /// What cuFile reports it uses (cuFileGetParameter*).
    pub cufile_parameters: Result<Vec<(String, String)>, String>,
    /// What only cuFile 1.15+ tells: BAR sizes, P2P modes, parameter ranges.
    pub cufile_capabilities: Capabilities,
    /// The file asked about.
    pub file: Option<FileCheck>,
    /// For each compat mode, the path a large device read would take.
    pub verdicts: Vec<Verdict>,
}

fn read_trim(path: impl AsRef<Path>) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
}

/// The path of a loaded shared object, from /proc/self/maps.
fn loaded_path(name: &str) -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.contains(name))
        .map(String::from)
}

fn gpus() -> Vec<Gpu> {
    let n = gpufile::device_count().unwrap_or(0);
    (0..n as i32)
        .map(|ordinal| {
            let pci = cuda::device_pci_address(ordinal).ok();
            let sysfs = pci
                .as_ref()
                .map(|p| PathBuf::from("/sys/bus/pci/devices").join(p));
            let pcie_link = sysfs.as_ref().and_then(|d| {
                let speed = read_trim(d.join("current_link_speed"))?;
                let width = read_trim(d.join("current_link_width"))?;
                Some(format!("{speed} x{width}"))
            });
            let bar1_bytes = sysfs.as_ref().and_then(|d| {
                let res = std::fs::read_to_string(d.join("resource")).ok()?;
                let line = res.lines().nth(1)?; // BAR1
                let mut it = line
                    .split_whitespace()
                    .map(|v| u64::from_str_radix(v.trim_start_matches("0x"), 16));
                let (start, end) = (it.next()?.ok()?, it.next()?.ok()?);
                (end > start).then(|| end - start + 1)
            });
            Gpu {
                ordinal,
                name: cuda::device_name(ordinal).unwrap_or_else(|e| e.to_string()),
                memory_bytes: cuda::device_total_memory(ordinal).unwrap_or(0),
                pci,
                pcie_link,
                bar1_bytes,
            }
        })
        .collect()
}

fn iommu() -> String {
    let groups = std::fs::read_dir("/sys/class/iommu")
        .map(|d| d.count())
        .unwrap_or(0);
    let cmdline = read_trim("/proc/cmdline").unwrap_or_default();
    let words: Vec<&str> = cmdline
        .split_whitespace()
        .filter(|w| w.contains("iommu"))
        .collect();
    let state = if groups > 0 {
        format!("on ({groups} IOMMU units)")
    } else {
        "off".to_owned()
    };
    if words.is_empty() {
        state
    } else {
        format!("{state}; kernel command line: {}", words.join(" "))
    }
}

/// The mount point and file system type (`ext4`, `proc`, ...) of `path`.
pub fn file_system(path: &Path) -> Option<(String, String)> {
    mount_of(path).map(|(mount, fs, _)| (mount, fs))
}

/// Mount point and file system type of `path` (the longest mount point that holds it).
fn mount_of(path: &Path) -> Option<(String, String, String)> {
    let canon = std::fs::canonicalize(path).ok()?;
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let sep = f.iter().position(|x| *x == "-")?;
            Some((
                f.get(4)?.to_string(),
                f.get(sep + 1)?.to_string(),
                f.get(sep + 2)?.to_string(),
            ))
        })
        .filter(|(mp, _, _)| canon.starts_with(mp))
        .max_by_key(|(mp, _, _)| mp.len())
}

fn file_check(path: &Path) -> FileCheck {
    use std::os::unix::fs::MetadataExt;
    let mount = mount_of(path);
    let dev = std::fs::metadata(path).ok().map(|m| m.dev());
    let block_device = dev.map(|d| {
        let (major, minor) = (libc::major(d), libc::minor(d));
        let name = std::fs::read_link(format!("/sys/dev/block/{major}:{minor}"))
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
        match name {
            Some(n) => format!("{major}:{minor} ({n})"),
            None => format!("{major}:{minor}"),
        }
    });
    let udev_entry = dev.map(|d| {
        Path::new(&format!(
            "/run/udev/data/b{}:{}",
            libc::major(d),
            libc::minor(d)
        ))
        .exists()
    });
    let handle = FileHandle::open(path, "r");
    let o_direct = handle
        .as_ref()
        .is_ok_and(FileHandle::is_direct_io_supported);
    let cufile_registers = match (&handle, cufile::availability()) {
        (Err(e), _) => Err(e.to_string()),
        (_, Availability::Unavailable(why)) => Err(why),
        (Ok(h), _) => h
            .cufile_registration()
            .map(|_| ())
            .map_err(|e| e.to_string()),
    };
    FileCheck {
        path: path.to_owned(),
        error: handle.as_ref().err().map(ToString::to_string),
        fs_type: mount.as_ref().map(|m| m.1.clone()),
        mount_point: mount.as_ref().map(|m| m.0.clone()),
        block_device,
        udev_entry,
        o_direct,
        cufile_registers,
    }
}

/// Probes the machine (and `path`, if given).
pub fn check(path: Option<&Path>) -> CheckReport {
    let libcuda = match cuda::driver_version() {
        Ok((major, minor)) => Ok(format!(
            "{} (driver API {major}.{minor})",
            loaded_path("libcuda.so").unwrap_or_else(|| "libcuda.so.1".into())
        )),
        Err(e) => Err(e.to_string()),
    };
    let gpus = if libcuda.is_ok() { gpus() } else { Vec::new() };
    let libcufile = match cufile::library() {
        Ok(l) => Ok(match l.api.version() {
            Some((major, minor)) => format!("{} (cuFile {major}.{minor})", l.path),
            None => l.path.clone(),
        }),
        Err(e) => Err(e.to_string()),
    };
    let cufile_properties = if libcufile.is_ok() {
        cufile::properties().map_err(|e| e.to_string())
    } else {
        Err("libcufile not loaded".into())
    };
    let nvidia_fs = read_trim("/sys/module/nvidia_fs/version")
        .or_else(|| read_trim("/proc/driver/nvidia-fs/version"))
        .or_else(|| {
            Path::new("/proc/driver/nvidia-fs")
                .exists()
                .then(|| "loaded".into())
        });
    let json_path = cufile::config_path();
    let cufile_json = match cufile::read_config(&json_path) {
        Ok(values) => CufileJson {
            path: json_path,
            exists: true,
            values: Ok(values),
        },
        // As cuFile (and `explain`) do: no cufile.json means cuFile's built-in defaults.
        Err(e) if e.errno() == Some(libc::ENOENT) => CufileJson {
            path: json_path,
            exists: false,
            values: Ok(CUFILE_EXECUTION_DEFAULTS
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()),
        },
        Err(e) => CufileJson {
            exists: json_path.exists(),
            path: json_path,
            values: Err(e.to_string()),
        },
    };
    let cufile_parameters = if libcufile.is_ok() {
        cufile::parameters()
            .map(|v| v.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
            .map_err(|e| e.to_string())
    } else {
        Err("libcufile not loaded".into())
    };
    let ordinals: Vec<i32> = gpus.iter().map(|g| g.ordinal).collect();
    let cufile_capabilities = capabilities::probe(&libcufile, &ordinals);
    let file = path.map(file_check);
    let gds_threshold = Engine::global()
        .map(|e| e.settings().gds_threshold)
        .unwrap_or(16 << 10);
    let verdicts = [CompatMode::Auto, CompatMode::On, CompatMode::Off]
        .into_iter()
        .map(|mode| {
            let policy = Policy {
                compat_mode: mode,
                gds_threshold,
                require_gds: false,
            };
            // The same two steps a request takes: the path, then (for a file) the registration.
            let path = plan::choose_path(Memory::Device, usize::MAX, policy, cufile::availability)
                .and_then(|p| match (&file, p.backend) {
                    (Some(f), gpufile::Backend::Cufile) => {
                        plan::after_registration(p, policy, f.cufile_registers.clone())
                    }
                    _ => Ok(p),
                });
            Verdict {
                compat_mode: mode,
                decision: path.map_err(|e| e.to_string()),
            }
        })
        .collect();
    CheckReport {
        gpufile_version: gpufile::VERSION,
        libcuda,
        gpus,
        libcufile,
        cufile_properties,
        nvidia_fs,
        run_udev: Path::new("/run/udev").exists(),
        wsl: read_trim("/proc/version").is_some_and(|v| v.to_lowercase().contains("microsoft")),
        iommu: iommu(),
        cufile_json,
        cufile_parameters,
        cufile_capabilities,
        file,
        verdicts,
    }
}

fn show<T: std::fmt::Display, E: std::fmt::Display>(r: &Result<T, E>) -> String {
    match r {
        Ok(v) => v.to_string(),
        Err(e) => format!("not available: {e}"),
    }
}

impl FileCheck {
    fn to_json(&self) -> Value {
        json!({
            "path": self.path,
            "error": self.error,
            "fs_type": self.fs_type,
            "mount_point": self.mount_point,
            "block_device": self.block_device,
            "udev_entry": self.udev_entry,
            "o_direct": self.o_direct,
            "cufile_registers": schema::outcome(&self.cufile_registers.clone().map(|()| true)),
        })
    }
}

impl CheckReport {
    /// The report as plain data: `gpufile check --json`, Python's `check().as_dict()`
    /// (docs/json.md).
    pub fn to_json(&self) -> Value {
        let pairs = |v: &Vec<(String, String)>| -> Vec<Value> {
            v.iter()
                .map(|(k, v)| json!({"key": k, "value": v}))
                .collect()
        };
        let mut body = json!({
            "gpufile_version": self.gpufile_version,
            "libcuda": schema::outcome(&self.libcuda),
            "gpus": self.gpus,
            "libcufile": schema::outcome(&self.libcufile),
            "cufile_properties": schema::outcome(&self.cufile_properties),
            "nvidia_fs": self.nvidia_fs,
            "run_udev": self.run_udev,
            "wsl": self.wsl,
            "iommu": self.iommu,
            "cufile_json": {
                "path": self.cufile_json.path,
                "exists": self.cufile_json.exists,
                "values": schema::outcome(&self.cufile_json.values.as_ref().map(pairs)
                    .map_err(Clone::clone)),
            },
            "cufile_parameters": schema::outcome(&self.cufile_parameters.as_ref().map(pairs)
                .map_err(Clone::clone)),
            "file": self.file.as_ref().map(FileCheck::to_json),
            "verdicts": self.verdicts.iter().map(|v| {
                let mut d = schema::decision(&v.decision);
                d["compat_mode"] = json!(v.compat_mode.name());
                d
            }).collect::<Vec<_>>(),
        });
        self.cufile_capabilities.add_json(&mut body);
        schema::envelope("check", body)
    }

    /// Whether a file was asked about and could not be opened (`gpufile check` then exits 1).
    pub fn file_error(&self) -> Option<String> {
        self.file.as_ref()?.error.clone()
    }

    /// The report for people.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "gpufile      {}", self.gpufile_version);
        // libcuda's failure is said once, on its line; the lines it also explains point there.
        const CUDA_PREFIX: &str = "CUDA is not available: ";
        let libcuda = match &self.libcuda {
            Err(e) => format!(
                "not available: {}",
                e.strip_prefix(CUDA_PREFIX).unwrap_or(e)
            ),
            Ok(v) => v.clone(),
        };
        let brief = |text: String| match &self.libcuda {
            Err(e) if !e.is_empty() => {
                text.replace(e.as_str(), "CUDA is not available, see libcuda")
            }
            _ => text,
        };
        let _ = writeln!(s, "libcuda      {libcuda}");
        if self.gpus.is_empty() {
            let _ = writeln!(
                s,
                "GPUs         none: host-memory I/O works; device I/O needs a GPU"
            );
        }
        for g in &self.gpus {
            let _ = writeln!(
                s,
                "GPU {}        {}, {}, PCI {}, link {}, BAR1 {}",
                g.ordinal,
                g.name,
                units::size(g.memory_bytes as u64),
                g.pci.as_deref().unwrap_or("?"),
                g.pcie_link.as_deref().unwrap_or("unknown"),
                g.bar1_bytes.map_or("unknown".into(), units::size),
            );
        }
        let _ = writeln!(s, "libcufile    {}", show(&self.libcufile));
        match &self.cufile_properties {
            Ok(p) => {
                let _ = writeln!(
                    s,
                    "cuFile       nvidia-fs version {}.{}, GDS available: {}, P2PDMA: {}, \
                     compat mode allowed: {}, poll mode: {}",
                    p.major_version,
                    p.minor_version,
                    p.is_gds_available,
                    p.p2p_supported,
                    p.allow_compat_mode,
                    p.poll_mode
                );
            }
            Err(e) => {
                let _ = writeln!(s, "cuFile       driver not available: {e}");
            }
        }
        let _ = writeln!(
            s,
            "nvidia-fs    {}",
            self.nvidia_fs.as_deref().unwrap_or("not loaded")
        );
        let _ = writeln!(
            s,
            "/run/udev    {}",
            if self.run_udev {
                "present"
            } else {
                "missing (cuFile cannot register files)"
            }
        );
        let _ = writeln!(s, "WSL          {}", if self.wsl { "yes" } else { "no" });
        let _ = writeln!(s, "IOMMU        {}", self.iommu);
        let j = &self.cufile_json;
        match &j.values {
            Ok(v) => {
                let _ = writeln!(
                    s,
                    "cufile.json  {}{}",
                    j.path.display(),
                    if j.exists {
                        ""
                    } else {
                        " does not exist: cuFile uses its built-in defaults"
                    }
                );
                for (k, val) in v {
                    let _ = writeln!(s, "  {k} = {val}");
                }
            }
            Err(e) => {
                let _ = writeln!(s, "cufile.json  {} ({e})", j.path.display());
            }
        }
        if let Ok(params) = &self.cufile_parameters {
            let _ = writeln!(s, "cuFile uses");
            for (k, v) in params {
                let _ = writeln!(s, "  {k} = {v}");
            }
        }
        self.cufile_capabilities.render(&mut s);
        if let Some(e) = self.file.as_ref().and_then(|f| f.error.as_ref()) {
            let _ = writeln!(s, "file         {e}");
        }
        if let Some(f) = &self.file.as_ref().filter(|f| f.error.is_none()) {
            let _ = writeln!(s, "file         {}", f.path.display());
            let _ = writeln!(
                s,
                "  file system {} on {} (mounted at {})",
                f.fs_type.as_deref().unwrap_or("?"),
                f.block_device.as_deref().unwrap_or("?"),
                f.mount_point.as_deref().unwrap_or("?")
            );
            if let Some(e) = f.udev_entry {
                let _ = writeln!(s, "  udev entry  {}", if e { "present" } else { "missing" });
            }
            let _ = writeln!(
                s,
                "  O_DIRECT    {}",
                if f.o_direct { "accepted" } else { "refused" }
            );
            let _ = writeln!(
                s,
                "  cuFile      {}",
                match &f.cufile_registers {
                    Ok(()) => "registers it".to_owned(),
                    Err(e) => brief(format!("does not register it: {e}")),
                }
            );
        }
        let _ = writeln!(s, "verdict (device reads of gds_threshold or more)");
        for v in &self.verdicts {
            let text = match &v.decision {
                Ok(p) => p.to_string(),
                Err(e) => format!("error: {e}"),
            };
            let _ = writeln!(s, "  {:<4} → {}", v.compat_mode.name(), brief(text));
        }
        s
    }
}

impl serde::Serialize for CheckReport {
    /// The shape of [`CheckReport::to_json`].
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_has_no_rust_wrappers() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("c.bin");
        std::fs::write(&f, b"x").unwrap();
        let v = check(Some(&f)).to_json();
        let text = v.to_string();
        assert!(
            !text.contains("\"Ok\"") && !text.contains("\"Err\""),
            "{text}"
        );
        assert_eq!(v["schema_version"], crate::schema::SCHEMA_VERSION);
        assert_eq!(v["verdicts"][1]["compat_mode"], "ON");
        assert_eq!(v["verdicts"][1]["path"]["reason"]["kind"], "compat-mode-on");
        assert!(v["file"]["error"].is_null());
        let v = check(Some(&dir.path().join("missing"))).to_json();
        assert!(v["file"]["error"]
            .as_str()
            .unwrap()
            .contains("No such file"));
    }

    #[test]
    fn mount_lookup_finds_root() {
        let (mp, fs, _) = mount_of(Path::new("/")).unwrap();
        assert_eq!(mp, "/");
        assert!(!fs.is_empty());
    }
}
