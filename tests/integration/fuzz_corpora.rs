//! Replays every fuzz target's corpus (`fuzz/corpus/<target>/`) through its library function, so that `make test`
//! on stable Rust keeps every seed and every regression input found by fuzzing passing (docs/reliability.md).

use std::path::Path;

use mcm::fuzzing::TARGETS;

#[test]
fn every_corpus_input_passes_its_target() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    for (target, run) in TARGETS {
        let dir = root.join(target);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|entry| entry.unwrap().path())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "{target}: the corpus is empty");
        for file in files {
            let data = std::fs::read(&file).unwrap();
            // A panic names the input, which `cargo fuzz run <target> <file>` reproduces.
            eprintln!("fuzz corpus: {}", file.display());
            run(&data);
        }
    }
}

#[test]
fn every_target_has_a_fuzz_binary() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    for (target, _) in TARGETS {
        let source = std::fs::read_to_string(root.join(format!("fuzz_targets/{target}.rs"))).unwrap();
        assert!(
            source.contains(&format!("mcm::fuzzing::{target}(data)")),
            "{target}: the wrapper calls another function"
        );
        assert!(manifest.contains(&format!("name = \"{target}\"")), "{target}: no [[bin]] in fuzz/Cargo.toml");
    }
}
