//! The layers of `src/`, bottom first, and what each may import (docs/ARCHITECTURE.md):
//!
//! 0. `abi`: the standard ABI's constants, handle type and `MPI_Status`; imports nothing of the
//!    crate.
//! 1. the base: `datatype`, `ops`, `rma` (the window's message handler), `rma::wire`,
//!    `handles`, `threads`, `error` (the error a call fails with), `check` (the argument
//!    checks); pure data and algorithms over the ABI, no process state.
//! 2. the semantics: every other module but the entry points (the process state and MPI's
//!    semantics over ferry-core).
//! 3. the entry points: `entry` and its submodules (the `extern "C"` functions and the guards
//!    they run in); nothing below imports them.
//!
//! The crate root (`lib.rs`) declares the modules and imports nothing. A module may import its
//! own layer and those below; so no circle of imports crosses a layer. The graph is read from
//! the source: every `crate::…` and `$crate::…` path (in `use` lines and in code, `use` trees
//! included), every `super::…` path and every path through a module's own submodules, with
//! comments and string literals left out; a path stands for the deepest module it names.
//!
//! `cargo test -p ferry-mpi --test layers -- --nocapture` prints the graph (Graphviz `dot`, one
//! box per layer) and the circles inside the layers.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The layers' names, bottom first.
const LAYER_NAMES: [&str; 4] = ["abi", "base", "semantics", "entry"];

/// The modules of the base layer (1).
const BASE: &[&str] = &[
    "datatype",
    "ops",
    "rma",
    "rma::wire",
    "handles",
    "threads",
    "error",
    "check",
];

/// The crate root's name in the graph.
const ROOT: &str = "crate";

/// The layer of `module` (`a::b`), an index of [`LAYER_NAMES`]; the root has none.
fn layer_of(module: &str) -> Option<usize> {
    if module == ROOT {
        None
    } else if module == "abi" {
        Some(0)
    } else if BASE.contains(&module) {
        Some(1)
    } else if module == "entry" || module.starts_with("entry::") {
        Some(3)
    } else {
        Some(2)
    }
}

/// Module path of a file under `src/` (`coll/large.rs` is `coll::large`, `rma/mod.rs` is `rma`).
fn module_of(relative: &Path) -> String {
    let mut parts: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if let Some(last) = parts.last_mut() {
        *last = last.trim_end_matches(".rs").to_string();
    }
    if parts.last().is_some_and(|l| l == "mod") {
        parts.pop();
    }
    if parts == ["lib"] {
        return ROOT.to_string();
    }
    parts.join("::")
}

/// Every `.rs` file under `dir`, as (module, text).
fn sources(dir: &Path, base: &Path, out: &mut BTreeMap<String, String>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            sources(&path, base, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let relative = path.strip_prefix(base).expect("file under src/");
            out.insert(module_of(relative), text);
        }
    }
}

/// `text` with comments, string literals and character literals blanked out (lifetimes kept).
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && is_raw_string(&chars, i) {
            let hashes = chars[i + 1..].iter().take_while(|&&h| h == '#').count();
            i += 2 + hashes;
            while i < chars.len() {
                if chars[i] == '"' && chars[i + 1..].iter().take(hashes).all(|&h| h == '#') {
                    i += 1 + hashes;
                    break;
                }
                i += 1;
            }
            out.push_str("\"\"");
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' && (next == Some('\\') || chars.get(i + 2) == Some(&'\'')) {
            i += 1;
            while i < chars.len() && chars[i] != '\'' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("' '");
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// Whether `r` at `i` opens a raw string (`r"`, `r#"`), not ends an identifier (`for"`).
fn is_raw_string(chars: &[char], i: usize) -> bool {
    let starts_word = i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
    let after = chars[i + 1..].iter().find(|&&h| h != '#');
    starts_word && after == Some(&'"')
}

/// Tokens: identifiers, `::` and single punctuation characters.
fn tokens(code: &str) -> Vec<String> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(chars[start..i].iter().collect());
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            out.push("::".to_string());
            i += 2;
        } else {
            if !c.is_whitespace() {
                out.push(c.to_string());
            }
            i += 1;
        }
    }
    out
}

/// The paths of a path tree starting at `tokens[i]` (after `prefix::`), with the index after it:
/// `a::b`, `a::{b, c::{self, d}}`, `a::*`.
fn path_tree(tokens: &[String], mut i: usize, prefix: &[String]) -> (Vec<Vec<String>>, usize) {
    let mut paths = Vec::new();
    match tokens.get(i).map(String::as_str) {
        Some("{") => {
            i += 1;
            while i < tokens.len() && tokens[i] != "}" {
                let (mut inner, next) = path_tree(tokens, i, prefix);
                paths.append(&mut inner);
                i = next;
                if tokens.get(i).is_some_and(|t| t == ",") {
                    i += 1;
                }
            }
            (paths, i + 1)
        }
        Some("self") | Some("*") => (vec![prefix.to_vec()], i + 1),
        Some(word) if is_identifier(word) => {
            let mut path = prefix.to_vec();
            path.push(word.to_string());
            if tokens.get(i + 1).is_some_and(|t| t == "::") {
                path_tree(tokens, i + 2, &path)
            } else {
                (vec![path], i + 1)
            }
        }
        _ => (vec![prefix.to_vec()], i),
    }
}

fn is_identifier(word: &str) -> bool {
    word.chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
}

/// The modules `module` (source `text`) imports, among `modules` (itself left out).
fn imports(module: &str, text: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let own: Vec<String> = if module == ROOT {
        Vec::new()
    } else {
        module.split("::").map(str::to_string).collect()
    };
    let tokens = tokens(&code_only(text));
    let mut found = BTreeSet::new();
    // Brace depths at which inline modules (`mod tests { … }`) of this file opened.
    let mut inline: Vec<usize> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < tokens.len() {
        let token = tokens[i].as_str();
        let after_path = i > 0 && tokens[i - 1] == "::";
        let followed_by_path = tokens.get(i + 1).is_some_and(|t| t == "::");
        match token {
            "{" => depth += 1,
            "}" => {
                depth = depth.saturating_sub(1);
                if inline.last() == Some(&depth) {
                    inline.pop();
                }
            }
            "mod" if tokens.get(i + 2).is_some_and(|t| t == "{") => inline.push(depth),
            _ => {}
        }
        let base: Option<Vec<String>> = if after_path || !followed_by_path {
            None
        } else if token == "crate" {
            Some(Vec::new())
        } else if token == "super" || token == "self" {
            // `super` of an inline module is this file's module (or an inline module of it).
            let mut base = own.clone();
            let mut ups = 0usize;
            let mut j = i;
            while tokens.get(j).is_some_and(|t| t == "super")
                && tokens.get(j + 1).is_some_and(|t| t == "::")
            {
                ups += 1;
                j += 2;
            }
            let beyond_inline = ups.saturating_sub(inline.len());
            for _ in 0..beyond_inline {
                base.pop();
            }
            i = if ups > 0 { j - 2 } else { i };
            Some(base)
        } else if modules.contains(&child(&own, token)) && inline.is_empty() {
            Some(own.clone())
        } else {
            None
        };
        let Some(base) = base else {
            i += 1;
            continue;
        };
        // A relative path's first word is a submodule; `crate`, `super`, `self` are skipped.
        let start = if matches!(token, "crate" | "super" | "self") {
            i + 2
        } else {
            i
        };
        let (paths, next) = path_tree(&tokens, start, &base);
        for path in paths {
            if let Some(target) = deepest_module(&path, modules) {
                if target != module {
                    found.insert(target);
                }
            }
        }
        i = next.max(i + 1);
    }
    found
}

fn child(own: &[String], name: &str) -> String {
    let mut path = own.to_vec();
    path.push(name.to_string());
    path.join("::")
}

/// The deepest module that `path` names, if any (the root does not count).
fn deepest_module(path: &[String], modules: &BTreeSet<String>) -> Option<String> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].join("::"))
        .find(|m| modules.contains(m))
}

/// The import graph of `src/`: module → the modules it imports.
fn graph(files: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let modules: BTreeSet<String> = files.keys().cloned().collect();
    files
        .iter()
        .map(|(m, text)| (m.clone(), imports(m, text, &modules)))
        .collect()
}

/// Each import that goes up a layer, or out of the root, as `a -> b (layer x -> layer y)`.
fn violations(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut out = Vec::new();
    for (from, targets) in graph {
        for to in targets {
            let up = match (layer_of(from), layer_of(to)) {
                (None, _) => true,
                (Some(a), Some(b)) => b > a,
                (Some(_), None) => true,
            };
            if up {
                let name = |l: Option<usize>| l.map_or("the root", |l| LAYER_NAMES[l]);
                out.push(format!(
                    "{from} -> {to} ({} -> {})",
                    name(layer_of(from)),
                    name(layer_of(to))
                ));
            }
        }
    }
    out
}

/// The circles of the graph: its strongly connected components of more than one module.
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    // Kosaraju: finish order on the graph, then components on the reversed graph.
    fn finish(
        v: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        seen: &mut BTreeSet<String>,
        order: &mut Vec<String>,
    ) {
        if !seen.insert(v.to_string()) {
            return;
        }
        for w in graph.get(v).into_iter().flatten() {
            finish(w, graph, seen, order);
        }
        order.push(v.to_string());
    }
    let mut reversed: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, targets) in graph {
        for to in targets {
            reversed.entry(to.clone()).or_default().insert(from.clone());
        }
    }
    let (mut seen, mut order) = (BTreeSet::new(), Vec::new());
    for v in graph.keys() {
        finish(v, graph, &mut seen, &mut order);
    }
    let mut assigned = BTreeSet::new();
    let mut out = Vec::new();
    for v in order.iter().rev() {
        let mut component = Vec::new();
        finish(v, &reversed, &mut assigned, &mut component);
        if component.len() > 1 {
            out.push(component.into_iter().collect());
        }
    }
    out
}

/// The graph in Graphviz `dot`, one box per layer.
fn dot(graph: &BTreeMap<String, BTreeSet<String>>) -> String {
    let mut out = String::from("digraph mpi {\n  rankdir=BT;\n  node [shape=box];\n");
    for (l, name) in LAYER_NAMES.iter().enumerate() {
        out.push_str(&format!(
            "  subgraph cluster_{l} {{\n    label=\"{l}: {name}\";\n"
        ));
        for m in graph.keys().filter(|m| layer_of(m) == Some(l)) {
            out.push_str(&format!("    \"{m}\";\n"));
        }
        out.push_str("  }\n");
    }
    for (from, targets) in graph {
        for to in targets {
            out.push_str(&format!("  \"{from}\" -> \"{to}\";\n"));
        }
    }
    out.push_str("}\n");
    out
}

#[test]
fn no_module_imports_a_layer_above_its_own() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = BTreeMap::new();
    sources(&src, &src, &mut files);
    for named in BASE.iter().chain(&["abi", "entry"]) {
        assert!(
            files.contains_key(*named),
            "layer module {named} is not in src/"
        );
    }
    let graph = graph(&files);
    // The reader sees what it must: an entry point's import and a submodule's of its parent.
    assert!(
        graph["entry::pt2pt"].contains("p2p"),
        "{:?}",
        graph["entry::pt2pt"]
    );
    assert!(
        graph["coll::lean"].contains("coll"),
        "{:?}",
        graph["coll::lean"]
    );
    println!("{}", dot(&graph));
    for circle in circles(&graph) {
        println!("circle of {} modules: {circle:?}", circle.len());
    }
    assert!(
        graph["abi"].is_empty(),
        "abi imports {:?}; it must import nothing of the crate",
        graph["abi"]
    );
    let up = violations(&graph);
    assert!(
        up.is_empty(),
        "imports that go up a layer (layers bottom first: {LAYER_NAMES:?}):\n{}",
        up.join("\n")
    );
}

#[test]
fn the_reader_finds_every_kind_of_path() {
    let modules: BTreeSet<String> = ["a", "a::b", "c", "c::d", "e", "f", "g", "h", "x", "x::kid"]
        .iter()
        .map(|m| m.to_string())
        .collect();
    let text = r#"
        //! Not `crate::h` in a doc comment.
        use crate::{a::b::Thing, c::{self, d::*}};
        use super::e;
        use kid::Item;
        fn f() -> usize {
            let s = "crate::h in a string";
            let c = '"';
            $crate::f::call() + crate::g::CONST /* crate::h */
        }
        #[cfg(test)]
        mod tests {
            use super::*;
        }
    "#;
    let found = imports("x", text, &modules);
    let expected: BTreeSet<String> = ["a::b", "c", "c::d", "e", "f", "g", "x::kid"]
        .iter()
        .map(|m| m.to_string())
        .collect();
    assert_eq!(found, expected);
}

#[test]
fn an_import_up_a_layer_and_a_circle_are_found() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("abi", vec![]),
        ("state", vec!["abi", "p2p"]),
        ("p2p", vec!["state", "entry::pt2pt"]),
        ("entry::pt2pt", vec!["p2p"]),
    ]
    .into_iter()
    .map(|(m, t)| (m.to_string(), t.into_iter().map(str::to_string).collect()))
    .collect();
    assert_eq!(
        violations(&graph),
        ["p2p -> entry::pt2pt (semantics -> entry)"]
    );
    let found = circles(&graph);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].len(), 3);
}
