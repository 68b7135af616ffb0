#!/usr/bin/env bash
# examples/corpus.sh — get a small real English corpus for byte-level training.
#
#   examples/corpus.sh [OUT]          (OUT defaults to build/data/english.txt)
#
# The corpus is Jane Austen's six completed novels (Sense and Sensibility, Pride
# and Prejudice, Mansfield Park, Emma, Northanger Abbey, Persuasion): about 4.0 MB
# of English prose, almost all ASCII (one '£'), lines wrapped at 76 characters or
# fewer. The texts are in the public domain (they come from Project Gutenberg,
# already stripped of its header and licence boilerplate by the packager); the
# package that carries them is MIT-licensed (janeaustenr, Julia Silge).
#
# Where it comes from: the Debian package r-cran-janeaustenr (in Debian main),
# fetched with `apt-get download` (no install, nothing changes on the system), so
# it needs only Debian's archive. The package stores the novels as R objects in a
# "lazy-load database" (data/Rdata.rdb): a series of compressed blobs, one per
# novel, each an R-serialized character vector with one element per line. The
# small Python decoder below reads exactly that (and fails loudly on anything
# else); no R is needed. Nothing is added or reworded: the output is the
# novels' lines joined with '\n', in the package's order (emma, mansfieldpark,
# northangerabbey, persuasion, prideprejudice, sensesensibility), with three
# blank lines between novels.
#
# Needs: apt-get and dpkg-deb (any Debian/Ubuntu), python3 (standard library
# only). As root it runs `apt-get update` first when the package index is missing
# or stale; as another user it asks for that instead.
#
# Idempotent: when OUT already exists and is not empty it is kept as it is. The
# file is written to a temporary name beside OUT and renamed into place, so OUT
# is either absent or complete. Progress and errors go to stderr; the only line on
# stdout is the last one, "OUT: N bytes".
set -euo pipefail

out=${1:-build/data/english.txt}
pkg=r-cran-janeaustenr

die() { echo "corpus.sh: $*" >&2; exit 1; }

# Already there (a previous run): nothing to fetch.
if [[ -s $out ]]; then
  echo "$out: $(wc -c < "$out") bytes"
  exit 0
fi

for tool in apt-get dpkg-deb; do
  command -v "$tool" > /dev/null || die "needs $tool (a Debian or Ubuntu system)"
done
command -v python3 > /dev/null ||
  die "needs python3; run: apt-get install -y python3"

mkdir -p "$(dirname "$out")"
tmp=$(mktemp -d)
part=""
trap 'rm -rf "$tmp"; [[ -z $part ]] || rm -f "$part"' EXIT

# apt (as root) downloads as the unprivileged user _apt; let it reach and write
# the download folder, or it warns and downloads as root.
mkdir "$tmp/deb"
if [[ $EUID -eq 0 ]] && id -u _apt > /dev/null 2>&1; then
  chmod 755 "$tmp"
  chown _apt "$tmp/deb"
fi

# Download the .deb into $tmp/deb. With no package index yet (a fresh machine)
# or a stale one (the file has left the mirror), refresh the index and try again.
fetch() { (cd "$tmp/deb" && apt-get -qq download "$pkg" > /dev/null); }
if ! fetch 2> /dev/null; then
  if [[ $EUID -eq 0 ]]; then
    echo "corpus.sh: apt-get update (package index missing or stale)" >&2
    apt-get -qq update > /dev/null
    fetch || die "apt-get download $pkg failed"
  else
    die "apt-get download $pkg failed; run 'sudo apt-get update' and retry"
  fi
fi
debs=("$tmp"/deb/*.deb)
[[ -f ${debs[0]} ]] || die "apt-get download $pkg left no .deb"

# Unpack the package (1.6 MB) into $tmp/x; only data/Rdata.rdb is used.
dpkg-deb -x "${debs[0]}" "$tmp/x"
rdb=$tmp/x/usr/lib/R/site-library/janeaustenr/data/Rdata.rdb
[[ -f $rdb ]] || die "$pkg has no data/Rdata.rdb (package layout changed?)"

part=$(mktemp "$out.part.XXXXXX")

# Decode the R lazy-load database. Each blob is: a 4-byte big-endian length of
# the uncompressed data, then either a zlib stream (R's default) or a type byte
# ('Z' zlib, '2' bzip2, 'X' xz, '0' stored) and the data. The uncompressed data
# is R's XDR serialization ("X\n", versions, [native encoding]) of one character
# vector (STRSXP, type 16) whose elements are CHARSXPs (type 9): flags, length
# (-1 for NA), bytes.
python3 - "$rdb" "$part" << 'PY'
import bz2, lzma, struct, sys, zlib

data = open(sys.argv[1], "rb").read()

def fail(msg):
    sys.exit("corpus.sh: Rdata.rdb: " + msg)

def blobs(data):
    pos = 0
    while pos < len(data):
        if len(data) - pos < 5:
            fail("truncated blob at byte %d" % pos)
        size = struct.unpack(">I", data[pos:pos + 4])[0]
        kind = data[pos + 4:pos + 5]
        if kind == b"0":                       # stored
            out, pos = data[pos + 5:pos + 5 + size], pos + 5 + size
        else:
            if kind in (b"Z", b"2", b"X"):
                start = pos + 5
                d = {b"Z": zlib.decompressobj, b"2": bz2.BZ2Decompressor,
                     b"X": lzma.LZMADecompressor}[kind]()
            else:                               # plain zlib stream
                start = pos + 4
                d = zlib.decompressobj()
            out = d.decompress(data[start:])
            pos = len(data) - len(d.unused_data)
        if len(out) != size:
            fail("blob size %d, expected %d" % (len(out), size))
        yield out

def strings(obj):
    if obj[:2] != b"X\n":
        fail("not R XDR serialization")
    version = struct.unpack(">i", obj[2:6])[0]
    p = 14
    if version == 3:                            # native encoding name follows
        p += 4 + struct.unpack(">i", obj[p:p + 4])[0]
    flags, n = struct.unpack(">Ii", obj[p:p + 8])
    p += 8
    if flags & 0xFF != 16 or flags & 0x200:    # STRSXP without attributes
        fail("object is not a plain character vector (flags %#x)" % flags)
    lines = []
    for _ in range(n):
        f, k = struct.unpack(">Ii", obj[p:p + 8])
        p += 8
        if f & 0xFF != 9:
            fail("element is not a string (flags %#x)" % f)
        if k < 0:                              # NA: keep the line, empty
            lines.append("")
            continue
        lines.append(obj[p:p + k].decode("utf-8"))
        p += k
    if p != len(obj):
        fail("%d trailing bytes after the character vector" % (len(obj) - p))
    return lines

books = [strings(b) for b in blobs(data)]
if not books:
    fail("no novels found")
text = "\n\n\n\n".join("\n".join(line.rstrip() for line in b).strip("\n")
                       for b in books) + "\n"
with open(sys.argv[2], "w", encoding="utf-8", newline="\n") as f:
    f.write(text)
PY

# Guard against a silently different package: the six novels are about 4.0 MB.
n=$(wc -c < "$part")
(( n > 3000000 && n < 6000000 )) || die "decoded $n bytes, expected about 4.0 MB"

chmod 644 "$part"
mv -f "$part" "$out"
part=""
echo "$out: $n bytes"
