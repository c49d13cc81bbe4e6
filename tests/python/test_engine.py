"""Unit tests of gdb/dmemlib/engine.py, the plain module behind the gdb commands: where the dmem
binary is looked for, the command lines it gets, and how its answers and errors come back.
Run with `python3 -m unittest discover -s tests/python`."""

import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "gdb"))

from dmemlib import engine  # noqa: E402
from dmemlib.errors import DmemError, UsageError  # noqa: E402


class Done:
    def __init__(self, code, out=b"", err=b""):
        self.returncode, self.stdout, self.stderr = code, out, err


class FindBinaryTests(unittest.TestCase):
    def test_order_is_env_then_installed_then_tree_then_path(self):
        got = engine.candidates("/p/share/dmem", environ={}, which=lambda _: "/usr/bin/dmem")
        self.assertEqual(got, ["/p/bin/dmem", "/p/share/target/release/dmem",
                               "/p/share/target/debug/dmem", "/usr/bin/dmem"])
        self.assertEqual(engine.candidates("/x", environ={"DMEM_BIN": "/opt/dmem"}), ["/opt/dmem"])

    def test_the_source_tree_build_is_found_from_the_script(self):
        got = engine.find_binary("/src/gdb", environ={}, which=lambda _: None,
                                 is_exe=lambda p: p == "/src/target/release/dmem")
        self.assertEqual(got, "/src/target/release/dmem")

    def test_nothing_found_says_where_it_looked(self):
        with self.assertRaises(DmemError) as e:
            engine.find_binary("/src/gdb", environ={}, which=lambda _: None, is_exe=lambda p: False)
        self.assertIn("/src/target/release/dmem", str(e.exception))
        self.assertIn("DMEM_BIN", str(e.exception))
        with self.assertRaises(DmemError) as e:
            engine.find_binary("/x", environ={"DMEM_BIN": "/nope"}, is_exe=lambda p: False)
        self.assertIn("DMEM_BIN is /nope", str(e.exception))


class WordsTests(unittest.TestCase):
    def test_an_address_is_the_rest_of_the_line(self):
        self.assertEqual(engine.split_address(["--json", "held->next", "+", "8"], "u"),
                         (["--json"], "held->next + 8"))
        self.assertEqual(engine.split_address(["'a", "b'"], "u"), ([], "a b"))
        with self.assertRaises(UsageError):
            engine.split_address(["--bogus", "x"], "u")
        with self.assertRaises(UsageError):
            engine.split_address([], "u")

    def test_the_folded_file_becomes_an_output_option(self):
        values = ("--min-size", "--match")
        self.assertEqual(engine.folded_words(["--leaks", "--min-size", "16", "out.txt"], "u",
                                             values),
                         ["--leaks", "--min-size", "16", "--output", "out.txt"])
        self.assertEqual(engine.folded_words(["--match", "a b", "f"], "u", values),
                         ["--match", "a b", "--output", "f"])
        with self.assertRaises(UsageError):
            engine.folded_words(["--leaks"], "u", values)
        with self.assertRaises(UsageError):
            engine.folded_words(["a", "b"], "u", values)

    def test_the_image_is_the_core_or_the_stopped_process(self):
        self.assertEqual(engine.image_args(core="/c", program="/p"), ["/p", "/c"])
        self.assertEqual(engine.image_args(core="/c"), ["/c"])
        self.assertEqual(engine.image_args(core="/c", program="/p", sysroot="/tree"),
                         ["--sysroot", "/tree", "/p", "/c"])
        self.assertEqual(engine.image_args(core="/c", sysroot="target:"), ["/c"])
        self.assertEqual(engine.image_args(pid=42, registers_file="/r"),
                         ["--registers", "/r", "42"])
        with self.assertRaises(DmemError):
            engine.image_args()
        argv = engine.command_line("/b/dmem", "why", ["--json"], ["--registers", "/r", "42"],
                                   address="0x10")
        self.assertEqual(argv, ["/b/dmem", "why", "--json", "--registers", "/r", "42", "0x10"])
        argv = engine.command_line("/b/dmem", "leaks", ["--json"], ["/p", "/c"])
        self.assertEqual(argv, ["/b/dmem", "leaks", "/p", "/c", "--json"])

    def test_registers_are_json_without_the_unreadable_ones(self):
        text = engine.registers_json([(7, {"rsp": 4096, "fs_base": None}), (8, {})])
        self.assertEqual(json.loads(text), [{"tid": 7, "regs": {"rsp": 4096}},
                                            {"tid": 8, "regs": {}}])

    def test_the_catalog_is_the_binarys_answer_in_the_format_read_here(self):
        doc = {"format": engine.CATALOG_FORMAT, "commands": [], "aliases": [],
               "value_options": [], "registers": ["rsp"]}
        ok = Done(0, json.dumps(doc).encode())
        self.assertEqual(engine.catalog("dmem", runner=lambda *a, **k: ok), doc)
        newer = Done(0, json.dumps(dict(doc, format=99)).encode())
        with self.assertRaises(DmemError) as e:
            engine.catalog("dmem", runner=lambda *a, **k: newer)
        self.assertIn("another format", str(e.exception))
        with self.assertRaises(DmemError):
            engine.catalog("dmem", runner=lambda *a, **k: Done(0, b"not json"))

    def test_the_registers_file_is_gone_afterwards(self):
        seen = []

        def action(path):
            with open(path) as f:
                seen.append((path, json.load(f)))
            return "answer"

        self.assertEqual(engine.with_registers_file([(1, {"rax": 1})], action), "answer")
        self.assertEqual(seen[0][1], [{"tid": 1, "regs": {"rax": 1}}])
        self.assertFalse(os.path.exists(seen[0][0]))


class RunTests(unittest.TestCase):
    def test_the_answer_and_the_side_notes_come_back(self):
        out = engine.run(["dmem", "summary"], runner=lambda *a, **k: Done(0, b"total\n", b"note\n"))
        self.assertEqual(out, ("total\n", "note\n"))

    def test_an_error_is_its_last_line_without_the_prefix(self):
        done = Done(1, b"", b"warning: x\ndmem leaks: core.1 has no libdmem.so loaded\n")
        with self.assertRaises(DmemError) as e:
            engine.run(["dmem", "leaks"], runner=lambda *a, **k: done)
        self.assertEqual(str(e.exception), "core.1 has no libdmem.so loaded")
        with self.assertRaises(DmemError) as e:
            engine.run(["dmem", "leaks"], runner=lambda *a, **k: Done(3))
        self.assertIn("status 3", str(e.exception))

    def test_an_answer_that_found_problems_comes_back_as_an_answer(self):
        said = b"header 0x1000: bad magic\ndmem verify: 1 problem found\n"
        out = engine.run(["dmem", "verify"], runner=lambda *a, **k: Done(1, said, b""))
        self.assertEqual(out, (said.decode(), ""))

    def test_a_missing_binary_is_one_line(self):
        def boom(*a, **k):
            raise OSError(2, "No such file or directory")
        with self.assertRaises(DmemError) as e:
            engine.run(["/nope/dmem"], runner=boom)
        self.assertIn("cannot run /nope/dmem", str(e.exception))

    def test_a_real_process_is_run(self):
        out, err = engine.run([sys.executable, "-c", "print('hi')"], runner=subprocess.run)
        self.assertEqual(out, "hi\n")


if __name__ == "__main__":
    unittest.main()
