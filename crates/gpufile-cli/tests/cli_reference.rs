//! docs/cli.md's command-line reference is the parser's own help: each command's `--help` text
//! lives in docs/cli-help/NAME.txt (included into the page when the site is built), and this test
//! fails when a text differs from what the parser prints now, or when a command has no section.
//! `UPDATE_EXPECT=1 cargo test -p gpufile-cli --test cli_reference` rewrites the texts.

use std::path::{Path, PathBuf};

fn docs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs")
}

/// `None` (the whole command, file gpufile.txt) and every command, from the parser.
fn pages() -> Vec<(String, Option<String>)> {
    let mut pages = vec![("gpufile".to_owned(), None)];
    pages.extend(
        gpufile_cli::command_names()
            .into_iter()
            .map(|n| (n.clone(), Some(n))),
    );
    pages
}

#[test]
fn cli_reference_is_the_parsers_help() {
    let update = std::env::var_os("UPDATE_EXPECT").is_some();
    let mut stale = Vec::new();
    for (file, command) in pages() {
        let path = docs().join("cli-help").join(format!("{file}.txt"));
        let want = gpufile_cli::help_text(command.as_deref()).expect("a command of the parser");
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        if have != want {
            if update {
                std::fs::write(&path, &want).expect("write the help text");
            } else {
                stale.push(format!("docs/cli-help/{file}.txt"));
            }
        }
    }
    assert!(
        stale.is_empty(),
        "the CLI reference differs from the parser's help: {stale:?}; \
         run `UPDATE_EXPECT=1 cargo test -p gpufile-cli --test cli_reference` and commit the texts"
    );
}

#[test]
fn every_command_has_a_section_that_includes_its_help() {
    let page = std::fs::read_to_string(docs().join("cli.md")).expect("docs/cli.md");
    for (file, command) in pages() {
        let include = format!("--8<-- \"docs/cli-help/{file}.txt\"");
        assert!(
            page.contains(&include),
            "docs/cli.md does not include {file}.txt"
        );
        if let Some(name) = command.filter(|n| n != "help") {
            assert!(
                page.contains(&format!("\n## gpufile {name}\n")),
                "docs/cli.md has no `## gpufile {name}` section"
            );
        }
    }
}
