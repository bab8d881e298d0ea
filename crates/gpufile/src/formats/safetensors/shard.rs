//! Parts of tensors: a block of a tensor (one [`Span`] of indices per dimension) as the byte
//! ranges of the file that hold it ([`block_read`]), and tensor-parallel sharding
//! ([`Sharding`]): which block of each tensor a rank reads, by name pattern, dimension or
//! transformers' `tp_plan` words.
//!
//! How to use: [`Sharding::new`] with this rank, the world size and the rules, then
//! [`Checkpoint::shard_parts`] of the selected tensors gives each one's block (`None`: read
//! whole), which [`Checkpoint::plan_parts`] and [`super::submit_parts`] read.

use super::{Checkpoint, Dtype, FormatError, Result, TensorInfo};
use crate::request::Range;

/// Indices of one dimension: `count` of them from `start`, `step` apart (`step` at least 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    /// The first index.
    pub start: u64,
    /// How many.
    pub count: u64,
    /// From one to the next.
    pub step: u64,
}

impl Span {
    /// Every index of a dimension of size `n`.
    pub fn whole(n: u64) -> Span {
        Span {
            start: 0,
            count: n,
            step: 1,
        }
    }

    fn is_whole(&self, n: u64) -> bool {
        self.start == 0 && self.count == n && (self.step == 1 || n <= 1)
    }
}

/// What reading a block of a tensor reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockRead {
    /// The block read, one span per dimension: the one asked, except that a step larger than 1
    /// in the last dimension, where one element is the longest run, is read as the run that
    /// covers it (step 1; the caller keeps every step-th element).
    pub read: Vec<Span>,
    /// The file ranges, in C order of the block, packed from buffer offset 0; adjacent runs
    /// are one range.
    pub ranges: Vec<Range>,
    /// Bytes of the block read (the ranges' total).
    pub bytes: u64,
}

impl BlockRead {
    /// The shape of the block read.
    pub fn shape(&self) -> Vec<u64> {
        self.read.iter().map(|s| s.count).collect()
    }
}

/// The byte ranges of the block `spans` of `info`, whose bytes start at file offset `offset`.
/// A sub-byte dtype (F4, F6) is read whole only; spans past the shape are
/// [`FormatError::InvalidShard`].
pub fn block_read(info: &TensorInfo, offset: u64, spans: &[Span]) -> Result<BlockRead> {
    let bad =
        |reason: String| FormatError::InvalidShard(format!("tensor {:?}: {reason}", info.name));
    let shape = &info.shape;
    if spans.len() != shape.len() {
        return Err(bad(format!(
            "{} spans for {} dimensions (shape {shape:?})",
            spans.len(),
            shape.len()
        )));
    }
    for (d, (s, &n)) in spans.iter().zip(shape).enumerate() {
        let last = s
            .count
            .checked_sub(1)
            .map(|c| c.checked_mul(s.step).and_then(|x| x.checked_add(s.start)));
        if s.step == 0 || matches!(last, Some(None)) || matches!(last, Some(Some(l)) if l >= n) {
            return Err(bad(format!(
                "indices {}, {} of them {} apart, are outside dimension {d} of size {n}",
                s.start, s.count, s.step
            )));
        }
    }
    let whole = spans.iter().zip(shape).all(|(s, &n)| s.is_whole(n));
    if info.dtype.bits() % 8 != 0 && !whole {
        return Err(bad(format!(
            "{} packs elements below a byte: it is read whole only",
            info.dtype
        )));
    }
    let mut read = spans.to_vec();
    if whole || spans.iter().any(|s| s.count == 0) {
        let bytes = if whole { info.len() } else { 0 };
        let ranges = match bytes {
            0 => Vec::new(),
            n => vec![Range {
                file_offset: offset,
                len: usize::try_from(n).map_err(|_| bad("larger than memory".into()))?,
                buf_offset: 0,
            }],
        };
        return Ok(BlockRead {
            read,
            ranges,
            bytes,
        });
    }
    let elem = info.dtype.bits() / 8;
    // The last dimension read in part: the ones after it are whole, so each of its indices is
    // one run of `inner` bytes.
    let p = (0..shape.len())
        .rev()
        .find(|&d| !spans[d].is_whole(shape[d]))
        .expect("a block other than the whole tensor has a dimension read in part");
    if p + 1 == shape.len() && read[p].step > 1 {
        let s = read[p];
        read[p] = Span {
            start: s.start,
            count: (s.count - 1) * s.step + 1,
            step: 1,
        };
    }
    // Every product below is at most the tensor's byte length, which fits a u64.
    let mut stride = vec![elem; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        stride[d] = stride[d + 1] * shape[d + 1];
    }
    let inner = stride[p];
    let (runs_per, run_len) = match read[p].step {
        1 => (1, read[p].count * inner),
        _ => (read[p].count, inner),
    };
    let run_len = usize::try_from(run_len).map_err(|_| bad("larger than memory".into()))?;
    let bytes: u64 = read.iter().map(|s| s.count).product::<u64>() * elem;
    let mut ranges: Vec<Range> = Vec::new();
    let mut at = vec![0u64; p]; // the index of each outer dimension, an odometer
    let mut buf = 0usize;
    'outer: loop {
        let base = offset
            + (0..p)
                .map(|d| (read[d].start + at[d] * read[d].step) * stride[d])
                .sum::<u64>();
        for k in 0..runs_per {
            let file_offset = base + (read[p].start + k * read[p].step) * inner;
            match ranges.last_mut() {
                Some(r) if r.end() == file_offset => r.len += run_len,
                _ => ranges.push(Range {
                    file_offset,
                    len: run_len,
                    buf_offset: buf,
                }),
            }
            buf += run_len;
        }
        for d in (0..p).rev() {
            at[d] += 1;
            if at[d] < read[d].count {
                continue 'outer;
            }
            at[d] = 0;
        }
        break;
    }
    Ok(BlockRead {
        read,
        ranges,
        bytes,
    })
}

/// How a tensor is split among ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    /// Along this dimension (a negative one counts from the end).
    Dim(i64),
    /// transformers' `"colwise"` (and `"colwise_rep"`, `"local_colwise"`): a Linear's weight
    /// `[out, in]` along dimension -2 (its output features; a 1-D weight along its only one),
    /// its bias (a name ending in `bias`) along -1.
    Colwise,
    /// transformers' `"rowwise"` (and `"rowwise_rep"`, `"local_rowwise"`): a weight along
    /// dimension -1 (its input features), its bias whole.
    Rowwise,
    /// `"replicate"`: whole on every rank.
    Replicate,
}

/// The words [`Split::parse`] takes, for its error.
const WORDS: &str = "\"colwise\", \"rowwise\", \"colwise_rep\", \"rowwise_rep\", \
                     \"local_colwise\", \"local_rowwise\", \"replicate\" or a dimension";

impl Split {
    /// A `tp_plan` word, or a dimension as text (`"0"`, `"-1"`).
    pub fn parse(word: &str) -> Result<Split> {
        Ok(match word {
            "colwise" | "colwise_rep" | "local_colwise" => Split::Colwise,
            "rowwise" | "rowwise_rep" | "local_rowwise" => Split::Rowwise,
            "replicate" => Split::Replicate,
            _ => match word.trim().parse::<i64>() {
                Ok(d) => Split::Dim(d),
                Err(_) => {
                    return Err(FormatError::InvalidShard(format!(
                        "unknown split {word:?}: expected {WORDS}"
                    )))
                }
            },
        })
    }

    /// The dimension of `info` this split divides, or `None` (read whole).
    fn dim(self, info: &TensorInfo) -> Result<Option<usize>> {
        let bias = info.name.rsplit('.').next().is_some_and(|p| p == "bias");
        let signed = match self {
            Split::Replicate => return Ok(None),
            Split::Rowwise if bias => return Ok(None),
            Split::Rowwise => -1,
            Split::Colwise if bias || info.shape.len() == 1 => -1,
            Split::Colwise => -2,
            Split::Dim(d) => d,
        };
        let n = info.shape.len() as i64;
        let d = if signed < 0 { signed + n } else { signed };
        if !(0..n).contains(&d) {
            return Err(FormatError::InvalidShard(format!(
                "tensor {:?} of shape {:?}: dimension {signed} ({self:?}) is out of range",
                info.name, info.shape
            )));
        }
        Ok(Some(d as usize))
    }
}

/// This rank's part of a dimension of `n` split among `world` ranks as `torch.chunk` splits it
/// (transformers' `get_tensor_shard`): parts of `ceil(n / world)`, the last ones shorter or
/// empty.
pub fn chunk(n: u64, rank: u64, world: u64) -> Span {
    let size = n.div_ceil(world);
    let start = rank.saturating_mul(size).min(n);
    Span {
        start,
        count: size.min(n - start),
        step: 1,
    }
}

/// Which part of each tensor this rank reads: rules of (name pattern, [`Split`]); a tensor no
/// rule matches is read whole.
#[derive(Clone, Debug)]
pub struct Sharding {
    rank: u64,
    world_size: u64,
    rules: Vec<(String, Split)>,
}

/// Whether `pattern`, where `*` stands for any run of characters, matches all of `text`.
fn glob(pattern: &str, text: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    let (mut i, mut j) = (0, 0);
    let mut back: Option<(usize, usize)> = None; // after the last `*`, and where it resumes
    while j < t.len() {
        if i < p.len() && p[i] == b'*' {
            back = Some((i + 1, j));
            i += 1;
        } else if i < p.len() && p[i] == t[j] {
            i += 1;
            j += 1;
        } else if let Some((bi, bj)) = back {
            i = bi;
            j = bj + 1;
            back = Some((bi, bj + 1));
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == b'*')
}

/// Whether `pattern` matches `name` in whole or a part of it after a dot (`layers.*.q_proj`
/// matches `model.layers.0.q_proj`, as a base model's `tp_plan` names its modules).
fn matches_tail(pattern: &str, name: &str) -> bool {
    glob(pattern, name)
        || name
            .match_indices('.')
            .any(|(i, _)| glob(pattern, &name[i + 1..]))
}

impl Sharding {
    /// This rank of `world_size`, and the rules. `world_size` 0, `rank` not below it, or an
    /// empty pattern are [`FormatError::InvalidShard`].
    pub fn new(rank: u64, world_size: u64, rules: Vec<(String, Split)>) -> Result<Sharding> {
        if world_size == 0 || rank >= world_size {
            return Err(FormatError::InvalidShard(format!(
                "rank {rank} is not one of world_size {world_size} ranks (0 to world_size - 1)"
            )));
        }
        if rules.iter().any(|(p, _)| p.is_empty()) {
            return Err(FormatError::InvalidShard(
                "an empty tensor name pattern".into(),
            ));
        }
        Ok(Sharding {
            rank,
            world_size,
            rules,
        })
    }

    /// The rule for a tensor called `name`: among the patterns that match the name (`*` any
    /// run of characters; in whole, or after a dot), else those that match its module (the
    /// name without its last dotted part, as transformers matches a `tp_plan`), the longest;
    /// the first given of equal length.
    pub fn rule_for(&self, name: &str) -> Option<(&str, Split)> {
        let module = name.rsplit_once('.').map(|(m, _)| m);
        let best = |of: &dyn Fn(&str) -> bool| {
            let mut found: Option<&(String, Split)> = None;
            for r in &self.rules {
                if of(&r.0) && found.is_none_or(|f| r.0.len() > f.0.len()) {
                    found = Some(r);
                }
            }
            found.map(|(p, s)| (p.as_str(), *s))
        };
        best(&|p| matches_tail(p, name))
            .or_else(|| module.and_then(|m| best(&|p| matches_tail(p, m))))
    }

    /// The block of `info` this rank reads, or `None` for the whole tensor.
    pub fn part(&self, info: &TensorInfo) -> Result<Option<Vec<Span>>> {
        let Some((_, split)) = self.rule_for(&info.name) else {
            return Ok(None);
        };
        let Some(d) = split.dim(info)? else {
            return Ok(None);
        };
        let mut spans: Vec<Span> = info.shape.iter().map(|&n| Span::whole(n)).collect();
        spans[d] = chunk(info.shape[d], self.rank, self.world_size);
        if info.dtype.bits() % 8 != 0 && spans[d] != Span::whole(info.shape[d]) {
            return Err(FormatError::InvalidShard(format!(
                "tensor {:?} is {}, which packs elements below a byte: it cannot be split",
                info.name,
                Dtype::name(info.dtype)
            )));
        }
        Ok(Some(spans))
    }
}

impl Checkpoint {
    /// The block of each tensor of `selection` this rank reads by `sharding`, in the order of
    /// the selection (`None`: whole); a rule that matches no tensor is no error (a model's
    /// plan names modules a checkpoint may lack).
    pub fn shard_parts(
        &self,
        selection: &[usize],
        sharding: &Sharding,
    ) -> Result<Vec<Option<Vec<Span>>>> {
        selection
            .iter()
            .map(|&i| {
                let e = self.entries.get(i).ok_or_else(|| {
                    FormatError::InvalidOptions(format!(
                        "tensor index {i} out of range ({} tensors)",
                        self.entries.len()
                    ))
                })?;
                sharding.part(self.info(e))
            })
            .collect()
    }
}
