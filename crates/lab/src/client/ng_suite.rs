//! rtpengine's own ng test scripts (`t/auto-daemon-tests*.pl` in its source tree), read into
//! the calls they make, for `lab ng-compare` to replay against rtpengine and secrelay.
//!
//! A script is Perl, but its requests are written in a small, regular part of it: `new_call`
//! starts a call (a new call-id, from-tag and to-tag), `offer(NAME, {FLAGS}, <<SDP)` and
//! `answer(…)` send a request whose SDP is the heredoc's text up to a line of dashes (the
//! SDP after it is what the script's authors expect rtpengine to answer, with placeholders
//! for ports and keys: kept as [`Step::expected`], a second reference beside the daemon run
//! here), `rtpe_req(COMMAND, NAME, {…})` sends any other command, and `reverse_tags`,
//! `new_ft` and `new_tt` change the tags as the scripts' helpers do (`offer` sends the current
//! from-tag, `answer` the from-tag and to-tag). The flags are Perl literals (strings, numbers,
//! `[lists]`, `{hashes}`, `qw(…)`, `ft()` and `tt()`), read into bencode as Perl's `Bencode`
//! module writes them (a string that is a decimal integer becomes an integer).
//!
//! What cannot be replayed is counted, not guessed: a request whose flags or SDP take a value
//! the script computes at run time (a Perl variable) is skipped, with the rest of its call.
//! The script is the operator's file, read whole; nothing in it is run.

use secrelay_wire::bencode::Bencode;
use secrelay_wire::ng::norm;

/// A request of a call, as the script sends it.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// The script's line of the request.
    pub line: usize,
    /// `offer`, `answer`, or another ng command (`delete`, `query`, …).
    pub command: String,
    /// The test's name for it.
    pub name: String,
    /// The tags the helpers give it (`from-tag`, `to-tag`), before the flags' own.
    pub from_tag: Option<String>,
    /// The to-tag, for an `answer`.
    pub to_tag: Option<String>,
    /// The flags, and the SDP (`sdp`) for an offer or answer.
    pub body: Vec<(String, Bencode)>,
    /// The SDP the script expects back (after the heredoc's line of dashes), when it has one
    /// that interpolates no variable.
    pub expected: Option<String>,
}

impl Step {
    /// The SDP sent, if any.
    pub fn sdp(&self) -> Option<String> {
        self.body
            .iter()
            .find(|(k, _)| k == "sdp")
            .and_then(|(_, v)| v.as_text())
    }

    /// What this request asks for that is outside what secrelay means to answer as rtpengine
    /// does (T.38 fax, call recording, DTMF injection), if anything: a `T.38` flag or an SDP
    /// with a UDPTL (T.38) section, the `record-call` flag or key, the `inject-DTMF` flag.
    /// Names are compared as rtpengine reads them: any case, spaces, dashes or underscores.
    pub fn out_of_scope(&self) -> Option<&'static str> {
        let yes = |v: &Bencode| {
            v.as_text()
                .is_some_and(|t| matches!(norm(&t).as_str(), "yes" | "on" | "true"))
        };
        for (k, v) in &self.body {
            match norm(k).as_str() {
                "t.38" | "t38" => return Some("T.38"),
                "record-call" if yes(v) => return Some("recording"),
                "flags" => {
                    let items = match v {
                        Bencode::List(items) => items.iter().filter_map(Bencode::as_text).collect(),
                        other => other.as_text().into_iter().collect::<Vec<_>>(),
                    };
                    for item in items {
                        match norm(&item).as_str() {
                            "inject-dtmf" => return Some("DTMF injection"),
                            "record-call" => return Some("recording"),
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        let udptl = self.sdp().is_some_and(|sdp| {
            sdp.lines().any(|l| {
                l.starts_with("m=")
                    && l.split_whitespace().nth(2).is_some_and(|t| {
                        t.eq_ignore_ascii_case("udptl") || t.eq_ignore_ascii_case("udp/udptl")
                    })
            })
        });
        udptl.then_some("T.38")
    }
}

/// One call: its requests in order.
#[derive(Debug, Clone, PartialEq)]
pub struct SuiteCall {
    /// The script it came from.
    pub file: String,
    /// Its call-id (the script's numbering).
    pub call_id: String,
    /// The requests that can be replayed, in order.
    pub steps: Vec<Step>,
}

/// A request left out, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The script and line.
    pub file: String,
    /// The line.
    pub line: usize,
    /// The command (`offer`, `answer`, …).
    pub command: String,
    /// Why.
    pub why: String,
}

/// What a script holds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Suite {
    /// The calls.
    pub calls: Vec<SuiteCall>,
    /// The requests left out.
    pub skipped: Vec<Skipped>,
}

/// A Perl literal, as far as the scripts' requests use them.
#[derive(Debug, Clone, PartialEq)]
enum Value {
    Str(String),
    Num(i64),
    List(Vec<Value>),
    Hash(Vec<(String, Value)>),
    /// `qw(…)`: words, flattened into the list around them as Perl does.
    Words(Vec<String>),
    /// `ft()` or `tt()`.
    Tag(TagRef),
    Undef,
    /// A heredoc operator: its terminator, and whether it interpolates.
    Heredoc(String, bool),
    /// Something computed at run time (a variable, an expression): the text.
    Dynamic(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TagRef {
    From,
    To,
}

/// A cursor over a script's text.
struct Cursor<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Cursor<'a> {
    fn rest(&self) -> &'a str {
        &self.text[self.at..]
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.at += c.len_utf8();
        Some(c)
    }

    /// Skips white space and `#` comments.
    fn skip_ws(&mut self) {
        loop {
            let r = self.rest();
            let t = r.trim_start();
            self.at += r.len() - t.len();
            if t.starts_with('#') {
                self.at += t.find('\n').unwrap_or(t.len());
            } else {
                return;
            }
        }
    }

    fn eat(&mut self, s: &str) -> bool {
        self.skip_ws();
        if self.rest().starts_with(s) {
            self.at += s.len();
            true
        } else {
            false
        }
    }

    fn ident(&mut self) -> Option<&'a str> {
        self.skip_ws();
        let r = self.rest();
        let n = r
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(r.len());
        if n == 0 || r.starts_with(|c: char| c.is_ascii_digit()) {
            return None;
        }
        self.at += n;
        Some(&r[..n])
    }
}

/// Reads a quoted string after its opening quote; `None` if it does not end.
fn quoted(c: &mut Cursor<'_>, quote: char) -> Option<Value> {
    let mut out = String::new();
    let mut dynamic = false;
    loop {
        let ch = c.bump()?;
        match ch {
            '\\' => {
                let e = c.bump()?;
                match (quote, e) {
                    ('"', 'n') => out.push('\n'),
                    ('"', 'r') => out.push('\r'),
                    ('"', 't') => out.push('\t'),
                    ('\'', e) if e != '\'' && e != '\\' => {
                        out.push('\\');
                        out.push(e);
                    }
                    (_, e) => out.push(e),
                }
            }
            '$' | '@' if quote == '"' => {
                if c.peek()
                    .is_some_and(|n| n.is_ascii_alphabetic() || n == '_' || n == '{')
                {
                    dynamic = true;
                }
                out.push(ch);
            }
            ch if ch == quote => break,
            ch => out.push(ch),
        }
    }
    Some(if dynamic {
        Value::Dynamic(out)
    } else {
        Value::Str(out)
    })
}

/// Reads one Perl literal.
fn value(c: &mut Cursor<'_>) -> Option<Value> {
    c.skip_ws();
    let ch = c.peek()?;
    match ch {
        '\'' | '"' => {
            c.bump();
            quoted(c, ch)
        }
        '[' => {
            c.bump();
            let items = list_items(c, ']')?;
            Some(Value::List(items))
        }
        '{' => {
            c.bump();
            hash_items(c).map(Value::Hash)
        }
        '<' if c.rest().starts_with("<<") => {
            c.at += 2;
            let (tag, interpolates) = match c.peek()? {
                '"' | '\'' => {
                    let q = c.bump()?;
                    let Value::Str(t) = quoted(c, '\'')? else {
                        return None;
                    };
                    let t = t.trim_end_matches(q).to_owned();
                    (t, q == '"')
                }
                _ => (c.ident()?.to_owned(), true),
            };
            Some(Value::Heredoc(tag, interpolates))
        }
        '-' | '0'..='9' => {
            let r = c.rest();
            let n = r
                .char_indices()
                .skip(1)
                .find(|(_, d)| !d.is_ascii_digit())
                .map_or(r.len(), |(i, _)| i);
            let num = r[..n].parse().ok()?;
            c.at += n;
            Some(Value::Num(num))
        }
        '$' | '@' | '\\' => {
            let start = c.at;
            c.bump();
            let _ = c.ident();
            Some(Value::Dynamic(c.text[start..c.at].to_owned()))
        }
        _ => {
            let start = c.at;
            let id = c.ident()?;
            match id {
                "undef" => Some(Value::Undef),
                "qw" => {
                    c.skip_ws();
                    let open = c.bump()?;
                    // Any delimiter: brackets close with their pair, others with themselves.
                    let close = match open {
                        '(' => ')',
                        '[' => ']',
                        '{' => '}',
                        '<' => '>',
                        c if c.is_ascii_punctuation() => c,
                        _ => return None,
                    };
                    let end = c.rest().find(close)?;
                    let words = c.rest()[..end]
                        .split_whitespace()
                        .map(str::to_owned)
                        .collect();
                    c.at += end + 1;
                    Some(Value::Words(words))
                }
                "ft" | "tt" => {
                    if c.eat("(") && !c.eat(")") {
                        return None;
                    }
                    Some(Value::Tag(if id == "ft" {
                        TagRef::From
                    } else {
                        TagRef::To
                    }))
                }
                _ => {
                    // A function call or a bareword: computed at run time.
                    if c.eat("(") {
                        let _ = list_items(c, ')')?;
                    }
                    Some(Value::Dynamic(c.text[start..c.at].to_owned()))
                }
            }
        }
    }
}

/// Items up to `close` (commas and `=>` alike), the close eaten.
fn list_items(c: &mut Cursor<'_>, close: char) -> Option<Vec<Value>> {
    let mut items = Vec::new();
    loop {
        c.skip_ws();
        if c.peek()? == close {
            c.bump();
            return Some(items);
        }
        match value(c)? {
            Value::Words(w) => items.extend(w.into_iter().map(Value::Str)),
            v => items.push(v),
        }
        c.skip_ws();
        if !(c.eat(",") || c.eat("=>")) {
            c.skip_ws();
            if c.peek()? != close {
                return None;
            }
        }
    }
}

/// A hash's pairs after its `{`, the `}` eaten. A key may be a bareword.
fn hash_items(c: &mut Cursor<'_>) -> Option<Vec<(String, Value)>> {
    let mut pairs = Vec::new();
    loop {
        c.skip_ws();
        if c.eat("}") {
            return Some(pairs);
        }
        let key = match c.peek()? {
            '\'' | '"' => match value(c)? {
                Value::Str(s) => s,
                _ => return None,
            },
            _ => c.ident()?.to_owned(),
        };
        if !(c.eat("=>") || c.eat(",")) {
            return None;
        }
        let v = value(c)?;
        pairs.push((key, v));
        if !c.eat(",") {
            c.skip_ws();
            if c.peek()? != '}' {
                return None;
            }
        }
    }
}

/// The tags of the call being read, as the scripts' helpers keep them.
struct Tags {
    next: u64,
    call_id: String,
    from: String,
    to: String,
}

impl Tags {
    fn fresh(&mut self, what: &str) -> String {
        let t = format!("{}-test-{what}", self.next);
        self.next += 1;
        t
    }

    fn new_call(&mut self) {
        self.call_id = self.fresh("callID");
        self.from = self.fresh("fromtag");
        self.to = self.fresh("totag");
    }

    fn resolve(&self, r: TagRef) -> String {
        match r {
            TagRef::From => self.from.clone(),
            TagRef::To => self.to.clone(),
        }
    }
}

/// A literal as bencode; `Err` names what is computed at run time.
fn to_bencode(v: &Value, tags: &Tags) -> Result<Option<Bencode>, String> {
    Ok(Some(match v {
        Value::Str(s) => perl_scalar(s),
        Value::Num(n) => Bencode::Int(*n),
        Value::Tag(r) => Bencode::str(&tags.resolve(*r)),
        Value::Undef => return Ok(None),
        Value::List(items) => {
            let mut out = Vec::new();
            for i in items {
                if let Some(b) = to_bencode(i, tags)? {
                    out.push(b);
                }
            }
            Bencode::List(out)
        }
        Value::Hash(pairs) => Bencode::Dict(hash_to_bencode(pairs, tags)?),
        Value::Words(w) => Bencode::List(w.iter().map(|s| perl_scalar(s)).collect()),
        Value::Heredoc(..) => return Err("a heredoc inside the flags".into()),
        Value::Dynamic(text) => return Err(format!("a value computed at run time ({text})")),
    }))
}

fn hash_to_bencode(
    pairs: &[(String, Value)],
    tags: &Tags,
) -> Result<Vec<(Vec<u8>, Bencode)>, String> {
    let mut out = Vec::new();
    for (k, v) in pairs {
        if let Some(b) = to_bencode(v, tags)? {
            out.push((k.as_bytes().to_vec(), b));
        }
    }
    Ok(out)
}

/// A Perl scalar as Perl's `Bencode` writes it: an integer if it reads as one.
fn perl_scalar(s: &str) -> Bencode {
    let digits = s.strip_prefix('-').unwrap_or(s);
    let integer = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'))
        && s != "-0";
    match s.parse::<i64>() {
        Ok(n) if integer => Bencode::Int(n),
        _ => Bencode::str(s),
    }
}

/// A heredoc's text from line `from` (0-based) to its terminator: the text and the line after
/// the terminator, or `None` if it never ends.
fn heredoc_body(lines: &[&str], from: usize, tag: &str) -> Option<(String, usize)> {
    let end = (from..lines.len()).find(|&i| lines[i].trim_end_matches('\r') == tag)?;
    let mut text = String::new();
    for l in &lines[from..end] {
        text.push_str(l.trim_end_matches('\r'));
        text.push('\n');
    }
    Some((text, end + 1))
}

/// Whether `line` is a heredoc's separator of sent and expected SDP: four dashes or more.
fn is_dashes(line: &str) -> bool {
    let t = line.trim_end();
    t.len() >= 4 && t.bytes().all(|b| b == b'-')
}

/// The SDP sent: the heredoc's text up to its first line of four dashes or more, with Perl's
/// interpolation of escapes; `Err` if it interpolates a variable.
fn sdp_input(body: &str, interpolates: bool) -> Result<String, String> {
    let out: String = body
        .split_inclusive('\n')
        .take_while(|l| !is_dashes(l))
        .collect();
    interpolated(out, interpolates)
}

/// The SDP the script expects: the heredoc's text after its line of dashes (if any), as
/// [`sdp_input`] reads the part before it.
fn sdp_expected(body: &str, interpolates: bool) -> Option<String> {
    let mut lines = body.split_inclusive('\n').skip_while(|l| !is_dashes(l));
    lines.next()?;
    let out: String = lines.collect();
    interpolated(out, interpolates)
        .ok()
        .filter(|s| !s.trim().is_empty())
}

/// `out` with Perl's interpolation of escapes when the heredoc interpolates; `Err` if it
/// interpolates a variable.
fn interpolated(out: String, interpolates: bool) -> Result<String, String> {
    if !interpolates {
        return Ok(out);
    }
    let mut s = String::with_capacity(out.len());
    let mut it = out.chars().peekable();
    while let Some(ch) = it.next() {
        match ch {
            '\\' => match it.next() {
                Some('n') => s.push('\n'),
                Some('r') => s.push('\r'),
                Some('t') => s.push('\t'),
                Some(e) => s.push(e),
                None => s.push('\\'),
            },
            '$' | '@'
                if it
                    .peek()
                    .is_some_and(|n| n.is_ascii_alphabetic() || *n == '_' || *n == '{') =>
            {
                let var: String = it
                    .clone()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                return Err(format!("the SDP interpolates {ch}{var}"));
            }
            ch => s.push(ch),
        }
    }
    Ok(s)
}

/// Where a helper's name starts in `line`: the byte offsets of `name` as a whole word, not a
/// method, a sub's definition or part of another name.
fn word_at(line: &str, name: &str) -> Vec<usize> {
    let mut hits = Vec::new();
    let mut from = 0;
    while let Some(i) = line[from..].find(name) {
        let at = from + i;
        from = at + name.len();
        let before = line[..at].chars().next_back();
        let after = line[at + name.len()..].chars().next();
        let word_before =
            before.is_some_and(|c| c.is_ascii_alphanumeric() || "_$@>:'\"".contains(c));
        let word_after = after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        // A call: `name(…)`, or `name;` for the helpers without arguments.
        let called = line[at + name.len()..].trim_start().starts_with(['(', ';']);
        if word_before || word_after || !called || line[..at].trim_end().ends_with("sub") {
            continue;
        }
        hits.push(at);
    }
    hits
}

const HELPERS: [&str; 8] = [
    "new_call",
    "new_call_nc",
    "reverse_tags",
    "new_ft",
    "new_tt",
    "offer",
    "answer",
    "rtpe_req",
];

/// Reads a script (`file` names it in what is reported).
pub fn read_suite(file: &str, text: &str) -> Suite {
    let lines: Vec<&str> = text.split('\n').collect();
    let mut starts = Vec::with_capacity(lines.len());
    let mut off = 0;
    for l in &lines {
        starts.push(off);
        off += l.len() + 1;
    }
    let mut r = Reader {
        file,
        text,
        lines: &lines,
        starts: &starts,
        tags: Tags {
            next: 0,
            call_id: String::new(),
            from: String::new(),
            to: String::new(),
        },
        suite: Suite::default(),
        broken: false,
    };
    r.tags.new_call();
    r.run();
    r.suite
}

struct Reader<'a> {
    file: &'a str,
    text: &'a str,
    lines: &'a [&'a str],
    starts: &'a [usize],
    tags: Tags,
    suite: Suite,
    /// The call being read has lost a request: its later requests are skipped too.
    broken: bool,
}

impl Reader<'_> {
    fn run(&mut self) {
        let mut i = 0;
        let mut pod = false;
        while i < self.lines.len() {
            let line = self.lines[i];
            let t = line.trim_start();
            if t.starts_with("=cut") {
                pod = false;
                i += 1;
                continue;
            }
            if pod || t.starts_with('#') {
                i += 1;
                continue;
            }
            if t.starts_with("=pod") || t.starts_with("=head") || t.starts_with("=begin") {
                pod = true;
                i += 1;
                continue;
            }
            i = self.line(i);
        }
    }

    /// Reads the helpers called on line `i`; the next line to read.
    fn line(&mut self, i: usize) -> usize {
        let line = self.lines[i];
        let code = line.split(" #").next().unwrap_or(line);
        let mut hits: Vec<(usize, &str)> = HELPERS
            .iter()
            .flat_map(|h| word_at(code, h).into_iter().map(move |at| (at, *h)))
            .collect();
        hits.sort();
        for (at, helper) in hits {
            match helper {
                "new_call" | "new_call_nc" => {
                    self.tags.new_call();
                    self.broken = false;
                }
                "reverse_tags" => std::mem::swap(&mut self.tags.from, &mut self.tags.to),
                "new_ft" => self.tags.from = self.tags.fresh("fromtag"),
                "new_tt" => self.tags.to = self.tags.fresh("totag"),
                _ => return self.request(i, self.starts[i] + at + helper.len(), helper),
            }
        }
        match heredoc_tag(code) {
            Some(tag) => heredoc_body(self.lines, i + 1, &tag).map_or(i + 1, |(_, next)| next),
            None => i + 1,
        }
    }

    fn skip(&mut self, line: usize, command: &str, why: String) {
        self.suite.skipped.push(Skipped {
            file: self.file.to_owned(),
            line: line + 1,
            command: command.to_owned(),
            why,
        });
    }

    /// A request whose arguments start at byte `at` of the text (after the helper's name), on
    /// line `i`; the next line to read.
    fn request(&mut self, i: usize, at: usize, helper: &str) -> usize {
        let mut c = Cursor {
            text: self.text,
            at,
        };
        let args = if c.eat("(") {
            list_items(&mut c, ')')
        } else {
            None
        };
        // The line the statement ends on (a heredoc's body starts after it).
        let end_line = self
            .starts
            .partition_point(|&s| s <= c.at)
            .saturating_sub(1);
        let Some(mut args) = args else {
            self.skip(
                i,
                helper,
                "the request's arguments do not read as literals".into(),
            );
            self.broken = true;
            return end_line + 1;
        };
        let (command, name) = if helper == "rtpe_req" {
            match args.first() {
                Some(Value::Str(cmd)) => {
                    let cmd = cmd.clone();
                    args.remove(0);
                    (cmd, args.first().cloned())
                }
                _ => {
                    self.skip(i, helper, "a command computed at run time".into());
                    return end_line + 1;
                }
            }
        } else {
            (helper.to_owned(), args.first().cloned())
        };
        let name = match name {
            Some(Value::Str(s) | Value::Dynamic(s)) => s,
            _ => String::new(),
        };
        let flags = args.get(1);
        let mut next = end_line + 1;
        let mut sdp = None;
        let mut expected = None;
        if let Some(Value::Heredoc(tag, interpolates)) = args.get(2) {
            match heredoc_body(self.lines, end_line + 1, tag) {
                Some((body, after)) => {
                    next = after;
                    sdp = Some(sdp_input(&body, *interpolates));
                    expected = sdp_expected(&body, *interpolates);
                }
                None => {
                    self.skip(i, &command, format!("heredoc {tag} does not end"));
                    return self.lines.len();
                }
            }
        } else if command == "offer" || command == "answer" {
            sdp = Some(Err("the SDP is not a heredoc".into()));
        }
        if self.broken {
            self.skip(
                i,
                &command,
                "an earlier request of its call was skipped".into(),
            );
            return next;
        }
        match self.step(i, &command, name, flags, sdp) {
            Ok(step) => self.push(Step { expected, ..step }),
            Err(why) => {
                self.skip(i, &command, why);
                self.broken = true;
            }
        }
        next
    }

    fn step(
        &self,
        i: usize,
        command: &str,
        name: String,
        flags: Option<&Value>,
        sdp: Option<Result<String, String>>,
    ) -> Result<Step, String> {
        let mut body = match flags {
            Some(Value::Hash(pairs)) => hash_to_bencode(pairs, &self.tags)?,
            None => Vec::new(),
            Some(other) => return Err(format!("flags that are not a hash literal ({other:?})")),
        };
        let given = |k: &str| body.iter().any(|(n, _)| n == k.as_bytes());
        let offer_answer = command == "offer" || command == "answer";
        let from_tag = (offer_answer && !given("from-tag")).then(|| self.tags.from.clone());
        let to_tag = (command == "answer" && !given("to-tag")).then(|| self.tags.to.clone());
        if let Some(sdp) = sdp {
            body.push((b"sdp".to_vec(), Bencode::str(&sdp?)));
        }
        Ok(Step {
            line: i + 1,
            command: command.to_owned(),
            name,
            from_tag,
            to_tag,
            body: body
                .into_iter()
                .map(|(k, v)| (String::from_utf8_lossy(&k).into_owned(), v))
                .collect(),
            expected: None,
        })
    }

    fn push(&mut self, step: Step) {
        let same_call = self
            .suite
            .calls
            .last()
            .is_some_and(|c| c.call_id == self.tags.call_id && c.file == self.file);
        if !same_call {
            self.suite.calls.push(SuiteCall {
                file: self.file.to_owned(),
                call_id: self.tags.call_id.clone(),
                steps: Vec::new(),
            });
        }
        if let Some(c) = self.suite.calls.last_mut() {
            c.steps.push(step);
        }
    }
}

/// The terminator of a heredoc a line of code opens (`<<TAG`, `<<"TAG"`, `<<'TAG'`).
fn heredoc_tag(code: &str) -> Option<String> {
    let at = code.find("<<")?;
    let rest = code[at + 2..].trim_start_matches(['"', '\'']);
    let n = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    (n > 0 && rest.starts_with(|c: char| c.is_ascii_uppercase())).then(|| rest[..n].to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    // A script in the form of rtpengine's, with SDP of our own.
    const SCRIPT: &str = "use strict;\n\
sub offer {\n\treturn offer_answer('offer', @_);\n}\n\
new_call;\n\
\n\
offer('first, plain', { ICE => 'remove', flags => [qw(trust-address)],\n\
\t\t'transport-protocol' => 'RTP/AVP', ptime => '30', codec => { strip => ['all'], offer => [qw,PCMA,] } }, <<SDP);\n\
v=0\n\
o=- 100 1 IN IP4 192.0.2.1\n\
s=x\n\
t=0 0\n\
m=audio 4000 RTP/AVP 8 0\n\
c=IN IP4 192.0.2.1\n\
--------------------------\n\
v=0\n\
m=audio PORT RTP/AVP 8\n\
SDP\n\
\n\
# offer('commented out', { }, <<SDP);\n\
answer('first, answer', { 'to-tag' => tt() }, <<SDP);\n\
v=0\n\
m=audio 4002 RTP/AVP 8\n\
------\n\
SDP\n\
reverse_tags();\n\
rtpe_req('delete', 'remove it', { 'from-tag' => ft() });\n\
new_call;\n\
offer('needs a port', { }, <<SDP);\n\
m=audio $port_a RTP/AVP 0\n\
----\n\
SDP\n\
answer('after a skipped offer', { }, <<SDP);\n\
m=audio 4 RTP/AVP 0\n\
----\n\
SDP\n\
my $x = <<SDP;\n\
offer('inside another heredoc', { }, <<X);\n\
SDP\n\
new_call;\n\
($a, $b) = offer(\"quoted \\\"name\\\"\", { }, <<'END');\n\
v=0\n\
-----\n\
END\n";

    #[test]
    fn a_script_reads_into_its_calls_and_requests() {
        let s = read_suite("t.pl", SCRIPT);
        assert_eq!(s.calls.len(), 2, "{s:#?}");
        let c = &s.calls[0];
        assert_eq!(c.call_id, "3-test-callID");
        let cmds: Vec<&str> = c.steps.iter().map(|s| s.command.as_str()).collect();
        assert_eq!(cmds, ["offer", "answer", "delete"]);
        let o = &c.steps[0];
        assert_eq!(o.name, "first, plain");
        assert_eq!(o.from_tag.as_deref(), Some("4-test-fromtag"));
        assert_eq!(o.to_tag, None);
        let get = |k: &str| o.body.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(get("ICE"), Some(Bencode::str("remove")));
        assert_eq!(get("ptime"), Some(Bencode::Int(30)));
        assert_eq!(
            get("flags"),
            Some(Bencode::List(vec![Bencode::str("trust-address")]))
        );
        assert_eq!(
            get("codec").and_then(|d| d.get("offer").cloned()),
            Some(Bencode::List(vec![Bencode::str("PCMA")]))
        );
        assert_eq!(
            o.sdp().as_deref(),
            Some("v=0\no=- 100 1 IN IP4 192.0.2.1\ns=x\nt=0 0\nm=audio 4000 RTP/AVP 8 0\nc=IN IP4 192.0.2.1\n")
        );
        // What the script expects back, after the dashes.
        assert_eq!(o.expected.as_deref(), Some("v=0\nm=audio PORT RTP/AVP 8\n"));
        let a = &c.steps[1];
        assert_eq!(a.expected, None);
        assert_eq!(a.from_tag.as_deref(), Some("4-test-fromtag"));
        assert_eq!(a.to_tag, None, "the flags give the to-tag");
        assert_eq!(a.sdp().as_deref(), Some("v=0\nm=audio 4002 RTP/AVP 8\n"));
        let d = &c.steps[2];
        assert_eq!(
            d.body,
            vec![("from-tag".to_owned(), Bencode::str("5-test-totag"))]
        );
        // The call whose offer needs a value computed at run time is left out whole.
        let why: Vec<String> = s
            .skipped
            .iter()
            .map(|k| format!("{}: {}", k.line, k.why))
            .collect();
        assert_eq!(s.skipped.len(), 2, "{why:?}");
        assert!(why[0].contains("$port_a"), "{why:?}");
        assert!(why[1].contains("earlier request"), "{why:?}");
        let q = &s.calls[1].steps[0];
        assert_eq!(q.name, "quoted \"name\"");
        assert_eq!(q.sdp().as_deref(), Some("v=0\n"));
    }

    #[test]
    fn requests_for_t38_recording_or_dtmf_injection_are_out_of_scope() {
        let step = |body: Vec<(&str, Bencode)>| Step {
            line: 1,
            command: "offer".into(),
            name: "x".into(),
            from_tag: None,
            to_tag: None,
            body: body.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
            expected: None,
        };
        let sdp = |m: &str| ("sdp", Bencode::str(&format!("v=0\r\n{m}\r\n")));
        let flags = |f: &[&str]| {
            (
                "flags",
                Bencode::List(f.iter().map(|s| Bencode::str(s)).collect()),
            )
        };
        let plain = step(vec![
            flags(&["trust-address"]),
            sdp("m=audio 4000 RTP/AVP 0"),
        ]);
        assert_eq!(plain.out_of_scope(), None);
        let cases = [
            (
                step(vec![
                    ("T.38", Bencode::List(vec![Bencode::str("decode")])),
                    sdp("m=audio 4000 RTP/AVP 0"),
                ]),
                "T.38",
            ),
            (step(vec![sdp("m=image 4000 udptl t38")]), "T.38"),
            (step(vec![flags(&["inject DTMF"])]), "DTMF injection"),
            (
                step(vec![flags(&["strict-source", "record-call"])]),
                "recording",
            ),
            (
                step(vec![("record call", Bencode::str("yes"))]),
                "recording",
            ),
        ];
        for (s, why) in cases {
            assert_eq!(s.out_of_scope(), Some(why), "{:?}", s.body);
        }
        // `record-call: no` asks for nothing.
        assert_eq!(
            step(vec![("record-call", Bencode::str("no"))]).out_of_scope(),
            None
        );
    }

    #[test]
    fn perl_scalars_become_integers_as_perls_bencode_writes_them() {
        assert_eq!(perl_scalar("30"), Bencode::Int(30));
        assert_eq!(perl_scalar("-4"), Bencode::Int(-4));
        assert_eq!(perl_scalar("030"), Bencode::str("030"));
        assert_eq!(perl_scalar("1.5"), Bencode::str("1.5"));
        assert_eq!(perl_scalar(""), Bencode::str(""));
    }
}
