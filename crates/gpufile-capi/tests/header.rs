//! include/gpufile/gpufile.h is what cbindgen makes of this crate with its cbindgen.toml: this
//! test regenerates it and fails when the committed header differs.
//! `UPDATE_EXPECT=1 cargo test -p gpufile-capi --test header` rewrites it.

use std::path::Path;

#[test]
fn committed_header_is_what_cbindgen_generates() {
    let krate = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(krate.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut want = Vec::new();
    cbindgen::Builder::new()
        .with_config(config)
        // cbindgen follows the `mod` items of lib.rs into their files.
        .with_src(krate.join("src/lib.rs"))
        .generate()
        .expect("cbindgen parses the crate")
        .write(&mut want);
    let path = krate.join("../../include/gpufile/gpufile.h");
    let have = std::fs::read(&path).unwrap_or_default();
    if have != want {
        if std::env::var_os("UPDATE_EXPECT").is_some() {
            std::fs::write(&path, &want).expect("write the header");
            return;
        }
        panic!(
            "include/gpufile/gpufile.h is stale: run \
             `UPDATE_EXPECT=1 cargo test -p gpufile-capi --test header` and commit it"
        );
    }
}
