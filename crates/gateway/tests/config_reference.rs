//! The configuration reference (`docs/configuration.md`) and the example configuration
//! (`packaging/secrelay.toml`) are generated from [`ServeConfig`] so that they cannot drift
//! from it: its keys and defaults through serde (the struct's own `Serialize`, the names the
//! TOML parser takes), their types and doc comments from the struct's source
//! (`src/server/config.rs` and any struct it nests, read with `syn`).
//!
//! The tests fail when a file differs from what the generator makes now; with
//! `SECRELAY_BLESS=1` they write the files instead:
//!
//! ```sh
//! SECRELAY_BLESS=1 cargo test -p secrelay-gateway --test config_reference
//! ```

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use secrelay_gateway::server::ServeConfig;
use serde_json::Value;

/// The command that rewrites the generated files, as the files and failures name it.
const BLESS: &str = "SECRELAY_BLESS=1 cargo test -p secrelay-gateway --test config_reference";

/// Width the generated TOML comments wrap at.
const WIDTH: usize = 96;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// One key of a configuration table.
struct Key {
    name: String,
    /// The Rust type as written (`Option<SocketAddr>`).
    rust: String,
    /// The doc comment, paragraphs apart, each paragraph on one line.
    doc: Vec<String>,
    /// The default, from `ServeConfig::default()` through serde.
    default: Value,
    /// A table of its own: its header as TOML writes it (`[rooms.NAME]`, `[[webhooks]]`), the
    /// dotted path its keys are named under (`rooms.NAME`), and its keys.
    table: Option<(String, String, Table)>,
}

/// A struct's doc comment and its keys.
struct Table {
    doc: Vec<String>,
    keys: Vec<Key>,
}

/// Every struct of the gateway crate's sources, by name, so that a table nested in
/// `ServeConfig` is found wherever it is defined.
fn structs() -> BTreeMap<String, syn::ItemStruct> {
    let mut found = BTreeMap::new();
    let mut dirs = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("the crate's sources") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("a source file");
                let file =
                    syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                collect_structs(&file.items, &mut found);
            }
        }
    }
    found
}

fn collect_structs(items: &[syn::Item], found: &mut BTreeMap<String, syn::ItemStruct>) {
    for item in items {
        match item {
            syn::Item::Struct(s) => {
                found
                    .entry(s.ident.to_string())
                    .or_insert_with(|| s.clone());
            }
            syn::Item::Mod(m) => {
                if let Some((_, inner)) = &m.content {
                    collect_structs(inner, found);
                }
            }
            _ => {}
        }
    }
}

/// A doc comment as paragraphs of one line each; rustdoc's intra-doc links (`` [`X`] ``) as
/// plain code spans.
fn doc_of(attrs: &[syn::Attribute]) -> Vec<String> {
    let mut paragraphs = vec![String::new()];
    for a in attrs {
        let syn::Meta::NameValue(nv) = &a.meta else {
            continue;
        };
        if !nv.path.is_ident("doc") {
            continue;
        }
        let syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Str(s),
            ..
        }) = &nv.value
        else {
            continue;
        };
        let line = s.value();
        let line = line.trim();
        let last = paragraphs.last_mut().expect("one paragraph at least");
        if line.is_empty() {
            if !last.is_empty() {
                paragraphs.push(String::new());
            }
        } else {
            if !last.is_empty() {
                last.push(' ');
            }
            last.push_str(line);
        }
    }
    paragraphs.retain(|p| !p.is_empty());
    paragraphs.iter().map(|p| unlink(p)).collect()
}

/// `` [`X`] `` → `` `X` `` unless it is a markdown link (`[..](..)`).
fn unlink(p: &str) -> String {
    let mut out = String::new();
    let mut rest = p;
    while let Some(i) = rest.find("[`") {
        let Some(end) = rest[i..].find("`]").map(|e| i + e) else {
            break;
        };
        let after = &rest[end + 2..];
        out.push_str(&rest[..i]);
        if after.starts_with('(') || after.starts_with('[') {
            out.push_str(&rest[i..end + 2]);
        } else {
            out.push_str(&rest[i + 1..end + 1]);
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

/// A type as written, without spaces or paths (`Option<SocketAddr>`).
fn type_name(ty: &syn::Type) -> String {
    let syn::Type::Path(p) = ty else {
        panic!(
            "a configuration key whose type is not a path (a tuple, a reference): not a TOML value"
        );
    };
    let last = p.path.segments.last().expect("a type path has a segment");
    let mut s = last.ident.to_string();
    if let syn::PathArguments::AngleBracketed(args) = &last.arguments {
        let inner: Vec<String> = args
            .args
            .iter()
            .filter_map(|a| match a {
                syn::GenericArgument::Type(t) => Some(type_name(t)),
                _ => None,
            })
            .collect();
        let _ = write!(s, "<{}>", inner.join(","));
    }
    s
}

/// How a key nests a struct of the crate as tables.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Nesting {
    /// `X`: a table `[key]`.
    Table,
    /// A map of `X`: tables `[key.NAME]`.
    Map,
    /// A list of `X`: tables `[[key]]`.
    Array,
}

/// The struct a key's type nests as tables, and how, when it is a struct of the crate with
/// named fields (a configuration table; `Secret`, a string, is not).
fn nested(rust: &str, structs: &BTreeMap<String, syn::ItemStruct>) -> Option<(String, Nesting)> {
    let is_table = |x: &str| {
        structs
            .get(x)
            .is_some_and(|s| matches!(s.fields, syn::Fields::Named(_)))
    };
    let map_of = rust
        .strip_prefix("BTreeMap<String,")
        .or_else(|| rust.strip_prefix("HashMap<String,"))
        .and_then(|r| r.strip_suffix('>'));
    let list_of = rust.strip_prefix("Vec<").and_then(|r| r.strip_suffix('>'));
    match (map_of, list_of) {
        (Some(x), _) if is_table(x) => Some((x.to_owned(), Nesting::Map)),
        (_, Some(x)) if is_table(x) => Some((x.to_owned(), Nesting::Array)),
        _ if is_table(rust) => Some((rust.to_owned(), Nesting::Table)),
        _ => None,
    }
}

/// What a value of a type is, in an operator's words.
fn describe(rust: &str) -> String {
    if let Some(inner) = rust
        .strip_prefix("Option<")
        .and_then(|r| r.strip_suffix('>'))
    {
        return describe(inner);
    }
    if let Some(inner) = rust.strip_prefix("Vec<").and_then(|r| r.strip_suffix('>')) {
        return format!("list of {}", plural(&describe(inner)));
    }
    if let Some(inner) = rust
        .strip_prefix("BTreeMap<String,")
        .and_then(|r| r.strip_suffix('>'))
    {
        return format!("table of names to {}", plural(&describe(inner)));
    }
    match rust {
        "SocketAddr" => "address (`IP:PORT`)".into(),
        "IpAddr" => "IP address".into(),
        "PathBuf" => "path".into(),
        "String" => "string".into(),
        "Secret" => "secret (a string, never logged)".into(),
        "bool" => "boolean".into(),
        "u8" | "u16" | "u32" | "u64" | "usize" | "i8" | "i16" | "i32" | "i64" | "isize" => {
            "integer".into()
        }
        "f32" | "f64" => "number".into(),
        other => format!("`{other}`"),
    }
}

fn plural(s: &str) -> String {
    match s {
        "address (`IP:PORT`)" => "addresses (`IP:PORT`)".into(),
        "IP address" => "IP addresses".into(),
        "boolean" | "integer" | "number" | "path" | "string" => format!("{s}s"),
        "secret (a string, never logged)" => "secrets (strings, never logged)".into(),
        other => format!("{other} values"),
    }
}

/// The keys of struct `name`, with their defaults from `defaults` (the struct serialized).
fn table(name: &str, defaults: &Value, structs: &BTreeMap<String, syn::ItemStruct>) -> Table {
    let s = structs
        .get(name)
        .unwrap_or_else(|| panic!("struct {name} not found in the gateway's sources"));
    let syn::Fields::Named(fields) = &s.fields else {
        panic!("{name}: a configuration table has named fields");
    };
    let Value::Object(map) = defaults else {
        panic!("{name} does not serialize as a table: {defaults}");
    };
    let mut keys = Vec::new();
    for f in &fields.named {
        let key = f.ident.as_ref().expect("a named field").to_string();
        let rust = type_name(&f.ty);
        let default = map.get(&key).cloned().unwrap_or_else(|| {
            panic!(
                "{name}.{key}: not among the keys serde writes ({:?}): renamed or skipped? \
                 The generator reads keys by their field names.",
                map.keys().collect::<Vec<_>>()
            )
        });
        let table = nested(&rust, structs).map(|(inner, how)| {
            let (header, path) = match how {
                Nesting::Table => (format!("[{key}]"), key.clone()),
                Nesting::Map => (format!("[{key}.NAME]"), format!("{key}.NAME")),
                Nesting::Array => (format!("[[{key}]]"), key.clone()),
            };
            let inner_defaults = match how {
                Nesting::Table => default.clone(),
                Nesting::Map | Nesting::Array => default_of(&inner),
            };
            (header, path, table(&inner, &inner_defaults, structs))
        });
        let doc = doc_of(&f.attrs);
        assert!(
            !doc.is_empty(),
            "{name}.{key} has no doc comment: the configuration reference is made from it"
        );
        keys.push(Key {
            name: key,
            rust,
            doc,
            default,
            table,
        });
    }
    let extra: Vec<&String> = map
        .keys()
        .filter(|k| !keys.iter().any(|key| &key.name == *k))
        .collect();
    assert!(
        extra.is_empty(),
        "{name}: serde writes keys that are not fields of the struct's source: {extra:?}"
    );
    Table {
        doc: doc_of(&s.attrs),
        keys,
    }
}

/// The default of a struct nested as a map or a list of tables: known ones by name (a
/// webhook and a negotiated channel have none: their keys without one are required).
fn default_of(name: &str) -> Value {
    match name {
        "RoomConfig" => serde_json::to_value(secrelay_gateway::server::RoomConfig::default())
            .expect("RoomConfig serializes"),
        "WebhookConfig" => serde_json::json!({"url": null, "key": null, "events": []}),
        "NegotiatedChannel" => serde_json::json!({
            "id": null,
            "label": null,
            "protocol": "",
            "ordered": true,
            "max_retransmits": null,
            "max_lifetime_ms": null,
        }),
        other => panic!(
            "a map of {other} tables: add its default to default_of() in {}",
            file!()
        ),
    }
}

/// A value as TOML writes it (`"0.0.0.0:40000"`, `["1.3", "1.2"]`, `30.0`); `None` when the
/// key has no value by default.
fn toml_value(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::Object(m) if m.is_empty() => None,
        v => {
            let mut t = toml::Table::new();
            t.insert(
                "k".into(),
                toml::Value::try_from(v).expect("a default converts to TOML"),
            );
            let line = toml::to_string(&t).expect("a one-key table writes");
            Some(
                line.trim_end()
                    .strip_prefix("k = ")
                    .expect("`k = value`")
                    .to_owned(),
            )
        }
    }
}

/// A placeholder for a key that is not set by default, of its type.
fn placeholder(rust: &str) -> String {
    let inner = rust
        .strip_prefix("Option<")
        .and_then(|r| r.strip_suffix('>'))
        .unwrap_or(rust);
    match inner {
        "SocketAddr" => "\"IP:PORT\"".into(),
        "IpAddr" => "\"IP\"".into(),
        "PathBuf" => "\"/path/to/file\"".into(),
        "bool" => "false".into(),
        "f64" | "f32" => "0.0".into(),
        t if describe(t) == "integer" => "0".into(),
        _ => "\"…\"".into(),
    }
}

fn default_words(k: &Key) -> String {
    match toml_value(&k.default) {
        Some(v) => format!("`{v}`"),
        None if k.table.is_some() => "none".into(),
        None => "not set".into(),
    }
}

/// The markdown reference.
fn markdown(root: &Table) -> String {
    let mut s = String::new();
    s.push_str("# Configuration reference\n\n");
    let _ = writeln!(
        s,
        "<!-- Generated from ServeConfig (crates/gateway/src/server/config.rs) by \
         crates/gateway/tests/config_reference.rs: do not edit. Regenerate with\n     {BLESS} -->\n"
    );
    s.push_str(
        "`secrelay serve --config FILE` reads a TOML file. Every key is optional: an empty \
         file (or none) runs the defaults below. A key the gateway does not know, a value of \
         the wrong type or one that cannot work is an error that names the key, so a typo \
         never silently does nothing. The flags of `secrelay serve` override the key of the \
         same name (`--udp` sets `udp`, `--tls-ca` sets `tls_ca_dir`; `secrelay serve --help` \
         lists them). [`packaging/secrelay.toml`](../packaging/secrelay.toml) has every key \
         below, commented out, to copy and edit.\n\n",
    );
    s.push_str("| key | type | default |\n|---|---|---|\n");
    for k in &root.keys {
        let _ = writeln!(
            s,
            "| [`{}`](#{}) | {} | {} |",
            k.name,
            k.name,
            k.table
                .as_ref()
                .map(|(h, _, _)| format!("tables `{h}`"))
                .unwrap_or_else(|| describe(&k.rust)),
            default_words(k)
        );
    }
    s.push('\n');
    for k in &root.keys {
        key_section(&mut s, k, "");
    }
    s
}

fn key_section(s: &mut String, k: &Key, prefix: &str) {
    let level = if prefix.is_empty() { "##" } else { "###" };
    let _ = writeln!(s, "{level} `{prefix}{}`\n", k.name);
    for p in &k.doc {
        let _ = writeln!(s, "{p}\n");
    }
    match &k.table {
        None => {
            let optional = if k.rust.starts_with("Option<") {
                ", optional"
            } else {
                ""
            };
            let _ = writeln!(
                s,
                "Type: {}{optional}. Default: {}.\n",
                describe(&k.rust),
                default_words(k)
            );
        }
        Some((header, path, t)) => {
            let _ = writeln!(s, "Each table `{header}` takes these keys:\n");
            for p in &t.doc {
                let _ = writeln!(s, "{p}\n");
            }
            for inner in &t.keys {
                key_section(s, inner, &format!("{path}."));
            }
        }
    }
}

/// `# `-prefixed lines of at most [`WIDTH`] columns.
fn comment(out: &mut String, text: &str, indent: &str) {
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && indent.len() + 2 + line.len() + 1 + word.len() > WIDTH {
            let _ = writeln!(out, "{indent}# {line}");
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        let _ = writeln!(out, "{indent}# {line}");
    }
}

/// The example configuration: every key, commented out, with its doc and default.
fn example(root: &Table) -> String {
    let mut s = String::new();
    s.push_str(
        "# secrelay serve's configuration: secrelay serve --config /etc/secrelay/secrelay.toml\n",
    );
    s.push_str("#\n");
    comment(
        &mut s,
        "Every key the gateway takes is below with its documentation and its default, \
         commented out: as it stands, this file runs the defaults. Uncomment a key to change \
         it. A key the gateway does not know is an error that names it. The reference is \
         docs/configuration.md.",
        "",
    );
    s.push_str("#\n");
    comment(
        &mut s,
        &format!(
            "Generated from ServeConfig (crates/gateway/src/server/config.rs) by \
             crates/gateway/tests/config_reference.rs; in the source tree, regenerate with \
             {BLESS}"
        ),
        "",
    );
    let tables: Vec<&Key> = root.keys.iter().filter(|k| k.table.is_some()).collect();
    // A map of plain values (`[api_keys]`) is a table in TOML: it goes after the plain keys.
    let is_map = |k: &Key| k.rust.starts_with("BTreeMap<");
    for k in root.keys.iter().filter(|k| k.table.is_none() && !is_map(k)) {
        s.push('\n');
        example_key(&mut s, k);
    }
    for k in root.keys.iter().filter(|k| k.table.is_none() && is_map(k)) {
        s.push('\n');
        for p in &k.doc {
            comment(&mut s, p, "");
        }
        let _ = writeln!(s, "#[{}]", k.name);
        s.push_str("# Empty by default; for example:\n#NAME = \"…\"\n");
    }
    for k in tables {
        let (header, _, t) = k.table.as_ref().expect("filtered on tables");
        s.push('\n');
        for p in &k.doc {
            comment(&mut s, p, "");
        }
        let _ = writeln!(s, "#{header}");
        for inner in &t.keys {
            example_key(&mut s, inner);
        }
    }
    s
}

fn example_key(s: &mut String, k: &Key) {
    for (i, p) in k.doc.iter().enumerate() {
        if i > 0 {
            s.push_str("#\n");
        }
        comment(s, p, "");
    }
    match toml_value(&k.default) {
        Some(v) => {
            let _ = writeln!(s, "#{} = {v}", k.name);
        }
        None => {
            s.push_str("# Not set by default; for example:\n");
            let _ = writeln!(s, "#{} = {}", k.name, placeholder(&k.rust));
        }
    }
}

fn root() -> Table {
    let defaults = serde_json::to_value(ServeConfig::default()).expect("ServeConfig serializes");
    table("ServeConfig", &defaults, &structs())
}

/// Compares `path` (from the workspace root) with `made`; writes it under `SECRELAY_BLESS=1`.
fn check_or_bless(path: &str, made: &str) {
    let file = workspace().join(path);
    if std::env::var_os("SECRELAY_BLESS").is_some_and(|v| v == "1") {
        std::fs::create_dir_all(file.parent().expect("a file in a folder")).expect("mkdir");
        std::fs::write(&file, made).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        return;
    }
    let now = std::fs::read_to_string(&file).unwrap_or_default();
    if now != made {
        let first = now
            .lines()
            .zip(made.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(now.lines().count().min(made.lines().count()));
        panic!(
            "{path} differs from what ServeConfig makes now (first at line {}: {:?}, generated \
             {:?}). Regenerate it with\n    {BLESS}",
            first + 1,
            now.lines().nth(first).unwrap_or("<end of file>"),
            made.lines().nth(first).unwrap_or("<end of file>"),
        );
    }
}

#[test]
fn the_configuration_reference_matches_the_config_struct() {
    check_or_bless("docs/configuration.md", &markdown(&root()));
}

#[test]
fn the_example_configuration_matches_the_config_struct() {
    check_or_bless("packaging/secrelay.toml", &example(&root()));
}

/// The example as it stands is the defaults; uncommenting every key that has a default
/// (each as the file writes it) is the defaults too, so every default it shows is a value
/// the parser takes for that key.
#[test]
fn the_example_configuration_parses_to_the_defaults() {
    let root = root();
    let text = example(&root);
    assert_eq!(
        ServeConfig::from_toml(&text).expect("the example parses"),
        ServeConfig::default()
    );
    let with_default: Vec<&str> = root
        .keys
        .iter()
        .filter(|k| k.table.is_none() && toml_value(&k.default).is_some())
        .map(|k| k.name.as_str())
        .collect();
    let mut uncommented = String::new();
    let mut seen = 0;
    for line in text.lines() {
        let key = line.strip_prefix('#').and_then(|l| l.split_once(" = "));
        match key {
            Some((k, _)) if with_default.contains(&k) => {
                uncommented.push_str(&line[1..]);
                seen += 1;
            }
            _ => uncommented.push_str(line),
        }
        uncommented.push('\n');
    }
    assert_eq!(seen, with_default.len(), "one line per key with a default");
    assert_eq!(
        ServeConfig::from_toml(&uncommented)
            .unwrap_or_else(|e| panic!("the example's defaults, uncommented: {e}")),
        ServeConfig::default()
    );
}

/// The reference names every key the parser takes, and nothing else.
#[test]
fn every_key_the_parser_takes_is_in_the_reference() {
    let root = root();
    let made = markdown(&root);
    for k in &root.keys {
        assert!(made.contains(&format!("## `{}`", k.name)), "{}", k.name);
        // A key the reference names is one the parser takes (deny_unknown_fields refuses
        // any other).
        if let Some(v) = toml_value(&k.default) {
            ServeConfig::from_toml(&format!("{} = {v}", k.name))
                .unwrap_or_else(|e| panic!("{} = {v}: {e}", k.name));
        }
    }
    assert!(ServeConfig::from_toml("not_a_key = 1").is_err());
}
