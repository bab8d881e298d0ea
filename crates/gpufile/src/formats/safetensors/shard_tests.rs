//! Parts of tensors: a block's ranges hold exactly its elements in C order, shardings by
//! dimension and `tp_plan` words, and a load of parts reads only their bytes.

use super::*;
use crate::batch::OpBuffer;
use crate::request::Buffer;
use crate::{Engine, Settings};
use serde_json::json;

fn info(name: &str, dtype: Dtype, shape: &[u64]) -> TensorInfo {
    let len = shape.iter().product::<u64>() * dtype.bits() / 8;
    TensorInfo {
        name: name.into(),
        dtype,
        shape: shape.to_vec(),
        start: 0,
        end: len,
    }
}

/// The file offsets of the block's elements in C order, one element at a time.
fn reference(shape: &[u64], elem: u64, offset: u64, spans: &[Span]) -> Vec<u64> {
    let mut out = vec![offset];
    for (d, s) in spans.iter().enumerate() {
        let stride: u64 = shape[d + 1..].iter().product::<u64>() * elem;
        out = out
            .iter()
            .flat_map(|&base| (0..s.count).map(move |k| base + (s.start + k * s.step) * stride))
            .collect();
    }
    out
}

/// The elements' offsets the ranges of `read` hold (each range cut into elements).
fn offsets(read: &BlockRead, elem: u64) -> Vec<u64> {
    let mut out = Vec::new();
    let mut buf = 0;
    for r in &read.ranges {
        assert_eq!(r.buf_offset, buf, "ranges packed from 0");
        buf += r.len;
        out.extend((0..r.len as u64 / elem).map(|k| r.file_offset + k * elem));
    }
    assert_eq!(buf as u64, read.bytes);
    out
}

fn span(start: u64, count: u64, step: u64) -> Span {
    Span { start, count, step }
}

#[test]
fn a_block_reads_exactly_its_elements_in_c_order_and_merges_adjacent_runs() {
    let shape = [4u64, 5, 6];
    let t = info("t", Dtype::BF16, &shape);
    let cases: Vec<Vec<Span>> = vec![
        vec![span(0, 4, 1), span(0, 5, 1), span(0, 6, 1)], // whole: one range
        vec![span(1, 2, 1), span(0, 5, 1), span(0, 6, 1)], // rows: one range
        vec![span(0, 4, 1), span(2, 2, 1), span(0, 6, 1)], // a column block: one per row
        vec![span(0, 4, 1), span(0, 5, 1), span(3, 3, 1)], // last dimension
        vec![span(1, 1, 1), span(4, 1, 1), span(5, 1, 1)], // one element
        vec![span(0, 2, 3), span(1, 2, 2), span(0, 6, 1)], // steps outside the last dimension
        vec![span(0, 4, 1), span(0, 5, 1), span(1, 3, 2)], // a step in the last one: covered
        vec![span(0, 4, 1), span(0, 0, 1), span(0, 6, 1)], // empty
    ];
    for spans in cases {
        let got = block_read(&t, 1000, &spans).unwrap();
        let covered = spans[2].step > 1;
        let mut want_spans = spans.clone();
        if covered {
            want_spans[2] = span(spans[2].start, (spans[2].count - 1) * spans[2].step + 1, 1);
        }
        assert_eq!(got.read, want_spans);
        assert_eq!(
            offsets(&got, 2),
            reference(&shape, 2, 1000, &want_spans),
            "{spans:?}"
        );
        for w in got.ranges.windows(2) {
            assert_ne!(w[0].end(), w[1].file_offset, "adjacent runs are one range");
        }
    }
    let col = block_read(&t, 0, &[span(0, 4, 1), span(2, 2, 1), span(0, 6, 1)]).unwrap();
    assert_eq!(col.ranges.len(), 4);
    assert_eq!(col.bytes, 4 * 2 * 6 * 2);
    let whole = block_read(&info("s", Dtype::F64, &[]), 8, &[]).unwrap();
    assert_eq!((whole.ranges.len(), whole.bytes), (1, 8));
}

#[test]
fn a_block_past_the_shape_or_of_a_sub_byte_dtype_is_refused() {
    let t = info("w", Dtype::F32, &[4, 6]);
    for spans in [
        vec![span(0, 4, 1)],
        vec![span(0, 4, 1), span(5, 2, 1)],
        vec![span(0, 4, 1), span(0, 3, 3)],
        vec![span(0, 4, 0), span(0, 6, 1)],
    ] {
        let e = block_read(&t, 0, &spans).unwrap_err();
        assert!(matches!(e, FormatError::InvalidShard(_)), "{e}");
        assert!(e.to_string().contains("tensor \"w\""), "{e}");
    }
    let f4 = info("f", Dtype::F4, &[4, 6]);
    assert!(block_read(&f4, 0, &[span(0, 4, 1), span(0, 6, 1)]).is_ok());
    let e = block_read(&f4, 0, &[span(0, 2, 1), span(0, 6, 1)]).unwrap_err();
    assert!(e.to_string().contains("read whole only"), "{e}");
}

#[test]
fn chunks_split_as_torch_chunk_does() {
    let parts = |n, w| (0..w).map(|r| chunk(n, r, w)).collect::<Vec<_>>();
    assert_eq!(
        parts(8, 4),
        [span(0, 2, 1), span(2, 2, 1), span(4, 2, 1), span(6, 2, 1)]
    );
    // transformers' get_tensor_shard: ceil(16 / 3) = 6, the last rank 4.
    assert_eq!(parts(16, 3), [span(0, 6, 1), span(6, 6, 1), span(12, 4, 1)]);
    // More ranks than rows: the last ones empty.
    let p = parts(3, 4);
    assert_eq!(p.iter().map(|s| s.count).collect::<Vec<_>>(), [1, 1, 1, 0]);
    assert_eq!(parts(0, 2), [span(0, 0, 1), span(0, 0, 1)]);
}

fn rules(r: &[(&str, &str)]) -> Vec<(String, Split)> {
    r.iter()
        .map(|(p, w)| (p.to_string(), Split::parse(w).unwrap()))
        .collect()
}

#[test]
fn tp_plan_words_split_weights_and_biases_as_transformers_does() {
    let plan = rules(&[
        ("layers.*.q_proj", "colwise"),
        ("layers.*.o_proj", "rowwise"),
        ("model.embed", "0"),
        ("model.layers.1.q_proj.weight", "replicate"),
    ]);
    let s = Sharding::new(1, 2, plan).unwrap();
    let part = |name: &str, shape: &[u64]| s.part(&info(name, Dtype::F32, shape)).unwrap();
    let w = |a: Span, b: Span| Some(vec![a, b]);
    assert_eq!(
        part("model.layers.0.q_proj.weight", &[6, 4]),
        w(span(3, 3, 1), span(0, 4, 1))
    );
    assert_eq!(
        part("model.layers.0.q_proj.bias", &[6]),
        Some(vec![span(3, 3, 1)])
    );
    assert_eq!(
        part("model.layers.0.o_proj.weight", &[4, 6]),
        w(span(0, 4, 1), span(3, 3, 1))
    );
    assert_eq!(part("model.layers.0.o_proj.bias", &[4]), None);
    assert_eq!(
        part("model.embed.weight", &[5, 2]),
        w(span(3, 2, 1), span(0, 2, 1))
    );
    // The longer pattern, and one that names the tensor over one that names its module.
    assert_eq!(part("model.layers.1.q_proj.weight", &[6, 4]), None);
    assert_eq!(part("model.norm.weight", &[4]), None);
    assert_eq!(
        s.rule_for("model.layers.12.q_proj.weight").unwrap().0,
        "layers.*.q_proj"
    );
}

#[test]
fn bad_shardings_are_refused_with_what_is_wrong() {
    let msg = |e: FormatError| {
        assert_eq!(e.kind(), crate::ErrorKind::BadArgument);
        e.to_string()
    };
    assert!(msg(Split::parse("colwize").unwrap_err()).contains("unknown split \"colwize\""));
    assert!(msg(Sharding::new(2, 2, vec![]).unwrap_err()).contains("rank 2 is not one of"));
    assert!(msg(Sharding::new(0, 0, vec![]).unwrap_err()).contains("world_size 0"));
    let s = Sharding::new(0, 2, rules(&[("w", "2"), ("s", "colwise"), ("f", "0")])).unwrap();
    let e = s.part(&info("w", Dtype::F32, &[4, 4])).unwrap_err();
    assert!(msg(e).contains("dimension 2 (Dim(2)) is out of range"));
    let e = s.part(&info("s", Dtype::F32, &[])).unwrap_err();
    assert!(msg(e).contains("tensor \"s\" of shape []"));
    let e = s.part(&info("f", Dtype::F4, &[4, 4])).unwrap_err();
    assert!(msg(e).contains("cannot be split"));
}

#[test]
fn a_load_of_parts_reads_only_their_bytes_into_their_places() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.safetensors");
    // a: U8 [6, 10] (a column block is one range per row), b: U8 [4] read whole after it.
    let header = json!({
        "a": {"dtype": "U8", "shape": [6, 10], "data_offsets": [0, 60]},
        "b": {"dtype": "U8", "shape": [4], "data_offsets": [60, 64]},
    });
    let text = serde_json::to_vec(&header).unwrap();
    let data: Vec<u8> = (0..64u8).collect();
    let mut bytes = (text.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(&text);
    bytes.extend_from_slice(&data);
    std::fs::write(&path, bytes).unwrap();
    let ck = Checkpoint::open(&path).unwrap();
    let sharding = Sharding::new(1, 3, rules(&[("a", "1")])).unwrap();
    let sel = vec![0, 1];
    let parts = ck.shard_parts(&sel, &sharding).unwrap();
    let plan = ck.plan_parts(&sel, &parts, PlanOptions::default()).unwrap();
    assert_eq!(plan.shapes, [vec![6, 4], vec![4]]);
    assert_eq!(plan.gathers.len(), 1);
    assert_eq!(plan.bytes(), 6 * 4 + 4);
    let mut buf = vec![0u8; plan.total as usize];
    let engine = Engine::global().unwrap();
    let target = Target {
        selection: sel.clone(),
        buffer: Some(OpBuffer::new(Buffer::host(&mut buf))),
    };
    // SAFETY: `buf` outlives the wait below and nothing else touches it.
    let submitted = unsafe {
        submit_parts(
            &engine,
            &Settings::default(),
            &ck,
            &Files::Local,
            &[target],
            &[parts],
        )
    }
    .unwrap();
    assert_eq!(submitted.requests(), 2);
    assert_eq!(submitted.future.wait().unwrap(), 28);
    let a = plan.dests[0] as usize;
    let want: Vec<u8> = (0..6u8)
        .flat_map(|r| (4..8).map(move |c| r * 10 + c))
        .collect();
    assert_eq!(&buf[a..a + 24], &want[..]);
    let b = plan.dests[1] as usize;
    assert_eq!(&buf[b..b + 4], &[60, 61, 62, 63]);
}
