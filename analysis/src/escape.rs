//! Input echoed in a message, with its control characters made visible: an option, a path or
//! a name read from a core can hold an escape sequence, and printed raw it would move the
//! cursor, clear the screen or retitle the terminal of whoever reads the message. The library's
//! warnings (written without allocating) and the launcher's messages escape the same way.

/// Calls `emit` with `bytes` piece by piece, each control character written as `\xNN` (`\u{NN}`
/// for the C1 controls, U+0080 to U+009F) and each byte that is not part of valid UTF-8 as
/// `\xNN`; everything else as it was.
pub fn escape(bytes: &[u8], emit: &mut dyn FnMut(&[u8])) {
    for chunk in bytes.utf8_chunks() {
        let text = chunk.valid();
        let mut from = 0;
        for (at, c) in text.char_indices() {
            if !c.is_control() {
                continue;
            }
            emit(&text.as_bytes()[from..at]);
            let code = c as u32;
            let digits = [hex(code >> 4), hex(code)];
            if code < 0x80 {
                emit(b"\\x");
                emit(&digits);
            } else {
                emit(b"\\u{");
                emit(&digits);
                emit(b"}");
            }
            from = at + c.len_utf8();
        }
        emit(&text.as_bytes()[from..]);
        for &b in chunk.invalid() {
            emit(&[b'\\', b'x', hex(b as u32 >> 4), hex(b as u32)]);
        }
    }
}

/// Text that echoes input, as [`escape`] writes it, in a string.
pub fn escaped(bytes: &[u8]) -> String {
    let mut out = Vec::with_capacity(bytes.len());
    escape(bytes, &mut |piece| out.extend_from_slice(piece));
    // Only valid UTF-8 and ASCII escapes come out.
    String::from_utf8(out).unwrap_or_default()
}

/// A path (or any word of input) for messages: its control characters and bytes that are not
/// UTF-8 shown as escapes, so a name can never act on the terminal that prints it.
pub fn show(p: impl AsRef<std::ffi::OsStr>) -> String {
    use std::os::unix::ffi::OsStrExt;
    escaped(p.as_ref().as_bytes())
}

/// Lines of text made safe to print and to put in an XML CDATA section: [`escape`] within each
/// line, the newlines kept, and U+FFFE and U+FFFF (which XML 1.0 cannot carry) shown by their
/// code points.
pub fn lines(s: &str) -> String {
    let mut out = Vec::with_capacity(s.len());
    for (i, line) in s.split('\n').enumerate() {
        if i > 0 {
            out.push(b'\n');
        }
        escape(line.as_bytes(), &mut |piece| out.extend_from_slice(piece));
    }
    String::from_utf8_lossy(&out)
        .replace('\u{fffe}', "\\u{fffe}")
        .replace('\u{ffff}', "\\u{ffff}")
}

/// Text for XML or HTML, in an element or a quoted attribute: the markup characters as
/// entities, tabs and newlines kept, and the other control characters (which XML 1.0 cannot
/// carry at all) shown as by [`escape`], and U+FFFE/U+FFFF by their code points. valgrind's XML, the timeline's SVG and
/// page and `dmem serve`'s index all quote names read from a core or a process with it.
pub fn markup(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\t' | '\n' => out.push(c),
            c if c.is_control() => {
                let mut buf = [0u8; 4];
                escape(c.encode_utf8(&mut buf).as_bytes(), &mut |p| {
                    out.push_str(std::str::from_utf8(p).unwrap_or("?"))
                });
            }
            '\u{fffe}' => out.push_str("\\u{fffe}"),
            '\u{ffff}' => out.push_str("\\u{ffff}"),
            c => out.push(c),
        }
    }
    out
}

fn hex(v: u32) -> u8 {
    b"0123456789abcdef"[(v & 15) as usize]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escaped(b: &[u8]) -> String {
        let mut out = Vec::new();
        escape(b, &mut |p| out.extend_from_slice(p));
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn controls_and_broken_bytes_are_shown_and_the_rest_kept() {
        assert_eq!(escaped(b"plain/path.c"), "plain/path.c");
        assert_eq!(escaped(b"a\x1b[2Jb\n\x7f"), "a\\x1b[2Jb\\x0a\\x7f");
        assert_eq!(escaped("é\u{9b}31m".as_bytes()), "é\\u{9b}31m");
        assert_eq!(escaped(b"x\xffy\xc3"), "x\\xffy\\xc3");
    }

    #[test]
    fn lines_keep_their_newlines_and_lose_the_rest() {
        assert_eq!(
            lines("a\u{1b}]0;x\u{7}\n\tb\u{ffff}\n"),
            "a\\x1b]0;x\\x07\n\\x09b\\u{ffff}\n"
        );
    }

    #[test]
    fn markup_quotes_what_xml_and_html_give_meaning_or_cannot_carry() {
        assert_eq!(
            markup("std::map<int, A&> \"q\" 'a'"),
            "std::map&lt;int, A&amp;&gt; &quot;q&quot; &#39;a&#39;"
        );
        assert_eq!(
            markup("a\u{1}b\tc\nd\u{9b}\u{ffff}"),
            "a\\x01b\tc\nd\\u{9b}\\u{ffff}"
        );
    }
}
