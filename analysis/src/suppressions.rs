//! Suppression files, as LeakSanitizer and valgrind's memcheck read them, matched against a
//! block's stack; and valgrind's suppression for a stack, as `--gen-suppressions` writes it.
//! The exit report and the launcher both read, match and write them here.
//!
//! A file's format is told by its first line that is neither blank nor a comment: `{` opens
//! valgrind's blocks, anything else is LeakSanitizer's `TYPE:PATTERN` lines.
//!
//! - LeakSanitizer: a `leak:PATTERN` suppresses a block when PATTERN matches, for any frame of
//!   its stack, the module's path, the demangled function name or the source file's path, as
//!   LSan's `TemplateMatch`: a substring match, `*` for any run of characters, `^` and `$`
//!   anchoring it at the start or end. It suppresses what LSan would report, a lost block
//!   (definitely, indirectly or possibly), never a still-reachable one, which LSan never counts
//!   as a leak. Other types (`race:`, `interceptor_via_fun:`) are skipped.
//! - valgrind: `{ NAME  Memcheck:Leak  [match-leak-kinds: KINDS]  LOCATIONS }`, locations
//!   `fun:GLOB` (a function's symbol, mangled, as valgrind matches it; inlined functions by
//!   their DWARF name), `obj:GLOB` (the object's path), `src:FILE[:LINE]` and `...` (any number
//!   of frames); globs have `*` and `?`. They match a prefix of the stack from the allocation
//!   function (`fun:malloc`) down, as memcheck matches, and valgrind's default `--num-callers`
//!   of 12 bounds the locations it reads. Other kinds (`Memcheck:Cond`, `Helgrind:Race`) are
//!   skipped.
//!
//! Each frame's names are matched once however many suppressions there are: LeakSanitizer's
//! patterns through one Aho-Corasick automaton of their literal pieces, valgrind's through the
//! one plain function name each needs. And a stack's return addresses are named only as far as
//! matching reads them (`Frames`): naming the first address in an object reads that object's
//! debug info whole, which costs more than all the matching.//!
//! The parts: `file` reads and parses a file, `pattern` matches valgrind's globs and LSan's
//! templates, `matcher` finds the suppression for a stack, `generate` writes one, and `stack`
//! is what they are given.

mod file;
mod generate;
mod matcher;
mod pattern;
mod stack;

pub use file::{check, parse, read, Entry, File, Format, Problem, MAX_FILE};
pub use generate::{below_main_cut, Generated, PLACEHOLDER};
pub use matcher::{Hit, Suppressions, Use};
pub use stack::{Frames, Head, Named, Recorded, Stack};

#[cfg(test)]
mod tests {
    use super::file::*;
    use super::pattern::*;
    use super::*;
    use crate::allocfn::Alloc;
    use crate::frame::Frame;
    use crate::reach::Class;
    use std::path::Path;
    use std::rc::Rc;

    fn frame(sym: &str, demangled: &str, file: &str, obj: &str) -> Frame {
        let mut f = Frame::bare(0x1000 + sym.len() as u64, Some(Rc::from(Path::new(obj))));
        f.symbol = Some(sym.into());
        f.function = Some(demangled.into());
        f.file = Some(file.into());
        f.line = Some(7);
        f
    }

    fn stack(frames: &[Frame]) -> Stack<'_> {
        Stack {
            alloc: Alloc::of(Some("malloc")),
            alloc_object: Some(Path::new("/opt/dmem/libdmem.so")),
            frames,
            truncated: false,
        }
    }

    fn frames() -> Vec<Frame> {
        vec![
            frame(
                "vendor_init",
                "vendor_init",
                "/src/vendor/init.c",
                "/usr/lib/libvendor.so",
            ),
            frame(
                "_ZN2ns4loadIiEEvv",
                "void ns::load<int>()",
                "/src/app/load.cpp",
                "/opt/app/bin",
            ),
            frame("main", "main", "/src/app/main.cpp", "/opt/app/bin"),
            frame(
                "__libc_start_call_main",
                "__libc_start_call_main",
                "libc_start_call_main.h",
                "/lib/libc.so.6",
            ),
        ]
    }

    fn find(text: &str, class: Class) -> Option<Hit> {
        let f = parse("t.supp", text).unwrap();
        let mut s = Suppressions::new(vec![f]);
        let fr = frames();
        s.find(&stack(&fr), class)
    }

    #[test]
    fn lsan_templates_match_as_lsan() {
        let t = Template::new("^foo*bar$");
        assert!(t.matches("foo_x_bar") && !t.matches("xfoobar") && !t.matches("foobarx"));
        assert!(Template::new("load").matches("void ns::load<int>()"));
        assert!(!Template::new("ns::load<*>$").matches("void ns::load<int>()"));
        assert!(Template::new("ns::load<*>()$").matches("void ns::load<int>()"));
        assert!(!Template::new("x").matches(""));
        assert_eq!(
            find("# c\nleak:vendor_init\n", Class::DefinitelyLost),
            Some(Hit { file: 0, entry: 0 })
        );
        assert!(
            find("leak:libvendor.so\n", Class::DefinitelyLost).is_some(),
            "by module"
        );
        assert!(
            find("leak:app/load.cpp\n", Class::IndirectlyLost).is_some(),
            "by file"
        );
        assert!(
            find("leak:app/load.cpp\n", Class::StillReachable).is_none(),
            "LSan never reports a reachable block"
        );
        assert!(find("leak:^vendor$\n", Class::DefinitelyLost).is_none());
        assert!(find("leak:nowhere\nleak:*init\n", Class::DefinitelyLost) == Some(Hit { file: 0, entry: 1 }));
    }

    #[test]
    fn valgrind_blocks_match_from_the_allocation_function() {
        let ok = "{\n n\n Memcheck:Leak\n match-leak-kinds: definite\n fun:malloc\n fun:vendor_init\n}\n";
        assert!(find(ok, Class::DefinitelyLost).is_some());
        assert!(find(ok, Class::PossiblyLost).is_none(), "kinds");
        let no_alloc = "{\n n\n Memcheck:Leak\n fun:vendor_init\n}\n";
        assert!(
            find(no_alloc, Class::DefinitelyLost).is_none(),
            "the first frame is malloc"
        );
        let dots = "{\n n\n Memcheck:Leak\n fun:*alloc\n ...\n fun:main\n}\n";
        assert!(find(dots, Class::DefinitelyLost).is_some());
        let mangled = "{\n n\n Memcheck:Leak\n ...\n fun:_ZN2ns4loadIiEEvv\n}\n";
        assert!(find(mangled, Class::DefinitelyLost).is_some());
        let demangled = "{\n n\n Memcheck:Leak\n ...\n fun:void ns::load<int>()\n}\n";
        assert!(
            find(demangled, Class::DefinitelyLost).is_none(),
            "valgrind matches mangled names"
        );
        let obj = "{\n n\n Memcheck:Leak\n obj:*/vgpreload_memcheck-*.so\n obj:*/libvendor.so\n}\n";
        assert!(find(obj, Class::IndirectlyLost).is_some());
        let src = "{\n n\n Memcheck:Leak\n fun:malloc\n src:init.c:7\n}\n";
        assert!(find(src, Class::IndirectlyLost).is_some());
        let below = "{\n n\n Memcheck:Leak\n ...\n fun:main\n fun:(below main)\n}\n";
        assert!(find(below, Class::IndirectlyLost).is_some());
        let too_long = "{\n n\n Memcheck:Leak\n ...\n fun:(below main)\n fun:x\n}\n";
        assert!(find(too_long, Class::IndirectlyLost).is_none());
    }

    /// A named stack that records which return addresses matching asked to name.
    struct Counting<'a> {
        named: Named<'a>,
        asked: Vec<usize>,
    }

    impl Frames for Counting<'_> {
        fn len(&self) -> usize {
            self.named.len()
        }

        fn object(&mut self, i: usize) -> Option<&Path> {
            self.named.object(i)
        }

        fn frames(&mut self, i: usize) -> &[Frame] {
            if !self.asked.contains(&i) {
                self.asked.push(i);
            }
            self.named.frames(i)
        }
    }

    /// The match, and which return addresses it named.
    fn lazily(text: &str, frames: &[Frame], class: Class) -> (Option<Hit>, Vec<usize>) {
        let mut s = Suppressions::new(vec![parse("t.supp", text).unwrap()]);
        let mut c = Counting {
            named: Named::new(frames),
            asked: Vec::new(),
        };
        let hit = s.find_lazily(Head::of(&stack(frames)), &mut c, class);
        (hit, c.asked)
    }

    #[test]
    fn matching_names_only_the_frames_it_reads() {
        let fr = frames();
        let definite =
            "{\n n\n Memcheck:Leak\n match-leak-kinds: definite\n fun:malloc\n fun:vendor_init\n}\n";
        assert_eq!(
            lazily(definite, &fr, Class::StillReachable),
            (None, vec![]),
            "kinds"
        );
        assert_eq!(
            lazily(definite, &fr, Class::DefinitelyLost),
            (Some(Hit { file: 0, entry: 0 }), vec![0])
        );
        let calloc = "{\n n\n Memcheck:Leak\n fun:calloc\n ...\n fun:main\n}\n";
        assert_eq!(
            lazily(calloc, &fr, Class::DefinitelyLost),
            (None, vec![]),
            "allocation function"
        );
        let dots = "{\n n\n Memcheck:Leak\n fun:malloc\n ...\n fun:main\n}\n";
        assert_eq!(lazily(dots, &fr, Class::DefinitelyLost).1, vec![0, 1, 2]);
        let nowhere = "{\n n\n Memcheck:Leak\n fun:malloc\n ...\n fun:nowhere\n}\n";
        assert_eq!(
            lazily(nowhere, &fr, Class::DefinitelyLost),
            (None, vec![0, 1, 2, 3])
        );
        assert_eq!(
            lazily("leak:libvendor.so\n", &fr, Class::PossiblyLost),
            (Some(Hit { file: 0, entry: 0 }), vec![]),
            "by module, before any name"
        );
        assert_eq!(
            lazily("leak:libvendor.so\n", &fr, Class::StillReachable),
            (None, vec![]),
            "a reachable block, not named"
        );
        assert_eq!(
            lazily("leak:load.cpp\n", &fr, Class::IndirectlyLost).1,
            vec![0, 1]
        );
    }

    #[test]
    fn inlined_frames_are_matched_in_place() {
        // valgrind lists an address's inlined functions, innermost first, before the function
        // they were inlined into; a block generated by valgrind names them all.
        let mut fr = frames();
        let mut inl = frame(
            "pair<std::string const&, 0ul>",
            "std::pair<std::string const&, 0ul>",
            "/usr/include/c++/12/tuple",
            "/opt/app/bin",
        );
        inl.pc = fr[1].pc;
        inl.inlined = true;
        fr.insert(1, inl);
        let block = "{\n n\n Memcheck:Leak\n fun:malloc\n fun:vendor_init\n fun:pair<const std::string&, 0>\n fun:_ZN2ns4loadIiEEvv\n fun:main\n}\n";
        assert_eq!(
            lazily(block, &fr, Class::DefinitelyLost),
            (Some(Hit { file: 0, entry: 0 }), vec![0, 1, 2])
        );
        // The first block names every frame; the second is then tried by the names it needs.
        let dots = "{\n x\n Memcheck:Leak\n ...\n fun:nowhere\n}\n\
                    {\n n\n Memcheck:Leak\n ...\n fun:pair<const std::string&, 0>\n fun:_ZN2ns4loadIiEEvv\n}\n";
        assert_eq!(
            lazily(dots, &fr, Class::DefinitelyLost).0,
            Some(Hit { file: 0, entry: 1 }),
            "template arguments spelled otherwise"
        );
        let file = "leak:c++/12/tuple\n";
        assert!(
            lazily(file, &fr, Class::DefinitelyLost).0.is_some(),
            "an inlined frame's file"
        );
    }

    #[test]
    fn other_kinds_are_skipped_and_errors_name_their_line() {
        let f = parse(
            "a.supp",
            "{\n c\n Memcheck:Cond\n fun:x\n}\n{\n h\n Helgrind:Race\n fun:y\n}\n",
        )
        .unwrap();
        assert!(f.entries.is_empty());
        assert_eq!(
            f.skipped_note().unwrap(),
            "suppressions file a.supp: skipped 2 suppressions of other kinds than Memcheck:Leak (Memcheck:Cond, Helgrind:Race)"
        );
        let e = parse("a.supp", "{\n n\n Memcheck:Leak\n bogus\n}\n").unwrap_err();
        assert_eq!(e.line, 4);
        assert!(
            e.to_string()
                .starts_with("suppressions file a.supp, line 4: a location is"),
            "{e}"
        );
        let e = parse("b.supp", "leak:x\nnot a suppression\n").unwrap_err();
        assert_eq!(
            (e.line, e.what.as_str()),
            (2, "expected TYPE:PATTERN, as leak:PATTERN")
        );
        let f = parse("c.supp", "race:x\nleak:y\n").unwrap();
        assert_eq!((f.format, f.entries.len()), (Format::LeakSanitizer, 1));
        assert!(read("/nonexistent/x.supp")
            .unwrap_err()
            .to_string()
            .ends_with("no such file"));
    }

    #[test]
    fn generated_suppressions_stop_at_main() {
        let fr = frames();
        let g = Generated::new(&stack(&fr), Class::DefinitelyLost);
        assert_eq!(
            g.text(),
            "{\n   <insert_a_suppression_name_here>\n   Memcheck:Leak\n   match-leak-kinds: definite\n   fun:malloc\n   fun:vendor_init\n   fun:_ZN2ns4loadIiEEvv\n   fun:main\n}\n"
        );
        // What dmem writes, dmem reads back as matching that stack alone.
        assert!(find(&g.text(), Class::DefinitelyLost).is_some());
        assert!(find(&g.text(), Class::IndirectlyLost).is_none());
    }

    /// A small seeded generator, so that a failure repeats.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }

        fn word(&mut self, alphabet: &[u8], max: usize) -> String {
            let n = self.below(max + 1);
            (0..n)
                .map(|_| alphabet[self.below(alphabet.len())] as char)
                .collect()
        }
    }

    /// valgrind's glob as the plain recursive definition: the oracle for `glob`.
    fn glob_oracle(p: &[u8], s: &[u8]) -> bool {
        match p.split_first() {
            None => s.is_empty(),
            Some((b'*', rest)) => (0..=s.len()).any(|k| glob_oracle(rest, &s[k..])),
            Some((b'?', rest)) => !s.is_empty() && glob_oracle(rest, &s[1..]),
            Some((b'\\', rest)) => match (rest.split_first(), s.split_first()) {
                (Some((a, rest)), Some((b, s))) => a == b && glob_oracle(rest, s),
                _ => false,
            },
            Some((&c, rest)) => s.first() == Some(&c) && glob_oracle(rest, &s[1..]),
        }
    }

    /// LSan's template as the plain recursive definition: the oracle for `Template`.
    fn template_oracle(t: &str, s: &str) -> bool {
        fn here(p: &[u8], s: &[u8], end: bool) -> bool {
            match p.split_first() {
                None => !end || s.is_empty(),
                Some((b'*', rest)) => (0..=s.len()).any(|k| here(rest, &s[k..], end)),
                Some((&c, rest)) => s.first() == Some(&c) && here(rest, &s[1..], end),
            }
        }
        let (start, t) = t.strip_prefix('^').map_or((false, t), |r| (true, r));
        let (end, t) = t.strip_suffix('$').map_or((false, t), |r| (true, r));
        let (p, s) = (t.as_bytes(), s.as_bytes());
        !s.is_empty() && (0..=if start { 0 } else { s.len() }).any(|k| here(p, &s[k..], end))
    }

    #[test]
    fn globs_and_templates_agree_with_their_definitions() {
        let mut rng = Rng(0x9e3779b97f4a7c15);
        for _ in 0..20_000 {
            let p = rng.word(b"ab*?\\", 8);
            let s = rng.word(b"ab*?\\", 8);
            assert_eq!(
                Glob::new(&p).matches(&s),
                glob_oracle(p.as_bytes(), s.as_bytes()),
                "glob {p:?} on {s:?}"
            );
            let t = format!(
                "{}{}{}",
                if rng.below(3) == 0 { "^" } else { "" },
                rng.word(b"ab*", 7),
                if rng.below(3) == 0 { "$" } else { "" }
            );
            assert_eq!(
                Template::new(&t).matches(&s),
                template_oracle(&t, &s),
                "template {t:?} on {s:?}"
            );
        }
    }

    /// valgrind's `generic_match` as the plain recursive definition over names: the oracle for
    /// `Input::matches`. Past the last frame only `...` matches (nothing).
    fn locs_oracle(locs: &[&str], names: &[&str]) -> bool {
        match locs.split_first() {
            None => true,
            Some((&"...", rest)) => (0..=names.len()).any(|k| locs_oracle(rest, &names[k..])),
            Some((l, rest)) => match names.split_first() {
                Some((n, names)) => glob(l.as_bytes(), n.as_bytes()) && locs_oracle(rest, names),
                None => false,
            },
        }
    }

    #[test]
    fn valgrind_locations_agree_with_generic_match() {
        let mut rng = Rng(0x2545f4914f6cdd1d);
        let pool = ["f", "g", "h", "*", "?"];
        for round in 0..5_000 {
            let names: Vec<String> = (0..rng.below(7)).map(|_| pool[rng.below(3)].to_owned()).collect();
            let fr: Vec<Frame> = names.iter().map(|n| frame(n, n, "/s/x.c", "/o/x.so")).collect();
            let mut locs = vec!["fun:malloc".to_owned()];
            locs.extend((0..rng.below(6)).map(|_| match rng.below(3) {
                0 => "...".to_owned(),
                _ => format!("fun:{}", pool[rng.below(pool.len())]),
            }));
            if locs.iter().skip(1).all(|l| l == "...") && locs.len() > 1 {
                continue;
            }
            let text = format!("{{\n n\n Memcheck:Leak\n {}\n}}\n", locs.join("\n "));
            let mut sup = Suppressions::new(vec![parse("t.supp", &text).unwrap()]);
            let mut st = stack(&fr);
            st.truncated = round % 2 == 0;
            let want = {
                let mut all: Vec<&str> = vec!["malloc"];
                all.extend(names.iter().map(String::as_str));
                let mut ls: Vec<&str> = locs.iter().map(|l| l.strip_prefix("fun:").unwrap_or(l)).collect();
                // A stack recorded whole ends where valgrind's goes on into `obj:*` frames:
                // trailing locations that match any frame may match none there.
                while !st.truncated && ls.last().is_some_and(|l| *l == "..." || *l == "*") {
                    ls.pop();
                }
                locs_oracle(&ls, &all)
            };
            assert_eq!(
                sup.find(&st, Class::DefinitelyLost).is_some(),
                want,
                "{locs:?} on {names:?}"
            );
        }
    }

    #[test]
    fn dots_past_the_recorded_frames_match_nothing() {
        // The stack filled every recorded slot; a `...` reaching past it must not let a name
        // the stack never had match (valgrind: a suppression longer than the stack fails).
        let fr = frames();
        let mut st = stack(&fr);
        st.truncated = true;
        for text in [
            "{\n n\n Memcheck:Leak\n fun:malloc\n ...\n fun:unrelated_library_function\n}\n",
            "{\n n\n Memcheck:Leak\n ...\n fun:main\n fun:__libc_start_call_main\n fun:x\n}\n",
        ] {
            let mut sup = Suppressions::new(vec![parse("t.supp", text).unwrap()]);
            assert_eq!(sup.find(&st, Class::DefinitelyLost), None, "{text}");
        }
        let trailing = "{\n n\n Memcheck:Leak\n fun:malloc\n fun:vendor_init\n ...\n}\n";
        let mut sup = Suppressions::new(vec![parse("t.supp", trailing).unwrap()]);
        assert!(
            sup.find(&st, Class::DefinitelyLost).is_some(),
            "a trailing ... takes nothing"
        );
    }

    #[test]
    fn trailing_wildcards_match_past_the_end_of_a_whole_stack() {
        // valgrind's stack of a static constructor's block goes on past the entry point into
        // junk it writes as `obj:*`; a stack recorded whole ends at the entry point.
        let fr = frames();
        let text = "{\n n\n Memcheck:Leak\n fun:malloc\n fun:vendor_init\n fun:_ZN2ns4loadIiEEvv\n \
                    fun:main\n fun:(below main)\n obj:*\n obj:*\n ...\n}\n";
        let mut sup = Suppressions::new(vec![parse("t.supp", text).unwrap()]);
        let mut st = stack(&fr);
        assert!(sup.find(&st, Class::DefinitelyLost).is_some(), "whole: matched");
        // A stack that filled every slot may have been cut: what lies past it is unknown.
        st.truncated = true;
        assert_eq!(sup.find(&st, Class::DefinitelyLost), None, "cut: not matched");
        // A named frame past the end never matches.
        st.truncated = false;
        let named = "{\n n\n Memcheck:Leak\n fun:malloc\n ...\n fun:(below main)\n obj:*\n fun:x\n}\n";
        let mut sup = Suppressions::new(vec![parse("t.supp", named).unwrap()]);
        assert_eq!(sup.find(&st, Class::DefinitelyLost), None);
    }

    /// Runs `f` on a thread and fails if it has not finished in a minute: far beyond what it
    /// takes, so only a hang (the quadratic or exponential matching this replaced) comes near.
    fn finishes<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(std::time::Duration::from_secs(60))
            .expect("matching did not finish in a minute")
    }

    #[test]
    fn huge_patterns_compile_and_match_in_bounded_time() {
        finishes(|| {
            let fr = frames();
            // One 1 MiB LSan pattern, its pieces matching names partly; and one of stars.
            let long = "vendor*".repeat(150_000);
            let stars = "*".repeat(1 << 20);
            let text = format!(
                "leak:{long}\nleak:^{stars}nothere$\nleak:{}\n",
                "ab".repeat(1 << 19)
            );
            let mut sup = Suppressions::new(vec![parse("t.supp", &text).unwrap()]);
            assert_eq!(sup.find(&stack(&fr), Class::DefinitelyLost), None);
            // valgrind globs of a million stars and of alternating pieces.
            let g = format!("fun:{}", "*?".repeat(1 << 19));
            let text = format!(
                "{{\n n\n Memcheck:Leak\n fun:malloc\n ...\n {g}z\n ...\n fun:{}\n}}\n",
                "a*".repeat(1 << 19)
            );
            let mut sup = Suppressions::new(vec![parse("t.supp", &text).unwrap()]);
            assert_eq!(sup.find(&stack(&fr), Class::DefinitelyLost), None);
        });
    }

    #[test]
    fn any_bytes_parse_to_an_answer() {
        // Random files of the characters suppressions are made of: parsing never panics, and a
        // file's entries are never more than its lines.
        finishes(|| {
            let mut rng = Rng(0xdeadbeefcafef00d);
            let fr = frames();
            let words = [
                "{",
                "}",
                "leak:",
                "Memcheck:Leak",
                "...",
                "fun:",
                "obj:",
                "src:",
                "*",
                "main",
                "\n",
                "match-leak-kinds:",
                "definite",
                "\u{1b}[2J",
                ":",
                "#",
                " ",
            ];
            for _ in 0..3_000 {
                let text: String = (0..rng.below(40))
                    .map(|_| words[rng.below(words.len())])
                    .collect();
                if let Ok(f) = parse("r.supp", &text) {
                    assert!(f.entries.len() <= text.lines().count());
                    let mut sup = Suppressions::new(vec![f]);
                    let _ = sup.find(&stack(&fr), Class::DefinitelyLost);
                } else if let Err(e) = parse("r.supp", &text) {
                    assert!(!e.to_string().contains('\u{1b}'), "{e}");
                }
            }
        });
    }

    #[test]
    fn files_that_are_not_regular_or_too_large_are_refused_without_reading() {
        let dir = std::env::temp_dir().join(format!("dmem-supp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo.supp");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(made.success());
        let fifo = fifo.to_str().unwrap().to_owned();
        // Opening a FIFO with no writer would block; `read` must not.
        let e = finishes(move || read(&fifo).unwrap_err());
        assert!(e.to_string().ends_with("not a regular file"), "{e}");
        assert!(check(e.path.as_str()).is_err());
        let big = dir.join("big.supp");
        std::fs::write(&big, "leak:x\n".repeat((MAX_FILE / 7 + 1) as usize)).unwrap();
        let e = read(big.to_str().unwrap()).unwrap_err();
        assert!(e.what.contains("more than the 4 MiB"), "{e}");
        assert_eq!(check(big.to_str().unwrap()).unwrap_err(), e);
        let dev = read("/dev/zero").unwrap_err();
        assert!(dev.to_string().ends_with("not a regular file"), "{dev}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn globs() {
        assert!(glob(b"*alloc", b"malloc") && glob(b"m?lloc", b"malloc") && !glob(b"m?lloc", b"mlloc"));
        assert!(glob(b"a*b*c", b"aXbYbc") && !glob(b"a*b*c", b"aXbYb"));
        assert!(glob(b"\\*x", b"*x") && !glob(b"\\*x", b"ax"));
    }
}
