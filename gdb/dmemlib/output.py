"""What every command shares on its way in and out: the options (one table, one parser), the
address argument of `whatis` and `why`, numbers and plurals, frames as text, and JSON."""

import json
import re

from .errors import UsageError
from .reach import CLASSES, SHOW_WORDS

JSON_FORMAT = 1

# The filters of the listing commands; every listing command takes them and --json.
FILTERS = ("--min-size", "--thread", "--match", "--limit")
LISTING = ("--json",) + FILTERS

WORD_TYPES = ("u8", "u16", "u32", "u64")


def hexa(addr):
    return "0x%x" % int(addr)


def plural(n, word):
    return "%d %s%s" % (n, word, "" if n == 1 else "s")


def dump(obj):
    """A command's JSON document as printed."""
    return json.dumps(obj, indent=1) + "\n"


def frames_text(sym, frames, indent="    "):
    """The lines of a stack, as the text output of every command shows it."""
    if not frames:
        return [indent + "(no stack recorded)"]
    return [indent + sym.text(pc) for pc in frames]


def stack_json(sym, frames):
    return [sym.as_json(pc) for pc in frames]


class Options:
    """Parsed command options; an option not given keeps its default."""

    def __init__(self):
        self.min_size = None
        self.thread = None
        self.match = None
        self.limit = None
        self.json = False
        self.headers = False
        self.leaks = False
        self.vtable = None
        self.offset = None
        self.type = None
        self.show = None
        self.args = []


def _number(opt, text):
    try:
        v = int(text, 0)
    except ValueError:
        raise UsageError("%s wants a number, not %r" % (opt, text)) from None
    if v < 0:
        raise UsageError("%s wants a number >= 0, not %s" % (opt, text))
    return v


def _regex(opt, text):
    try:
        return re.compile(text)
    except re.error as e:
        raise UsageError("bad %s regex %r: %s" % (opt, text, e)) from None


def _word_type(opt, text):
    if text not in WORD_TYPES:
        raise UsageError("%s is one of %s, not %r" % (opt, ", ".join(WORD_TYPES), text))
    return text


def _text(_opt, text):
    return text


def show_classes(opt, text):
    """The leak classes of a --show list (`definite`, `indirect`, `possible`, `reachable` or
    `all`, separated by commas or `+`), in output order."""
    chosen = set()
    words = [w for w in re.split(r"[,+]", text) if w]
    for w in words:
        if w == "all":
            chosen.update(CLASSES)
        elif w in SHOW_WORDS:
            chosen.add(SHOW_WORDS[w])
        else:
            raise UsageError("%s takes definite, indirect, possible, reachable or all, "
                             "separated by commas, not %r" % (opt, w))
    if not words:
        raise UsageError("%s needs at least one of definite, indirect, possible, reachable, all"
                         % opt)
    return tuple(c for c in CLASSES if c in chosen)


# Every option of every command: the attribute it sets, and how its value is read (None for a
# flag, which takes no value).  A command names the ones it accepts.
OPTION_TABLE = {
    "--json": ("json", None),
    "--headers": ("headers", None),
    "--leaks": ("leaks", None),
    "--min-size": ("min_size", _number),
    "--thread": ("thread", _number),
    "--limit": ("limit", _number),
    "--offset": ("offset", _number),
    "--match": ("match", _regex),
    "--vtable": ("vtable", _text),
    "--type": ("type", _word_type),
    "--show": ("show", show_classes),
}


def parse_args(argv, allowed=(), positional=0, usage=""):
    """Parses a command's words (as gdb.string_to_argv splits them): the `allowed` options, as
    `--opt VALUE` or `--opt=VALUE`, then up to `positional` other words; `--` ends the options."""
    o = Options()
    it = iter(argv)
    for w in it:
        if w == "--":
            o.args.extend(it)
            break
        if not w.startswith("--"):
            o.args.append(w)
            continue
        name, eq, val = w.partition("=")
        if name not in allowed or name not in OPTION_TABLE:
            raise UsageError("unknown option %s (usage: %s)" % (name, usage))
        attr, read = OPTION_TABLE[name]
        if read is None:
            if eq:
                raise UsageError("%s takes no value" % name)
            setattr(o, attr, True)
            continue
        if not eq:
            val = next(it, None)
            if val is None:
                raise UsageError("%s needs a value (usage: %s)" % (name, usage))
        setattr(o, attr, read(name, val))
    if len(o.args) > positional:
        raise UsageError("unexpected argument %r (usage: %s)" % (o.args[positional], usage))
    return o


def address_args(text, allowed=("--json",), usage=""):
    """The options and the address expression of `whatis` and `why`.

    Options come first; everything after them is one gdb expression, spaces and all, as gdb's
    own `print` takes it (`held->next`, `p ^ 0x5a5a`, `'file.c'::var`).  An expression wrapped
    whole in one pair of quotes, as a launcher passing one word quotes it, is unwrapped.
    """
    o = Options()
    text = (text or "").strip()
    while text.startswith("--"):
        word, _, rest = text.partition(" ")
        name = word.partition("=")[0]
        if name not in allowed or OPTION_TABLE.get(name, (None, 0))[1] is not None:
            raise UsageError("unknown option %s (usage: %s)" % (word, usage))
        if "=" in word:
            raise UsageError("%s takes no value" % name)
        setattr(o, OPTION_TABLE[name][0], True)
        text = rest.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"" \
            and text[0] not in text[1:-1]:
        text = text[1:-1].strip()
    if not text:
        raise UsageError("an address is needed (usage: %s)" % usage)
    o.args = [text]
    return o
