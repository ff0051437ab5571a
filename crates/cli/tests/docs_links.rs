//! README.md and docs/ speak to the people who use secrelay, from the repository alone: every
//! link stays inside the repository and leads somewhere (a file that exists, a heading that
//! exists: anchors are made as GitHub makes them), and nothing speaks of the project's internal
//! bookkeeping (issue numbers, a `../shared` folder outside the repository).
//!
//! Markdown is read with pulldown-cmark, so links in code spans and code blocks are text, as a
//! reader sees them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use pulldown_cmark::{Event, HeadingLevel, LinkType, Options, Parser, Tag, TagEnd};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository's root")
}

/// README.md and every markdown file under docs/.
fn documents() -> Vec<PathBuf> {
    let root = repo();
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.expect("an entry of docs/").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// A heading's anchor as GitHub makes it: lower case; letters, digits, `-`, `_` and spaces
/// kept (spaces as `-`), everything else dropped.
fn slug(text: &str) -> String {
    text.trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// What one markdown file holds: its anchors, its links (target, line) and its prose (text
/// outside code).
#[derive(Default)]
struct Doc {
    anchors: BTreeSet<String>,
    links: Vec<(String, usize)>,
    prose: Vec<(String, usize)>,
}

fn options() -> Options {
    Options::ENABLE_TABLES | Options::ENABLE_FOOTNOTES | Options::ENABLE_STRIKETHROUGH
}

fn read(path: &Path) -> Doc {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let line_of = |offset: usize| text[..offset].matches('\n').count() + 1;
    let mut doc = Doc::default();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut heading: Option<String> = None;
    for (event, range) in Parser::new_ext(&text, options()).into_offset_iter() {
        match event {
            Event::Start(Tag::Heading { level, id, .. }) => {
                if let Some(id) = id {
                    doc.anchors.insert(id.to_string());
                }
                let _: HeadingLevel = level;
                heading = Some(String::new());
            }
            Event::End(TagEnd::Heading(_)) => {
                let base = slug(&heading.take().unwrap_or_default());
                // A repeated heading gets -1, -2, … as on GitHub.
                let n = seen.entry(base.clone()).or_insert(0);
                let anchor = if *n == 0 {
                    base.clone()
                } else {
                    format!("{base}-{n}")
                };
                *n += 1;
                doc.anchors.insert(anchor);
            }
            Event::Text(t) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
                doc.prose.push((t.to_string(), line_of(range.start)));
            }
            Event::Code(t) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
            }
            Event::Start(Tag::Link {
                link_type,
                dest_url,
                ..
            }) if !matches!(link_type, LinkType::Email) => {
                doc.links.push((dest_url.to_string(), line_of(range.start)));
            }
            Event::Start(Tag::Image { dest_url, .. }) => {
                doc.links.push((dest_url.to_string(), line_of(range.start)));
            }
            Event::Html(h) | Event::InlineHtml(h) => {
                // Anchors made by hand: <a id="…"> or <a name="…">.
                for key in ["id=\"", "name=\""] {
                    for part in h.split(key).skip(1) {
                        if let Some(end) = part.find('"') {
                            doc.anchors.insert(part[..end].to_string());
                        }
                    }
                }
                for part in h.split("href=\"").skip(1) {
                    if let Some(end) = part.find('"') {
                        doc.links
                            .push((part[..end].to_string(), line_of(range.start)));
                    }
                }
            }
            _ => {}
        }
    }
    doc
}

/// Everything wrong with one document's links; `docs` holds every markdown file read so far.
fn check_links(path: &Path, doc: &Doc, docs: &mut BTreeMap<PathBuf, Doc>) -> Vec<String> {
    let root = repo();
    let name = path
        .strip_prefix(&root)
        .unwrap_or(path)
        .display()
        .to_string();
    let mut errors = Vec::new();
    for (link, line) in &doc.links {
        let at = format!("{name}:{line}: {link}");
        let lower = link.to_ascii_lowercase();
        if lower.contains("://") || lower.starts_with("//") || lower.starts_with("mailto:") {
            errors.push(format!("{at}: a link outside the repository"));
            continue;
        }
        let (file, anchor) = match link.split_once('#') {
            Some((f, a)) => (f, Some(a)),
            None => (link.as_str(), None),
        };
        let target = if file.is_empty() {
            path.to_path_buf()
        } else {
            let joined = path.parent().expect("a file in a folder").join(file);
            match joined.canonicalize() {
                Ok(t) => t,
                Err(_) => {
                    errors.push(format!("{at}: no such file"));
                    continue;
                }
            }
        };
        if !target.starts_with(&root) {
            errors.push(format!("{at}: outside the repository"));
            continue;
        }
        let Some(anchor) = anchor else { continue };
        if target.extension().is_none_or(|e| e != "md") {
            errors.push(format!("{at}: an anchor into a file that is not markdown"));
            continue;
        }
        let anchors = &docs
            .entry(target.clone())
            .or_insert_with(|| read(&target))
            .anchors;
        if !anchors.contains(anchor) {
            errors.push(format!(
                "{at}: no heading with that anchor in {}",
                target.display()
            ));
        }
    }
    errors
}

/// Prose that speaks of the project's own bookkeeping rather than to a user.
fn check_prose(path: &Path, doc: &Doc) -> Vec<String> {
    let name = path
        .strip_prefix(repo())
        .unwrap_or(path)
        .display()
        .to_string();
    let mut errors = Vec::new();
    for (text, line) in &doc.prose {
        let lower = text.to_lowercase();
        if lower.contains("../shared") {
            errors.push(format!(
                "{name}:{line}: names ../shared, outside the repository"
            ));
        }
        for word in ["issue ", "issues ", "issue #"] {
            for (i, _) in lower.match_indices(word) {
                let after = &lower[i + word.len()..];
                let digits = after.chars().take_while(char::is_ascii_digit).count();
                // A number that ends there ("issue 19", "issue 19,"), not "issues 512-bit".
                let ends = after[digits..]
                    .chars()
                    .next()
                    .is_none_or(|c| !(c.is_alphanumeric() || c == '-'));
                if digits > 0 && ends {
                    errors.push(format!(
                        "{name}:{line}: an issue number ({}): say what it is instead",
                        &text[i..i + word.len() + digits]
                    ));
                }
            }
        }
    }
    errors
}

#[test]
fn readme_and_docs_link_only_inside_the_repository_and_every_link_leads_somewhere() {
    let mut docs: BTreeMap<PathBuf, Doc> = BTreeMap::new();
    let mut errors = Vec::new();
    for path in documents() {
        let doc = read(&path);
        errors.extend(check_links(&path, &doc, &mut docs));
        errors.extend(check_prose(&path, &doc));
        docs.insert(path, doc);
    }
    assert!(
        errors.is_empty(),
        "{} problem(s):\n{}",
        errors.len(),
        errors.join("\n")
    );
}

/// The checker itself: what it must find, and what it must leave alone.
#[test]
fn the_checker_finds_dead_links_and_anchors_and_outside_links() {
    let dir = tempfile::tempdir_in(repo().join("target")).unwrap();
    let a = dir.path().join("a.md");
    let b = dir.path().join("b.md");
    std::fs::write(
        &b,
        "# B's title\n\n## `GET /api/rooms/{room}`\n\n## Twice\n\n## Twice\n",
    )
    .unwrap();
    std::fs::write(
        &a,
        "[ok](b.md#bs-title) [ok](b.md#get-apiroomsroom) [ok](b.md#twice-1) [ok](#here)\n\n\
         # Here\n\n\
         [dead](c.md) [dead anchor](b.md#nope) [outside](https://example.org/x) \
         [up](../../../../../../etc/passwd) `[in code](https://example.org/)`\n\n\
         ```\n[in a block](https://example.org/)\n```\n\nSee issue 19 and ../shared/X.md; \
         a core issues 512-bit operations.\n",
    )
    .unwrap();
    let mut docs = BTreeMap::new();
    let doc = read(&a);
    let mut errors = check_links(&a, &doc, &mut docs);
    errors.extend(check_prose(&a, &doc));
    let text = errors.join("\n");
    assert_eq!(errors.len(), 6, "{text}");
    for want in [
        "c.md: no such file",
        "b.md#nope: no heading",
        "https://example.org/x: a link outside",
        "etc/passwd",
        "an issue number (issue 19)",
        "../shared",
    ] {
        assert!(text.contains(want), "{want}: {text}");
    }
    assert_eq!(
        slug("Control by a SIP proxy: rtpengine's ng protocol"),
        "control-by-a-sip-proxy-rtpengines-ng-protocol"
    );
    assert_eq!(
        slug("The handshake phase tables (lab handshake --in-memory)"),
        "the-handshake-phase-tables-lab-handshake---in-memory"
    );
}
