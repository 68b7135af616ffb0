#!/usr/bin/env python3
"""Text to an llm.c token file that zinf trains on, with a Hugging Face tokenizer.

Reads UTF-8 text files and encodes them with the tokenizer a local Hugging Face
directory holds (its tokenizer.json, as `tokenizers` or transformers' save_pretrained
write it), offline, with the `tokenizers` package alone (no torch, no transformers).

The output is llm.c's token file (docs/formats.md, "Token files"): a header of 256
little-endian int32s, [0] magic, [1] version, [2] the token count, the rest 0, then the
ids, little-endian:
  u16: magic 20240520, version 1, uint16 ids (llm.c's GPT-2 files), data.format "tokens-u16"
  u32: magic 20240801, version 7, uint32 ids (llm.c's Llama 3 files), data.format "tokens-u32"
The default is u16 when every id of the vocabulary fits in 16 bits (largest id <= 65535),
else u32. An id that does not fit the chosen width is refused.

Each file is a document (or, with --line-docs, each non-empty line, its line break
dropped), encoded without the tokenizer's own special tokens (no BOS from its post-
processor); --prepend-bos / --append-eos put the BOS / EOS token around every document
(llm.c's own scripts put <|endoftext|> before each GPT-2 document and
<|begin_of_text|> before each Llama 3 one). The tokens are those of
Tokenizer.encode(document, add_special_tokens=False) on each document as a whole (so
the text of a special token in the input, "<|endoftext|>" say, becomes that token, as
there), but the text is read, encoded and written in chunks, so memory does not grow
with the corpus: a document is cut only between a line that ends in a non-space
character and "\\n" and a line that starts with a non-space character, where pre-
tokenizers such as GPT-2's and Llama 3's always split, and only if a probe at startup
shows that this tokenizer encodes such cut text as it encodes it whole (one that adds a
prefix space to every text does not; its documents are then encoded whole, and memory
grows with the largest document). The token count is written into the header at the
end; the file appears under its name only when complete.

Usage:
  python examples/tokenize_text.py --tokenizer DIR --out FILE.bin [--format u16|u32]
      [--append-eos] [--prepend-bos] [--eos-token TOK] [--bos-token TOK]
      [--line-docs] [--chunk-chars N] TEXT_FILE... ('-' reads standard input)

Example, then training on it (model.vocab_size at least the largest id + 1, which the
last line printed says):
  python examples/tokenize_text.py --tokenizer ~/models/gpt2 --out build/data/english.gpt2.bin \\
      --append-eos build/data/english.txt
  build/zinf train examples/gpt-bytes-zero3.json --set data.path=build/data/english.gpt2.bin \\
      --set data.format=tokens-u16 --set model.vocab_size=50257

Exit status: 0 done, 1 a failure while encoding or writing (the output is not left
behind), 2 a usage error (bad flags, a missing tokenizer directory or input file, an
unknown BOS/EOS token).
"""
import argparse
import json
import os
import struct
import sys
from array import array

# ---- llm.c's header ----
HEADER_INTS = 256
FORMATS = {  # width: (magic, version, array typecode, id limit, zinf data.format)
    "u16": (20240520, 1, "H", 0xFFFF, "tokens-u16"),
    "u32": (20240801, 7, "I", 0xFFFFFFFF, "tokens-u32"),
}
MAX_COUNT = 2**31 - 1  # the header's count is an int32

# Special tokens tried, in order, when tokenizer_config.json does not name them.
EOS_NAMES = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|eos|>", "[SEP]")
BOS_NAMES = ("<|begin_of_text|>", "<s>", "<bos>", "<|bos|>", "<|endoftext|>", "[CLS]")

# Text that crosses the kinds of line breaks a chunk may be cut at, for the probe.
PROBE = ("The quick brown fox, 12345 times.\nJumps over the lazy dog's back!\n\n\n"
         "  Indented\tline ending in spaces   \nword\r\nCRLF line\n\u00e9t\u00e9 na\u00efve "
         "\u4e2d\u6587\nend.\n(parenthesis)\n'quoted' end\n-dash\n42\n\n\nX\n")


class UsageError(Exception):
    pass


def die(msg, code):
    print(f"tokenize_text.py: {msg}", file=sys.stderr)
    sys.exit(code)


def load_tokenizer(path):
    from tokenizers import Tokenizer
    if not os.path.exists(path):
        raise UsageError(f"--tokenizer {path}: no such directory")
    file = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path
    if not os.path.isfile(file):
        raise UsageError(f"--tokenizer {path}: no tokenizer.json in it (save the tokenizer with "
                         "save_pretrained or Tokenizer.save)")
    try:
        tok = Tokenizer.from_file(file)
    except Exception as e:  # tokenizers raises a bare Exception on a bad file
        raise UsageError(f"{file}: not a tokenizer file tokenizers can load: {e}")
    config = {}
    cfg_file = os.path.join(os.path.dirname(file), "tokenizer_config.json")
    if os.path.isfile(cfg_file):
        try:
            with open(cfg_file, encoding="utf-8") as f:
                config = json.load(f)
        except (OSError, ValueError) as e:
            raise UsageError(f"{cfg_file}: {e}")
    return tok, config


def special_id(tok, config, given, key, names, flag):
    """The id of the BOS or EOS token: --bos-token/--eos-token, else tokenizer_config.json's
    bos_token/eos_token, else the first of the usual names the vocabulary holds."""
    if given is not None:
        candidates, source = [given], f"--{flag}"
    else:
        t = config.get(key)
        t = t.get("content") if isinstance(t, dict) else t
        candidates, source = ([t] if t else []) + list(names), "the tokenizer"
    for c in candidates:
        i = tok.token_to_id(c)
        if i is not None:
            return c, i
    if given is not None:
        raise UsageError(f"--{flag} {given!r}: not a token of this tokenizer")
    raise UsageError(f"{source} names no {key} (tokenizer_config.json has no {key}, and none of "
                     f"{', '.join(names)} is in the vocabulary); give it with --{flag}")


def can_cut(prev, line):
    """Whether a document may be cut between two lines: the first ends in a non-space
    character and one line feed, the second starts with a non-space character. There GPT-2's
    and Llama 3's pre-tokenizer patterns end a pre-token whether the text goes on or
    not; before a run of line breaks or spaces they do not (at the end of a text the
    run is one pre-token, inside it the run's last character goes with what follows)."""
    return len(prev) >= 2 and prev[-1] == "\n" and not prev[-2].isspace() and line != "" \
        and not line[0].isspace()


def cut_is_safe(tok):
    """Whether encoding PROBE in pieces cut wherever can_cut allows gives the ids of
    encoding it whole."""
    pieces, cur, prev = [], "", ""
    for line in PROBE.splitlines(keepends=True):
        if can_cut(prev, line):
            pieces.append(cur)
            cur = ""
        cur += line
        prev = line
    pieces.append(cur)
    assert len(pieces) > 4
    whole = tok.encode(PROBE, add_special_tokens=False).ids
    cut = [i for e in tok.encode_batch(pieces, add_special_tokens=False) for i in e.ids]
    return whole == cut


# ---- reading ----
def open_text(name):
    # newline="": line breaks (\n, \r\n, \r) reach the tokenizer as they are in the file.
    if name == "-":
        sys.stdin.reconfigure(encoding="utf-8", errors="strict", newline="")
        return sys.stdin
    return open(name, encoding="utf-8", errors="strict", newline="")


def documents(names, line_docs, chunk_chars):
    """Yields (text, source, first, last): the pieces of each document in order, first
    and last telling where a document begins and ends."""
    for name in names:
        src = "standard input" if name == "-" else name
        f = open_text(name)
        try:
            yield from read_document(f, src, line_docs, chunk_chars)
        except UnicodeDecodeError as e:
            raise RuntimeError(f"{src}: not UTF-8 text ({e.reason})")
        finally:
            if f is not sys.stdin:
                f.close()


def read_document(f, src, line_docs, chunk_chars):
    if line_docs:
        for line in f:
            line = line.rstrip("\r\n")
            if line:
                yield line, src, True, True
        return
    buf, n, first, prev = [], 0, True, ""
    for line in f:
        if n >= chunk_chars and can_cut(prev, line):
            yield "".join(buf), src, first, False
            buf, n, first = [], 0, False
        buf.append(line)
        n += len(line)
        prev = line
    if buf or not first:  # an empty file is no document
        yield "".join(buf), src, first, True


def batches(docs, batch_chars):
    batch, n = [], 0
    for d in docs:
        batch.append(d)
        n += len(d[0])
        if n >= batch_chars:
            yield batch
            batch, n = [], 0
    if batch:
        yield batch


# ---- writing ----
class TokenWriter:
    def __init__(self, f, fmt):
        self.f, self.fmt = f, fmt
        self.magic, self.version, self.code, self.limit, _ = FORMATS[fmt]
        self.count = 0
        self.swap = sys.byteorder == "big"
        if array(self.code).itemsize != {"H": 2, "I": 4}[self.code]:
            raise RuntimeError(f"array('{self.code}') is not {fmt} on this platform")
        f.write(bytes(4 * HEADER_INTS))  # the real header goes in at the end

    def write(self, ids, src, tok):
        if not ids:
            return
        top = max(ids)
        if top > self.limit:
            k = next(k for k, i in enumerate(ids) if i > self.limit)
            raise RuntimeError(
                f"{src}: token {self.count + k} of the output is id {ids[k]} ({tok.id_to_token(ids[k])!r}), "
                f"which does not fit --format {self.fmt} (largest id {self.limit}); use --format u32")
        if self.count + len(ids) > MAX_COUNT:
            raise RuntimeError(f"{src}: more than {MAX_COUNT} tokens, the most llm.c's header (an int32 "
                               "count) holds; tokenize the corpus into several files")
        a = array(self.code, ids)
        if self.swap:
            a.byteswap()
        self.f.write(a.tobytes())
        self.count += len(ids)

    def finish(self):
        header = [0] * HEADER_INTS
        header[0:3] = [self.magic, self.version, self.count]
        self.f.seek(0)
        self.f.write(struct.pack(f"<{HEADER_INTS}i", *header))


def main():
    p = argparse.ArgumentParser(
        prog="tokenize_text.py",
        description="Encode text files with a Hugging Face tokenizer into an llm.c token file "
        "(zinf's data.format tokens-u16 / tokens-u32).")
    p.add_argument("--tokenizer", required=True, metavar="DIR",
                   help="directory holding tokenizer.json (or the tokenizer.json itself)")
    p.add_argument("--out", required=True, metavar="FILE", help="the token file to write")
    p.add_argument("--format", choices=sorted(FORMATS),
                   help="id width: u16 (GPT-2 header) or u32 (Llama 3 header); default u16 when "
                   "the vocabulary's ids fit in 16 bits, else u32")
    p.add_argument("--append-eos", action="store_true", help="put the EOS token after every document")
    p.add_argument("--prepend-bos", action="store_true", help="put the BOS token before every document")
    p.add_argument("--eos-token", metavar="TOK", help="the EOS token (default: tokenizer_config.json's "
                   "eos_token, else <|endoftext|>, <|end_of_text|>, </s>, ... whichever exists)")
    p.add_argument("--bos-token", metavar="TOK", help="the BOS token (default: tokenizer_config.json's "
                   "bos_token, else <|begin_of_text|>, <s>, ... whichever exists)")
    p.add_argument("--line-docs", action="store_true",
                   help="each non-empty line is a document (its line break dropped); default: each file")
    p.add_argument("--chunk-chars", type=int, default=1 << 16, metavar="N",
                   help="encode documents in pieces of about N characters (default 65536)")
    p.add_argument("inputs", nargs="+", metavar="TEXT_FILE", help="UTF-8 text; - for standard input")
    args = p.parse_args()  # exits 2 on a usage error
    if args.chunk_chars < 1:
        p.error("--chunk-chars must be at least 1")
    if args.bos_token is not None and not args.prepend_bos:
        p.error("--bos-token needs --prepend-bos")
    if args.eos_token is not None and not args.append_eos:
        p.error("--eos-token needs --append-eos")

    try:
        import tokenizers  # noqa: F401
    except ImportError:
        die("the Python package `tokenizers` is not installed here (pip install tokenizers)", 1)
    try:
        for name in args.inputs:
            if name != "-" and not os.path.isfile(name):
                raise UsageError(f"{name}: no such file")
        if args.inputs.count("-") > 1:
            raise UsageError("standard input (-) given more than once")
        out_dir = os.path.dirname(os.path.abspath(args.out))
        if not os.path.isdir(out_dir):
            raise UsageError(f"--out {args.out}: no directory {out_dir}")
        tok, config = load_tokenizer(args.tokenizer)
        vocab = tok.get_vocab(with_added_tokens=True)
        top_id = max(vocab.values()) if vocab else 0
        fmt = args.format or ("u16" if top_id <= FORMATS["u16"][3] else "u32")
        bos = eos = None
        if args.prepend_bos:
            bos = special_id(tok, config, args.bos_token, "bos_token", BOS_NAMES, "bos-token")
        if args.append_eos:
            eos = special_id(tok, config, args.eos_token, "eos_token", EOS_NAMES, "eos-token")
    except UsageError as e:
        die(e, 2)

    if fmt == "u16" and top_id > FORMATS["u16"][3]:
        print(f"tokenize_text.py: warning: the vocabulary's largest id, {top_id}, does not fit u16; an id "
              "past 65535 in the text will stop the run", file=sys.stderr)
    chunk = args.chunk_chars
    if not args.line_docs and not cut_is_safe(tok):
        chunk = float("inf")
        print("tokenize_text.py: this tokenizer encodes text cut at line breaks differently from the whole "
              "text; each document is encoded whole (memory grows with the largest document)",
              file=sys.stderr)
    # Pieces go to encode_batch together (it encodes in parallel); a batch of text and
    # its encodings are in memory at a time, some 200 bytes per character at the peak.
    batch_chars = args.chunk_chars * min(os.cpu_count() or 1, 8)
    encode = getattr(tok, "encode_batch_fast", tok.encode_batch)  # fast: no offsets

    tmp = f"{args.out}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            w = TokenWriter(f, fmt)
            for batch in batches(documents(args.inputs, args.line_docs, chunk), batch_chars):
                encs = encode([d[0] for d in batch], add_special_tokens=False)
                for (_, src, first, last), e in zip(batch, encs):
                    ids = e.ids
                    if first and bos:
                        ids = [bos[1]] + ids
                    if last and eos:
                        ids = ids + [eos[1]]
                    w.write(ids, src, tok)
            w.finish()
        os.replace(tmp, args.out)
    except (OSError, RuntimeError) as e:
        die(e, 1)
    finally:  # a failed or interrupted run leaves nothing behind
        if os.path.exists(tmp):
            os.unlink(tmp)

    print(f"wrote {w.count} tokens to {args.out} (data.format \"{FORMATS[fmt][4]}\", llm.c's "
          f"{'GPT-2' if fmt == 'u16' else 'Llama 3'} header); vocabulary {len(vocab)} tokens, largest id "
          f"{top_id}: model.vocab_size at least {top_id + 1}")


if __name__ == "__main__":
    main()
