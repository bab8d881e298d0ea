//! One or more safetensors files read as one set of tensors ([`Checkpoint`]): a file, a sharded
//! checkpoint's index, or a directory whose files may not lead outside it; and the plan of byte
//! ranges that reads a selection of its tensors into one allocation ([`ReadPlan`]).
//!
//! How to use: [`Checkpoint::open`], then [`Checkpoint::plan`] the selected tensors with
//! [`PlanOptions`].

use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::header::open_for_reading;
use super::shard::{block_read, Span};
use super::{
    FormatError, Header, Index, Result, TensorInfo, DEFAULT_ALIGN, INDEX_FILE_NAME, MAX_INDEX_LEN,
};

/// Where a checkpoint directory's files may lie, by real path: the directory itself and, for a
/// Hugging Face hub snapshot (`<repo>/snapshots/<revision>/`, whose files are symlinks to
/// `../../blobs/<hash>`), that repository's `blobs` folder. Symlinks are followed as long as
/// they lead there; a file that leads anywhere else (`/etc/passwd`, another user's data, a
/// folder linked from outside) is refused before it is opened.
struct Containment {
    /// The directory, as the caller named it (for errors).
    checkpoint: PathBuf,
    /// Its real path.
    dir: PathBuf,
    /// The real paths files may lie under: `dir`, and a snapshot's `blobs` folder.
    roots: Vec<PathBuf>,
}

impl Containment {
    fn new(checkpoint: &Path, dir: &Path) -> Result<Containment> {
        let dir = std::fs::canonicalize(dir).map_err(|source| FormatError::Io {
            path: dir.to_owned(),
            source,
        })?;
        let mut roots = vec![dir.clone()];
        let snapshots = dir
            .parent()
            .filter(|p| p.file_name() == Some("snapshots".as_ref()));
        if let Some(repo) = snapshots.and_then(Path::parent) {
            if let Ok(blobs) = std::fs::canonicalize(repo.join("blobs")) {
                if blobs.is_dir() {
                    roots.push(blobs);
                }
            }
        }
        Ok(Containment {
            checkpoint: checkpoint.to_owned(),
            dir,
            roots,
        })
    }

    /// The real path of `file`, a file of the checkpoint, or why it may not be read.
    fn check(&self, file: &Path) -> Result<PathBuf> {
        let real = std::fs::canonicalize(file).map_err(|source| FormatError::Io {
            path: file.to_owned(),
            source,
        })?;
        match self.roots.iter().any(|r| real.starts_with(r)) {
            true => Ok(real),
            false => Err(FormatError::OutsideCheckpoint {
                checkpoint: self.checkpoint.clone(),
                file: file.to_owned(),
                real,
                dir: self.dir.clone(),
            }),
        }
    }

    /// Reads the header of `file` after checking where it lies; the header keeps the name.
    fn read_header(&self, file: &Path) -> Result<Header> {
        let real = self.check(file)?;
        Header::read_from(file, &real)
    }
}

/// The real path of `file`, a file that must lie inside the directory `dir` by the rule a
/// checkpoint directory's files follow (symlinks followed as long as they stay inside `dir`'s
/// real path, or lead from a Hugging Face snapshot into its repository's blobs folder):
/// [`FormatError::OutsideCheckpoint`] where it leads anywhere else, [`FormatError::Io`] where it
/// does not exist. For stores of other files kept in a directory (a feature store's rows
/// files), so that they refuse what a checkpoint refuses. Open the path it returns.
pub fn resolve_inside(dir: &Path, file: &Path) -> Result<PathBuf> {
    Containment::new(dir, dir)?.check(file)
}

/// One tensor of a checkpoint: which file, which of its tensors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Index into [`Checkpoint::files`].
    pub file: usize,
    /// Index into that file's [`Header::tensors`].
    pub tensor: usize,
}

/// One or more safetensors files read as one set of tensors: a single file, a Hugging Face
/// sharded checkpoint (its index), or a directory.
#[derive(Clone, Debug)]
pub struct Checkpoint {
    /// What was opened (file, index or directory), for errors.
    pub path: PathBuf,
    /// The files' headers, in name order.
    pub files: Vec<Header>,
    /// The checkpoint's tensors, by file then offset. With an index, only the tensors its
    /// `weight_map` names (as `transformers` loads them).
    pub entries: Vec<Entry>,
    /// The index's `metadata` object (`{"total_size": ...}`), if an index was read.
    pub index_metadata: Option<serde_json::Value>,
    by_name: HashMap<String, usize>,
}

/// How [`Checkpoint::plan`] lays tensors out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanOptions {
    /// Alignment of each read range's start in the destination (a power of two). Each tensor
    /// is also aligned to its element size.
    pub align: u64,
    /// Merge tensors adjacent in a file into one read range (one destination run).
    pub coalesce: bool,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            align: DEFAULT_ALIGN,
            coalesce: true,
        }
    }
}

/// A contiguous range of one file to read into the destination allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadRange {
    /// Index into [`Checkpoint::files`].
    pub file: usize,
    /// Absolute file offset.
    pub offset: u64,
    /// Bytes to read.
    pub len: u64,
    /// Offset in the destination allocation.
    pub dest: u64,
}

/// What to read, and where each selected tensor lands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadPlan {
    /// Ranges to read, by file then offset; none empty, none overlapping in the destination.
    pub ranges: Vec<ReadRange>,
    /// Tensors read in part in more than one range ([`Checkpoint::plan_parts`]): each one
    /// request of its ranges.
    pub gathers: Vec<Gather>,
    /// Destination offset of each selected tensor, in the order of the selection.
    pub dests: Vec<u64>,
    /// The shape each selected tensor is read as (its own, or its part's), in the order of the
    /// selection.
    pub shapes: Vec<Vec<u64>>,
    /// Size of the destination allocation.
    pub total: u64,
}

/// The ranges of one tensor read in part, one request: file offsets in file `file`, buffer
/// offsets from `dest`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gather {
    /// Index into [`Checkpoint::files`].
    pub file: usize,
    /// Offset of the part in the destination allocation.
    pub dest: u64,
    /// The ranges, packed from `dest` in C order of the part.
    pub ranges: Vec<crate::request::Range>,
    /// Their bytes.
    pub bytes: u64,
}

impl ReadPlan {
    /// Bytes the plan reads.
    pub fn bytes(&self) -> u64 {
        self.ranges.iter().map(|r| r.len).sum::<u64>()
            + self.gathers.iter().map(|g| g.bytes).sum::<u64>()
    }
}

fn align_up(x: u64, a: u64) -> Option<u64> {
    x.checked_add(a - 1).map(|v| v & !(a - 1))
}

impl Checkpoint {
    /// Opens a `.safetensors` file, a `*.safetensors.index.json`, or a directory: its
    /// `model.safetensors.index.json` (or its one `*.safetensors.index.json`), else every
    /// `*.safetensors` file in it. Every header is read and validated.
    pub fn open(path: impl AsRef<Path>) -> Result<Checkpoint> {
        let path = path.as_ref();
        let io_err = |source| FormatError::Io {
            path: path.to_owned(),
            source,
        };
        let meta = std::fs::metadata(path).map_err(io_err)?;
        if !meta.is_dir() {
            // A file the caller names is read wherever it leads (a Hugging Face snapshot's
            // files are symlinks into its blobs folder).
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            return if name.ends_with(".json") {
                Checkpoint::open_index(path)
            } else {
                Checkpoint::from_headers(path, vec![Header::read(path)?], None, None)
            };
        }
        // A save committing meanwhile renames and removes the files a listing found: a file
        // gone between the listing and its open is looked for again in a new listing (each
        // instant of a commit is one whole checkpoint; see save::commit).
        let mut tries = 0;
        loop {
            match Checkpoint::open_dir(path) {
                Err(e) if e.errno() == Some(libc::ENOENT) && tries < 16 => tries += 1,
                other => return other,
            }
        }
    }

    /// [`Checkpoint::open`] of a directory, from one listing of it.
    fn open_dir(path: &Path) -> Result<Checkpoint> {
        let io_err = |source| FormatError::Io {
            path: path.to_owned(),
            source,
        };
        let mut indexes = Vec::new();
        let mut shards = Vec::new();
        for entry in std::fs::read_dir(path).map_err(io_err)? {
            let entry = entry.map_err(io_err)?;
            let p = entry.path();
            let Some(name) = p.file_name().and_then(|n| n.to_str()).map(str::to_owned) else {
                continue;
            };
            // A hidden name is no shard: a save killed before it published leaves its
            // temporary under one (`publish::TEMP_PREFIX`), beside the complete files.
            if !p.is_file() || name.starts_with('.') {
                continue;
            }
            if name.ends_with(".safetensors.index.json") {
                indexes.push(p);
            } else if name.ends_with(".safetensors") {
                shards.push(p);
            }
        }
        let inside = Containment::new(path, path)?;
        let preferred = path.join(INDEX_FILE_NAME);
        if indexes.contains(&preferred) {
            inside.check(&preferred)?;
            return Checkpoint::open_index(&preferred);
        }
        match indexes.len() {
            0 => {}
            1 => {
                inside.check(&indexes[0])?;
                return Checkpoint::open_index(&indexes[0]);
            }
            _ => {
                indexes.sort();
                let names: Vec<_> = indexes.iter().map(|p| p.display().to_string()).collect();
                return Err(FormatError::NotACheckpoint {
                    path: path.to_owned(),
                    reason: format!("several index files ({}); open one", names.join(", ")),
                });
            }
        }
        if shards.is_empty() {
            return Err(FormatError::NotACheckpoint {
                path: path.to_owned(),
                reason: format!("no *.safetensors file and no {INDEX_FILE_NAME}"),
            });
        }
        shards.sort();
        let headers = shards
            .iter()
            .map(|p| inside.read_header(p))
            .collect::<Result<Vec<_>>>()?;
        Checkpoint::from_headers(path, headers, None, None)
    }

    /// Opens a sharded checkpoint by its index (`{"metadata": {...}, "weight_map": {tensor:
    /// file}}`); shard names are relative to the index's directory and may not leave it, by
    /// name or by symlink (see `Containment`: a Hugging Face snapshot's links into its blobs
    /// folder are followed).
    pub fn open_index(index: &Path) -> Result<Checkpoint> {
        let bad = |reason: String| FormatError::InvalidIndex {
            path: index.to_owned(),
            reason,
        };
        let io_err = |source| FormatError::Io {
            path: index.to_owned(),
            source,
        };
        let (file, meta) = open_for_reading(index, index)?;
        let len = meta.len();
        if len > MAX_INDEX_LEN {
            return Err(bad(format!(
                "{len} bytes is larger than the limit of {MAX_INDEX_LEN}"
            )));
        }
        let mut text = vec![0u8; len as usize];
        file.read_exact_at(&mut text, 0).map_err(io_err)?;
        let parsed = Index::parse(index, &text)?;
        let dir = match index.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let inside = Containment::new(index, dir)?;
        let headers = parsed
            .shards
            .iter()
            .map(|f| inside.read_header(&dir.join(f)))
            .collect::<Result<Vec<_>>>()?;
        Checkpoint::from_headers(index, headers, Some(parsed.weight_map), parsed.metadata)
    }

    /// A checkpoint of already-read headers. `weight_map` (tensor, file index) limits it to
    /// those tensors; without it, every tensor of every file, each name in one file only.
    pub fn from_headers(
        path: &Path,
        files: Vec<Header>,
        weight_map: Option<Vec<(String, usize)>>,
        index_metadata: Option<serde_json::Value>,
    ) -> Result<Checkpoint> {
        let mut entries = Vec::new();
        let mut by_name = HashMap::new();
        match weight_map {
            None => {
                for (f, h) in files.iter().enumerate() {
                    for (t, info) in h.tensors.iter().enumerate() {
                        if let Some(&prev) = by_name.get(&info.name) {
                            let prev: &Entry = &entries[prev];
                            return Err(FormatError::DuplicateTensor {
                                tensor: info.name.clone(),
                                first: files[prev.file].path.clone(),
                                second: h.path.clone(),
                            });
                        }
                        by_name.insert(info.name.clone(), entries.len());
                        entries.push(Entry { file: f, tensor: t });
                    }
                }
            }
            Some(map) => {
                let mut found = Vec::with_capacity(map.len());
                for (name, f) in map {
                    let h = &files[f];
                    let Some(&t) = h.index.get(&name) else {
                        return Err(FormatError::MissingTensor {
                            index: path.to_owned(),
                            tensor: name,
                            file: h.path.clone(),
                        });
                    };
                    found.push(Entry { file: f, tensor: t });
                }
                found.sort_by_key(|e| (e.file, e.tensor));
                for e in found {
                    by_name.insert(files[e.file].tensors[e.tensor].name.clone(), entries.len());
                    entries.push(e);
                }
            }
        }
        Ok(Checkpoint {
            path: path.to_owned(),
            files,
            entries,
            index_metadata,
            by_name,
        })
    }

    /// The tensor of an entry.
    pub fn info(&self, entry: &Entry) -> &TensorInfo {
        &self.files[entry.file].tensors[entry.tensor]
    }

    /// The index into [`Checkpoint::entries`] of the tensor called `name`.
    pub fn find(&self, name: &str) -> Result<usize> {
        self.by_name
            .get(name)
            .copied()
            .ok_or_else(|| FormatError::UnknownTensor {
                path: self.path.clone(),
                tensor: name.to_owned(),
            })
    }

    /// Bytes of all the checkpoint's tensors.
    pub fn bytes(&self) -> u64 {
        self.entries.iter().map(|e| self.info(e).len()).sum()
    }

    /// Plans reading the tensors `selection` (indices into [`Checkpoint::entries`]; a repeated
    /// one is read once) into one destination allocation: the ranges to read, by file then
    /// offset, adjacent tensors of a file merged when `options.coalesce`; only selected bytes are
    /// read. Each range starts `options.align`-aligned; each tensor is aligned to its element
    /// size (a merged run is split where the file layout would misalign one).
    pub fn plan(&self, selection: &[usize], options: PlanOptions) -> Result<ReadPlan> {
        self.plan_parts(selection, &[], options)
    }

    /// [`Checkpoint::plan`] with `parts[i]` the block of `selection[i]` to read (`None`, or
    /// `parts` empty: whole; a tensor selected twice is read as its first part): a block in one
    /// range is planned as a tensor is, one in several ranges is a [`Gather`] of its own
    /// (`block_read`'s ranges), laid out in C order of the block read.
    pub fn plan_parts(
        &self,
        selection: &[usize],
        parts: &[Option<Vec<Span>>],
        options: PlanOptions,
    ) -> Result<ReadPlan> {
        if !parts.is_empty() && parts.len() != selection.len() {
            return Err(FormatError::InvalidOptions(format!(
                "{} parts for {} tensors",
                parts.len(),
                selection.len()
            )));
        }
        if options.align == 0 || !options.align.is_power_of_two() {
            return Err(FormatError::InvalidOptions(format!(
                "align must be a power of two, got {}",
                options.align
            )));
        }
        if let Some(&bad) = selection.iter().find(|&&i| i >= self.entries.len()) {
            return Err(FormatError::InvalidOptions(format!(
                "tensor index {bad} out of range ({} tensors)",
                self.entries.len()
            )));
        }
        let mut order: Vec<usize> = selection.to_vec();
        order.sort_by_key(|&i| {
            let e = &self.entries[i];
            (e.file, self.info(e).start, e.tensor)
        });
        order.dedup();
        let overflow = || FormatError::InvalidOptions("destination size overflows".into());
        let mut part_of: HashMap<usize, &Vec<Span>> = HashMap::new();
        for (&i, part) in selection.iter().zip(parts) {
            if let Some(p) = part {
                part_of.entry(i).or_insert(p);
            }
        }
        let mut dest_of: HashMap<usize, (u64, Vec<u64>)> = HashMap::with_capacity(order.len());
        let mut ranges: Vec<ReadRange> = Vec::new();
        let mut gathers: Vec<Gather> = Vec::new();
        let mut cursor = 0u64;
        for i in order {
            let e = &self.entries[i];
            let info = self.info(e);
            let elem = info.dtype.align();
            let mut offset = self.files[e.file].data_start + info.start;
            let mut len = info.len();
            let mut shape = info.shape.clone();
            if let Some(spans) = part_of.get(&i) {
                let block = block_read(info, offset, spans)?;
                shape = block.shape();
                len = block.bytes;
                if block.ranges.len() > 1 {
                    let d = align_up(cursor, options.align.max(elem)).ok_or_else(overflow)?;
                    cursor = d.checked_add(len).ok_or_else(overflow)?;
                    gathers.push(Gather {
                        file: e.file,
                        dest: d,
                        ranges: block.ranges,
                        bytes: len,
                    });
                    dest_of.insert(i, (d, shape));
                    continue;
                }
                offset = block.ranges.first().map_or(offset, |r| r.file_offset);
            }
            // An empty tensor is a view of no bytes: offset 0 is aligned and in range.
            let dest = if len == 0 {
                0
            } else {
                match ranges.last_mut() {
                    Some(r)
                        if options.coalesce
                            && r.file == e.file
                            && r.offset + r.len == offset
                            && r.dest + r.len == cursor
                            && (r.dest + r.len) % elem == 0 =>
                    {
                        let d = r.dest + r.len;
                        r.len += len;
                        d
                    }
                    _ => {
                        let d = align_up(cursor, options.align.max(elem)).ok_or_else(overflow)?;
                        ranges.push(ReadRange {
                            file: e.file,
                            offset,
                            len,
                            dest: d,
                        });
                        d
                    }
                }
            };
            cursor = cursor.max(dest.checked_add(len).ok_or_else(overflow)?);
            dest_of.insert(i, (dest, shape));
        }
        Ok(ReadPlan {
            ranges,
            gathers,
            dests: selection.iter().map(|i| dest_of[i].0).collect(),
            shapes: selection.iter().map(|i| dest_of[i].1.clone()).collect(),
            total: cursor,
        })
    }
}
