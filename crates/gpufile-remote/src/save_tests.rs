//! Checkpoints saved by URL to a PUT server on 127.0.0.1 that this file runs.

use super::*;
use gpufile::safetensors::save_checkpoint as save_local;
use gpufile::safetensors::Dtype;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What the server was sent: each PUT's body by path, and the paths in the order made.
#[derive(Default)]
struct Store {
    bodies: BTreeMap<String, Vec<u8>>,
    order: Vec<String>,
    requests: usize,
    /// "sent PATH" as a PUT's body has arrived, "made PATH" as it is answered.
    events: Vec<String>,
}

/// How the server answers a PUT of a path.
#[derive(Clone, Copy)]
enum Answer {
    Store,
    Refuse,
    Stall,
    /// Stored, answered after a second.
    Slow,
}

/// A server on 127.0.0.1 that stores PUT bodies (HTTP/1.1, keep-alive), or answers 403, or
/// never answers, as `answer(path)` says: its URL and what it stored.
fn put_server(answer: fn(&str) -> Answer) -> (String, Arc<Mutex<Store>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let store = Arc::new(Mutex::new(Store::default()));
    let shared = Arc::clone(&store);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { return };
            let store = Arc::clone(&shared);
            std::thread::spawn(move || serve(conn, &store, answer));
        }
    });
    (url, store)
}

fn serve(conn: TcpStream, store: &Mutex<Store>, answer: fn(&str) -> Answer) {
    let mut out = conn.try_clone().unwrap();
    let mut reader = BufReader::new(conn);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split(' ').nth(1).unwrap_or("").to_owned();
        let mut len = 0usize;
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            if h == "\r\n" {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    len = v.trim().parse().unwrap();
                }
            }
        }
        let mut body = vec![0u8; len];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        {
            let mut s = store.lock().unwrap();
            s.requests += 1;
            s.events.push(format!("sent {path}"));
        }
        let answer = answer(&path);
        if let Answer::Slow = answer {
            std::thread::sleep(Duration::from_secs(1));
        }
        let status = match answer {
            Answer::Stall => {
                std::thread::sleep(Duration::from_secs(120));
                return;
            }
            Answer::Refuse => "403 Forbidden",
            Answer::Store | Answer::Slow => {
                let mut s = store.lock().unwrap();
                s.bodies.insert(path.clone(), body);
                s.events.push(format!("made {path}"));
                s.order.push(path);
                "201 Created"
            }
        };
        let reply = format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n");
        if out.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

/// Five tensors of 1,000 to 5,000 bytes.
fn data() -> Vec<Vec<u8>> {
    (1..=5u8)
        .map(|k| {
            (0..1000 * k as usize)
                .map(|i| (i % 251) as u8 ^ k)
                .collect()
        })
        .collect()
}

fn rows(data: &[Vec<u8>]) -> Vec<TensorRow> {
    data.iter()
        .enumerate()
        .map(|(i, d)| TensorRow::host(format!("layer.{i}"), Dtype::U8, vec![d.len() as u64], d))
        .collect()
}

fn save(
    prefix: &str,
    rows: &[TensorRow],
    max_shard_size: u64,
    stop: Option<&(dyn Fn() -> bool + Sync)>,
) -> Result<CheckpointIndex, SaveCheckpointError> {
    let meta = BTreeMap::from([("step".to_owned(), "7".to_owned())]);
    let options = SaveOptions {
        max_shard_size,
        metadata: Some(&meta),
        durable: false,
        sizes: None,
        stop,
    };
    let engine = Engine::global().unwrap();
    let settings = engine.shared_settings();
    // SAFETY: the rows borrow buffers that outlive the call.
    unsafe { save_checkpoint(prefix, rows, &options, &engine, &settings) }
}

#[test]
fn every_shard_is_made_then_the_index_each_as_the_local_save_writes_it() {
    let (url, store) = put_server(|_| Answer::Store);
    let data = data();
    let rows = rows(&data);
    let index = save(&format!("{url}/run/step-7//"), &rows, 6000, None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let meta = BTreeMap::from([("step".to_owned(), "7".to_owned())]);
    let options = SaveOptions {
        max_shard_size: 6000,
        metadata: Some(&meta),
        durable: false,
        sizes: None,
        stop: None,
    };
    let engine = Engine::global().unwrap();
    // SAFETY: the rows borrow `data`, alive until the call returns.
    let local = unsafe { save_local(dir.path(), &rows, &options, &engine, &engine.settings()) };
    assert_eq!(local.unwrap(), index);
    let s = store.lock().unwrap();
    // Three shards (1000 + 2000 + 3000 bytes, 4000, 5000), then the index.
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| !n.starts_with('.'))
        .collect();
    names.sort();
    assert_eq!(names.len(), 4, "{names:?}");
    assert_eq!(s.order.len(), names.len(), "{:?}", s.order);
    assert_eq!(
        s.order.last().map(String::as_str),
        Some("/run/step-7/model.safetensors.index.json")
    );
    for name in &names {
        let local = std::fs::read(dir.path().join(name)).unwrap();
        let remote = &s.bodies[&format!("/run/step-7/{name}")];
        assert!(local == *remote, "{name} differs from the local save's");
    }
}

#[test]
fn one_shard_is_model_safetensors_with_the_metadata_and_no_index() {
    let (url, store) = put_server(|_| Answer::Store);
    let data = data();
    let rows = rows(&data);
    let index = save(&format!("{url}/one"), &rows, 1 << 20, None).unwrap();
    let s = store.lock().unwrap();
    assert_eq!(s.order, ["/one/model.safetensors"]);
    assert_eq!(index.weight_map.len(), 5);
    let body = &s.bodies["/one/model.safetensors"];
    let h = gpufile::safetensors::Header::from_bytes(Path::new("x"), body).unwrap();
    let meta = h.metadata.unwrap();
    assert_eq!(
        (meta["format"].as_str(), meta["step"].as_str()),
        ("pt", "7")
    );
}

#[test]
fn a_refused_shard_fails_the_save_and_no_index_is_written() {
    let (url, store) = put_server(|p| match p.ends_with("model-00002-of-00003.safetensors") {
        true => Answer::Refuse,
        false => Answer::Store,
    });
    let data = data();
    let rows = rows(&data);
    let e = save(&format!("{url}/run"), &rows, 6000, None).unwrap_err();
    assert!(matches!(e, SaveCheckpointError::Io(_)), "{e:?}");
    assert!(e.to_string().contains("403"), "{e}");
    let s = store.lock().unwrap();
    assert!(
        !s.order.iter().any(|p| p.ends_with(INDEX_NAME)),
        "{:?}",
        s.order
    );
}

#[test]
fn a_signed_url_is_refused_as_a_prefix_before_any_request() {
    let (url, store) = put_server(|_| Answer::Store);
    let data = data();
    let rows = rows(&data);
    let prefix = format!("{url}/run/?X-Amz-Signature=topsecret&X-Amz-Credential=AKID");
    let e = save(&prefix, &rows, 6000, None).unwrap_err();
    let text = e.to_string();
    assert!(
        matches!(e, SaveCheckpointError::Io(Error::InvalidArgument(_))),
        "{e:?}"
    );
    assert!(
        text.contains(
            "a checkpoint is saved under a prefix of several objects, which a signed URL"
        ),
        "{text}"
    );
    assert!(!text.contains("topsecret"), "{text}");
    assert_eq!(store.lock().unwrap().requests, 0);
}

#[test]
fn a_bad_url_is_an_open_error_and_a_bad_tensor_a_format_error() {
    let data = data();
    let mut rows = rows(&data);
    let e = save("ftp://127.0.0.1/x", &rows, 6000, None).unwrap_err();
    assert!(matches!(e, SaveCheckpointError::Open(_)), "{e:?}");
    rows[1].shape = vec![3];
    let e = save("http://127.0.0.1:9/x", &rows, 6000, None).unwrap_err();
    assert!(matches!(e, SaveCheckpointError::Format(_)), "{e:?}");
    assert!(e.to_string().contains("layer.1"), "{e}");
}

/// Every PUT gets no answer: the stop function ends the save soon after it says so (not after
/// `http_timeout`), cancelled, with no index.
#[test]
fn a_stop_ends_a_save_whose_puts_get_no_answer() {
    let (url, store) = put_server(|_| Answer::Stall);
    let data = data();
    let rows = rows(&data);
    let asked = Mutex::new(None::<Instant>);
    let stop = || {
        let mut first = asked.lock().unwrap();
        // Says so once the PUTs have had time to reach the server.
        first.get_or_insert_with(Instant::now).elapsed() > Duration::from_millis(300)
    };
    let started = Instant::now();
    let e = save(&format!("{url}/run"), &rows, 6000, Some(&stop)).unwrap_err();
    assert!(
        matches!(e, SaveCheckpointError::Io(Error::Cancelled)),
        "{e:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    let s = store.lock().unwrap();
    assert!(s.requests >= 1 && s.order.is_empty());
}

#[test]
fn objects_held_in_memory_until_made_go_a_wave_of_four_shards_at_a_time() {
    // An HTTP PUT writer holds its object until it is made: the fifth shard is not sent before
    // the first wave is made, however long the first shard takes.
    let (url, store) = put_server(|p| match p.ends_with("model-00001-of-00008.safetensors") {
        true => Answer::Slow,
        false => Answer::Store,
    });
    let data: Vec<Vec<u8>> = (0..8u8).map(|k| vec![k; 1000]).collect();
    let rows = rows(&data);
    save(&format!("{url}/waves"), &rows, 1000, None).unwrap();
    let s = store.lock().unwrap();
    let at = |event: &str| s.events.iter().position(|e| e == event).expect(event);
    let first_made = at("made /waves/model-00001-of-00008.safetensors");
    for k in 5..=8 {
        let sent = at(&format!("sent /waves/model-{k:05}-of-00008.safetensors"));
        assert!(
            sent > first_made,
            "shard {k} sent before the first wave was made: {:?}",
            s.events
        );
    }
    assert_eq!(s.order.len(), 9, "{:?}", s.order);
}
