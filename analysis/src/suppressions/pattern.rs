//! The patterns: valgrind's globs and LeakSanitizer's templates, each matched in time bounded
//! by the name it is matched against, whatever the pattern.

/// valgrind's globs: `*` any run of characters, `?` any one, `\` takes the next literally.
/// Runs of `*` are kept as one, so that matching costs what the name does, not the pattern.
#[derive(Debug)]
pub(super) struct Glob(pub(super) String);

impl Glob {
    pub(super) fn new(p: &str) -> Glob {
        Glob(collapse_stars(p, true))
    }

    pub(super) fn is_plain(&self) -> bool {
        !self.0.contains(['*', '?', '\\'])
    }

    pub(super) fn matches(&self, s: &str) -> bool {
        glob(self.0.as_bytes(), s.as_bytes())
    }
}

/// `p` with each run of `*` made one `*` (an escaped one, when `escapes`, left as it is).
fn collapse_stars(p: &str, escapes: bool) -> String {
    let mut out = String::with_capacity(p.len());
    let mut chars = p.chars();
    let mut star = false;
    while let Some(c) = chars.next() {
        if c == '*' && star {
            continue;
        }
        star = c == '*';
        out.push(c);
        if escapes && c == '\\' {
            if let Some(next) = chars.next() {
                out.push(next);
            }
        }
    }
    out
}

/// The glob `p` up to its first `*` that is not escaped, and what follows that `*`.
fn segment(p: &[u8]) -> (&[u8], Option<&[u8]>) {
    let mut i = 0;
    while i < p.len() {
        match p[i] {
            b'\\' => i += 2,
            b'*' => return (&p[..i], Some(&p[i + 1..])),
            _ => i += 1,
        }
    }
    (p, None)
}

/// Whether the segment `seg` (no `*`) matches `s` from its start, and how many bytes of `s` it
/// covers; it stops at the first byte that differs, so it costs no more than `s` is long.
fn fits(seg: &[u8], s: &[u8]) -> Option<usize> {
    let (mut i, mut n) = (0, 0);
    while i < seg.len() {
        let c = *s.get(n)?;
        match seg[i] {
            b'?' => i += 1,
            b'\\' => {
                if seg.get(i + 1) != Some(&c) {
                    return None;
                }
                i += 2;
            }
            b => {
                if b != c {
                    return None;
                }
                i += 1;
            }
        }
        n += 1;
    }
    Some(n)
}

/// How many bytes of a name the segment `seg` covers, counted no further than `limit` + 1.
fn width(seg: &[u8], limit: usize) -> usize {
    let (mut i, mut n) = (0, 0);
    while i < seg.len() && n <= limit {
        i += if seg[i] == b'\\' { 2 } else { 1 };
        n += 1;
    }
    n
}

/// Whether the glob `p` matches all of `s`. The pieces between `*`s are placed leftmost in turn
/// (which leaves the most room for those after them): time bounded by the square of the name's
/// length whatever the pattern, and no memory.
pub(super) fn glob(p: &[u8], s: &[u8]) -> bool {
    let (first, mut rest) = segment(p);
    let Some(n) = fits(first, s) else {
        return false;
    };
    let mut at = n;
    let Some(mut after) = rest.take() else {
        return at == s.len();
    };
    loop {
        let (seg, next) = segment(after);
        match next {
            None => {
                // The last piece ends where the name does.
                let w = width(seg, s.len() - at);
                return w <= s.len() - at && fits(seg, &s[s.len() - w..]) == Some(w);
            }
            Some(next) => {
                let mut k = at;
                at = loop {
                    if k > s.len() {
                        return false;
                    }
                    if let Some(w) = fits(seg, &s[k..]) {
                        break k + w;
                    }
                    k += 1;
                };
                after = next;
            }
        }
    }
}

/// LeakSanitizer's pattern: literal pieces between `*`s, optionally anchored. The pieces are
/// read from `body` as matching walks it, and runs of `*` are kept as one.
#[derive(Debug)]
pub(super) struct Template {
    start: bool,
    end: bool,
    body: String,
    /// Where in `body` the longest literal piece is.
    key: Option<std::ops::Range<usize>>,
}

impl Template {
    pub(super) fn new(t: &str) -> Template {
        let (start, t) = match t.strip_prefix('^') {
            Some(rest) => (true, rest),
            None => (false, t),
        };
        let (end, t) = match t.strip_suffix('$') {
            Some(rest) => (true, rest),
            None => (false, t),
        };
        let body = collapse_stars(t, false);
        let mut key: Option<std::ops::Range<usize>> = None;
        let mut from = 0;
        for piece in body.split('*') {
            if !piece.is_empty() && key.as_ref().is_none_or(|k| piece.len() > k.len()) {
                key = Some(from..from + piece.len());
            }
            from += piece.len() + 1;
        }
        Template {
            start,
            end,
            body,
            key,
        }
    }

    /// The longest literal piece, which any string it matches contains.
    pub(super) fn key(&self) -> Option<&str> {
        self.key.clone().map(|k| &self.body[k])
    }

    /// LSan's matching: each piece found leftmost after the one before it, so the time is linear
    /// in the string (a piece longer than what is left fails at once).
    pub(super) fn matches(&self, s: &str) -> bool {
        if s.is_empty() {
            return false;
        }
        let mut rest = s;
        let mut pieces = self.body.split('*').peekable();
        let mut first = true;
        while let Some(piece) = pieces.next() {
            let last = pieces.peek().is_none();
            if first && self.start {
                first = false;
                match rest.strip_prefix(piece) {
                    Some(r) => rest = r,
                    None => return false,
                }
                if last && self.end && !rest.is_empty() {
                    return false;
                }
                continue;
            }
            first = false;
            if last && self.end {
                return rest.len() >= piece.len() && rest.ends_with(piece);
            }
            match rest.find(piece) {
                Some(at) => rest = &rest[at + piece.len()..],
                None => return false,
            }
        }
        true
    }
}
