//! The settings against KvikIO's names, defaults and spellings; the table, bounds and parsers
//! against every setting and any input (proptest).

use super::table::{
    MAX_BOUNCE_BUFFER_SIZE, MAX_DEFAULT_THREADS, MAX_HTTP_ATTEMPTS, MAX_HTTP_TIMEOUT, MAX_SIZE,
};
use super::*;
use proptest::prelude::*;
use std::collections::HashMap;
use std::ffi::OsString;

use crate::error::Error;

fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| map.get(k).cloned()
}

#[test]
fn remote_io_backend_accepts_kvikio_names_and_values() {
    let s = State::from_env(env(&[])).unwrap();
    assert_eq!(
        s.settings.remote_io_backend,
        RemoteIoBackend::EasyThreadpool
    );
    let s = State::from_env(env(&[("KVIKIO_REMOTE_IO_BACKEND", "  Multi_Poll ")])).unwrap();
    assert_eq!(s.settings.remote_io_backend, RemoteIoBackend::MultiPoll);
    assert_eq!(
        s.origin(Name::RemoteIoBackend),
        &Origin::Env("KVIKIO_REMOTE_IO_BACKEND".into())
    );
    assert_eq!(
        validate(Name::RemoteIoBackend, &Input::Int(0)),
        Ok(Value::RemoteIoBackend(RemoteIoBackend::EasyThreadpool))
    );
    for bad in ["multi", "easy", "multipoll", ""] {
        let err = State::from_env(env(&[("KVIKIO_REMOTE_IO_BACKEND", bad)])).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("KVIKIO_REMOTE_IO_BACKEND"), "{text}");
        assert!(
            text.contains("EASY_THREADPOOL") && text.contains("MULTI_POLL"),
            "{text}"
        );
    }
    let err = validate(Name::RemoteIoBackend, &Input::Int(2)).unwrap_err();
    assert!(err.contains("MULTI_POLL=1"), "{err}");
}

#[test]
fn defaults_match_kvikio() {
    let s = State::from_env(env(&[])).unwrap();
    assert_eq!(s.settings.compat_mode, CompatMode::Auto);
    assert_eq!(s.settings.gds_threshold, 16384);
    assert_eq!(s.settings.task_size, 4 << 20);
    assert_eq!(s.settings.bounce_buffer_size, 16 << 20);
    assert!(s.settings.num_threads >= 1 && s.settings.num_threads <= MAX_DEFAULT_THREADS);
    assert!(matches!(s.origin(Name::NumThreads), Origin::Machine(_)));
    assert_eq!(s.origin(Name::TaskSize), &Origin::Default);
}

#[test]
fn kvikio_env_names_are_honoured_and_gpufile_wins() {
    let s = State::from_env(env(&[
        ("KVIKIO_COMPAT_MODE", "off"),
        ("KVIKIO_TASK_SIZE", "1048576"),
        ("GPUFILE_TASK_SIZE", "2MiB"),
        ("KVIKIO_NUM_THREADS", "3"),
        ("KVIKIO_GDS_THRESHOLD", "0"),
    ]))
    .unwrap();
    assert_eq!(s.settings.compat_mode, CompatMode::Off);
    assert_eq!(s.settings.task_size, 2 << 20);
    assert_eq!(
        s.origin(Name::TaskSize),
        &Origin::Env("GPUFILE_TASK_SIZE".into())
    );
    assert_eq!(s.settings.num_threads, 3);
    assert_eq!(
        s.origin(Name::NumThreads),
        &Origin::Env("KVIKIO_NUM_THREADS".into())
    );
    assert_eq!(s.settings.gds_threshold, 0);
}

#[test]
fn nthreads_wins_over_its_alias() {
    let s = State::from_env(env(&[
        ("KVIKIO_NTHREADS", "5"),
        ("KVIKIO_NUM_THREADS", "3"),
    ]))
    .unwrap();
    assert_eq!(s.settings.num_threads, 5);
}

#[test]
fn bad_env_value_names_the_variable() {
    for (var, value) in [
        ("KVIKIO_COMPAT_MODE", "maybe"),
        ("KVIKIO_TASK_SIZE", "0"),
        ("KVIKIO_TASK_SIZE", "lots"),
        ("KVIKIO_NTHREADS", "0"),
        ("GPUFILE_AUTO_DIRECT_IO_READ", "perhaps"),
    ] {
        let err = State::from_env(env(&[(var, value)])).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, Error::InvalidEnv { .. }), "{text}");
        assert!(text.contains(var) && text.contains(value), "{text}");
    }
}

/// A value that is not UTF-8 is an error naming its variable, even where a lower-priority
/// variable holds a good value (never skipped, so that one cannot win without a word).
#[test]
fn non_utf8_env_value_is_an_error_naming_the_variable() {
    use std::os::unix::ffi::OsStringExt;
    let bad = || OsString::from_vec(b"4\xffMiB".to_vec());
    let lookup = |var: &str| match var {
        "GPUFILE_TASK_SIZE" => Some(bad()),
        "KVIKIO_TASK_SIZE" => Some(OsString::from("1MiB")),
        _ => None,
    };
    let err = State::from_env_os(lookup).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, Error::InvalidEnv { .. }), "{text}");
    assert!(text.contains("GPUFILE_TASK_SIZE"), "{text}");
    assert!(
        text.contains("4\\xffMiB") && text.contains("UTF-8"),
        "{text}"
    );
    // The same bytes in a KVIKIO_ variable, alone.
    let err = State::from_env_os(|v| (v == "KVIKIO_NTHREADS").then(bad)).unwrap_err();
    assert!(err.to_string().contains("KVIKIO_NTHREADS"), "{err}");
    // Good UTF-8 still parses through the OS-string lookup.
    let s = State::from_env_os(|v| (v == "KVIKIO_TASK_SIZE").then(|| "2MiB".into())).unwrap();
    assert_eq!(s.settings.task_size, 2 << 20);
}

#[test]
fn compat_mode_spellings() {
    for (text, mode) in [
        ("ON", CompatMode::On),
        ("true", CompatMode::On),
        ("Yes", CompatMode::On),
        ("1", CompatMode::On),
        ("off", CompatMode::Off),
        ("FALSE", CompatMode::Off),
        ("no", CompatMode::Off),
        ("0", CompatMode::Off),
        ("Auto", CompatMode::Auto),
    ] {
        assert_eq!(text.parse::<CompatMode>(), Ok(mode), "{text}");
    }
    assert!("maybe".parse::<CompatMode>().is_err());
    assert!(validate(Name::CompatMode, &Input::Int(7)).is_err());
    assert_eq!(
        validate(Name::CompatMode, &Input::Int(2)),
        Ok(Value::CompatMode(CompatMode::Auto))
    );
}

#[test]
fn set_is_all_or_nothing_and_restore_puts_back() {
    let mut s = State::from_env(env(&[])).unwrap();
    let saved = s.snapshot(&[Name::TaskSize, Name::NumThreads]);
    let err = s
        .set(&[
            (Name::TaskSize, Input::Int(1024)),
            (Name::NumThreads, Input::Int(0)),
        ])
        .unwrap_err();
    assert!(err.to_string().contains("num_threads"), "{err}");
    assert_eq!(
        s.settings.task_size,
        4 << 20,
        "nothing applied when one value is bad"
    );
    s.set(&[
        (Name::TaskSize, Input::Int(1024)),
        (Name::NumThreads, Input::Int(8)),
    ])
    .unwrap();
    assert_eq!((s.settings.task_size, s.settings.num_threads), (1024, 8));
    assert_eq!(s.origin(Name::TaskSize), &Origin::Set);
    s.restore(&saved);
    assert_eq!(s.settings.task_size, 4 << 20);
    assert_eq!(s.origin(Name::TaskSize), &Origin::Default);
}

/// The table gives each setting the name, variables, kind, range, default and origin it
/// had when each was spelled out by hand (what `gpufile config` and `defaults.get` show).
#[test]
fn table_gives_every_setting_its_names_kind_range_and_default() {
    let s = State::from_env(env(&[])).unwrap();
    let rows: Vec<String> = Name::ALL
        .iter()
        .map(|n| {
            let origin = match s.origin(*n) {
                Origin::Machine(_) => "machine".to_owned(),
                o => o.to_string(),
            };
            let value = match n {
                Name::NumThreads => "-".to_owned(),
                _ => s.settings.get(*n).to_string(),
            };
            let bounds = n.bounds().map_or("-".to_owned(), |b| b.to_string());
            let vars = n.env_vars().join(" ");
            format!("{n} [{vars}] {:?} {bounds} = {value} ({origin})", n.kind())
        })
        .collect();
    let expected = [
        "compat_mode [GPUFILE_COMPAT_MODE KVIKIO_COMPAT_MODE] CompatMode - = AUTO (default)",
        "num_threads [GPUFILE_NTHREADS GPUFILE_NUM_THREADS KVIKIO_NTHREADS KVIKIO_NUM_THREADS] \
         Count 1 to 1024 (threads) = - (machine)",
        "task_size [GPUFILE_TASK_SIZE KVIKIO_TASK_SIZE] PositiveSize 1 to 9223372036854775807 \
         (bytes; the largest file offset) = 4194304 (default)",
        "gds_threshold [GPUFILE_GDS_THRESHOLD KVIKIO_GDS_THRESHOLD] Size 0 to \
         9223372036854775807 (bytes; the largest file offset) = 16384 (default)",
        "bounce_buffer_size [GPUFILE_BOUNCE_BUFFER_SIZE KVIKIO_BOUNCE_BUFFER_SIZE] \
         PositiveSize 1 to 1073741824 (bytes; 1 GiB, as each run pins two) = 16777216 \
         (default)",
        "auto_direct_io_read [GPUFILE_AUTO_DIRECT_IO_READ KVIKIO_AUTO_DIRECT_IO_READ] Bool - \
         = false (default)",
        "auto_direct_io_write [GPUFILE_AUTO_DIRECT_IO_WRITE KVIKIO_AUTO_DIRECT_IO_WRITE] Bool \
         - = true (default)",
        "require_gds [GPUFILE_REQUIRE_GDS KVIKIO_REQUIRE_GDS] Bool - = false (default)",
        "direct_io_uncached [GPUFILE_DIRECT_IO_UNCACHED KVIKIO_DIRECT_IO_UNCACHED] Bool - = \
         false (default)",
        "io_uring [GPUFILE_IO_URING KVIKIO_IO_URING] Bool - = true (default)",
        "dma_cache_size [GPUFILE_DMA_CACHE_SIZE KVIKIO_DMA_CACHE_SIZE] Size 0 to \
         9223372036854775807 (bytes; the largest file offset) = 0 (default)",
        "http_max_attempts [GPUFILE_HTTP_MAX_ATTEMPTS KVIKIO_HTTP_MAX_ATTEMPTS] Count 1 to \
         1000 (attempts) = 3 (default)",
        "http_status_codes [GPUFILE_HTTP_STATUS_CODES KVIKIO_HTTP_STATUS_CODES] IntList - = \
         429,500,502,503,504 (default)",
        "http_timeout [GPUFILE_HTTP_TIMEOUT KVIKIO_HTTP_TIMEOUT] Seconds 1 to 86400 (seconds; \
         1 day) = 60 (default)",
        "remote_io_backend [GPUFILE_REMOTE_IO_BACKEND KVIKIO_REMOTE_IO_BACKEND] \
         RemoteIoBackend - = EASY_THREADPOOL (default)",
        "remote_io_num_reactors [GPUFILE_REMOTE_IO_NUM_REACTORS KVIKIO_REMOTE_IO_NUM_REACTORS] \
         Count 1 to 4294967295 (reactor threads; KvikIO's unsigned int) = 1 (default)",
        "remote_io_reactor_dispatch [GPUFILE_REMOTE_IO_REACTOR_DISPATCH \
         KVIKIO_REMOTE_IO_REACTOR_DISPATCH] RemoteReactorDispatch - = PER_CHUNK (default)",
        "remote_io_max_concurrent_requests [GPUFILE_REMOTE_IO_MAX_CONCURRENT_REQUESTS \
         KVIKIO_REMOTE_IO_MAX_CONCURRENT_REQUESTS] Count 0 to 9223372036854775807 (requests; \
         0: no limit) = 256 (default)",
        "remote_part_size [GPUFILE_REMOTE_PART_SIZE KVIKIO_REMOTE_PART_SIZE] PositiveSize \
         5242880 to 5368709120 (bytes; S3's smallest and largest part) = 16777216 (default)",
        "async_save_pinned_limit [GPUFILE_ASYNC_SAVE_PINNED_LIMIT \
         KVIKIO_ASYNC_SAVE_PINNED_LIMIT] Size 0 to 9223372036854775807 (bytes; the largest \
         file offset) = 34359738368 (default)",
        "async_save_device_limit [GPUFILE_ASYNC_SAVE_DEVICE_LIMIT \
         KVIKIO_ASYNC_SAVE_DEVICE_LIMIT] Size 0 to 9223372036854775807 (bytes; the largest \
         file offset) = 8589934592 (default)",
    ];
    assert_eq!(rows, expected);
    // Integer kinds have a range, the others none; every name parses back to itself.
    for n in Name::ALL {
        let integer = matches!(
            n.kind(),
            Kind::Count | Kind::PositiveSize | Kind::Size | Kind::Seconds
        );
        assert_eq!(n.bounds().is_some(), integer, "{n}");
        assert_eq!(n.as_str().parse::<Name>().unwrap(), n);
        assert_eq!(n.index(), Name::ALL.iter().position(|m| *m == n).unwrap());
        // get and put agree for every field.
        let mut t = s.clone();
        t.settings.put(n, s.settings.get(n));
        assert_eq!(t, s, "{n}");
    }
}

#[test]
fn unknown_name_lists_known_ones() {
    let err = "colour".parse::<Name>().unwrap_err();
    assert!(err.to_string().contains("task_size"));
}

#[test]
fn sizes_and_lists() {
    assert_eq!(parse_size("4MiB"), Ok(4 << 20));
    assert_eq!(parse_size("16k"), Ok(16 << 10));
    assert_eq!(parse_size(" 1G "), Ok(1 << 30));
    assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
    assert_eq!(parse_size("1GB"), Ok(1_000_000_000));
    assert_eq!(parse_size("1.5 GB"), Ok(1_500_000_000));
    assert_eq!(parse_size("4kB"), Ok(4000));
    assert_eq!(parse_size("4KB"), Ok(4000));
    assert_eq!(parse_size("4KiB"), Ok(4096));
    assert_eq!(parse_size("4 mib"), Ok(4 << 20));
    assert_eq!(parse_size("0.5k"), Ok(512));
    assert_eq!(parse_size(".5k"), Ok(512));
    assert_eq!(parse_size("7b"), Ok(7));
    assert_eq!(parse_size("0"), Ok(0));
    assert_eq!(parse_size("16EiB").unwrap_err(), "unknown size unit \"eib\": use B, KiB/MiB/GiB/TiB (binary), kB/MB/GB/TB (decimal) or k/M/G/T (binary)");
    assert!(parse_size("0.1GiB")
        .unwrap_err()
        .contains("not a whole number of bytes"));
    assert!(parse_size("1.5").is_err());
    assert!(parse_size("1..5k").is_err());
    assert!(parse_size("1.2.3k").is_err());
    assert!(parse_size(".").is_err());
    assert!(parse_size("").is_err());
    assert!(parse_size("k").is_err());
    assert!(parse_size("1e9").is_err());
    assert!(parse_size("16PiB").is_ok());
    assert!(parse_size("16384PiB").is_err());
    assert!(parse_size("-1").is_err());
    assert!(parse_size("4 parsecs").is_err());
    assert!(parse_size("99999999999999999999").is_err());
    assert_eq!(
        validate(Name::HttpStatusCodes, &Input::Text("429, 503")),
        Ok(Value::IntList(vec![429, 503]))
    );
    assert!(validate(Name::HttpStatusCodes, &Input::IntList(vec![42])).is_err());
    assert!(validate(Name::TaskSize, &Input::Int(-1)).is_err());
    assert!(validate(Name::TaskSize, &Input::Bool(true)).is_err());
    assert!(validate(Name::NumThreads, &Input::Int(MAX_THREADS as i128 + 1)).is_err());
}

/// Every integer setting refuses a value past its bound at `set` and in the environment,
/// saying the name, the value and the range; a value too large never reads as negative.
#[test]
fn every_integer_setting_is_bounded_at_set_and_in_env() {
    let huge = [
        (Name::HttpTimeout, (1i128 << 63) - 1),
        (Name::HttpTimeout, MAX_HTTP_TIMEOUT as i128 + 1),
        (Name::BounceBufferSize, (1i128 << 64) - 1),
        (Name::BounceBufferSize, MAX_BOUNCE_BUFFER_SIZE as i128 + 1),
        (Name::TaskSize, 1i128 << 70),
        (Name::TaskSize, MAX_SIZE as i128 + 1),
        (Name::GdsThreshold, 1i128 << 64),
        (Name::DmaCacheSize, 1i128 << 64),
        (Name::NumThreads, MAX_THREADS as i128 + 1),
        (Name::HttpMaxAttempts, MAX_HTTP_ATTEMPTS as i128 + 1),
        (Name::HttpMaxAttempts, 1i128 << 64),
    ];
    for (name, n) in huge {
        let max = name.bounds().unwrap().max;
        let mut state = State::from_env(env(&[])).unwrap();
        let before = state.clone();
        let e = state.set(&[(name, Input::Int(n))]).unwrap_err().to_string();
        assert_eq!(state, before, "{name} {n}");
        for part in [name.as_str(), &n.to_string(), "too large", &max.to_string()] {
            assert!(e.contains(part), "{name} = {n}: {e:?} lacks {part:?}");
        }
        assert!(!e.contains("negative"), "{e}");
        // The environment: the same words, naming the variable.
        let var = name.env_vars()[0].clone();
        let e = State::from_env(env(&[(&var, &n.to_string())]))
            .unwrap_err()
            .to_string();
        for part in [var.as_str(), &n.to_string(), "too large", &max.to_string()] {
            assert!(e.contains(part), "{var}={n}: {e:?} lacks {part:?}");
        }
        // The largest value itself is accepted.
        state.set(&[(name, Input::Int(max as i128))]).unwrap();
        assert_eq!(state.settings.get(name), Value::Int(max));
    }
    let e = State::from_env(env(&[("KVIKIO_TASK_SIZE", "16EiB")])).unwrap_err();
    assert!(e.to_string().contains("KVIKIO_TASK_SIZE"), "{e}");
    let e = State::from_env(env(&[("KVIKIO_BOUNCE_BUFFER_SIZE", "2GiB")])).unwrap_err();
    assert!(e.to_string().contains("too large"), "{e}");
    let e =
        State::from_env(env(&[("KVIKIO_HTTP_TIMEOUT", "99999999999999999999999")])).unwrap_err();
    assert!(
        e.to_string().contains("too large: expected 1 to 86400"),
        "{e}"
    );
    let e = validate(Name::TaskSize, &Input::Int(-1)).unwrap_err();
    assert!(e.contains("must not be negative"), "{e}");
}

proptest! {
    #[test]
    fn any_positive_size_round_trips_through_env(n in 1u64..(1 << 40)) {
        let text = n.to_string();
        let s = State::from_env(env(&[("KVIKIO_TASK_SIZE", &text)])).unwrap();
        prop_assert_eq!(s.settings.task_size as u64, n);
    }

    #[test]
    fn env_parsing_never_panics(value in "\\PC{0,12}", which in 0usize..Name::ALL.len()) {
        let name = Name::ALL[which];
        let var = name.env_vars()[0].clone();
        match State::from_env(env(&[(&var, &value)])) {
            Ok(s) => prop_assert_eq!(s.origin(name), &Origin::Env(var)),
            Err(e) => prop_assert!(e.to_string().contains(&var)),
        }
    }

    #[test]
    fn size_suffixes_scale(n in 0u64..1024, unit in 0usize..4) {
        let (suffix, shift) = [("", 0), ("KiB", 10), ("MiB", 20), ("GiB", 30)][unit];
        prop_assert_eq!(parse_size(&format!("{n}{suffix}")), Ok(n << shift));
    }

    #[test]
    fn decimal_suffixes_and_fractions_are_exact(n in 0u64..1_000_000, unit in 0usize..4) {
        let (suffix, scale) = [("kB", 1_000u64), ("MB", 1_000_000), ("GB", 1_000_000_000), ("k", 1024)][unit];
        prop_assert_eq!(parse_size(&format!("{n}{suffix}")), Ok(n * scale));
        // n/1000 of the unit, written as a decimal fraction.
        let text = format!("{}.{:03}{suffix}", n / 1000, n % 1000);
        let exact = (n as u128 * scale as u128) % 1000 == 0;
        prop_assert_eq!(parse_size(&text).is_ok(), exact);
        if exact {
            prop_assert_eq!(parse_size(&text), Ok((n as u128 * scale as u128 / 1000) as u64));
        }
    }

    #[test]
    fn parse_size_never_panics(text in "\\PC{0,24}") {
        let _ = parse_size(&text);
    }
}
