//! Real installed programs run with libdmem preloaded (alone and over each backend allocator):
//! exit status, stdout and whatever files the run leaves behind must be identical to the bare
//! run. A program that is not installed is skipped, saying so. Every run has a time limit, so a
//! program that deadlocks under the library (the JVM and lld did, in pthread_getattr_np) fails
//! its test instead of stalling it. The threaded runtimes and compilers (java, node, rustc) and
//! the programs covered first run over every backend; the other tools over glibc's allocator.

mod common;
use common::run;

use run::{assert_none, bare, mismatch, run_limited, status_text, with_dmem, LIMIT};
use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;

/// One program run. It runs in a fresh directory prepared by `setup`, at the same path for the
/// bare and the preloaded run, so outputs that name paths still compare equal.
struct Case {
    name: &'static str,
    /// Programs that must be installed, the first being the one run.
    needs: &'static [&'static str],
    args: &'static [&'static str],
    setup: fn(&Path),
    /// What the run left behind, compared as well (e.g. the output of a program it compiled).
    result: fn(&Path) -> String,
    /// Whether it also runs over jemalloc, tcmalloc and mimalloc (not only glibc's allocator).
    every_backend: bool,
}

fn nothing(_: &Path) {}
fn no_result(_: &Path) -> String {
    String::new()
}

const BASH_SCRIPT: &str = r#"
s=""
for i in $(seq 1 60); do
    x=$( (echo "$i"; echo sub) | tr a-z A-Z )
    s="$s$x"
done
echo "${#s}"
declare -A m
for i in {1..2000}; do m[k$i]=$((i * i)); done
echo "${#m[@]} ${m[k1999]}"
words=()
for i in {1..1500}; do words+=("w$((i % 97))"); done
printf '%s\n' "${words[@]}" | sort | uniq -c | sort -rn | head -3
( cd /; pwd ) ; f() { local v="$1$1"; echo "${v:0:10}"; } ; f abcdefgh
"#;

const PYTHON_SCRIPT: &str = r#"
import collections, json
d = {}
for i in range(60000):
    d["k%d" % (i % 5000)] = [i] * (i % 7)
    if i % 3 == 0:
        d.pop("k%d" % ((i * 7) % 5000), None)
lst = [str(i) * (i % 13) for i in range(20000)]
lst.sort(key=lambda s: (len(s), s))
c = collections.Counter(len(s) for s in lst)
text = json.dumps({k: len(v) for k, v in sorted(d.items())})
print(len(d), sum(len(v) for v in d.values()), len(text), sorted(c.items())[:5])
print(sum(hash(s) % 7 for s in ["a", "b"]) >= 0, len(set(lst)))
"#;

const PERL_SCRIPT: &str = r#"
my %h;
for my $i (1..200000) { $h{"k" . ($i % 7000)} .= chr(65 + $i % 26); delete $h{"k" . ($i * 7 % 7000)} if $i % 5 == 0; }
my @k = sort keys %h;
my $total = 0; $total += length($h{$_}) for @k;
my @parts = map { join(",", reverse split //, $_) } @k[0..99];
print scalar(@k), " $total ", length(join("", @parts)), "\n";
my $s = "x" x 100000; $s =~ s/x{3}/yz/g; print length($s), "\n";
"#;

/// The git session: a repository made, changed and inspected, with fixed names and dates so
/// every run prints the same commit ids.
const GIT_SCRIPT: &str = r#"
set -e
export HOME="$PWD" GIT_CONFIG_NOSYSTEM=1 TZ=UTC
export GIT_AUTHOR_NAME=Tester GIT_AUTHOR_EMAIL=tester@example.com GIT_AUTHOR_DATE="2020-01-10T12:00:00Z"
export GIT_COMMITTER_NAME=Tester GIT_COMMITTER_EMAIL=tester@example.com GIT_COMMITTER_DATE="2020-01-10T12:00:00Z"
git init -q repo
cd repo
git checkout -q -b main
printf 'hello\n' > a.txt
seq 1 2000 > numbers.txt
mkdir dir && printf 'nested\n' > dir/b.txt
git add .
git commit -q -m first
printf 'world\n' >> a.txt
seq 1000 3000 > numbers.txt
git commit -q -am second
git log --stat
git diff --stat HEAD~1
git cat-file -p HEAD
git ls-tree -r HEAD
git fsck --no-progress --strict
"#;

fn write_sort_input(dir: &Path) {
    let mut text = String::new();
    let mut x: u64 = 1;
    for i in 0..150_000 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        writeln!(text, "word{} {} {}", (x >> 33) % 10_000, (x >> 20) % 1000, i % 7).unwrap();
    }
    std::fs::write(dir.join("data.txt"), text).unwrap();
}

const HELLO_C: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
struct item { int key; char name[16]; };
static int cmp(const void *a, const void *b) { return ((const struct item *)a)->key - ((const struct item *)b)->key; }
int main(void) {
    struct item v[100];
    for (int i = 0; i < 100; i++) { v[i].key = (i * 37) % 101; snprintf(v[i].name, sizeof v[i].name, "item%d", i); }
    qsort(v, 100, sizeof v[0], cmp);
    for (int i = 0; i < 100; i += 20) printf("%d %s\n", v[i].key, v[i].name);
    return 0;
}
"#;

fn write_hello(dir: &Path) {
    std::fs::write(dir.join("hello.c"), HELLO_C).unwrap();
}

/// A file's size and a hash of its bytes, or that it is missing.
fn file_digest(path: &Path) -> String {
    let Ok(bytes) = std::fs::read(path) else {
        return format!("no {}", path.display());
    };
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    format!("{} bytes, hash {:x}", bytes.len(), h.finish())
}

/// Which linker wrote an executable, from what each leaves in it: gold its version note, lld a
/// `Linker: LLD` line in `.comment`.
fn linker_of(exe: &Path) -> &'static str {
    let Some(readelf) = find("readelf") else {
        return "unknown (no readelf)";
    };
    let out = run_limited(bare(&readelf, &["-W", "-S", "-p", ".comment"]).arg(exe), LIMIT);
    let text = common::text(&out.stdout);
    if text.contains(".note.gnu.gold-version") {
        "gold"
    } else if text.contains("Linker: LLD") {
        "lld"
    } else {
        "bfd or another"
    }
}

/// What a compiler produced as `hello`: its bytes, the linker that wrote it, and the program's
/// output when run (bare).
fn hello_result(dir: &Path) -> String {
    let exe = dir.join("hello");
    if !exe.exists() {
        return "no program produced".into();
    }
    let out = run_limited(&mut bare(&exe, &[]), LIMIT);
    format!(
        "{}, linked by {}, {}: {}",
        file_digest(&exe),
        linker_of(&exe),
        status_text(&out.status),
        common::text(&out.stdout)
    )
}

const HELLO_CPP: &str = r#"
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>
struct Shape { virtual ~Shape() = default; virtual long area() const = 0; };
struct Rect : Shape { long w, h; Rect(long w, long h) : w(w), h(h) {} long area() const override { return w * h; } };
int main() {
    std::map<std::string, long> m;
    std::vector<std::unique_ptr<Shape>> v;
    for (int i = 0; i < 5000; i++) {
        v.push_back(std::make_unique<Rect>(i % 13, i % 17));
        m["k" + std::to_string(i % 97)] += v.back()->area();
    }
    for (auto &p : m)
        if (p.second % 5 == 0) std::cout << p.first << ' ' << p.second << '\n';
    return 0;
}
"#;

fn write_hello_cpp(dir: &Path) {
    std::fs::write(dir.join("hello.cpp"), HELLO_CPP).unwrap();
}

const HELLO_RS: &str = r#"
use std::collections::BTreeMap;
use std::sync::mpsc;
use std::thread;
fn main() {
    let (tx, rx) = mpsc::channel();
    let workers: Vec<_> = (0..4u64)
        .map(|id| {
            let tx = tx.clone();
            thread::spawn(move || {
                let v: Vec<String> = (0..10_000u64).map(|i| (i * (id + 3) % 1000).to_string()).collect();
                tx.send((id, v.iter().map(|s| s.len()).sum::<usize>())).unwrap();
            })
        })
        .collect();
    drop(tx);
    let totals: BTreeMap<u64, usize> = rx.iter().collect();
    for w in workers {
        w.join().unwrap();
    }
    println!("{totals:?}");
}
"#;

/// hello.rs, and the directory holding rustc's `ld.lld` wrapper around its own `rust-lld`,
/// linked into the scratch directory as `gcc-ld` for the case's `-B gcc-ld`.
fn write_hello_rs(dir: &Path) {
    std::fs::write(dir.join("hello.rs"), HELLO_RS).unwrap();
    let rustc = find("rustc").unwrap();
    let out = run_limited(&mut bare(&rustc, &["--print", "target-libdir"]), LIMIT);
    let libdir = PathBuf::from(common::text(&out.stdout).trim());
    let gcc_ld = libdir.parent().unwrap().join("bin").join("gcc-ld");
    std::os::unix::fs::symlink(gcc_ld, dir.join("gcc-ld")).unwrap();
}

/// A Java program that starts threads (a pool and plain ones), makes garbage until the
/// collector runs, asks for a collection, and uses zlib through Deflater and Inflater, whose
/// memory is native. Written to Main.java at test time; javac and java both run preloaded.
const MAIN_JAVA: &str = r#"
import java.lang.management.GarbageCollectorMXBean;
import java.lang.management.ManagementFactory;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.zip.CRC32;
import java.util.zip.Deflater;
import java.util.zip.Inflater;

public class Main {
    static long collections() {
        long n = 0;
        for (GarbageCollectorMXBean b : ManagementFactory.getGarbageCollectorMXBeans())
            n += Math.max(0, b.getCollectionCount());
        return n;
    }

    static long work(int id) throws Exception {
        long sum = 0;
        for (int round = 0; round < 150; round++) {
            Map<Integer, String> m = new HashMap<>();
            for (int i = 0; i < 2000; i++)
                m.put(i, Integer.toString(i * (id + 1) + round));
            for (String v : m.values())
                sum += v.length();
            byte[] data = String.join(",", m.values()).getBytes("UTF-8");
            Deflater d = new Deflater();
            d.setInput(data);
            d.finish();
            byte[] packed = new byte[data.length + 64];
            int n = d.deflate(packed);
            d.end();
            Inflater inf = new Inflater();
            inf.setInput(packed, 0, n);
            byte[] back = new byte[data.length];
            int got = inf.inflate(back);
            inf.end();
            CRC32 crc = new CRC32();
            crc.update(back, 0, got);
            sum += crc.getValue() % 1000;
        }
        return sum;
    }

    public static void main(String[] args) throws Exception {
        ExecutorService pool = Executors.newFixedThreadPool(4);
        List<Future<Long>> results = new ArrayList<>();
        for (int t = 0; t < 8; t++) {
            final int id = t;
            results.add(pool.submit(() -> work(id)));
        }
        long total = 0;
        for (Future<Long> f : results)
            total += f.get();
        pool.shutdown();
        Thread[] plain = new Thread[4];
        long[] lens = new long[4];
        for (int t = 0; t < 4; t++) {
            final int id = t;
            plain[t] = new Thread(() -> {
                StringBuilder sb = new StringBuilder();
                for (int i = 0; i < 100000; i++)
                    sb.append(i % (id + 7));
                lens[id] = sb.length();
            });
            plain[t].start();
        }
        for (Thread t : plain)
            t.join();
        long before = collections();
        System.gc();
        System.out.println("total " + total);
        System.out.println("lengths " + lens[0] + " " + lens[1] + " " + lens[2] + " " + lens[3]);
        System.out.println("collected after System.gc(): " + (collections() > before));
    }
}
"#;

fn write_main_java(dir: &Path) {
    std::fs::write(dir.join("Main.java"), MAIN_JAVA).unwrap();
}

/// A small heap keeps the collector busy while the threads work.
const JAVA_SCRIPT: &str = "set -e; javac Main.java; java -Xmx64m -cp . Main";

/// Worker threads, libuv's thread pool (zlib, pbkdf2) and the V8 heap, with a fixed result.
const NODE_SCRIPT: &str = r#"
const crypto = require('crypto');
const zlib = require('zlib');
const { Worker } = require('worker_threads');

function inWorker(n) {
  return new Promise((resolve, reject) => {
    const w = new Worker(`
      const { parentPort, workerData } = require('worker_threads');
      const m = new Map();
      for (let i = 0; i < 50000; i++) m.set('k' + (i % 7000), 'v'.repeat(i % 50));
      let s = 0;
      for (const v of m.values()) s += v.length;
      parentPort.postMessage(s * workerData);
    `, { eval: true, workerData: n });
    w.on('message', resolve);
    w.on('error', reject);
  });
}

async function main() {
  const data = Buffer.from(Array.from({ length: 20000 }, (_, i) => `line ${i % 977}`).join('\n'));
  const packed = await new Promise((ok, no) => zlib.gzip(data, (e, b) => (e ? no(e) : ok(b))));
  const back = zlib.gunzipSync(packed);
  const key = await new Promise((ok, no) =>
    crypto.pbkdf2('secret', 'salt', 2000, 32, 'sha256', (e, k) => (e ? no(e) : ok(k))));
  const workers = await Promise.all([1, 2, 3].map(inWorker));
  const objs = [];
  for (let i = 0; i < 200000; i++) objs.push({ i, s: String(i) });
  const json = JSON.stringify(objs.filter((o) => o.i % 1000 === 0));
  console.log('round trip', back.equals(data), data.length);
  console.log('sha256', crypto.createHash('sha256').update(back).digest('hex'));
  console.log('pbkdf2', key.toString('hex'));
  console.log('workers', workers.join(' '));
  console.log('json', json.length, crypto.createHash('md5').update(json).digest('hex'));
}

main().catch((e) => { console.error(e); process.exit(1); });
"#;

fn write_node_script(dir: &Path) {
    std::fs::write(dir.join("script.js"), NODE_SCRIPT).unwrap();
}

/// A table filled, indexed, changed, queried and vacuumed; the database file is compared too.
const SQLITE_SCRIPT: &str = "
CREATE TABLE t(id INTEGER PRIMARY KEY, k TEXT, v INTEGER);
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 50000)
INSERT INTO t(k, v) SELECT 'key' || (i * 7919 % 5000), i * i % 1000 FROM n;
CREATE INDEX t_k ON t(k);
DELETE FROM t WHERE v % 11 = 0;
UPDATE t SET k = upper(k) WHERE id % 5 = 0;
SELECT count(*), sum(v), count(DISTINCT k) FROM t;
SELECT k, count(*), max(v) FROM t GROUP BY k ORDER BY count(*) DESC, k LIMIT 5;
SELECT group_concat(v, '') FROM (SELECT v FROM t ORDER BY k, id LIMIT 30);
VACUUM;
PRAGMA integrity_check;
";

fn sqlite_result(dir: &Path) -> String {
    file_digest(&dir.join("test.db"))
}

/// Digests, a cipher with a fixed key, and keys generated (random, so only their kind, their
/// check and a signature made and verified with them are printed), and a certificate.
const OPENSSL_SCRIPT: &str = r#"
set -e
seq 1 20000 > data.txt
openssl dgst -sha256 -r data.txt
openssl dgst -sha3-512 -r data.txt
K=000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f
IV=0f0e0d0c0b0a09080706050403020100
openssl enc -aes-256-cbc -K $K -iv $IV -in data.txt -out data.enc
openssl dgst -sha256 -r data.enc
openssl enc -d -aes-256-cbc -K $K -iv $IV -in data.enc | cmp - data.txt && echo decrypted
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out rsa.pem
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out ec.pem
openssl genpkey -algorithm ED25519 -out ed.pem
for k in rsa ec ed; do
    openssl pkey -in $k.pem -noout -text | head -1
    openssl pkey -in $k.pem -check -noout
    openssl pkey -in $k.pem -pubout -out $k.pub
    if [ $k = ed ]; then
        openssl pkeyutl -sign -inkey $k.pem -rawin -in data.txt -out $k.sig
        openssl pkeyutl -verify -pubin -inkey $k.pub -rawin -in data.txt -sigfile $k.sig
    else
        openssl dgst -sha256 -sign $k.pem -out $k.sig data.txt
        openssl dgst -sha256 -verify $k.pub -signature $k.sig data.txt
    fi
done
openssl req -new -x509 -key ec.pem -subj /CN=dmem-test -days 30 -out cert.pem
openssl x509 -in cert.pem -noout -subject
openssl verify -CAfile cert.pem cert.pem
"#;

/// Keys of three types generated with no passphrase: random, so what is printed is each key's
/// size, comment, type, file mode and format, that the public key derived again from the private
/// one matches, and a signature made and verified with one of them.
const SSH_KEYGEN_SCRIPT: &str = r#"
set -e
seq 1 5000 > data.txt
for t in ed25519 rsa ecdsa; do
    ssh-keygen -q -t $t -b $([ $t = rsa ] && echo 2048 || echo 256) -N '' -C dmem-test -f id_$t
    ssh-keygen -l -f id_$t.pub | awk '{print $1, $3, $4}'
    ssh-keygen -y -f id_$t | cut -d' ' -f1,2 | cmp - <(cut -d' ' -f1,2 id_$t.pub)
    echo "id_$t: mode $(stat -c %a id_$t), public key derived again from the private key matches"
    head -1 id_$t
done
ssh-keygen -Y sign -q -f id_ed25519 -n file data.txt
echo "dmem-test $(cut -d' ' -f1,2 id_ed25519.pub)" > allowed
ssh-keygen -Y verify -f allowed -I dmem-test -n file -s data.txt.sig < data.txt | sed 's/SHA256:.*/SHA256:.../'
"#;

fn write_json_input(dir: &Path) {
    let mut text = String::from("[");
    for i in 0..20_000 {
        if i > 0 {
            text.push(',');
        }
        write!(
            text,
            r#"{{"id":{i},"name":"n{}","tags":["t{}","t{}"],"score":{}}}"#,
            i % 300,
            i % 7,
            i % 11,
            (i * 37) % 101
        )
        .unwrap();
    }
    text.push(']');
    std::fs::write(dir.join("in.json"), text).unwrap();
}

fn write_vim_input(dir: &Path) {
    let text: String = (1..=3000).map(|i| format!("line {i}\n")).collect();
    std::fs::write(dir.join("edit.txt"), text).unwrap();
}

fn vim_result(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("edit.txt")).unwrap_or_else(|e| format!("edit.txt: {e}"))
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "ls",
            needs: &["ls"],
            args: &["-la", "/usr/lib"],
            setup: nothing,
            result: no_result,
            every_backend: true,
        },
        Case {
            name: "bash",
            needs: &["bash", "seq", "tr", "sort", "uniq", "head"],
            args: &["-c", BASH_SCRIPT],
            setup: nothing,
            result: no_result,
            every_backend: true,
        },
        Case {
            name: "python3",
            needs: &["python3"],
            args: &["-c", PYTHON_SCRIPT],
            setup: nothing,
            result: no_result,
            every_backend: true,
        },
        Case {
            name: "perl",
            needs: &["perl"],
            args: &["-e", PERL_SCRIPT],
            setup: nothing,
            result: no_result,
            every_backend: true,
        },
        Case {
            name: "sort",
            needs: &["sort"],
            // A small buffer makes sort spill to temporary files and merge them, with threads.
            args: &[
                "-S",
                "256K",
                "--parallel=2",
                "-T",
                ".",
                "-k2,2n",
                "-k1,1",
                "-k3,3r",
                "data.txt",
            ],
            setup: write_sort_input,
            result: no_result,
            every_backend: true,
        },
        Case {
            name: "gcc",
            needs: &["gcc"],
            args: &["-O2", "-Wall", "-o", "hello", "hello.c"],
            setup: write_hello,
            result: hello_result,
            every_backend: true,
        },
        Case {
            name: "g++-gold",
            needs: &["g++", "ld.gold"],
            args: &["-O2", "-fuse-ld=gold", "-o", "hello", "hello.cpp"],
            setup: write_hello_cpp,
            result: hello_result,
            every_backend: false,
        },
        Case {
            name: "java",
            needs: &["bash", "java", "javac"],
            args: &["-c", JAVA_SCRIPT],
            setup: write_main_java,
            result: no_result,
            every_backend: true,
        },
        Case {
            // rustc 1.90 and later link x86_64 Linux programs with their own rust-lld by default,
            // running `cc -B<sysroot>/lib/rustlib/<host>/bin/gcc-ld -fuse-ld=lld`. On stable,
            // `-C linker-flavor=gnu-lld-cc` and `-C link-self-contained=+linker` still need
            // `-Z unstable-options`, so the case passes those same two linker flags itself,
            // which makes older toolchains run rust-lld too; hello_result checks that lld wrote
            // the program.
            name: "rustc",
            needs: &["rustc", "cc"],
            args: &[
                "-O",
                "-C",
                "link-arg=-Bgcc-ld",
                "-C",
                "link-arg=-fuse-ld=lld",
                "-o",
                "hello",
                "hello.rs",
            ],
            setup: write_hello_rs,
            result: hello_result,
            every_backend: true,
        },
        Case {
            name: "node",
            needs: &["node"],
            args: &["script.js"],
            setup: write_node_script,
            result: no_result,
            every_backend: true,
        },
        Case {
            name: "sqlite3",
            needs: &["sqlite3"],
            args: &["test.db", SQLITE_SCRIPT],
            setup: nothing,
            result: sqlite_result,
            every_backend: false,
        },
        Case {
            name: "openssl",
            needs: &["bash", "openssl", "seq", "cmp", "head"],
            args: &["-c", OPENSSL_SCRIPT],
            setup: nothing,
            result: no_result,
            every_backend: false,
        },
        Case {
            name: "jq",
            needs: &["jq"],
            args: &[
                "-c",
                "group_by(.name) | map({name: .[0].name, n: length, total: (map(.score) | add), \
                 tags: (map(.tags[]) | unique)}) | sort_by(-.total, .name) | .[:20], \
                 ([.[] | select(.score > 90) | .name] | unique | join(\",\") | length)",
                "in.json",
            ],
            setup: write_json_input,
            result: no_result,
            every_backend: false,
        },
        Case {
            // -es: silent Ex mode, commands from -c; no vimrc, no viminfo, no swap file.
            name: "vim",
            needs: &["vim"],
            args: &[
                "-Nu",
                "NONE",
                "-i",
                "NONE",
                "-n",
                "-es",
                "-c",
                r"%s/\v(\d+)/<\1>/",
                "-c",
                "g/[05]>$/d",
                "-c",
                "sort! n",
                "-c",
                "$put =line('$')",
                "-c",
                "wq",
                "edit.txt",
            ],
            setup: write_vim_input,
            result: vim_result,
            every_backend: false,
        },
        Case {
            name: "ssh-keygen",
            needs: &["bash", "ssh-keygen", "seq", "cmp", "stat", "awk", "sed"],
            args: &["-c", SSH_KEYGEN_SCRIPT],
            setup: nothing,
            result: no_result,
            every_backend: false,
        },
        Case {
            name: "git",
            needs: &["bash", "git", "seq"],
            args: &["-c", GIT_SCRIPT],
            setup: nothing,
            result: no_result,
            every_backend: true,
        },
    ]
}

/// The program to run: Debian's python3 when there is one, whatever PATH finds otherwise.
fn find(tool: &str) -> Option<PathBuf> {
    let system = Path::new("/usr/bin").join(tool);
    if system.is_file() {
        return Some(system);
    }
    common::which(tool)
}

fn run_case(
    case: &Case,
    dir: &Path,
    preload: Option<(&str, Option<&Path>)>,
) -> (std::process::Output, String) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    (case.setup)(dir);
    let prog = find(case.needs[0]).unwrap();
    let mut cmd: Command = match preload {
        None => bare(&prog, case.args),
        Some((opts, backend)) => with_dmem(&prog, case.args, opts, backend),
    };
    cmd.current_dir(dir)
        .env("LC_ALL", "C")
        .env("TZ", "UTC")
        .env("PYTHONMALLOC", "malloc");
    let out = run_limited(&mut cmd, LIMIT);
    let result = (case.result)(dir);
    (out, result)
}

/// Runs every installed program bare and preloaded with `opts` over `backend` (over another
/// allocator than glibc's, only the cases marked for every backend).
fn compare_programs(tag: &str, opts: &str, backend: Option<&Path>) -> Vec<String> {
    let mut failures = Vec::new();
    for case in cases() {
        if backend.is_some() && !case.every_backend {
            continue;
        }
        if let Some(tool) = case.needs.iter().find(|t| find(t).is_none()) {
            common::missing(&format!("{tool}, which the {} case runs,", case.name));
            continue;
        }
        let dir = common::scratch_dir(&format!("programs_{tag}_{}", case.name));
        let (want, want_result) = run_case(&case, &dir, None);
        if !want.status.success() {
            failures.push(format!(
                "{}: fails without libdmem ({}): {}",
                case.name,
                status_text(&want.status),
                common::text(&want.stderr)
            ));
            continue;
        }
        let (got, got_result) = run_case(&case, &dir, Some((opts, backend)));
        if let Some(why) = mismatch(&want, &got) {
            failures.push(format!("{}: {why}", case.name));
        } else if got_result != want_result {
            failures.push(format!(
                "{}: left {got_result:?}, bare run left {want_result:?}",
                case.name
            ));
        }
    }
    failures
}

#[test]
fn programs_match_bare_run() {
    assert_none("programs", &compare_programs("default", "", None));
}

#[test]
fn programs_match_bare_run_while_tracing() {
    // Every call formats a trace line; /dev/null keeps the output out of the comparison.
    assert_none(
        "programs, tracing",
        &compare_programs("trace", "trace-file=/dev/null", None),
    );
}

#[test]
fn programs_match_bare_run_with_the_exit_report() {
    // The report goes to stderr, which the comparison leaves out; stdout and the exit status
    // must not change, whichever way each program ends.
    assert_none(
        "programs, leak-report",
        &compare_programs("report", "leak-report", None),
    );
}

fn over_backend(name: &str) {
    let Some(lib) = common::backend(name) else {
        return;
    };
    assert_none(
        &format!("programs over {name}"),
        &compare_programs(name, "", Some(&lib)),
    );
}

#[test]
fn programs_match_bare_run_over_jemalloc() {
    over_backend("jemalloc");
}

#[test]
fn programs_match_bare_run_over_tcmalloc() {
    over_backend("tcmalloc");
}

#[test]
fn programs_match_bare_run_over_mimalloc() {
    over_backend("mimalloc");
}
