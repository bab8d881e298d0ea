//! KvikIO 26.10's reactor settings and logger variables: their variables, spellings and rules.

use super::unknown_env::unknown_env_vars;
use super::*;
use crate::error::Error;
use crate::Engine;

/// Environment variables and their values.
type Vars = &'static [(&'static str, &'static str)];

fn env(pairs: Vars) -> impl Fn(&str) -> Option<String> {
    move |k| {
        pairs
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| (*v).to_owned())
    }
}

#[test]
fn reactor_settings_take_kvikio_defaults_names_and_values() {
    let s = State::from_env(env(&[])).unwrap();
    assert_eq!(s.settings.remote_io_num_reactors, 1);
    assert_eq!(
        s.settings.remote_io_reactor_dispatch,
        RemoteReactorDispatch::PerChunk
    );
    assert_eq!(s.settings.remote_io_max_concurrent_requests, 256);
    let s = State::from_env(env(&[
        ("KVIKIO_REMOTE_IO_NUM_REACTORS", "4"),
        ("KVIKIO_REMOTE_IO_REACTOR_DISPATCH", " per_PREAD "),
        ("KVIKIO_REMOTE_IO_MAX_CONCURRENT_REQUESTS", "0"),
    ]))
    .unwrap();
    assert_eq!(s.settings.remote_io_num_reactors, 4);
    assert_eq!(
        s.settings.remote_io_reactor_dispatch,
        RemoteReactorDispatch::PerPread
    );
    assert_eq!(s.settings.remote_io_max_concurrent_requests, 0);
    assert_eq!(
        s.origin(Name::RemoteIoReactorDispatch),
        &Origin::Env("KVIKIO_REMOTE_IO_REACTOR_DISPATCH".into())
    );
    assert_eq!(
        validate(Name::RemoteIoReactorDispatch, &Input::Int(1)),
        Ok(Value::RemoteReactorDispatch(
            RemoteReactorDispatch::PerPread
        ))
    );
}

#[test]
fn bad_reactor_values_name_the_variable_and_what_is_accepted() {
    let cases: [(Vars, &str, &str); 4] = [
        (
            &[("KVIKIO_REMOTE_IO_NUM_REACTORS", "0")],
            "KVIKIO_REMOTE_IO_NUM_REACTORS",
            "positive",
        ),
        (
            &[("KVIKIO_REMOTE_IO_NUM_REACTORS", "-1")],
            "KVIKIO_REMOTE_IO_NUM_REACTORS",
            "negative",
        ),
        (
            &[("KVIKIO_REMOTE_IO_REACTOR_DISPATCH", "chunk")],
            "KVIKIO_REMOTE_IO_REACTOR_DISPATCH",
            "PER_CHUNK=0 or PER_PREAD=1",
        ),
        (
            &[("KVIKIO_REMOTE_IO_MAX_CONCURRENT_REQUESTS", "many")],
            "KVIKIO_REMOTE_IO_MAX_CONCURRENT_REQUESTS",
            "integer",
        ),
    ];
    for (vars, var, words) in cases {
        let text = State::from_env(env(vars)).unwrap_err().to_string();
        assert!(text.contains(var) && text.contains(words), "{text}");
    }
    let err = validate(Name::RemoteIoReactorDispatch, &Input::Int(2)).unwrap_err();
    assert!(err.contains("PER_PREAD=1"), "{err}");
}

#[test]
fn a_bad_log_level_stops_the_settings_as_any_bad_variable_does() {
    let e = State::from_env(env(&[("KVIKIO_LOG_LEVEL", "verbose")])).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidEnv { var, .. } if var == "KVIKIO_LOG_LEVEL"),
        "{e:?}"
    );
    assert!(e.to_string().contains("TRACE, DEBUG, INFO, WARN"), "{e}");
    assert!(State::from_env(env(&[("KVIKIO_LOG_LEVEL", "WARN")])).is_ok());
    let warned = unknown_env_vars(LOG_ENV_VARS.map(std::ffi::OsString::from));
    assert_eq!(warned, vec![]);
}

/// KvikIO's rule: the reactor settings are fixed once a remote read has run under MULTI_POLL
/// (a runtime error, not a bad value); a read under EASY_THREADPOOL fixes nothing. The latch is
/// the process's, so this is the one test that sets it.
#[test]
fn reactor_settings_are_fixed_after_a_remote_read_under_multi_poll() {
    let engine = Engine::new(State::from_env(env(&[])).unwrap());
    let set = |n: usize| engine.set(&[(Name::RemoteIoNumReactors, Input::Int(n as i128))]);
    note_remote_read(RemoteIoBackend::EasyThreadpool);
    assert!(!remote_io_started());
    set(2).unwrap();
    engine
        .set(&[(Name::RemoteIoBackend, Input::Text("MULTI_POLL"))])
        .unwrap();
    engine.note_remote_read();
    assert!(remote_io_started());
    for name in Name::FIXED_ONCE_REMOTE_IO_STARTS {
        let e = engine.set(&[(name, Input::Int(1))]).unwrap_err();
        assert!(matches!(e, Error::SettingFixed { .. }), "{e:?}");
        assert_eq!(e.kind(), crate::ErrorKind::Other);
        let text = e.to_string();
        assert!(text.starts_with(name.as_str()), "{text}");
        assert!(text
            .contains("cannot be changed after the MULTI_POLL reactor pool has already started"));
    }
    assert_eq!(engine.settings().remote_io_num_reactors, 2);
    // Every other setting stays settable.
    engine
        .set(&[(Name::RemoteIoBackend, Input::Int(0))])
        .unwrap();
}
